"""Non-negative consistent least squares (``nonneg``) against scipy's bounded least-squares
solver, and controlled rounding (``round``) properties."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import lsq_linear

import hierdp
from hierdp.errors import DataError, NotForPublicationWarning
from hierdp.generation_matrix import ancestor_matrix
from hierdp.postprocessors import Estimate
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.nonneg import NonNegative, nonneg
from hierdp.postprocessors.rounding import ControlledRounding, controlled_round
from tests.helpers import random_parent


def _tree(n, seed):
    return hierdp.Tree.from_parent(random_parent(np.random.default_rng(seed), n))


def scipy_reference(tree, y, d):
    """min sum w (A l - y)^2, l >= 0, with scipy's BVLS; returns the objective value."""
    leaves = np.flatnonzero(tree._n_children == 0)
    A = ancestor_matrix(tree).T.toarray()[:, leaves]
    w = np.where(np.isinf(d), 0.0, 1.0 / d)
    sw = np.sqrt(w)
    res = lsq_linear(A * sw[:, None], y * sw, bounds=(0, np.inf), method="bvls", tol=1e-13)
    x = A @ res.x
    return float(np.sum(w * (x - y) ** 2)), x


def _check_consistent_nonneg(tree, x):
    assert x.min() >= 0
    s = np.zeros_like(x)
    np.add.at(s, tree._parent[1:], x[1:])
    internal = tree._n_children > 0
    np.testing.assert_allclose(x[internal], s[internal], rtol=1e-12, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 50), seed=st.integers(0, 2**32 - 1), mean=st.sampled_from([0.3, 2.0, 20.0]),
       unmeasured=st.booleans())
def test_nonneg_matches_scipy_objective(n, seed, mean, unmeasured):
    rng = np.random.default_rng(seed)
    tree = _tree(n, seed)
    true = tree.to_internal(tree.aggregate(rng.poisson(mean, tree.n_leaves))).astype(float)
    d = rng.uniform(0.5, 4.0, n)
    if unmeasured:  # some non-leaf nodes carry no measurement (budget 0 on their level)
        d[(tree._n_children > 0) & (rng.random(n) < 0.5)] = np.inf
    y = true + rng.normal(0, 3.0, n) * np.sqrt(np.where(np.isinf(d), 1.0, d))
    y[np.isinf(d)] = 0.0
    x, info = nonneg(tree, y, d)
    _check_consistent_nonneg(tree, x)
    assert info["converged"] and info["kkt_residual"] < 1e-8
    ref_obj, _ = scipy_reference(tree, y, d)
    assert info["objective"] == pytest.approx(ref_obj, rel=1e-6, abs=1e-9)
    assert info["objective"] <= ref_obj * (1 + 1e-9) + 1e-9


def test_nonneg_is_blue_when_blue_is_already_non_negative():
    tree = hierdp.Tree.complete(3, 4)
    rng = np.random.default_rng(0)
    y = tree.to_internal(tree.aggregate(rng.poisson(500, tree.n_leaves))) + rng.normal(0, 1, tree.n_nodes)
    d = np.ones(tree.n_nodes)
    x, info = nonneg(tree, y, d)
    np.testing.assert_allclose(x, blue(tree, y, d).values, rtol=1e-12)
    assert info["iterations"] == 1 and info["n_zero_leaves"] == 0


def test_nonneg_sparse_counts_2d_and_differs_from_clipping():
    """Mostly-zero counts (census blocks): clipping breaks consistency, nonneg does not, and
    nonneg's objective is never worse than that of the clipped-then-reaggregated leaves."""
    tree = hierdp.Tree.complete(4, 5)
    rng = np.random.default_rng(1)
    leaves = (rng.random((tree.n_leaves, 2)) < 0.2) * rng.poisson(3, (tree.n_leaves, 2))
    true = tree.to_internal(tree.aggregate(leaves)).astype(float)
    y = true + rng.laplace(0, 2.0, true.shape)
    d = np.full(tree.n_nodes, 8.0)
    est = NonNegative(method="global").apply(tree, Estimate(y, d))
    x = est.values
    assert x.shape == y.shape and est.info["converged"]
    for c in range(2):
        _check_consistent_nonneg(tree, x[:, c])
        ref_obj, _ = scipy_reference(tree, y[:, c], d)
        obj = float(np.sum((x[:, c] - y[:, c]) ** 2 / d))
        assert obj == pytest.approx(ref_obj, rel=1e-6)
    b = blue(tree, y, d).values
    assert b.min() < 0                                   # the unconstrained estimate goes negative
    clipped = np.maximum(b, 0)
    s = np.zeros_like(clipped)
    np.add.at(s, tree._parent[1:], clipped[1:])
    internal = tree._n_children > 0
    assert np.abs(clipped[internal] - s[internal]).max() > 0.5   # clipping is not consistent


