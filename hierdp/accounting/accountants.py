"""Tight privacy curves: the analytic Gaussian, the zCDP conversions inverted, and PLD.

The accountants a release can be certified by (their names are what the ledger states):

* :data:`BASIC` — basic composition: pure ε adds up (Dwork & Roth 2014, Thm 3.16), and so
  does the δ of (ε, δ) measurements. What every pure-ε release reports.
* :data:`ZCDP` — ρ-zCDP (Bun & Steinke 2016): per-level ρ add up; an (ε, δ) target is
  turned into ρ by a conversion (Bun & Steinke 2016 Prop. 1.3, or Canonne, Kamath &
  Steinke 2020 Cor. 13, inverted here by :func:`cks_rho`).
* :data:`ANALYTIC` — the exact privacy curve of Gaussian noise (Balle & Wang 2018, Thm 8).
  Adding N(0, σᵢ²) to queries of L2 sensitivity Δᵢ, i = 1…k, is, all together, one
  Gaussian mechanism with μ = sqrt(Σ (Δᵢ/σᵢ)²) (μ-GDP, Dong, Roth & Su 2022, Cor. 3.3),
  whose exact (ε, δ) curve is

      δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2).

  In hierdp's ρ currency (σᵢ² = Δᵢ²/(2ρᵢ)) μ² = 2 Σ ρᵢ: per-level ρ still add up, and
  only the conversion from the total to (ε, δ) changes. :func:`gaussian_mu` finds the
  largest μ meeting (ε, δ) (root-finding in log space, stable for ε = 17.14, δ = 1e-10).
* :data:`DISCRETE` — the exact privacy curve of discrete Gaussian noise on integer counts
  (Canonne, Kamath & Steinke 2020, Thm 7 summed numerically): with integer shifts the
  privacy loss of N_Z(0, σ²) is an affine function of the noise, so a composition's curve
  is a finite sum over the convolved pmfs (:func:`discrete_gaussian_delta`), evaluated on
  a truncated support whose left-out mass is added to δ (an upper bound, never below the
  true δ). :func:`discrete_gaussian_rho` calibrates a per-level split on it.
* :data:`MIXED` — the exact privacy curve of discrete Laplace levels composed with Gaussian
  noise, without any extra package: a discrete Laplace level's privacy loss takes finitely
  many values (:func:`discrete_laplace_loss`), the Gaussian part's is N(μ²/2, μ²), and
  δ(ε) = E[(1 - e^{ε - L})₊] is a finite sum of analytic-Gaussian terms at shifted ε
  (:func:`mixed_delta`, :func:`mixed_epsilon`).
* :data:`APPROX` — the optimal composition of (ε, δ)-DP steps (Kairouz, Oh & Viswanath
  2015, Thm 3.3 for equal steps; Murtagh & Vadhan 2016 for unequal ones): each step
  enters by the canonical pair that dominates *every* (ε, δ)-DP mechanism (its privacy
  loss is +∞ with probability δ, else ±ε), so what is certified holds for any mechanisms
  with those guarantees, adaptively chosen. δ(ε) = 1 - Π(1 - δⱼ) + Π(1 - δⱼ)·δ_pure(ε),
  δ_pure the curve of the ±εⱼ losses, summed on a grid with every loss rounded up
  (:func:`approx_delta`, :func:`approx_epsilon`). Used for the Ghazi plan.
* :data:`PLD` — privacy-loss distributions through Google's ``dp-accounting`` (optional:
  ``pip install "hierdp[accounting]"``), for compositions of different mechanisms
  (discrete Laplace, Gaussian and discrete Gaussian measurements):
  :func:`pld_epsilon`, :func:`pld_delta`.

Only public parameters (ε, δ, ρ, σ, sensitivities) ever reach these functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.special import erfc, erfcx, log_ndtr

from hierdp.errors import BudgetError

__all__ = ["BASIC", "ZCDP", "ANALYTIC", "DISCRETE", "MIXED", "PLD", "discrete_laplace_loss", "mixed_delta",
           "mixed_epsilon", "discrete_gaussian_delta", "discrete_gaussian_rho",
           "APPROX", "approx_delta", "approx_epsilon", "ACCOUNTANTS", "GRID_DELTA_MARGIN", "gaussian_log_delta",
           "gaussian_delta", "gaussian_epsilon", "gaussian_mu", "cks_epsilon", "cks_rho", "bs16_rho",
           "Measured", "pld_epsilon", "pld_delta", "accounting_text", "PLD_INSTALL"]

BASIC = "basic composition"
ZCDP = "zCDP"
ANALYTIC = "analytic Gaussian (Balle & Wang 2018)"
PLD = "PLD (dp-accounting)"
DISCRETE = "exact discrete Gaussian curve (Canonne, Kamath & Steinke 2020)"
MIXED = "exact discrete Laplace + analytic Gaussian curve"
APPROX = "optimal composition of (ε, δ) steps (Kairouz, Oh & Viswanath 2015)"

#: what a user may ask a release for: ``"tight"`` (default for (ε, δ) requests: the exact
#: curve of the noise where it is known, else the tightest proven zCDP conversion) or
#: ``"zcdp"`` (the Bun & Steinke 2016 calibration hierdp used before issue 34)
ACCOUNTANTS = ("tight", "zcdp")

#: the ``gaussian`` mechanism draws a discrete Gaussian on a public grid 2¹⁶ times finer
#: than σ (:mod:`hierdp.mechanisms.continuous`); its exact curve departs from the
#: continuous one by a lattice term measured at ~1e-10 relative (tests/test_accounting_tight.py
#: sums it exactly for one level). It is calibrated to δ·(1 - GRID_DELTA_MARGIN), which costs
#: about 1e-7 relative in variance.
GRID_DELTA_MARGIN = 1e-6

PLD_INSTALL = 'PLD accounting needs Google\'s dp-accounting: pip install "hierdp[accounting]"'

_SQRT1_2 = math.sqrt(0.5)
#: calibrations meet log δ - 1e-12: δ itself then holds after the rounding of exp and log
_LOG_SLACK = 1e-12


def gaussian_log_delta(epsilon: float, mu: float) -> float:
    """log δ(ε) of the Gaussian mechanism with μ = Δ/σ (Balle & Wang 2018, Thm 8).

    δ(ε) = Φ(a) - e^ε Φ(b), a = -ε/μ + μ/2, b = -ε/μ - μ/2. Since ε - b²/2 = -a²/2 the
    two terms share the factor e^{-a²/2}: for a < 0,
    δ = ½ e^{-a²/2} (erfcx(-a/√2) - erfcx(-b/√2)), with no overflow or underflow for any
    ε and μ (scaled complementary error function); for a >= 0 the log-CDF form is exact.
    """
    eps, mu = float(epsilon), float(mu)
    if not (mu > 0 and math.isfinite(mu)) or not (eps >= 0 and math.isfinite(eps)):
        raise BudgetError(f"the Gaussian curve needs mu > 0 and epsilon >= 0, got mu={mu!r:.30}, "
                          f"epsilon={eps!r:.30}")
    a, b = -eps / mu + mu / 2, -eps / mu - mu / 2
    if a < 0:
        diff = float(erfcx(-a * _SQRT1_2)) - float(erfcx(-b * _SQRT1_2))
        if diff <= 0:  # μ so small that the two terms agree to machine precision
            return -math.inf
        return -a * a / 2 + math.log(0.5 * diff)
    la, lb = float(log_ndtr(a)), eps + float(log_ndtr(b))
    return la + math.log(-math.expm1(lb - la)) if lb < la else -math.inf


def gaussian_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of the Gaussian mechanism with μ = Δ/σ (:func:`gaussian_log_delta`)."""
    return math.exp(gaussian_log_delta(epsilon, mu))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε >= 0 with δ(ε) <= ``delta`` for μ-GDP (Balle & Wang 2018, Thm 8,
    inverted by bisection: δ(ε) decreases in ε). The returned ε meets ``delta`` (with
    1e-12 relative to spare for the rounding of logarithms)."""
    log_d = math.log(delta) - _LOG_SLACK
    if gaussian_log_delta(0.0, mu) <= log_d:
        return 0.0
    lo, hi = 0.0, max(1.0, mu * mu)
    while gaussian_log_delta(hi, mu) > log_d:
        lo, hi = hi, 2 * hi
    for _ in range(200):  # δ(ε) is continuous and decreasing: the bracket halves each step
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if gaussian_log_delta(mid, mu) > log_d:
            lo = mid
        else:
            hi = mid
    return hi


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The largest μ (= sqrt(Σ (Δᵢ/σᵢ)²) of a composition of Gaussian measurements) whose
    exact curve meets (ε, δ): δ(ε; μ) <= ``delta`` (Balle & Wang 2018, Thm 8 and Alg. 1).

    δ(ε; μ) increases in μ; bisection on log μ to the last representable step, keeping
    the side that meets δ (with 1e-12 relative to spare for the rounding of logarithms),
    so the result is never above the exact optimum.
    """
    log_d = math.log(delta) - _LOG_SLACK
    lo, hi = -30.0, 10.0  # log μ: δ(ε; e^-30) underflows, δ(ε; e^10) is 1 for every sane ε
    while gaussian_log_delta(epsilon, math.exp(hi)) <= log_d:
        lo, hi = hi, hi + 10.0
    if gaussian_log_delta(epsilon, math.exp(lo)) > log_d:
        raise BudgetError(f"no Gaussian noise meets (epsilon={epsilon:g}, delta={delta:g})")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if gaussian_log_delta(epsilon, math.exp(mid)) <= log_d:
            lo = mid
        else:
            hi = mid
    return math.exp(lo)


