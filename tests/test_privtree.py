"""PrivTree (Zhang, Xiao & Xie 2016), SimpleTree and the uniform grid: parameters against
the paper, the floor of Eq. (8), Lemma 3.2, point routing against brute force, the
release model (ledger, consistency, post-processor contract, range queries) and audits of
the split decisions (correct within ε; no floor and halved λ caught)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import registry
from hierdp.accounting.audit import audit
from hierdp.decompositions import privtree as pt
from hierdp.decompositions.privtree import GRID, PrivTree, SimpleTree, UniformGrid, privtree_parameters
from hierdp.errors import BudgetError, DataError
from hierdp.frontends.points import query_structure, range_counts, release_points
from hierdp.rng import make_rng
from hierdp.testing import BasePostProcessorTests

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


# ----------------------------------------------------------------------------- parameters
def test_lambda_and_delta_match_corollary_1_for_a_quadtree():
    # β = 4, ε = 1: λ = (2·4 − 1)/((4 − 1)·1) = 7/3, δ = λ·ln 4 = 3.2347...
    p = privtree_parameters(1.0, 4)
    assert p.lam >= 7 / 3 and p.lam == pytest.approx(7 / 3, rel=1e-5)
    assert p.delta >= p.lam * math.log(4) and p.delta == pytest.approx(3.234697, rel=1e-5)
    # β = 2, ε = 0.5: λ = 3/0.5 = 6, δ = 6·ln 2
    p = privtree_parameters(0.5, 2)
    assert p.lam >= 6 and p.lam == pytest.approx(6, rel=1e-5)
    assert p.delta >= p.lam * math.log(2) and p.delta == pytest.approx(4.158883, rel=1e-5)
    # x leaves per tuple (§3.5): λ times x
    assert privtree_parameters(1.0, 4, contributions=3).lam == pytest.approx(7.0, rel=1e-5)
    # the grid quantities are exact integers consistent with the floats
    assert p.delta_grid == p.delta * GRID and float(p.noise.scale) / GRID == p.lam


def test_default_fanout_is_two_to_the_d():
    assert PrivTree(bounds=[(0, 1)] * 3).parameters(1.0, 3).beta == 8
    assert PrivTree(bounds=[(0, 1)] * 3, split="cycle").parameters(1.0, 3).beta == 2


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_bad_epsilon_is_refused(bad):
    with pytest.raises(BudgetError):
        privtree_parameters(bad, 4)


def test_floor_keeps_the_score_at_theta_minus_delta():
    p = privtree_parameters(1.0, 4, theta=2.0)
    counts = np.array([0, 1, 5, 20, 100])
    for depth in (0, 1, 3, 7):
        b = pt._biased_score(counts, depth, p.delta_grid, p.theta_grid) / GRID
        hand = np.maximum(counts - depth * p.delta, 2.0 - p.delta)  # Eq. (8)
        np.testing.assert_allclose(b, hand, rtol=0, atol=1e-9)
        assert np.all(b >= p.theta - p.delta)
    # deep enough, every count sits on the floor
    assert np.all(pt._biased_score(counts, 100, p.delta_grid, p.theta_grid) == p.theta_grid - p.delta_grid)


# ----------------------------------------------------------------------------- the decomposition
def _nodes_bruteforce(structure, pts):
    inside = np.all((pts[None, :, :] >= structure.lows[:, None, :]) &
                    ((pts[None, :, :] < structure.highs[:, None, :]) |
                     ((pts[None, :, :] == structure.highs[:, None, :]) &
                      (structure.highs[:, None, :] == structure.bounds[:, 1]))), axis=2)
    return inside.sum(axis=1)


@pytest.mark.parametrize("split", ["all", "cycle"])
def test_regions_and_point_routing_match_brute_force(split):
    rng = np.random.default_rng(4)
    pts = np.vstack([rng.normal([2, 5], 0.3, (300, 2)), rng.uniform([0, 0], [10, 8], (100, 2))]).clip([0, 0], [10, 8])
    st = PrivTree(bounds=[(0, 10), (0, 8)], split=split).decompose(pts, budget=2.0, rng=make_rng(1))
    tree = st.tree
    assert st.private_structure and st.spends[0].amount == 2.0 and tree.n_nodes > 20
    # counts per node (through the leaves) equal the points in each region
    counts = tree.aggregate(st.leaf_counts(pts))
    np.testing.assert_array_equal(counts, _nodes_bruteforce(st, pts))
    # children tile the parent: volumes add up, children are contiguous after first_child
    vol = np.prod(st.highs - st.lows, axis=1)
    par = tree.parent
    child_vol = np.bincount(par[1:], weights=vol[1:], minlength=tree.n_nodes)
    internal = ~st.is_leaf
    np.testing.assert_allclose(child_vol[internal], vol[internal], rtol=1e-12)
    beta = 4 if split == "all" else 2
    assert np.all(tree.n_children[internal] == beta)
    fc = st.first_child[internal]
    assert np.all(par[fc] == np.flatnonzero(internal)) and np.all(par[fc + beta - 1] == np.flatnonzero(internal))


def test_depth_cap_stops_duplicates():
    pts = np.full((500, 2), 0.25)  # θ = 0 would split a heavy duplicate cell ~150 times
    st = PrivTree(bounds=[(0, 1), (0, 1)], max_depth=12).decompose(pts, budget=1.0, rng=make_rng(2))
    assert st.tree.depth.max() == 12
    with pytest.raises(DataError, match="max_depth"):
        PrivTree(bounds=[(0, 1), (0, 1)], max_depth=32).decompose(pts, budget=1.0, rng=make_rng(2))


def test_errors_name_the_problem():
    pts = np.array([[0.5, 2.0]])
    with pytest.raises(DataError, match="outside the declared bounds"):
        PrivTree(bounds=[(0, 1), (0, 1)]).decompose(pts, budget=1.0)
    with pytest.raises(DataError, match="bounds"):
        PrivTree(bounds=[(0, 1)]).decompose(pts, budget=1.0)
    with pytest.raises(BudgetError, match="budget"):
        PrivTree(bounds=[(0, 1), (0, 3)]).decompose(pts)
    with pytest.raises(DataError, match="split"):
        PrivTree(bounds=[(0, 1), (0, 3)], split="thirds").decompose(pts, budget=1.0)


def _t_star_size(pts, theta, depth_cap):
    """|T*| of Lemma 3.2 by plain recursion: split a node of the quadtree iff c(v) > θ."""
    def rec(lo, hi, sel, depth):
        if depth == depth_cap or sel.sum() <= theta:
            return 1
        mid = (lo + hi) / 2
        total = 1
        for cx in (0, 1):
            for cy in (0, 1):
                clo = np.where([cx, cy], mid, lo)
                chi = np.where([cx, cy], hi, mid)
                inside = sel & np.all((pts >= clo) & (pts < chi), axis=1)
                total += rec(clo, chi, inside, depth + 1)
        return total
    return rec(np.zeros(2), np.full(2, 64.0), np.ones(len(pts), bool), 0)


@pytest.mark.parametrize("theta,eps", [(1.0, 1.0), (3.0, 0.5)])
def test_lemma_3_2_expected_size_at_most_twice_the_noiseless_tree(theta, eps):
    """Distinct points on the 64×64 integer grid: with θ >= 1 the noiseless tree T* stops
    on its own before single cells, so the cap (6) cuts neither T* nor the bound."""
    rng = np.random.default_rng(7)
    flat = rng.choice(64 * 64, size=300, replace=False, p=None)
    pts = np.c_[flat // 64, flat % 64].astype(float) + 0.5
    t_star = _t_star_size(pts, theta, 6)
    assert t_star > 1
    sizes = [PrivTree(bounds=[(0, 64), (0, 64)], theta=theta, max_depth=6).decompose(
        pts, budget=eps, rng=make_rng(100 + i)).tree.n_nodes for i in range(150)]
    assert np.mean(sizes) <= 2 * t_star, (np.mean(sizes), t_star)


def test_simpletree_respects_its_height_and_grid_its_size():
    rng = np.random.default_rng(1)
    pts = rng.uniform(0, 1, (2000, 2))
    st = SimpleTree(bounds=[(0, 1), (0, 1)], height=4).decompose(pts, budget=1.0, rng=make_rng(3))
    assert st.tree.depth.max() <= 3 and st.params["lambda"] >= 4.0  # λ >= h/ε
    g = UniformGrid(bounds=[(0, 1), (0, 1)], n=2000, epsilon_counts=1.0).decompose(pts)
    assert g.params["m"] == math.ceil(math.sqrt(2000 * 1.0 / 10))  # d = 2: m = sqrt(nε/10)
    assert not g.private_structure and g.spends == []
    np.testing.assert_array_equal(g.tree.aggregate(g.leaf_counts(pts)), _nodes_bruteforce(g, pts))


def test_registered_as_data_dependent_decompositions():
    for name in ("privtree", "simpletree", "grid"):
        assert name in registry.names("decomposition")
    d = registry.create("decomposition", "privtree", bounds=[(0, 1)])
    assert d.data_dependent


# ----------------------------------------------------------------------------- release
@pytest.fixture(scope="module")
def clustered():
    rng = np.random.default_rng(11)
    pts = np.vstack([rng.normal([0.3, 0.3], 0.02, (3000, 2)), rng.uniform(0, 1, (1000, 2))]).clip(0, 1)
    return pd.DataFrame(pts, columns=["x", "y"])


def test_release_ledger_consistency_and_frame(clustered):
    r = clustered.dptree.privtree(columns=["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=5)
    led = r.ledger
    assert led.epsilon == 1.0 and led.spent == pytest.approx(1.0) and led.accountant().total == pytest.approx(1.0)
    assert led.decomposition["private_structure"] is True
    assert [s["amount"] for s in led.decomposition["spends"]] == [0.5]
    assert [ls.budget for ls in led.levels] == [0.5] and "privtree" in str(led)
    tree, st = r.tree, r.structure
    assert tree.is_consistent(r.estimate.values)
    # std: internal nodes are sums of their leaves' independent measurements
    leaf_var = hierdp.registry.create("mechanism", "discrete_laplace").variance(0.5, hierdp.Sensitivity())
    np.testing.assert_allclose(r.std ** 2, tree.aggregate(np.full(tree.n_leaves, leaf_var)), rtol=1e-9)
    f = r.frame
    assert list(f.columns) == ["node", "depth", "leaf", "x_low", "x_high", "y_low", "y_high", "estimate", "std"]
    assert len(f) == tree.n_nodes and f["leaf"].sum() == tree.n_leaves
    # queries: a node's own region returns its estimate; the whole box the root
    nodes = np.array([0, 1, tree.leaves[3]])
    np.testing.assert_allclose(r.query(st.lows[nodes], st.highs[nodes]), r.estimate.values[nodes], rtol=1e-9)


def test_structure_share_and_leaf_budget():
    pts = np.random.default_rng(0).uniform(0, 1, (500, 1))
    r = release_points(pts, bounds=[(0, 1)], epsilon=2.0, structure_share=0.25, seed=1)
    assert r.ledger.decomposition["spends"][0]["amount"] == 0.5 and r.ledger.levels[0].budget == 1.5
    with pytest.raises(BudgetError):
        release_points(pts, bounds=[(0, 1)], epsilon=2.0, structure_share=1.0)


def test_query_uniformity_by_hand():
    # a 2×2 grid on [0,2]², exact (huge ε) counts 4, 0, 0, 8 in cells (0,0), (0,1), (1,0), (1,1)
    pts = np.array([[0.5, 0.5]] * 4 + [[1.5, 1.5]] * 8)
    st = UniformGrid(bounds=[(0, 2), (0, 2)], m=2).decompose(pts)
    leaf = st.leaf_counts(pts).astype(float)
    assert leaf.tolist() == [4, 0, 0, 8]
    # [0.5, 1.5]² covers a quarter of every cell: 4/4 + 8/4 = 3; [0,2]×[0,1] is the first row
    got = query_structure(st, leaf, [[0.5, 0.5], [0, 0], [1.0, 1.0]], [[1.5, 1.5], [2, 1], [1.5, 2.0]])
    np.testing.assert_allclose(got, [3.0, 4.0, 8 * 0.5])


def test_query_is_exact_on_true_counts_for_aligned_boxes(clustered):
    pts = clustered.to_numpy()
    st = PrivTree(bounds=[(0, 1), (0, 1)]).decompose(pts, budget=1.0, rng=make_rng(3))
    leaves = st.tree.leaves
    # boxes made of leaves' exact regions (closed boxes touch no other leaf with mass 0 width)
    got = query_structure(st, st.leaf_counts(pts), st.lows[leaves[:50]], st.highs[leaves[:50]])
    np.testing.assert_allclose(got, st.leaf_counts(pts)[:50])
    lo = np.array([[0.0, 0.0], [0.25, 0.25]])
    hi = np.array([[1.0, 1.0], [0.5, 0.5]])
    assert query_structure(st, st.leaf_counts(pts), lo[:1], hi[:1])[0] == len(pts)
    assert range_counts(pts, lo, hi)[0] == len(pts)


class TestBlueOnPrivTreeLeaves(BasePostProcessorTests):
    """The post-processor contract on PrivTree-shaped trees (ragged, leaves at many depths)."""

    @pytest.fixture
    def postprocessor(self):
        return registry.create("postprocessor", "blue")

    @pytest.fixture(params=[0, 1])
    def tree(self, request):
        rng = np.random.default_rng(request.param)
        pts = np.vstack([rng.normal(0.3, 0.05, (400, 2)), rng.uniform(0, 1, (100, 2))]).clip(0, 1)
        return PrivTree(bounds=[(0, 1), (0, 1)]).decompose(pts, budget=2.0, rng=make_rng(request.param)).tree


class TestGmcOnPrivTreeLeaves(TestBlueOnPrivTreeLeaves):
    @pytest.fixture
    def postprocessor(self):
        return registry.create("postprocessor", "gmc")


# ----------------------------------------------------------------------------- audits
AUDIT_EPS = 3.0  # β = 2 (points on a line); the margins of the broken variants are widest here


def _leaf_depth_sampler(max_depth=40):
    """The depth of the leaf holding the extra point t, for m independent runs of PrivTree's
    split decisions on a line where c points sit on t's location (so every node on t's path
    has count c). The decisions come from :meth:`PrivTree.decider`, the code `decompose`
    runs; other nodes' decisions do not depend on t and are left out."""
    def sample(c, m, rng):
        p = PrivTree(bounds=[(0, 1)]).parameters(AUDIT_EPS, 1)
        return PrivTree.path_stop_depths(PrivTree.decider(p, rng), [int(c)] * max_depth, m)
    return sample


