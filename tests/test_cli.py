"""The ``hierdp`` command line: commands, outputs, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hierdp.cli import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER, main

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "specs" / "demo.yaml"


def test_release_writes_table_and_ledger(tmp_path, capsys):
    out = tmp_path / "sub" / "demo.csv"
    assert main(["release", str(DEMO), "-o", str(out), "--seed", "4"]) == EXIT_OK
    stdout = capsys.readouterr().out
    assert f"wrote {out}" in stdout and "Privacy ledger: ε-DP, ε = 1" in stdout
    assert "NOT FOR PUBLICATION" in stdout
    table = pd.read_csv(out)
    assert list(table.columns) == ["level", "state", "county", "tract", "estimate", "std", "status"]
    assert table["status"].str.startswith("NOT FOR PUBLICATION: seeded randomness").all()  # seeded
    assert len(table) == 1 + 6 + 44 + 174
    ledger = json.loads((tmp_path / "sub" / "demo.ledger.json").read_text())
    assert ledger["spent"] == 1.0 and [lv["budget"] for lv in ledger["levels"]] == [0.25] * 4
    assert ledger["seed"] == 4


def test_release_parquet_and_quiet(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "demo.parquet"
    assert main(["release", str(DEMO), "-o", str(out), "--seed", "1", "-q"]) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert len(pd.read_parquet(out)) == 225
    assert (tmp_path / "demo.ledger.json").exists()


def test_release_uses_the_spec_output_path_relative_to_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["release", str(DEMO), "--seed", "2", "-q"]) == EXIT_OK
    assert (tmp_path / "out" / "demo.csv").exists() and (tmp_path / "out" / "demo.ledger.json").exists()


def test_release_without_output_path_is_a_user_error(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(DEMO.read_text().split("output:")[0])
    assert main(["release", str(spec)]) == EXIT_USER
    assert "no output path; set output.path in the spec or pass -o OUT" in capsys.readouterr().err


def test_validate(capsys):
    assert main(["validate", str(DEMO)]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"{DEMO}: valid (total > state > county > tract; ε = 1; mechanism discrete_laplace")


def test_plugins_table_lists_every_kind_with_its_package(capsys):
    from hierdp import registry

    assert main(["plugins"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "PACKAGE", "SUMMARY"]
    rows = {(ln.split()[0], ln.split()[1]): ln for ln in lines[1:]}
    for kind in ("mechanism", "postprocessor", "metric", "budget"):
        for name in registry.names(kind):
            assert (kind, name) in rows
    assert "hierdp (built-in)" in rows[("mechanism", "discrete_laplace")]
    assert main(["plugins", "--kind", "budget"]) == EXIT_OK
    kinds = {ln.split()[0] for ln in capsys.readouterr().out.splitlines()[1:]}
    assert kinds == {"budget"}


def test_schema_prints_the_shipped_json_schema(capsys):
    from hierdp.spec import load_schema

    assert main(["schema"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == load_schema()


def test_evaluate_writes_table_and_png(tmp_path, capsys):
    spec = ROOT / "specs" / "attribution.yaml"
    out = tmp_path / "ev.csv"
    assert main(["evaluate", str(spec), "-o", str(out), "-r", "3", "--seed", "1"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "TRUE counts" in captured.err
    table = pd.read_csv(out)
    from hierdp.evaluation import COLUMNS

    assert list(table.columns) == COLUMNS
    assert set(table["config"]) == {"attribution"} and table["non_private"].all()
    assert sorted(table["epsilon"].unique()) == [0.5, 1.0, 2.0]
    assert set(table["metric"]) == {"tree_rmsre(tau=10)", "rmsre(tau=10)"}
    assert (table["repetitions"] == 3).all()
    assert set(table["level"]) == {"all", "total", "campaign", "location", "delay"}
    # more budget, less error
    overall = table[table["level"] == "all"].set_index(["metric", "epsilon"])["mean"]
    for m in ("tree_rmsre(tau=10)", "rmsre(tau=10)"):
        assert overall[(m, 0.5)] > overall[(m, 2.0)]
    assert (tmp_path / "ev.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_writes_both_files_or_neither(tmp_path, capsys):
    """The plot's path is a directory: the command fails cleanly before writing the table."""
    (tmp_path / "ev.png").mkdir()
    out = tmp_path / "ev.csv"
    assert main(["evaluate", str(ROOT / "specs" / "attribution.yaml"), "-o", str(out), "-r", "2",
                 "--seed", "1"]) == EXIT_USER
    err = capsys.readouterr().err
    assert "ev.png': it is a directory" in err and "Traceback" not in err and ".tmp" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ev.png"]


def test_evaluate_without_section_is_a_user_error(capsys):
    assert main(["evaluate", str(DEMO), "-o", "x.csv"]) == EXIT_USER
    assert "no `evaluate:` section" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys):
    assert main(["bogus"]) == EXIT_USER
    assert main([]) == EXIT_USER
    assert main(["release"]) == EXIT_USER
    err = capsys.readouterr().err
    assert "error: " in err and "Traceback" not in err