# -- zCDP conversions ---------------------------------------------------------------------
def _cks_eps_at(rho: float, log_inv_delta: float, alpha: float) -> float:
    return alpha * rho + (log_inv_delta + (alpha - 1) * math.log1p(-1 / alpha) - math.log(alpha)) / (alpha - 1)


def cks_epsilon(rho: float, delta: float) -> float:
    """ε of ρ-zCDP at δ by Canonne, Kamath & Steinke 2020, Cor. 13:
    min over α > 1 of αρ + (ln(1/δ) + (α-1) ln(1-1/α) - ln α)/(α-1) (golden-section
    search on log(α - 1); the objective is convex in α), never above Bun & Steinke's."""
    L = math.log(1 / delta)

    def f(la: float) -> float:
        return _cks_eps_at(rho, L, 1.0 + math.exp(la))

    lo, hi = -30.0, 40.0
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(200):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
    return min(fa, fb, rho + 2.0 * math.sqrt(rho * L))


def bs16_rho(epsilon: float, delta: float) -> float:
    """Largest ρ whose Bun & Steinke 2016 (Prop. 1.3) conversion gives (ε, δ):
    ρ = (sqrt(ln(1/δ) + ε) - sqrt(ln(1/δ)))²."""
    L = math.log(1 / delta)
    return (math.sqrt(L + epsilon) - math.sqrt(L)) ** 2


