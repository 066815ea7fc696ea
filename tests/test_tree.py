import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hierdp
from hierdp.errors import HierarchyError
from tests.helpers import random_parent


def brute_heights(parent):
    n = len(parent)
    kids = [[] for _ in range(n)]
    for i, p in enumerate(parent):
        if p >= 0:
            kids[p].append(i)

    def h(v):
        return 1 if not kids[v] else 1 + max(h(c) for c in kids[v])

    return np.array([h(v) for v in range(n)]), kids


def brute_depth(parent):
    out = []
    for i in range(len(parent)):
        d, v = 0, i
        while parent[v] >= 0:
            v, d = parent[v], d + 1
        out.append(d)
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 2**32 - 1))
def test_from_parent_order_and_arrays(n, seed):
    rng = np.random.default_rng(seed)
    parent = random_parent(rng, n)
    t = hierdp.Tree.from_parent(parent)
    heights, kids = brute_heights(parent)
    # public arrays are in the caller's numbering
    assert np.array_equal(t.parent, parent)
    assert np.array_equal(t.depth, brute_depth(parent))
    assert np.array_equal(t.heights, heights)
    assert t.height == heights.max()
    assert np.array_equal(t.leaves, np.flatnonzero([len(k) == 0 for k in kids]))
    # internal order: parent before child, heights non-increasing, k-order subtrees are prefixes
    p = t._parent
    assert p[0] == -1 and np.all(p[1:] < np.arange(1, n))
    assert np.all(np.diff(t._height) <= 0)
    for k in range(t.height):
        members = np.flatnonzero(t._height > k)
        assert np.array_equal(members, np.arange(members.size))
    # ties within a height class: by depth, then parent
    for h in range(1, t.height + 1):
        sl = t.height_slice(h)
        key = list(zip(t._depth[sl], t._parent[sl]))
        assert key == sorted(key)
    for v in range(n):
        assert np.array_equal(t.children(v), sorted(kids[v]))


def test_internal_order_costs_no_permutation():
    t = hierdp.Tree.complete(fanout=3, height=4)
    assert t.is_internal_order
    x = np.arange(t.n_nodes)
    assert t.to_internal(x) is x


def test_complete_tree_numbering():
    t = hierdp.Tree.complete(fanout=2, height=4)
    assert t.n_nodes == 15 and t.n_leaves == 8 and t.height == 4
    assert np.array_equal(t.children(0), [1, 2])
    assert np.array_equal(t.children(3), [7, 8])
    assert t.level_names == ("total", "level_1", "level_2", "level_3")
    t3 = hierdp.Tree.complete(fanout=3, height=3)
    assert t3.n_nodes == 13 and np.array_equal(t3.children(1), [4, 5, 6])


@pytest.mark.parametrize("parent, match", [
    ([-1, 2, 1], "cycle"),
    ([-1, -1, 0], "2 roots"),
    ([1, 2, 0], "no root"),
    ([-1, 0, 5], "out of range"),
    ([-1, 1], "own parent"),
    ([[-1, 0]], "1-D"),
    ([], "non-empty"),
    (["a", "b"], "integer"),
])
def test_from_parent_rejects_non_trees(parent, match):
    with pytest.raises(HierarchyError, match=match):
        hierdp.Tree.from_parent(parent)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 50), k=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_aggregate_matches_brute_force(n, k, seed):
    rng = np.random.default_rng(seed)
    parent = random_parent(rng, n)
    t = hierdp.Tree.from_parent(parent)
    leaf_vals = rng.integers(0, 100, size=(t.n_leaves, k))
    got = t.aggregate(leaf_vals)
    want = np.zeros((n, k), np.int64)
    for leaf, val in zip(t.leaves, leaf_vals):
        v = leaf
        while v >= 0:
            want[v] += val
            v = parent[v]
    assert np.array_equal(got, want)
    assert np.array_equal(t.aggregate(leaf_vals[:, 0]), want[:, 0])
    assert t.is_consistent(got[:, 0])


def test_aggregate_rejects_wrong_shape(small_tree):
    with pytest.raises(HierarchyError, match="leaf_values must have shape"):
        small_tree.aggregate(np.ones(3))


