"""The ``hierdp`` command line.

::

    hierdp release SPEC [-o OUT|-] [--format F] [--ledger PATH] [--seed N] [-q] [--debug]
                                                              run a release spec
    hierdp release SPEC -o DIR/ [--resume] [--seed N] [-q]    out of core, into a Parquet dataset
    hierdp validate SPEC [-q] [--debug]                       check a spec, read no private data
    hierdp evaluate SPEC [-o OUT] [-r R] [--seed N] [-q]      NON-PRIVATE error table + PNG plot
    hierdp report LEDGER [-o OUT.html|OUT.yaml] [-q]          the release report of a saved ledger
    hierdp examples                                           the bundled example specs
    hierdp plugins [--kind KIND]                              everything registered, and its package
    hierdp schema                                             print the spec's JSON Schema

SPEC is a YAML file, or the name of a bundled example (``hierdp release demo``; ``hierdp
examples`` lists them) when no file of that name exists.

Exit codes
----------
0  success.
1  internal error: a bug in hierdp or a plugin (one line; ``--debug`` shows the traceback).
2  user error: invalid spec, command line, data, budget or plugin name, or a file that
   cannot be read or written — one line per problem naming where it is and how to fix it,
   no traceback (``--debug`` shows it), and no output file is created.
130 interrupted (Ctrl-C); no partial output is left behind. One line on stderr, no
   traceback, from hierdp's first line on: while the command starts (imports, arguments)
   it exits at once; while it works, after its clean-up; once its work is done, a Ctrl-C
   is ignored. Before hierdp's first line runs, the interrupt reaches the interpreter's
   own start-up (``site``: tens of milliseconds), which hierdp cannot answer.
141 standard output closed early by its reader (e.g. ``| head``); nothing is reported.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

__all__ = ["main", "EXIT_OK", "EXIT_INTERNAL", "EXIT_USER", "EXIT_INTERRUPTED"]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # as a shell reports a process killed by SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line error format of the other commands (exit code 2)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}; see `{self.prog} --help`\n")
        raise SystemExit(EXIT_USER)


def _parser() -> argparse.ArgumentParser:
    from hierdp._version import __version__

    p = _Parser(prog="hierdp", description="Differentially private release of hierarchical counts.",
                epilog="Exit codes: 0 ok, 1 internal error, 2 user error (bad spec/data/arguments), "
                       "130 interrupted.")
    p.add_argument("--version", action="version", version=f"hierdp {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
        sp.add_argument("--debug", action="store_true", help="show tracebacks of errors")

    def threads_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--threads", type=_threads_count, metavar="N",
                        help="threads for the noise and the tree passes (default: $HIERDP_THREADS, else the "
                             "cores available; the output does not depend on it)")

    spec_help = "YAML release spec, or the name of a bundled example (see `hierdp examples`)"
    from hierdp.io import TABLE_FORMATS

    inside = [f for f in TABLE_FORMATS.values() if f.ledger_inside]
    outside = [f for f in TABLE_FORMATS.values() if not f.ledger_inside]
    r = sub.add_parser(
        "release", help="run a release spec and write its output and ledger",
        description="Run a release spec: the table goes to OUT and its privacy ledger beside it "
                    "(<name>.ledger.json) or to --ledger PATH. "
                    f"{_listed([f.title for f in inside])} tables also carry the ledger inside "
                    f"({'; '.join(str(f.ledger_where) for f in inside)}). With -o - the table goes to standard "
                    f"output: {_listed([f.name for f in outside])} then needs --ledger PATH "
                    f"({_listed([f'a {f.title}' for f in outside])} cannot carry its ledger); "
                    f"{_listed([f.name for f in inside])} embed it. OUT may be a URL such as s3://bucket/x.csv "
                    "(needs `pip install 'hierdp[remote]'` and the file system's package, e.g. s3fs). "
                    "With -o DIR/ (a folder: a trailing /) or a spec with execution:, the release runs by subtree "
                    "out of core into a Parquet dataset DIR/ (part-NNNNN.parquet, _ledger.json, _SUCCESS last), "
                    "its resumable state in execution.workdir (default DIR.work/, as sensitive as the data until "
                    "the release completes; outside DIR/); after an interruption the same command with --resume "
                    "continues it. "
                    "DIR/ holds exactly one release: a folder holding another release's parts is refused before "
                    "anything is charged; delete it to replace that release.")
    r.add_argument("spec", metavar="SPEC", help=spec_help)
    r.add_argument("-o", "--output", metavar="OUT",
                   help=f"output file ({', '.join(f.extensions[0] for f in TABLE_FORMATS.values())}), URL, "
                        "or - for standard output; overrides output.path")
    r.add_argument("--format", choices=list(TABLE_FORMATS),
                   help="table format (default: from OUT's extension; csv for -)")
    r.add_argument("--ledger", metavar="PATH", help="ledger file (default: <OUT name>.ledger.json beside OUT)")
    r.add_argument("--seed", type=int, metavar="N",
                   help="fixed seed for tests: the ledger marks the release NOT FOR PUBLICATION")
    r.add_argument("--resume", action="store_true",
                   help="continue the interrupted dataset release (-o DIR/) from its work folder")
    threads_arg(r)
    common(r)

    v = sub.add_parser("validate", help="check a spec without reading private data")
    v.add_argument("spec", metavar="SPEC", help=spec_help)
    common(v)

    rp = sub.add_parser(
        "report", help="write the release report (HTML page or registry YAML) of a saved ledger",
        description="Write the report of a release from its saved ledger (LEDGER.json, written beside every "
                    "release): the guarantee, invariants, structure provenance, budget per level as recorded and as "
                    "exact rationals, mechanism and seed status, expected accuracy per level from the public noise "
                    "law. OUT ending in .html gives one self-contained page, .yaml the OpenDP deployments-registry "
                    "record. What only the release holds (per-query budgets, released-value accuracy, decomposition "
                    "map, spec hashes) needs result.report(...) or output.report in the spec.")
    rp.add_argument("ledger", metavar="LEDGER", help="a ledger file (.ledger.json, or YAML)")
    rp.add_argument("-o", "--output", metavar="OUT",
                    help="report file (.html or .yaml; default: <LEDGER name>.report.html beside it)")
    rp.add_argument("--title", help="the report's title (default: 'hierdp release <release id>')")
    rp.add_argument("--publisher", metavar="NAME", help="who publishes the release (the registry's curator)")
    rp.add_argument("--intended-use", metavar="TEXT", help="what the release is for")
    rp.add_argument("--region", help="where the data come from (e.g. a country)")
    rp.add_argument("--author", action="append", metavar="NAME", help="an author (repeat for several)")
    common(rp)

    x = sub.add_parser("examples", help="list the bundled example specs (run one: hierdp release NAME)")
    common(x)

    e = sub.add_parser("evaluate", help="NON-PRIVATE: run the spec's evaluate section (table + PNG plot)")
    e.add_argument("spec", metavar="SPEC", help=spec_help)
    e.add_argument("-o", "--output", metavar="OUT", help="table (.csv); the plot goes beside it as .png")
    e.add_argument("-r", "--repetitions", type=int, metavar="R", help="overrides evaluate.repetitions")
    e.add_argument("--seed", type=int, metavar="N", help="fixed seed (reproducible evaluation)")
    threads_arg(e)
    common(e)

    pl = sub.add_parser("plugins", help="list registered mechanisms, post-processors, metrics, budgets")
    pl.add_argument("--kind", choices=["mechanism", "postprocessor", "metric", "budget", "plan", "decomposition"],
                    help="only this kind")
    common(pl)

    s = sub.add_parser("schema", help="print the JSON Schema of release specs")
    common(s)

    c = sub.add_parser(
        "compile", help="compile the kernels small releases use into the cache, once (~1 min of CPU)",
        description="Compile into hierdp's kernel cache (~/.cache/hierdp, or $HIERDP_CACHE_DIR) the kernel "
                    "versions that releases of small trees (up to 16,384 node-cells) take. A process's first "
                    "small release runs numpy passes and compiles nothing; its later releases from the secure key "
                    "run these compiled kernels when the cache holds them (the first large release also fills "
                    "it). Reads no data.")
    common(c)
    return p


def _print_traceback(err: TextIO) -> None:
    import traceback  # only under --debug: the command starts faster without it

    traceback.print_exc(file=err)


def _on_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal: progress bars only there (redrawn in place; in a log
    file their carriage returns and repeated lines are noise)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _listed(items: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(items) if len(items) < 3 else f"{', '.join(items[:-1])} and {items[-1]}"


def _print_warnings(msgs: Sequence[str], quiet: bool, err: TextIO) -> None:
    if not quiet:
        for m in msgs:
            err.write(f"warning: {m}\n")


def _spec_arg(arg: str) -> str:
    """A SPEC argument: an existing file, else a bundled example's path; a bare name that
    is neither is a one-line error listing the examples."""
    from hierdp.data import example_names, resolve_spec
    from hierdp.errors import SpecError, did_you_mean

    resolved = resolve_spec(arg)
    if resolved == arg and not Path(arg).exists() and not any(ch in arg for ch in "/\\.") and arg:
        names = example_names()
        raise SpecError(f"{arg!r} is neither a spec file nor a bundled example{did_you_mean(arg, names)} "
                        f"(examples: {', '.join(names)}); give the path of a .yaml file, or an example's name")
    return resolved


@contextmanager
def _compile_notice(quiet: bool, err: TextIO) -> Iterator[None]:
    """While open, the line hierdp logs before it first compiles a kernel (a cold cache and a
    tree too large to run interpreted; :func:`hierdp._kernels.jit.compile_notice`) goes to
    ``err``, once, or nowhere under ``-q``."""
    import logging

    from hierdp._kernels.jit import compile_logger

    handler: logging.Handler = logging.NullHandler() if quiet else logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(message)s"))
    propagate = compile_logger.propagate
    compile_logger.addHandler(handler)
    compile_logger.propagate = False  # said here, not again by the root logger's handlers
    try:
        yield
    finally:
        compile_logger.removeHandler(handler)
        compile_logger.propagate = propagate


def _cmd_release(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp import io as hio
    from hierdp.errors import SpecError
    from hierdp.report import render as render_report
    from hierdp.spec import runner

    spec_path = _spec_arg(args.spec)
    spec = runner.load_spec(spec_path, **({"seed": args.seed} if args.seed is not None else {}))
    _print_warnings(spec.warnings, args.quiet, err)
    spec_out = spec.output or {}
    dest = args.output if args.output is not None else spec_out.get("path")
    if dest is None:
        raise SpecError(f"{args.spec}: no output path; set output.path in the spec or pass -o OUT")
    if spec.execution is not None or str(dest).endswith(("/", os.sep)):
        return _release_dataset(args, spec, str(dest), out, err)
    if args.resume:
        raise SpecError("--resume continues a dataset release: give its folder, -o DIR/ (a trailing /), or add "
                        "execution: to the spec")
    to_stdout = dest == "-"
    ledger = args.ledger if args.ledger is not None else (spec_out.get("ledger") if args.output is None else None)
    for target in (dest, ledger):
        if target is not None and "\x00" in str(target):
            raise SpecError(f"the output path {str(target)!r} holds a NUL character, which no file name can")
    report = spec_out.get("report")  # written with the table whatever -o says (a local file)
    local = [Path(p) for p in (dest, ledger, report) if p not in (None, "-") and not hio.is_url(p)]
    if not to_stdout and not hio.is_url(dest) and ledger is None:
        local.append(hio.ledger_path_for(dest))
    runner.check_output_paths(spec, local)  # never replace the spec's own inputs, never write inside a file
    fmt = args.format or (spec_out.get("format") if args.output is None else None)
    fmt = fmt or ("csv" if to_stdout else hio.format_for(dest))
    # every check that can fail runs before the release spends its budget
    entry = hio.require_format(fmt)  # a known format whose optional package is installed
    if to_stdout and not entry.ledger_inside and ledger is None:
        carriers = [f.name for f in hio.TABLE_FORMATS.values() if f.ledger_inside]
        raise SpecError(f"-o - with --format {fmt} writes no ledger: pass --ledger PATH, or use --format "
                        f"{' or '.join(carriers)} (they carry the ledger inside)")
    for target in (dest, ledger):
        if target is not None and hio.is_url(target):
            _refuse_ephemeral(target)
            hio.check_url(target)
        elif target not in (None, "-") and ":" in Path(target).parts[0] and os.name != "nt":
            raise SpecError(f"{target!r} looks like a URL but is not one; write scheme://bucket/key "
                            f"(e.g. s3://...), or ./{target} for a local folder")
    if ledger == "-":
        raise SpecError("--ledger - is not supported; give the ledger a file (the table may go to -o -)")
    with _compile_notice(args.quiet, err):
        result = runner.run_spec(spec, write=False, progress=not args.quiet and _on_terminal(err))
    table = runner.release_frame(spec, result)
    ledger_json = result.ledger.to_json()
    if to_stdout:
        # the ledger is staged and synced first but lands only once the table is delivered: a table
        # that cannot be written (a closed pipe, a full disk) leaves no ledger of a release never seen
        with contextlib.ExitStack() as staged:
            if ledger is not None and not hio.is_url(ledger):
                staged.enter_context(hio.atomic_path(ledger)).write_text(ledger_json, encoding="utf-8")
            if report is not None:
                staged.enter_context(hio.atomic_path(report)).write_text(
                    render_report(report, result.ledger, result), encoding="utf-8")
            hio.write_release_to_stream(table, ledger_json, _binary(out), fmt)
        if ledger is not None and hio.is_url(ledger):
            _write_remote_text(ledger, ledger_json)
        written = ["<stdout>", ledger or "(inside the table)"] + ([report] if report is not None else [])
        note = err  # stdout carries the table: the summary goes to stderr
    else:
        written = [str(p) for p in runner.write_release_files(table, result, dest, fmt=fmt, ledger_path=ledger,
                                                              report_path=report)]
        note = out
    result.meta["written"] = written
    if not args.quiet:
        note.write(f"wrote {written[0]} ({result.tree.n_nodes:,} nodes) and its ledger {written[1]}"
                   + (f" and its report {written[2]}" if len(written) > 2 else "") + "\n")
        note.write(str(result.ledger) + "\n")
    return EXIT_OK


def _release_dataset(args: argparse.Namespace, spec: Any, dest: str, out: TextIO, err: TextIO) -> int:
    """``hierdp release SPEC -o DIR/ [--resume]``: the out-of-core release into a dataset."""
    from hierdp import io as hio
    from hierdp.errors import SpecError
    from hierdp.spec import runner

    if hio.is_url(dest) or dest == "-":
        raise SpecError(f"a dataset release writes a local folder, not {dest!r}; give -o DIR/")
    if args.format not in (None, "parquet") or args.ledger is not None:
        raise SpecError("a dataset release writes Parquet parts with the ledger inside and DIR/_ledger.json; "
                        "leave out --format and --ledger")
    folder = Path(dest.rstrip("/" + os.sep) or dest)
    runner.check_output_paths(spec, [folder])
    workdir = runner.dataset_workdir(spec, folder)

    def interrupted() -> str:  # what Ctrl-C leaves: the parts so far, and whether --resume continues
        from hierdp.outofcore import describe_unfinished

        return describe_unfinished(folder, workdir)

    args.interrupted = interrupted
    with _compile_notice(args.quiet, err):
        ledger = runner.release_dataset_spec(spec, folder, resume=args.resume, progress=not args.quiet, stream=err)
    if not args.quiet:
        out.write(f"wrote the dataset {folder}/ and its ledger {folder / '_ledger.json'}\n")
        out.write(str(ledger) + "\n")
    return EXIT_OK


#: fsspec protocols whose files live only inside this process: gone when the command ends
_EPHEMERAL = ("memory",)


def _refuse_ephemeral(url: str) -> None:
    """A ``memory://`` destination would exit 0 having written nothing that survives."""
    from hierdp.errors import SpecError

    protocol = url.split("://", 1)[0].lower()
    ephemeral = protocol in _EPHEMERAL
    try:
        import fsspec
        from fsspec.implementations.memory import MemoryFileSystem

        ephemeral = ephemeral or issubclass(fsspec.get_filesystem_class(protocol), MemoryFileSystem)
    except (ImportError, ValueError):
        pass
    if ephemeral:
        raise SpecError(f"cannot write {url!r}: {protocol}:// keeps files inside this process only, and they are gone "
                        "when the command ends; write to a local path or a lasting store (s3://, gs://, ...)")


