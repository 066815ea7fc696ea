"""The discrete Gaussian's own exact privacy curve (issue 34): summation, calibration, checks.

References computed here, not by the code under test:

* the hockey-stick divergence sum_y (P(y) - e^ε Q(y))₊ over every output of one level
  (Canonne, Kamath & Steinke 2020, Thm 7, as a definition: no privacy-loss form);
* compositions by the product of the per-coordinate pmfs, summed over every combination
  of the coordinates' noise sums (exact, small cases only);
* the Canonne-Kamath-Steinke 2020 zCDP bound (Cor. 13), which must never be below the exact ε;
* hierdp's empirical auditor on neighbouring inputs.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.special import logsumexp

import hierdp
from hierdp.accounting import PrivacyLoss, split_total, unit_moves
from hierdp.accounting.accountants import (
    DISCRETE,
    ZCDP,
    cks_epsilon,
    cks_rho,
    discrete_gaussian_delta,
    discrete_gaussian_rho,
)

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _pmf(sigma2: float) -> tuple[np.ndarray, np.ndarray]:
    r = int(40 * math.sqrt(sigma2)) + 20
    z = np.arange(-r, r + 1)
    lw = -(z.astype(np.float64) ** 2) / (2 * sigma2)
    return z, np.exp(lw - logsumexp(lw))


def _hockey_stick_one(eps: float, sigma2: float, shift: int = 1) -> float:
    """δ(ε) of N_Z(0, σ²) against N_Z(shift, σ²): Σ_y (P(y) - e^ε Q(y))₊ over the integers."""
    z, p = _pmf(sigma2)
    q = np.interp(z - shift, z, p, left=0.0, right=0.0)  # Q(y) = P(y - shift)
    return float(np.sum(np.clip(p - math.exp(eps) * q, 0.0, None)))


def _product_delta(eps: float, groups: list[tuple[float, int]]) -> float:
    """δ(ε) of the composition over groups (σ², n counts each moved by one): the losses of a
    group are (n - 2S)/(2σ²), S the sum of its noises; every combination of the groups'
    sums enumerated (outer product), no grid."""
    ls, ps = [np.zeros(1)], [np.ones(1)]
    for s2, n in groups:
        _, p = _pmf(s2)
        q = p
        for _ in range(n - 1):
            q = np.convolve(q, p)
        s = np.arange(q.size) - (q.size - 1) // 2
        keep = q > 1e-300
        ls.append((n - 2.0 * s[keep]) / (2 * s2))
        ps.append(q[keep])
    L, P = ls[0], ps[0]
    for l_, p_ in zip(ls[1:], ps[1:]):
        L, P = (L[:, None] + l_[None, :]).ravel(), (P[:, None] * p_[None, :]).ravel()
    return float(np.sum(P * np.clip(-np.expm1(np.minimum(eps - L, 700.0)), 0.0, None)))


# -- the curve ------------------------------------------------------------------------------
@pytest.mark.parametrize("eps,sigma2", [(1.0, 0.4), (0.3, 2.5), (3.0, 1.0), (17.14, 1.1), (1.0, 107.0)])
def test_one_level_is_the_hockey_stick_sum_over_the_pmf(eps, sigma2):
    ref = _hockey_stick_one(eps, sigma2)
    got = discrete_gaussian_delta(eps, [sigma2])
    assert got == pytest.approx(ref, rel=1e-9) and got >= ref * (1 - 1e-12)


@pytest.mark.parametrize("eps,groups", [(1.0, [(107.0, 6)]), (17.14, [(1.1, 6)]), (2.0, [(0.8, 2), (3.0, 4)]),
                                        (1.0, [(50.0, 3), (150.0, 3)])])
def test_one_or_two_groups_are_exact(eps, groups):
    sig = [s2 for s2, n in groups for _ in range(n)]
    assert discrete_gaussian_delta(eps, sig) == pytest.approx(_product_delta(eps, groups), rel=1e-9)


@pytest.mark.parametrize("eps,groups", [(1.0, [(20.0, 1), (40.0, 2), (60.0, 1)]),
                                        (3.0, [(0.7, 1), (1.3, 2), (2.0, 1), (3.0, 1)])])
def test_more_groups_are_a_tight_upper_bound(eps, groups):
    """Three or more σ²: the smaller groups are merged on a grid with losses rounded up, so
    the result is above the exact δ (never below), and within 1% of it."""
    sig = [s2 for s2, n in groups for _ in range(n)]
    ref = _product_delta(eps, groups)
    assert ref <= discrete_gaussian_delta(eps, sig) <= ref * 1.01


def test_unit_moves_compose_and_dominate():
    """Two unit moves per level (substitution) are the composition of two one-count moves;
    more moves never give a smaller δ."""
    one = discrete_gaussian_delta(1.0, [5.0, 5.0])
    two = discrete_gaussian_delta(1.0, [5.0], units=2)
    assert one == pytest.approx(two, rel=1e-12)
    assert discrete_gaussian_delta(1.0, [5.0], units=3) > two > discrete_gaussian_delta(1.0, [5.0])
    assert (unit_moves(1.0, 1.0), unit_moves(2.0, math.sqrt(2)), unit_moves(3.0, 3.0), unit_moves(1.0, 1.9)) == \
        (1, 2, 0, 1)


def test_a_support_too_large_is_none_not_a_guess():
    assert discrete_gaussian_delta(1.0, [1e6] * 3, max_atoms=10_000) is None


# -- calibration ----------------------------------------------------------------------------
@pytest.mark.parametrize("eps,delta", [(1.0, 1e-6), (17.14, 1e-10), (0.5, 1e-9)])
def test_calibrated_total_is_the_largest_that_meets_delta(eps, delta):
    start = cks_rho(eps, delta)
    rho = discrete_gaussian_rho(eps, delta, [1 / 6] * 6, start=start)
    assert rho is not None and rho > start
    assert _product_delta(eps, [(6 / (2 * rho), 6)]) <= delta
    assert _product_delta(eps, [(6 / (2 * rho * (1 + 1e-4)), 6)]) > delta  # within 1e-4 of the largest
    assert cks_epsilon(rho, delta) > eps  # the CKS bound is looser on the same noise


def test_split_total_keeps_cks_where_the_exact_curve_does_not_apply():
    loss = PrivacyLoss(epsilon=1.0, delta=1e-6)
    r0 = cks_rho(1.0, 1e-6)
    g = {"guarantee": "approx", "epsilon": 1.0, "delta": 1e-6, "rho": r0, "accountant": ZCDP}
    assert split_total(loss, r0, g, shares=[0.5, 0.5], l1=3.0, l2=3.0) == (r0, g)  # a count moves by 3
    assert split_total(PrivacyLoss(epsilon=1.0, delta=1e-6, accountant="zcdp"), r0, g, shares=[1.0],
                       l1=1.0, l2=1.0) == (r0, g)
    assert split_total(loss, r0, g, shares=[0.5, 0.5], l1=1.0, l2=1.0, check=lambda t: False) == (r0, g)
    tot, g2 = split_total(loss, r0, g, shares=[0.5, 0.5], l1=1.0, l2=1.0)
    assert tot > r0 and g2["accountant"] == DISCRETE and g2["rho"] == tot


def _tree(height: int) -> tuple[hierdp.Tree, np.ndarray]:
    tree = hierdp.Tree.complete(fanout=2, height=height)
    return tree, tree.aggregate(np.arange(tree.n_leaves) % 5 + 1)


def test_an_unequal_split_is_calibrated_on_its_own_curve():
    """The variance-optimal split gives each level its own σ²: the release's σ² (as the
    sampler rounds them) meet δ by the exact product sum, and the total beats CKS."""
    tree, v = _tree(2)
    eps, delta = 1.0, 1e-6
    led = hierdp.release(tree, v, epsilon=eps, delta=delta, mechanism="discrete_gaussian", budget="optimal",
                         seed=1).ledger
    assert led.certified_by == DISCRETE and led.rho > cks_rho(eps, delta)
    s2 = [1 / (2 * lv.budget) for lv in led.levels]
    assert len({round(x, 9) for x in s2}) == 2
    assert _product_delta(eps, [(x, 1) for x in s2]) <= delta


def test_substitution_moves_two_counts_per_level():
    tree, v = _tree(4)
    eps, delta = 1.0, 1e-6
    led = hierdp.release(tree, v, epsilon=eps, delta=delta, mechanism="discrete_gaussian", neighbours="substitute",
                         seed=1).ledger
    assert led.certified_by == DISCRETE
    sigma2 = {lv.sensitivity_l2 ** 2 / (2 * lv.budget) for lv in led.levels}
    assert len(sigma2) == 1
    assert _product_delta(eps, [(sigma2.pop(), 8)]) <= delta  # 4 levels, two counts each


def test_fallbacks_stay_on_the_cks_bound():
    tree, v = _tree(4)
    kw = dict(epsilon=1.0, delta=1e-6, mechanism="discrete_gaussian", seed=1)
    big = hierdp.release(tree, v, max_contributions=3, **kw).ledger  # a count may move by 3
    assert big.certified_by == ZCDP and big.rho == pytest.approx(cks_rho(1.0, 1e-6), rel=1e-12)
    old = hierdp.release(tree, v, epsilon=PrivacyLoss(epsilon=1.0, delta=1e-6, accountant="zcdp"),
                         mechanism="discrete_gaussian", seed=1).ledger
    assert old.certified_by == ZCDP and old.rho < big.rho
    rho = hierdp.release(tree, v, rho=0.02, mechanism="discrete_gaussian", seed=1).ledger
    assert rho.rho == 0.02 and rho.certified_by == ZCDP


def test_ledger_curve_and_text():
    tree, v = _tree(6)
    led = hierdp.release(tree, v, epsilon=1.0, delta=1e-6, mechanism="discrete_gaussian", seed=1).ledger
    assert "exact discrete Gaussian curve" in str(led).splitlines()[0]
    assert led.epsilon_at(1e-6) == 1.0  # its own point; at a larger δ the smaller of it and the zCDP bound
    assert led.epsilon_at(1e-3) == pytest.approx(cks_epsilon(led.rho, 1e-3), rel=1e-12)
    assert led.epsilon_at(1e-3) < 1.0
    # at a smaller δ the ρ-zCDP bound of the same noise (CKS 2020 Thm 14 and Cor. 13)
    assert led.epsilon_at(1e-9) == pytest.approx(cks_epsilon(led.rho, 1e-9), rel=1e-12)
    assert hierdp.accounting.ledger.Ledger.from_json(led.to_json()).certified_by == DISCRETE


def test_auditor_does_not_refute_the_calibrated_discrete_gaussian():
    """One level calibrated to (1, 1e-6) on its exact curve; the auditor on one count moved
    by one finds a lower bound below ε = 1 (and above 0.3: it sees the noise)."""
    from hierdp.accounting.audit import audit

    rho = discrete_gaussian_rho(1.0, 1e-6, [1.0], start=cks_rho(1.0, 1e-6))
    assert rho is not None and _hockey_stick_one(1.0, 1 / (2 * rho)) <= 1e-6
    mech = hierdp.registry.create("mechanism", "discrete_gaussian")
    sens = hierdp.Sensitivity()

    def sample(x, m, rng):
        return mech.sample(np.broadcast_to(x, (m,)).copy(), rho, sens, rng)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = audit(sample, np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64), n=200_000, delta=1e-6,
                    claimed=1.0, seed=7)
    assert not res.violates and 0.3 < res.epsilon_lb < 1.0
