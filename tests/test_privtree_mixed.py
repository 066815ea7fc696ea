"""PrivTree on mixed numeric × categorical attributes (Zhang, Xiao & Xie 2016, §3.5): node
counts against brute-force membership, the public split rule (attribute k mod D, the
next one that can still split), numeric halves and all public child categories, the
parameters by hand, and the release model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import registry
from hierdp.decompositions.mixed import MixedPrivTree
from hierdp.errors import DataError
from hierdp.frontends.taxonomy import release_mixed
from hierdp.rng import make_rng

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

CITIES = np.array(["paris", "lyon", "berlin", "bonn", "koeln", "roma", "madrid", "nyc", "sf", "toronto", "tokyo"])


def _taxonomy():
    rows = [("eu", "fr", "paris"), ("eu", "fr", "lyon"), ("eu", "de", "berlin"), ("eu", "de", "bonn"),
            ("eu", "de", "koeln"), ("eu", "it", "roma"), ("eu", "es", "madrid"), ("am", "us", "nyc"),
            ("am", "us", "sf"), ("am", "ca", "toronto"), ("as", "jp", "tokyo")]
    paths = pd.DataFrame(rows, columns=["region", "country", "city"])
    return hierdp.Tree.from_frame(paths, ["region", "country", "city"],
                                  domains={"region": "observed", "country": paths[["region", "country"]],
                                           "city": paths})


@pytest.fixture
def frame():
    g = np.random.default_rng(0)
    n = 3000
    p = np.array([.3, .05, .2, .05, .05, .05, .05, .15, .05, .03, .02])
    return pd.DataFrame({"x": np.round(g.beta(2, 5, n), 3), "y": g.uniform(-1, 1, n),
                         "city": g.choice(CITIES, n, p=p)})


def _leaf_of_city(tax):
    return {tax.path(int(v))[-1]: int(v) for v in tax.leaves}


def _in_subtree(tax, node, leaf):
    v = leaf
    while v >= 0:
        if v == node:
            return True
        v = int(tax.parent[v])
    return False


def test_node_counts_match_brute_force_membership(frame, monkeypatch):
    """Both the counts the split decisions see and the released leaf counts."""
    from hierdp.decompositions import mixed

    seen = {}
    real = mixed.PrivTree.decider

    def spy(p, rng):
        decide = real(p, rng)

        def wrapped(depth, counts):
            seen[depth] = np.asarray(counts).copy()
            return decide(depth, counts)
        return wrapped

    monkeypatch.setattr(mixed.PrivTree, "decider", staticmethod(spy))
    tax = _taxonomy()
    dec = MixedPrivTree({"x": (0, 1), "y": (-1, 1)}, {"city": tax}, max_halvings=8)
    st = dec.decompose(frame, budget=2.0, rng=make_rng(4))
    counts = st.tree.aggregate(st.leaf_counts(frame))
    leaf_id = frame["city"].map(_leaf_of_city(tax)).to_numpy()
    xy = frame[["x", "y"]].to_numpy()
    hi_bound = np.array([1.0, 1.0])
    for v in range(st.tree.n_nodes):
        in_box = np.all((xy >= st.lows[v]) & ((xy < st.highs[v]) | ((xy == st.highs[v]) & (st.highs[v] == hi_bound))),
                        axis=1)
        under = [int(leaf) for leaf in tax.leaves if _in_subtree(tax, int(st.categories[v, 0]), int(leaf))]
        in_cat = np.isin(leaf_id, under)
        assert counts[v] == np.count_nonzero(in_box & in_cat), v
    assert counts[0] == len(frame) and st.tree.n_nodes > 20
    # the decisions at depth k saw the true counts of the depth-k nodes that could split, in id order
    halvings = np.round(np.log2(np.array([1.0, 2.0]) / (st.highs - st.lows))).astype(int)
    can = (halvings < 8).any(axis=1) | (tax.n_children[st.categories[:, 0]] > 0)
    for k, got in seen.items():
        nodes = np.flatnonzero((st.tree.depth == k) & can)
        np.testing.assert_array_equal(got, counts[nodes])
    assert len(seen) == st.tree.depth.max() + 1


def test_split_rule_and_children(frame):
    tax = _taxonomy()
    dec = MixedPrivTree({"x": (0, 1), "y": (-1, 1)}, {"city": tax}, max_halvings=3)
    st = dec.decompose(frame, budget=50.0, rng=make_rng(1))
    tree = st.tree
    cols = ["x", "y", "city"]
    width0 = np.array([1.0, 2.0])
    for v in range(tree.n_nodes):
        k = int(tree.depth[v])
        halvings = np.round(np.log2(width0 / (st.highs[v] - st.lows[v]))).astype(int)
        can = [halvings[0] < 3, halvings[1] < 3, tax.n_children[st.categories[v, 0]] > 0]
        kids = tree.children(v)
        if kids.size == 0:
            assert st.split_on[v] == ""
            continue
        want = next(cols[(k + i) % 3] for i in range(3) if can[(k + i) % 3])  # the public rule, by hand
        assert st.split_on[v] == want
        if want == "city":
            assert sorted(st.categories[kids, 0]) == sorted(tax.children(int(st.categories[v, 0])))
            assert np.all(st.lows[kids] == st.lows[v]) and np.all(st.highs[kids] == st.highs[v])
        else:
            j = cols.index(want)
            mid = (st.lows[v, j] + st.highs[v, j]) / 2
            assert kids.size == 2 and st.highs[kids[0], j] == mid == st.lows[kids[1], j]
            assert np.all(st.categories[kids, 0] == st.categories[v, 0])
    # a big budget on 3000 records exhausts every attribute on the heavy paths
    assert tree.depth.max() == 3 + 3 + 3


def test_parameters_by_hand():
    tax = _taxonomy()  # largest fan-out: eu has 4 countries
    p = MixedPrivTree({"x": (0, 1)}, {"city": tax}).parameters(1.0)
    assert p.beta == 4 and p.lam == pytest.approx(7 / 3, rel=1e-5)
    p = MixedPrivTree({"x": (0, 1)}, contributions=2).parameters(0.5)
    assert p.beta == 2 and p.lam == pytest.approx(2 * 3 / 0.5, rel=1e-5)


def test_errors_name_the_problem(frame):
    tax = _taxonomy()
    with pytest.raises(DataError, match="not leaves of its taxonomy"):
        MixedPrivTree(categorical={"city": tax}).decompose(frame.assign(city="oslo"), budget=1.0)
    with pytest.raises(DataError, match="inside the declared bounds"):
        MixedPrivTree({"x": (0, 0.5)}).decompose(frame, budget=1.0)
    with pytest.raises(DataError, match="both numeric and categorical"):
        MixedPrivTree({"city": (0, 1)}, {"city": tax})
    with pytest.raises(DataError, match="missing column"):
        MixedPrivTree({"z": (0, 1)}).decompose(frame, budget=1.0)


def test_release_frame_ledger_and_consistency(frame):
    r = release_mixed(frame, {"x": (0, 1)}, {"city": _taxonomy()}, epsilon=1.0, seed=2, max_halvings=6)
    assert r.tree.is_consistent(r.values)
    f = r.frame
    assert {"x_low", "x_high", "city", "split_on", "estimate", "std"} <= set(f.columns) and len(f) == r.tree.n_nodes
    assert r.ledger.spent == pytest.approx(1.0) and "privtree_mixed" in r.ledger.to_json()
    assert "privtree_mixed" in registry.names("decomposition")
