"""The privacy fixes of the core redesign, each checked against what it must do."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import BudgetError, NotForPublicationWarning, PrivacyError, Sensitivity, Session
from hierdp.mechanisms.truncated_laplace import TruncatedLaplace


@pytest.fixture
def tree_and_counts():
    tree = hierdp.Tree.complete(2, 4)
    return tree, tree.aggregate(np.arange(8) * 10)


# ------------------------------------------------------------------- sensitivity floor
def test_array_api_refuses_a_sensitivity_below_one_unit(tree_and_counts):
    """A sensitivity of 1e-6 calibrated ~no noise and published exact counts under an
    ε = 1 ledger (before the fix the release went through)."""
    tree, x = tree_and_counts
    with pytest.raises(PrivacyError, match="smaller than one privacy unit can change a level"):
        hierdp.release(tree, x, epsilon=1.0, sensitivity=Sensitivity(l1=1e-6, l2=1e-6))
    with pytest.raises(PrivacyError, match="must be a hierdp Sensitivity"):
        hierdp.release(tree, x, epsilon=1.0, sensitivity={"l1": 1})
    # larger is allowed (conservative) and used
    r = hierdp.release(tree, x, epsilon=1.0, sensitivity=Sensitivity(l1=3, l2=3), seed=0)
    assert {ls.sensitivity_l1 for ls in r.ledger.levels} == {3.0}


# ------------------------------------------------------------------- (ε, δ) mechanisms
def test_a_mechanism_with_a_delta_is_accounted_or_refused(tree_and_counts):
    """truncated Laplace has a δ per use: it was ledgered as pure ε-DP."""
    tree, x = tree_and_counts
    mech = TruncatedLaplace(delta=0.01)
    with pytest.raises(BudgetError, match=r"δ = 0.01 per measured level \(4 levels: δ = 0.04\); pass delta="):
        hierdp.release(tree, x, epsilon=1.0, mechanism=mech)
    with pytest.raises(BudgetError, match="more than delta = 0.03"):
        hierdp.release(tree, x, epsilon=1.0, delta=0.03, mechanism=mech)
    r = hierdp.release(tree, x, epsilon=1.0, delta=0.05, mechanism=mech, seed=1)
    assert r.ledger.guarantee == "approx" and r.ledger.delta == 0.05 and r.ledger.epsilon == 1.0
    # half the levels measured: half the δ
    r = hierdp.release(tree, x, epsilon=1.0, delta=0.02, mechanism=mech, budget=[0.5, 0, 0.5, 0], seed=1)
    assert r.ledger.guarantee == "approx"


# ------------------------------------------------------------------- seeded releases
def test_a_seeded_release_warns_and_every_output_says_not_for_publication(tree_and_counts, tmp_path):
    tree, x = tree_and_counts
    with pytest.warns(NotForPublicationWarning, match="seed=3"):
        r = hierdp.release(tree, x, epsilon=1.0, seed=3)
    d = json.loads(r.ledger.to_json())
    assert d["status"].startswith("NOT FOR PUBLICATION: seeded randomness (seed=3)")
    assert "NOT FOR PUBLICATION" in r.ledger.to_yaml()
    assert hierdp.Ledger.from_json(r.ledger.to_json()).seed == 3  # the status is derived, not stored
    unseeded = hierdp.release(tree, x, epsilon=1.0)
    assert "status" not in json.loads(unseeded.ledger.to_json())


def test_a_seeded_spec_release_marks_its_written_table(tmp_path):
    import warnings

    from hierdp.spec.runner import run_spec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotForPublicationWarning)
        r = run_spec("specs/demo.yaml", seed=4, output=tmp_path / "t.csv")
    table = pd.read_csv(tmp_path / "t.csv")
    assert (table["status"] == "NOT FOR PUBLICATION: seeded randomness (seed=4)").all()
    assert not r.ledger.for_publication


# ------------------------------------------------------------------- sessions
def test_a_session_refuses_to_overspend_before_drawing_noise(tree_and_counts):
    tree, x = tree_and_counts
    s = Session(epsilon=1.0)
    hierdp.release(tree, x, epsilon=0.6, session=s)
    hierdp.release(tree, x, epsilon=0.4, session=s)
    assert s.spent == {"epsilon": pytest.approx(1.0)} and s.remaining["epsilon"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(BudgetError, match="needs epsilon=0.1 but the session has 0 left of epsilon=1"):
        hierdp.release(tree, x, epsilon=0.1, session=s)
    assert len(s.releases) == 2


def test_a_session_counts_copies_and_other_frames_of_the_same_data():
    """Spend tracked by object identity started from zero for df.copy(); a session counts
    whatever the releases read."""
    df = pd.DataFrame({"g": ["a"] * 5 + ["b"]})
    s = Session(epsilon=1.5)
    dom = {"g": ["a", "b"]}
    df.dptree(levels=["g"], domains=dom).release(epsilon=1.0, session=s)
    with pytest.raises(BudgetError, match="session has 0.5 left"):
        df.copy().dptree(levels=["g"], domains=dom).release(epsilon=1.0, session=s)
    r = df.groupby("g").size().dptree(domains=dom).release(epsilon=0.5, session=s)
    assert any("release 2 of a session with total epsilon=1.5" in n for n in r.ledger.notes)


def test_session_composition_rules(tree_and_counts):
    tree, x = tree_and_counts
    s = Session(rho=1.0)
    hierdp.release(tree, x, epsilon=1.0, session=s)  # pure ε = 1 costs ρ = 1/2 (Bun & Steinke Prop. 1.4)
    hierdp.release(tree, x, rho=0.5, mechanism="discrete_gaussian", session=s)
    assert s.spent["rho"] == pytest.approx(1.0)
    with pytest.raises(PrivacyError, match="cannot draw from a pure ε session"):
        hierdp.release(tree, x, rho=0.1, mechanism="discrete_gaussian", session=Session(epsilon=1.0))
    with pytest.raises(BudgetError, match="total budget"):
        Session()


# ------------------------------------------------------------------- public names
def test_public_names_are_exported():
    for name in ("Tree", "release", "postprocess", "Session", "Sensitivity", "DPTree", "ReleaseResult", "Ledger",
                 "Estimate", "Measurements"):
        assert hasattr(hierdp, name), name
    import hierdp.postprocessors as pp

    assert pp.BLUE.name == "blue"  # the subpackage is reachable (it was shadowed by the function)
    assert callable(hierdp.release) and callable(hierdp.postprocess)
    assert set(hierdp.registry.names("plan")) >= {"per_level"}
    assert set(hierdp.registry.names("decomposition")) >= {"declared"}


def test_plan_parameters_beside_plan_are_per_level_only(tree_and_counts):
    tree, x = tree_and_counts
    r = hierdp.release(tree, x, epsilon=1.0, plan={"name": "per_level", "budget": "leaves"}, seed=0)
    assert [ls.budget for ls in r.ledger.levels] == [0, 0, 0, 1.0]
    with pytest.raises(hierdp.PluginError, match="unknown plan 'nope'"):
        hierdp.release(tree, x, epsilon=1.0, plan="nope")


def test_a_400_digit_sensitivity_or_budget_is_a_budget_error():
    from hierdp.mechanisms.base import check_budget

    with pytest.raises(BudgetError, match="sensitivity l1 must be a positive finite number, got a number of 401 digits"):
        Sensitivity(l1=10**400)
    with pytest.raises(BudgetError, match="epsilon budget must be a finite number > 0, got a number of 401 digits"):
        check_budget(10**400)


def test_run_spec_by_example_name_and_xarray_carries_the_ledger_fields():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotForPublicationWarning)
        r = hierdp.run_spec("demo", seed=2, write=False)
    ds = r.to_xarray()
    assert json.loads(ds.attrs["ledger"])["release_id"] == r.ledger.release_id == ds.attrs["hierdp.release_id"]
    assert ds.attrs["trust_model"] == "central" and ds.attrs["hierdp_version"] == hierdp.__version__
