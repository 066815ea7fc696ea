"""End-to-end releases: accounting, randomness, budgets, calibration of declared errors."""

import json

import numpy as np
import pytest

import hierdp
from hierdp import release
from hierdp.accounting.ledger import Ledger
from hierdp.budgets.base import BudgetStrategy
from hierdp.keyed_noise import NoiseKey
from hierdp.plugins import hookimpl


@pytest.fixture
def tree_and_counts():
    tree = hierdp.Tree.complete(fanout=3, height=4)
    rng = np.random.default_rng(0)
    return tree, tree.aggregate(rng.poisson(20, tree.n_leaves))


def test_ledger_accounts_every_level(tree_and_counts):
    tree, x = tree_and_counts
    r = release(tree, x, epsilon=2.0, budget=[0.5, 0.5, 0.0, 1.0], seed=1)
    L = r.ledger
    assert L.guarantee == "pure" and L.epsilon == 2.0 and L.spent == pytest.approx(2.0)
    assert L.by_level() == {"total": 0.5, "level_1": 0.5, "level_2": 0.0, "level_3": 1.0}
    assert [ls.n_nodes for ls in L.levels] == [1, 3, 9, 27]
    assert np.isinf(L.levels[2].noise_variance)
    assert L.postprocess == ["blue"] and L.mechanism == "discrete_laplace"
    again = Ledger.from_json(L.to_json())
    assert again.by_level() == L.by_level() and np.isinf(again.levels[2].noise_variance)
    json.loads(L.to_json())  # valid JSON (inf encoded as a string)


def test_unmeasured_level_has_infinite_noise_and_is_estimated(tree_and_counts):
    tree, x = tree_and_counts
    r = release(tree, x, epsilon=1.0, budget={"level_3": 1.0}, seed=2)
    assert np.all(np.isinf(r.measurements.variance[:13]))
    assert np.all(np.isfinite(r.estimate.variance))
    assert tree.is_consistent(r.values)


def test_seed_reproducible_and_marked(tree_and_counts):
    tree, x = tree_and_counts
    a = release(tree, x, epsilon=1.0, seed=42)
    b = release(tree, x, epsilon=1.0, seed=42)
    assert np.array_equal(a.measurements.values, b.measurements.values)
    assert not a.ledger.for_publication and "NOT FOR PUBLICATION" in str(a.ledger)
    assert "NOT FOR PUBLICATION" in repr(a)


def test_default_randomness_is_secure_and_fresh(tree_and_counts, monkeypatch):
    tree, x = tree_and_counts
    calls = []
    orig = NoiseKey.fresh.__func__

    def spy(cls):  # the noise is keyed per node (issue 30): its key is the secure source
        calls.append(orig(cls))
        return calls[-1]

    monkeypatch.setattr(NoiseKey, "fresh", classmethod(spy))
    a = release(tree, x, epsilon=1.0)
    b = release(tree, x, epsilon=1.0)
    assert len(calls) == 2 and all(k.secure for k in calls), "the secure source was not used"
    assert a.ledger.for_publication and a.ledger.secure_randomness
    assert a.ledger.randomness == "SecureRandom(method='chacha20')"
    assert not np.array_equal(a.measurements.values, b.measurements.values)


def test_noise_is_integer_for_integer_counts(tree_and_counts):
    tree, x = tree_and_counts
    r = release(tree, x, epsilon=1.0, seed=0, postprocess=[])
    assert r.measurements.values.dtype == np.int64
    assert np.array_equal(r.values, r.measurements.values)


def test_declared_std_is_calibrated():
    """Monte Carlo: BLUE's declared variance matches the realised squared error."""
    tree = hierdp.Tree.complete(fanout=4, height=4)
    x = tree.aggregate(np.full(tree.n_leaves, 50))
    errs, var = [], None
    # 600 releases: the root level is one node, so its ratio has a sampling sd of about
    # 0.08 per 300 releases (with keyed noise the seeds 0..299 happened to give 1.21)
    for s in range(600):
        r = release(tree, x, epsilon=1.0, seed=s)
        errs.append(r.values - x)
        var = r.estimate.variance
    mse = np.mean(np.square(errs), axis=0)
    # per level: average over nodes of the level to reduce sampling error
    for d in range(tree.n_levels):
        nodes = tree.level_nodes(d)
        ratio = mse[nodes].mean() / var[nodes].mean()
        assert 0.8 < ratio < 1.2, (d, ratio)


