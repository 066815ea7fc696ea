"""Large arrays whose pages the OS can map as 2 MiB huge pages (:func:`large_empty`)."""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np

__all__ = ["LARGE_MIN", "large_empty", "narrow_index"]

#: arrays from this size on come from :func:`large_empty`'s own mapping
LARGE_MIN = 1 << 23
_HUGE = 1 << 21
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only


def large_empty(shape: int | tuple[int, ...], dtype: Any = float, offset_bytes: int = 0) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose pages can all be 2 MiB huge pages (Linux, arrays of
    :data:`LARGE_MIN` bytes or more; ``np.empty`` otherwise). A large array, or one with
    ``offset_bytes`` (a multiple of 64), starts that many bytes past a 4 KiB boundary.

    numpy's large arrays come from glibc's ``mmap``, whose length is rarely a multiple of
    2 MiB: the kernel then does not align the mapping, and glibc writes its chunk header
    before numpy asks for huge pages, so the first and last 2 MiB of the array fault in
    4 KiB pages, up to 1,024 faults of ~1 us each; a mapping of a multiple of 2 MiB,
    advised first, avoids them. The array's ``base`` is the mapping, unmapped when the
    last array on it goes."""
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(dims) * dt.itemsize
    if _MADV_HUGEPAGE is None or nbytes < LARGE_MIN or offset_bytes % 64:
        return _numpy_empty(dims, dt, offset_bytes)
    length = -(-(nbytes + offset_bytes) // _HUGE) * _HUGE  # a multiple of 2 MiB: the kernel aligns it
    try:
        m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:  # no mapping to be had: numpy's allocator decides (MemoryError when out of memory)
        return _numpy_empty(dims, dt, offset_bytes)
    try:
        m.madvise(_MADV_HUGEPAGE)  # before any page is touched
    except OSError:  # a kernel without transparent huge pages: an aligned mapping all the same
        pass
    return np.frombuffer(m, dtype=dt, count=math.prod(dims), offset=offset_bytes).reshape(dims)


def _numpy_empty(dims: tuple[int, ...], dt: np.dtype, offset_bytes: int) -> np.ndarray:
    """``np.empty``, its data ``offset_bytes`` past a 4 KiB boundary when that is not 0."""
    if not offset_bytes:
        return np.empty(dims, dt)
    nbytes = math.prod(dims) * dt.itemsize
    raw = np.empty(nbytes + 4096 + offset_bytes, np.uint8)
    start = (-raw.__array_interface__["data"][0]) % 4096 + offset_bytes
    return raw[start:start + nbytes].view(dt).reshape(dims)


def narrow_index(a: np.ndarray, offset_lines: int) -> np.ndarray:
    """A read-only int32 copy of the int64 index array ``a`` when every index fits (else
    ``a`` itself), starting ``offset_lines`` cache lines past a 4 KiB boundary: half the
    bytes per node for passes that read a parent per node.

    The offset matters. A pass that reads ``parent[i]`` and adds into ``out[parent[i]]``
    on a complete binary tree stores at ``4 i`` bytes into ``out`` while it loads at
    ``4 i`` into an int32 ``parent``; if both arrays start at the same place in a page,
    every load waits on the store before it (4 KiB aliasing), which made aggregation
    slower than with the int64 parents; staggered, it is faster."""
    if a.size and (int(a.max()) >= 2**31 or int(a.min()) < -(2**31)):
        return a
    out = large_empty(a.shape, np.int32, 64 * offset_lines)
    out[...] = a
    out.flags.writeable = False
    return out
