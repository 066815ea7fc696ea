"""Error metrics against hand-computed values and the papers' definitions."""

from __future__ import annotations

import numpy as np
import pytest

import hierdp
from hierdp import Tree, release
from hierdp.errors import DataError, HierarchyError
from hierdp.metrics.errors import random_ranges

M = hierdp.metric


def test_all_metrics_registered():
    assert set(hierdp.registry.names("metric")) >= {
        "rmsre", "tree_rmsre", "alpha_rmse", "alpha_mrmse", "alpha_eta_accuracy", "rmse_node", "rmse_range",
        "consistency_bias", "relative_error"}


# ---------------------------------------------------------------- RMSRE (Dawson et al. Def. 7, §3.2)
def test_rmsre_hand_computed_single_and_stack():
    true = np.array([0.0, 20.0, 5.0])
    np.testing.assert_allclose(M("rmsre")(true, np.array([3.0, 22.0, 5.0]), tau=10), [0.3, 0.1, 0.0])
    stack = np.array([[22.0], [18.0], [24.0]])
    assert M("rmsre")(np.array([20.0]), stack, tau=10)[0] == pytest.approx(np.sqrt(0.02))
    # default parameters from the factory
    np.testing.assert_allclose(M("rmsre", tau=5)(np.array([2.0]), np.array([3.0])), [0.2])


def test_tree_rmsre_hand_computed():
    t = Tree.complete(2, 2)
    true = np.array([30.0, 10.0, 20.0])
    est = np.array([33.0, 12.0, 20.0])
    # level 0: (3/30)^2 = 0.01; level 1: ((2/10)^2 + 0)/2 = 0.02
    assert M("tree_rmsre")(true, est, tree=t, tau=10) == pytest.approx(np.sqrt(0.015))
    np.testing.assert_allclose(M("tree_rmsre").by_level(true, est, tree=t, tau=10), [0.1, np.sqrt(0.02)])
    with pytest.raises(HierarchyError, match="needs the tree"):
        M("tree_rmsre")(true, est)


def test_rmsre_from_variance_matches_monte_carlo_on_blue_release():
    t = Tree.complete(3, 4)
    rng = np.random.default_rng(0)
    true = t.aggregate(rng.poisson(8, t.n_leaves))
    R = 300
    stack, var = [], None
    for r in range(R):
        res = release(t, true, epsilon=1.0, budget="equal", postprocess=["blue"], seed=1000 + r)
        stack.append(res.values)
        var = res.estimate.variance
    stack = np.array(stack, dtype=float)
    mc = M("tree_rmsre")(true, stack, tree=t, tau=5)
    analytic = M("tree_rmsre").from_variance(true, var, tree=t, tau=5)
    # 40 nodes x 300 repetitions: the Monte-Carlo mean square has ~2-3% relative error
    assert mc == pytest.approx(analytic, rel=0.06)
    per_node_mc = M("rmsre")(true, stack, tau=5)
    per_node_an = M("rmsre").from_variance(true, var, tau=5)
    assert np.mean(per_node_mc**2) == pytest.approx(np.mean(per_node_an**2), rel=0.08)
    assert M("rmse_node")(true, stack) == pytest.approx(M("rmse_node").from_variance(true, var), rel=0.06)


# ---------------------------------------------------------------- Ghazi et al. Def. 4, Problem 18
def test_alpha_rmse_hand_computed_and_alpha_zero_is_rmse():
    true = np.array([10.0])
    stack = np.array([[13.0], [7.0], [10.0]])
    # max(|3| - 0.1*10, 0) = 2, 2, 0
    assert M("alpha_rmse")(true, stack, alpha=0.1)[0] == pytest.approx(np.sqrt(8 / 3))
    rng = np.random.default_rng(1)
    t = rng.integers(0, 100, 50).astype(float)
    e = t + rng.normal(0, 5, (20, 50))
    np.testing.assert_allclose(M("alpha_rmse")(t, e, alpha=0.0), np.sqrt(np.mean((e - t) ** 2, axis=0)))
    assert M("alpha_rmse").summary(t, e, alpha=0.0) == pytest.approx(M("rmse_node")(t, e))
    assert M("alpha_mrmse")(t, e, alpha=0.0) == pytest.approx(np.sqrt(np.mean((e - t) ** 2, axis=0)).max())
    # larger alpha can only lower the error
    assert M("alpha_mrmse")(t, e, alpha=0.5) <= M("alpha_mrmse")(t, e, alpha=0.1)


