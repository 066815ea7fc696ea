"""The ``dask`` executor: the tasks of a split release as Dask tasks on a cluster
(:class:`DaskExecutor`; :func:`hierdp.outofcore.release_to_dataset` with ``executor=`` a
:class:`distributed.Client` or ``"dask"``).

The driver (:mod:`hierdp.execution.driver`) keeps the journal, the top solve and the
ledger; the workers run the stage functions and write the spills and parts. ``import
hierdp`` never imports ``distributed``: it is imported when a Dask executor runs.

*Shipping.* A constant (the stage context: the resolved release, the partition and the
release key) is made a task of its own (``client.submit`` of an identity, not
``client.scatter``): its value lives on a worker, the scheduler keeps how to make it, so
when the worker holding it dies Dask makes it again instead of failing with lost data.
The release key travels inside that task: it is as secret as the data (use TLS between
machines, :doc:`/scale`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from hierdp.errors import MissingDependencyError
from hierdp.execution.executors import Executor, WorkersDied

__all__ = ["is_dask_client", "DaskExecutor", "local_client"]

T = TypeVar("T")
R = TypeVar("R")


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


class DaskExecutor(Executor):
    """Tasks as Dask tasks on a cluster: the ``dask`` executor.

    Parameters
    ----------
    client : distributed.Client, optional
        Where the tasks run. Default: the client this process already uses, else a local
        cluster of ``workers`` processes started at the first :meth:`map` and closed by
        :meth:`close`.
    workers : int, default 2
        The local cluster's processes (unused with ``client``).

    Notes
    -----
    The tasks run in other processes (:attr:`local` is false): the driver reads each
    task's counts and top rows and ships them with it, and the stage context goes once
    (:meth:`share`). At most twice the cluster's threads are in flight. A task whose worker
    dies is rerun by Dask with the same keyed noise (the same result); past
    ``distributed.scheduler.allowed-failures`` deaths the stage stops with one line.
    """

    name = "dask"
    local = False

    def __init__(self, client: Any = None, workers: int = 2) -> None:
        self.client, self.workers = client, workers
        self._made: Any = None

    def _client(self) -> Any:
        if self.client is None:
            self._made = local_client(self.workers)
            self.client = self._made.__enter__()
        return self.client

    def share(self, obj: Any) -> Any:
        """``obj`` as a future made by a task (recomputed if the worker holding it dies)."""
        return self._client().submit(_identity, obj, pure=False)

    def fetch(self, obj: Any) -> Any:
        """``obj``, or its value when it is a future (e.g. the top part's counts, used here)."""
        distributed = _distributed()
        return obj.result() if isinstance(obj, distributed.Future) else obj

    def map(self, function: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        distributed = _distributed()
        client = self._client()
        threads = sum(client.nthreads().values()) if client.nthreads() else 1
        window = max(2, 2 * int(threads))
        pending: deque[Any] = deque()
        at = 0  # the position of the next result
        try:
            for task in tasks:
                pending.append(client.submit(function, task, pure=False))
                if len(pending) >= window:
                    yield self._result(pending.popleft(), at, distributed)
                    at += 1
            while pending:
                yield self._result(pending.popleft(), at, distributed)
                at += 1
        finally:
            if pending:
                client.cancel(list(pending))

    @staticmethod
    def _result(fut: Any, at: int, distributed: Any) -> Any:
        try:
            return fut.result()
        except distributed.KilledWorker:
            raise WorkersDied(at) from None
        finally:
            fut.release()

    def close(self) -> None:
        """Close the local cluster this executor started (a client given to it stays open)."""
        if self._made is not None:
            made, self._made, self.client = self._made, None, None
            made.__exit__(None, None, None)

    def __repr__(self) -> str:
        return f"DaskExecutor({'client' if self.client is not None else f'workers={self.workers}'})"
