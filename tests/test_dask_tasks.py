"""Subtree tasks on Dask (issue 32 item 3): ``release_to_dataset(..., executor=client)``.

The reference is the local out-of-core run (threads) and the in-memory split release with
the same key: noise is keyed per node, so a task run on a Dask worker process must write
exactly the part the local run writes. A worker process SIGKILLed mid-run is tested both
ways: Dask reruns its tasks (the same dataset), and past the allowed failures the run
stops with one line and the work folder resumes to the same dataset. One 2-process
LocalCluster serves the module.
"""

from __future__ import annotations

import json
import os
import re
import signal
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
pq = pytest.importorskip("pyarrow.parquet")

import hierdp  # noqa: E402
from hierdp.errors import DataError, MissingDependencyError  # noqa: E402
from hierdp.outofcore import SUCCESS, release_to_dataset  # noqa: E402

pytestmark = pytest.mark.cluster

LEVELS = ["state", "county", "tract", "block"]
_rng = np.random.default_rng(5)
_rows = [(f"s{s}", f"c{s}{c}", f"t{s}{c}{t}", f"b{s}{c}{t}{b}") for s in range(4) for c in range(6)
         for t in range(3) for b in range(12)]
TREE = hierdp.Tree.from_frame(pd.DataFrame(_rows, columns=LEVELS), LEVELS, domains="observed")
_leaf = _rng.integers(0, 5, size=(TREE.n_leaves, 2)) * (_rng.random((TREE.n_leaves, 1)) < 0.6)
VALUES = TREE.aggregate(_leaf)
INTERNAL = TREE.to_internal(VALUES)
#: 24 counties (subtrees), one per task: 7,000 B fit the top solve and one county (40 nodes x 2 cells x 60 B), not two
SPLIT = {"level": "county", "memory": 7000}
CELLS = {"sex": ["f", "m"]}
KWS = {
    "blue-topdown": dict(epsilon=2.0, seed=11, postprocess=[
        "blue", {"name": "nonneg", "params": {"method": "topdown"}}, {"name": "round", "params": {"method": "topdown"}}]),
    "marginals-invariant": dict(rho=1.0, seed=12, plan={"name": "marginals", "cells": CELLS,
                                                          "mechanism": "discrete_gaussian"}, invariants=["total", "state"],
                                allow_invariants_with_add_remove=True),
}


def counts_of(task):
    return INTERNAL[task.nodes]


def _run(out: Path, work: Path, kw: dict, counts=counts_of, **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return release_to_dataset(TREE, counts, out, workdir=work, split=SPLIT, n_cells=2, cells=CELLS,
                                  source_id="synthetic v1", progress=False, **kw, **extra)


def _tables(out: Path) -> dict[str, object]:
    return {p.name: pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))}


def _same_dataset(got: Path, want: Path) -> None:
    """Every part holds the same rows, values and types (the ledgers differ only by release id)."""
    a, b = _tables(got), _tables(want)
    assert sorted(a) == sorted(b) and len(a) == 25  # the top part and 24 tasks
    for name in a:
        assert a[name].equals(b[name]), name
        meta = a[name].schema.metadata
        assert json.loads(meta[b"hierdp.ledger"])["release_id"] == meta[b"hierdp.release_id"].decode()
    la, lb = (json.loads((d / "_ledger.json").read_text()) for d in (got, want))
    for d in (la, lb):
        for k in ("release_id", "created"):
            d.pop(k, None)
    assert la == lb
    assert (got / SUCCESS).exists()