def cks_rho(epsilon: float, delta: float) -> float:
    """Largest ρ whose Canonne-Kamath-Steinke 2020 (Cor. 13) conversion meets (ε, δ):
    :func:`cks_epsilon` increases in ρ; bisection from the Bun & Steinke ρ (which meets it,
    the CKS ε never being larger), keeping the side that meets ε."""
    lo = bs16_rho(epsilon, delta)
    hi = 2 * lo
    while cks_epsilon(hi, delta) <= epsilon:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if cks_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


# -- the discrete Gaussian's own curve ------------------------------------------------------
#: largest support (atoms) a group's convolved noise sum may have; beyond it
#: :func:`discrete_gaussian_delta` returns None (the caller falls back to the CKS 2020 bound)
DISCRETE_MAX_ATOMS = 200_000
#: grid points over which groups beyond the largest are merged (their losses rounded up to it)
DISCRETE_GRID_BINS = 20_000


def _convolve_power(p: np.ndarray, n: int) -> np.ndarray:
    """The pmf of the sum of ``n >= 1`` independent copies of ``p`` (on consecutive integers):
    its n-fold convolution by repeated squaring (direct sums of non-negative terms: no FFT)."""
    base, k, out = p, n, None
    while k:
        if k & 1:
            out = base if out is None else np.convolve(out, base)
        k >>= 1
        if k:
            base = np.convolve(base, base)
    assert out is not None
    return out


