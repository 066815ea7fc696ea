"""The .dptree accessor: public domains, privacy rules, bad input, chaining."""

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.errors import BudgetError, DataError, HierarchyError, PluginError


@pytest.fixture
def people():
    return pd.DataFrame({
        "state": ["CA", "CA", "CA", "NY", "NY", "TX"],
        "county": ["LA", "LA", "SF", "Kings", "Queens", "Travis"],
        "age": [30, 41, 22, 65, 19, 50],
    })


DOMAINS = {
    "state": ["CA", "NY", "TX", "WA"],
    "county": {"CA": ["LA", "SF", "Napa"], "NY": ["Kings", "Queens"], "TX": ["Travis"], "WA": ["King"]},
}


def test_no_domain_declared_is_an_error(people):
    with pytest.raises(HierarchyError, match="no domain declared for level 'state'.*public.*'observed'"):
        people.dptree(levels=["state", "county"])
    with pytest.raises(HierarchyError, match="no domain declared for level 'county'"):
        people.dptree(levels=["state", "county"], domains={"state": ["CA", "NY", "TX"]})


def test_out_of_domain_value_is_an_error(people):
    doms = {"state": ["CA", "NY"], "county": "observed"}
    d = people.dptree(levels=["state", "county"], domains=doms)
    with pytest.raises(DataError, match="'state' values outside the declared domain.*unknown='drop'") as err:
        d.release(epsilon=1.0, seed=0)
    assert "TX" not in str(err.value)  # private values are not echoed
    assert d.out_of_domain()["state"].tolist() == ["TX"]
    # a county declared under another state is out of domain too
    doms2 = {"state": ["CA", "NY", "TX"], "county": {"CA": ["LA", "SF"], "NY": ["Kings", "Queens", "Travis"],
                                                    "TX": ["Austin"]}}
    with pytest.raises(DataError, match="'county' values outside the declared domain of their parent"):
        people.dptree(levels=["state", "county"], domains=doms2).true_counts()


def test_drop_out_of_domain_keeps_the_count_out_of_the_public_ledger(people):
    doms = {"state": ["CA", "NY"], "county": "observed"}
    r = people.dptree(levels=["state", "county"], domains=doms, unknown="drop").release(epsilon=1.0, seed=0)
    assert r.ledger.private_notes["rows_dropped_out_of_domain"] == 1
    public = r.ledger.to_json()
    assert "rows_dropped_out_of_domain" not in public and "dropped" in public
    assert "TX" not in set(r.frame["state"].dropna())


def test_declared_unseen_values_are_zero_count_nodes(people):
    d = people.dptree(levels=["state", "county"], domains=DOMAINS)
    t = d.tree
    counts = d.true_counts()
    assert counts[t.node_id("WA")] == 0 and counts[t.node_id("WA", "King")] == 0
    assert counts[t.node_id("CA", "Napa")] == 0
    assert counts[t.node_id("CA")] == 3 and counts[t.root] == 6


def test_every_declared_node_appears_exactly_once(people):
    r = people.dptree(levels=["state", "county"], domains=DOMAINS).release(epsilon=1.0, seed=1)
    f = r.frame
    assert len(f) == 1 + 4 + 7
    keys = list(zip(f["level"].astype(str), f["state"].astype(object), f["county"].astype(object)))
    assert len(set(map(str, keys))) == len(keys)
    declared = {(s, c) for s, cs in DOMAINS["county"].items() for c in cs}
    got = {(s, c) for lv, s, c in keys if lv == "county"}
    assert got == declared
    assert set(f.loc[f["level"] == "state", "state"]) == set(DOMAINS["state"])
    # hierarchy columns are <NA> below a node's level
    assert f.loc[f["level"] == "total", ["state", "county"]].isna().all().all()
    assert f.loc[f["level"] == "state", "county"].isna().all()


def test_product_domain_every_value_under_every_parent():
    df = pd.DataFrame({"loc": ["a", "b", "a"], "day": [1, 2, 2]})
    d = df.dptree(levels=["loc", "day"], domains={"loc": ["a", "b", "c"], "day": [1, 2, 3]})
    assert d.tree.n_nodes == 1 + 3 + 9
    counts = d.true_counts()
    assert counts[d.tree.node_id("a", 2)] == 1 and counts[d.tree.node_id("c", 3)] == 0


def test_public_paths_frame_as_domains():
    geo = pd.DataFrame({"state": ["CA", "CA", "NY"], "county": ["LA", "SF", "Kings"]})
    df = pd.DataFrame({"state": ["CA"], "county": ["SF"]})
    d = df.dptree(levels=["state", "county"], domains=geo)
    assert d.tree.n_nodes == 6
    assert d.true_counts()[d.tree.node_id("CA", "SF")] == 1


def test_observed_domain_is_an_assertion_recorded_in_the_ledger(people):
    r = people.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=0)
    assert "observed" in r.ledger.structure["county"] and "public" in r.ledger.structure["county"]
    assert r.tree.n_nodes == 1 + 3 + 5


