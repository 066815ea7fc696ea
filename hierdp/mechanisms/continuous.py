"""Laplace and Gaussian mechanisms for real-valued queries, defended against floating point.

Textbook implementations add ``numpy`` Laplace or normal noise to a float. Mironov (2012,
"On significance of the least significant bits for differential privacy") showed that
the set of floats such a sampler can output depends on the input, which can reveal it
exactly. hierdp instead computes the noise *on an integer grid*: with a public grid step
``g = 2**k`` (a function of the budget and sensitivity only, at most 2⁻¹⁶ of the noise
scale and at most 1),

    output = x̃ + g · Z,    x̃ = g · rint(x / g),    Z exact discrete Laplace / Gaussian,

where ``Z`` has scale (Laplace) or σ (Gaussian) divided by ``g``. ``x̃``, ``g·Z`` and
their sum are exact multiples of ``g`` (every operation is a power-of-two scaling or a
rounding that is a deterministic function of the exact sum, i.e. post-processing), so
the guarantee is that of the discrete mechanism on the grid: ε-DP (Laplace) or ρ-zCDP
(Gaussian, CKS 2020 Thm 14) **for inputs whose neighbours differ by multiples of g**,
e.g. any integer-valued data (counts, integer sums), for which ``x̃ = x``. For other
real data, rounding to the grid can move each changed cell by up to ``g``: include that
in the declared sensitivity (or round the data to a coarser public grid first).

The declared variance is that of ``g·Z`` (exact); it equals 2b² (resp. σ²) to about
2⁻³² relative. Rounding and adding run in one compiled pass.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from hierdp._kernels.jit import for_size
from hierdp._kernels.jit import numba as nb
from hierdp.errors import DataError
from hierdp.keyed_noise import NoiseKey, draw_ids
from hierdp.mechanisms._samplers import (
    dgauss_params,
    discrete_gaussian_variance,
    discrete_laplace_variance,
    dlap_params,
    sample_discrete_gaussian,
    sample_discrete_gaussian_keyed,
    sample_discrete_laplace,
    sample_discrete_laplace_keyed,
)
from hierdp.mechanisms.base import Mechanism, Sensitivity, keyed_rows
from hierdp.rng import RandomSource

__all__ = ["Laplace", "Gaussian", "grid_step"]

GRID_BITS = 16


def grid_step(noise_scale: float) -> Fraction:
    """Public grid step ``g = 2**min(0, floor(log2(noise_scale)) - 16)``."""
    k = min(0, math.floor(math.log2(noise_scale)) - GRID_BITS)
    return Fraction(1, 1 << -k)


@nb.njit(cache=True)
def _grid_add(x, z, g, inv_g):
    """out = rint(x/g)·g + z·g in one pass (exact: g is a power of two); nan if x not finite."""
    out = np.empty(x.shape[0], dtype=np.float64)
    for i in range(x.shape[0]):
        out[i] = np.rint(x[i] * inv_g) * g + z[i] * g
    return out


#: integers above this do not all have a float64 (53-bit significand): neighbours would
#: round to the same or to values 2 apart, so the stated ε would not hold
_EXACT_INT = 2 ** (np.finfo(np.float64).nmant + 1)


def _noisy(values: np.ndarray, z: np.ndarray, g: Fraction, mechanism: str) -> np.ndarray:
    raw = np.asarray(values)
    if np.issubdtype(raw.dtype, np.integer) and raw.size and \
            max(abs(int(raw.max())), abs(int(raw.min()))) > _EXACT_INT:
        raise DataError(f"{mechanism}: an integer value exceeds 2**53, above which float64 cannot hold every "
                        "integer (the guarantee would not hold); scale the values down")
    x = np.asarray(raw, dtype=np.float64)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = for_size(_grid_add, flat.size)(flat, z, float(g), float(1 / g))  # small: interpreted, no compile
    if flat.size and not np.isfinite(out).all():
        raise DataError(f"{mechanism}: values must be finite (found NaN or inf)")
    return out.reshape(x.shape)


class _GridMechanism(Mechanism):
    """Shared grid logic: subclasses give the exact integer sampler on the grid."""

    integer = False

    @abstractmethod
    def _params(self, budget: float, sensitivity: Sensitivity) -> tuple[Fraction, Any]:
        """The public grid step g and the discrete sampler's parameters in grid units."""

    @staticmethod
    @abstractmethod
    def _discrete_variance(params: Any) -> float:
        """Exact variance of the discrete noise (in grid units)."""

    @staticmethod
    @abstractmethod
    def _discrete_sample(params: Any, size: int, rng: RandomSource) -> np.ndarray:
        """Exact integer noise draws (in grid units)."""

    def grid(self, budget: float, sensitivity: Sensitivity) -> float:
        """The public grid step g used at this budget."""
        return float(self._params(budget, sensitivity)[0])

    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        if budget == 0:
            return math.inf
        g, p = self._params(budget, sensitivity)
        return float(g) ** 2 * self._discrete_variance(p)

    def sample(self, values: np.ndarray, budget: float, sensitivity: Sensitivity,
               rng: RandomSource) -> np.ndarray:
        g, p = self._params(budget, sensitivity)
        x = np.asarray(values)
        return _noisy(x, self._discrete_sample(p, x.size, rng), g, self.name)


    @staticmethod
    @abstractmethod
    def _discrete_sample_keyed(params: Any, key: NoiseKey, draws: np.ndarray, measurement: int) -> np.ndarray:
        """Exact integer noise (grid units), one per global draw index, on keyed words."""

    def sample_keyed(self, values: np.ndarray, budget: float, sensitivity: Sensitivity, key: NoiseKey,
                     ids: np.ndarray, measurement: int = 0) -> np.ndarray:
        return self.keyed_sampler(budget, sensitivity)(values, key, ids, measurement)

    def keyed_sampler(self, budget: float, sensitivity: Sensitivity) -> Callable[..., np.ndarray]:
        """:meth:`sample_keyed` with the grid and exact parameters worked out once."""
        g, p = self._params(budget, sensitivity)

        def sample(values: np.ndarray, key: NoiseKey, ids: np.ndarray, measurement: int = 0) -> np.ndarray:
            x, node = keyed_rows(values, ids)
            k = x.shape[1] if x.ndim == 2 else 1
            return _noisy(x, self._discrete_sample_keyed(p, key, draw_ids(node, k), measurement), g, self.name)

        return sample