def test_leaf_depth_sampler_matches_decompose():
    """The path sampler reproduces the leaf depth of t in full decompositions."""
    pts = np.full((7, 1), 0.3)
    real = [PrivTree(bounds=[(0, 1)]).decompose(pts, budget=AUDIT_EPS, rng=make_rng(i)) for i in range(400)]
    real_depth = np.array([s.tree.depth[s.locate(pts[:1])[0]] for s in real])
    sim = _leaf_depth_sampler()(7, 20000, make_rng(1))
    se = math.sqrt(real_depth.var() / 400 + sim.var() / 20000)
    assert abs(real_depth.mean() - sim.mean()) < 4 * se + 1e-9


@pytest.mark.parametrize("c", [6, 9])
def test_audit_privtree_split_decisions_within_epsilon(c):
    res = audit(_leaf_depth_sampler(), c, c + 1, n=200_000, seed=c, claimed=AUDIT_EPS)
    assert not res.violates, str(res)


def test_audit_catches_privtree_without_the_floor(monkeypatch):
    monkeypatch.setattr(pt, "_biased_score",
                        lambda counts, depth, d, t: counts.astype(np.int64) * GRID - depth * d)
    res = audit(_leaf_depth_sampler(), 6, 7, n=200_000, seed=1, claimed=AUDIT_EPS)
    assert res.violates, str(res)


