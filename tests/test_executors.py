"""Executors as plugins (issue 49): where the tasks of a split release run.

A third-party executor written here runs the tasks last to first; it passes
:func:`hierdp.testing.check_executor` and its split release equals the inline one bit for bit.
Executors that break the contract are caught by it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

import hierdp
from hierdp import registry
from hierdp.errors import PluginError
from hierdp.execution import Executor, Inline, Threads, resolve_executor
from hierdp.pipeline import release_by_subtree
from hierdp.plugins import hookimpl
from hierdp.testing import check_executor
from tests.test_split import random_tree


class LastToFirst(Executor):
    """Runs every task, last to first, then yields the results in task order."""

    name = "last_to_first_test"

    closed: ClassVar[int] = 0  # how many instances were closed (the registry builds its own)

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers
        self.ran: list[Any] = []

    def close(self) -> None:
        LastToFirst.closed += 1

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        items = list(tasks)
        results: list[Any] = [None] * len(items)
        for i in reversed(range(len(items))):
            self.ran.append(i)
            results[i] = function(items[i])
        yield from results


class CompletionOrder(Executor):
    """Broken: yields in the order tasks ran (last to first), not in task order."""

    name = "completion_order_test"

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        for item in reversed(list(tasks)):
            yield function(item)


class SwallowsErrors(Executor):
    """Broken: a failed task is skipped silently."""

    name = "swallows_errors_test"

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        for item in tasks:
            try:
                yield function(item)
            except Exception:
                continue


def _nudge(x: Any) -> Any:
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.size:
        y = x.copy()
        y.flat[0] = np.nextafter(y.flat[0], np.inf)
        return y
    if isinstance(x, tuple):
        return tuple(_nudge(v) for v in x)
    return x


class NudgesFloats(Executor):
    """Broken: results in order, errors surfaced, but a float array's first value moved by one ulp
    (what a lossy transport between processes would do)."""

    name = "nudges_floats_test"

    def map(self, function: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        for item in tasks:
            yield _nudge(function(item))


class _Plugin:
    @hookimpl
    def hierdp_register_executors(self) -> list[type]:
        return [LastToFirst]


@pytest.fixture
def plugin() -> Iterator[None]:
    name = registry.register(_Plugin(), name="executor-test-plugin")
    try:
        yield
    finally:
        registry.unregister(name=name)


def test_a_third_party_executor_running_tasks_last_to_first_passes_the_contract() -> None:
    ex = LastToFirst()
    check_executor(ex)
    assert ex.ran[:3] == [11, 10, 9]  # it did run them last to first


def test_the_built_in_executors_pass_the_contract() -> None:
    check_executor("inline")
    check_executor(Threads(workers=2))


@pytest.mark.parametrize("broken, match", [
    (CompletionOrder(), "in task order"),
    (SwallowsErrors(), "exception must come out"),
    (NudgesFloats(), "differs from the inline one in its values"),
])
def test_the_contract_catches_a_broken_executor(broken: Executor, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        check_executor(broken)


def _case() -> tuple[hierdp.Tree, np.ndarray, dict[str, Any]]:
    t = random_tree(3000, 4, seed=31)
    rng = np.random.default_rng(5)
    vals = t.aggregate(rng.poisson(2.0, size=(t.n_leaves, 3)).astype(np.int64))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=9, postprocess=["blue", "nonneg", {"name": "round",
                                                                                  "method": "topdown"}])
    return t, vals, kw


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_plugin_executor_is_found_by_name_and_releases_what_inline_releases(plugin: None) -> None:
    assert "last_to_first_test" in registry.names("executor")
    LastToFirst.closed = 0
    t, vals, kw = _case()
    split = {"level": "L2", "memory": "64MiB", "task_memory": 60 * 3 * 300}
    want = hierdp.release(t, vals, split=split, **kw)
    got = hierdp.release(t, vals, split=split, executor="last_to_first_test", **kw)
    _same(want.estimate.values, got.estimate.values)
    _same(want.estimate.variance, got.estimate.variance)
    _same(want.measurements.values, got.measurements.values)
    assert LastToFirst.closed == 1  # the release built it from the name, so the release closed it
    own = LastToFirst()
    hierdp.release(t, vals, split=split, executor=own, **kw)
    assert LastToFirst.closed == 1  # a user's own executor is left open for the user
    made = resolve_executor("last_to_first_test", workers=3)
    assert isinstance(made, LastToFirst) and made.workers == 3  # built with workers= when it takes it


def test_streaming_by_subtree_runs_on_any_executor_with_the_same_numbers() -> None:
    t, vals, kw = _case()
    internal = t.to_internal(vals)
    split = {"level": "L2", "memory": "64MiB", "task_memory": 60 * 3 * 300}
    runs = []
    for executor in (None, "threads", LastToFirst()):
        got = np.full(internal.shape, -1, dtype=np.int64)

        def sink(task: Any, est: Any, meas: Any, got: np.ndarray = got) -> None:
            got[task.nodes] = est.values

        run = release_by_subtree(t, lambda task: internal[task.nodes], sink, split=split, n_cells=3,
                                        executor=executor, workers=2, **kw)
        assert run.partition.n_tasks > 3
        runs.append(got)
    _same(runs[0], runs[1])
    _same(runs[0], runs[2])
    assert (runs[0] >= 0).all()


def test_an_object_with_a_map_method_is_an_executor() -> None:
    class Duck:
        def map(self, function: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
            return (function(t) for t in tasks)

    duck = Duck()
    assert resolve_executor(duck) is duck
    assert isinstance(resolve_executor(None), Inline)
    assert isinstance(resolve_executor(None, workers=2), Threads)


def test_bad_executors_give_one_clear_line() -> None:
    t, vals, kw = _case()
    with pytest.raises(PluginError, match=r"unknown executor 'rayy'.*inline.*threads"):
        hierdp.release(t, vals, split="L2", executor="rayy", **kw)
    with pytest.raises(PluginError, match="executor must be a registered name or an object with a map"):
        hierdp.release(t, vals, split="L2", executor=3, **kw)
    with pytest.raises(ValueError, match="executor= runs the tasks of a release by subtree: give split="):
        hierdp.release(t, vals, executor="threads", **kw)


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


def test_a_spec_runs_its_tasks_on_a_plugin_executor_named_in_execution_engine(plugin: None, tmp_path: Any) -> None:
    """``execution.engine`` takes any registered executor: the out-of-core release of a spec
    runs its tasks on the plugin's executor (last to first) and writes the dataset the
    default threads write, part for part; an unknown name is one line listing the executors."""
    import warnings

    import pyarrow.parquet as pq

    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec, release_dataset_spec

    with pytest.raises(SpecError, match=r"execution\.engine must be one of local, spark, .*last_to_first_test"):
        load_spec(SPEC + "  engine: first_to_last\n")
    LastToFirst.closed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        release_dataset_spec(SPEC + "  engine: last_to_first_test\n", tmp_path / "plugin")
        release_dataset_spec(SPEC, tmp_path / "local")
    assert LastToFirst.closed == 1  # built from the name by the runner, closed by it
    a, b = ({p.name: pq.read_table(p) for p in sorted(d.glob("part-*.parquet"))} for d in (tmp_path / "plugin",
                                                                                            tmp_path / "local"))
    assert sorted(a) == sorted(b) and len(a) == 3 and all(a[n].equals(b[n]) for n in a)