def test_leaves_strategy_and_ragged_error():
    tree = hierdp.Tree.complete(2, 3)
    x = tree.aggregate(np.arange(4))
    r = release(tree, x, epsilon=1.0, budget="leaves", seed=0)
    assert r.ledger.by_level() == {"total": 0.0, "level_1": 0.0, "level_2": 1.0}
    np.testing.assert_allclose(r.values, tree.aggregate(r.measurements.values[tree.leaves]))
    ragged = hierdp.Tree.from_parent([-1, 0, 0, 1])
    with pytest.raises(hierdp.BudgetError, match="every leaf at the same depth"):
        release(ragged, ragged.aggregate(np.array([1, 2])), epsilon=1.0, budget="leaves")


class _Oracle(BudgetStrategy):
    """Test strategy that peeks at true counts (must be flagged non-private)."""

    name = "peek_oracle"
    reads_true_counts = True
    seen = None

    def allocate(self, tree, total, *, mechanism, sensitivity, true_values=None):
        type(self).seen = true_values
        return {n: total / tree.n_levels for n in tree.level_names}


class _OraclePlugin:
    @hookimpl
    def hierdp_register_budgets(self):
        return [_Oracle]


def test_strategies_reading_true_counts_are_flagged(tree_and_counts):
    tree, x = tree_and_counts
    hierdp.registry.register(_OraclePlugin(), name="oracle-test")
    try:
        r = release(tree, x, epsilon=1.0, budget="peek_oracle")
        assert _Oracle.seen is not None
        assert not r.ledger.for_publication and r.ledger.non_private
        assert "NOT PRIVATE" in str(r.ledger)
        # ordinary strategies never receive the true counts
        seen = {}

        class Spy(BudgetStrategy):
            name = "spy"

            def allocate(self, tree, total, *, mechanism, sensitivity, true_values=None):
                seen["tv"] = true_values
                return {n: total / tree.n_levels for n in tree.level_names}

        release(tree, x, epsilon=1.0, budget=Spy(), seed=0)
        assert seen["tv"] is None
    finally:
        hierdp.registry.unregister(name="oracle-test")


def test_frame_and_xarray_outputs():
    import pandas as pd

    df = pd.DataFrame({"a": ["x", "x", "y"], "b": ["p", "q", "p"]})
    r = df.dptree(levels=["a", "b"], domains="observed").release(epsilon=1.0, seed=0)
    f = r.to_frame(noisy=True)
    assert list(f.columns) == ["level", "a", "b", "estimate", "std", "noisy"]
    ds = r.to_xarray()
    assert ds.sizes["node"] == r.tree.n_nodes
    np.testing.assert_allclose(ds["estimate"].values, r.frame["estimate"].values)
    assert "ledger" in ds.attrs


def test_two_dimensional_values():
    tree = hierdp.Tree.complete(2, 3)
    rng = np.random.default_rng(1)
    x = tree.aggregate(rng.poisson(30, size=(tree.n_leaves, 3)))
    r = release(tree, x, epsilon=1.0, seed=0)
    assert r.values.shape == (tree.n_nodes, 3)
    for c in range(3):
        assert tree.is_consistent(r.values[:, c])
    assert len(r.frame) == tree.n_nodes * 3 and "cell" in r.frame.columns


def test_per_node_diagnostics_come_back_in_external_order():
    parent = [3, 3, 0, -1, 1, 0]  # not in descending-height order: a permutation is paid
    tree = hierdp.Tree.from_parent(parent)
    assert not tree.is_internal_order
    x = tree.aggregate(np.array([4, 7, 9]))
    r = release(tree, x, epsilon=1.0, budget=[0.2, 0.3, 0.5], seed=0, postprocess=["blue"])
    mv = r.estimate.measurement_variance
    assert len(set(mv.tolist())) == 3  # one variance per level, so the order matters
    np.testing.assert_array_equal(mv, r.measurements.variance)


def test_max_contributions_sets_the_sensitivity(tree_and_counts):
    tree, x = tree_and_counts
    r = release(tree, x, epsilon=1.0, max_contributions=5, seed=0)
    assert {ls.sensitivity_l1 for ls in r.ledger.levels} == {5.0}
    base = release(tree, x, epsilon=1.0, seed=0)
    assert r.measurements.variance[0] > 20 * base.measurements.variance[0]
    from hierdp.mechanisms.base import Sensitivity

    with pytest.raises(hierdp.PrivacyError, match="smaller than one privacy unit can change a level .*max_contributions=5"):
        release(tree, x, epsilon=1.0, max_contributions=5, sensitivity=Sensitivity())