def test_labels_paths_and_ids():
    parent = [-1, 0, 0, 1, 1, 2]
    labels = ["US", "CA", "NY", "LA", "SF", "NYC"]
    t = hierdp.Tree.from_parent(parent, labels=labels, level_names=["nation", "state", "city"])
    assert t.path(4) == ("CA", "SF")
    assert t.node_id("NY", "NYC") == 5
    assert t.node_id() == 0
    with pytest.raises(HierarchyError, match="did you mean 'SF'"):
        t.node_id("CA", "SFO")
    assert list(t.level_labels("state")) == ["CA", "NY"]
    with pytest.raises(HierarchyError, match="unknown level 'stat'; expected one of .*did you mean 'state'"):
        t.level_depth("stat")


def test_tree_is_immutable_and_pickles(small_tree):
    with pytest.raises(ValueError):
        small_tree.parent[1] = 0
    t2 = pickle.loads(pickle.dumps(small_tree))
    assert t2 == small_tree and np.array_equal(t2.leaves, small_tree.leaves)


def test_level_nodes_ragged():
    t = hierdp.Tree.from_parent([3, 3, 0, -1, 1])  # root 3; 0 and 1 at depth 1; 2 and 4 at depth 2
    assert np.array_equal(t.level_nodes(1), [0, 1])
    assert np.array_equal(t.level_nodes("level_2"), [2, 4])


def test_trees_are_equal_only_with_the_same_labels_and_hash_alike():
    """Equality means arrays indexed by one tree mean the same nodes in the other: a tree
    whose observed values differ ('c' vs 'zz') is not equal, even with the same shape."""
    import pandas as pd

    t1 = pd.DataFrame({"camp": ["a", "b", "c"]}).dptree(levels=["camp"], domains="observed").tree
    t1b = pd.DataFrame({"camp": ["c", "a", "b"]}).dptree(levels=["camp"], domains="observed").tree
    t2 = pd.DataFrame({"camp": ["a", "b", "zz"]}).dptree(levels=["camp"], domains="observed").tree
    assert np.array_equal(t1.parent, t2.parent) and t1 != t2
    assert t1 == t1b and hash(t1) == hash(t1b) and len({t1, t1b}) == 1
    assert hierdp.Tree.complete(2, 3) == hierdp.Tree.complete(2, 3) and hierdp.Tree.complete(2, 3) != t1


def test_small_tree_numpy_passes_equal_the_compiled_loops():
    """Trees up to SMALL_TREE nodes take numpy passes (no compile on a first release): they
    must give exactly what the compiled loops give, cycles included."""
    from hierdp._kernels import tree_kernels as K

    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 60, 500):
        for _ in range(5):
            parent = np.full(n, -1, np.int64)
            parent[1:] = [rng.integers(0, i) for i in range(1, n)]
            perm = rng.permutation(n)
            ext = np.empty(n, np.int64)
            ext[perm] = np.where(parent >= 0, perm[np.maximum(parent, 0)], -1)
            d_np, bad_np = K._np_depths(ext)
            d_c, bad_c = K.depths_checked(ext)
            assert bad_np == bad_c == -1 and np.array_equal(d_np, d_c)
            assert np.array_equal(K._np_heights(ext, d_np), K.heights_in_order(ext, np.argsort(-d_c, kind="stable")))
            vals = rng.integers(-5, 9, (n, 3))
            assert np.array_equal(K._np_sum_up(parent, K.depth_topological(parent), vals),
                                  K.sum_up_2d(parent, vals, np.empty_like(vals)))
            codes = rng.integers(0, 4, n)
            dep = K.depth_topological(parent)
            for level in range(int(dep.max()) + 2):
                assert np.array_equal(K._np_ancestor_codes(parent, dep, codes, level),
                                      K.ancestor_codes(parent, dep, codes, level))
    cyc = np.array([-1, 2, 3, 1, 3])  # 1 -> 2 -> 3 -> 1, and 4 hangs off the cycle
    d, bad = K._np_depths(cyc)
    assert bad in (1, 2, 3) and K.depths_checked(cyc)[1] in (1, 2, 3)
    with pytest.raises(hierdp.HierarchyError, match="cycle through node [123]"):
        hierdp.Tree.from_parent(cyc)