def test_nonneg_uses_measurement_variance_through_a_chain():
    """The chain hands the measurement variances on; nonneg after gmc solves the same problem
    as nonneg on the raw measurements (Pythagoras on the consistent subspace)."""
    from hierdp.postprocessors.base import Measurements
    from hierdp.postprocessors.chain import run_chain

    tree = hierdp.Tree.complete(2, 6)
    rng = np.random.default_rng(2)
    d = (2.0 / np.array([0.1, 0.1, 0.2, 0.2, 0.4, 1.0]) ** 2)[tree._depth]
    y = tree.to_internal(tree.aggregate(rng.poisson(1, tree.n_leaves))) + rng.normal(0, 1, tree.n_nodes) * np.sqrt(d)
    direct, _ = nonneg(tree, y, d)
    gmc = hierdp.registry.create("postprocessor", "gmc")
    step1 = run_chain(tree, Measurements(y, d), [gmc])
    np.testing.assert_array_equal(step1.measurement_variance, d)
    assert step1.linear and step1.consistent
    chained = run_chain(tree, Measurements(y, d), [gmc, NonNegative(method="global")])
    np.testing.assert_allclose(chained.values, direct, rtol=1e-9, atol=1e-9)
    assert chained.consistent and not chained.linear


def test_nonneg_errors():
    tree = hierdp.Tree.complete(2, 3)
    with pytest.raises(DataError, match="positive variances"):
        nonneg(tree, np.ones(7), np.zeros(7))
    with pytest.raises(DataError, match="max_iter"):
        NonNegative(max_iter=0)


# ------------------------------------------------------------------------- rounding
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 2**32 - 1), k=st.sampled_from([None, 2]))
def test_round_consistent_nonneg_integer_within_one(n, seed, k):
    rng = np.random.default_rng(seed)
    tree = _tree(n, seed)
    shape = (tree.n_leaves,) if k is None else (tree.n_leaves, k)
    leaves = rng.exponential(2.0, shape) * (rng.random(shape) < 0.7)   # real, >= 0, some exact zeros
    x = tree.to_internal(tree.aggregate(leaves))
    r = controlled_round(tree, x)
    assert r.dtype == np.int64 and r.shape == x.shape and r.min() >= 0
    s = np.zeros_like(r)
    np.add.at(s, tree._parent[1:], r[1:])
    internal = tree._n_children > 0
    np.testing.assert_array_equal(r[internal], s[internal])
    assert np.abs(r - x).max() < 1.0
    integral = np.abs(x - np.round(x)) < 1e-9                  # nodes already integral keep their value
    np.testing.assert_array_equal(r[integral], np.round(x[integral]))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 2**32 - 1))
def test_round_leaves_integral_consistent_input_unchanged(n, seed):
    rng = np.random.default_rng(seed)
    tree = _tree(n, seed)
    x = tree.to_internal(tree.aggregate(rng.poisson(3, tree.n_leaves))).astype(float)
    np.testing.assert_array_equal(controlled_round(tree, x), x)


def test_round_hand_computed():
    """Root 3.4 -> 3; children 1.2, 1.5, 0.7 (floors 1, 1, 0; D = 1) -> the largest fraction 0.7 goes up."""
    tree = hierdp.Tree.from_parent(np.array([-1, 0, 0, 0]))
    np.testing.assert_array_equal(controlled_round(tree, np.array([3.4, 1.2, 1.5, 0.7])), [3, 1, 1, 1])
    # root 3.6 -> 4; D = 2: 0.7 and 0.5 go up
    np.testing.assert_array_equal(controlled_round(tree, np.array([3.6, 1.2, 1.5, 0.9])), [4, 1, 2, 1])


def test_round_inconsistent_or_negative_input_still_consistent():
    tree = hierdp.Tree.complete(3, 3)
    rng = np.random.default_rng(3)
    y = rng.normal(0, 5, tree.n_nodes)            # noisy, negative, inconsistent
    r = ControlledRounding().apply(tree, Estimate(y, np.ones(tree.n_nodes))).values
    assert r.min() >= 0
    s = np.zeros_like(r)
    np.add.at(s, tree._parent[1:], r[1:])
    internal = tree._n_children > 0
    np.testing.assert_array_equal(r[internal], s[internal])
    with pytest.raises(DataError, match="atol"):
        ControlledRounding(atol=0.7)


def _spread_unit_by_unit(base, frac, D):
    """The documented rule for inconsistent input, one unit at a time (the reference)."""
    base = base.copy()
    if D > 0:
        base += frac > 0
        rest = D - int(np.count_nonzero(frac > 0))
        base += rest // base.size
        base[: rest % base.size] += 1
        return base
    need = -D
    while need > 0 and base.max() > 0:
        for t in range(base.size):
            if need and base[t] > 0:
                base[t] -= 1
                need -= 1
    return base


