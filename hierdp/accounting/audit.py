"""Empirical privacy auditing: a high-confidence *lower bound* on a mechanism's ε.

If M is (ε, δ)-DP then for every pair of neighbouring inputs x0, x1 and every event E,
P[M(x1) ∈ E] <= e^ε · P[M(x0) ∈ E] + δ. The auditor runs M many times on x0 and on x1,
picks an event E (a threshold on a scalar statistic of the output), and bounds the two
probabilities with Clopper–Pearson intervals, which gives, with confidence 1 - α,

    ε >= ε̂ = ln( (p̂₁_lower - δ) / p̂₀_upper ).

The event is chosen on one half of the draws and the bound is computed on the other
half, so the choice does not invalidate the confidence level (the standard recipe of
Jagielski et al. 2020 and Nasr et al. 2021). Both orders of the pair and both tails of
the statistic are searched. A correct mechanism must give ε̂ <= its claimed ε (except
with probability α); a broken one is *caught* when ε̂ exceeds the claim.

Everything is vectorised: the mechanism is asked for all draws at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hierdp.accounting import zcdp_to_approx_dp
from hierdp.errors import BudgetError
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.rng import RandomSource, make_rng

__all__ = ["AuditResult", "clopper_pearson", "epsilon_lower_bound", "audit", "audit_mechanism",
           "claimed_epsilon"]


@dataclass(frozen=True)
class AuditResult:
    """Outcome of an audit: ``epsilon_lb`` is the (1 - alpha)-confidence lower bound on ε."""

    epsilon_lb: float
    claimed: float | None
    delta: float
    alpha: float
    event: str  # e.g. "S >= 3.5 (x1 over x0)"
    counts: tuple[int, int, int]  # (hits under the favoured input, hits under the other, draws each)

    @property
    def violates(self) -> bool:
        """True when the lower bound exceeds the claimed ε: the claim is refuted."""
        return self.claimed is not None and self.epsilon_lb > self.claimed

    def __str__(self) -> str:
        c = "" if self.claimed is None else f" (claimed ε = {self.claimed:g})"
        return (f"ε̂ >= {self.epsilon_lb:.4f}{c} at confidence {1 - self.alpha:g}, δ = {self.delta:g}; "
                f"event {self.event}; counts {self.counts[0]} vs {self.counts[1]} of {self.counts[2]}")


def clopper_pearson(k: np.ndarray | int, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided exact binomial interval (each side at level alpha/2) for k successes of n."""
    from scipy.stats import beta  # here: scipy.stats is slow to import and most releases never audit

    k = np.asarray(k, dtype=np.float64)
    lo = np.where(k > 0, beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
    hi = np.where(k < n, beta.ppf(1 - alpha / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    return lo, hi


def epsilon_lower_bound(k1: np.ndarray | int, k0: np.ndarray | int, n: int, alpha: float = 0.05,
                        delta: float = 0.0) -> np.ndarray:
    """ln((lower CP bound of k1/n - δ) / upper CP bound of k0/n), -inf when not positive.

    ``k1`` counts the event under the input it is *more* likely under, ``k0`` under the
    other. Each one-sided bound has level alpha/2, so both hold with probability >= 1 - alpha.
    """
    lo1, _ = clopper_pearson(k1, n, alpha)
    _, hi0 = clopper_pearson(k0, n, alpha)
    num = lo1 - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(num > 0, np.log(np.maximum(num, 1e-300) / hi0), -np.inf)
    return out


def _candidates(s0: np.ndarray, s1: np.ndarray, n_thresholds: int) -> np.ndarray:
    pooled = np.concatenate([s0, s1])
    uniq = np.unique(pooled)
    if uniq.size <= n_thresholds:
        return uniq
    qs = np.quantile(pooled, np.linspace(0, 1, n_thresholds), method="nearest")
    return np.unique(np.concatenate([qs, uniq[:20], uniq[-20:]]))


def _event_counts(s0: np.ndarray, s1: np.ndarray, thr: np.ndarray):
    """For each threshold t: counts of S >= t and S <= t under x0 and x1."""
    a0, a1 = np.sort(s0), np.sort(s1)
    ge0 = a0.size - np.searchsorted(a0, thr, side="left")
    ge1 = a1.size - np.searchsorted(a1, thr, side="left")
    le0 = np.searchsorted(a0, thr, side="right")
    le1 = np.searchsorted(a1, thr, side="right")
    return ge0, ge1, le0, le1


def audit(sample: Callable[[np.ndarray, int, RandomSource], np.ndarray], x0, x1, *,
          statistic: Callable[[np.ndarray], np.ndarray] | None = None, n: int = 1_000_000,
          alpha: float = 0.05, delta: float = 0.0, claimed: float | None = None,
          rng: RandomSource | None = None, seed: int | None = None, n_thresholds: int = 400) -> AuditResult:
    """Audit a randomised algorithm on the neighbouring inputs ``x0``, ``x1``.

    Parameters
    ----------
    sample : callable ``(x, m, rng) -> outputs`` returning ``m`` independent outputs
        stacked along the first axis.
    statistic : maps outputs to one float per draw (default: the output itself, which
        must then be one number per draw). Events are ``{S >= t}`` and ``{S <= t}``.
    n : draws per input (half select the event, half bound it).
    alpha : 1 - confidence. ``delta``: the δ of an (ε, δ) claim.
    """
    if not (0 < alpha < 1):
        raise BudgetError(f"alpha must be in (0, 1), got {alpha!r}")
    if n < 20:
        raise BudgetError("an audit needs at least 20 draws per input")
    rng = rng if rng is not None else make_rng(seed)
    stat = statistic if statistic is not None else (lambda out: np.asarray(out, dtype=np.float64).reshape(len(out)))
    s0 = np.asarray(stat(sample(x0, n, rng)), dtype=np.float64)
    s1 = np.asarray(stat(sample(x1, n, rng)), dtype=np.float64)
    if s0.shape != (n,) or s1.shape != (n,):
        raise ValueError("statistic must return one number per draw")
    h = n // 2
    sel0, ev0, sel1, ev1 = s0[:h], s0[h:2 * h], s1[:h], s1[h:2 * h]
    thr = _candidates(sel0, sel1, n_thresholds)
    ge0, ge1, le0, le1 = _event_counts(sel0, sel1, thr)
    # four candidate families: (event, favoured input)
    fams = [(ge1, ge0, ">=", "x1 over x0"), (ge0, ge1, ">=", "x0 over x1"),
            (le1, le0, "<=", "x1 over x0"), (le0, le1, "<=", "x0 over x1")]
    best = (-math.inf, 0, 0)
    for f, (kf, ko, _, _) in enumerate(fams):
        e = epsilon_lower_bound(kf, ko, h, alpha, delta)
        j = int(np.argmax(e))
        if e[j] > best[0]:
            best = (float(e[j]), f, j)
    _, f, j = best
    t = thr[j]
    op, who = fams[f][2], fams[f][3]
    ge_e0, ge_e1, le_e0, le_e1 = _event_counts(ev0, ev1, np.array([t]))
    hits = {(">=", "x1 over x0"): (ge_e1, ge_e0), (">=", "x0 over x1"): (ge_e0, ge_e1),
            ("<=", "x1 over x0"): (le_e1, le_e0), ("<=", "x0 over x1"): (le_e0, le_e1)}[(op, who)]
    kf, ko = int(hits[0][0]), int(hits[1][0])
    eps = float(epsilon_lower_bound(kf, ko, h, alpha, delta))
    return AuditResult(epsilon_lb=eps, claimed=claimed, delta=delta, alpha=alpha,
                       event=f"S {op} {t:g} ({who})", counts=(kf, ko, h))


def claimed_epsilon(mechanism: Mechanism, budget: float, delta: float = 0.0) -> float:
    """The ε a mechanism claims at ``budget``: ε itself, or for ρ-zCDP the CKS20 conversion at δ."""
    if mechanism.budget_unit == "epsilon":
        return float(budget)

    if not delta > 0:
        raise BudgetError("auditing a zCDP mechanism needs delta > 0 (its (ε, δ) claim)")
    return zcdp_to_approx_dp(budget, delta)


def audit_mechanism(mechanism: Mechanism, budget: float, sensitivity: Sensitivity | None = None, *,
                    n: int = 1_000_000, alpha: float = 0.05, delta: float | None = None,
                    rng: RandomSource | None = None, seed: int | None = None) -> AuditResult:
    """Audit a :class:`Mechanism` on its worst-case neighbours (``mechanism.audit_neighbours``).

    The statistic is the noisy value of the cells where the neighbours differ, weighted
    by the direction of the difference (optimal for noise that is monotone likelihood
    ratio, as Laplace and Gaussian are). ``delta`` defaults to the mechanism's own
    ``delta`` attribute (0 if none) for ε mechanisms and 1e-6 for ρ mechanisms.
    """
    sens = sensitivity or Sensitivity()
    if delta is None:
        delta = float(getattr(mechanism, "delta", 0.0)) if mechanism.budget_unit == "epsilon" else 1e-6
    x0, x1 = (np.asarray(x) for x in mechanism.audit_neighbours(sens))
    diff = (x1 - x0).astype(np.float64).reshape(-1)

    def sample(x, m, r):
        return mechanism.sample(np.broadcast_to(x, (m,) + x.shape).copy(), budget, sens, r)

    def stat(out):
        return np.asarray(out, dtype=np.float64).reshape(len(out), -1) @ diff

    return audit(sample, x0, x1, statistic=stat, n=n, alpha=alpha, delta=delta,
                 claimed=claimed_epsilon(mechanism, budget, delta), rng=rng, seed=seed)