@pytest.fixture(scope="module")
def client():
    # forked workers inherit the imported hierdp and this module (spawned ones would import them again)
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                                     silence_logs=50) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The local (threads) run of each configuration: the reference datasets."""
    d = tmp_path_factory.mktemp("local")
    for name, kw in KWS.items():
        _run(d / name, d / f"{name}.work", kw)
    return d


def test_the_job_has_at_least_20_subtree_tasks():
    part = hierdp.subtrees.partition(TREE, SPLIT, n_cells=2)
    assert part.roots.size == 24 and part.n_tasks == 24


@pytest.mark.parametrize("name", list(KWS))
def test_tasks_on_dask_write_the_local_dataset_bit_for_bit(client, local, tmp_path, name):
    pids = set(client.run(os.getpid).values())
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes, not this one
    out = tmp_path / "out"
    _run(out, tmp_path / "work", KWS[name], executor=client)
    _same_dataset(out, local / name)
    # and the in-memory split release with the same key: the same estimates
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        mem = hierdp.release(TREE, VALUES, split=SPLIT, **KWS[name]).frame
    ds = pd.read_parquet(out)
    key = ds[LEVELS].astype("string").fillna("-").agg("/".join, axis=1) + "|" + ds["sex"].astype(str)
    got = pd.Series(ds["estimate"].to_numpy(), index=key.to_numpy()).sort_index()
    mkey = (mem[LEVELS].astype("string").fillna("-").agg("/".join, axis=1) + "|"
            + np.where(mem["cell"] == 0, "f", "m"))
    want = pd.Series(mem["estimate"].to_numpy(), index=mkey.to_numpy()).sort_index()
    want = want[want != 0] if np.issubdtype(want.dtype, np.integer) else want
    assert got.equals(want)


def _die_first_time(counts: np.ndarray, marker: str) -> np.ndarray:
    """Runs on a worker: SIGKILLs its own process the first time (no marker yet)."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return counts


def _die_always(counts: np.ndarray) -> np.ndarray:
    os.kill(os.getpid(), signal.SIGKILL)
    return counts  # pragma: no cover


def test_a_worker_killed_mid_run_is_retried_to_the_same_result(client, local, tmp_path):
    """Task 7's counts are made on a worker that SIGKILLs itself the first time: Dask reruns
    what that worker held on the other one (and on the restarted one); the keyed noise makes
    the rerun the same, so the dataset is the local one."""
    marker = tmp_path / "killed-once"
    before = set(client.run(os.getpid).values())

    def counts(task):
        if task.index == 7:
            return client.submit(_die_first_time, INTERNAL[task.nodes], str(marker), pure=False)
        return INTERNAL[task.nodes]

    out = tmp_path / "out"
    _run(out, tmp_path / "work", KWS["blue-topdown"], counts=counts, executor=client)
    assert marker.exists()
    client.wait_for_workers(2, timeout=60)
    assert set(client.run(os.getpid).values()) != before  # a worker process did die (and was restarted)
    _same_dataset(out, local / "blue-topdown")


def test_a_worker_dying_every_time_stops_with_one_line_and_resumes(client, local, tmp_path):
    """Past the scheduler's allowed failures (0 here) the run stops with one line naming the
    task and the fix; the work folder then resumes (locally, even) to the same dataset."""
    def counts(task):
        if task.index == 3:
            return client.submit(_die_always, INTERNAL[task.nodes], pure=False)
        return INTERNAL[task.nodes]

    def allowed(n):
        def set_it(dask_scheduler, n=n):
            old = dask_scheduler.allowed_failures
            dask_scheduler.allowed_failures = n
            return old
        return client.run_on_scheduler(set_it)

    out, work = tmp_path / "out", tmp_path / "work"
    old = allowed(0)
    try:
        with pytest.raises(DataError) as err:
            _run(out, work, KWS["blue-topdown"], counts=counts, executor=client)
    finally:
        allowed(old)
    text = str(err.value)
    # the task that died, or another one running on the same worker when it died (0 failures allowed)
    assert "\n" not in text and re.search(r"running task \d+ died repeatedly", text) and "resume=True" in text
    assert not (out / SUCCESS).exists()
    assert not [p for p in out.glob("*") if p.name.startswith(".")]  # no half-written part left behind
    client.wait_for_workers(2, timeout=60)
    _run(out, work, KWS["blue-topdown"], resume=True, executor=client)
    _same_dataset(out, local / "blue-topdown")


def test_a_bad_task_raises_its_own_error_from_the_worker(client, tmp_path):
    """A task's one-line error raised on a worker reaches the caller as itself."""
    def counts(task):
        return INTERNAL[task.nodes][:, :1] if task.index == 5 else INTERNAL[task.nodes]

    with pytest.raises(DataError, match=r"^counts_of\(task 5\) must return shape"):
        _run(tmp_path / "out", tmp_path / "work", KWS["blue-topdown"], counts=counts, executor=client)


