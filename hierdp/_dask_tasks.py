"""Subtree tasks on a Dask cluster: the task plumbing of :func:`hierdp.outofcore.release_to_dataset`
with ``executor=`` a :class:`distributed.Client`.

The out-of-core runner's per-task stages (measure + pass up; pass down + write the part)
run as Dask tasks; the client keeps the journal, the top solve and the ledger. This
module is only the plumbing (imported when a Dask executor is used, so ``import hierdp``
never imports ``distributed``): which object is a Dask client, shipping a constant to the
workers once, and running one stage's tasks with a bounded number in flight, the journal
written on the client as each task finishes, and a worker that died too often turned into
one line.

*Shipping.* A constant (the stage context: the resolved release, the partition and the
release key) is made a task of its own (``client.submit`` of an identity, not
``client.scatter``): its value lives on a worker, the scheduler keeps how to make it, so
when the worker holding it dies Dask makes it again instead of failing with lost data.
The release key travels inside that task: it is as secret as the data (use TLS between
machines, :doc:`/scale`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hierdp.errors import DataError, MissingDependencyError

__all__ = ["is_dask_client", "DaskStageRunner", "local_client"]


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:  # pragma: no cover - the dask extra
        raise MissingDependencyError("distributed", "dask") from None
    return distributed


def is_dask_client(obj: Any) -> bool:
    """Whether ``obj`` is a :class:`distributed.Client` (without importing ``distributed``
    when it is not loaded: then nothing can be a client)."""
    import sys

    mod = sys.modules.get("distributed")
    return mod is not None and isinstance(obj, mod.Client)


@contextmanager
def local_client(workers: int) -> Iterator[Any]:
    """The client of the Dask cluster this process already uses (``distributed.get_client``
    from inside a ``with Client(...)``, or the default client), else a new local cluster of
    ``workers`` processes with one thread each, closed on exit."""
    distributed = _distributed()
    try:
        client = distributed.get_client()
    except ValueError:
        client = None
    if client is not None:
        yield client
        return
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=40) as cluster, distributed.Client(cluster) as new:
        yield new


def _identity(obj: Any) -> Any:
    return obj


class DaskStageRunner:
    """One release's stages on a Dask cluster (the client side).

    Parameters
    ----------
    client : distributed.Client
        Where the tasks run.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        threads = sum(client.nthreads().values()) if client.nthreads() else 1
        #: tasks in flight at once: enough to keep every worker thread busy while the
        #: client reads the next counts, few enough that the client holds a few tasks' inputs
        self.window = max(2, 2 * int(threads))

    def ship(self, obj: Any) -> Any:
        """``obj`` as a future made by a task (recomputed if the worker holding it dies)."""
        return self.client.submit(_identity, obj, pure=False)

    def value(self, obj: Any) -> Any:
        """``obj``, or its value when it is a future (e.g. the top part's counts, used here)."""
        distributed = _distributed()
        return obj.result() if isinstance(obj, distributed.Future) else obj

    def run(self, what: str, todo: list[int], submit: Callable[[int], Any], done: Callable[[int], None]) -> None:
        """Submit ``submit(t)`` (a future) for each ``t`` of ``todo``, at most
        :attr:`window` at once, and call ``done(t)`` on the client as each finishes (in any
        order). The first failure cancels the rest and is raised: a worker error as itself
        (the task's own one-line error), a worker that died too often as one line."""
        distributed = _distributed()
        pending = iter(todo)
        running: dict[Any, int] = {}
        lock = threading.Lock()

        def more(ac: Any) -> None:
            for t in pending:
                fut = submit(t)
                with lock:
                    running[fut] = t
                ac.add(fut)
                if len(running) >= self.window:
                    break

        ac = distributed.as_completed([])
        try:
            more(ac)
            for fut in ac:
                with lock:
                    t = running.pop(fut)
                try:
                    fut.result()
                except distributed.KilledWorker:
                    raise DataError(f"{what}: the Dask workers running task {t} died repeatedly (more than "
                                    "distributed.scheduler.allowed-failures times; see the worker logs, e.g. "
                                    "memory); the work folder is resumable: fix the cause and run again with "
                                    "resume=True") from None
                done(t)
                fut.release()
                more(ac)
        except BaseException:
            with lock:
                futures = list(running)
            if futures:
                self.client.cancel(futures)
            raise