def _dgauss_group(sigma2: float, n: int, log_tail: float,
                  max_atoms: int = DISCRETE_MAX_ATOMS) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The pmf of the sum S of ``n`` independent N_Z(0, σ²) truncated to |Yⱼ| <= T each:
    (values of S, their probabilities under the truncated law, an upper bound on the mass
    left out, n·P(|Y| > T)). T is chosen so that the left-out mass is below e^``log_tail``.

    The truncated pmf is normalised over the kept support, which only raises each kept
    probability (conservative for δ). The tail bound uses Σ_{y>T} e^{-y²/2σ²} <=
    ∫_T^∞ e^{-x²/2σ²} dx and a normaliser >= 1."""
    sigma = math.sqrt(sigma2)
    t = int(math.ceil(sigma * math.sqrt(2.0 * max(-log_tail + math.log(2 * n * (sigma + 1)), 1.0)))) + 1
    if n * (2 * t) + 1 > max_atoms:
        return None
    y = np.arange(-t, t + 1, dtype=np.float64)
    w = np.exp(-(y * y) / (2.0 * sigma2))
    p = w / math.fsum(w)
    tail = n * 2.0 * sigma * math.sqrt(math.pi / 2) * float(erfc(t / (sigma * math.sqrt(2.0))))
    out = _convolve_power(p, n)
    s = np.arange(out.size, dtype=np.float64) - n * t
    return s, out, tail


def discrete_gaussian_delta(epsilon: float, sigma2: Sequence[float], units: int = 1, *, log_tail: float = -80.0,
                            max_atoms: int = DISCRETE_MAX_ATOMS) -> float | None:
    """An upper bound, tight to float rounding, on δ(ε) of adding independent N_Z(0, σᵢ²)
    noise to integer counts (one noise per count and level ``i``), for neighbours that move
    ``units`` counts of each level by one.

    Canonne, Kamath & Steinke 2020, Thm 7: δ(ε) = E_P[(1 - e^{ε - L})₊], L the privacy loss.
    Moving one count by one against N_Z(0, σ²) has loss L = (1 - 2Y)/(2σ²), Y the noise: an
    affine function, so the levels sharing a σ² (a group of n counts) have loss
    (n - 2S)/(2σ²) with S the sum of their noises, whose pmf is an n-fold convolution. With
    one group δ is one sum over S; with two or more, the groups but the largest are merged
    first on a grid of :data:`DISCRETE_GRID_BINS` points over their loss range, their losses
    rounded *up* (which only raises δ: the pessimistic discretisation of PLD accounting),
    then summed against the largest group exactly. The
    support is truncated where the left-out mass is below e^``log_tail`` and that mass is added.
    Returns None when a group's sum has more than ``max_atoms`` values (callers then use a
    zCDP bound). Moving a count by one is the worst integer move of L2 norm < 2 (a unit
    move is dominated by more unit moves; signs do not matter by symmetry)."""
    eps = float(epsilon)
    if not sigma2 or units < 1 or not math.isfinite(eps):
        raise BudgetError("the discrete Gaussian curve needs at least one σ² > 0, units >= 1 and a finite ε")
    groups: dict[float, int] = {}
    for v in sigma2:
        v = float(v)
        if not (v > 0 and math.isfinite(v)):
            raise BudgetError(f"the discrete Gaussian curve needs σ² > 0, got {v!r:.30}")
        groups[v] = groups.get(v, 0) + units
    parts = []
    tail = 0.0
    for v, n in sorted(groups.items()):
        g = _dgauss_group(v, n, log_tail, max_atoms)
        if g is None:
            return None
        s, p, tl = g
        tail += tl
        nz = p > 0
        parts.append(((n - 2.0 * s[nz]) / (2.0 * v), p[nz]))
    parts.sort(key=lambda lp: lp[0].size)
    last_l, last_p = parts.pop()  # the largest group stays exact
    if len(parts) == 1 and parts[0][0].size <= DISCRETE_GRID_BINS:
        acc_l, acc_p = parts[0]  # two groups: exact
    elif parts:
        # the other groups on a grid, each loss rounded up (δ only grows), convolved densely
        span = math.fsum(float(lg.max() - lg.min()) for lg, _ in parts)
        grid = max(1e-9 * max(1.0, abs(eps)), span / DISCRETE_GRID_BINS)
        acc, i0 = np.ones(1), 0
        for l_g, p_g in parts:
            idx = np.ceil(l_g / grid).astype(np.int64)
            lo_i, hi_i = int(idx.min()), int(idx.max())
            dense = np.bincount(idx - lo_i, weights=p_g, minlength=hi_i - lo_i + 1)
            acc, i0 = np.convolve(acc, dense), i0 + lo_i  # direct sums of non-negative terms (no FFT)
        kept = np.flatnonzero(acc > 0)
        acc_p = acc[kept]
        on_grid = (kept + i0) * grid
        acc_l = on_grid + 1e-12 * (1.0 + np.abs(on_grid))  # Σ ceil(l/grid)·grid >= Σ l, float rounding covered
    if parts:
        # δ = Σ_a p_a Σ_b p_b (1 - e^{ε - l_a - l_b})₊, in chunks of a
        total = 0.0
        step = max(1, 2_000_000 // last_l.size)
        for i in range(0, acc_l.size, step):
            x = np.minimum(eps - acc_l[i:i + step, None] - last_l[None, :], 0.0)
            total += float(np.sum(acc_p[i:i + step, None] * last_p[None, :] * -np.expm1(x)))
        return min(1.0, total + tail)
    x = np.minimum(eps - last_l, 0.0)
    return min(1.0, math.fsum(last_p * -np.expm1(x)) + tail)


def discrete_gaussian_rho(epsilon: float, delta: float, shares: Sequence[float], *, l2: float = 1.0,
                          units: int = 1, start: float, check: Any = None) -> float | None:
    """The largest total ρ (to 10⁻⁶ relative) for which discrete Gaussian levels with
    ρᵢ = shareᵢ·ρ, σᵢ² = l2²/(2ρᵢ), meet (ε, δ) on their exact curve
    (:func:`discrete_gaussian_delta`, ``units`` unit moves per level). ``start`` is a total
    known to meet it (the CKS 2020 one); bisection keeps the side that meets δ (the curve is
    not monotone in σ² to the last digit on the lattice). ``check(total)``, when given, is
    the final word: the δ of the noise actually drawn at that total (the sampler rounds σ²
    up); the result is never a total it refuses. None when the curve cannot be summed
    (a support too large) or nothing above ``start`` is found."""
    sh = [float(x) for x in shares if x > 0]
    if not sh:
        return None
    target = float(delta) * (1.0 - 1e-9)

    def meets(total: float) -> bool | None:
        d = discrete_gaussian_delta(epsilon, [l2 * l2 / (2.0 * f * total) for f in sh], units,
                                    log_tail=math.log(target) - 25.0)
        return None if d is None else d <= target

    ok = meets(start)
    if not ok:
        return None
    lo, hi = start, 2.0 * start
    while True:
        m = meets(hi)
        if m is None:
            return None
        if not m:
            break
        lo, hi = hi, 2.0 * hi
        if hi > 1e12 * start:
            return None
    while hi / lo > 1.0 + 1e-6:
        mid = math.sqrt(lo * hi)
        m = meets(mid)
        if m is None:
            return None
        lo, hi = (mid, hi) if m else (lo, mid)
    if check is None:
        return lo
    for i in range(8):  # the split may not scale exactly with the total: step back, further each time
        if lo <= start:
            break
        if check(lo):
            return lo
        lo = max(start, lo * (1.0 - 1e-6 * 4 ** i))
    return None


# -- discrete Laplace and Gaussian together: the exact curve of the sum of the losses ------
#: most loss values the Laplace part keeps exactly; beyond, the groups of equal (a, Δ) are
#: merged on a grid with each loss rounded up (δ only grows)
MIXED_MAX_ATOMS = 200_000


def discrete_laplace_loss(a: float, shift: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The privacy loss of the discrete Laplace mechanism P(z) ∝ e^{-a|z|} (scale 1/a)
    against the same noise shifted by the integer ``shift`` Δ >= 1: its values and their
    probabilities under the unshifted output (Canonne, Kamath & Steinke 2020, Def. 1 for
    the noise; the loss is L(y) = a(|y - Δ| - |y|)).

    L = aΔ on y <= 0 (probability 1/(1 + e^{-a})), a(Δ - 2y) on 0 < y < Δ (probability
    tanh(a/2) e^{-ay}) and -aΔ on y >= Δ (probability e^{-aΔ}/(1 + e^{-a})): a finite
    support, so nothing is truncated."""
    a = float(a)
    if not (a > 0 and math.isfinite(a)) or int(shift) != shift or shift < 1:
        raise BudgetError(f"the discrete Laplace loss needs a > 0 and an integer shift >= 1, got a={a!r:.30}, "
                          f"shift={shift!r:.30}")
    d = int(shift)
    y = np.arange(d + 1, dtype=np.float64)
    values = a * (d - 2.0 * y)
    probs = math.tanh(a / 2) * np.exp(-a * y)
    probs[0] = 1.0 / (1.0 + math.exp(-a))
    probs[-1] = math.exp(-a * d) / (1.0 + math.exp(-a))
    return values, probs