def test_an_unknown_executor_name_is_refused_before_anything_is_written(tmp_path):
    from hierdp.errors import PluginError

    with pytest.raises(PluginError, match="dusk"):
        _run(tmp_path / "out", tmp_path / "work", KWS["blue-topdown"], executor="dusk")
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_the_dask_executor_by_name_uses_this_process_client(client, tmp_path):
    """``executor="dask"`` (the registered executor) runs on the client this process has:
    the dataset of the local runner, part for part."""
    with distributed.get_task_stream(client) as ts:
        _run(tmp_path / "dask", tmp_path / "w1", KWS["blue-topdown"], executor="dask")
    _run(tmp_path / "local", tmp_path / "w2", KWS["blue-topdown"])
    ran = {t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in ts.data}
    assert any(str(k).startswith("measure_task") for k in ran)
    _same_dataset(tmp_path / "dask", tmp_path / "local")


def test_a_missing_distributed_names_the_extra(monkeypatch):
    import sys

    from hierdp.execution import dask as _dask_tasks

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'hierdp\[dask\]'"):
        with _dask_tasks.local_client(2):
            pass
    assert not _dask_tasks.is_dask_client(object())


SPEC = """hierdp: 1
source:
  demo: census
hierarchy:
  root: total
  paths:
    demo: census
  levels:
    - name: state
    - name: county
    - name: tract
privacy:
  epsilon: 1.0
seed: 3
execution:
  split: county
  memory: 9kB
"""


