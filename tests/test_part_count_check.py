"""The split stages' count check (``hierdp.execution.counts.part_count_problem``) sums children
by parent with one reduceat: against a brute-force sum per parent, on parts numbered
parent-first (children grouped) and scrambled, integer and float counts, consistent and
one cell off."""

import numpy as np
import pytest

from hierdp.execution.counts import part_count_problem


def _brute_ok(parent: np.ndarray, vals: np.ndarray) -> bool:
    sums = np.zeros(vals.shape, dtype=np.float64)
    has = np.zeros(parent.size, bool)
    for i, p in enumerate(parent):  # a loop per node: the reference, not the code under test
        if p >= 0:
            sums[p] += vals[i]
            has[p] = True
    return bool(np.array_equal(sums[has], vals[has].astype(np.float64)))


@pytest.mark.parametrize("scramble", [False, True])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_count_check_matches_a_sum_per_parent(scramble: bool, dtype: type) -> None:
    rng = np.random.default_rng(3)
    seen = {True: 0, False: 0}
    for _ in range(60):
        n = int(rng.integers(2, 40))
        parent = np.r_[-1, [int(rng.integers(0, i)) for i in range(1, n)]]  # parents first
        if scramble:  # renumber: children no longer grouped by parent, several roots
            perm = rng.permutation(n)
            inv = np.argsort(perm)
            parent = np.where(parent[perm] >= 0, inv[np.maximum(parent[perm], 0)], -1)
        k = int(rng.integers(1, 4))
        leaf = np.bincount(parent[parent >= 0], minlength=n) == 0
        vals = np.zeros((n, k), np.int64)
        vals[leaf] = rng.integers(0, 5, (int(leaf.sum()), k))
        order = np.argsort(-_depth(parent), kind="stable")  # deepest first: sum up
        for i in order:
            if parent[i] >= 0:
                vals[parent[i]] += vals[i]
        vals = vals.astype(dtype)
        if rng.random() < 0.5 and (~leaf).any():
            vals[int(rng.choice(np.flatnonzero(~leaf))), int(rng.integers(0, k))] += 1
        ok = _brute_ok(parent, vals)
        assert (part_count_problem(parent, vals, True) is None) == ok
        seen[ok] += 1
    assert min(seen.values()) > 10


def _depth(parent: np.ndarray) -> np.ndarray:
    d = np.zeros(parent.size, np.int64)
    for i in range(parent.size):
        j = i
        while parent[j] >= 0:
            j = parent[j]
            d[i] += 1
    return d
