"""Shared helpers for the tests."""

import numpy as np


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