def test_pre_aggregated_counts_and_series_accessor(people):
    agg = people.groupby(["state", "county"]).size().rename("n").reset_index()
    a = agg.dptree(levels=["state", "county"], domains=DOMAINS, count="n").true_counts()
    b = people.dptree(levels=["state", "county"], domains=DOMAINS).true_counts()
    assert np.array_equal(a, b)
    s = people.groupby(["state", "county"]).size()
    c = s.dptree(domains=DOMAINS).true_counts()
    assert np.array_equal(c, b)


@pytest.mark.parametrize("bad, match", [
    ([1.0, np.nan], "missing values"),
    ([1, -2], "negative"),
    ([1.5, 2], "non-integer"),
    (["1", "2"], "non-negative integers"),
])
def test_bad_counts(bad, match):
    df = pd.DataFrame({"g": ["a", "b"], "n": bad})
    with pytest.raises(DataError, match=match):
        df.dptree(levels=["g"], domains="observed", count="n")


def test_missing_level_column(people):
    with pytest.raises(DataError, match="missing level column 'conty'.*did you mean 'county'"):
        people.dptree(levels=["state", "conty"], domains="observed")


@pytest.mark.parametrize("eps", [0, -1.0, float("inf"), float("nan"), "1"])
def test_bad_epsilon(people, eps):
    d = people.dptree(levels=["state"], domains="observed")
    with pytest.raises(BudgetError, match="epsilon must be a finite number > 0"):
        d.release(epsilon=eps)


def test_budget_list_of_wrong_length(people):
    d = people.dptree(levels=["state", "county"], domains="observed")
    with pytest.raises(BudgetError, match="has 2 values but the tree has 3 levels"):
        d.release(epsilon=1.0, budget=[0.5, 0.5])
    with pytest.raises(BudgetError, match="sum to 0.9 but the total budget is 1"):
        d.release(epsilon=1.0, budget=[0.3, 0.3, 0.3])
    with pytest.raises(BudgetError, match="unknown level in budget 'conty'"):
        d.release(epsilon=1.0, budget={"conty": 1.0})


def test_unknown_plugin_names_list_the_known_ones(people):
    d = people.dptree(levels=["state"], domains="observed")
    with pytest.raises(PluginError, match="unknown mechanism 'discrete_laplas'; expected one of .*'discrete_laplace'"):
        d.release(epsilon=1.0, mechanism="discrete_laplas")
    with pytest.raises(PluginError, match="unknown postprocessor 'bleu'; expected one of .*'blue'"):
        d.release(epsilon=1.0, postprocess=["bleu"])
    with pytest.raises(PluginError, match="unknown budget 'equall'"):
        d.release(epsilon=1.0, budget="equall")


def test_domain_declaration_errors(people):
    with pytest.raises(HierarchyError, match="lists \\['CA'\\] more than once"):
        people.dptree(levels=["state"], domains={"state": ["CA", "CA", "NY", "TX"]})
    with pytest.raises(HierarchyError, match="no entry for state 'TX'"):
        people.dptree(levels=["state", "county"], domains={"state": ["CA", "NY", "TX"],
                                                             "county": {"CA": ["LA"], "NY": ["Kings"]}})
    with pytest.raises(HierarchyError, match="first level"):
        people.dptree(levels=["state"], domains={"state": {"x": ["CA"]}})
    with pytest.raises(HierarchyError, match="appear more than once"):
        people.dptree(levels=["state", "state"], domains="observed")
    with pytest.raises(HierarchyError, match="unknown level in domains 'stat'"):
        people.dptree(levels=["state"], domains={"stat": ["CA"], "state": ["CA"]})


def test_method_chain(people):
    out = (people.query("age >= 20")
           .dptree(levels=["state", "county"], domains=DOMAINS)
           .release(epsilon=1.0, mechanism="discrete_laplace", budget="equal", postprocess=["blue"], seed=3)
           .frame.query("level == 'state'"))
    assert list(out["state"]) == ["CA", "NY", "TX", "WA"]
    assert np.all(out["std"] > 0)


def test_release_is_consistent_and_does_not_mutate_the_frame(people):
    before = people.copy()
    r = people.dptree(levels=["state", "county"], domains=DOMAINS).release(epsilon=2.0, seed=5)
    pd.testing.assert_frame_equal(people, before)
    assert r.tree.is_consistent(r.values)


def test_repr_reveals_no_counts(people):
    d = people.dptree(levels=["state", "county"], domains=DOMAINS)
    text = repr(d)
    assert "12 public nodes" in text and "6" not in text.replace("public", "")


@pytest.mark.parametrize("domains", [{"g": ["a", ""]}, {"g": ["a", "  "]}, "observed"])
def test_blank_labels_are_refused(domains):
    """An empty label prints like a missing value: its row could not be told from its parent's."""
    with pytest.raises(hierdp.HierarchyError, match="level 'g' has an empty label"):
        pd.DataFrame({"g": ["a", "  " if domains != "observed" else ""]}).dptree(levels=["g"], domains=domains)
