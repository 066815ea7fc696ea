"""docs/spec.md's complete example works as a reader uses it: saved as ``spec.yaml`` in an
empty folder anywhere (not beside ``specs/``), validated and released by the command line
from that folder and from another one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def complete_example() -> str:
    text = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    m = re.search(r"^## A complete example\n.*?^```yaml\n(.*?)^```", text, flags=re.S | re.M)
    assert m, "docs/spec.md has no complete example"
    return m.group(1)


def _hierdp(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "hierdp", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_complete_example_validates_and_runs_from_any_folder(tmp_path):
    home = tmp_path / "somewhere" / "else"
    home.mkdir(parents=True)
    (home / "spec.yaml").write_text(complete_example(), encoding="utf-8")
    other = tmp_path / "another"
    other.mkdir()
    for cwd, spec in ((home, "spec.yaml"), (other, str(home / "spec.yaml"))):
        run = _hierdp("validate", spec, cwd=cwd)
        assert run.returncode == 0, run.stderr
        assert "valid" in run.stdout
    run = _hierdp("release", "spec.yaml", "--seed", "1", cwd=home)
    assert run.returncode == 0, run.stderr
    table = pd.read_csv(home / "out" / "census.csv", dtype=str)
    assert set(table["level"]) == {"total", "state", "county", "tract"}
    assert (table["level"] == "tract").sum() == 174                    # the bundled geography's tracts
