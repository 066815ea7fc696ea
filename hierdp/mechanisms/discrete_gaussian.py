"""The discrete Gaussian mechanism under ρ-zCDP (Canonne, Kamath & Steinke 2020)."""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import ClassVar

from hierdp.mechanisms._samplers import (
    DGaussParams,
    dgauss_params,
    discrete_gaussian_variance,
    sample_discrete_gaussian,
    sample_discrete_gaussian_keyed,
)
from hierdp.mechanisms.base import Sensitivity
from hierdp.mechanisms.discrete_laplace import ExactIntegerMechanism

__all__ = ["DiscreteGaussian"]


class DiscreteGaussian(ExactIntegerMechanism):
    """ρ-zCDP integer noise N_Z(0, σ²) with σ² = Δ₂²/(2ρ), Δ₂ the level's L2 sensitivity.

    CKS 2020, Theorem 14: adding N_Z(0, σ²) to an integer vector with L2 sensitivity Δ₂
    is (Δ₂²/2σ²)-zCDP. σ² is rounded *up* (relative change below 2⁻²⁸) to the rational
    the exact sampler uses (exact rejection sampling, see
    :mod:`hierdp.mechanisms._samplers`). The declared variance is that of the discrete
    Gaussian itself (slightly below σ² for σ < 1), computed exactly.
    """

    name = "discrete_gaussian"
    budget_unit = "rho"
    #: its (ε, δ) curve is its own (lattice) one, less private than the continuous Gaussian's at
    #: small σ: (ε, δ) requests are calibrated by the CKS 2020 zCDP conversion (Cor. 13)
    privacy_curve: ClassVar[str | None] = "discrete_gaussian"

    def params(self, budget: float, sensitivity: Sensitivity) -> DGaussParams:
        rho = self.check_budget(budget)
        return dgauss_params(Fraction(sensitivity.l2) ** 2 / (2 * Fraction(rho)))

    _noise_variance = staticmethod(discrete_gaussian_variance)
    _noise = staticmethod(sample_discrete_gaussian)
    _noise_compiled = staticmethod(functools.partial(sample_discrete_gaussian, compiled=True))
    _noise_keyed = staticmethod(sample_discrete_gaussian_keyed)
