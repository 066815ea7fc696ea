"""Where and how a split release runs: executors (:mod:`hierdp.execution.executors`).

Built-in executors are registered through the ``hierdp_register_executors`` hook, the same
path a third-party executor takes.
"""

from __future__ import annotations

from hierdp.execution.executors import Executor, Inline, Threads, resolve_executor
from hierdp.plugins.markers import hookimpl

__all__ = ["Executor", "Inline", "Threads", "resolve_executor"]


@hookimpl
def hierdp_register_executors() -> list[type]:
    return [Inline, Threads]
