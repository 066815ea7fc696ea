"""A third-party plugin installed with pip is found through its entry point and usable by name.

The example package (``examples/hierdp-example-plugin``) is pip-installed into a temporary
``--target`` folder (nothing in the test environment changes); a fresh interpreter with
that folder on its path lists the plugin, validates, releases and evaluates a spec that
names its mechanism and metric. Measured here: ~3 s for the install (pip fetches the
build backend, setuptools, from the package index), ~3 s for the run.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hierdp.mechanisms.base import Sensitivity
from hierdp.rng import make_rng
from hierdp.testing import BaseMechanismTests

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "hierdp-example-plugin"
SPEC = ROOT / "specs" / "plugin-mechanism.yaml"

SCRIPT = r"""
import contextlib, io, json, sys
from hierdp.cli import main
out = {}
for name, argv in json.loads(sys.argv[1]).items():
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main(argv)
    out[name] = {"code": code, "out": o.getvalue(), "err": e.getvalue()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    # build from a copy: pip builds in the source tree, which must stay clean
    src = tmp_path_factory.mktemp("src") / "hierdp-example-plugin"
    shutil.copytree(PLUGIN, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
         "--no-deps", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert list(target.glob("hierdp_example_plugin-*.dist-info/entry_points.txt"))
    return target


def test_installed_plugin_is_found_and_runs_a_spec(installed, tmp_path):
    out = tmp_path / "plugin.csv"
    commands = {
        "plugins": ["plugins"],
        "validate": ["validate", str(SPEC)],
        "release": ["release", str(SPEC), "-o", str(out), "--seed", "3", "-q"],
        "evaluate": ["evaluate", str(SPEC), "-o", str(tmp_path / "ev.csv"), "-r", "2", "--seed", "1", "-q"],
    }
    env = dict(os.environ)
    env.pop("HIERDP_DISABLE_PLUGIN_AUTOLOAD", None)
    env["PYTHONPATH"] = os.pathsep.join([str(installed), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(commands)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, r in res.items():
        assert r["code"] == 0, (name, r["err"])
    rows = [ln.split() for ln in res["plugins"]["out"].splitlines()]
    mech = next(r for r in rows if r[:2] == ["mechanism", "example_geometric"])
    metric = next(r for r in rows if r[:2] == ["metric", "example_max_abs_error"])
    assert mech[2:4] == ["hierdp-example-plugin", "0.1.0"] and metric[2:4] == ["hierdp-example-plugin", "0.1.0"]
    assert "valid" in res["validate"]["out"]
    ledger = json.loads((tmp_path / "plugin.ledger.json").read_text())
    assert ledger["mechanism"] == "example_geometric" and math.isclose(ledger["spent"], 1.0)
    lines = out.read_text().splitlines()
    assert lines[0] == "level,state,county,estimate,std,status" and len(lines) == 1 + 1 + 6 + 44
    ev = (tmp_path / "ev.csv").read_text().splitlines()
    assert ev[1].startswith("plugin-mechanism,1.0,,example_max_abs_error(tau=10),all,")


def test_without_the_plugin_the_spec_names_what_is_missing():
    from hierdp.errors import SpecError
    from hierdp.plugins import get_plugin_manager
    from hierdp.registry import use_plugin_manager
    from hierdp.spec import validate

    with use_plugin_manager(get_plugin_manager(load_entrypoints=False)):
        with pytest.raises(SpecError, match=r"plugin-mechanism\.yaml:13:\d+: mechanism: unknown mechanism "
                                            r"'example_geometric' .*a plugin package may be missing"):
            validate(SPEC)


def _example_mechanism():
    sys.path.insert(0, str(PLUGIN))
    try:
        from hierdp_example_plugin import ExampleGeometric
    finally:
        sys.path.remove(str(PLUGIN))
    return ExampleGeometric()


class TestExampleMechanismContract(BaseMechanismTests):
    """The plugin's mechanism passes the contract suite hierdp's built-ins pass."""

    @pytest.fixture
    def mechanism(self):
        return _example_mechanism()


def test_example_mechanism_matches_the_two_sided_geometric_law():
    mech = _example_mechanism()
    eps, sens = 0.7, Sensitivity()
    a = math.exp(-eps)
    n = 400_000
    z = mech.sample(np.zeros(n, dtype=np.int64), eps, sens, make_rng(2024)).astype(np.int64)
    # P(Z = k) = (1 - a) / (1 + a) * a^|k|  (Ghosh et al. 2009)
    for k in (0, 1, -1, 3):
        p = (1 - a) / (1 + a) * a ** abs(k)
        se = math.sqrt(p * (1 - p) / n)
        assert abs(np.mean(z == k) - p) < 5 * se, k
    var = mech.variance(eps, sens)
    assert var == pytest.approx(2 * a / (1 - a) ** 2)
    assert np.var(z) == pytest.approx(var, rel=0.03)
    assert abs(z.mean()) < 5 * math.sqrt(var / n)