def _binary(stream: TextIO):
    """The byte stream under a text stream (sys.stdout.buffer), for Parquet and exact bytes."""
    stream.flush()
    return getattr(stream, "buffer", None) or _TextBytes(stream)


class _TextBytes:
    """Bytes written to a text stream without a buffer (e.g. io.StringIO in tests): decoded."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        self.stream.write(data.decode("utf-8", errors="surrogateescape"))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()


def _write_remote_text(url: str, text: str) -> None:
    from hierdp.io import _fsspec

    with _fsspec().open(url, "wb") as fh:
        fh.write(text.encode("utf-8"))


def _report_path_for(ledger: str) -> Path:
    """``out/x.ledger.json`` -> ``out/x.report.html``."""
    p = Path(ledger)
    name = p.name
    for ext in (".ledger.json", ".json", ".yaml", ".yml"):
        if name.lower().endswith(ext):
            return p.with_name(name[: -len(ext)] + ".report.html")
    return p.with_name(name + ".report.html")


def _cmd_report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.errors import SpecError
    from hierdp.report import read_ledger, report_kind, write_report

    dest = Path(args.output) if args.output is not None else _report_path_for(args.ledger)
    if args.output == "-" or "://" in str(dest):
        raise SpecError(f"hierdp report writes a local file; {str(args.output)!r} is not a local file path")
    report_kind(dest)  # a known ending, before anything is read
    if Path(args.ledger).exists() and dest.resolve() == Path(args.ledger).resolve():
        raise SpecError(f"the report {str(dest)!r} is the ledger itself; writing it would replace the ledger; "
                        "choose another output path")
    ledger = read_ledger(args.ledger)
    written = write_report(dest, ledger, title=args.title, curator=args.publisher, intended_use=args.intended_use,
                           region=args.region, authors=args.author)
    if not args.quiet:
        flag = "" if ledger.for_publication else " (NOT FOR PUBLICATION: " + \
            "; ".join(ledger.not_for_publication_reasons()) + ")"
        out.write(f"wrote {written}{flag}\n")
    return EXIT_OK


def _cmd_examples(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.data import example_description, example_names, example_path

    names = example_names()
    width = max([len(n) for n in names] + [4])
    for n in names:
        out.write(f"{n:<{width}}  {example_description(n)}\n")
    if not args.quiet and names:
        out.write("\nrun one with: hierdp release NAME "
                  f"(e.g. hierdp release {names[0] if 'demo' not in names else 'demo'})"
                  f"; the files are in {example_path(names[0]).parent}\n")
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.spec.validate import validate

    spec = validate(_spec_arg(args.spec))
    _print_warnings(spec.warnings, args.quiet, err)
    if not args.quiet:
        unit = "ρ" if spec.rho is not None else "ε"
        levels = " > ".join(spec.level_names)
        if spec.decomposition is not None:  # points on a private decomposition
            levels = f"{spec.decomposition[0]} on {', '.join(spec.decomposition_columns)}"
        how = f"plan {spec.plan[0]}" if spec.plan is not None else f"mechanism {spec.mechanism[0]}"
        if spec.delta is not None and spec.rho is None:
            unit = "(ε, δ)"
        total = f"({spec.epsilon:g}, {spec.delta:g})" if unit == "(ε, δ)" else f"{spec.total:g}"
        if spec.cells:  # histogram cells per node, and how many
            sizes = [len(c.domain[1]) for c in spec.cells if c.domain[0] == "list"]
            k = f" = {math.prod(sizes)} cells" if len(sizes) == len(spec.cells) else ""
            levels += " with cells " + " x ".join(c.name for c in spec.cells) + k
        if spec.engine != "pandas":
            levels += f"; engine {spec.engine}"
        out.write(f"{args.spec}: valid ({levels}; {unit} = {total}; {how}; "
                  f"post-processing {' -> '.join(n for n, _ in spec.postprocess) or 'none'})\n")
    return EXIT_OK


def _cmd_evaluate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.errors import NonPrivateWarning
    from hierdp.spec.runner import evaluate_spec, load_spec

    spec = load_spec(_spec_arg(args.spec))
    _print_warnings(spec.warnings, args.quiet, err)
    if args.repetitions is not None and args.repetitions < 1:
        from hierdp.errors import SpecError

        raise SpecError(f"--repetitions must be >= 1, got {args.repetitions}")
    if args.output is None and (spec.evaluate or {}).get("output") is None:
        from hierdp.errors import SpecError

        raise SpecError(f"{args.spec}: no evaluation output; set evaluate.output in the spec or pass -o OUT")
    target = args.output if args.output is not None else (spec.evaluate or {}).get("output")
    if target == "-" or "://" in str(target) or ":" in Path(str(target)).parts[0]:
        from hierdp.errors import SpecError

        raise SpecError(f"evaluate writes a local table and plot; {target!r} is not a local file path")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateWarning)
        table = evaluate_spec(spec, repetitions=args.repetitions, seed=args.seed, output=args.output,
                              progress=not args.quiet and _on_terminal(err))
    if not args.quiet:
        err.write("warning: evaluation reads the TRUE counts; its results are not private, do not publish them\n")
        out.write(table.to_string(index=False) + "\n")
        out.write(f"wrote {' and '.join(table.attrs.get('written', []))}\n")
    return EXIT_OK


def _cmd_plugins(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.registry import get_registry

    rows = [r for r in get_registry().table() if args.kind is None or r["kind"] == args.kind]
    head = {"kind": "KIND", "name": "NAME", "provider": "PACKAGE", "summary": "SUMMARY"}
    for r in rows:
        r["provider"] = _package_of(r["provider"])
    widths = {k: max([len(head[k])] + [len(r[k]) for r in rows]) for k in ("kind", "name", "provider")}
    for r in [head, *rows]:
        out.write(f"{r['kind']:<{widths['kind']}}  {r['name']:<{widths['name']}}  "
                  f"{r['provider']:<{widths['provider']}}  {r['summary']}\n".rstrip() + "\n")
    return EXIT_OK


def _package_of(provider: str) -> str:
    """The distribution a plugin came from: 'hierdp' for built-ins, else the entry point's package."""
    if provider.startswith("hierdp.") or provider == "hierdp":
        return "hierdp (built-in)"
    try:
        from importlib.metadata import entry_points

        for ep in entry_points(group="hierdp"):
            if ep.name == provider and ep.dist is not None:
                return f"{ep.dist.name} {ep.dist.version}"
    except Exception:  # metadata problems must not break the listing
        pass
    return provider