def test_round_inconsistent_spreads_like_unit_by_unit_and_fast():
    from hierdp.postprocessors import _rounding_kernels as RK

    rng = np.random.default_rng(11)
    for _ in range(400):
        nc = int(rng.integers(1, 12))
        base = rng.integers(0, 9, nc).astype(np.int64)
        frac = np.where(rng.random(nc) < 0.5, rng.random(nc), 0.0)
        nfrac = int(np.count_nonzero(frac > 0))
        D = int(rng.integers(-60, 60))
        if 0 <= D <= nfrac:
            continue
        got = base.copy()
        RK._round_inconsistent(frac, got, nc, D, nfrac)
        np.testing.assert_array_equal(got, _spread_unit_by_unit(base, frac, D))
    # a parent of 0 over children of 1e12: every unit taken (it took a unit per step before)
    tree = hierdp.Tree.from_parent(np.array([-1, 0, 0, 0]))
    np.testing.assert_array_equal(controlled_round(tree, np.array([0.0, 1e12, 2e12, 3.5])), [0, 0, 0, 0])
    np.testing.assert_array_equal(controlled_round(tree, np.array([5.0, 1e12, 2e12, 3.5])), [5, 0, 5, 0])


def test_release_chain_blue_nonneg_round():
    """postprocess=["gmc", "nonneg", "round"] in a release gives consistent non-negative integers."""
    from hierdp import release

    tree = hierdp.Tree.complete(3, 5)
    rng = np.random.default_rng(4)
    counts = tree.aggregate((rng.random(tree.n_leaves) < 0.3) * rng.poisson(2, tree.n_leaves))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotForPublicationWarning)
        res = release(tree, counts, epsilon=1.0, postprocess=["gmc", "nonneg", "round"], seed=5)
    v = res.estimate.values
    assert np.issubdtype(v.dtype, np.integer) and v.min() >= 0
    assert tree.is_consistent(v, rtol=0, atol=0)


@pytest.mark.parametrize("nc", [2, 5, 16, 17, 40, 700, 3000])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("integral", [0.0, 0.3])
def test_round_gives_the_units_to_the_largest_fractions(nc, ties, integral):
    """A star: the root's rounding surplus goes to the children with the largest fractional
    parts, ties to the lowest index (a sort-based reference); integral children keep their
    value. Sizes cover direct ranking (<= 16), buckets, and sorted boundary buckets."""
    rng = np.random.default_rng(nc)
    tree = hierdp.Tree.from_parent(np.r_[-1, np.zeros(nc, np.int64)])
    kids = np.floor(rng.exponential(3, nc)) + (np.full(nc, 0.5) if ties else rng.random(nc))
    whole = rng.random(nc) < integral
    kids[whole] = np.floor(kids[whole])
    x = np.r_[kids.sum(), kids]
    r = controlled_round(tree, x)
    D = int(np.floor(x[0] + 0.5)) - int(np.floor(kids).sum())
    order = np.lexsort((np.arange(nc), -(kids - np.floor(kids))))   # largest fraction first, then index
    expect = np.floor(kids).astype(np.int64)
    expect[order[:D]] += 1
    np.testing.assert_array_equal(r[1:], expect)
    assert r[0] == r[1:].sum()


def test_round_refuses_values_beyond_exact_float_integers():
    tree = hierdp.Tree.complete(2, 2)
    for big in (2.0**62, 1e19):
        with pytest.raises(hierdp.DataError, match="below 2\\*\\*53"):
            controlled_round(tree, np.array([2 * big, big, big]))
    r = controlled_round(tree, np.array([2.0**52, 2.0**51, 2.0**51]))
    assert r.tolist() == [2**52, 2**51, 2**51]


def test_nonneg_alone_reports_the_blue_variances():
    """Applied to measurements directly, nonneg reports the variances of the linear
    consistent estimate with the same weights (as after blue), not the raw measurement
    variances: an unmeasured root summing two measured leaves has variance 2, not inf."""
    from hierdp import release

    tree = hierdp.Tree.complete(2, 2)
    y, var = np.array([10.0, 4.0, 5.0]), np.array([np.inf, 1.0, 1.0])
    alone = hierdp.postprocess("nonneg", tree, y, variance=var)
    np.testing.assert_allclose(alone.variance, [2.0, 1.0, 1.0])
    np.testing.assert_allclose(alone.variance, hierdp.postprocess("blue", tree, y, variance=var).variance)
    chained = release(tree, np.array([9, 4, 5]), epsilon=1.0, postprocess=["nonneg"], seed=1)
    after_blue = release(tree, np.array([9, 4, 5]), epsilon=1.0, postprocess=["blue", "nonneg"], seed=1)
    np.testing.assert_allclose(chained.estimate.variance, after_blue.estimate.variance)