def test_audit_catches_privtree_with_half_lambda(monkeypatch):
    monkeypatch.setattr(pt, "_lambda_paper", lambda beta, eps, x: x * (2 * beta - 1) / ((beta - 1) * eps) / 2)
    res = audit(_leaf_depth_sampler(), 9, 10, n=200_000, seed=2, claimed=AUDIT_EPS)
    assert res.violates, str(res)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_range_counts_match_brute_force_with_ties_and_closed_boxes(d):
    g = np.random.default_rng(d)
    pts = np.round(g.uniform(0, 1, (2000, d)), 2)  # many ties, points on box edges
    lo = np.round(g.uniform(0, 0.8, (200, d)), 2)
    hi = lo + np.round(g.uniform(0, 0.3, (200, d)), 2)
    brute = np.array([np.count_nonzero(np.all((pts >= a) & (pts <= b), axis=1)) for a, b in zip(lo, hi)])
    np.testing.assert_array_equal(range_counts(pts, lo, hi), brute)


def test_plot_draws_the_leaves(clustered):
    pytest.importorskip("matplotlib")
    r = clustered.dptree.privtree(columns=["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=2)
    ax = hierdp.plot.decomposition(r)
    assert len(ax.collections[0].get_paths()) == r.tree.n_leaves
    assert ax.get_xlim() == (0.0, 1.0)


def test_grid_closed_form_matches_the_tree_descent():
    g = np.random.default_rng(3)
    pts = g.uniform(0, 1, (3000, 2))
    st = UniformGrid(bounds=[(0, 1), (0, 1)], m=7).decompose(pts)
    leaf = st.leaf_counts(pts).astype(float)
    lo = g.uniform(0, 0.7, (300, 2))
    hi = lo + g.uniform(0, 0.3, (300, 2))
    fast = query_structure(st, leaf, lo, hi)
    st.method = "grid-as-tree"  # forces the generic descent
    np.testing.assert_allclose(query_structure(st, leaf, lo, hi, max_pairs=64), fast, rtol=1e-9)


def test_x_leaves_per_tuple_scales_lambda_and_leaf_noise():
    pts = np.random.default_rng(0).uniform(0, 1, (400, 2))
    r1 = release_points(pts, bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1)
    r2 = release_points(pts, bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1, contributions=2)
    assert r2.structure.params["lambda"] == pytest.approx(2 * r1.structure.params["lambda"], rel=1e-5)
    dlap = hierdp.registry.create("mechanism", "discrete_laplace")
    assert r2.ledger.max_contributions == 2
    assert r2.ledger.levels[0].noise_variance == pytest.approx(dlap.variance(0.5, hierdp.Sensitivity.bounded(2)))
    assert r1.ledger.levels[0].noise_variance == pytest.approx(dlap.variance(0.5, hierdp.Sensitivity()))
