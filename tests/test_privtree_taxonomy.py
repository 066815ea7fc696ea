"""PrivTree on a public taxonomy with monotone scores (Zhang, Xiao & Xie 2016, §3.5):
λ = s·x·(2β−1)/((β−1)ε) by hand, the released tree is a sub-taxonomy whose internal
nodes carry all their public children, the split probability of Alg. 2 against the
discrete Laplace tail, the residual score of Eq. (13) (Lemma 4.1 by brute force), the
release model, and audits: a sensitivity-2 score within ε, and the same score with its
sensitivity understated caught."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import hierdp
from hierdp import registry
from hierdp.accounting.audit import audit
from hierdp.decompositions.privtree import GRID, PrivTree
from hierdp.decompositions.taxonomy import TaxonomyPrivTree, residual_score
from hierdp.errors import BudgetError, DataError, PrivacyError
from hierdp.frontends.taxonomy import release_taxonomy
from hierdp.rng import make_rng

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _labelled_taxonomy():
    """region > country > city, ragged fan-out (max 4), labelled."""
    import pandas as pd

    rows = [("eu", "fr", "paris"), ("eu", "fr", "lyon"), ("eu", "de", "berlin"), ("eu", "de", "bonn"),
            ("eu", "de", "köln"), ("eu", "it", "roma"), ("eu", "es", "madrid"), ("am", "us", "nyc"),
            ("am", "us", "sf"), ("am", "ca", "toronto"), ("as", "jp", "tokyo")]
    paths = pd.DataFrame(rows, columns=["region", "country", "city"])
    return hierdp.Tree.from_frame(paths, ["region", "country", "city"], domains={"region": "observed", "country": paths[["region", "country"]], "city": paths})


def _caterpillar(depth):
    """A path of `depth` internal nodes, each with a leaf child and the next path node:
    fan-out 2; the deepest path node is a leaf (taxonomy.leaves order: ascending ids)."""
    parent = [-1]
    for k in range(depth):
        spine = 2 * k  # path node at depth k has id 2k; its two children are 2k+1 (leaf), 2k+2 (path)
        parent += [spine, spine]
    return hierdp.Tree.from_parent(np.array(parent))


def test_lambda_scales_with_sensitivity_and_contributions():
    t = hierdp.Tree.complete(3, 3)
    p = TaxonomyPrivTree(t).parameters(1.0)  # default β = largest fan-out = 3
    assert p.beta == 3 and p.lam == pytest.approx(5 / 2, rel=1e-5)  # (2β−1)/((β−1)ε)
    assert p.delta >= p.lam * math.log(3) and p.delta == pytest.approx(p.lam * math.log(3), rel=1e-5)
    p2 = TaxonomyPrivTree(t, score=lambda v: 2 * v, sensitivity=2, contributions=3).parameters(0.5)
    assert p2.lam == pytest.approx(2 * 3 * 5 / (2 * 0.5), rel=1e-5)  # s·x·(2β−1)/((β−1)ε)
    assert TaxonomyPrivTree(t, beta=8).parameters(1.0).lam == pytest.approx(15 / 7, rel=1e-5)


def test_released_tree_is_a_sub_taxonomy_split_into_all_children():
    tax = _labelled_taxonomy()
    counts = np.array([50, 40, 300, 5, 80, 2, 60, 500, 200, 1, 30])[: tax.n_leaves]
    for seed in range(20):
        st = TaxonomyPrivTree(tax).decompose(counts, budget=1.0, rng=make_rng(seed))
        tree, nodes = st.tree, st.nodes
        # parents map to parents, labels to the taxonomy's labels
        par = tree.parent
        assert np.array_equal(tax.parent[nodes[1:]], nodes[par[1:]])
        for v in range(1, tree.n_nodes):
            assert tree.path(v) == tax.path(int(nodes[v]))
        # an expanded node carries every public child; a released leaf is a taxonomy node
        for v in range(tree.n_nodes):
            k = tree.n_children[v]
            assert k == 0 or k == tax.n_children[nodes[v]]
        # the released leaves partition the taxonomy leaves
        assert st.leaf_counts(counts).sum() == counts.sum()
    big = TaxonomyPrivTree(tax).decompose(counts * 1000, budget=5.0, rng=make_rng(1))
    assert big.tree.n_nodes == tax.n_nodes  # large counts: everything is expanded, never past a leaf
    capped = TaxonomyPrivTree(tax, max_depth=1).decompose(counts * 1000, budget=5.0, rng=make_rng(1))
    assert capped.tree.depth.max() == 1


def test_split_probability_is_alg2_with_the_discrete_laplace_tail():
    """Root of count c at depth 0, θ = 0: split iff K·c + Z > 0, Z ~ DLap(K·λ); P ≈ 1 − ½e^{−c/λ}."""
    t = hierdp.Tree.complete(4, 2)
    dec = TaxonomyPrivTree(t)
    p = dec.parameters(1.0)
    rng = make_rng(3)
    for c in (0, 2, 5):
        counts = np.zeros(t.n_leaves, np.int64)
        counts[0] = c
        runs = 2500
        split = np.mean([dec.decompose(counts, budget=1.0, rng=rng).tree.n_nodes > 1 for _ in range(runs)])
        q = math.exp(-1 / (GRID * p.lam))  # P[Z <= -m] = q^m / (1 + q) for the discrete Laplace
        hand = 1 - q ** (c * GRID) / (1 + q)
        assert abs(split - hand) < 4 * math.sqrt(hand * (1 - hand) / runs) + 1e-3, (c, split, hand)


def test_residual_score_by_hand_and_lemma_4_1_by_brute_force():
    h = np.array([[3, 1, 0], [0, 0, 7], [2, 2, 2]])
    np.testing.assert_array_equal(residual_score(h), [1, 0, 4])
    g = np.random.default_rng(0)
    for _ in range(50):
        t = hierdp.Tree.complete(int(g.integers(2, 4)), 3)
        leaves = g.integers(0, 5, (t.n_leaves, 3))
        mu = residual_score(t.aggregate(leaves))
        assert np.all(mu[1:] <= mu[t.parent[1:]])  # monotone (Lemma 4.1)
        j, x = int(g.integers(t.n_leaves)), int(g.integers(3))
        more = leaves.copy()
        more[j, x] += 1  # one more tuple
        diff = residual_score(t.aggregate(more)) - mu
        assert diff.min() >= 0 and diff.max() <= 1  # sensitivity 1


def test_scores_must_be_integer_monotone_and_declared():
    t = hierdp.Tree.complete(2, 3)
    c = np.arange(t.n_leaves)
    with pytest.raises(PrivacyError, match="not monotone"):
        TaxonomyPrivTree(t, score=lambda v: -v, sensitivity=1).decompose(c, budget=1.0, rng=make_rng(0))
    with pytest.raises(DataError, match="integer-valued"):
        TaxonomyPrivTree(t, score=lambda v: v / 3, sensitivity=1).decompose(c, budget=1.0, rng=make_rng(0))
    with pytest.raises(BudgetError, match="needs sensitivity"):
        TaxonomyPrivTree(t, score=lambda v: v)
    with pytest.raises(BudgetError, match="understate"):
        TaxonomyPrivTree(t, score="residual", sensitivity=0)
    with pytest.raises(DataError, match="histogram"):
        TaxonomyPrivTree(t, score="residual").decompose(c, budget=1.0, rng=make_rng(0))
    with pytest.raises(DataError, match="taxonomy leaves"):
        TaxonomyPrivTree(t).decompose(c[:-1], budget=1.0)
    with pytest.raises(BudgetError, match="budget"):
        TaxonomyPrivTree(t).decompose(c)


def test_release_ledger_consistency_and_contributions():
    tax = _labelled_taxonomy()
    counts = np.array([50, 40, 300, 5, 80, 2, 60, 500, 200, 1, 30])
    r = release_taxonomy(tax, counts, epsilon=1.0, seed=3)
    assert r.tree.is_consistent(r.values)
    led = r.ledger
    assert led.spent == pytest.approx(1.0) and [ls.budget for ls in led.levels] == [0.5]
    assert "privtree_taxonomy" in str(led.to_json())
    r2 = release_taxonomy(tax, counts, epsilon=1.0, seed=3, contributions=2)
    assert r2.ledger.max_contributions == 2
    assert r2.ledger.levels[0].noise_variance > 3.9 * r.ledger.levels[0].noise_variance  # scale ×2
    hist = np.stack([counts, counts // 2], axis=1)
    r3 = release_taxonomy(tax, hist, epsilon=1.0, seed=3, score="residual")
    assert r3.tree.n_nodes >= 1 and "residual" in r3.ledger.to_json()


def test_registered():
    assert "privtree_taxonomy" in registry.names("decomposition")
    d = registry.create("decomposition", "privtree_taxonomy", taxonomy=hierdp.Tree.complete(2, 2))
    assert d.data_dependent


# ----------------------------------------------------------------------------- audits
AUDIT_EPS = 3.0
DEPTH = 40


def _path_depth_sampler(score, sensitivity):
    """Depth of the released leaf holding the deepest category of a caterpillar taxonomy in
    which c tuples sit in that category (so every node on its path has count c; the
    off-path children are empty taxonomy leaves, which never split). Decisions come from
    the scores and parameters of TaxonomyPrivTree and the decider decompose runs."""
    tax = _caterpillar(DEPTH)
    dec = TaxonomyPrivTree(tax, score=score, sensitivity=sensitivity)
    spine = np.arange(0, 2 * DEPTH + 1, 2)

    def sample(c, m, rng):
        counts = np.zeros(tax.n_leaves, np.int64)
        counts[-1] = int(c)  # the deepest category has the largest id
        mu = dec.node_scores(counts)[spine]
        return PrivTree.path_stop_depths(PrivTree.decider(dec.parameters(AUDIT_EPS), rng), mu[:DEPTH], m)
    return sample


def _double(v):
    return 2 * v


def test_path_sampler_matches_decompose():
    tax = _caterpillar(DEPTH)
    counts = np.zeros(tax.n_leaves, np.int64)
    counts[-1] = 7
    dec = TaxonomyPrivTree(tax, score=_double, sensitivity=2)
    real = np.array([dec.decompose(counts, budget=AUDIT_EPS, rng=make_rng(i)).tree.depth.max()
                     for i in range(400)], float)
    sim = _path_depth_sampler(_double, 2)(7, 20000, make_rng(1))
    se = math.sqrt(real.var() / 400 + sim.var() / 20000)
    assert abs(real.mean() - sim.mean()) < 4 * se + 1e-9


def test_audit_sensitivity_two_score_within_epsilon():
    res = audit(_path_depth_sampler(_double, 2), 9, 10, n=200_000, seed=4, claimed=AUDIT_EPS)
    assert not res.violates, str(res)


def test_audit_catches_understated_sensitivity():
    res = audit(_path_depth_sampler(_double, 1), 9, 10, n=200_000, seed=2, claimed=AUDIT_EPS)
    assert res.violates, str(res)


def test_dptree_accessor_runs_privtree_on_the_declared_domains():
    import pandas as pd

    g = np.random.default_rng(1)
    states = g.choice(["A", "B", "C"], 4000, p=[0.7, 0.25, 0.05])
    df = pd.DataFrame({"state": states, "county": [f"{s}{i}" for s, i in zip(states, g.integers(0, 5, 4000))],
                       "person": np.arange(4000) // 2})
    domains = {"state": ["A", "B", "C"], "county": {s: [f"{s}{i}" for i in range(5)] for s in "ABC"}}
    r = df.dptree(levels=["state", "county"], domains=domains).privtree(epsilon=2.0, seed=1)
    assert r.tree.level_names[:2] == ("total", "state")
    assert set(r.frame["state"].dropna()) <= {"A", "B", "C"} and r.tree.is_consistent(r.values)
    r2 = df.dptree(levels=["state", "county"], domains=domains, unit="person", max_contributions=2).privtree(
        epsilon=2.0, seed=1)
    # β = 5 (five counties per state), ε_tree = 1, x = 2: λ = x·(2β−1)/((β−1)ε) = 2·9/4 = 4.5
    assert r2.ledger.max_contributions == 2 and r2.ledger.privacy_unit == "one value of column 'person'"
    assert "λ=4.5," in json.loads(r2.ledger.to_json())["decomposition"]["description"]
    with pytest.raises(hierdp.PrivacyError, match="contributions=1 is below"):
        df.dptree(levels=["state", "county"], domains=domains, unit="person", max_contributions=2).privtree(
            epsilon=2.0, seed=1, contributions=1)