def test_alpha_eta_accuracy_hand_computed():
    true = np.array([100.0, 10.0, 0.0])
    est = np.array([105.0, 13.0, 1.0])
    # thresholds alpha*max(w, tau) = 10, 1, 0.5 -> only the first node passes
    assert M("alpha_eta_accuracy")(true, est, alpha=0.1, tau=5) == pytest.approx(1 / 3)
    # per-node thresholds tau_u = (0, 40, 20) -> 10, 4, 2: all pass
    assert M("alpha_eta_accuracy")(true, est, alpha=0.1, tau=np.array([0.0, 40.0, 20.0])) == 1.0
    stack = np.array([[105.0, 10.0, 0.0], [120.0, 10.0, 0.0], [100.0, 10.0, 9.0], [100.0, 10.0, 0.0]])
    # success probabilities per node: 3/4, 1, 3/4
    assert M("alpha_eta_accuracy")(true, stack, alpha=0.1, tau=5) == pytest.approx((0.75 + 1 + 0.75) / 3)
    assert M("alpha_eta_accuracy")(true, stack, alpha=0.1, tau=5, eta=0.25) == 1.0
    assert M("alpha_eta_accuracy")(true, stack, alpha=0.1, tau=5, eta=0.1) == pytest.approx(1 / 3)
    with pytest.raises(DataError, match="eta must be in"):
        M("alpha_eta_accuracy")(true, est, eta=1.5)


# ---------------------------------------------------------------- Generation Matrix §6
def test_rmse_node_hand_computed_by_level_and_cells():
    t = Tree.complete(2, 2)
    true = np.array([10.0, 4.0, 6.0])
    est = np.array([13.0, 4.0, 2.0])
    assert M("rmse_node")(true, est) == pytest.approx(np.sqrt((9 + 0 + 16) / 3))
    np.testing.assert_allclose(M("rmse_node").by_level(true, est, tree=t), [3.0, np.sqrt(8.0)])
    hist_t = np.stack([true, 2 * true], axis=1)
    hist_e = np.stack([est, 2 * est], axis=1)
    assert M("rmse_node")(hist_t, hist_e) == pytest.approx(np.sqrt((9 + 16 + 36 + 64) / 6))


def test_rmse_range_equals_brute_force_over_all_ranges():
    t = Tree.complete(2, 4)  # 8 leaves -> 36 ranges
    rng = np.random.default_rng(2)
    true = t.aggregate(rng.poisson(10, t.n_leaves)).astype(float)
    est = true + rng.normal(0, 3, t.n_nodes)
    leaves = t.leaves
    errs = [est[leaves[a:b + 1]].sum() - true[leaves[a:b + 1]].sum() for a in range(8) for b in range(a, 8)]
    assert M("rmse_range")(true, est, tree=t, q=10_000) == pytest.approx(np.sqrt(np.mean(np.square(errs))))
    # stack of repetitions: mean square over ranges and repetitions
    stack = np.stack([est, true + 1.0])
    errs2 = errs + [float(b - a + 1) for a in range(8) for b in range(a, 8)]
    assert M("rmse_range")(true, stack, tree=t, q=36) == pytest.approx(np.sqrt(np.mean(np.square(errs2))))


def test_random_ranges_are_distinct_valid_and_seeded():
    a, b = random_ranges(1000, 500, seed=3)
    assert a.size == 500 and np.all((0 <= a) & (a <= b) & (b < 1000))
    assert np.unique(a * 1000 + b).size == 500
    a2, b2 = random_ranges(1000, 500, seed=3)
    assert np.array_equal(a, a2) and np.array_equal(b, b2)
    a, b = random_ranges(4, 100, seed=0)
    assert sorted(zip(a.tolist(), b.tolist())) == [(i, j) for i in range(4) for j in range(i, 4)]


def test_consistency_bias_formula_42_against_the_constraint_matrix():
    t = Tree.complete(2, 2)
    assert M("consistency_bias")(None, np.array([10.0, 4.0, 5.0]), tree=t) == pytest.approx(1.0)
    assert M("consistency_bias")(None, np.array([9.0, 4.0, 5.0]), tree=t) == 0.0
    rng = np.random.default_rng(4)
    parent = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, 30)])
    tr = Tree.from_parent(parent)
    v = rng.normal(0, 10, 30)
    internal = np.flatnonzero(tr.n_children > 0)
    Mt = np.zeros((30, internal.size))  # Def. 5: m_ij = 1 if i = j, -1 if j = parent(i)
    for j, node in enumerate(internal):
        Mt[node, j] = 1.0
        Mt[parent == node, j] = -1.0
    delta = Mt.T @ v
    assert M("consistency_bias")(None, v, tree=tr) == pytest.approx(np.sqrt(np.sum(delta**2) / internal.size))


