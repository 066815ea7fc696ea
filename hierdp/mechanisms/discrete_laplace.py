"""The discrete Laplace mechanism (Dawson et al. 2023, §2: DLap; Canonne et al. 2020)."""

from __future__ import annotations

import numpy as np

from hierdp.errors import DataError
from hierdp.mechanisms._samplers import discrete_laplace, discrete_laplace_variance, rational_scale
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.rng import RandomSource

__all__ = ["DiscreteLaplace"]


class DiscreteLaplace(Mechanism):
    """ε-DP integer noise with P(z) ∝ exp(-ε|z|/Δ₁), Δ₁ the level's L1 sensitivity.

    The scale Δ₁/ε is rounded *up* to a multiple of 2⁻²⁰ so that it is rational and the
    exact sampler applies; the privacy loss is therefore at most the stated ε.
    """

    name = "discrete_laplace"
    budget_unit = "epsilon"
    integer = True

    def scale(self, budget: float, sensitivity: Sensitivity):
        return rational_scale(sensitivity.l1 / budget)

    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        return discrete_laplace_variance(self.scale(budget, sensitivity))

    def sample(
        self, values: np.ndarray, budget: float, sensitivity: Sensitivity, rng: RandomSource
    ) -> np.ndarray:
        values = np.asarray(values)
        if values.size and not np.issubdtype(values.dtype, np.integer):
            if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
                raise DataError("discrete_laplace needs integer counts; use mechanism='laplace' for real values")
            values = values.astype(np.int64)
        noise = discrete_laplace(self.scale(budget, sensitivity), values.size, rng)
        return values.astype(np.int64) + noise.reshape(values.shape)
