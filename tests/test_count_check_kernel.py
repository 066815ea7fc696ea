"""The in-memory count check on int64 counts (``hierdp.execution.counts.count_problem``) compares
each node with the sum of its children in one compiled pass
(:func:`hierdp._kernels.tree_kernels.children_mismatch`), in pieces on threads. Against a
brute-force reference (each node against the sum of the leaves below it, a loop per node)
on trees numbered out of the internal order, consistent and one cell off, cut into many
pieces; and a sum past int64 that wraps back onto the parent's value is not taken as
consistent."""

import numpy as np
import pytest

import hierdp
from hierdp._kernels import jit
from hierdp.errors import HierarchyError
from hierdp.execution import counts as P


def _leaf_sums_ok(parent: np.ndarray, vals: np.ndarray) -> bool:
    n = parent.size
    kids = [[] for _ in range(n)]
    for i, p in enumerate(parent):
        if p >= 0:
            kids[p].append(i)

    def total(v: int) -> np.ndarray:  # the sum of the leaves below v, by recursion: the reference
        return vals[v].astype(object) if not kids[v] else sum((total(c) for c in kids[v]), np.zeros(vals.shape[1], object))

    return all((total(v) == vals[v].astype(object)).all() for v in range(n) if kids[v])


@pytest.mark.parametrize("piece", [1 << 22, 3])
def test_count_check_matches_leaf_sums(monkeypatch, piece: int) -> None:
    monkeypatch.setattr(jit, "SMALL_INPUT", 0)  # the compiled pass at every size
    monkeypatch.setattr(P, "_CHECK_PIECE", piece)  # many pieces (3 values: a parent or two each)
    calls = []
    real = P._children_mismatch
    monkeypatch.setattr(P, "_children_mismatch", lambda t, v: calls.append(1) or real(t, v))
    rng = np.random.default_rng(5)
    seen = {True: 0, False: 0}
    for _ in range(80):
        n = int(rng.integers(2, 60))
        parent = np.r_[-1, [int(rng.integers(0, i)) for i in range(1, n)]]
        perm = np.r_[0, 1 + rng.permutation(n - 1)]  # external ids scrambled (the root stays 0)
        ext_parent = np.full(n, -1)
        ext_parent[perm[1:]] = perm[parent[1:]]
        tree = hierdp.Tree.from_parent(ext_parent)
        k = int(rng.integers(1, 4))
        leaves = rng.integers(0, 7, (tree.n_leaves, k))
        vals = tree.aggregate(leaves).astype(np.int64)
        if rng.random() < 0.5:
            inner = np.flatnonzero(np.bincount(ext_parent[ext_parent >= 0], minlength=n) > 0)
            vals[int(rng.choice(inner)) if rng.random() < 0.5 else int(tree.leaves[0]), int(rng.integers(0, k))] += 1
        ok = _leaf_sums_ok(ext_parent, vals)
        got = P.count_problem(tree, vals, True)
        assert (got is None) == ok, (ext_parent, vals)
        if not ok:
            assert "not the sum of their leaves" in got
        seen[ok] += 1
    assert min(seen.values()) > 15 and len(calls) == 80


def test_a_sum_past_int64_is_not_consistent(monkeypatch) -> None:
    monkeypatch.setattr(jit, "SMALL_INPUT", 0)
    tree = hierdp.Tree.from_parent([-1, 0, 0, 0])
    big = np.iinfo(np.int64).max
    # three leaves of 2**63 - 1: their sum wraps (mod 2**64) to 2**63 - 3, the root's value
    vals = np.array([[big - 2], [big], [big], [big]], dtype=np.int64)
    assert P._children_mismatch(tree, vals) == 2
    with pytest.raises(HierarchyError, match="overflow int64"):
        P.count_problem(tree, vals, True)