# ---------------------------------------------------------------- PrivTree §5
def test_relative_error_with_smoothing():
    t = Tree.from_parent([-1, 0, 0, 1])
    true = np.array([1000.0, 600.0, 400.0, 0.0])
    est = np.array([1010.0, 590.0, 399.0, 3.0])
    # Delta = 0.1% of the cardinality 1000 = 1
    expect = [10 / 1000, 10 / 600, 1 / 400, 3 / 1]
    np.testing.assert_allclose(M("relative_error")(true, est, tree=t), expect)
    assert M("relative_error").summary(true, est, tree=t) == pytest.approx(np.mean(expect))
    np.testing.assert_allclose(M("relative_error")(true, est, tree=t, delta=50.0),
                               [10 / 1000, 10 / 600, 1 / 400, 3 / 50])


def test_relative_error_over_all_leaf_ranges_by_brute_force():
    t = Tree.complete(2, 3)  # 4 leaves -> 10 ranges
    rng = np.random.default_rng(7)
    true = t.aggregate(rng.poisson(50, 4)).astype(float)
    est = true + rng.normal(0, 4, t.n_nodes)
    lv = t.leaves
    delta = 0.001 * true[t.root]
    expect = [abs(est[lv[a:b + 1]].sum() - true[lv[a:b + 1]].sum()) / max(true[lv[a:b + 1]].sum(), delta)
              for b in range(4) for a in range(b + 1)]  # ranges sorted by (b, a)
    got = M("relative_error")(true, est, tree=t, ranges=100)
    np.testing.assert_allclose(got, expect)
    assert M("relative_error").summary(true, est, tree=t, ranges=100) == pytest.approx(np.mean(expect))
    with pytest.raises(DataError, match="no per-level breakdown"):
        M("relative_error").by_level(true, est, tree=t, ranges=5)


def test_shape_and_parameter_errors():
    with pytest.raises(DataError, match="stack of repetitions"):
        M("rmsre")(np.zeros(3), np.zeros(4))
    with pytest.raises(DataError, match="tau must be a positive"):
        M("rmsre")(np.zeros(3), np.zeros(3), tau=0)
    with pytest.raises(TypeError, match="unknown parameters"):
        M("rmse_node")(np.zeros(3), np.zeros(3), tau=3)
    with pytest.raises(DataError, match="not a DataFrame"):
        import pandas as pd

        M("rmse_node")(np.zeros(3), pd.DataFrame({"estimate": [0.0, 0.0, 0.0]}))


def test_metrics_accept_a_release_result():
    t = Tree.complete(2, 3)
    true = t.aggregate(np.arange(t.n_leaves))
    res = release(t, true, epsilon=1.0, seed=5)
    assert M("rmse_node")(true, res) == pytest.approx(M("rmse_node")(true, res.values))


def test_per_node_variance_of_histograms_lines_up_with_nodes():
    """A per-node variance (n,) for (n, k) histograms is shared by each node's cells."""
    true = np.array([[10.0, 10, 10], [1, 1, 1], [1, 1, 1]])
    np.testing.assert_allclose(hierdp.metric("rmsre").from_variance(true, np.array([100.0, 4, 9]), tau=1),
                               [1.0, 2.0, 3.0])
    assert hierdp.metric("rmse_node").from_variance(true, np.array([1.0, 4, 4])) == pytest.approx(3.0**0.5)
    t = hierdp.Tree.complete(2, 2)
    table = hierdp.evaluate(t, {"a": {"epsilon": 1.0}}, values=np.array([[4, 4], [1, 2], [3, 2]]),
                            repetitions=2, seed=1)
    assert np.isfinite(table["mean"]).all()


def test_consistency_bias_tells_histograms_from_repetitions():
    """(n, n) is one release of n-cell histograms or n repetitions: the true counts' shape
    decides, and without them the metric asks instead of guessing."""
    t = hierdp.Tree.complete(2, 2)
    hist = np.array([[3.0, 3, 3], [1, 1, 1], [2, 2, 2]])  # consistent, 3 cells per node
    cb = hierdp.metric("consistency_bias")
    assert cb(hist, hist, tree=t) == 0.0
    reps = np.array([[3.0, 1, 2], [3, 1, 2], [4, 1, 2]])  # 3 repetitions of one histogram
    assert cb(np.array([3.0, 1, 2]), reps, tree=t) == pytest.approx((1 / 3) ** 0.5)
    with pytest.raises(hierdp.DataError, match="may be one release of 3-cell histograms or 3 repetitions"):
        cb(None, hist, tree=t)