def test_dptree_bound_cannot_be_overridden_at_release():
    import pandas as pd

    from hierdp.mechanisms.base import Sensitivity

    df = pd.DataFrame({"g": ["a", "a", "b"], "pid": [1, 1, 2]})
    d = df.dptree(levels=["g"], domains="observed", unit="pid", max_contributions=2)
    with pytest.raises(hierdp.PrivacyError, match="max_contributions is not a release.. option for a DPTree"):
        d.release(epsilon=1.0, max_contributions=1)
    with pytest.raises(hierdp.PrivacyError, match="sensitivity .* is smaller than one privacy unit"):
        d.release(epsilon=1.0, sensitivity=Sensitivity.bounded(1))
    with pytest.raises(hierdp.PrivacyError, match="privacy_unit is not a release.. option"):
        d.release(epsilon=1.0, privacy_unit="one household")
    r = d.release(epsilon=1.0, sensitivity=Sensitivity.bounded(3), seed=1)  # larger: conservative
    assert r.ledger.max_contributions == 2


@pytest.mark.parametrize("kind", ["records", "counts"])
def test_dptree_without_unit_refuses_a_smaller_sensitivity_or_an_unenforced_bound(kind):
    """Without unit=, one row (or one counted individual) changes a level by 1: a release
    may not declare less, nor claim a contribution bound or privacy unit it never applied."""
    import pandas as pd

    from hierdp.mechanisms.base import Sensitivity

    df = pd.DataFrame({"g": ["a"] * 5 + ["b"], "pid": [1] * 5 + [2], "n": [3] * 6})
    d = df.dptree(levels=["g"], domains={"g": ["a", "b"]}, **({"count": "n"} if kind == "counts" else {}))
    with pytest.raises(hierdp.PrivacyError, match="smaller than one privacy unit can change a level"):
        d.release(epsilon=1.0, sensitivity=Sensitivity(l1=1e-3, l2=1e-3))
    with pytest.raises(hierdp.PrivacyError, match="max_contributions is not a release.. option.*unit='column'"):
        d.release(epsilon=1.0, max_contributions=1)
    with pytest.raises(hierdp.PrivacyError, match="privacy_unit is not a release.. option"):
        d.release(epsilon=1.0, privacy_unit="one value of column 'pid'")
    with pytest.raises(hierdp.PrivacyError, match="must be a hierdp Sensitivity"):
        d.release(epsilon=1.0, sensitivity=0.001)
    r = d.release(epsilon=1.0, sensitivity=Sensitivity.bounded(2), seed=3)
    assert [lv.sensitivity_l1 for lv in r.ledger.levels] == [2.0, 2.0]


def test_round_needs_a_consistent_input_first(tree_and_counts):
    tree, x = tree_and_counts
    with pytest.raises(hierdp.PluginError, match="'round' needs a consistent input.*put 'blue'"):
        release(tree, x, epsilon=1.0, postprocess=["round"])
    r = release(tree, x, epsilon=1.0, postprocess=["blue", "nonneg", "round"], seed=0)
    assert r.values.dtype == np.int64 and tree.is_consistent(r.values)


def test_per_level_values_with_epsilon_delta_for_rho_mechanisms_are_refused(tree_and_counts):
    tree, x = tree_and_counts
    with pytest.raises(hierdp.BudgetError, match="per-level values are in the mechanism's unit, rho"):
        release(tree, x, epsilon=1.0, delta=1e-9, mechanism="discrete_gaussian", budget=[0.25] * 4)


def test_private_notes_never_in_repr_or_public_json():
    import pandas as pd

    df = pd.DataFrame({"g": ["a", "b", "zz"]})
    d = df.dptree(levels=["g"], domains={"g": ["a", "b"]}, unknown="drop")
    r = d.release(epsilon=1.0, seed=0)
    assert r.ledger.private_notes["rows_dropped_out_of_domain"] == 1
    for text in (repr(r.ledger), str(r.ledger), r.ledger.to_json()):
        assert "rows_dropped" not in text
    # the public note does not depend on whether anything was dropped
    clean = pd.DataFrame({"g": ["a", "b"]}).dptree(levels=["g"], domains={"g": ["a", "b"]}, unknown="drop")
    assert clean.release(epsilon=1.0, seed=0).ledger.notes == r.ledger.notes


def test_level_names_cannot_shadow_output_columns():
    import pandas as pd

    df = pd.DataFrame({"estimate": ["a"], "b": ["x"]})
    with pytest.raises(hierdp.HierarchyError, match="level 'estimate' has the name of an output column"):
        df.dptree(levels=["estimate", "b"], domains="observed")


def test_numpy_scalar_budgets_are_accepted(tree_and_counts):
    tree, x = tree_and_counts
    r = release(tree, x, epsilon=np.float32(1.0), seed=0)
    assert r.ledger.epsilon == 1.0


