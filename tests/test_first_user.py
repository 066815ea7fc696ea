"""Small things a first user hits (issue 29, item 7): what the Dataset shows after ``round``,
the ledger once in its attrs, warnings that name the user's line, the line said before the
first compile, progress bars only on a terminal, a fast ``hierdp --version``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp._kernels import jit
from hierdp.cli import EXIT_OK, main
from hierdp.errors import NonPrivateWarning, NotForPublicationWarning

ROOT = Path(__file__).resolve().parents[1]


def _people() -> pd.DataFrame:
    return pd.DataFrame({"state": list("AAABBC"), "county": ["x", "y", "y", "z", "z", "w"]})


# ------------------------------------------------------------------ the Dataset agrees with the frame --
@pytest.mark.parametrize("chain", [["blue"], ["blue", "round"], ["blue", "nonneg"]])
def test_the_dataset_shows_the_frames_std(chain):
    r = _people().dptree(levels=["state", "county"], domains="observed").release(
        epsilon=1.0, postprocess=chain, seed=3)
    ds = r.to_xarray()
    np.testing.assert_array_equal(ds["std"].values, r.frame["std"].to_numpy())
    if chain[-1] != "blue":  # the linear estimate's std is not the released value's error
        assert np.isnan(ds["std"].values[1:]).all() and "non-linear" in ds["std"].attrs["note"]


def test_the_cells_dataset_shows_the_frames_std_after_round():
    people = pd.DataFrame({"region": ["N", "N", "S"], "sex": ["F", "M", "F"]})
    r = people.dptree(levels=["region"], domains={"region": ["N", "S"]}, cells={"sex": ["F", "M"]}).release(
        epsilon=1.0, postprocess=["blue", "round"], seed=1)
    std = r.to_xarray()["std"]
    frame_std = r.frame["std"].to_numpy().reshape(r.tree.n_nodes, -1)
    np.testing.assert_array_equal(np.broadcast_to(std.values.reshape(r.tree.n_nodes, -1), frame_std.shape),
                                  frame_std)


def test_the_ledger_is_stored_once_in_the_dataset():
    r = _people().dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=1)
    ds = r.to_xarray()
    text = r.ledger.to_json()
    assert [k for k, v in ds.attrs.items() if v == text] == ["ledger"]
    assert json.loads(ds.attrs["ledger"])["release_id"] == ds.attrs["hierdp.release_id"]


# ------------------------------------------------------------------ warnings name the user's line --
def test_a_seeded_release_warns_at_the_callers_line():
    df = _people()
    calls = [
        lambda: df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=1),
        lambda: df.groupby(["state", "county"]).size().dptree(domains="observed").release(epsilon=1.0, seed=1),
        lambda: hierdp.release(hierdp.Tree.complete(2, 3), hierdp.Tree.complete(2, 3).aggregate(np.arange(4)), epsilon=1.0,
                               seed=1),
        lambda: hierdp.run_spec("demo", seed=1, write=False),
    ]
    for call in calls:
        with pytest.warns(NotForPublicationWarning) as record:
            call()
        assert [Path(w.filename) for w in record] == [Path(__file__)], [w.filename for w in record]


def test_evaluation_warns_at_the_callers_line():
    from hierdp.spec import evaluate_spec, load_spec

    spec = load_spec("demo", seed=1, evaluate={"metrics": ["rmse_node"], "repetitions": 1})
    with pytest.warns(NonPrivateWarning) as record:
        evaluate_spec(spec, progress=False)
    assert {Path(w.filename) for w in record if issubclass(w.category, NonPrivateWarning)} == {Path(__file__)}


def test_the_helper_skips_every_hierdp_frame():
    from hierdp.errors import warn

    with pytest.warns(UserWarning, match="here") as record:
        warn("here")
    assert Path(record[0].filename) == Path(__file__)


# ------------------------------------------------------------------ the first compile is announced --
def _fresh_kernel(module: str):
    """A numba kernel of ``module`` that nothing has compiled yet (no cache)."""
    ns: dict = {"__name__": module}
    exec("def kernel(x):\n    return x + 1\n", ns)  # noqa: S102 - a throwaway kernel
    return jit.numba.njit(cache=False)(ns["kernel"])


def test_the_first_compile_of_a_hierdp_kernel_is_announced_before_it_compiles(monkeypatch, caplog):
    monkeypatch.setattr(jit._FIRST_COMPILE, "done", False)
    kernel = _fresh_kernel("hierdp.some_kernels")
    compiled_when_said: list[int] = []

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            compiled_when_said.append(len(kernel.overloads))

    watch = Watch()
    jit.compile_logger.addHandler(watch)
    try:
        with caplog.at_level(logging.WARNING, logger="hierdp.compile"):
            _fresh_kernel("someone_else").py_func  # noqa: B018
            _fresh_kernel("someone_else")(1)  # another package's kernel: not ours to announce
            assert not caplog.records
            assert kernel(1) == 2
            assert _fresh_kernel("hierdp.other")(2) == 3  # once per process
    finally:
        jit.compile_logger.removeHandler(watch)
    assert [r.getMessage() for r in caplog.records] == [jit.compile_notice()]
    assert compiled_when_said == [0]  # said before the compiler ran
    assert f"~{jit.COMPILE_SECONDS} s" in jit.compile_notice() and jit.COMPILE_SECONDS >= 10


def test_the_cli_says_it_once_on_stderr_and_nothing_under_quiet(monkeypatch, capsys):
    from hierdp.cli import _compile_notice

    for quiet in (False, True):
        monkeypatch.setattr(jit._FIRST_COMPILE, "done", False)
        with _compile_notice(quiet, sys.stderr):
            _fresh_kernel("hierdp.cli_kernels")(1)
        err = capsys.readouterr().err
        assert err == ("" if quiet else jit.compile_notice() + "\n")


# ------------------------------------------------------------------ progress bars only on a terminal --
def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, capsys):
    spec = tmp_path / "eval.yaml"
    spec.write_text("hierdp: 1\nsource: {demo: census}\nhierarchy:\n  root: total\n  paths: {demo: census}\n"
                    "  levels: [{name: state}, {name: county}, {name: tract}]\nprivacy: {epsilon: 1.0}\n"
                    f"evaluate: {{metrics: [rmse_node], repetitions: 1, output: '{tmp_path / 'e.csv'}'}}\n",
                    encoding="utf-8")
    assert main(["evaluate", str(spec), "--seed", "1"]) == EXIT_OK
    err = capsys.readouterr().err
    assert "releases" not in err and "\r" not in err, err


# ------------------------------------------------------------------ a fast --version --
def test_version_imports_no_heavy_package():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "hierdp", "--version"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"hierdp {hierdp.__version__}"
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    heavy = {"numpy", "pandas", "numba", "scipy", "xarray", "pluggy", "yaml", "jsonschema"} & imported
    assert not heavy, f"`hierdp --version` imports {sorted(heavy)}"


def test_import_hierdp_leaves_the_slow_optional_modules_alone():
    # issue 53 item 5: `import hierdp` took ~5 s on a loaded machine; scipy.stats alone was
    # ~1.4 s of it there, used only by the exact accountant's binomial and the audit
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import hierdp"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {ln.split("|")[-1].strip() for ln in proc.stderr.splitlines() if "|" in ln}
    slow = {"scipy.stats", "matplotlib", "pyarrow.dataset", "duckdb", "polars", "pyspark", "dask"} & imported
    assert not slow, f"`import hierdp` imports {sorted(slow)}"


def test_every_warning_goes_through_the_helper():
    """hierdp.errors.warn finds the caller's line; a bare warnings.warn would name a hierdp file."""
    import re

    offenders = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "hierdp").rglob("*.py")) if p.name != "errors.py"
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"\bwarnings\.warn\(", line) and not line.lstrip().startswith(("#", ">>>"))]
    assert not offenders, offenders
