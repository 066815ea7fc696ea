"""The exact curve of discrete Laplace levels composed with Gaussian noise (issue 34, item 2).

References, none of them the code under test: a Monte Carlo of the privacy loss sampled from
the mechanisms' outputs; the analytic Gaussian (Balle & Wang 2018, Thm 8) when there is no
Laplace part; the hockey-stick divergence Σ_y (P(y) - e^ε Q(y))₊ summed over the product of
the discrete Laplace pmfs when there is no Gaussian part; and 50-digit arithmetic of the
binomial closed form for unit moves.
"""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest

import hierdp
from hierdp.accounting.accountants import (
    BASIC,
    MIXED,
    discrete_laplace_loss,
    gaussian_delta,
    gaussian_epsilon,
    mixed_delta,
    mixed_epsilon,
)
from hierdp.accounting.ledger import compose
from hierdp.errors import BudgetError

LAP = [(0.3, 1, 3), (0.5, 2, 1)]  # (a, shift, count): P(z) ∝ e^{-a|z|}, moved by the shift


def _dlap(a: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace noise as the difference of two geometric variables (Inusah &
    Kozubowski 2006), P(z) ∝ e^{-a|z|}."""
    p = 1.0 - math.exp(-a)
    return rng.geometric(p, size) - rng.geometric(p, size)


def test_mixed_delta_matches_a_monte_carlo_of_the_loss():
    rng = np.random.default_rng(20261126)
    n, mu = 1_000_000, 0.7
    loss = np.zeros(n)
    for a, shift, count in LAP:  # the loss read off sampled outputs: log P(y)/Q(y)
        for _ in range(count):
            y = _dlap(a, n, rng)
            loss += a * (np.abs(y - shift) - np.abs(y))
    sigma = 2.0 / mu  # a Gaussian query of sensitivity 2 with μ = Δ/σ
    y = rng.normal(0.0, sigma, n)
    loss += ((y - 2.0) ** 2 - y * y) / (2 * sigma * sigma)
    for eps in (0.5, 1.0, 2.0):
        f = -np.expm1(np.minimum(eps - loss, 0.0))
        mc, se = float(f.mean()), float(f.std()) / math.sqrt(n)
        assert abs(mixed_delta(eps, LAP, mu) - mc) < 4.5 * se, (eps, mc, se)


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 2.5])
@pytest.mark.parametrize("eps", [0.0, 0.2, 1.0, 4.0])
def test_without_laplace_it_is_the_analytic_gaussian(eps, mu):
    assert mixed_delta(eps, [], mu) == pytest.approx(gaussian_delta(eps, mu), rel=1e-10, abs=1e-300)


def _hockey_stick(eps: float, parts: list[tuple[float, int]]) -> float:
    """Σ_y (P(y) - e^ε Q(y))₊ over the product of the discrete Laplace outputs (|y| <= 400)."""
    z = np.arange(-400, 401, dtype=np.float64)
    p = np.ones(1)
    q = np.ones(1)
    for a, shift in parts:
        pm = np.exp(-a * np.abs(z)) * math.tanh(a / 2)
        qm = np.exp(-a * np.abs(z - shift)) * math.tanh(a / 2)
        p, q = np.outer(p, pm).ravel(), np.outer(q, qm).ravel()
    return math.fsum(np.maximum(p - math.exp(eps) * q, 0.0))


@pytest.mark.parametrize("eps", [0.0, 0.3, 0.7, 1.0])
def test_without_gaussian_it_is_the_exact_discrete_laplace_curve(eps):
    parts = [(0.3, 1), (0.5, 2)]
    assert mixed_delta(eps, [(a, s, 1) for a, s in parts]) == pytest.approx(_hockey_stick(eps, parts), rel=1e-9,
                                                                             abs=1e-15)


def _binomial_delta(eps: float, k: int, a: float, mu: float) -> float:
    """k unit moves against P ∝ e^{-a|z|} (loss ±a) and Gaussian μ, in 50 digits."""
    p = 1 / (1 + mpmath.exp(-a))
    out = mpmath.mpf(0)
    with mpmath.workdps(50):
        for j in range(k + 1):
            t, m = mpmath.mpf(eps) - (2 * j - k) * mpmath.mpf(a), mpmath.mpf(mu)
            dg = mpmath.ncdf(-t / m + m / 2) - mpmath.exp(t) * mpmath.ncdf(-t / m - m / 2)
            out += math.comb(k, j) * p ** j * (1 - p) ** (k - j) * dg
    return float(out)


@pytest.mark.parametrize("k,a,mu", [(6, 1 / 6, 0.2367), (12, 0.05, 1.0), (3, 1.0, 0.1)])
def test_mixed_epsilon_inverts_the_50_digit_curve(k, a, mu):
    e = mixed_epsilon([(a, 1, k)], mu, 1e-6)
    assert _binomial_delta(e, k, a, mu) <= 1e-6 < _binomial_delta(e * (1 - 1e-6), k, a, mu)
    assert e < k * a + gaussian_epsilon(mu, 1e-6)  # below basic composition


def test_the_grid_only_raises_delta():
    """Three groups of unequal a: exact outer sums (41³ values), or a grid of 500 points."""
    lap = [(0.0123, 1, 40), (0.0271, 1, 40), (0.0311, 1, 40)]
    exact = mixed_delta(0.5, lap, 0.4)
    coarse = mixed_delta(0.5, lap, 0.4, max_atoms=500)
    assert exact < coarse <= exact * 1.1
    assert exact < mixed_delta(0.5, lap, 0.4, max_atoms=20_000) <= exact * 1.005
    assert mixed_delta(0.5, [(0.0123, 2, 30), (0.5, 3, 2)]) <= mixed_delta(0.5, [(0.0123, 2, 30), (0.5, 3, 2)],
                                                                             max_atoms=40)


def test_the_discrete_laplace_loss_sums_to_one():
    for a, s in [(0.1, 1), (2.0, 3), (1e-4, 5)]:
        v, p = discrete_laplace_loss(a, s)
        assert math.fsum(p) == pytest.approx(1.0, rel=1e-12) and v.max() == pytest.approx(a * s)


def test_bad_parameters_are_one_clear_error():
    with pytest.raises(BudgetError, match="a > 0 and an integer shift"):
        discrete_laplace_loss(0.0)
    with pytest.raises(BudgetError, match="0 < delta < 1"):
        mixed_epsilon([(0.1, 1, 1)], 0.5, 0.0)


# -- ledgers ---------------------------------------------------------------------------------
def _releases() -> dict[str, hierdp.Ledger]:
    tree = hierdp.Tree.complete(fanout=2, height=6)
    v = tree.aggregate(np.arange(tree.n_leaves) % 7 + 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "lap": hierdp.release(tree, v, epsilon=1.0, mechanism="discrete_laplace", seed=1).ledger,
            "lap_half": hierdp.release(tree, v, epsilon=0.5, mechanism="discrete_laplace", seed=2).ledger,
            "laplace": hierdp.release(tree, v, epsilon=1.0, mechanism="laplace", seed=1).ledger,
            "gau": hierdp.release(tree, v, epsilon=1.0, delta=1e-6, mechanism="gaussian", seed=1).ledger,
            "ghazi": hierdp.release(tree, v, epsilon=1.0, delta=1e-6, plan={"name": "ghazi", "alpha": 0.5},
                                    seed=1).ledger,
        }


@pytest.fixture(scope="module")
def led() -> dict[str, hierdp.Ledger]:
    return _releases()


def test_a_mixed_release_is_tighter_than_basic_at_1e_6(led):
    """Discrete Laplace ε = 1 (6 levels) + Gaussian (1, 10⁻⁶) (6 levels), at δ = 10⁻⁶:
    basic 2.0, the analytic Gaussian + basic 2.0, the joint exact curve 1.789."""
    out = compose([led["lap"], led["gau"]], 1e-6)
    basic = compose([led["lap"], led["gau"]], 1e-6, accountant="basic")["epsilon"]
    mu = math.sqrt(2 * led["gau"].rho)
    assert out["accountant"] == MIXED and basic == 2.0
    assert out["epsilon"] < 1.0 + gaussian_epsilon(mu, 1e-6) and out["epsilon"] < 0.9 * basic
    # the 50-digit closed form: the reported ε meets 10⁻⁶ and is within 1e-6 relative of the exact one
    assert _binomial_delta(out["epsilon"], 6, 1 / 6, mu) <= 1e-6 < _binomial_delta(out["epsilon"] * (1 - 1e-6), 6,
                                                                                    1 / 6, mu)
    assert out["epsilon"] == pytest.approx(1.789, abs=1e-3)


def test_other_releases_stay_basic_beside_the_mixed_part(led):
    """A Ghazi (ε, δ) release and a continuous Laplace release add their ε; the discrete
    Laplace and Gaussian ones are composed on their joint curve at what δ is left."""
    out = compose([led["lap"], led["lap_half"], led["gau"], led["ghazi"], led["laplace"]], 3e-6)
    mu = math.sqrt(2 * led["gau"].rho)
    joint = mixed_epsilon([(1 / 6, 1, 6), (0.5 / 6, 1, 6)], mu, (3e-6 - led["ghazi"].delta) * (1 - 1e-6))
    assert out["accountant"] == f"{MIXED} + {BASIC}"
    assert out["epsilon"] == pytest.approx(1.0 + led["ghazi"].epsilon + joint, rel=1e-12) and joint < 1.5 + gaussian_epsilon(mu, 2e-6)


def test_pure_epsilon_releases_report_the_same_epsilon(led):
    assert compose([led["lap"], led["lap_half"]], 1e-6) == {"epsilon": 1.5, "delta": None, "accountant": BASIC}
    assert compose([led["lap"], led["laplace"]], 1e-6)["epsilon"] == 2.0
    assert led["lap"].epsilon_at(1e-6) == 1.0 and led["lap"].certified_by == BASIC
    # no Gaussian: basic, as before (the Ghazi plan at the ε its ledger certifies, below 1: issue 34)
    assert compose([led["lap"], led["ghazi"]], 2e-6)["epsilon"] == 1.0 + led["ghazi"].epsilon
    assert compose([led["lap"], led["gau"]], 1e-6, accountant="basic")["accountant"] == BASIC
