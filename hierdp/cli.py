"""The ``hierdp`` command line.

::

    hierdp release SPEC [-o OUT] [--seed N] [-q] [--debug]   run a release spec
    hierdp validate SPEC [-q] [--debug]                       check a spec, read no private data
    hierdp evaluate SPEC [-o OUT] [-r R] [--seed N] [-q]      NON-PRIVATE error table + PNG plot
    hierdp plugins [--kind KIND]                              everything registered, and its package
    hierdp schema                                             print the spec's JSON Schema

Exit codes
----------
0  success.
1  internal error: a bug in hierdp or a plugin (one line; ``--debug`` shows the traceback).
2  user error: invalid spec, command line, data, budget or plugin name, or a file that
   cannot be read or written — one line per problem naming where it is and how to fix it,
   no traceback (``--debug`` shows it), and no output file is created.
130 interrupted (Ctrl-C); no partial output is left behind.
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import TextIO

__all__ = ["main", "EXIT_OK", "EXIT_INTERNAL", "EXIT_USER", "EXIT_INTERRUPTED"]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line error format of the other commands (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"error: {message}; see `{self.prog} --help`\n")
        raise SystemExit(EXIT_USER)


def _parser() -> argparse.ArgumentParser:
    from hierdp import __version__

    p = _Parser(prog="hierdp", description="Differentially private release of hierarchical counts.",
                epilog="Exit codes: 0 ok, 1 internal error, 2 user error (bad spec/data/arguments), "
                       "130 interrupted.")
    p.add_argument("--version", action="version", version=f"hierdp {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
        sp.add_argument("--debug", action="store_true", help="show tracebacks of errors")

    r = sub.add_parser("release", help="run a release spec and write its output and ledger")
    r.add_argument("spec", metavar="SPEC", help="YAML release spec")
    r.add_argument("-o", "--output", metavar="OUT", help="output file (.csv or .parquet); overrides output.path")
    r.add_argument("--seed", type=int, metavar="N",
                   help="fixed seed for tests: the ledger marks the release NOT FOR PUBLICATION")
    common(r)

    v = sub.add_parser("validate", help="check a spec without reading private data")
    v.add_argument("spec", metavar="SPEC")
    common(v)

    e = sub.add_parser("evaluate", help="NON-PRIVATE: run the spec's evaluate section (table + PNG plot)")
    e.add_argument("spec", metavar="SPEC")
    e.add_argument("-o", "--output", metavar="OUT", help="table (.csv); the plot goes beside it as .png")
    e.add_argument("-r", "--repetitions", type=int, metavar="R", help="overrides evaluate.repetitions")
    e.add_argument("--seed", type=int, metavar="N", help="fixed seed (reproducible evaluation)")
    common(e)

    pl = sub.add_parser("plugins", help="list registered mechanisms, post-processors, metrics, budgets")
    pl.add_argument("--kind", choices=["mechanism", "postprocessor", "metric", "budget", "plan", "decomposition"],
                    help="only this kind")
    common(pl)

    s = sub.add_parser("schema", help="print the JSON Schema of release specs")
    common(s)
    return p


def _print_warnings(msgs: Sequence[str], quiet: bool, err: TextIO) -> None:
    if not quiet:
        for m in msgs:
            err.write(f"warning: {m}\n")


def _cmd_release(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.spec.runner import load_spec, run_spec

    spec = load_spec(args.spec, **({"seed": args.seed} if args.seed is not None else {}))
    _print_warnings(spec.warnings, args.quiet, err)
    if args.output is None and (spec.output or {}).get("path") is None:
        from hierdp.errors import SpecError

        raise SpecError(f"{args.spec}: no output path; set output.path in the spec or pass -o OUT")
    result = run_spec(spec, output=args.output, progress=not args.quiet)
    if not args.quiet:
        table, ledger = result.meta.get("written", ["?", "?"])
        out.write(f"wrote {table} ({result.tree.n_nodes:,} nodes) and its ledger {ledger}\n")
        out.write(str(result.ledger) + "\n")
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.spec.validate import validate

    spec = validate(args.spec)
    _print_warnings(spec.warnings, args.quiet, err)
    if not args.quiet:
        unit = "ρ" if spec.rho is not None else "ε"
        levels = " > ".join(spec.level_names)
        out.write(f"{args.spec}: valid ({levels}; {unit} = {spec.total:g}; mechanism {spec.mechanism[0]}; "
                  f"post-processing {' -> '.join(n for n, _ in spec.postprocess) or 'none'})\n")
    return EXIT_OK


def _cmd_evaluate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from hierdp.errors import NonPrivateWarning
    from hierdp.spec.runner import evaluate_spec, load_spec

    spec = load_spec(args.spec)
    _print_warnings(spec.warnings, args.quiet, err)
    if args.repetitions is not None and args.repetitions < 1:
        from hierdp.errors import SpecError

        raise SpecError(f"--repetitions must be >= 1, got {args.repetitions}")
    if args.output is None and (spec.evaluate or {}).get("output") is None:
        from hierdp.errors import SpecError

        raise SpecError(f"{args.spec}: no evaluation output; set evaluate.output in the spec or pass -o OUT")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateWarning)
        table = evaluate_spec(spec, repetitions=args.repetitions, seed=args.seed, output=args.output,
                              progress=not args.quiet)
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


_COMMANDS = {"release": _cmd_release, "validate": _cmd_validate, "evaluate": _cmd_evaluate,
             "plugins": _cmd_plugins, "schema": _cmd_schema}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    out, err = sys.stdout, sys.stderr
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help / --version exit 0, usage errors 2
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USER
    from hierdp.errors import HierDPError, SpecError

    def show(message: str, category, filename, lineno, file=None, line=None) -> None:
        if not args.quiet:
            err.write(f"warning: {message}\n")

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show
            return _COMMANDS[args.command](args, out, err)
    except KeyboardInterrupt:
        err.write("interrupted; no output was written\n")
        return EXIT_INTERRUPTED
    except SpecError as exc:
        if args.debug:
            traceback.print_exc(file=err)
        for line in getattr(exc, "errors", [str(exc)]):
            err.write(f"error: {line}\n")
        return EXIT_USER
    except (HierDPError, OSError) as exc:
        if args.debug:
            traceback.print_exc(file=err)
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, OSError) and not isinstance(exc, HierDPError):
            msg = f"{exc.strerror or type(exc).__name__}: {exc.filename or msg}"
        err.write(f"error: {msg}\n")
        return EXIT_USER
    except Exception as exc:  # a bug: say so, keep the traceback behind --debug
        if args.debug:
            traceback.print_exc(file=err)
        else:
            err.write(f"internal error: {type(exc).__name__}: {exc} (a bug in hierdp or a plugin; "
                      "rerun with --debug for the traceback and report it)\n")
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
