"""BLUE's one-histogram kernels (``_blue_kernels.blue_1d`` and ``blue_flat_1d``, fused validation)
against the general k-column kernel and hand-computed cases, on every tree layout they
distinguish."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hierdp
from hierdp.errors import DataError
from hierdp.postprocessors import _blue_kernels as K
from hierdp.postprocessors import blue as B
from hierdp.postprocessors.blue import blue
from tests.helpers import random_parent


@pytest.fixture(params=["per-parent", "flat"])
def kernel(request, monkeypatch):
    """Run a test once with each one-histogram kernel chosen for every tree."""
    monkeypatch.setattr(B, "FLAT_IRREGULARITY", -1.0 if request.param == "flat" else np.inf)
    build = B._structure

    def fresh(tree):  # trees shared between parameters must not keep the other's choice
        tree.cache.pop(B._STRUCT_KEY, None)
        return build(tree)

    monkeypatch.setattr(B, "_structure", fresh)
    return request.param


def _layout(tree):
    """'park' (contiguous children, >= as many leaves as internal nodes), 'contig' or 'csr'."""
    n1, first, cidx = K.blue_structure(tree._parent, tree._n_children)
    if cidx.size:
        return "csr"
    return "park" if tree.n_nodes - n1 >= n1 else "contig"


def _messy_variances(rng, tree):
    """Finite, zero and infinite variances, with whole sibling groups unmeasured at times."""
    n = tree.n_nodes
    var = rng.uniform(0.1, 10.0, n)
    u = rng.random(n)
    var[u < 0.25] = np.inf
    var[(u >= 0.25) & (u < 0.4)] = 0.0
    if rng.random() < 0.3:  # all leaves unmeasured or exact
        leaves = tree._n_children == 0
        var[leaves] = rng.choice([np.inf, 0.0, 1.0], int(leaves.sum()))
    return var


def _agreeing(rng, tree, var, scale=20.0):
    """Measurements whose exactly known nodes (variance 0) agree with each other: a
    consistent vector, plus noise wherever the variance is not 0."""
    true = tree.to_internal(tree.aggregate(rng.normal(0, scale, tree.n_leaves)))
    return true + np.where(np.asarray(var) == 0.0, 0.0, rng.normal(0, scale, tree.n_nodes))


def _check_against_general(tree, y, var):
    n = tree.n_nodes
    fast = blue(tree, y, var)  # (n,) values: the k = 1 kernel
    # the same column twice goes through the general (n, k) kernel
    general = blue(tree, np.column_stack([y, y]), var)
    gx, gv = general.values[:, 0], general.variance
    assert fast.values.shape == (n,) and fast.variance.shape == (n,)
    np.testing.assert_array_equal(np.isinf(fast.variance), np.isinf(gv))
    fin = np.isfinite(gv)
    np.testing.assert_allclose(fast.variance[fin], gv[fin], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.values, gx, rtol=1e-9, atol=1e-9 * (1 + np.abs(gx).max()))
    assert tree.is_consistent(tree.to_external(fast.values), rtol=1e-9, atol=1e-7 * (1 + np.abs(gx).max()))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 50), seed=st.integers(0, 2**32 - 1))
def test_k1_kernel_equals_general_kernel_on_random_ragged_trees(n, seed):
    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, n))
    var = _messy_variances(rng, tree)
    y = _agreeing(rng, tree, var)
    _check_against_general(tree, y, var)


@pytest.mark.parametrize("parent, layout", [
    (None, "park"),                              # complete ternary tree (breadth-first)
    ([-1, 0, 1, 2, 3], "contig"),                # a path: fewer leaves than internal nodes
    ([-1, 0, 1, 2, 3, 3], "contig"),             # a branch below a unary chain
    ([-1, 0, 0, 1, 2, 2, 3, 3, 4, 4], "park"),
])
def test_k1_kernel_on_each_layout(parent, layout, kernel):
    rng = np.random.default_rng(7)
    tree = hierdp.Tree.complete(3, 4) if parent is None else hierdp.Tree.from_parent(parent)
    assert _layout(tree) == layout
    for _ in range(50):
        var = _messy_variances(rng, tree)
        _check_against_general(tree, _agreeing(rng, tree, var), var)


def test_random_trees_cover_the_csr_layout(kernel):
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(40):
        tree = hierdp.Tree.from_parent(random_parent(rng, int(rng.integers(2, 40))))
        seen.add(_layout(tree))
        var = _messy_variances(rng, tree)
        _check_against_general(tree, _agreeing(rng, tree, var), var)
    assert seen == {"csr", "park", "contig"}


@pytest.mark.parametrize("var, x, xvar", [
    # exact root: the residual 1 goes to the children by their variances (1/2 each)
    ([0.0, 1.0, 1.0], [10.0, 4.5, 5.5], [0.0, 0.5, 0.5]),
    # exact children: they determine the root
    ([1.0, 0.0, 0.0], [9.0, 4.0, 5.0], [0.0, 0.0, 0.0]),
    # one unmeasured child takes the whole residual: root minus its sibling, variance 1 + 1
    ([1.0, 1.0, np.inf], [10.0, 4.0, 6.0], [1.0, 1.0, 2.0]),
    # unmeasured root: plain aggregation
    ([np.inf, 2.0, 3.0], [9.0, 4.0, 5.0], [5.0, 2.0, 3.0]),
])
def test_zero_and_infinite_variances_hand_computed(var, x, xvar, kernel):
    tree = hierdp.Tree.complete(2, 2)
    y = np.array([10.0, 4.0, 5.0])
    for values in (y, y[:, None]):
        est = blue(tree, values, np.array(var))
        assert est.values.shape == values.shape and est.variance.shape == (3,)
        np.testing.assert_allclose(est.values.ravel(), x)
        np.testing.assert_allclose(est.variance, xvar)


def test_single_node_tree(kernel):
    tree = hierdp.Tree.from_parent([-1])
    est = blue(tree, np.array([3.0]), np.array([2.0]))
    np.testing.assert_array_equal(est.values, [3.0])
    np.testing.assert_array_equal(est.variance, [2.0])
    est = blue(tree, np.array([3.0]), np.array([np.inf]))
    np.testing.assert_array_equal(est.values, [0.0])
    assert np.isinf(est.variance[0])
    with pytest.raises(DataError, match="NaN or infinity"):
        blue(tree, np.array([np.inf]), np.array([1.0]))
    with pytest.raises(DataError, match="non-negative"):
        blue(tree, np.array([1.0]), np.array([np.nan]))


@pytest.mark.parametrize("tree", [hierdp.Tree.complete(2, 4),                         # park layout
                                  hierdp.Tree.from_parent([-1, 0, 1, 2, 2]),           # contig
                                  hierdp.Tree.from_parent([-1, 0, 0, 1, 2, 3, 3, 5])],  # csr
                         ids=["park", "contig", "csr"])
@pytest.mark.parametrize("where", ["root", "internal", "leaf"])
def test_validation_errors_raised_from_the_kernel(tree, where, kernel):
    n = tree.n_nodes
    internal = np.flatnonzero(tree._n_children > 0)
    i = {"root": 0, "internal": int(internal[-1]), "leaf": n - 1}[where]
    for shape in ((n,), (n, 1)):
        for bad in (np.nan, np.inf, -np.inf):
            y = np.ones(n)
            y[i] = bad
            with pytest.raises(DataError, match="values contain NaN or infinity"):
                blue(tree, y.reshape(shape), np.ones(n))
            # an unmeasured node's value must still be finite
            v = np.ones(n)
            v[i] = np.inf
            with pytest.raises(DataError, match="values contain NaN or infinity"):
                blue(tree, y.reshape(shape), v)
        for bad in (np.nan, -1.0, -np.inf):
            v = np.ones(n)
            v[i] = bad
            with pytest.raises(DataError, match="variances must be non-negative"):
                blue(tree, np.ones(shape), v)
            # both wrong: the values are reported first, as by the general kernel
            y = np.ones(n)
            y[0] = np.nan
            with pytest.raises(DataError, match="values contain NaN or infinity"):
                blue(tree, y.reshape(shape), v)


def test_general_kernel_validation_errors():
    tree = hierdp.Tree.complete(2, 3)
    y = np.ones((7, 2))
    y[3, 1] = np.nan
    with pytest.raises(DataError, match="values contain NaN or infinity"):
        blue(tree, y, np.ones(7))
    v = np.ones((7, 2))
    v[5, 0] = -2.0
    with pytest.raises(DataError, match="variances must be non-negative"):
        blue(tree, np.ones((7, 2)), v)


def test_concurrent_calls_on_one_tree_agree(kernel):
    tree = hierdp.Tree.from_parent(random_parent(np.random.default_rng(11), 3000))
    rng = np.random.default_rng(12)
    var = _messy_variances(rng, tree)
    ys = [_agreeing(rng, tree, var, 30.0) for _ in range(8)]
    expected = [blue(tree, np.column_stack([y, y]), var).values[:, 0] for y in ys]
    tree.cache.pop("blue.structure", None)  # threads race to build the structure too
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda y: blue(tree, y, var).values, ys * 4))
    for j, g in enumerate(got):
        np.testing.assert_allclose(g, expected[j % 8], rtol=1e-9, atol=1e-7)


def _flat_direct(tree, y, var):
    """Run the flat kernel itself: its return code and outputs."""
    n1 = int(np.count_nonzero(tree._n_children))
    x, xv, work = np.empty(tree.n_nodes), np.empty(tree.n_nodes), np.empty((n1, 2))
    code = K.blue_flat_1d(tree._parent, n1, y, var, x, xv, work)
    return code, x, xv


@settings(max_examples=150, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 2**32 - 1), messy=st.booleans())
def test_flat_kernel_equals_general_kernel(n, seed, messy):
    """The flat kernel itself (not only blue() with its fallback) on random ragged trees:
    unmeasured internal nodes are its own case; unmeasured leaves or exactly known nodes
    make it hand over (code 3)."""
    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, n))
    var = rng.uniform(0.1, 10.0, n)
    internal = np.flatnonzero(tree._n_children > 0)
    if messy:
        var = _messy_variances(rng, tree)
    else:  # unmeasured internal nodes, every leaf measured
        var[internal[rng.random(internal.size) < 0.3]] = np.inf
    y = _agreeing(rng, tree, var)
    code, x, xv = _flat_direct(tree, y, var)
    general = blue(tree, np.column_stack([y, y]), var)
    gx, gv = general.values[:, 0], general.variance
    if not messy:
        assert code == 0  # every child carries finite positive information
    if np.any(var == 0.0):
        assert code == 3
    assert code in (0, 3)
    if code == 0:
        np.testing.assert_allclose(x, gx, rtol=1e-9, atol=1e-9 * (1 + np.abs(gx).max()))
        np.testing.assert_allclose(xv, gv, rtol=1e-9, atol=1e-9)


def test_flat_kernel_hands_over_on_uninformative_children():
    tree = hierdp.Tree.complete(2, 3)
    y = np.arange(7.0)
    var = np.ones(7)
    var[5] = np.inf  # an unmeasured leaf: its residual share is split by blue_1d
    assert _flat_direct(tree, y, var)[0] == 3
    var = np.ones(7)
    var[3:5] = 0.0  # both children of node 1 exact: U = 0
    assert _flat_direct(tree, y, var)[0] == 3


def test_irregular_trees_choose_the_flat_kernel():
    """Dispatch follows the fan-out irregularity; a passed-in internal order whose sibling
    leaves are not adjacent never gets the flat kernel (it needs them adjacent)."""
    regular = hierdp.Tree.complete(2, 10)
    assert B._structure(regular).flat_parent is None
    rng = np.random.default_rng(5)
    fan = rng.choice([2, 3, 4, 5], 400)
    parent = np.concatenate([[-1], np.zeros(399, np.int64), np.repeat(np.arange(1, 400), fan[1:])])
    irregular = hierdp.Tree.from_parent(parent)
    assert B._structure(irregular).flat_parent is not None
    split = hierdp.Tree([-1, 0, 0, 1, 2, 1])  # leaves 3, 5 share parent 1 but are apart
    B.FLAT_IRREGULARITY, saved = -1.0, B.FLAT_IRREGULARITY
    try:
        assert B._structure(split).flat_parent is None
    finally:
        B.FLAT_IRREGULARITY = saved
    y = np.array([10.0, 4.0, 5.0, 1.0, 2.0, 3.0])
    est = blue(split, y, np.ones(6))
    assert split.is_consistent(split.to_external(est.values))



@pytest.mark.parametrize("parent, y, var", [
    ([-1, 0, 0], [10.0, 4.0, 5.0], [0.0, 0.0, 0.0]),      # exact root, exact children summing to 9
    ([-1, 0, 1], [10.0, 7.0, 4.0], [0.0, 1.0, 0.0]),      # through a measured middle node
])
def test_contradictory_exact_nodes_are_an_error(parent, y, var, kernel):
    tree = hierdp.Tree.from_parent(parent)
    for values in (np.array(y), np.column_stack([y, y])):
        with pytest.raises(DataError, match="known exactly .variance 0. contradict each other"):
            blue(tree, values, np.array(var))
        with pytest.raises(DataError, match="contradict each other"):
            hierdp.postprocess("gmc", tree, values, variance=np.array(var))
    ok = np.array(y)
    ok[0] = ok[1:].sum() if parent[2] == 0 else ok[2]  # make the exact values agree
    ok[1] = ok[2] if parent[2] == 1 else ok[1]
    est = blue(tree, ok, np.array(var))
    np.testing.assert_allclose(est.values[np.array(var) == 0], ok[np.array(var) == 0])


@settings(max_examples=120, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 2**32 - 1), per_cell=st.booleans())
def test_variances_equal_the_dense_covariance_with_unmeasured_nodes(n, seed, per_cell):
    """BLUE's variances equal the diagonal of the dense weighted least-squares covariance,
    inf exactly where the measurements leave a node undetermined (a lone unmeasured child
    is determined: its parent minus its siblings)."""
    from hierdp.postprocessors.baselines import dense_ls

    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, n))
    shape = (n, 2) if per_cell else (n,)
    var = rng.uniform(0.5, 5.0, shape)
    var[rng.random(shape) < 0.35] = np.inf
    y = rng.normal(0, 10, (n, 2))
    got = blue(tree, y if per_cell else y[:, 0], var).variance.reshape(n, -1)
    for c in range(got.shape[1]):
        _, ref = dense_ls(tree, y[:, c], var.reshape(n, -1)[:, c])
        np.testing.assert_array_equal(np.isinf(got[:, c]), np.isinf(ref))
        fin = np.isfinite(ref)
        np.testing.assert_allclose(got[fin, c], ref[fin], rtol=1e-8, atol=1e-10)