def _laplace_group(a: float, shift: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The loss of ``count`` independent discrete Laplace measurements sharing a and Δ: a
    times an integer in [-Δn, Δn] (one measurement: a(Δ - 2y), y = 0…Δ). Δ = 1 (unit
    moves): L = a(2J - n) with J ~ Binomial(n, 1/(1 + e^{-a})), exactly; otherwise the
    n-fold convolution of the one-measurement pmf (direct sums of non-negative terms)."""
    lv, lp = discrete_laplace_loss(a, shift)
    if shift == 1:
        from scipy.stats import binom  # here: scipy.stats takes ~0.5 s to import (issue 53: import time)

        j = np.arange(count + 1)
        return a * (2.0 * j - count), binom.pmf(j, count, float(lp[0]))
    one = np.zeros(2 * shift + 1)
    one[np.rint(lv / a).astype(np.int64) + shift] = lp
    out = _convolve_power(one, count)
    m = np.arange(out.size) - shift * count
    nz = out > 0
    return a * m[nz].astype(np.float64), out[nz]


def _laplace_part(laplace: Sequence[tuple[float, int, int]], max_atoms: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and probabilities of the summed loss of the discrete Laplace measurements:
    equal (a, Δ) in closed form (:func:`_laplace_group`), the groups by outer sums while
    at most ``max_atoms`` values result; beyond, each group's losses are rounded *up* to a
    common grid of about ``max_atoms`` points over the total range and convolved densely
    (pessimistic: E[(1 - e^{ε - L})₊] only grows with L)."""
    counts: dict[tuple[float, int], int] = {}
    for a, shift, count in laplace:
        if int(count) != count or count < 0:
            raise BudgetError(f"a discrete Laplace count must be a non-negative integer, got {count!r:.30}")
        if count:
            key = (float(a), int(shift))
            counts[key] = counts.get(key, 0) + int(count)
    groups = [_laplace_group(a, d, n) for (a, d), n in sorted(counts.items())]
    if not groups:
        return np.zeros(1), np.ones(1)
    if math.prod(g[0].size for g in groups) <= max_atoms:
        values, probs = groups[0]
        for gv, gp in groups[1:]:
            values = (values[:, None] + gv[None, :]).ravel()
            probs = (probs[:, None] * gp[None, :]).ravel()
        return values, probs
    span = math.fsum(float(gv.max() - gv.min()) for gv, _ in groups)
    grid = span / max_atoms
    acc, i0 = np.ones(1), 0
    for gv, gp in groups:
        idx = np.ceil(gv / grid).astype(np.int64)
        lo = int(idx.min())
        acc, i0 = np.convolve(acc, np.bincount(idx - lo, weights=gp)), i0 + lo
    kept = np.flatnonzero(acc > 0)
    on_grid = (kept + i0) * grid
    return on_grid + 1e-12 * (1.0 + np.abs(on_grid)), acc[kept]  # Σ ceil(l/g)·g >= Σ l, rounding covered


def _gaussian_delta_shifted(t: np.ndarray, mu: float) -> np.ndarray:
    """E[(1 - e^{t - L})₊] for the Gaussian privacy loss L ~ N(μ²/2, μ²), for every real
    t: Balle & Wang 2018's δ(t) (:func:`gaussian_log_delta`, vectorised, t < 0 allowed)."""
    a, b = -t / mu + mu / 2, -t / mu - mu / 2
    out = np.empty_like(t)
    neg = a < 0
    an, bn = a[neg], b[neg]
    out[neg] = 0.5 * np.exp(-an * an / 2) * np.maximum(erfcx(-an * _SQRT1_2) - erfcx(-bn * _SQRT1_2), 0.0)
    la, lb = log_ndtr(a[~neg]), t[~neg] + log_ndtr(b[~neg])
    out[~neg] = np.where(lb < la, np.exp(la) * -np.expm1(np.minimum(lb - la, 0.0)), 0.0)
    return out


def mixed_delta(epsilon: float, laplace: Sequence[tuple[float, int, int]], mu: float = 0.0, *,
                max_atoms: int = MIXED_MAX_ATOMS) -> float:
    """δ(ε) of discrete Laplace levels composed with Gaussian noise of total μ.

    ``laplace``: (a, Δ, count) — ``count`` independent discrete Laplace measurements
    P(z) ∝ e^{-a|z|}, each moved by the integer Δ between neighbours; ``mu``: the Gaussian
    part's μ = sqrt(Σ (Δᵢ/σᵢ)²) (0: none). With L = L_Lap + L_G the total privacy loss
    (independent parts), δ(ε) = E[(1 - e^{ε - L})₊] (Balle & Wang 2018, Thm 5; Canonne,
    Kamath & Steinke 2020, Thm 7) = Σⱼ pⱼ δ_G(ε - lⱼ; μ) over the finite support of
    L_Lap (:func:`discrete_laplace_loss`, convolved), δ_G Balle & Wang 2018's Thm 8 at
    the shifted ε, which holds for every real argument. Exact up to float rounding while the
    Laplace part has at most ``max_atoms`` loss values; beyond, those are rounded up to a
    grid (an upper bound on δ)."""
    eps, mu = float(epsilon), float(mu)
    if not math.isfinite(eps) or not (mu >= 0 and math.isfinite(mu)):
        raise BudgetError(f"the mixed curve needs a finite epsilon and mu >= 0, got epsilon={eps!r:.30}, mu={mu!r:.30}")
    values, probs = _laplace_part(laplace, max_atoms)
    t = eps - values
    if mu > 0:
        terms = _gaussian_delta_shifted(t, mu)
    else:
        terms = -np.expm1(np.minimum(t, 0.0))
    return min(1.0, math.fsum(probs * terms))


def mixed_epsilon(laplace: Sequence[tuple[float, int, int]], mu: float, delta: float, *,
                  max_atoms: int = MIXED_MAX_ATOMS) -> float:
    """The smallest ε >= 0 with :func:`mixed_delta` (ε) <= ``delta`` (bisection: δ(ε)
    decreases in ε), never above basic composition Σ aΔ·count + ε_G(μ; ``delta``)."""
    target = float(delta) * (1.0 - 1e-9)
    if not 0 < target < 1:
        raise BudgetError(f"the mixed curve needs 0 < delta < 1, got {delta!r:.30}")
    basic = math.fsum(a * d * n for a, d, n in laplace) + (gaussian_epsilon(mu, delta) if mu > 0 else 0.0)
    if mixed_delta(0.0, laplace, mu, max_atoms=max_atoms) <= target:
        return 0.0
    lo, hi = 0.0, basic
    if mixed_delta(hi, laplace, mu, max_atoms=max_atoms) > target:
        return basic  # rounding at the edge: basic composition holds by itself
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi) or hi - lo <= 1e-12 * hi:
            break
        if mixed_delta(mid, laplace, mu, max_atoms=max_atoms) > target:
            lo = mid
        else:
            hi = mid
    return hi


