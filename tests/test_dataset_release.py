"""A dataset in, a dataset out: the spec's ``source.engine: duckdb`` with ``execution:``
counts the files on DuckDB and releases them task by task (issue 31 items 1-2 together),
and the out-of-core runner takes the ``marginals`` plan (issue 30 item 1 by subtree).

References: the same spec read with pandas and counted in memory (same key: the datasets
must be equal byte for byte in their values), and the in-memory split release.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow.parquet")
pytest.importorskip("duckdb")

import hierdp  # noqa: E402
from hierdp.spec.runner import release_dataset_spec  # noqa: E402

LEVELS = ["state", "county", "tract"]

SPEC = """hierdp: 1
source: {{path: '{path}', format: parquet{extra}}}
hierarchy:
  levels:
    - {{name: state, domain: observed}}
    - {{name: county, domain: observed}}
    - {{name: tract, domain: observed}}
cells:
  - {{name: sex, domain: {{values: [F, M]}}}}
privacy: {{epsilon: 2}}
postprocess: [blue, {{name: nonneg, params: {{method: topdown}}}}, {{name: round, params: {{method: topdown}}}}]
execution: {{split: county, memory: 9kB, workers: 2}}
"""


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    """4 Parquet parts of person records: 2 states x 12 counties x 3 tracts (codes with
    leading zeros), one part empty."""
    rng = np.random.default_rng(5)
    n = 6000
    state = rng.choice(["01", "02"], n)
    county = np.char.add(state.astype(str), rng.choice([f"{c:03d}" for c in range(1, 13)], n))
    tract = np.char.add(county, rng.choice(["000100", "000200", "000300"], n))
    df = pd.DataFrame({"state": state, "county": county, "tract": tract, "sex": rng.choice(["F", "M"], n)})
    folder = tmp_path_factory.mktemp("ds") / "records"
    folder.mkdir()
    for i, chunk in enumerate(np.array_split(np.arange(n), 3)):
        df.iloc[chunk].to_parquet(folder / f"part-{i}.parquet", index=False)
    df.iloc[:0].to_parquet(folder / "part-3.parquet", index=False)
    return folder


def _run(tmp: Path, records: Path, engine: str, name: str) -> pd.DataFrame:
    path = f"{records}/" if engine == "duckdb" else f"{records}/*.parquet"
    spec = tmp / f"{name}.yaml"
    spec.write_text(SPEC.format(path=path, extra=", engine: duckdb" if engine == "duckdb" else ""))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        release_dataset_spec(spec, tmp / f"{name}-out", seed=3)
    frame = pd.read_parquet(tmp / f"{name}-out")
    key = frame[LEVELS].astype("string").fillna("-").agg("/".join, axis=1) + "|" + frame["sex"].astype(str)
    return pd.Series(frame["estimate"].to_numpy(), index=key.to_numpy()).sort_index()


def test_duckdb_dataset_release_equals_the_pandas_read_release_and_removes_its_counts(tmp_path, records):
    got = _run(tmp_path, records, "duckdb", "a")
    want = _run(tmp_path, records, "pandas", "b")
    assert len(got) > 50 and got.index.is_unique
    assert got.equals(want)  # same counts per task, same key: the same integers in the same cells
    assert (got >= 0).all() and got.dtype == np.int64
    # the private counts file lived beside the work folder only while the release ran
    assert not (tmp_path / "a-out.work.counts").exists()
    assert not list(tmp_path.glob("*.counts"))
    parts = list((tmp_path / "a-out").glob("part-*.parquet"))
    assert len(parts) >= 3  # the top part and at least two tasks of counties


def test_the_out_of_core_runner_takes_the_marginals_plan(tmp_path):
    """plan marginals by subtree through release_to_dataset: the in-memory split release's
    values (same key) of the release NOT split, with the estimate dense and its per-cell std."""
    from hierdp.outofcore import release_to_dataset

    rng = np.random.default_rng(2)
    tree = hierdp.Tree.complete(fanout=4, height=4, level_names=["L1", "L2", "L3", "L4"])
    k = 4  # cells a x b = 2 x 2
    leaf = rng.poisson(3.0, (tree.n_leaves, k))
    values = tree.aggregate(leaf)
    internal = tree.to_internal(values)
    plan = {"name": "marginals", "params": {"cells": {"a": 2, "b": 2},
                                            "strategy": {(): 0.3, ("a",): 0.2, ("a", "b"): 0.5}}}
    kw = dict(epsilon=1.0, seed=9, plan=plan, postprocess=[])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        mem = hierdp.release(tree, values, **kw)  # not split: the plain in-memory GLS
        release_to_dataset(tree, lambda task: internal[task.nodes], tmp_path / "out", workdir=tmp_path / "w",
                           split="L2", n_cells=k, progress=False, dense=True, std=True, **kw)
    ds = pd.read_parquet(tmp_path / "out")
    assert len(ds) == tree.n_nodes * k
    est = np.asarray(mem.estimate.values, dtype=float).reshape(tree.n_nodes, k)
    var = np.asarray(mem.estimate.variance, dtype=float).reshape(tree.n_nodes, k)
    # dataset rows back to external node order: by path labels
    frame = mem.frame
    key_cols = [c for c in ["L1", "L2", "L3", "L4"] if c in frame.columns]
    mkey = frame[key_cols].astype("string").fillna("-").agg("/".join, axis=1) + "|" + frame["cell"].astype(str)
    dkey = ds[key_cols].astype("string").fillna("-").agg("/".join, axis=1) + "|" + ds["cell"].astype(str)
    want = pd.Series(frame["estimate"].to_numpy(float), index=mkey.to_numpy()).sort_index()
    got = pd.Series(ds["estimate"].to_numpy(float), index=dkey.to_numpy()).sort_index()
    assert got.index.equals(want.index)
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-12, atol=1e-9)
    wstd = pd.Series(frame["std"].to_numpy(float), index=mkey.to_numpy()).sort_index()
    gstd = pd.Series(ds["std"].to_numpy(float), index=dkey.to_numpy()).sort_index()
    np.testing.assert_allclose(gstd.to_numpy(), wstd.to_numpy(), rtol=1e-12)
    assert np.isfinite(est).all() and (var > 0).all()