def test_nonneg_on_a_ragged_tree_with_an_unmeasured_path():
    """A leaf at depth 1 whose path has no measurement (budget only on depth 2) is unconstrained."""
    import pandas as pd

    df = pd.DataFrame({"state": ["A"] * 5 + ["B"] * 3, "county": ["x", "x", "y", "y", "y", None, None, None]})
    d = df.dptree(levels=["state", "county"], domains="observed")
    r = d.release(epsilon=1.0, budget={"county": 1.0}, postprocess=["blue", "nonneg"], seed=0)
    assert np.all(r.values >= 0) and r.tree.is_consistent(r.values)
    assert r.estimate.info["converged"]


def test_repeated_releases_of_one_dptree_state_their_total_spend():
    """Every release of the same data spends budget again: from the second one on, the
    ledger says how much the releases spend together (basic composition)."""
    import pandas as pd

    d = pd.DataFrame({"g": ["a"] * 5 + ["b"]}).dptree(levels=["g"], domains={"g": ["a", "b"]})
    r1 = d.release(epsilon=1.0, seed=1)
    r2 = d.release(epsilon=0.5, seed=2)
    r3 = d.release(rho=0.1, mechanism="discrete_gaussian", seed=3)
    assert not any("same DataFrame" in n for n in r1.ledger.notes)
    assert "release 2 of the same DataFrame object in this process: together they spend epsilon=1.5 " in " ".join(r2.ledger.notes)
    assert "together they spend epsilon=1.5, rho=0.1 under basic composition" in " ".join(r3.ledger.notes)
    assert [r["guarantee"] for r in d.releases] == ["pure", "pure", "zcdp"]
    assert "same DataFrame" in r3.ledger.to_json()


def test_unmeasured_nodes_have_no_estimate_without_a_consistent_step():
    """An unmeasured level's values are placeholders: with no consistent post-processor they
    are missing (NaN), and boosting refuses them; BLUE fills them in from the children."""
    import pandas as pd

    d = pd.DataFrame({"state": ["A"] * 5 + ["B"] * 3}).dptree(levels=["state"], domains={"state": ["A", "B"]})
    for chain in ([], ["none"]):
        f = d.release(epsilon=1.0, budget={"state": 1.0}, postprocess=chain, seed=1).frame
        assert np.isnan(f["estimate"].iloc[0]) and np.isinf(f["std"].iloc[0])
        assert f["estimate"].iloc[1:].notna().all()
    f = d.release(epsilon=1.0, budget={"state": 1.0}, postprocess=["blue"], seed=1).frame
    assert f["estimate"].iloc[0] == f["estimate"].iloc[1:].sum()
    with pytest.raises(hierdp.DataError, match="boosting needs every level measured"):
        d.release(epsilon=1.0, budget={"state": 1.0}, postprocess=["boosting"], seed=1)
    f = d.release(epsilon=1.0, postprocess=[], seed=1).frame  # every level measured: integers kept
    assert f["estimate"].dtype == np.int64


def test_releases_from_one_dataframe_are_counted_together_across_dptrees():
    """Every df.dptree(...) on the same DataFrame object shares the count (pandas makes a new
    accessor per access, so it is kept per object); a copy is other data as far as the
    library can tell, and the record goes when the frame does."""
    import gc

    import pandas as pd

    from hierdp.frontends import pandas as accessor

    df = pd.DataFrame({"g": ["a"] * 5 + ["b"]})
    dom = {"g": ["a", "b"]}
    df.dptree(levels=["g"], domains=dom).release(epsilon=1.0, seed=1)
    r2 = df.dptree(levels=["g"], domains=dom).release(epsilon=0.5, seed=2)
    assert "release 2 of the same DataFrame object in this process: together they spend epsilon=1.5" in " ".join(r2.ledger.notes)
    s = df.groupby("g").size()
    s.dptree(domains=dom).release(epsilon=1.0, seed=3)
    r4 = s.dptree(domains=dom).release(epsilon=1.0, seed=4)
    assert "together they spend epsilon=2 " in " ".join(r4.ledger.notes)
    other = df.copy()
    assert not other.dptree(levels=["g"], domains=dom).release(epsilon=1.0, seed=5).ledger.notes
    key = id(other)
    del other
    gc.collect()
    assert key not in accessor._SPENT


@pytest.mark.parametrize("levels, total, budget", [(11, 0.1, "equal"), (4, 3.3, "greedy"), (7, 0.7, "equal")])
def test_level_budgets_never_sum_above_the_total(levels, total, budget):
    """Rounding in a split (total / k, k times) could compose to one ulp more than declared:
    the release trims it, so the ledger's levels never spend more than its total."""
    import math

    tree = hierdp.Tree.from_parent([-1] + list(range(levels - 1)))
    r = release(tree, tree.aggregate(np.array([3])), epsilon=total, budget=budget, seed=1)
    assert math.fsum(lv.budget for lv in r.ledger.levels) <= total
    assert math.isclose(r.ledger.spent, total, rel_tol=1e-12)