class Laplace(_GridMechanism):
    """ε-DP Laplace noise with scale Δ₁/ε for real values, on a fine integer grid.

    Lemma 13 of Ghazi et al. (2023) (Dwork et al. 2006), computed as grid step ×
    exact discrete Laplace (see the module docstring for the floating-point defence).
    """

    name = "laplace"
    budget_unit = "epsilon"

    def _params(self, budget: float, sensitivity: Sensitivity):
        eps = self.check_budget(budget)
        scale = Fraction(sensitivity.l1) / Fraction(eps)
        g = grid_step(float(scale))
        return g, dlap_params(scale / g)

    _discrete_variance = staticmethod(discrete_laplace_variance)
    _discrete_sample = staticmethod(sample_discrete_laplace)
    _discrete_sample_keyed = staticmethod(sample_discrete_laplace_keyed)


class Gaussian(_GridMechanism):
    """ρ-zCDP Gaussian noise with σ² = Δ₂²/(2ρ) for real values, on a fine integer grid.

    Bun & Steinke (2016), Prop. 1.6, computed as grid step × exact discrete Gaussian
    (CKS 2020, Thm 14 on the grid; see the module docstring).
    """

    name = "gaussian"
    budget_unit = "rho"
    #: the exact (ε, δ) curve of this noise is the analytic Gaussian's (Balle & Wang 2018), up to a
    #: lattice term of ~1e-10 relative that :data:`hierdp.accounting.accountants.GRID_DELTA_MARGIN` covers
    privacy_curve: ClassVar[str | None] = "gaussian"

    def _params(self, budget: float, sensitivity: Sensitivity):
        rho = self.check_budget(budget)
        sigma2 = Fraction(sensitivity.l2) ** 2 / (2 * Fraction(rho))
        g = grid_step(math.sqrt(float(sigma2)))
        return g, dgauss_params(sigma2 / (g * g))

    _discrete_variance = staticmethod(discrete_gaussian_variance)
    _discrete_sample = staticmethod(sample_discrete_gaussian)
    _discrete_sample_keyed = staticmethod(sample_discrete_gaussian_keyed)
