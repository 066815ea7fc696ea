"""The optimal composition of (ε, δ) steps and the Ghazi plan's tight ε (issue 34, acceptance 2).

References, none of them the code under test: Kairouz, Oh & Viswanath 2015 (Thm 3.3), the
closed form of k equal (ε, δ) steps, in 50-digit arithmetic; a hand-derived curve for two
steps; the hockey-stick divergence Σ (P - e^ε Q)₊ summed over the full product of the steps'
canonical pairs (4^m outcomes); and, when installed, dp-accounting's PLD of the same pairs
(its optimistic and pessimistic estimates bracket the exact ε).
"""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest

import hierdp
from hierdp.accounting.accountants import APPROX, BASIC, approx_delta, approx_epsilon
from hierdp.errors import BudgetError
from hierdp.plans import ghazi as gz

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _kov_delta(k: int, eps: float, dlt: float, i: int) -> mpmath.mpf:
    """KOV 2015 Thm 3.3: k-fold (ε, δ) composition is ((k - 2i)ε, δ_i)-DP, optimally, with
    δ_i = 1 - (1-δ)^k (1 - Σ_{l<i} C(k,l)(e^{(k-l)ε} - e^{(k-2i+l)ε}) / (1+e^ε)^k)."""
    with mpmath.workdps(50):
        e, d = mpmath.mpf(eps), mpmath.mpf(dlt)
        s = mpmath.fsum(mpmath.binomial(k, m) * (mpmath.exp((k - m) * e) - mpmath.exp((k - 2 * i + m) * e))
                        for m in range(i)) / (1 + mpmath.exp(e)) ** k
        return 1 - (1 - d) ** k * (1 - s)


def _canonical(eps: float, dlt: float) -> tuple[np.ndarray, np.ndarray]:
    """The canonical (ε, δ) pair (KOV 2015, Thm 2.4): outcomes (P-only, +ε, -ε, Q-only)."""
    a = (1 - dlt) / (1 + math.exp(eps))
    return (np.array([dlt, a * math.exp(eps), a, 0.0]), np.array([0.0, a, a * math.exp(eps), dlt]))


def _brute(parts: list[tuple[float, float, int]]):
    """The hockey-stick curve of the product of every step's canonical pair (4^m outcomes)."""
    P, Q = np.ones(1), np.ones(1)
    for eps, dlt, n in parts:
        p, q = _canonical(eps, dlt)
        for _ in range(n):
            P, Q = np.kron(P, p), np.kron(Q, q)

    def delta(eps: float) -> float:
        return float(np.sum(np.maximum(P - math.exp(eps) * Q, 0.0)))

    def epsilon(dlt: float) -> float:
        lo, hi = 0.0, math.fsum(e * n for e, _, n in parts)
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if delta(mid) > dlt else (lo, mid)
        return hi

    return delta, epsilon


