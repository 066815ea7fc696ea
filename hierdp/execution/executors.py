"""Executors: where the tasks of a split release run.

A split release (:mod:`hierdp.subtrees`) runs two stages of independent tasks: the
measurement and pass up of each task, then, once the levels above the split are solved,
each task's pass down. An **executor** runs one stage: ``executor.map(function, tasks)``
returns an iterator over ``function(task)`` for every task, **in the order of** ``tasks``,
whatever order it ran them in; an exception raised by a task comes out of the iteration.
A task writes only its own rows or files; the journal, the top solve and the ledger stay
in the calling thread, which receives the results in order. So an executor may run the
tasks in any order, at once or one after another, and the release is the same bit for bit
(the noise is keyed per node, never drawn from a shared stream).

Built-ins: ``inline`` (one after another in the calling thread), ``threads`` (on
``workers`` threads, at most ``workers + 1`` tasks in flight, so that memory holds a
bounded number of tasks) and ``dask`` (:class:`hierdp.execution.dask.DaskExecutor`, Dask
tasks on a cluster). Third-party executors register through the
``hierdp_register_executors`` hook (or the ``hierdp`` entry-point group), like every other
extension point; :func:`hierdp.testing.check_executor` is the contract every executor passes.

>>> from hierdp.execution import Threads
>>> list(Threads(workers=2).map(lambda x: x * x, range(5)))
[0, 1, 4, 9, 16]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar, cast

from hierdp import registry
from hierdp._kernels import threads as _threads
from hierdp.errors import DataError, PluginError
from hierdp.plugins.params import declaration

__all__ = ["Executor", "Inline", "Threads", "WorkersDied", "resolve_executor", "close_executor"]

T = TypeVar("T")
R = TypeVar("R")


class WorkersDied(DataError):
    """The workers running the task at ``position`` (in the order of the tasks given to
    ``map``) died more often than the cluster allows; the driver names the task."""

    def __init__(self, position: int) -> None:
        self.position = position
        super().__init__(f"the workers running the task at position {position} died repeatedly (more than the "
                         "cluster allows; see the worker logs, e.g. memory)")


class Executor:
    """Base class of executors (registered through ``hierdp_register_executors``).

    Subclasses set :attr:`name` and implement :meth:`map`; :meth:`close` releases what the
    executor holds (threads, a cluster's connection) and is called when the release ends.
    An executor is a context manager (``with`` closes it).
    """

    #: the registry name (``release(..., executor=name)``, a spec's ``execution.engine``)
    name: ClassVar[str] = ""
    #: whether tasks run in this process (sharing its memory): each task then reads its own
    #: inputs; otherwise the driver reads them and ships them with the task (picklable)
    local: ClassVar[bool] = True

    def share(self, obj: Any) -> Any:
        """``obj`` (the release's stage context) as the tasks receive it: itself here; a
        cluster's executor ships it once and returns its handle."""
        return obj

    def fetch(self, obj: Any) -> Any:
        """The value of ``obj`` in this process (a cluster's future resolved; else itself)."""
        return obj

    def map(self, function: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """``function(task)`` for every task, yielded in the order of ``tasks``.

        Parameters
        ----------
        function
            A task's work: pure (it returns what it computes and changes no shared state), so
            that it may run in any order, in any thread.
        tasks
            The tasks, consumed lazily or at once as the executor needs (an executor that runs
            them out of order holds them all, and their inputs, at once).

        Returns
        -------
        Iterator
            The results in task order. An exception raised by ``function`` is raised by the
            iteration (no later result is yielded after it).
        """
        raise NotImplementedError(f"executor {self.name or type(self).__name__!r} does not implement map()")

    def close(self) -> None:
        """Release what the executor holds; the default holds nothing."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Inline(Executor):
    """Every task in the calling thread, one after another (each task's kernels still use
    every thread of :func:`hierdp.set_threads`)."""

    name = "inline"

    def map(self, function: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        for task in tasks:
            yield function(task)


class Threads(Executor):
    """Tasks on ``workers`` threads of this process, at most ``workers + 1`` in flight.

    Parameters
    ----------
    workers
        Threads that run tasks at once (default 2). The threads' names start with the kernel
        pool's prefix, so the kernels a task calls run their pieces in that thread: two tasks
        at once already keep two cores busy. With 1, tasks run inline.
    """

    name = "threads"

    def __init__(self, workers: int = 2) -> None:
        self.workers = _threads.parse_threads(workers, "workers")

    def map(self, function: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        if self.workers <= 1:
            yield from Inline().map(function, tasks)
            return
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=_threads._PREFIX + "-task")
        pending: deque[Future[R]] = deque()
        try:
            for task in tasks:
                pending.append(pool.submit(function, task))
                if len(pending) > self.workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:  # an error (or the caller stopping): nothing new starts
                f.cancel()
            pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"Threads(workers={self.workers})"


def resolve_executor(executor: Any = None, workers: Any = 1) -> Executor:
    """The executor of a split release.

    Parameters
    ----------
    executor
        ``None`` (``threads`` on ``workers`` threads, ``inline`` for one), a registered name
        (``"inline"``, ``"threads"`` or a plugin's; built with ``workers`` when its constructor
        takes it), or an object with a ``map(function, tasks)`` method (an :class:`Executor`
        or any object of that shape).
    workers
        Threads (or processes) that run tasks at once.

    Returns
    -------
    Executor
        An object whose ``map`` yields results in task order.
    """
    n = _threads.parse_threads(workers, "workers")
    if executor is None:
        return Threads(n) if n > 1 else Inline()
    if isinstance(executor, str):
        decl = declaration(registry.get("executor", executor))
        params = {"workers": n} if "workers" in decl.params or decl.open else {}
        made: Executor = registry.create("executor", executor, **params)
        return made
    if callable(getattr(executor, "map", None)):
        return cast(Executor, executor)
    raise PluginError(f"executor must be a registered name or an object with a map(function, tasks) method; got "
                      f"{type(executor).__name__}")


def close_executor(executor: Any) -> None:
    """Call ``executor.close()`` when it has one (an object of the executor shape need not)."""
    close = getattr(executor, "close", None)
    if callable(close):
        close()
