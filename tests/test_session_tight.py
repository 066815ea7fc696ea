"""A ``Session(epsilon=, delta=)`` composes its releases under the tight accountant (issue 34 item 4).

References, none of them the session's code: :func:`hierdp.accounting.ledger.compose` of the same
ledgers (the accountant a session must agree with), the 50-digit closed form of k discrete
Laplace levels beside Gaussian noise of total μ (each level's loss is ±a, binomial; the
Gaussian part's δ_G(t; μ) of Balle & Wang 2018 holds at every real t), and, for pure-ε
sessions, the numbers basic composition gave before.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import hierdp
from hierdp.accounting.accountants import GRID_DELTA_MARGIN, gaussian_epsilon
from hierdp.accounting.ledger import compose
from hierdp.errors import BudgetError

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _tree() -> tuple[hierdp.Tree, np.ndarray]:
    tree = hierdp.Tree.complete(fanout=2, height=6)
    return tree, tree.aggregate(np.arange(tree.n_leaves) % 7 + 3)


def _exact_delta(eps: float, k: int, a: float, mu: float) -> float:
    """δ(ε) = Σ_j C(k,j) p^j (1-p)^{k-j} δ_G(ε - (2j - k)a; μ), p = 1/(1 + e^{-a}), in 50 digits."""
    with mpmath.workdps(50):
        p, m, out = 1 / (1 + mpmath.exp(-mpmath.mpf(a))), mpmath.mpf(mu), mpmath.mpf(0)
        for j in range(k + 1):
            t = mpmath.mpf(eps) - (2 * j - k) * mpmath.mpf(a)
            dg = mpmath.ncdf(-t / m + m / 2) - mpmath.exp(t) * mpmath.ncdf(-t / m - m / 2)
            out += math.comb(k, j) * p ** j * (1 - p) ** (k - j) * dg
        return float(out)


def test_pure_epsilon_sessions_are_unchanged():
    tree, v = _tree()
    s = hierdp.Session(epsilon=1.0)
    hierdp.release(tree, v, epsilon=0.4, mechanism="discrete_laplace", seed=1, session=s)
    hierdp.release(tree, v, epsilon=0.6, mechanism="laplace", seed=2, session=s)
    assert s.spent == {"epsilon": 1.0} and s.remaining == {"epsilon": 0.0}
    with pytest.raises(BudgetError, match="this release needs epsilon=0.1 but the session has 0 left of epsilon=1"):
        hierdp.release(tree, v, epsilon=0.1, mechanism="discrete_laplace", seed=3, session=s)
    assert "laplace" not in s.releases[0]  # a pure session keeps no curve


def test_without_gaussian_noise_an_approx_session_adds_up():
    tree, v = _tree()
    s = hierdp.Session(epsilon=3.0, delta=1e-5)
    lap = hierdp.release(tree, v, epsilon=1.0, mechanism="discrete_laplace", seed=1, session=s).ledger
    gz = hierdp.release(tree, v, epsilon=1.0, delta=1e-6, plan={"name": "ghazi", "alpha": 0.5}, seed=2,
                        session=s).ledger
    assert s.spent == {"epsilon": 1.0 + gz.epsilon, "delta": 1e-6}
    assert s.spent["epsilon"] == compose([lap, gz], 1e-5)["epsilon"]
    assert "basic composition" in gz.notes[-1]


def test_spent_is_the_compose_accountant_of_its_releases():
    """Gaussian, discrete Laplace, continuous Laplace and Ghazi releases in one session: its
    ε at its δ is compose(..., 'tight') of their ledgers, below basic composition."""
    tree, v = _tree()
    s = hierdp.Session(epsilon=6.0, delta=4e-6)
    leds = [hierdp.release(tree, v, epsilon=1.0, delta=1e-6, mechanism="gaussian", seed=1, session=s).ledger,
            hierdp.release(tree, v, epsilon=1.0, mechanism="discrete_laplace", seed=2, session=s).ledger,
            hierdp.release(tree, v, epsilon=0.5, mechanism="discrete_laplace", seed=3, session=s).ledger,
            hierdp.release(tree, v, epsilon=0.5, mechanism="laplace", seed=4, session=s).ledger,
            hierdp.release(tree, v, epsilon=1.0, delta=1e-6, plan={"name": "ghazi", "alpha": 0.5}, seed=5,
                           session=s).ledger]
    want = compose(leds, 4e-6)
    assert want["accountant"].startswith("exact discrete Laplace + analytic Gaussian curve")
    assert s.spent["epsilon"] == pytest.approx(want["epsilon"], rel=1e-12)
    assert s.spent["delta"] == 1e-6 and s.spent["gaussian_mu"] == pytest.approx(math.sqrt(2 * leds[0].rho))
    assert s.spent["epsilon"] < 0.5 + leds[4].epsilon + 1.5 + gaussian_epsilon(math.sqrt(2 * leds[0].rho), 3e-6) - 0.1


def test_a_session_admits_what_fits_on_the_joint_curve_and_refuses_what_does_not():
    """(1.85, 10⁻⁶): a discrete Laplace release at ε = 1 (6 levels) then a Gaussian one at
    (1, 10⁻⁶) compose to 1.789 on their joint curve (basic composition and the analytic
    Gaussian + basic: 2.0, refused before issue 34's session change); a further ε = 0.1 is
    refused; the session's ε meets 10⁻⁶ on the 50-digit closed form."""
    tree, v = _tree()
    s = hierdp.Session(epsilon=1.85, delta=1e-6)
    lap = hierdp.release(tree, v, epsilon=1.0, mechanism="discrete_laplace", seed=1, session=s).ledger
    gau = hierdp.release(tree, v, epsilon=1.0, delta=1e-6, mechanism="gaussian", seed=2, session=s).ledger
    k, mu = len(lap.levels), math.sqrt(2 * gau.rho)
    spent = s.spent["epsilon"]
    assert spent == pytest.approx(1.789, abs=1e-3) and 1.0 + gaussian_epsilon(mu, 1e-6 * (1 - GRID_DELTA_MARGIN)) > 1.85
    assert _exact_delta(spent, k, 1.0 / k, mu) <= 1e-6 * (1 - GRID_DELTA_MARGIN)
    assert _exact_delta(spent * (1 - 1e-4), k, 1.0 / k, mu) > 1e-6  # and it is the curve's ε, not more
    assert "on their exact joint curve" in gau.notes[-1]
    with pytest.raises(BudgetError, match="would take the session to epsilon=1.8"):
        hierdp.release(tree, v, epsilon=0.1, mechanism="discrete_laplace", seed=3, session=s)
    assert len(s.releases) == 2 and s.spent["epsilon"] == spent


def test_a_laplace_release_is_checked_at_its_own_epsilon_before_it_is_made():
    """Reserved before any noise, a pure release's levels are not known yet: it is checked at
    its ε added basically (never less than its share of the joint curve), and joins the curve
    once released. Here the Gaussian release comes first, so the discrete Laplace one (which
    would fit on the joint curve) is refused: conservative, never an overspend."""
    tree, v = _tree()
    s = hierdp.Session(epsilon=1.85, delta=1e-6)
    hierdp.release(tree, v, epsilon=1.0, delta=1e-6, mechanism="gaussian", seed=2, session=s)
    with pytest.raises(BudgetError, match="would take the session to epsilon=2"):
        hierdp.release(tree, v, epsilon=1.0, mechanism="discrete_laplace", seed=1, session=s)
