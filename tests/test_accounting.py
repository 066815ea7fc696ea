"""Accounting: published conversion formulas, composition rules, budget errors, ledger I/O."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hierdp.accounting import Accountant, approx_dp_to_zcdp, pure_to_zcdp, total_budget, zcdp_delta, zcdp_to_approx_dp
from hierdp.accounting.ledger import Ledger, LevelSpend
from hierdp.errors import BudgetError, PrivacyError


# -- conversions -------------------------------------------------------------------------
def test_bun_steinke_conversion_hand_values():
    # BS16 Prop 1.3: ε = ρ + 2 sqrt(ρ ln(1/δ)).
    # ρ = 0.5, δ = 1e-6: ln(1e6) = 13.815511; sqrt(6.907755) = 2.628261 -> 0.5 + 5.256522
    assert zcdp_to_approx_dp(0.5, 1e-6, "bs16") == pytest.approx(5.756522, abs=1e-6)
    # ρ = 1, δ = 1e-5: ln(1e5) = 11.512925; 1 + 2·3.393070 = 7.786140
    assert zcdp_to_approx_dp(1.0, 1e-5, "bs16") == pytest.approx(7.786140, abs=1e-6)


def test_pure_to_zcdp_is_half_epsilon_squared():
    # BS16 Prop 1.4: ε-DP implies (ε²/2)-zCDP
    assert pure_to_zcdp(1.0) == 0.5
    assert pure_to_zcdp(0.2) == pytest.approx(0.02)


def _cks_brute(rho: float, delta: float) -> float:
    # CKS20 Cor. 13, minimised over a dense grid of α (independent of the golden search)
    a = 1 + np.logspace(-6, 6, 400_001)
    L = math.log(1 / delta)
    return float(np.min(a * rho + (L + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)))


@pytest.mark.parametrize("rho,delta", [(0.5, 1e-6), (1.0, 1e-5), (2.63, 1e-10), (0.01, 1e-9), (15.0, 1e-10)])
def test_cks_conversion_matches_brute_force_and_beats_bs16(rho, delta):
    e = zcdp_to_approx_dp(rho, delta, "cks20")
    assert e == pytest.approx(_cks_brute(rho, delta), rel=1e-7)
    assert e < zcdp_to_approx_dp(rho, delta, "bs16")
    # consistency with the δ(ε) form of the same bound
    assert zcdp_delta(rho, e) == pytest.approx(delta, rel=5e-3)


def test_approx_to_zcdp_inverts_bs16():
    # ρ = (sqrt(ln(1/δ) + ε) - sqrt(ln(1/δ)))²; ε = 1, δ = 1e-6:
    # sqrt(14.815511) - sqrt(13.815511) = 3.849092 - 3.716922 = 0.132170 -> ρ = 0.0174689
    r = approx_dp_to_zcdp(1.0, 1e-6)
    assert r == pytest.approx(0.0174689, rel=1e-5)
    assert zcdp_to_approx_dp(r, 1e-6, "bs16") == pytest.approx(1.0, rel=1e-12)


# -- total_budget ----------------------------------------------------------------------
def test_total_budget_pure():
    assert total_budget("epsilon", epsilon=2.0) == (2.0, {"guarantee": "pure", "epsilon": 2.0,
                                                          "delta": None, "rho": None})


def test_total_budget_zcdp_and_approx():
    t, g = total_budget("rho", rho=0.5, mechanism="gaussian")
    assert t == 0.5 and g["guarantee"] == "zcdp" and g["epsilon"] is None
    t, g = total_budget("rho", rho=0.5, delta=1e-6)
    assert g["epsilon"] == pytest.approx(zcdp_to_approx_dp(0.5, 1e-6))
    t, g = total_budget("rho", epsilon=1.0, delta=1e-6)
    assert g["guarantee"] == "approx" and t == pytest.approx(0.0174689, rel=1e-5)
    assert g["rho"] == t and g["epsilon"] == 1.0 and g["delta"] == 1e-6


def test_gaussian_under_pure_epsilon_is_refused():
    with pytest.raises(PrivacyError, match=r"'gaussian' \(Gaussian noise\) cannot give pure ε-DP"):
        total_budget("rho", epsilon=1.0, mechanism="gaussian")
    with pytest.raises(PrivacyError, match="'laplace' is pure ε-DP and is budgeted by epsilon alone: remove privacy.rho"):
        total_budget("epsilon", rho=0.5, mechanism="laplace")


@pytest.mark.parametrize("kw,match", [
    ({"epsilon": 0.0}, "epsilon must be"), ({"epsilon": -1.0}, "epsilon must be"),
    ({"epsilon": float("nan")}, "epsilon must be"), ({"rho": 0.0}, "rho must be"),
    ({"rho": -2.0}, "rho must be"), ({"epsilon": 1.0, "delta": 0.0}, "delta must be"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must be"), ({"rho": 1.0, "delta": -0.1}, "delta must be"),
    ({}, "no privacy budget"),
])
def test_bad_budgets(kw, match):
    unit = "epsilon" if "rho" not in kw and "delta" not in kw else "rho"
    with pytest.raises(BudgetError, match=match):
        total_budget(unit, **kw)


# -- composition ------------------------------------------------------------------------
def test_basic_and_parallel_composition():
    acc = Accountant("epsilon")
    acc.spend(0.25, label="total")
    acc.spend(0.5, label="state", group="level-1")
    acc.spend(0.5, label="state", group="level-1")   # disjoint nodes: parallel, max
    acc.spend(0.3, label="county-a", group="level-2")
    acc.spend(0.2, label="county-b", group="level-2")
    assert acc.total == pytest.approx(0.25 + 0.5 + 0.3)
    acc2 = Accountant("rho", budget=1.0)
    for r in (0.1, 0.2, 0.3):
        acc2.spend(r)
    assert acc2.total == pytest.approx(0.6) and acc2.remaining == pytest.approx(0.4)
    acc2.spend(0.5, unit="epsilon")  # ε = 0.5 -> ρ = 0.125
    assert acc2.total == pytest.approx(0.725)
    with pytest.raises(BudgetError, match="exceed the budget"):
        acc2.spend(0.5)
    g = acc2.guarantee(delta=1e-6)
    assert g["rho"] == pytest.approx(0.725) and g["epsilon"] == pytest.approx(zcdp_to_approx_dp(0.725, 1e-6))
    with pytest.raises(PrivacyError, match="no pure-ε equivalent"):
        Accountant("epsilon").spend(0.1, unit="rho")


# -- ledger ---------------------------------------------------------------------------
def _ledger() -> Ledger:
    lv = [LevelSpend("total", 0, 0.2, "epsilon", "discrete_laplace", 1, 2 * math.exp(-0.2) / (1 - math.exp(-0.2)) ** 2),
          LevelSpend("state", 1, 0.0, "epsilon", "discrete_laplace", 50, math.inf),
          LevelSpend("county", 2, 0.8, "epsilon", "discrete_laplace", 3000, 4.1)]
    return Ledger(guarantee="pure", epsilon=1.0, mechanism="discrete_laplace", budget_strategy="explicit",
                  levels=lv, seed=3, secure_randomness=False, private_notes={"n_dropped": 12},
                  max_contributions=2, privacy_unit="person_id")


def test_ledger_round_trips_json_and_yaml():
    led = _ledger()
    back = Ledger.from_json(led.to_json())
    assert back.levels == led.levels and back.epsilon == 1.0 and back.seed == 3
    assert back.levels[1].noise_variance == math.inf
    assert "n_dropped" not in led.to_json() and back.private_notes == {}
    assert Ledger.from_json(led.to_json(include_private=True)).private_notes == {"n_dropped": 12}
    y = Ledger.from_yaml(led.to_yaml())
    assert y.levels == led.levels and y.max_contributions == 2 and not y.for_publication
    assert "n_dropped" not in led.to_yaml()


def test_ledger_accountant_sums_levels():
    acc = _ledger().accountant()
    assert acc.unit == "epsilon" and acc.total == pytest.approx(1.0) == _ledger().spent


def test_ledger_text_states_the_zcdp_route():
    led = Ledger(guarantee="approx", epsilon=1.0, delta=1e-6, rho=approx_dp_to_zcdp(1.0, 1e-6))
    assert "(ε, δ)-DP, ε = 1, δ = 1e-06 (via ρ-zCDP, ρ = 0.0174689)" in str(led)
