"""How many threads hierdp's O(n) passes may use, and the pool they run in.

The setting is, first that is set: :func:`set_threads`, the ``HIERDP_THREADS``
environment variable, the number of cores this process may run on. ``1`` gives
single-threaded behaviour. Work is always cut into pieces that do not depend on the
setting (chunks of a fixed number of draws, slices of a height class cut at parent
boundaries), and each piece is computed the same way whichever thread runs it, so a
release is bit-identical whatever the thread count (tested).

Kernels release the GIL (numba ``nogil=True``), so plain Python threads run them in
parallel; pieces are handed out by :func:`run_pieces`.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np

__all__ = ["THREADS_ENV", "MAX_THREADS", "get_threads", "set_threads", "run_pieces", "parse_threads", "spans",
           "zero_in_pieces", "prefault"]

THREADS_ENV = "HIERDP_THREADS"
_T = TypeVar("_T")
_chosen: int | None = None
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_pool_pid = 0
_lock = threading.Lock()
_PREFIX = "hierdp-pieces"


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


#: The most threads any setting may ask for (:func:`set_threads`, ``HIERDP_THREADS``,
#: ``--threads``, ``workers``, the dataset door's ``threads``). More is refused, not
#: clamped: a count this large is a slip (``10**6`` made DuckDB start a million threads
#: and never finish), and a silent clamp would hide it. 1024 is above the cores of the
#: machines hierdp runs on, and DuckDB starts that many in a quarter of a second (measured).
MAX_THREADS = 1024


def parse_threads(value: Any, where: str) -> int:
    """``value`` as a thread count in ``1 ..`` :data:`MAX_THREADS` (an int, or a string of
    digits); else a one-line ValueError naming ``where``."""
    import numbers

    n = 0
    if isinstance(value, str) and value.strip().isdigit():
        n = int(value.strip()) if len(value.strip()) < 20 else MAX_THREADS + 1
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        n = int(value)
    if n < 1:
        raise ValueError(f"{where} must be a whole number of threads >= 1 (1 = single-threaded), got {value!r:.40}")
    if n > MAX_THREADS:
        raise ValueError(f"{where} must be at most {MAX_THREADS} threads (this process may use {_cores()} cores; "
                         f"more threads than cores gain nothing), got {value!r:.40}")
    return n


def get_threads() -> int:
    """The number of threads hierdp's passes use now (see :func:`set_threads`).

    Returns
    -------
    int
        The setting of :func:`set_threads`, else ``HIERDP_THREADS``, else the cores this
        process may use.
    """
    if _chosen is not None:
        return _chosen
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        return parse_threads(env, THREADS_ENV)
    return _cores()


def set_threads(threads: int | None) -> int | None:
    """Use ``threads`` threads for hierdp's O(n) passes (noise, aggregation, BLUE, GMC,
    ``nonneg``, ``round``); ``None`` goes back to ``HIERDP_THREADS`` or the number of
    cores. Returns the previous setting (``None`` when none was set), so that::

        old = hierdp.set_threads(1)
        ...
        hierdp.set_threads(old)

    restores it. Results do not depend on the setting, only the time they take.

    Parameters
    ----------
    threads : int or None
        The thread count (``1``: single-threaded; at most :data:`MAX_THREADS`, 1024), or
        ``None`` for the default.

    Returns
    -------
    int or None
        The previous setting.
    """
    global _chosen
    previous = _chosen
    _chosen = None if threads is None else parse_threads(threads, "threads")
    return previous


def _executor(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_size, _pool_pid
    with _lock:
        if _pool is None or _pool_size != n or _pool_pid != os.getpid():  # a forked child needs its own
            if _pool is not None and _pool_pid == os.getpid():
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix=_PREFIX)
            _pool_size, _pool_pid = n, os.getpid()
        return _pool


def run_pieces(fn: Callable[[_T], Any], pieces: Sequence[_T]) -> list[Any]:
    """``[fn(p) for p in pieces]``, on up to :func:`get_threads` threads (in this thread
    when one suffices). Results come back in the order of ``pieces``; the first error
    raised by a piece is raised here once every piece has finished."""
    n = min(get_threads(), len(pieces))
    if n <= 1 or threading.current_thread().name.startswith(_PREFIX):  # nested: never wait on our own pool
        return [fn(p) for p in pieces]
    # n - 1 pool threads and this one take the pieces in turn from one counter (next() on
    # itertools.count holds the GIL): one task per thread, not one per piece (a task's
    # submit and wake-up cost tens of microseconds; a pass has up to a few hundred pieces)
    results: list[Any] = [None] * len(pieces)
    errors: list[BaseException | None] = [None] * len(pieces)
    turn = itertools.count()

    def work() -> None:
        while (i := next(turn)) < len(pieces):
            try:
                results[i] = fn(pieces[i])
            except BaseException as e:  # noqa: BLE001 -- raised below, in piece order
                errors[i] = e

    pool = _executor(get_threads() - 1)  # one pool size per setting (a pool is not rebuilt per call)
    if SPREAD:
        away = _Away(_cpu())
        helpers = [pool.submit(away.run, work) for _ in range(n - 1)]
    else:
        helpers = [pool.submit(work) for _ in range(n - 1)]
    work()
    for h in helpers:
        h.result()
    for e in errors:
        if e is not None:
            raise e
    return results


#: ``True``: a pool thread woken onto the CPU the calling thread runs on moves to another
#: of this process's CPUs before it takes pieces (see :class:`_Away`)
SPREAD = True


def _cpu_reader() -> Callable[[], int]:
    """``sched_getcpu()`` of glibc (the CPU the calling thread runs on), else ``-1``."""
    try:
        import ctypes

        f = ctypes.CDLL(None).sched_getcpu
        f.restype = ctypes.c_int
        f.argtypes = []
        f()
    except (AttributeError, OSError):  # pragma: no cover - not glibc
        return lambda: -1
    return f


_cpu = _cpu_reader()


class _Away:
    """Runs a pool thread's share of :func:`run_pieces` off the caller's CPU.

    Linux wakes a thread, by preference, on the CPU of the thread that wakes it when that
    looks cheap (``wake_affine``): a pool thread woken by ``submit`` then shares the
    caller's CPU while the other core idles, until the load balancer moves one of them,
    which for a thread that sleeps between short passes takes many passes: a process's
    first calls on two threads then run at the one-thread time. When the pool thread
    finds itself on the caller's CPU it narrows its affinity to the others (the kernel
    moves it at once), runs, and widens it back to what it was, so that it never stays
    pinned. No-op where the CPU cannot be read or one CPU is allowed."""

    __slots__ = ("cpu",)

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu

    def run(self, work: Callable[[], None]) -> None:
        mask = _affinity()
        if self.cpu < 0 or _cpu() != self.cpu or mask is None or len(mask - {self.cpu}) == 0:
            work()
            return
        try:
            os.sched_setaffinity(0, mask - {self.cpu})  # 0: this thread (Linux)
        except OSError:  # pragma: no cover - a CPU went offline, a container's rules
            work()
            return
        try:
            work()
        finally:
            try:
                os.sched_setaffinity(0, mask)
            except OSError:  # pragma: no cover
                pass


def _affinity() -> set[int] | None:
    """The CPUs this thread may run on (None where the OS does not say)."""
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return None


def spans(stop: int, step: int) -> list[tuple[int, int]]:
    """``[0, stop)`` cut into ranges of ``step`` (the last one shorter): the pieces of a
    flat pass, which depend on ``stop`` only, not on the thread count."""
    return [(i, min(i + step, stop)) for i in range(0, stop, step)]


def zero_in_pieces(arrays: Sequence[Any], stop: int, step: int = 1 << 19) -> None:
    """``a[:stop] = 0`` (rows ``[0, stop)``) for each C-contiguous array, in pieces on
    every thread (single-threaded it was a serial step between parallel passes)."""
    from hierdp._kernels.kernel_common import zero_range  # compiled: not loaded with the package

    if not all(a.flags.c_contiguous for a in arrays):  # reshape(-1) would zero a copy
        raise ValueError("zero_in_pieces needs C-contiguous arrays")
    flats = [(a.reshape(-1), math.prod(a.shape[1:])) for a in arrays]  # elements per row

    def zero(r: tuple[int, int]) -> None:
        for flat, k in flats:
            zero_range(flat, r[0] * k, r[1] * k)

    run_pieces(zero, spans(stop, step))


#: arrays smaller than this are not worth a separate touch of their pages
PREFAULT_MIN = 1 << 23


def prefault(a: np.ndarray) -> np.ndarray:
    """Fault a newly allocated array's pages in from this thread (one write of 0 per 4 KiB
    page: its contents are lost), before pieces fill it on several threads; returns ``a``.

    The OS zeroes each new page as it is first written: on the development VM at 23.6 GB/s
    on one thread and only 32 GB/s on two, and faults taken inside the threads' passes
    made their times erratic. Aggregation with its copy in pieces gained 0.87-1.53x on 2
    threads with the faults inside the pieces and 1.27-1.35x touched first, against
    1.20-1.32x for the serial copy it replaced (census-like and random trees, 12M nodes,
    interleaved runs). BLUE's and GMC's outputs gained nothing from it and are not
    touched (docs/appendix/performance-log.md, "Fresh pages"). No-op below :data:`PREFAULT_MIN`
    bytes."""
    if a.nbytes >= PREFAULT_MIN and a.flags.c_contiguous:
        flat = a.reshape(-1)
        flat[:: max(1, 4096 // a.itemsize)] = 0
    return a
