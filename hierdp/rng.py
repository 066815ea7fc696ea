"""Sources of randomness.

By default hierdp draws every random bit from the operating system's cryptographically
secure generator (``os.urandom``, i.e. ``getrandom(2)`` on Linux).  A seeded source exists
for tests and benchmarks only; releases made with it are marked "not for publication".

All samplers in :mod:`hierdp.mechanisms` consume randomness through
:class:`RandomSource`, which only hands out uniformly random 64-bit words and exact
uniform integers derived from them, so that discrete samplers can be exact.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

__all__ = ["RandomSource", "SecureRandom", "SeededRandom", "make_rng"]

_CHUNK = 1 << 20  # words per os.urandom call (8 MiB)


class RandomSource(Protocol):
    """What a sampler needs from a source of randomness."""

    secure: bool
    seed: int | None

    def words(self, size: int) -> np.ndarray:
        """``size`` independent uniformly random uint64 words."""
        ...

    def integers(self, high: int | np.ndarray, size: int) -> np.ndarray:
        """Exact uniform integers in ``[0, high)`` (``high`` scalar or per element, < 2**62)."""
        ...

    def uniform(self, size: int) -> np.ndarray:
        """Uniform floats ``k / 2**53`` with ``k`` uniform in ``[0, 2**53)``."""
        ...


class _WordSource:
    secure: bool = False
    seed: int | None = None

    def words(self, size: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def integers(self, high: int | np.ndarray, size: int) -> np.ndarray:
        """Exact uniform integers in ``[0, high)`` by masked rejection sampling.

        Each draw masks a random word down to the bit length of ``high - 1`` and rejects
        values ``>= high`` (acceptance probability > 1/2), so the result is exactly uniform.
        """
        size = int(size)
        high_arr = np.asarray(high, dtype=np.int64)
        if np.any(high_arr <= 0):
            raise ValueError("integers(high): high must be positive")
        if np.any(high_arr > (1 << 62)):
            raise ValueError("integers(high): high must be at most 2**62")
        scalar = high_arr.ndim == 0
        if scalar:
            high_arr = np.full(size, int(high_arr), dtype=np.int64)
        elif high_arr.shape != (size,):
            raise ValueError("integers(high, size): high must be a scalar or have length size")
        # mask = 2**bitlength(high-1) - 1, computed without floating point
        m = (high_arr - 1).astype(np.uint64)
        for shift in (1, 2, 4, 8, 16, 32):
            m |= m >> np.uint64(shift)
        out = np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while todo.size:
            cand = (self.words(todo.size) & m[todo]).astype(np.int64)
            ok = cand < high_arr[todo]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return out

    def uniform(self, size: int) -> np.ndarray:
        return (self.words(size) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class SecureRandom(_WordSource):
    """Random words from the operating system's CSPRNG (``os.urandom``)."""

    secure = True
    seed = None

    def words(self, size: int) -> np.ndarray:
        size = int(size)
        out = np.empty(size, dtype=np.uint64)
        view = out.view(np.uint8)
        for start in range(0, size, _CHUNK):
            stop = min(size, start + _CHUNK)
            view[8 * start : 8 * stop] = np.frombuffer(os.urandom(8 * (stop - start)), dtype=np.uint8)
        return out

    def __repr__(self) -> str:
        return "SecureRandom()"


class SeededRandom(_WordSource):
    """Reproducible words from numpy's PCG64; for tests and benchmarks only (not private)."""

    secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)
        self._bitgen = np.random.PCG64(self.seed)

    def words(self, size: int) -> np.ndarray:
        return self._bitgen.random_raw(int(size)).astype(np.uint64, copy=False)

    def __repr__(self) -> str:
        return f"SeededRandom(seed={self.seed})"


def make_rng(seed: int | None = None) -> RandomSource:
    """The secure source when ``seed`` is None, else a seeded (non-private) source."""
    if seed is None:
        return SecureRandom()
    return SeededRandom(seed)