def test_spec_execution_engine_dask_writes_the_local_dataset(client, tmp_path):
    """``execution.engine: dask`` runs the spec's tasks on the client this process has;
    ``local`` (the default) on threads: the same dataset."""
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec, release_dataset_spec

    assert "engine" not in load_spec(SPEC).execution
    assert load_spec(SPEC + "  engine: dask\n").execution["engine"] == "dask"
    with pytest.raises(SpecError, match="engine"):
        load_spec(SPEC + "  engine: thread\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        release_dataset_spec(SPEC + "  engine: local\n", tmp_path / "local")
        with distributed.get_task_stream(client) as ts:
            release_dataset_spec(SPEC + "  engine: dask\n", tmp_path / "dask")
    ran = {t["key"][0] if isinstance(t["key"], tuple) else t["key"] for t in ts.data}
    assert any(k.startswith("measure_task") for k in ran) and any(k.startswith("pass_down_task") for k in ran)
    a, b = _tables(tmp_path / "dask"), _tables(tmp_path / "local")
    assert sorted(a) == sorted(b) and len(a) == 3  # the top part and 2 tasks
    assert all(a[n].equals(b[n]) for n in a)


def test_the_dask_door_counts_each_task_on_the_cluster(client, tmp_path):
    """``ddf.dptree(...).counted_on(client, partition)``: every partition counted on a
    worker, split by task, each task's counts summed on a worker (a future): the dataset
    equals the local run from the door's whole counts; the pandas error for a bad value."""
    dd = pytest.importorskip("dask.dataframe")
    leaf_rows = np.repeat(np.arange(TREE.n_leaves), _leaf.sum(axis=1))
    sex = np.concatenate([np.repeat(["f", "m"], c) for c in _leaf])
    paths = pd.DataFrame(_rows, columns=LEVELS)  # leaves in the order of _leaf (TREE's leaf order)
    leaves_ext = np.asarray(TREE.leaves)
    labels = pd.DataFrame({lv: [TREE.path(int(v))[i] for v in leaves_ext] for i, lv in enumerate(LEVELS)})
    records = labels.iloc[leaf_rows].reset_index(drop=True).assign(sex=sex)
    domains = {"state": sorted(paths["state"].unique()),
               **{lv: paths.groupby(up)[lv].apply(lambda s: sorted(s.unique())).to_dict()
                  for up, lv in zip(LEVELS[:-1], LEVELS[1:])}}
    door = dd.from_pandas(records, npartitions=4).dptree(levels=LEVELS, domains=domains, cells=CELLS)
    tree = door.tree
    part = hierdp.subtrees.partition(tree, SPLIT, n_cells=2)
    assert part.n_tasks == 24
    whole = tree.to_internal(door.node_values()[0])
    assert whole[0].sum() == len(records)
    counted = door.counted_on(client, part)
    assert counted.notes == {}
    for t in (0, 13):  # a task's counts come back only when asked, here for the test
        task = part.task(t)
        np.testing.assert_array_equal(counted.counts_of(task).result(), whole[task.nodes])

    def run(out, counts, **extra):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
            release_to_dataset(tree, counts, out, workdir=tmp_path / f"{out.name}.work", split=SPLIT, n_cells=2,
                               cells=CELLS, progress=False, **KWS["blue-topdown"], **extra)

    run(tmp_path / "local", lambda task: whole[task.nodes])
    run(tmp_path / "dask", counted.counts_of, executor=client)
    a, b = _tables(tmp_path / "dask"), _tables(tmp_path / "local")
    assert sorted(a) == sorted(b) and len(a) == 25 and all(a[n].equals(b[n]) for n in a)

    bad = records.copy()
    bad.loc[len(bad) // 2, "sex"] = "x"
    with pytest.raises(DataError) as pandas_err:
        bad.dptree(levels=LEVELS, domains=domains, cells=CELLS).true_counts()
    with pytest.raises(DataError) as dask_err:
        dd.from_pandas(bad, npartitions=4).dptree(levels=LEVELS, domains=domains, cells=CELLS).counted_on(client,
                                                                                                           part)
    assert str(dask_err.value) == str(pandas_err.value)


FILE_SPEC = """hierdp: 1
source: {{path: 'records.csv', engine: {engine}}}
hierarchy:
  levels:
    - {{name: state, domain: observed}}
    - {{name: county, domain: observed}}
    - {{name: tract, domain: observed}}
    - {{name: block, domain: observed}}
cells:
  - {{name: sex, domain: [f, m]}}
privacy: {{epsilon: 2}}
seed: 5
execution: {{split: county, memory: 7000{tasks}}}
"""


def test_spec_source_engine_dask_counts_each_task_on_the_cluster(client, tmp_path):
    """``source.engine: dask`` with a dataset output: counted per task on the cluster, and
    the same dataset as ``engine: pandas`` (the tasks on Dask too)."""
    from hierdp.spec.runner import release_dataset_spec

    leaf_rows = np.repeat(np.arange(TREE.n_leaves), _leaf.sum(axis=1))
    leaves_ext = np.asarray(TREE.leaves)
    labels = pd.DataFrame({lv: [TREE.path(int(v))[i] for v in leaves_ext] for i, lv in enumerate(LEVELS)})
    labels.iloc[leaf_rows].assign(sex=np.concatenate([np.repeat(["f", "m"], c) for c in _leaf])).to_csv(
        tmp_path / "records.csv", index=False)
    outs = {}
    for engine, tasks in (("pandas", ""), ("dask", ", engine: dask")):
        spec = tmp_path / f"{engine}{bool(tasks)}.yaml"
        spec.write_text(FILE_SPEC.format(engine=engine, tasks=tasks))
        out = tmp_path / f"out-{spec.stem}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
            release_dataset_spec(spec, out)
        outs[spec.stem] = _tables(out)
    ref = outs.pop("pandasFalse")
    assert len(ref) == 13  # the top part and 12 tasks (observed domains: the counties with records)
    for got in outs.values():
        assert sorted(got) == sorted(ref) and all(got[n].equals(ref[n]) for n in ref)


def test_the_dask_executor_keeps_the_executor_contract(client):
    """``check_executor`` on the ``dask`` executor: results in order, a task's exception as
    itself, and an in-memory release by subtree (its tasks in other processes, their state
    shipped by the driver) equal to the inline one bit for bit."""
    from hierdp.execution import DaskExecutor
    from hierdp.testing import check_executor

    check_executor(DaskExecutor(client))
