"""The truncated Laplace mechanism (Ghazi et al. 2023, Lemma 16; Geng et al. 2020).

Lemma 16: on integer input x, outputting x + z with
z ~ TruncLap(1/ε, R), R = (1/ε)·ln(1 + (e^ε - 1)/(2δ)), is (ε, δ)-DP. The noise is
bounded by R, which is what lets Ghazi et al. avoid a union bound over exponentially
many nodes.

hierdp samples the *integer* version: z on the integers with P(z) ∝ exp(-ε'|z|/Δ) for
|z| <= N, N = ceil(Δ·R(ε')), ε' <= ε the privacy parameter of the rational scale actually
used. Integer noise needs no floating-point defence, and for a shift by up to Δ the
probability of the outputs one neighbour cannot produce is
e^{-ε'N/Δ}(e^{ε'} - 1)·q / (1 + q - 2q·e^{-ε'N/Δ}) with q = e^{-ε'/Δ} < 1, which is at most
the continuous value e^{-ε'R}(e^{ε'} - 1) / (2(1 - e^{-ε'R})) = δ at R: so the integer
mechanism is (ε, δ)-DP with the same formula. Exact sampling: discrete Laplace draws
(CKS Alg. 2) rejected outside [-N, N].

Not registered as a release mechanism (its guarantee is approximate DP per measurement;
the release accounts pure ε or ρ): it is a building block for the Ghazi et al.
estimator and is audited in the test suite.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from hierdp.errors import BudgetError
from hierdp.keyed_noise import MAX_ATTEMPT, NoiseKey, draw_ids
from hierdp.mechanisms._samplers import dlap_params, sample_discrete_laplace, sample_discrete_laplace_keyed
from hierdp.mechanisms.base import Mechanism, Sensitivity, keyed_rows
from hierdp.mechanisms.discrete_laplace import as_integer_counts
from hierdp.rng import RandomSource

__all__ = ["TruncatedLaplace", "truncation_radius"]


def truncation_radius(epsilon: float, delta: float) -> float:
    """R = (1/ε)·ln(1 + (e^ε - 1)/(2δ)) of Lemma 16 (sensitivity 1)."""
    return math.log1p(math.expm1(epsilon) / (2.0 * delta)) / epsilon


class TruncatedLaplace(Mechanism):
    """(ε, δ)-DP bounded integer noise, Ghazi et al. (2023) Lemma 16; ``delta`` per measurement."""

    name = "truncated_laplace"
    budget_unit = "epsilon"
    integer = True
    scale_family = False  # the truncation N depends on ε, not only on Δ/ε

    def __init__(self, delta: float = 1e-9) -> None:
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 < delta < 1):
            raise BudgetError(f"truncated_laplace: delta must be strictly between 0 and 1, got {delta!r}")
        self.delta = float(delta)

    @property
    def delta_per_use(self) -> float:
        return self.delta

    def params(self, budget: float, sensitivity: Sensitivity):
        eps = self.check_budget(budget)
        if sensitivity.l1 != int(sensitivity.l1):
            raise BudgetError("truncated_laplace needs an integer L1 sensitivity")
        p = dlap_params(Fraction(sensitivity.l1) / Fraction(eps))
        eps_used = sensitivity.l1 * p.s / p.t  # <= eps
        n = math.ceil(sensitivity.l1 * truncation_radius(eps_used, self.delta) * (1 + 1e-12)) + 1
        return p, n

    def bound(self, budget: float, sensitivity: Sensitivity) -> int:
        """N: every noise value lies in [-N, N]."""
        return self.params(budget, sensitivity)[1]

    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        if budget == 0:
            return math.inf
        p, n = self.params(budget, sensitivity)
        a = p.s / p.t
        if n <= 4_000_000:
            z = np.arange(1, n + 1, dtype=np.float64)
            w = np.exp(-a * z)
            return float(2.0 * np.dot(z * z, w) / (1.0 + 2.0 * w.sum()))
        q = math.exp(-a)
        om = -math.expm1(-a)
        qn = math.exp(-a * n)
        s0 = (q - q * qn) / om  # sum_{z=1..n} q^z
        s2 = (q * (1 + q) - q * qn * ((n + 1) ** 2 - (2 * n * n + 2 * n - 1) * q + n * n * q * q)) / om ** 3
        return 2.0 * s2 / (1.0 + 2.0 * s0)

    def sample(self, values: np.ndarray, budget: float, sensitivity: Sensitivity,
               rng: RandomSource) -> np.ndarray:
        vals = as_integer_counts(values, self.name)
        p, n = self.params(budget, sensitivity)
        z = sample_discrete_laplace(p, vals.size, rng)
        bad = np.flatnonzero(np.abs(z) > n)
        while bad.size:  # rejection: exact conditional distribution on [-N, N]
            zz = sample_discrete_laplace(p, bad.size, rng)
            z[bad] = zz
            bad = bad[np.abs(zz) > n]
        return vals + z.reshape(vals.shape)

    def sample_keyed(self, values: np.ndarray, budget: float, sensitivity: Sensitivity, key: NoiseKey,
                     ids: np.ndarray, measurement: int = 0) -> np.ndarray:
        """Keyed version of :meth:`sample`: a draw outside [-N, N] is drawn again from the
        keyed stream of the next ``attempt`` of the same draw index (its own words again),
        so each value still depends only on the key, the measurement, the node and the cell."""
        vals, node = keyed_rows(values, ids)
        vals = as_integer_counts(vals, self.name)
        p, n = self.params(budget, sensitivity)
        draws = draw_ids(node, vals.shape[1] if vals.ndim == 2 else 1)
        z = sample_discrete_laplace_keyed(p, key, draws, measurement)
        bad = np.flatnonzero(np.abs(z) > n)
        attempt = 0
        while bad.size:  # rejection: exact conditional distribution on [-N, N]
            attempt += 1
            if attempt > MAX_ATTEMPT:
                raise OverflowError("truncated Laplace rejected a draw 63 times in a row (probability below "
                                    "1e-100 for supported parameters; report it)")
            zz = sample_discrete_laplace_keyed(p, key, draws[bad], measurement, attempt=attempt)
            z[bad] = zz
            bad = bad[np.abs(zz) > n]
        return vals + z.reshape(vals.shape)
