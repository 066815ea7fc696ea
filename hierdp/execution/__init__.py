"""How a release runs: its steps (:mod:`~hierdp.execution.steps`), the one count check
(:mod:`~hierdp.execution.counts`), the split stages (:mod:`~hierdp.execution.stages`) and
the one driver of a split release (:mod:`~hierdp.execution.driver`) over an executor
(:mod:`~hierdp.execution.executors`), a state store (:mod:`~hierdp.execution.stores`) and a sink.

Built-in executors are registered through the ``hierdp_register_executors`` hook, the same
path a third-party executor takes.
"""

from __future__ import annotations

from hierdp.execution.dask import DaskExecutor
from hierdp.execution.executors import Executor, Inline, Threads, resolve_executor
from hierdp.plugins.markers import hookimpl

__all__ = ["Executor", "Inline", "Threads", "DaskExecutor", "resolve_executor"]


@hookimpl
def hierdp_register_executors() -> list[type]:
    return [Inline, Threads, DaskExecutor]