def _cmd_schema(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.spec.schema import schema_text

    out.write(schema_text())
    if not schema_text().endswith("\n"):
        out.write("\n")
    return EXIT_OK


def _cmd_compile(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.precompile import compile_kernels

    if not args.quiet:
        err.write("compiling the kernels small releases use (about a minute of CPU the first time)\n")
    with _compile_notice(True, err):
        done = compile_kernels()
    if not args.quiet:
        out.write(f"{done.compiled} kernel versions compiled, {done.loaded} loaded from the cache, "
                  f"in {done.seconds:.0f} s ({done.releases} releases on made-up counts); cache: {done.cache}\n")
    return EXIT_OK


_COMMANDS = {"release": _cmd_release, "validate": _cmd_validate, "evaluate": _cmd_evaluate, "report": _cmd_report,
             "examples": _cmd_examples, "plugins": _cmd_plugins, "schema": _cmd_schema, "compile": _cmd_compile}


def _interrupted(args: argparse.Namespace) -> str:
    """What an interrupted command leaves, after "interrupted; ": a dataset release says what
    it wrote so far and whether --resume continues it; any other command writes nothing."""
    describe = getattr(args, "interrupted", None)
    if describe is not None:
        try:
            return str(describe())
        except Exception:  # noqa: BLE001 - the note must never hide the interruption
            pass
    return "no output was written"


def _threads_count(text: str) -> int:
    from hierdp._kernels.threads import parse_threads

    try:
        return parse_threads(text, "--threads")
    except ValueError as exc:  # argparse shows an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring).

    Ctrl-C: in the ``hierdp`` process, while it starts (imports, arguments, loading the
    library) the handler of :func:`hierdp._on_interrupt` exits 130 at once with one line;
    while a command runs it raises ``KeyboardInterrupt``, answered here with one line and
    130 after the command's clean-up; once the command is over, it is ignored. Called in
    a process of its own (tests, scripts), an interrupt anywhere in here gives 130 too.
    """
    from hierdp import _interrupt_phase

    try:
        return _main(argv)
    except KeyboardInterrupt:  # outside the command's own handler: before it, or at its very end
        _interrupt_phase("done")
        sys.stderr.write("interrupted (Ctrl-C)\n")
        return EXIT_INTERRUPTED
    finally:
        _interrupt_phase("done")  # the interpreter's exit cannot be interrupted into a traceback


def _main(argv: Sequence[str] | None) -> int:
    from hierdp import _interrupt_phase, _interrupts

    out, err = sys.stdout, sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help / --version exit 0, usage errors 2
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USER
    from hierdp._kernels.malloc import keep_freed_memory

    keep_freed_memory()  # before numpy starts its threads; HIERDP_MALLOC=system leaves glibc as it is
    from hierdp import _load

    _load()  # the library, as `import hierdp` loads it (deferred while the arguments were parsed)
    from hierdp.errors import HierDPError, SpecError

    nul = next((k for k, v in vars(args).items() if isinstance(v, str) and "\x00" in v), None)
    if nul is not None:  # os calls would raise ValueError('embedded null byte') deep inside
        err.write(f"error: the {nul.replace('_', '-')} argument holds a NUL character, which no file name or "
                  "value can hold; check how the command line was built\n")
        return EXIT_USER

    def show(message: str, category, filename, lineno, file=None, line=None) -> None:
        if not args.quiet:
            err.write(f"warning: {message}\n")

    from hierdp._kernels.threads import get_threads, set_threads

    restore: list = []
    try:
        if getattr(args, "threads", None) is not None:
            restore.append(set_threads(args.threads))  # put back when main() returns (in-process callers)
        get_threads()  # a bad HIERDP_THREADS is a user error here, before any work
    except ValueError as exc:
        err.write(f"error: {exc}\n")
        return EXIT_USER
    try:
        _interrupt_phase("working")  # from here Ctrl-C is a KeyboardInterrupt the command cleans up after
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            return _COMMANDS[args.command](args, out, err)
    except KeyboardInterrupt:
        err.write(f"interrupted; {_interrupted(args)}\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail again
        except (OSError, ValueError):
            pass
        return EXIT_BROKEN_PIPE
    except SpecError as exc:
        if _interrupts["raised"]:  # a Ctrl-C that a library turned into an error of its own
            err.write(f"interrupted; {_interrupted(args)}\n")
            return EXIT_INTERRUPTED
        if args.debug:
            _print_traceback(err)
        for line in getattr(exc, "errors", [str(exc)]):
            err.write(f"error: {line}\n")
        return EXIT_USER
    except (HierDPError, OSError) as exc:
        if _interrupts["raised"]:  # a Ctrl-C that a library turned into an error of its own
            err.write(f"interrupted; {_interrupted(args)}\n")
            return EXIT_INTERRUPTED
        if args.debug:
            _print_traceback(err)
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, OSError) and not isinstance(exc, HierDPError):
            msg = f"{exc.strerror or type(exc).__name__}: {exc.filename or msg}"
        err.write(f"error: {msg}\n")
        return EXIT_USER
    except Exception as exc:  # a bug: say so, keep the traceback behind --debug
        if _interrupts["raised"]:  # a Ctrl-C that a library turned into an error of its own
            err.write(f"interrupted; {_interrupted(args)}\n")
            return EXIT_INTERRUPTED
        if args.debug:
            _print_traceback(err)
        else:
            err.write(f"internal error: {type(exc).__name__}: {exc} (a bug in hierdp or a plugin; "
                      "rerun with --debug for the traceback and report it)\n")
        return EXIT_INTERNAL
    finally:
        _interrupt_phase("done")
        if restore:
            set_threads(restore[0])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
