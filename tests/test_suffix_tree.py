"""Private prediction suffix trees (PrivTree §4, Zhang, Xiao & Xie 2016): the paper's invariants
(C1, Eq. 13, Thm. 4.1-4.2, the ε/β split), brute-force histograms and frequencies (Eq. 12), the
release model (ledger = ε, consistent non-negative histograms) and an audit of the structure."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.accounting.audit import audit
from hierdp.decompositions import suffix_tree as S
from hierdp.decompositions.privtree import privtree_parameters
from hierdp.errors import BudgetError, DataError
from hierdp.frontends.sequences import release_sequences
from hierdp.rng import make_rng

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

TINY = ["AAB", "AB", "BAAA", "", "B", "AABAB", "ABBA", "BBB"]


def _corpus(n: int = 400, seed: int = 0, alphabet: str = "ABC") -> list[str]:
    g = np.random.default_rng(seed)
    return ["".join(g.choice(list(alphabet), size=int(k))) for k in g.integers(0, 8, size=n)]


def _brute_hist(seqs, ctx: tuple, l_top: int, alphabet: str) -> np.ndarray:
    """Histogram of §4.1 by definition: predictions whose context ends with ``ctx``."""
    cells = {a: i for i, a in enumerate(alphabet)} | {"&": len(alphabet)}
    h = np.zeros(len(alphabet) + 1, np.int64)
    for s in seqs:
        full = ["$"] + list(s)
        preds = (list(s) + ["&"])[:l_top]
        for i, y in enumerate(preds):
            context = full[:i + 1]
            if len(ctx) <= len(context) and tuple(context[len(context) - len(ctx):]) == ctx:
                h[cells[y]] += 1
    return h


def _occurrences(seqs, q: str) -> int:
    return sum(sum(1 for i in range(len(s) - len(q) + 1) if s[i:i + len(q)] == q) for s in seqs)


# ----------------------------------------------------------------------------- the corpus and truncation
def test_truncation_to_l_top_predictions():
    # l⊤ = 3: "AA" keeps its end (A, A, &); "AAAAA" keeps its first 3 symbols, no end (§4.2)
    c = S.as_corpus(["AA", "AAAAA"], alphabet="A", max_length=3)
    assert c.target.tolist() == [0, 0, 1, 0, 0, 0]
    assert c.flat.tolist() == [1, 0, 0, 1, 0, 0, 0]  # '$' (code 1) then the kept symbols
    # lists of hashable symbols work like strings
    c2 = S.as_corpus([("x", "y"), ("y",)], alphabet=["x", "y"], max_length=5)
    assert c2.target.tolist() == [0, 1, 2, 1, 2]


def test_alphabet_must_be_declared_or_observed():
    with pytest.raises(DataError, match="no alphabet declared"):
        S.as_corpus(TINY, alphabet=None, max_length=4)
    with pytest.raises(DataError, match=r"outside the declared alphabet \(values not shown") as info:
        S.as_corpus(TINY, alphabet="A", max_length=4)
    assert "'B'" not in str(info.value)  # a symbol of the private data is not echoed
    with pytest.raises(DataError, match="max_length"):
        S.SuffixTree(alphabet="AB", max_length=0)
    c = S.as_corpus(TINY, alphabet="observed", max_length=4)
    assert list(c.alphabet) == ["A", "B"] and "asserted public" in c.provenance


# ----------------------------------------------------------------------------- the structure
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_start_marker_nodes_never_split_and_every_split_has_beta_children(seed):
    seqs = _corpus(300, seed)
    st = S.SuffixTree(alphabet="ABC", max_length=7).decompose(seqs, budget=50.0, rng=make_rng(seed))
    m = 3
    dollar = st.symbol == m
    assert dollar.any() and st.is_leaf[dollar].all(), "C1: a node whose string begins with $ is never split"
    internal = np.flatnonzero(~st.is_leaf)
    assert (st.tree.n_children[internal] == m + 1).all()  # β = |I| + 1 children
    assert st.tree.height <= 7 + 1  # nothing below depth l⊤


def test_node_histograms_match_the_definition():
    seqs = TINY * 3
    st = S.SuffixTree(alphabet="AB", max_length=4).decompose(seqs, budget=100.0, rng=make_rng(4))
    h = st.node_histograms(S.as_corpus(seqs, alphabet="AB", max_length=4))
    ctx = st.contexts()
    assert st.tree.n_nodes > 10
    for v in range(st.tree.n_nodes):
        np.testing.assert_array_equal(h[v], _brute_hist(seqs, ctx[v], 4, "AB"), err_msg=str(ctx[v]))


def test_score_is_eq13_and_monotone():
    # Lemma 4.1: c(child) <= c(parent) for the score of Eq. 13 on every edge
    seqs = _corpus(500, 5)
    st = S.SuffixTree(alphabet="ABC", max_length=6).decompose(seqs, budget=50.0, rng=make_rng(5))
    h = st.node_histograms(S.as_corpus(seqs, alphabet="ABC", max_length=6))
    c = h.sum(axis=1) - h.max(axis=1)
    p = st.tree.parent
    assert (c[1:] <= c[p[1:]]).all()


def test_lambda_and_delta_of_theorem_4_1_hand_computed():
    # |I| = 3: β = 4; l⊤ = 10; ε_tree = 0.25 -> λ = 10·7/(3·0.25) = 93.33..., δ = λ ln 4
    st = S.SuffixTree(alphabet="ABC", max_length=10).decompose(_corpus(50), budget=0.25, rng=make_rng(1))
    lam, delta = st.params["lambda"], st.params["delta"]
    assert st.params["beta"] == 4
    assert lam == pytest.approx(280 / 3, rel=1e-6) and lam >= 280 / 3
    assert delta >= lam * math.log(4) and delta == pytest.approx(lam * math.log(4), rel=1e-6)


# ----------------------------------------------------------------------------- the release
def test_ledger_total_is_epsilon_with_the_papers_split():
    r = release_sequences(_corpus(), epsilon=1.0, max_length=8, alphabet="ABC", seed=3)
    led = r.ledger
    beta = 4
    assert led.decomposition["spends"][0]["amount"] == pytest.approx(1 / beta)
    assert [ls.budget for ls in led.levels] == [pytest.approx((beta - 1) / beta)]
    assert led.spent == pytest.approx(1.0) and led.accountant().total == pytest.approx(1.0)
    assert led.max_contributions == 8 and led.privacy_unit == "one sequence"  # Thm. 4.2: sensitivity l⊤
    dlap = hierdp.registry.create("mechanism", "discrete_laplace")
    assert led.levels[0].noise_variance == pytest.approx(dlap.variance(0.75, hierdp.Sensitivity.bounded(8)))
    assert led.decomposition["private_structure"] is True


def test_histograms_consistent_and_nonnegative_and_clamp_differs():
    seqs = _corpus(60, 7)
    r = release_sequences(seqs, epsilon=0.5, max_length=8, alphabet="ABC", seed=11)
    tree, hist = r.tree, r.hist
    assert (hist >= 0).all()
    np.testing.assert_allclose(tree.aggregate(hist[tree.leaves]), hist, atol=1e-9)  # parent = sum of children
    # with only the leaves measured, nonneg's least squares separates by leaf: clip at 0
    noisy = np.asarray(r.measurements.values, dtype=float)[tree.leaves]
    assert (noisy < 0).any()  # the case that matters
    np.testing.assert_allclose(hist[tree.leaves], np.maximum(noisy, 0), atol=1e-6)
    # the paper: internal = sum of the noisy leaves, then reset negative counts node by node
    rc = release_sequences(seqs, epsilon=0.5, max_length=8, alphabet="ABC", seed=11, histograms="clamp")
    assert (rc.hist >= 0).all()
    np.testing.assert_array_equal(np.asarray(rc.measurements.values), np.asarray(r.measurements.values))
    np.testing.assert_allclose(rc.hist, np.maximum(tree.aggregate(noisy), 0))
    assert not np.allclose(tree.aggregate(rc.hist[tree.leaves]), rc.hist), "clamping breaks consistency"


def test_frequency_and_top_k_against_brute_force_at_huge_epsilon():
    seqs = TINY * 40
    r = release_sequences(seqs, epsilon=2000.0, max_length=8, alphabet="AB", seed=2)
    queries = ["".join(p) for n in (1, 2, 3, 4) for p in itertools.product("AB", repeat=n)]
    truth = np.array([_occurrences(seqs, q) for q in queries], float)
    np.testing.assert_allclose(r.frequency(queries), truth, rtol=1e-9)
    assert r.frequency(["AC"]).tolist() == [0.0]  # a symbol outside the alphabet never occurs
    top = r.top_k(6)
    best = sorted(truth, reverse=True)[:6]
    np.testing.assert_allclose(top["estimate"], best)
    np.testing.assert_allclose(top["estimate"], [_occurrences(seqs, s) for s in top["string"]])
    top3 = r.top_k(4, length=3)
    assert (top3["length"] == 3).all()
    np.testing.assert_allclose(top3["estimate"], sorted(truth[[len(q) == 3 for q in queries]], reverse=True)[:4])


def test_top_k_is_exact_best_first_under_the_model():
    # at a small ε the model is not the data: top_k must still be the exact top of Eq. 12
    r = release_sequences(_corpus(300, 9), epsilon=0.3, max_length=6, alphabet="ABC", seed=9)
    every = ["".join(p) for n in (1, 2, 3) for p in itertools.product("ABC", repeat=n)]
    f = r.frequency(every)
    top = r.top_k(5, length=3)
    f3 = np.sort(f[[len(s) == 3 for s in every]])[::-1]
    np.testing.assert_allclose(top["estimate"], f3[:5])
    np.testing.assert_allclose(r.frequency(list(top["string"])), top["estimate"])


def test_sampling_reproduces_the_distribution_at_huge_epsilon():
    seqs = TINY * 50
    r = release_sequences(seqs, epsilon=2000.0, max_length=8, alphabet="AB", seed=1)
    syn = r.sample(20000, seed=0)
    want = Counter(seqs)
    got = Counter(syn)
    assert set(got) <= set(want)
    for s, c in want.items():  # each distinct sequence at its share (8 shares of 1/8)
        assert got[s] / len(syn) == pytest.approx(c / len(seqs), abs=0.015)
    assert hierdp.metric("length_tvd")(seqs, syn) < 0.02
    lists = release_sequences([list(s) for s in seqs], epsilon=2000.0, max_length=8, alphabet="AB", seed=1)
    assert isinstance(lists.sample(3, seed=0)[0], tuple)


def test_length_tvd_hand_computed():
    tvd = hierdp.metric("length_tvd")
    # lengths {1, 2, 3} vs {0, 1, 2, 3}: ½(|1/3 − 1/4|·3 + 1/4) = 0.25
    assert tvd([1, 2, 3], ["", "a", "bb", "ccc"]) == pytest.approx(0.25)
    assert tvd(np.array([5, 9]), np.array([5, 6]), max_length=5) == 0.0
    with pytest.raises(DataError, match="empty"):
        tvd([], [1])


def test_front_door_on_a_dataframe():
    df = pd.DataFrame({"trip": [["JFK", "BOS"], ["BOS"], ["JFK", "JFK", "BOS"]] * 30})
    r = df.dptree.suffix_tree(column="trip", epsilon=1.0, max_length=5, alphabet="observed", seed=2)
    assert list(r.structure.alphabet) == ["BOS", "JFK"]
    assert r.ledger.structure["alphabet"].startswith("observed")
    f = r.frame
    assert list(f.columns) == ["node", "depth", "context", "leaf", "next", "estimate"]
    assert len(f) == r.tree.n_nodes * 3 and set(f["next"].cat.categories) == {"BOS", "JFK", "&"}
    with pytest.raises(BudgetError, match="epsilon"):
        df.dptree.suffix_tree(column="trip", max_length=5, alphabet="observed")
    with pytest.raises(DataError, match="missing sequence column"):
        df.dptree.suffix_tree(column="trips", epsilon=1.0, max_length=5, alphabet="observed")


# ----------------------------------------------------------------------------- audit of the structure
def _audit(max_length: int, eps: float, broken: bool, x0, s: str, alphabet: str = "A"):
    dec = S.SuffixTree(alphabet=alphabet, max_length=max_length)
    if broken:  # λ of Cor. 1 without the factor l⊤ of Thm. 4.1
        dec.parameters = lambda e, m: privtree_parameters(e, m + 1, 0.0, 1)
    x1 = list(x0) + [s]

    def sample(x, n, rng):  # n independent structures, drawn as decompose draws them
        g = dec.draw_structures(x, budget=eps, replicas=n, rng=rng)
        return np.bincount(g["replica"][g["first_child"] >= 0], minlength=n).astype(float)  # splits

    return audit(sample, x0, x1, n=100_000, claimed=eps, seed=7)


def test_audit_structure_within_epsilon_and_unscaled_lambda_caught():
    # worst case at the root: D' = empty sequences (c = 0); the added "AAAAA" (l⊤ = 5) raises
    # the root's score by l⊤, so its split decision alone costs l⊤/λ = ε/3 (β = 2); without
    # the factor l⊤ in λ it costs l⊤·ε/3 > ε
    ok = _audit(5, 2.0, False, [""] * 5, "AAAAA")
    assert not ok.violates and ok.epsilon_lb > 0.4, ok  # ≈ ε/3: the audit has power
    bad = _audit(5, 2.0, True, [""] * 5, "AAAAA")
    assert bad.violates, bad
    ok3 = _audit(4, 2.0, False, ["", "AB", "BA", "B"], "ABAB", alphabet="AB")
    assert not ok3.violates, ok3


def test_a_pure_histogram_scores_zero_however_large():
    # Eq. 13 (P2): 1000 empty sequences give the root the histogram [0, 1000] (only '&'), c = 0,
    # so the root splits with probability P[Lap(λ) > 0] = 1/2 (θ = 0); a magnitude score would
    # always split it
    dec = S.SuffixTree(alphabet="A", max_length=3)
    g = dec.draw_structures([""] * 1000, budget=1.0, replicas=2000, rng=make_rng(3))
    split = g["first_child"][g["depth"] == 0] >= 0
    assert split.mean() == pytest.approx(0.5, abs=0.04)


# ----------------------------------------------------------------------------- the spec route
def _seq_spec(tmp_path, params="{column: trip, max_length: 5, alphabet: [BOS, JFK, LAX], separator: ' '}",
              extra="", epsilon=1.0):
    (tmp_path / "trips.csv").write_text("id,trip\n" + "".join(
        f"{i},{t}\n" for i, t in enumerate(["JFK BOS", "BOS", "JFK BOS LAX", "LAX LAX LAX LAX LAX LAX"] * 25)))
    text = (f"hierdp: 1\nsource: {{path: trips.csv}}\ndecomposition:\n  name: suffix_tree\n  params: {params}\n"
            f"privacy: {{epsilon: {epsilon}}}\n{extra}")
    (tmp_path / "s.yaml").write_text(text)
    return tmp_path / "s.yaml"


def test_spec_route_releases_the_pst_histograms(tmp_path):
    """At a huge ε the root histogram is the hand count of predictions (l⊤ = 5: the six-LAX
    trip keeps its first 5 symbols and no end); the ledger splits ε as the paper does."""
    import json
    import warnings

    from hierdp.spec import run_spec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_spec(_seq_spec(tmp_path, epsilon=1e3), seed=3, output=tmp_path / "out.csv")
    table = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    assert list(table.columns) == ["node", "depth", "context", "leaf", "next", "estimate", "status"]
    root = table[table.node == 0].set_index("next").estimate
    assert dict(root.round()) == {"BOS": 75, "JFK": 50, "LAX": 25 + 125, "&": 75}
    # contexts are written as the source writes a sequence (joined at the separator)
    ctx = set(table.context[table.depth == 2])
    assert {"JFK BOS", "$ BOS", "LAX LAX"} <= ctx and ctx <= {f"{a} {b}" for a in ["BOS", "JFK", "LAX", "$"]
                                                             for b in ["BOS", "JFK", "LAX"]}
    assert len(table) == r.tree.n_nodes * 4
    ledger = json.loads((tmp_path / "out.ledger.json").read_text())
    assert ledger["decomposition"]["spends"][0]["amount"] == pytest.approx(1e3 / 4)  # ε/β, β = |I| + 1
    assert ledger["spent"] == pytest.approx(1e3) and ledger["privacy_unit"] == "one sequence"


def test_spec_route_one_character_per_symbol_and_observed_alphabet(tmp_path):
    import warnings

    from hierdp.spec import run_spec

    path = _seq_spec(tmp_path, params="{column: trip, max_length: 5, alphabet: observed, epsilon_share: 0.5}",
                     epsilon=1e3)
    path.with_name("trips.csv").write_text("trip\nab\nb\nab\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_spec(path, seed=1, write=False)
    assert list(r.structure.alphabet) == ["a", "b"]
    assert r.ledger.decomposition["spends"][0]["amount"] == pytest.approx(0.5e3)
    assert r.frequency(["ab", "b", "ba"]) == pytest.approx([2, 3, 0], abs=0.01)


@pytest.mark.parametrize("params, extra, message", [
    ("{column: trips, max_length: 5, alphabet: observed}", "", "column 'trips' is not in the source"),
    ("{column: trip, alphabet: observed}", "", "max_length"),
    ("{column: trip, max_length: 5, alphabet: observed, max_lenght: 3}", "", "did you mean 'max_length'"),
    ("{column: trip, max_length: 5, alphabet: observed}", "postprocess: [nonneg]",
     "decomposition.params.histograms"),
    ("{column: trip, max_length: 5, alphabet: observed}", "privacy: {epsilon: 1, unit: id}",
     "one row is one sequence"),
    ("{column: trip, max_length: 5, alphabet: observed, histograms: clip}", "", "histograms"),
])
def test_spec_route_errors_name_the_problem(tmp_path, params, extra, message):
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec

    path = _seq_spec(tmp_path, params=params, extra=extra)
    if extra.startswith("privacy"):
        path.write_text(path.read_text().replace("privacy: {epsilon: 1.0}\n", ""))
    with pytest.raises(SpecError, match=message):
        load_spec(path)


def test_spatial_decompositions_still_require_columns_and_bounds(tmp_path):
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec

    path = _seq_spec(tmp_path, params="{theta: 1.0}")
    path.write_text(path.read_text().replace("name: suffix_tree", "name: privtree"))
    with pytest.raises(SpecError, match="missing required key 'columns'") as exc:
        load_spec(path)
    assert "missing required key 'bounds'" in str(exc.value)
