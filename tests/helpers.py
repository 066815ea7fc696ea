"""Shared helpers for the tests."""

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


def random_parent(rng: np.random.Generator, n: int, shuffle: bool = True) -> np.ndarray:
    """A random tree (ragged in general) on n nodes, optionally with shuffled numbering."""
    parent = np.empty(n, np.int64)
    parent[0] = -1
    for i in range(1, n):
        # bias towards recent nodes to get deeper, raggeder trees
        lo = max(0, i - 1 - int(rng.integers(0, 4 + i // 2)))
        parent[i] = int(rng.integers(lo, i))
    if not shuffle:
        return parent
    perm = rng.permutation(n)  # new id of old node i is perm[i]
    out = np.empty(n, np.int64)
    out[perm] = np.where(parent >= 0, perm[np.maximum(parent, 0)], -1)
    return out


class Stopped(Exception):
    """Raised by :func:`stop_after_journal` right after the release's journal takes its line."""


def stop_after_journal(line: str, release: Callable[[], Any]) -> None:
    """Run ``release()`` and stop it (:class:`Stopped`) right after the out-of-core journal
    records ``line`` (``"up 0"``, ``"down 2"``, ``"top"``, ...): an interruption between two
    steps, as a crash there leaves the work folder."""
    from hierdp import outofcore

    real_add = outofcore.Journal.add

    def add(self: Any, done: str) -> None:
        real_add(self, done)
        if done == line:
            raise Stopped(line)

    outofcore.Journal.add = add
    try:
        with pytest.raises(Stopped):
            release()
    finally:
        outofcore.Journal.add = real_add
