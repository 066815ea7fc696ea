"""Intervals with their nominal coverage (hierdp.uncertainty; issue "uncertainty").

Reference values are brute-force sums of the noise pmfs and coverage over repeated
releases against the true counts; the full acceptance table is benchmarks/bench_coverage.py.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import hierdp
from hierdp.errors import DataError
from hierdp.mechanisms.base import Sensitivity
from hierdp.mechanisms.discrete_gaussian import DiscreteGaussian
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.uncertainty import exact_halfwidth, order_index


def _pmf(mech, budget):
    """Brute-force pmf on |z| <= 400 from the mechanism's exact parameters."""
    z = np.arange(-400, 401)
    if isinstance(mech, DiscreteLaplace):
        w = np.exp(-np.abs(z) / float(mech.scale(budget, Sensitivity())))
    else:
        w = np.exp(-(z * z) / (2 * float(mech.params(budget, Sensitivity()).sigma2)))
    return z, w / w.sum()


@pytest.mark.parametrize("mech,budget", [(DiscreteLaplace(), 1.0), (DiscreteLaplace(), 0.2),
                                         (DiscreteGaussian(), 0.5), (DiscreteGaussian(), 0.02)])
@pytest.mark.parametrize("c", [0.8, 0.9, 0.95])
def test_exact_halfwidth_is_the_smallest_lattice_interval(mech, budget, c):
    z, p = _pmf(mech, budget)
    k = exact_halfwidth(mech, budget, Sensitivity(), c)
    assert p[np.abs(z) <= k].sum() >= c - 1e-12
    assert k == 0 or p[np.abs(z) <= k - 1].sum() < c


@pytest.mark.parametrize("mech,budget", [(DiscreteLaplace(), 1.0), (DiscreteGaussian(), 0.5)])
def test_randomized_halfwidth_has_coverage_exactly_c(mech, budget):
    # P(|Z + U| <= h), U ~ U(-1/2, 1/2): each lattice cell [z - 1/2, z + 1/2] counts by its overlap
    z, p = _pmf(mech, budget)
    for c in (0.9, 0.95):
        h = exact_halfwidth(mech, budget, Sensitivity(), c, randomized=True)
        overlap = np.clip(np.minimum(z + 0.5, h) - np.maximum(z - 0.5, -h), 0.0, 1.0)
        assert math.isclose(float(np.dot(p, overlap)), c, abs_tol=1e-12)


def test_dlap_hand_values():
    # scale 1: P(|Z| <= k) = 1 - 2 e^-(k+1) / (1 + e^-1): k=2 -> 0.9273, k=1 -> 0.8021
    assert exact_halfwidth(DiscreteLaplace(), 1.0, Sensitivity(), 0.9) == 2.0
    assert exact_halfwidth(DiscreteLaplace(), 1.0, Sensitivity(), 0.93) == 3.0


def test_order_index_and_too_few_draws():
    assert order_index(0.9, 999) == 50 and order_index(0.95, 999) == 25 and order_index(0.95, 199) == 5
    with pytest.raises(DataError, match="draws >= 39"):
        order_index(0.95, 20)


