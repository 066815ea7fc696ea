"""Helpers shared by the benchmark scripts: the numpy floor and a memory warm-up.

On this kind of virtual machine the first touch of guest memory is slow (~5 ns per byte:
the host backs the page on demand); once touched, pages are fast for every later
process. Benchmarks call :func:`warm_memory` first so that they time the code, not the
hypervisor.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np


def warm_memory(gib: float = 6.0) -> float:
    """Touch ``gib`` GiB once (in 256 MiB blocks held together); returns seconds spent."""
    t0 = time.perf_counter()
    blocks = []
    block = 1 << 25  # float64 elements = 256 MiB
    for _ in range(max(1, int(gib * 4))):
        blocks.append(np.ones(block))
    del blocks
    return time.perf_counter() - t0


def numpy_floor(n: int, repeat: int = 5) -> float:
    """Best-of seconds of ``y = x * 2.0`` over n float64 values (warm output buffer)."""
    x = np.ones(n)
    y = np.empty_like(x)
    np.multiply(x, 2.0, out=y)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.multiply(x, 2.0, out=y)
        best = min(best, time.perf_counter() - t0)
    return best


def best_of(fn, repeat: int):
    """``(best seconds, last result)`` of ``repeat`` calls of ``fn``."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def in_fresh_process(target, *args):
    """Run ``target(*args, queue)`` in a new (spawned) process and return what it puts on
    the queue; the process's peak memory is then its own."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    result = q.get()
    p.join()
    return result
