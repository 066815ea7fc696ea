"""The discrete Laplace mechanism (Dawson et al. 2023, §2: DLap; Canonne et al. 2020, Alg. 2)."""

from __future__ import annotations

import functools
import math
from abc import abstractmethod
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from hierdp.errors import DataError
from hierdp.keyed_noise import NoiseKey, draw_ids
from hierdp.mechanisms._samplers import (
    DLapParams,
    discrete_laplace_variance,
    dlap_params,
    sample_discrete_gaussian_keyed,
    sample_discrete_laplace,
    sample_discrete_laplace_keyed,
)
from hierdp.mechanisms.base import Mechanism, Sensitivity, keyed_rows
from hierdp.rng import RandomSource

__all__ = ["DiscreteLaplace", "ExactIntegerMechanism", "as_integer_counts"]


def as_integer_counts(values: np.ndarray, mechanism: str) -> np.ndarray:
    """``values`` as int64, or :class:`DataError` if some value is not a finite integer."""
    values = np.asarray(values)
    if np.issubdtype(values.dtype, np.integer) or values.dtype == bool:
        return values.astype(np.int64, copy=False)
    if values.size and (not np.all(np.isfinite(values)) or np.any(values != np.round(values))):
        raise DataError(f"{mechanism} needs integer counts; use a continuous mechanism "
                        "('laplace' or 'gaussian') for real values")
    return values.astype(np.int64)


#: hierdp's keyed samplers: each returns a new int64 array, which the sample adds into
_OWN_KEYED = (sample_discrete_laplace_keyed, sample_discrete_gaussian_keyed)


class ExactIntegerMechanism(Mechanism):
    """Shared logic of mechanisms adding exact integer noise to integer counts: subclasses
    give the sampler's exact parameters, its variance and its sampler."""

    integer = True

    @abstractmethod
    def params(self, budget: float, sensitivity: Sensitivity) -> Any:
        """Exact (rational) parameters of the noise at this budget and sensitivity."""

    @staticmethod
    @abstractmethod
    def _noise_variance(params: Any) -> float:
        """Exact variance of the noise with these parameters."""

    @staticmethod
    @abstractmethod
    def _noise(params: Any, size: int, rng: RandomSource) -> np.ndarray:
        """``size`` exact int64 noise draws."""

    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        if budget == 0:
            return math.inf
        return self._noise_variance(self.params(budget, sensitivity))

    def sample(self, values: np.ndarray, budget: float, sensitivity: Sensitivity,
               rng: RandomSource) -> np.ndarray:
        vals = as_integer_counts(values, self.name)
        noise = self._noise(self.params(budget, sensitivity), vals.size, rng)
        return vals + noise.reshape(vals.shape)

    @staticmethod
    @abstractmethod
    def _noise_keyed(params: Any, key: NoiseKey, draws: np.ndarray, measurement: int) -> np.ndarray:
        """Exact int64 noise, one draw per global draw index in ``draws``, on keyed words."""

    def sample_keyed(self, values: np.ndarray, budget: float, sensitivity: Sensitivity, key: NoiseKey,
                     ids: np.ndarray, measurement: int = 0) -> np.ndarray:
        return self.keyed_sampler(budget, sensitivity)(values, key, ids, measurement)

    def keyed_sampler(self, budget: float, sensitivity: Sensitivity) -> Callable[..., np.ndarray]:
        """:meth:`sample_keyed` with the exact parameters worked out once: draw ``g·k + c``
        for cell ``c`` of node ``g`` (``k`` cells per row)."""
        params = self.params(budget, sensitivity)

        def sample(values: np.ndarray, key: NoiseKey, ids: np.ndarray, measurement: int = 0) -> np.ndarray:
            vals, node = keyed_rows(values, ids)
            vals = as_integer_counts(vals, self.name)
            k = vals.shape[1] if vals.ndim == 2 else 1
            noise = self._noise_keyed(params, key, draw_ids(node, k), measurement)
            if self._noise_keyed not in _OWN_KEYED or noise.dtype != np.int64 or not noise.flags.writeable:
                return vals + np.asarray(noise).reshape(vals.shape)  # (a subclass's sampler: its array left as it is)
            out = noise.reshape(vals.shape)
            out += vals  # the noise array is this call's own: added in place, not a third array
            return out

        return sample

    #: ``_noise`` with ``compiled=True`` (the compiled kernel even for a few draws), where the sampler has it
    _noise_compiled: Callable[[Any, int, RandomSource], np.ndarray] | None = None

    def sampler(self, budget: float, sensitivity: Sensitivity, *,
                many_calls: bool = False) -> Callable[[np.ndarray, RandomSource], np.ndarray]:
        """The exact parameters worked out once; with ``many_calls``, the compiled kernel
        draws even a level of one node (interpreted, one draw costs ~0.1 ms: 10 s for a
        10⁵-level path). Compiled and interpreted kernels give the same draws."""
        params = self.params(budget, sensitivity)
        noise = self._noise_compiled if many_calls and self._noise_compiled is not None else self._noise

        def sample(values: np.ndarray, rng: RandomSource) -> np.ndarray:
            vals = as_integer_counts(values, self.name)
            return vals + noise(params, vals.size, rng).reshape(vals.shape)

        return sample


class DiscreteLaplace(ExactIntegerMechanism):
    """ε-DP integer noise with P(z) ∝ exp(-ε|z|/Δ₁), Δ₁ the level's L1 sensitivity.

    The scale Δ₁/ε is rounded *up* (relative change below 2⁻²⁰) to a rational t/s so the
    exact sampler of Canonne, Kamath & Steinke (2020, Alg. 2) applies; the privacy loss is
    therefore at most the stated ε. Variance 2q/(1-q)² with q = exp(-s/t) (exact).
    """

    name = "discrete_laplace"
    budget_unit = "epsilon"

    def params(self, budget: float, sensitivity: Sensitivity) -> DLapParams:
        eps = self.check_budget(budget)
        return dlap_params(Fraction(sensitivity.l1) / Fraction(eps))

    def scale(self, budget: float, sensitivity: Sensitivity) -> Fraction:
        """The exact (rational) noise scale used, >= Δ₁/ε."""
        return self.params(budget, sensitivity).scale

    _noise_variance = staticmethod(discrete_laplace_variance)
    _noise = staticmethod(sample_discrete_laplace)
    _noise_compiled = staticmethod(functools.partial(sample_discrete_laplace, compiled=True))
    _noise_keyed = staticmethod(sample_discrete_laplace_keyed)