def _release(tree, truth, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return hierdp.release(tree, truth, **kw)


@pytest.fixture(scope="module")
def sparse_tree():
    tree = hierdp.Tree.complete(fanout=3, height=4)          # 1, 3, 9, 27 nodes
    truth = tree.aggregate(np.random.default_rng(4).poisson(2, tree.n_leaves))
    return tree, truth


def test_methods_per_node(sparse_tree):
    tree, truth = sparse_tree
    leaves_only = {"total": 0, "level_1": 0, "level_2": 0, "level_3": 1.0}
    r = _release(tree, truth, epsilon=1.0, budget=leaves_only, postprocess=["blue"], seed=1)
    f = r.to_frame(confidence=0.9, draws=199, seed=0)
    leaf = (f["level"] == "level_3").to_numpy()
    assert (f.loc[leaf, "ci_method"] == "exact").all() and (f.loc[~leaf, "ci_method"] == "simulation").all()
    assert (f["ci_low"] <= f["estimate"]).all() and (f["estimate"] <= f["ci_high"]).all()
    assert "simulation" in f.attrs["uncertainty"]["method"]
    raw = _release(tree, truth, epsilon=1.0, postprocess=[], seed=1).to_frame(confidence=0.9)
    assert (raw["ci_method"] == "exact").all()
    with pytest.raises(DataError, match="strictly between 0 and 1"):
        r.to_frame(confidence=90)


@pytest.mark.parametrize("mech,kw", [("discrete_laplace", {"epsilon": 1.0}), ("discrete_gaussian", {"rho": 0.5})])
@pytest.mark.parametrize("budget", ["leaves", "equal"])
def test_coverage_small(sparse_tree, mech, kw, budget):
    """A small version of the acceptance: 200 releases, 90% and 95% at the 27 leaves and
    the 9 nodes above (3 s.e. of the pooled node-releases, plus the lattice/simulation slack)."""
    tree, truth = sparse_tree
    total = next(iter(kw.values()))
    b = {"total": 0, "level_1": 0, "level_2": 0, "level_3": total} if budget == "leaves" else "equal"
    hits = {0.9: [], 0.95: []}
    for i in range(200):
        r = _release(tree, truth, mechanism=mech, budget=b, postprocess=["blue"], seed=500 + i, **kw)
        iv = r.intervals((0.9, 0.95), draws=199, seed=i % 3)
        for c in hits:
            hits[c].append((iv.low[c] <= truth) & (truth <= iv.high[c]))
    depth = tree.depth
    for c, h in hits.items():
        h = np.array(h)
        for d in (2, 3):
            cov = h[:, depth == d].mean()
            n = h[:, depth == d].size
            se = math.sqrt(c * (1 - c) / n)
            assert c - 3 * se - 0.005 <= cov <= c + 3 * se + 0.025, (c, d, cov)


def test_nonlinear_bound_covers_where_the_bootstrap_does_not(sparse_tree):
    """After nonneg -> round on sparse counts the plug-in bootstrap under-covers the leaves
    (the released zeros make it too narrow); the default bound (BLUE's interval ∩ [0, inf))
    keeps coverage >= c and reports no std."""
    tree, truth = sparse_tree
    leaf = tree.depth == 3
    cov = {"bound": [], "bootstrap": []}
    for i in range(40):
        r = _release(tree, truth, epsilon=1.0, postprocess=["blue", "nonneg", "round"], seed=900 + i)
        for how in cov:
            iv = r.intervals(0.9, draws=99, seed=i, nonlinear=how)
            cov[how].append(((iv.low[0.9] <= truth) & (truth <= iv.high[0.9]))[leaf])
            if how == "bound":
                assert np.isnan(iv.std).all() and (iv.method == "bound").all()
                assert np.all(iv.low[0.9] >= 0) and np.all(iv.low[0.9] <= r.values) \
                    and np.all(r.values <= iv.high[0.9])
    assert np.mean(cov["bound"]) >= 0.88
    assert np.mean(cov["bootstrap"]) < 0.85


def test_cells_share_the_node_law():
    tree = hierdp.Tree.complete(fanout=2, height=3)
    truth = np.stack([tree.aggregate(np.arange(4)), tree.aggregate(np.ones(4, int))], axis=1)
    r = _release(tree, truth, epsilon=1.0, seed=3)
    f = r.to_frame(confidence=0.9, draws=99, seed=0)
    assert len(f) == 2 * tree.n_nodes
    assert (f["ci_low"] <= f["estimate"]).all() and (f["estimate"] <= f["ci_high"]).all()


def test_undetermined_nodes_get_an_unbounded_interval():
    # only the middle level measured: BLUE leaves the leaves' split undetermined (variance inf)
    tree = hierdp.Tree.complete(fanout=2, height=3)
    r = _release(tree, tree.aggregate(np.arange(4)), epsilon=1.0, budget=[0, 1.0, 0], postprocess=["blue"], seed=3)
    f = r.to_frame(confidence=0.9, draws=99, seed=0)
    leaf = (f["level"] == "level_2").to_numpy()
    assert np.isinf(f.loc[leaf, "ci_low"]).all() and np.isinf(f.loc[leaf, "ci_high"]).all()
    assert (f.loc[~leaf, "ci_method"] != "bound").all() and np.isfinite(f.loc[~leaf, "ci_low"]).all()


def test_frame_shows_no_linear_std_after_a_nonlinear_step():
    """A node released as 0 by nonneg showed BLUE's std (108 in the issue): after a
    non-linear step .frame has no std and says why."""
    import hierdp

    tree = hierdp.Tree.complete(3, 4)
    counts = tree.aggregate(np.zeros(tree.n_leaves, dtype=np.int64))
    lin = hierdp.release(tree, counts, epsilon=0.5, postprocess=["blue"], seed=3).frame
    assert np.isfinite(lin["std"]).all() and "std" not in lin.attrs
    nl = hierdp.release(tree, counts, epsilon=0.5, postprocess=["blue", "nonneg"], seed=3).frame
    assert nl["std"].isna().all() and "non-linear" in nl.attrs["std"]
