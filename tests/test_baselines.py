"""Baselines of the Generation Matrix paper (Table 2): Processless, Boosting (Hay et al.),
PrivTrie's recursive post-processing and the dense least-squares reference."""

import numpy as np
import pytest

import hierdp
from hierdp.errors import DataError
from hierdp.postprocessors import Estimate
from hierdp.postprocessors.baselines import (
    DENSE_MAX_NODES,
    Boosting,
    BoostingWarning,
    DenseLS,
    PrivTrie,
    Processless,
    boosting,
    dense_ls,
    privtrie,
)
from hierdp.postprocessors.gmc import gmc
from tests.helpers import random_parent


def test_boosting_hand_computed_height_2():
    """Hay et al.: z_root = 2/3 v_root + 1/3 (v_a + v_b); x_c = z_c + (x_root - sum z) / 2."""
    tree = hierdp.Tree.complete(2, 2)
    out = boosting(tree, np.array([10.0, 4.0, 5.0]))
    z_root = 2 / 3 * 10 + 1 / 3 * 9
    np.testing.assert_allclose(out, [z_root, 4 + (z_root - 9) / 2, 5 + (z_root - 9) / 2])


@pytest.mark.parametrize("fanout,height", [(2, 1), (2, 5), (3, 4), (4, 3), (1, 4)])
@pytest.mark.parametrize("k", [None, 3])
def test_boosting_is_optimal_on_complete_trees(fanout, height, k):
    """Hay et al. Theorem 3 / Table 3 of Cai et al.: on complete k-ary trees Boosting = GMC."""
    tree = hierdp.Tree.complete(fanout, height)
    rng = np.random.default_rng(fanout * 10 + height)
    y = rng.normal(0, 20, (tree.n_nodes,) if k is None else (tree.n_nodes, k))
    np.testing.assert_allclose(boosting(tree, y), gmc(tree, y), rtol=1e-10, atol=1e-9)


def test_boosting_on_a_ragged_tree_warns_and_is_not_consistent():
    tree = hierdp.Tree.from_parent(random_parent(np.random.default_rng(4), 40))
    y = np.random.default_rng(5).normal(0, 10, tree.n_nodes)
    with pytest.warns(BoostingWarning, match="complete 1-ary tree|complete [0-9]+-ary tree"):
        out = Boosting().apply(tree, Estimate(y, np.ones(tree.n_nodes)))
    assert not tree.is_consistent(tree.to_external(out.values))
    # consistency bias, formula (42): sqrt(mean over non-leaves of (v_i - sum of children)^2)
    s = np.zeros(tree.n_nodes)
    np.add.at(s, tree._parent[1:], out.values[1:])
    internal = tree._n_children > 0
    assert np.sqrt(np.mean((out.values - s)[internal] ** 2)) > 0.1


def test_boosting_warns_on_non_uniform_variances():
    tree = hierdp.Tree.complete(2, 3)
    with pytest.warns(BoostingWarning, match="same noise variance"):
        Boosting().apply(tree, Estimate(np.ones(7), np.arange(1.0, 8.0)))


def test_processless_returns_a_copy():
    tree = hierdp.Tree.complete(2, 3)
    y = np.arange(7.0)
    out = Processless().apply(tree, Estimate(y, np.ones(7)))
    np.testing.assert_array_equal(out.values, y)
    assert out.values is not y and not Processless.consistent


def test_privtrie_hand_computed_and_weighted():
    """Star with root var 1 and two leaves var 1: z_root = (10*2 + 9*1)/3; residual split 1/2 each."""
    tree = hierdp.Tree.complete(2, 2)
    out = privtrie(tree, np.array([10.0, 4.0, 5.0]))
    np.testing.assert_allclose(out, [29 / 3, 4 + (29 / 3 - 9) / 2, 5 + (29 / 3 - 9) / 2])
    # weighted: root known 4x better -> z_root = (10*2 + 9*0.25)/2.25, split by leaf variances 1:3
    out = privtrie(tree, np.array([10.0, 4.0, 5.0]), np.array([0.25, 1.0, 3.0]))
    zr = (10 * 4 + 9 * 0.25) / 4.25
    np.testing.assert_allclose(out, [zr, 4 + (zr - 9) * 0.25, 5 + (zr - 9) * 0.75])
    with pytest.raises(DataError, match="finite, positive"):
        privtrie(tree, np.ones(3), np.array([np.inf, 1, 1]))


def test_privtrie_handles_deep_trees():
    parent = np.arange(-1, 3000)   # a path: recursion depth 3000
    tree = hierdp.Tree.from_parent(parent)
    y = np.random.default_rng(0).normal(size=tree.n_nodes)
    np.testing.assert_allclose(PrivTrie().apply(tree, Estimate(y, None)).values, gmc(tree, y), atol=1e-9)


def test_dense_reference_and_its_limits():
    tree = hierdp.Tree.complete(3, 3)
    rng = np.random.default_rng(9)
    y = rng.normal(0, 5, tree.n_nodes)
    var = np.where(tree._depth == 1, np.inf, 2.0)              # an unmeasured level: weight 0
    x, v = dense_ls(tree, y, var)
    est = hierdp.postprocess("blue", tree, y, variance=var)
    np.testing.assert_allclose(x, est.values, atol=1e-9)
    np.testing.assert_allclose(v, est.variance, atol=1e-9)
    assert DenseLS().apply(tree, Estimate(y, None)).variance is None
    big = hierdp.Tree.complete(2, 13)
    assert big.n_nodes > DENSE_MAX_NODES
    with pytest.raises(DataError, match="at most"):
        dense_ls(big, np.zeros(big.n_nodes))
    with pytest.raises(DataError, match="positive variances"):
        dense_ls(tree, y, np.zeros(tree.n_nodes))


@pytest.mark.parametrize("parent, var, expect", [
    ([-1], [np.inf], [np.inf]),
    ([-1, 0, 0], [1.0, np.inf, np.inf], [1.0, np.inf, np.inf]),    # two unknown children: not identified
    ([-1, 0, 0], [1.0, 1.0, np.inf], [1.0, 1.0, 2.0]),             # root minus the other child
])
def test_dense_reports_inf_for_undetermined_nodes(parent, var, expect):
    """The pseudo-inverse gives 0 in null-space directions; the reference must say inf there."""
    from hierdp.postprocessors.baselines import dense_ls

    tree = hierdp.Tree.from_parent(parent)
    _, v = dense_ls(tree, np.arange(len(parent), dtype=float), np.array(var))
    np.testing.assert_allclose(v, expect)
