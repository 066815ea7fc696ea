"""BLUE (Dawson et al. Alg. 1-2) against the dense weighted least-squares solution."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hierdp
from hierdp.errors import DataError
from tests.helpers import random_parent


def ancestry_matrix(tree):
    """A[v, j] = 1 if leaf tree.leaves[j] lies in the subtree of node v (external ids)."""
    n, parent = tree.n_nodes, tree.parent
    A = np.zeros((n, tree.n_leaves))
    for j, leaf in enumerate(tree.leaves):
        v = leaf
        while v >= 0:
            A[v, j] = 1.0
            v = parent[v]
    return A


def dense_wls(tree, y, var):
    """Weighted least squares over measured rows; estimates and exact covariance diagonal."""
    A = ancestry_matrix(tree)
    m = np.isfinite(var)
    W = 1.0 / var[m]
    M = A[m].T @ (W[:, None] * A[m])
    cov_theta = np.linalg.inv(M)
    theta = cov_theta @ (A[m].T @ (W * y[m]))
    return A @ theta, np.einsum("ij,jk,ik->i", A, cov_theta, A)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**32 - 1), k=st.sampled_from([1, 3]))
def test_blue_equals_dense_least_squares(n, seed, k):
    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, n))
    var = rng.uniform(0.1, 10.0, n)
    y = rng.normal(0, 20, size=(n, k)) if k > 1 else rng.normal(0, 20, n)
    est = hierdp.postprocess("blue", tree, y, variance=var)
    yy = y.reshape(n, -1)
    for c in range(yy.shape[1]):
        x_ref, v_ref = dense_wls(tree, yy[:, c], var)
        got = est.values.reshape(n, -1)[:, c]
        np.testing.assert_allclose(got, x_ref, rtol=1e-8, atol=1e-8 * (1 + np.abs(x_ref).max()))
        np.testing.assert_allclose(est.variance, v_ref, rtol=1e-8, atol=1e-12)
        assert tree.is_consistent(got, rtol=1e-10, atol=1e-8)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 2**32 - 1))
def test_blue_with_unmeasured_levels(n, seed):
    """Budget 0 on some levels: infinite variance, handled exactly (leaves keep it identifiable)."""
    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, n))
    var = rng.uniform(0.5, 5.0, n)
    internal = tree.n_children > 0
    var[internal & (rng.random(n) < 0.6)] = np.inf
    y = np.where(np.isfinite(var), rng.normal(0, 10, n), 1e9)  # garbage where unmeasured must not matter
    est = hierdp.postprocess("blue", tree, y, variance=var)
    x_ref, v_ref = dense_wls(tree, y, var)
    np.testing.assert_allclose(est.values, x_ref, rtol=1e-8, atol=1e-7)
    np.testing.assert_allclose(est.variance, v_ref, rtol=1e-8, atol=1e-12)


def test_all_budget_on_leaves_is_plain_aggregation():
    tree = hierdp.Tree.complete(3, 3)
    leaf_noisy = np.arange(9.0) - 3
    y = np.zeros(tree.n_nodes)
    y[tree.leaves] = leaf_noisy
    var = np.full(tree.n_nodes, np.inf)
    var[tree.leaves] = 2.0
    est = hierdp.postprocess("blue", tree, y, variance=var)
    np.testing.assert_allclose(est.values, tree.aggregate(leaf_noisy))
    np.testing.assert_allclose(est.variance, 2.0 * tree.aggregate(np.ones(9)))


def test_unidentified_leaves_get_a_least_squares_split_with_infinite_variance():
    # leaves unmeasured: only the parents' totals are known
    tree = hierdp.Tree.from_parent([-1, 0, 0, 1, 1, 2, 2, 2])
    var = np.array([1.0, 1.0, 1.0, np.inf, np.inf, np.inf, np.inf, np.inf])
    y = np.array([10.0, 4.0, 5.0, 0, 0, 0, 0, 0])
    est = hierdp.postprocess("blue", tree, y, variance=var)
    assert tree.is_consistent(est.values)
    # parent level: the dense solve on the identifiable sub-problem (root, two states)
    t_top = hierdp.Tree.complete(2, 2)
    top = hierdp.postprocess("blue", t_top, y[:3], variance=var[:3])
    np.testing.assert_allclose(est.values[:3], top.values)
    np.testing.assert_allclose(est.values[3:5], [top.values[1] / 2] * 2)
    np.testing.assert_allclose(est.values[5:], [top.values[2] / 3] * 3)
    assert np.all(np.isinf(est.variance[3:])) and np.all(np.isfinite(est.variance[:3]))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_consistent_input_with_equal_variances_is_unchanged(n, seed):
    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, n))
    x = tree.aggregate(rng.normal(0, 50, tree.n_leaves))
    est = hierdp.postprocess("blue", tree, x, variance=3.0)
    np.testing.assert_allclose(est.values, x, rtol=1e-10, atol=1e-9)


def test_blue_hand_computed():
    # root 10, children 4 and 5, unit variances: minimise (a+b-10)^2+(a-4)^2+(b-5)^2
    tree = hierdp.Tree.complete(2, 2)
    est = hierdp.postprocess("blue", tree, np.array([10.0, 4.0, 5.0]), variance=np.ones(3))
    np.testing.assert_allclose(est.values, [29 / 3, 13 / 3, 16 / 3])
    np.testing.assert_allclose(est.variance, [2 / 3, 2 / 3, 2 / 3])


def test_blue_input_errors():
    tree = hierdp.Tree.complete(2, 2)
    with pytest.raises(DataError, match="NaN or infinity"):
        hierdp.postprocess("blue", tree, np.array([1.0, np.nan, 2.0]), variance=np.ones(3))
    with pytest.raises(DataError, match="non-negative"):
        hierdp.postprocess("blue", tree, np.ones(3), variance=np.array([1.0, -1.0, 1.0]))
    with pytest.raises(DataError, match="shape"):
        hierdp.postprocess("blue", tree, np.ones(4), variance=np.ones(4))
