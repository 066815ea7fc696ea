"""One privacy-loss value (issue 29, item 2): ``hierdp.PrivacyLoss``.

Built and validated once, where it is made; then only carried (plan, accountant, ledger).
The error texts are the ones the keyword checks gave before the value existed (copied from
the original ``accounting.py``), and "no privacy budget given" is written in one place.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import hierdp
from hierdp import rules
from hierdp.accounting import PrivacyLoss, pure_epsilon
from hierdp.errors import BudgetError, PrivacyError
from hierdp.frontends.points import release_points
from hierdp.mechanisms.truncated_laplace import TruncatedLaplace

from .test_pipeline_pinned import CASES, _digest, _tree_and_values

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


@pytest.mark.parametrize("kw, kind", [
    ({"epsilon": 1.0}, "pure"),
    ({"epsilon": 1.0, "delta": 1e-9}, "approx"),
    ({"rho": 0.5}, "zcdp"),
    ({"rho": 0.5, "delta": 1e-6}, "zcdp"),
])
def test_kinds(kw, kind):
    loss = PrivacyLoss(**kw)
    assert loss.kind == kind
    assert (loss.epsilon, loss.delta, loss.rho) == (kw.get("epsilon"), kw.get("delta"), kw.get("rho"))


def test_numbers_become_plain_floats_and_the_value_is_frozen():
    loss = PrivacyLoss(epsilon=np.float32(0.5), delta=np.float64(1e-6))
    assert type(loss.epsilon) is float and type(loss.delta) is float and loss.epsilon == 0.5
    assert PrivacyLoss(epsilon=2).epsilon == 2.0 and type(PrivacyLoss(epsilon=2).epsilon) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        loss.epsilon = 5.0  # type: ignore[misc]
    assert repr(PrivacyLoss(rho=0.25)) == "PrivacyLoss(rho=0.25)"
    assert PrivacyLoss(epsilon=1.0) == PrivacyLoss.of(1.0) and hash(PrivacyLoss(epsilon=1.0))


# texts of the original accounting._positive / check_delta / total_budget
@pytest.mark.parametrize("kw, text", [
    ({"epsilon": -1}, "epsilon must be a finite number > 0, got -1"),
    ({"epsilon": 0.0}, "epsilon must be a finite number > 0, got 0.0"),
    ({"epsilon": float("nan")}, "epsilon must be a finite number > 0, got nan"),
    ({"epsilon": "1"}, "epsilon must be a finite number > 0, got '1'"),
    ({"epsilon": True}, "epsilon must be a finite number > 0, got True"),
    ({"epsilon": 10 ** 400}, "epsilon must be a finite number > 0 that fits a float; got a 401-digit number"),
    ({"rho": -2.0}, "rho must be a finite number > 0, got -2.0"),
    ({"epsilon": 1.0, "delta": 1}, "delta must be a number strictly between 0 and 1 (e.g. 1e-9), got 1"),
    ({"rho": 1.0, "delta": -0.1}, "delta must be a number strictly between 0 and 1 (e.g. 1e-9), got -0.1"),
    ({"epsilon": 1.0, "rho": 0.5}, "give either rho=... or epsilon=... with delta=..., not both"),
    ({}, "no privacy budget given: pass epsilon=<positive number>"),
    ({"delta": 1e-6}, "no privacy budget given: pass epsilon=<positive number>"),
])
def test_invalid_losses_never_exist(kw, text):
    with pytest.raises(BudgetError, match=f"^{re.escape(text)}$"):
        PrivacyLoss(**kw)
    with pytest.raises(BudgetError, match=f"^{re.escape(text)}$"):
        PrivacyLoss.of(**kw)


def test_of_passes_a_ready_loss_through():
    loss = PrivacyLoss(rho=0.5)
    assert PrivacyLoss.of(loss) is loss
    with pytest.raises(BudgetError, match="give the privacy loss once"):
        PrivacyLoss.of(loss, delta=1e-6)
    assert pure_epsilon(0.7) == 0.7 and pure_epsilon(PrivacyLoss(epsilon=0.7)) == 0.7
    with pytest.raises(PrivacyError, match="pure ε-DP"):
        pure_epsilon(loss)


def test_exported():
    assert hierdp.PrivacyLoss is PrivacyLoss and "PrivacyLoss" in hierdp.__all__


# ------------------------------------------------------------------ one message
T = hierdp.Tree.complete(fanout=2, height=2)
V = np.array([5, 2, 3])


@pytest.mark.parametrize("kw, text", [  # the texts before the refactoring
    ({}, "no privacy budget given: pass epsilon=<positive number>"),
    ({"mechanism": "laplace", "delta": 1e-6}, "no privacy budget given: pass epsilon=<positive number>"),
    ({"mechanism": "gaussian"},
     "no privacy budget given for mechanism 'gaussian': pass rho=... or epsilon=... with delta=..."),
    ({"plan": "marginals"}, "no privacy budget given: pass epsilon=<positive number>"),
    ({"plan": "ghazi"}, "no privacy budget given: plan 'ghazi' is (ε, δ)-DP; pass epsilon= and delta="),
])
def test_no_budget_is_one_message(kw, text):
    with pytest.raises(BudgetError, match=f"^{re.escape(text)}$"):
        hierdp.release(T, V, seed=1, **kw)


def test_no_budget_text_is_written_once():
    pkg = Path(hierdp.__file__).parent
    hits = [p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")
            if "no privacy budget given" in p.read_text(encoding="utf-8")]
    assert hits == ["rules.py"]
    pts = np.random.default_rng(0).uniform(0, 1, (50, 2))
    with pytest.raises(BudgetError, match=f"^{re.escape(rules.no_budget_text())}$"):
        release_points(pts, bounds=[(0, 1), (0, 1)])


# --------------------------------------------------- validated once, then carried
def _count_delta_checks(monkeypatch) -> list[object]:
    calls: list[object] = []
    real = rules.delta_problem

    def spy(delta):
        calls.append(delta)
        return real(delta)

    monkeypatch.setattr(rules, "delta_problem", spy)
    return calls


@pytest.mark.parametrize("kw", [
    {"epsilon": 1.0, "delta": 1e-6, "mechanism": "gaussian"},
    {"rho": 0.5, "delta": 1e-6, "mechanism": "gaussian"},
    {"epsilon": 1.0, "delta": 1e-6, "plan": "ghazi", "postprocess": []},
    {"epsilon": 1.0, "delta": 1e-6, "mechanism": TruncatedLaplace(delta=1e-8)},
])
def test_delta_is_checked_once_per_release(monkeypatch, kw):
    calls = _count_delta_checks(monkeypatch)
    t, v = _tree_and_values()
    hierdp.release(t, v, seed=2, **kw)
    assert calls == [1e-6]


def test_a_ready_loss_gives_the_same_bits_as_keywords():
    """The pinned Gaussian release (digest from the original code), its loss given as a value."""
    t, v = _tree_and_values()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        r = hierdp.release(t, v, epsilon=PrivacyLoss(rho=0.5, delta=1e-6), mechanism="discrete_gaussian",
                           budget="greedy", postprocess=["blue", "nonneg", {"name": "round", "method": "remainder"}],
                           seed=4)
    assert _digest(r) == CASES["per_level_gaussian_chain"][1]
    with pytest.raises(BudgetError, match="give the privacy loss once"):
        hierdp.release(t, v, epsilon=PrivacyLoss(rho=0.5), rho=0.5, mechanism="gaussian", seed=4)


def test_plans_turn_the_loss_into_their_total():
    """Hand-computed totals: ρ = (sqrt(ln(1/δ) + ε) - sqrt(ln(1/δ)))² (Bun & Steinke 2016),
    the calibration of accountant="zcdp" (the default "tight" one: tests/test_accounting_tight.py)."""
    gauss = hierdp.registry.create("plan", "per_level", mechanism="gaussian")
    total, g = gauss.total_for(PrivacyLoss(epsilon=1.0, delta=1e-6, accountant="zcdp"))
    L = np.log(1e6)
    assert total == pytest.approx((np.sqrt(L + 1.0) - np.sqrt(L)) ** 2, rel=1e-12)
    assert g == {"guarantee": "approx", "epsilon": 1.0, "delta": 1e-6, "rho": total}
    assert hierdp.registry.create("plan", "per_level").total_for(PrivacyLoss(epsilon=0.3)) == (
        0.3, {"guarantee": "pure", "epsilon": 0.3, "delta": None, "rho": None})
    with pytest.raises(PrivacyError, match="cannot give pure ε-DP"):
        gauss.total_for(PrivacyLoss(epsilon=1.0))
    with pytest.raises(PrivacyError, match="needs δ > 0"):
        hierdp.registry.create("plan", "ghazi").total_for(PrivacyLoss(epsilon=1.0))


@pytest.mark.parametrize("kw", [
    {"epsilon": 1.0},
    {"epsilon": 1.0, "delta": 1e-6, "mechanism": "gaussian"},
    {"rho": 0.3, "mechanism": "gaussian"},
    {"rho": 0.3, "delta": 1e-7, "mechanism": "gaussian"},
    {"epsilon": 1.0, "delta": 1e-6, "plan": "ghazi", "postprocess": []},
])
def test_the_ledger_states_the_loss_it_was_given(kw):
    t, v = _tree_and_values()
    r = hierdp.release(t, v, seed=3, **kw)
    given = PrivacyLoss(epsilon=kw.get("epsilon"), delta=kw.get("delta"), rho=kw.get("rho"))
    stated = r.ledger.privacy_loss
    if kw.get("plan") == "ghazi":  # issue 34: its steps composed optimally certify a smaller ε at the same δ
        assert stated.delta == given.delta and stated.epsilon < given.epsilon
        given = stated
    assert stated == given
    assert hierdp.Ledger.from_json(r.ledger.to_json()).privacy_loss == given
