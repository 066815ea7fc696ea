"""Exact, vectorised samplers for discrete distributions.

Implements Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential
Privacy": Algorithm 1 (Bernoulli(exp(-γ)) for rational γ) and Algorithm 2 (discrete
Laplace with rational scale s/t), with every Bernoulli decided by exact integer
comparisons, so the output distribution is exactly the target (no floating point).
The loops below run over *rounds of rejection* on shrinking batches, never over draws.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from hierdp.rng import RandomSource

__all__ = ["rational_scale", "bernoulli_exp_neg", "discrete_laplace", "discrete_laplace_variance"]

SCALE_DENOMINATOR = 1 << 20


def rational_scale(scale: float, denominator: int = SCALE_DENOMINATOR) -> Fraction:
    """Smallest fraction ``s / denominator >= scale`` (rounding *up* keeps privacy)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    exact = Fraction(scale)
    s = math.ceil(exact * denominator)
    return Fraction(s, denominator)


def bernoulli_exp_neg(num: np.ndarray, den: int, rng: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) draws for integers ``0 <= num <= den`` (CKS Alg. 1).

    For γ = num/den in [0, 1]: draw A_k ~ Bernoulli(γ/k) for k = 1, 2, ... until the first
    failure at k = K; return 1 iff K is odd.
    """
    num = np.asarray(num, dtype=np.int64)
    size = num.shape[0]
    out = np.zeros(size, dtype=bool)
    active = np.arange(size)
    k = 1
    while active.size:
        # A ~ Bernoulli(num / (den * k)) as integers(den * k) < num
        a = rng.integers(den * k, active.size) < num[active]
        stopped = active[~a]
        out[stopped] = (k % 2) == 1
        active = active[a]
        k += 1
    return out


def _geometric_exp_neg_one(size: int, rng: RandomSource) -> np.ndarray:
    """V with P(V = v) = (1 - e^-1) e^-v: the number of Bernoulli(e^-1) successes before a failure."""
    v = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    ones = np.ones(size, dtype=np.int64)
    while active.size:
        a = bernoulli_exp_neg(ones[: active.size], 1, rng)
        v[active[a]] += 1
        active = active[a]
    return v


def discrete_laplace(scale: Fraction, size: int, rng: RandomSource) -> np.ndarray:
    """Exact draws with P(Y = y) ∝ exp(-|y| / scale), for rational ``scale`` (CKS Alg. 2).

    With ``scale = t/s``: X = U + t·V (U uniform on [0, t) kept with probability
    exp(-U/t), V geometric) has P(X = x) ∝ exp(-x/t), so Y = floor(X/s) has
    P(Y = y) ∝ exp(-y s/t); a random sign, rejecting "-0", makes it two-sided.
    """
    t, s = scale.numerator, scale.denominator
    size = int(size)
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        m = todo.size
        u = rng.integers(t, m)
        keep = bernoulli_exp_neg(u, t, rng)
        u = u[keep]
        v = _geometric_exp_neg_one(u.size, rng)
        x = u + t * v
        y = x // s
        b = (rng.words(u.size) & np.uint64(1)).astype(bool)
        ok = ~(b & (y == 0))
        y = np.where(b, -y, y)[ok]
        idx = todo[keep][ok]
        out[idx] = y
        done = np.zeros(m, dtype=bool)
        done[np.flatnonzero(keep)[ok]] = True
        todo = todo[~done]
    return out


def discrete_laplace_variance(scale: Fraction | float) -> float:
    """Variance 2α/(1-α)² of the discrete Laplace with α = exp(-1/scale)."""
    a = math.exp(-1.0 / float(scale))
    return 2.0 * a / (1.0 - a) ** 2