def test_version_and_help_exit_0(capsys):
    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("hierdp ")
    assert main(["release", "--help"]) == EXIT_OK
    assert "--seed" in capsys.readouterr().out


def test_data_error_is_a_user_error_without_traceback(tmp_path, capsys):
    (tmp_path / "d.csv").write_text("region\nnorth\nwest\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("hierdp: 1\nsource: {path: d.csv}\nhierarchy:\n  levels: [{name: region, domain: [north]}]\n"
                    "privacy: {epsilon: 1}\n")
    out = tmp_path / "o.csv"
    assert main(["release", str(spec), "-o", str(out)]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.startswith("error: the data have 'region' values outside the declared domain")
    assert "west" not in err  # values from the private data are not echoed
    assert "Traceback" not in err and not out.exists()
    assert main(["release", str(spec), "-o", str(out), "--debug"]) == EXIT_USER
    assert "Traceback" in capsys.readouterr().err


def test_internal_error_exits_1_with_one_line(monkeypatch, tmp_path, capsys):
    import hierdp.spec.runner as runner

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(runner, "run_spec", boom)
    assert main(["release", str(DEMO), "-o", str(tmp_path / "o.csv")]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("internal error: RuntimeError: kaboom") and "--debug" in err
    assert "Traceback" not in err


def test_interrupt_exits_130_without_output(monkeypatch, tmp_path, capsys):
    real = pd.DataFrame.to_csv

    def interrupted(self, path, *a, **k):
        real(self.head(2), path, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", interrupted)
    out = tmp_path / "o.csv"
    assert main(["release", str(DEMO), "-o", str(out), "--seed", "1"]) == EXIT_INTERRUPTED
    assert "interrupted; no output was written" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_python_dash_m_and_console_script_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hierdp", "validate", str(DEMO), "-q"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "hierdp", "validate", str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'missing.yaml'}: spec file not found; check the path"
    from importlib.metadata import PackageNotFoundError, entry_points

    try:
        eps = {ep.name: ep.value for ep in entry_points(group="console_scripts") if ep.name == "hierdp"}
    except PackageNotFoundError:  # pragma: no cover
        eps = {}
    if eps:  # installed (CI installs the package): the script points at main
        assert eps["hierdp"] == "hierdp.cli:main"


def test_outputs_never_replace_the_spec_inputs(tmp_path, capsys, monkeypatch):
    """-o or output.path naming the private source (or the prior, a domain file, the spec)
    is refused before anything is written; validate says so too."""
    import shutil

    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path / "specs")
    source = tmp_path / "specs" / "data" / "conversions_q2.csv"
    before = source.read_bytes()
    for out in ("data/conversions_q2.csv", "data/attribution_prior.csv", "attribution.yaml"):
        assert main(["release", "attribution.yaml", "-o", out, "--seed", "1"]) == EXIT_USER
        assert "is one of this spec's input files" in capsys.readouterr().err
    assert source.read_bytes() == before
    spec = (tmp_path / "specs" / "attribution.yaml").read_text().replace("path: out/attribution.csv",
                                                                          "path: data/conversions_q2.csv")
    (tmp_path / "specs" / "bad.yaml").write_text(spec)
    assert main(["validate", "bad.yaml"]) == EXIT_USER
    assert "output.path: 'data/conversions_q2.csv' is one of this spec's input files" in capsys.readouterr().err
    assert source.read_bytes() == before


# ------------------------------------------------------------- Ctrl-C at any moment --
_CONSOLE_SCRIPT = """import re
import sys
from hierdp.cli import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def _as_at_a_terminal() -> None:
    """In the child, before it runs: SIGINT back to its default action, as a command typed at
    a terminal has it. A test run started in the background by a shell without job control
    (a CI script's ``cmd &``) inherits SIGINT *ignored*, and the hierdp command rightly keeps
    an ignored SIGINT ignored (as under ``nohup``): no signal the test sends would land."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted_release(tmp_path: Path, how: str, delay: float | None) -> tuple[int, list[str], list[str]]:
    """Start ``hierdp release demo -o OUT`` as its own process (``python -m hierdp`` or a
    console script named ``hierdp``, as pip writes it), send SIGINT ``delay`` seconds after
    hierdp's own first import or never (``None``). The child stops at that import (the
    gate in ``tests/_sigint_gate``, right after hierdp installs its handler; before it the
    interpreter is still starting, see docs/security.md) until the test lets it go, so
    the delay is measured from a known moment however fast start-up is; with delay 0 the
    signal arrives while the child waits there. Returns the exit code, stderr without the
    gate's line, and what is left in the output folder."""
    import os
    import signal
    import threading
    import time

    out_dir = tmp_path / f"{how}-{delay}"
    out_dir.mkdir()
    if how == "module":
        cmd = [sys.executable, "-m", "hierdp"]
    else:
        script = tmp_path / "bin" / "hierdp"
        script.parent.mkdir(exist_ok=True)
        script.write_text(_CONSOLE_SCRIPT)
        cmd = [sys.executable, str(script)]
    gate_r, gate_w = os.pipe()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "_sigint_gate"), str(ROOT)]),
               HIERDP_THREADS="1", HIERDP_TEST_GATE_FD=str(gate_r))
    try:
        proc = subprocess.Popen([*cmd, "release", "demo", "-o", str(out_dir / "x.csv"), "-q"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, pass_fds=(gate_r,),
                                preexec_fn=_as_at_a_terminal)
    finally:
        os.close(gate_r)
    started = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line == "hierdp-gate\n":
                started.set()
            else:
                lines.append(line)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert started.wait(120), "hierdp never started"
        if delay == 0:
            proc.send_signal(signal.SIGINT)  # while the child waits at the gate
            time.sleep(0.05)
        os.write(gate_w, b"g")
    except BrokenPipeError:  # the child has already gone (the signal ended it)
        pass
    finally:
        os.close(gate_w)
    if delay:
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
    proc.wait(300)
    reader.join(60)
    assert proc.stderr is not None
    proc.stderr.close()
    return proc.returncode, lines, sorted(p.name for p in out_dir.iterdir())


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("how", ["module", "script"])
def test_ctrl_c_at_any_moment_exits_130_with_one_line(tmp_path, how):
    """A user pressing Ctrl-C while the command imports its libraries, parses, loads the
    library, reads the data, draws the noise or writes sees one line and exit 130, never a
    traceback or a half-written table; if the release had already finished, it is whole."""
    rc, err, left = _interrupted_release(tmp_path, how, None)
    assert rc == EXIT_OK and err == [] and left == ["x.csv", "x.ledger.json"]
    seen = set()
    for delay in (0.0, 0.02, 0.05, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0, 4.5):
        rc, err, left = _interrupted_release(tmp_path, how, delay)
        assert not any("Traceback" in ln for ln in err), (delay, err)
        if rc == EXIT_OK:  # too late: the release was complete
            assert err == [] and left == ["x.csv", "x.ledger.json"], (delay, err, left)
        else:
            assert rc == EXIT_INTERRUPTED and len(err) == 1 and err[0].startswith("interrupted"), (delay, rc, err)
            assert left == [], (delay, left)  # nothing, not even a temporary or a journal
            seen.add(err[0].strip())
    assert "interrupted while starting; no output was written" in seen  # the start-up handler was hit


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see the data file opened")
def test_ctrl_c_while_the_command_reads_its_data_exits_130_without_output(tmp_path):
    """Ctrl-C once the command has opened its (private) input file, i.e. in the command
    itself and not during start-up: the command's own clean-up, one line, exit 130."""
    import os
    import signal
    import time

    data = tmp_path / "big.csv"
    data.write_bytes(b"campaign,location\n" + b"".join(b"c%d,l%d\n" % (i % 7, i % 5) for i in range(35))
                     * 150_000)  # 5M rows: reading them takes a while
    spec = tmp_path / "big.yaml"
    spec.write_text(f"hierdp: 1\nsource:\n  path: {data}\nhierarchy:\n  levels:\n"
                    "    - {name: campaign, attribute: known, domain: observed}\n"
                    "    - {name: location, attribute: known, domain: observed}\n"
                    "privacy:\n  epsilon: 1.0\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "hierdp", "release", str(spec), "-o", str(out_dir / "x.csv"),
                             "-q"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_at_a_terminal)
    fds = Path(f"/proc/{proc.pid}/fd")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(os.readlink(fds / fd) == str(data) for fd in os.listdir(fds)):
                break
        except OSError:  # an fd closed while we looked
            pass
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err == "interrupted; no output was written\n"
    assert list(out_dir.iterdir()) == []


def test_ctrl_c_that_a_library_turns_into_an_error_still_exits_130(monkeypatch, tmp_path, capsys):
    """pandas' C reader turns an interrupt raised in its read callback into "Calling
    read(nbytes) on source failed" (a ParserError, then a DataError): in the hierdp
    process, a Ctrl-C the handler raised is still reported as one, not as a bad file."""
    import signal

    import hierdp

    real = pd.read_csv

    def read_csv(*a, **k):
        try:
            hierdp._on_interrupt(signal.SIGINT, None)  # what SIGINT runs in the hierdp process
        except KeyboardInterrupt as exc:
            raise pd.errors.ParserError("Error tokenizing data. Calling read(nbytes) on source failed.") from exc
        return real(*a, **k)

    monkeypatch.setitem(hierdp._interrupts, "phase", "starting")  # as in the hierdp process
    monkeypatch.setitem(hierdp._interrupts, "raised", False)
    monkeypatch.setattr(pd, "read_csv", read_csv)
    monkeypatch.chdir(ROOT / "specs")
    assert main(["release", "attribution.yaml", "-o", str(tmp_path / "a.csv"), "--seed", "1"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "interrupted; no output was written\n"
    assert list(tmp_path.iterdir()) == [] and hierdp._interrupts["phase"] == "done"
