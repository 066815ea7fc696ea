"""Outputs that go nowhere (issue 35, item 4), as a user at the command line sees them.

Before the fix ``-o memory://x/y.csv`` exited 0 having written nothing that survives the
process, and ``-o - --ledger L`` with standard output on a full disk exited 2 but left a
ledger ``L`` for a table nobody received."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hierdp.cli import EXIT_USER, main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _spec(tmp_path: Path, output: str = "") -> Path:
    (tmp_path / "d.csv").write_text("region\nnorth\nsouth\nnorth\n")
    spec = tmp_path / "s.yaml"
    spec.write_text("hierdp: 1\nsource: {path: d.csv}\nhierarchy:\n  levels: [{name: region, domain: [north, south]}]\n"
                    "privacy: {epsilon: 1}\n" + output)
    return spec


@pytest.mark.parametrize("where", ["-o", "--ledger", "spec"])
def test_memory_url_is_refused_before_the_release(tmp_path, capsys, where):
    pytest.importorskip("fsspec")
    if where == "-o":
        args = ["-o", "memory://x/y.csv"]
    elif where == "--ledger":
        args = ["-o", "-", "--format", "json", "--ledger", "memory://x/y.ledger.json"]
    else:
        args = []
    spec = _spec(tmp_path, "output: {path: 'memory://x/y.csv'}\n" if where == "spec" else "")
    assert main(["release", str(spec), *args, "-q"]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write 'memory://x/y") and "gone when the command ends" in err
    assert "Traceback" not in err and err.count("\n") == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_table_that_cannot_be_delivered_leaves_no_ledger(tmp_path, fmt):
    ledger = tmp_path / "L.json"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "hierdp", "release", str(_spec(tmp_path)), "-o", "-",
                               "--format", fmt, "--ledger", str(ledger), "--seed", "1"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == EXIT_USER, proc.stderr
    assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
    assert not ledger.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".hierdp-")] == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_undelivered_table_keeps_the_previous_ledger(tmp_path):
    ledger = tmp_path / "L.json"
    ledger.write_text("previous")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "hierdp", "release", str(_spec(tmp_path)), "-o", "-",
                               "--ledger", str(ledger), "--seed", "1"],
                              stdout=full, stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path, timeout=300)
    assert proc.returncode == EXIT_USER
    assert ledger.read_text() == "previous"


def test_a_delivered_table_gets_its_ledger(tmp_path, capsys):
    ledger = tmp_path / "L.json"
    assert main(["release", str(_spec(tmp_path)), "-o", "-", "--ledger", str(ledger), "--seed", "1", "-q"]) == 0
    assert capsys.readouterr().out.startswith("level,region,estimate")
    assert '"release_id"' in ledger.read_text()