# -- the composition against references -------------------------------------------------------
@pytest.mark.parametrize("k, eps, dlt", [(20, 0.1, 1e-7), (30, 0.05, 0.0), (7, 0.9, 1e-4)])
def test_equal_steps_meet_kairouz_oh_viswanath(k, eps, dlt):
    """At δ_i of KOV's closed form the optimal ε is exactly (k - 2i)ε: the returned ε is
    never below it (that would certify less than the steps allow) and within 10⁻⁴ relative
    above; δ at (k - 2i)ε is never below δ_i and within 10⁻³ relative above (the grid, whose
    step h is ~4·10⁻⁶ of the loss range, rounds each of the i flipped steps' loss up by at
    most 2h)."""
    parts = [(eps, dlt, k)]
    for i in range(1, min(6, k // 2)):
        d_i = _kov_delta(k, eps, dlt, i)
        got = approx_epsilon(parts, float(d_i))
        assert (k - 2 * i) * eps * (1 - 1e-12) <= got <= (k - 2 * i) * eps * (1 + 1e-4), (i, got)
        dd = approx_delta((k - 2 * i) * eps, parts)
        assert float(d_i) <= dd <= float(d_i) * (1 + 1e-3), (i, dd, float(d_i))


def test_two_steps_by_hand():
    """(ε₁, δ₁) = (0.5, 10⁻³) and (ε₂, δ₂) = (0.2, 2·10⁻³): with pᵢ = e^εᵢ/(1 + e^εᵢ),
    δ(ε) = 1 - (1-δ₁)(1-δ₂) + (1-δ₁)(1-δ₂)[p₁p₂(1 - e^{ε-0.7}) + p₁(1-p₂)(1 - e^{ε-0.3})₊]."""
    parts = [(0.5, 1e-3, 1), (0.2, 2e-3, 1)]
    p1, p2 = (math.exp(e) / (1 + math.exp(e)) for e in (0.5, 0.2))
    keep = (1 - 1e-3) * (1 - 2e-3)

    def hand(eps: float) -> float:
        return 1 - keep + keep * (p1 * p2 * -math.expm1(min(eps - 0.7, 0)) +
                                  p1 * (1 - p2) * -math.expm1(min(eps - 0.3, 0)))

    for eps in (0.0, 0.1, 0.3, 0.45, 0.69):
        assert hand(eps) <= approx_delta(eps, parts) <= hand(eps) * (1 + 1e-5)
    for target in (0.01, 0.05, 0.2):
        got = approx_epsilon(parts, target)
        assert hand(got) <= target < hand(got * (1 - 1e-6) - 1e-9)
    # δ = 3·10⁻³ leaves 2·10⁻⁶ above the steps' own δ: ε = 0.7 - 2·10⁻⁶/(keep·p₁p₂) + o()
    assert approx_epsilon(parts, 3e-3) == pytest.approx(0.7 - 2e-6 / (keep * p1 * p2), abs=1e-8)
    assert approx_epsilon(parts, 2.9e-3) is None  # the steps' δ alone exceed it: no ε meets it


def test_a_short_ghazi_schedule_against_the_full_product_of_its_pairs():
    """The Ghazi steps of a schedule cut at 2 steps with cutoff 2 (1 + 2·(1 + 2) = 7 steps,
    4⁷ outcomes): the certified ε meets δ on the brute-force curve and is within 10⁻⁵ of
    the brute-force optimum."""
    sch = gz.GhaziSchedule(1.0, 1e-3, 0.5, 0.05, 5, 1, 0.1, 0.25, 1.8, 1.68, 2, 10.0, 2)
    parts = gz.schedule_steps(sch)
    assert sum(n for _, _, n in parts) == 7
    delta, epsilon = _brute(parts)
    for target in (1e-3, 1.5e-3, 5e-3):
        got = approx_epsilon(parts, target)
        assert delta(got) <= target * (1 + 1e-12), (target, got, delta(got))
        assert got <= epsilon(target) * (1 + 1e-5) + 1e-9
    assert approx_epsilon(parts, 1e-3) < 0.99 * math.fsum(e * n for e, _, n in parts)  # tighter than basic


def test_unequal_steps_against_the_product_and_dp_accounting():
    parts = [(0.3, 1e-4, 2), (0.07, 0.0, 3), (0.01, 5e-5, 2)]
    delta, epsilon = _brute(parts)
    got = approx_epsilon(parts, 1e-3)
    assert delta(got) <= 1e-3 * (1 + 1e-12) and got <= epsilon(1e-3) * (1 + 1e-5)


def test_bad_steps_are_one_clear_error():
    with pytest.raises(BudgetError, match="an integer count"):
        approx_epsilon([(0.1, 1e-6, 1.5)], 1e-5)
    with pytest.raises(BudgetError, match="0 < delta < 1"):
        approx_epsilon([(0.1, 0.0, 1)], 0.0)
    with pytest.raises(BudgetError, match="ε >= 0 finite"):
        approx_delta(0.1, [(math.inf, 0.0, 1)])


# -- the Ghazi plan's ledger --------------------------------------------------------------------
def _tree_values(height: int = 5) -> tuple[hierdp.Tree, np.ndarray]:
    tree = hierdp.Tree.complete(2, height)  # height + 1 levels
    rng = np.random.default_rng(0)
    return tree, tree.aggregate((rng.pareto(1.1, tree.n_leaves) * 400).astype(np.int64))


@pytest.mark.parametrize("eps, dlt", [(1.0, 1e-6), (17.14, 1e-10)])
def test_ghazi_reports_a_tighter_epsilon_at_the_same_delta_with_the_same_noise(eps, dlt):
    tree, v = _tree_values()
    plan = {"name": "ghazi", "alpha": 0.5}
    tight = hierdp.release(tree, v, plan=plan, epsilon=eps, delta=dlt, seed=3)
    basic = hierdp.release(tree, v, plan=plan, seed=3,
                           epsilon=hierdp.PrivacyLoss(epsilon=eps, delta=dlt, accountant="zcdp"))
    assert (basic.ledger.epsilon, basic.ledger.delta, basic.ledger.certified_by) == (eps, dlt, BASIC)
    L = tight.ledger
    assert L.certified_by == APPROX and L.delta == dlt and L.epsilon < eps
    # the same noise, the same outputs: only the accounting differs
    assert np.array_equal(tight.values, basic.values) and L.levels == basic.ledger.levels
    # the certified ε is the longest schedule's, from public parameters only
    sch = gz.ghazi_schedule(eps, dlt, 0.5, 0.05, tree.n_levels)
    parts = gz.schedule_steps(sch)
    assert L.epsilon == approx_epsilon(parts, dlt)
    # every step the plan can run (max_steps of them): basic composition of the parts is the requested (ε, δ)
    assert len(parts) == 1 + 2 * sch.max_steps and sum(n for _, _, n in parts) == 1 + (1 + sch.c) * sch.max_steps
    assert eps * (1 - 1e-9) <= math.fsum(e * n for e, _, n in parts) <= eps
    assert dlt * (1 - 1e-9) <= math.fsum(d * n for _, d, n in parts) <= dlt
    other = hierdp.release(tree, v * 3, plan=plan, epsilon=eps, delta=dlt, seed=4)
    assert other.ledger.epsilon == L.epsilon  # whatever the counts (and however many steps ran)
    assert L.epsilon_at(2 * dlt) == L.epsilon


def test_ghazi_figures_for_the_note():
    """(1, 10⁻⁶) on 6 levels: 0.98700 instead of 1 (1.3% less); (17.14, 10⁻¹⁰): 17.1368."""
    for eps, dlt, want in [(1.0, 1e-6, 0.98700), (17.14, 1e-10, 17.1368)]:
        sch = gz.ghazi_schedule(eps, dlt, 0.5, 0.05, 6)
        assert gz.composed_epsilon(sch) == pytest.approx(want, abs=1e-4)


def test_ghazi_with_several_contributions_composes_each_steps_rounds_as_one_block():
    tree, v = _tree_values(4)
    r = hierdp.release(tree, v, plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-6,
                       sensitivity=hierdp.Sensitivity(l1=2.0, l2=2.0), seed=1)
    sch = gz.ghazi_schedule(1.0, 1e-6, 0.5, 0.05, tree.n_levels, 2)
    parts = gz.schedule_steps(sch)
    assert all(n == 1 for _, _, n in parts) and len(parts) == 1 + 2 * sch.max_steps
    assert r.ledger.epsilon == approx_epsilon(parts, 1e-6) < 1.0


def test_a_session_charges_the_ghazi_plan_its_tight_epsilon():
    tree, v = _tree_values(4)
    s = hierdp.Session(epsilon=2.0, delta=2e-6)
    r = hierdp.release(tree, v, plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-6, seed=2, session=s)
    assert s.spent["epsilon"] == r.ledger.epsilon < 1.0 and s.spent["delta"] == 1e-6


def test_against_dp_accounting_when_installed():
    """dp-accounting's PLD of the same canonical pairs (Meiser & Mohammadi 2018), with its
    pessimistic discretisation (an upper bound, each step's loss rounded up by < 10⁻⁵: at
    most 1.4·10⁻³ over the 139 steps of the schedule): hierdp's ε is not above it and within
    that rounding below it."""
    pytest.importorskip("dp_accounting", reason="dp-accounting is not installed (pip install 'hierdp[accounting]')")
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    sch = gz.ghazi_schedule(1.0, 1e-6, 0.5, 0.05, 6)
    parts = gz.schedule_steps(sch)
    out = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for e, d, n in parts:
            one = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(e, d),
                                              value_discretization_interval=1e-5)
            one = one.self_compose(n) if n > 1 else one
            out = one if out is None else out.compose(one)
        pess = float(out.get_epsilon_for_delta(1e-6))
    ours = gz.composed_epsilon(sch)
    assert pess - 1.5e-3 <= ours <= pess, (ours, pess)


def test_the_auditor_stays_below_the_certified_epsilon_of_the_ghazi_plan():
    """Scope item 5: the empirical auditor (Clopper-Pearson lower bound on ε from 2 000 runs
    of the whole plan on each of two neighbouring inputs, the root and one leaf moved by one)
    finds ε̂ ≈ 0.6 at (8, 10⁻⁶) — the bound M alone spends 0.8 — below the certified 7.95.
    Certifying 1/20 of it would be refuted (checked when this test was written)."""
    from hierdp.accounting.audit import audit
    from hierdp.mechanisms.base import Sensitivity

    tree, plan, sens = hierdp.Tree.complete(2, 2), gz.Ghazi(alpha=0.5), Sensitivity(l1=1.0, l2=1.0)
    sch = plan.schedule(tree, total=8.0, delta=1e-6, sensitivity=sens)
    certified = hierdp.release(tree, np.array([5, 2, 3]), plan=plan, epsilon=8.0, delta=1e-6, seed=0).ledger.epsilon
    assert certified == gz.composed_epsilon(sch) < 8.0
    root = int(1.3 * sch.m0)  # above M_0: the plan runs classification steps

    def sample(x, m, rng):
        xi = tree.to_internal(x)
        return np.array([plan.measure(tree, xi, total=8.0, delta=1e-6, sensitivity=sens, rng=rng)
                         .info["ghazi"]["upper_bound_M"] for _ in range(m)])

    x0 = np.array([root, root // 2, root - root // 2])
    res = audit(sample, x0, x0 + np.array([1, 1, 0]), n=2000, delta=1e-6, claimed=certified, seed=3)
    assert not res.violates and res.epsilon_lb > 0.3, str(res)  # the audit has power, and finds no violation
