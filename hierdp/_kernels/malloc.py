"""glibc's allocator told to keep freed memory for reuse: :func:`keep_freed_memory`.

A split release runs its tasks on threads, and each task allocates and frees arrays of
hundreds of MB (a census task: 143 MB per ``(nodes, 2,016)`` float64 array). glibc serves
a thread other than the main one from an arena of its own whose heaps grow to 64 MB at
most, so every larger block is a fresh ``mmap`` and goes back to the operating system on
``free`` -- ``M_MMAP_MAX=0`` does not stop it (a thread arena that cannot grow maps
anyway). The next array's pages are then faulted in and zeroed again, 2 MiB at a time:
on the census shape, a third of the CPU. One arena, no ``mmap`` for large blocks and no
trimming keep those pages for reuse, at the same peak RSS.

This module imports nothing heavy: the command line calls it before numpy starts its
threads (the arena limit holds only for arenas not made yet).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["keep_freed_memory", "MALLOC_ENV"]

#: ``HIERDP_MALLOC=system`` leaves the allocator as it is (the command line otherwise calls
#: :func:`keep_freed_memory`)
MALLOC_ENV = "HIERDP_MALLOC"

# glibc's <malloc.h>
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8

_done: list[bool] = []


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory and reuse it (one arena for every thread, no ``mmap``
    for large blocks, the heap trimmed only past 2 GiB free), the equivalent of starting
    the process with ``MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...``.

    It changes the allocator of the whole process, so the library never calls it on its
    own; the ``hierdp`` command does, first thing (``HIERDP_MALLOC=system`` to opt out).
    The process then keeps its peak heap until it exits. Returns whether it took effect
    (``False`` off glibc, e.g. macOS, Windows or musl). Call it before numpy loads: the
    limit caps how many arenas are made, not which one a thread takes, and a thread
    started after the call still takes an arena that numpy's threads made before it. From
    Python after ``import hierdp``, start the process with
    ``MALLOC_ARENA_MAX=1`` instead."""
    if _done:
        return _done[0]
    ok = False
    if sys.platform.startswith("linux") and os.environ.get(MALLOC_ENV, "") != "system":
        try:
            libc = ctypes.CDLL(None)
            mallopt = libc.mallopt if hasattr(libc, "gnu_get_libc_version") else None  # glibc only (not musl)
        except (AttributeError, OSError):
            mallopt = None
        if mallopt is not None:
            mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            ok = bool(mallopt(_M_ARENA_MAX, 1)) & bool(mallopt(_M_MMAP_MAX, 0)) \
                & bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    _done.append(ok)
    return ok