# -- (ε, δ) steps: the optimal composition of their canonical pairs -------------------------
#: grid points per pass of :func:`approx_epsilon` (each pass narrows the range of ε it spans)
APPROX_BINS = 1 << 17
#: relative slack on the summed pure part (float rounding of the probabilities and of the sum)
_APPROX_RTOL = 1e-9


def _approx_parts(parts: Sequence[tuple[float, float, int]]) -> tuple[list[tuple[float, int]], Fraction, Fraction]:
    """Validated (ε, count) of the pure parts, Σ count·ε and 1 - Π (1 - δ)^count, both exact."""
    pure: list[tuple[float, int]] = []
    e_sum, keep = Fraction(0), Fraction(1)
    for eps, dlt, count in parts:
        eps, dlt = float(eps), float(dlt)
        if not (eps >= 0 and math.isfinite(eps)) or not (0 <= dlt < 1) or int(count) != count or count < 0:
            raise BudgetError(f"an (ε, δ) step needs ε >= 0 finite, 0 <= δ < 1 and an integer count >= 0, got "
                              f"ε={eps!r:.30}, δ={dlt!r:.30}, count={count!r:.30}")
        if not count:
            continue
        if eps > 0:
            pure.append((eps, int(count)))
            e_sum += Fraction(eps) * int(count)
        if dlt > 0:
            keep *= (1 - Fraction(dlt)) ** int(count)
    return pure, e_sum, 1 - keep


