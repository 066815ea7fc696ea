"""The contract every executor passes (:mod:`hierdp.execution`).

>>> from hierdp.execution import Threads
>>> from hierdp.testing import check_executor
>>> check_executor(Threads(workers=2))
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

import hierdp
from hierdp.execution import resolve_executor

__all__ = ["check_executor"]


class ExecutorContractError(AssertionError):
    """An executor broke the contract of :class:`hierdp.execution.Executor`."""


class _Planted(Exception):
    """The exception a task raises on purpose; it must come out of the executor's iteration."""


def _slow_first(i: int) -> tuple[int, int]:
    # the early tasks take longest, so an executor that runs tasks at once finishes them last
    time.sleep(0.002 * max(0, 6 - i))
    return i, i * i


def _raise_at_three(i: int) -> int:
    if i == 3:
        raise _Planted("task 3 failed on purpose")
    return i


def _tasks(n: int) -> Iterator[int]:
    yield from range(n)  # a generator, not a list: an executor must not need len() or indexing


def _release_pair(executor: Any, chain: list[Any]) -> tuple[Any, Any, str]:
    rng = np.random.default_rng(20261129)
    parent: list[int] = [-1]  # a root, 4 children, 5 under each, 6 under each of those: 145 nodes
    level = [0]
    for fanout in (4, 5, 6):
        below = []
        for p in level:
            for _ in range(fanout):
                below.append(len(parent))
                parent.append(p)
        level = below
    tree = hierdp.Tree.from_parent(np.asarray(parent))
    leaves = rng.poisson(3.0, size=(tree.n_leaves, 2)).astype(np.int64)
    values = tree.aggregate(leaves)
    kw: dict[str, Any] = dict(epsilon=1.0, seed=11, split={"level": 2, "memory": 6_000, "task_memory": 3_000},
                              postprocess=chain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.errors.NotForPublicationWarning)
        want = hierdp.release(tree, values, executor="inline", **kw)
        got = hierdp.release(tree, values, executor=executor, **kw)
    return want, got, f"a 145-node tree, 2 cells, split at depth 2 into 7 tasks, {' -> '.join(map(str, chain))}"


def check_executor(executor: Any) -> None:
    """Check that ``executor`` keeps the contract of :class:`hierdp.execution.Executor`.

    1. ``map(function, tasks)`` yields ``function(task)`` for every task **in task order**,
       whatever order the tasks ran in (the early tasks here take longest), from tasks given
       as a generator;
    2. an exception raised by a task comes out of the iteration, as itself;
    3. a release by subtree run by ``executor`` equals the one run inline **bit for bit**
       (values, variances, measurements, the ledger but its id and time): the noise is keyed per node, so
       where and in what order the tasks run must not matter.

    Parameters
    ----------
    executor
        An executor object (with a ``map(function, tasks)`` method) or a registered name.

    Raises
    ------
    AssertionError
        Naming the first part of the contract that fails.
    """
    ex = resolve_executor(executor)
    got = list(ex.map(_slow_first, _tasks(12)))
    if got != [(i, i * i) for i in range(12)]:
        raise ExecutorContractError(f"executor {ex!r}: map() must yield the results in task order; got task order "
                                    f"{[g[0] if isinstance(g, tuple) else g for g in got]}")
    try:
        out = list(ex.map(_raise_at_three, _tasks(8)))
    except _Planted:
        pass
    else:
        raise ExecutorContractError(f"executor {ex!r}: a task's exception must come out of map()'s iteration; "
                                    f"it yielded {len(out)} results and no exception")
    # the real-valued GLS estimate (every bit of the tasks' floats reaches it) and the integer
    # chain (whose steps read the GLS values to 32 bits: a lost ulp would not show there)
    for chain in (["blue"], ["blue", "nonneg", "round"]):
        want, got_release, what = _release_pair(ex, chain)
        for name, a, b in [("values", want.estimate.values, got_release.estimate.values),
                           ("variances", want.estimate.variance, got_release.estimate.variance),
                           ("measurements", want.measurements.values, got_release.measurements.values)]:
            if a is None and b is None:
                continue
            if a is None or b is None or a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                raise ExecutorContractError(f"executor {ex!r}: the release by subtree ({what}) differs from the "
                                            f"inline one in its {name}: an executor must not change a release's "
                                            "numbers")
    a_led, b_led = want.ledger.to_dict(), got_release.ledger.to_dict()
    for key in ("release_id", "created"):  # per release, whatever the executor
        a_led.pop(key, None)
        b_led.pop(key, None)
    if a_led != b_led:
        raise ExecutorContractError(f"executor {ex!r}: the release's ledger differs from the inline run's in "
                                    f"{sorted(k for k in a_led if a_led[k] != b_led.get(k))}")