def _up(x: Fraction) -> float:
    """The smallest float >= x."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def _approx_grid(pure: list[tuple[float, int]], e_up: float, eps0: float,
                 bins: int) -> tuple[np.ndarray, np.ndarray]:
    """The pure part's privacy loss where it can exceed ``eps0``, on a grid, rounded up.

    Step j's loss is εⱼ - 2εⱼBⱼ, Bⱼ ~ Bernoulli(1/(1 + e^{εⱼ})) (the canonical ε-DP pair).
    The total is E - 2D, E = Σ εⱼ, D = Σ εⱼBⱼ; with each εⱼ in D rounded *down* to the grid
    h = (E - ε₀)/(2·bins) the loss only grows (δ only grows), and D is accumulated step by
    step (a two-point shift-add: non-negative sums, no FFT), dropping D > (E - ε₀)/2, whose
    loss is below ε₀ and stays there (D only grows). Returns the losses (each raised by
    10⁻¹² relative for the float rounding) and their probabilities; the dropped mass is
    not there (it adds nothing to δ(ε) at ε >= ε₀)."""
    t = (e_up - eps0) / 2.0
    h = t / bins
    hf = Fraction(h)
    p = np.zeros(bins + 1)
    p[0] = 1.0
    for eps, count in pure:
        k = math.floor(Fraction(eps) / hf)  # k·h <= ε exactly
        if k == 0 or k > bins:
            if k > bins:  # a flip drops below ε₀: only the no-flip part stays
                p *= (1.0 / (1.0 + math.exp(-eps))) ** count
            continue
        q = 1.0 / (1.0 + math.exp(eps))
        for _ in range(count):
            moved = q * p[:bins + 1 - k]
            p *= 1.0 - q
            p[k:] += moved
    loss = e_up - 2.0 * h * np.arange(bins + 1, dtype=np.float64)
    return loss + 1e-12 * (1.0 + np.abs(loss)), p


def _approx_pure_delta(eps: float, loss: np.ndarray, p: np.ndarray) -> float:
    """Σ p·(1 - e^{ε - loss})₊ raised for float rounding."""
    x = np.minimum(eps - loss, 0.0)
    return float(np.sum(p * -np.expm1(x))) * (1.0 + _APPROX_RTOL) + 1e-300 * p.size


def approx_delta(epsilon: float, parts: Sequence[tuple[float, float, int]], *, bins: int = APPROX_BINS) -> float:
    """An upper bound on δ(ε) of the adaptive composition of (ε, δ)-DP steps.

    ``parts``: (εⱼ, δⱼ, countⱼ), ``countⱼ`` steps each (εⱼ, δⱼ)-DP. Every (ε, δ)-DP
    mechanism is a post-processing of the canonical pair (Kairouz, Oh & Viswanath 2015,
    Thm 2.4): privacy loss +∞ with probability δ, else +ε with probability e^ε/(1 + e^ε)
    and -ε otherwise. Their composition's curve is (ibid. Thm 3.3; Murtagh & Vadhan 2016
    for unequal steps)

        δ(ε) = 1 - Π(1 - δⱼ) + Π(1 - δⱼ)·E[(1 - e^{ε - L})₊],  L = Σ ±εⱼ,

    and by the adaptive composition theorem for dominating pairs (Dong, Roth & Su 2022,
    Thm 3.2; concurrent interactive steps: Vadhan & Zhang 2023) it bounds any adaptive
    composition of such steps. Here Π(1 - δⱼ) is exact (rationals), the expectation is
    summed on a grid with each loss rounded up (:func:`_approx_grid`): the result is never
    below the true δ(ε)."""
    eps = float(epsilon)
    pure, e_sum, dl = _approx_parts(parts)
    e_up = _up(e_sum)
    if not (eps >= 0 and math.isfinite(eps)):
        raise BudgetError(f"the (ε, δ) composition needs a finite ε >= 0, got {eps!r:.30}")
    if eps >= e_up or not pure:
        return min(1.0, _up(dl))
    loss, p = _approx_grid(pure, e_up, eps, bins)
    return min(1.0, _up(dl + (1 - dl) * Fraction(_approx_pure_delta(eps, loss, p))))


def approx_epsilon(parts: Sequence[tuple[float, float, int]], delta: float, *,
                   bins: int = APPROX_BINS) -> float | None:
    """The smallest ε (to the grid) with :func:`approx_delta` (ε) <= ``delta``: a certified
    upper bound on the ε at ``delta`` of any adaptive composition of the (ε, δ) steps
    ``parts`` (εⱼ, δⱼ, countⱼ); never above basic composition Σ countⱼ·εⱼ. None when the
    steps' δ alone, 1 - Π(1 - δⱼ), is not below ``delta`` (no ε meets it).

    Three passes, each on ``bins`` grid points over the losses above the last pass's lower
    bound on the optimum (the rounding costs at most 2h per step with a flip, so the true
    optimum is above ε₁ - 2h·Σ countⱼ): the grid narrows to ~10⁻⁷ of the range in the
    last pass. Every bisection keeps the side that meets δ on its (pessimistic) grid."""
    d = float(delta)
    if not 0 < d < 1:
        raise BudgetError(f"the (ε, δ) composition needs 0 < delta < 1, got {delta!r:.30}")
    pure, e_sum, dl = _approx_parts(parts)
    left = Fraction(d) - dl
    if left <= 0:
        return None
    e_up = _up(e_sum)
    if not pure:
        return 0.0
    left /= 1 - dl  # δ = dl + (1 - dl)·δ_pure <= delta
    target = float(left)
    if Fraction(target) > left:
        target = math.nextafter(target, 0.0)
    steps = sum(n for _, n in pure)
    lo_bound, best = 0.0, e_up  # basic composition: δ_pure(E) = 0 and the steps' δ fit
    for _ in range(3):
        loss, p = _approx_grid(pure, e_up, lo_bound, bins)
        h = (e_up - lo_bound) / (2.0 * bins)
        if _approx_pure_delta(lo_bound, loss, p) <= target:
            return lo_bound  # the whole range meets δ (lo_bound = 0, or the optimum sits on it)
        lo, hi = lo_bound, best
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi) or hi - lo <= 1e-13 * hi:
                break
            if _approx_pure_delta(mid, loss, p) > target:
                lo = mid
            else:
                hi = mid
        best = min(best, hi)
        lo_bound = max(lo_bound, best - 2.0 * h * steps - 1e-12 * (1.0 + best))
    return best


def accounting_text(accountant: str, guarantee: str) -> str:
    """The ledger's ``accounting`` sentence for a release certified by ``accountant``."""
    if accountant == ANALYTIC:
        return ("analytic Gaussian (Balle & Wang 2018, Thm 8): the levels' Gaussian noise is one Gaussian "
                "mechanism with mu = sqrt(2 * sum of per-level rho); the (ε, δ) target is met exactly on its curve")
    if accountant == ZCDP and guarantee == "approx":
        return ("zCDP (Bun & Steinke 2016): per-level ρ add up; the (ε, δ) target converted to ρ with the "
                "Canonne-Kamath-Steinke 2020 conversion (Cor. 13)")
    if accountant == DISCRETE:
        return ("exact discrete Gaussian curve (Canonne, Kamath & Steinke 2020, Thm 7): the levels' integer noise "
                "and worst-case unit shifts composed by direct summation over the convolved pmfs; the (ε, δ) target "
                "is met on that curve for the release's per-level split")
    if accountant == MIXED:
        return ("exact discrete Laplace + analytic Gaussian curve: the discrete Laplace levels' finite privacy loss "
                "summed against the Gaussian noise's (Balle & Wang 2018, Thm 8 at each shifted ε)")
    if accountant == APPROX:
        return ("optimal composition of (ε, δ) steps (Kairouz, Oh & Viswanath 2015; Murtagh & Vadhan 2016): every "
                "step of the longest schedule the plan can run enters by the canonical (ε, δ) pair that dominates "
                "any mechanism with its guarantee; their curve summed on a grid with losses rounded up (an upper "
                "bound), capped at basic composition")
    if accountant == PLD:
        return "privacy-loss distributions (dp-accounting, pessimistic discretisation): a tight upper bound on δ(ε)"
    return ""


# -- PLD through dp-accounting ------------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    """One measurement for :func:`pld_epsilon`: ``kind`` is ``"discrete_laplace"`` (``scale``:
    the noise scale t, P(z) ∝ exp(-|z|/t)), ``"gaussian"`` or ``"discrete_gaussian"``
    (``scale``: σ), with the L1 (Laplace) or L2 (Gaussian) ``sensitivity``, or ``"approx"``:
    any (ε, δ)-DP mechanism (``scale``: ε, and ``delta``), entered by its worst-case PLD
    (Meiser & Mohammadi 2018; dp-accounting ``from_privacy_parameters``). Repeating the
    same measurement ``count`` times composes it with itself."""

    kind: str
    scale: float
    sensitivity: float = 1.0
    count: int = 1
    delta: float = 0.0


def _dp_accounting() -> Any:
    try:
        import dp_accounting
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(PLD_INSTALL) from exc
    return dp_accounting


def _pld(parts: Sequence[Measured], value_discretization_interval: float) -> Any:
    pld_mod = _dp_accounting().pld.privacy_loss_distribution
    out = None
    for m in parts:
        if m.count < 1:
            continue
        if m.kind == "discrete_laplace":
            # P(z) ∝ exp(-|z|/t): dp-accounting's parameter is 1/t (P ∝ exp(-parameter·|z|))
            one = pld_mod.from_discrete_laplace_mechanism(1.0 / m.scale, sensitivity=int(round(m.sensitivity)),
                                                          value_discretization_interval=value_discretization_interval)
        elif m.kind == "gaussian":
            one = pld_mod.from_gaussian_mechanism(m.scale, sensitivity=m.sensitivity,
                                                  value_discretization_interval=value_discretization_interval)
        elif m.kind == "discrete_gaussian":
            one = pld_mod.from_discrete_gaussian_mechanism(m.scale, sensitivity=int(round(m.sensitivity)),
                                                           value_discretization_interval=value_discretization_interval)
        elif m.kind == "approx":
            params = _dp_accounting().pld.common.DifferentialPrivacyParameters(m.scale, m.delta)
            one = pld_mod.from_privacy_parameters(params, value_discretization_interval=value_discretization_interval)
        else:
            raise BudgetError(f"PLD accounting knows 'discrete_laplace', 'gaussian', 'discrete_gaussian' and 'approx' "
                              f"measurements, got {m.kind!r}")
        if m.count > 1:
            one = one.self_compose(m.count)
        out = one if out is None else out.compose(one)
    if out is None:
        raise BudgetError("nothing to account: no measurement given")
    return out


def pld_epsilon(parts: Sequence[Measured], delta: float, *, value_discretization_interval: float = 1e-4) -> float:
    """ε at ``delta`` of the composition of ``parts`` by privacy-loss distributions
    (Koskela et al. 2020; Doroshenko et al. 2022), computed by ``dp-accounting`` with
    pessimistic discretisation (an upper bound on the true ε). Needs the optional extra:
    ``pip install "hierdp[accounting]"``."""
    return float(_pld(parts, value_discretization_interval).get_epsilon_for_delta(delta))


def pld_delta(parts: Sequence[Measured], epsilon: float, *, value_discretization_interval: float = 1e-4) -> float:
    """δ at ``epsilon`` of the composition of ``parts`` (:func:`pld_epsilon`)."""
    return float(_pld(parts, value_discretization_interval).get_delta_for_epsilon(epsilon))
