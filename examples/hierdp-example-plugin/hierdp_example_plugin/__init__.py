"""An example hierdp plugin: one mechanism and one metric, registered through pluggy hooks.

hierdp loads this module through the entry point ``example`` in the group ``hierdp``
(see ``pyproject.toml``) and calls its ``hierdp_register_*`` hook implementations.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.metrics.base import Metric
from hierdp.plugins import hookimpl

__all__ = ["ExampleGeometric", "ExampleMaxAbsError"]


class ExampleGeometric(Mechanism):
    """Two-sided geometric mechanism (Ghosh et al. 2009): P(z) ∝ α^|z|, α = exp(-ε/Δ₁).

    Sampled as G₁ − G₂ with Gᵢ geometric on {0, 1, ...} with success probability 1 − α,
    each by inversion of a uniform double. This is an *example*: floating-point inversion
    is not an exact sampler; use hierdp's built-in ``discrete_laplace`` for releases.
    Variance: 2α / (1 − α)².
    """

    name = "example_geometric"
    budget_unit = "epsilon"
    integer = True

    def _alpha(self, budget: float, sensitivity: Sensitivity) -> float:
        return math.exp(-self.check_budget(budget) / sensitivity.l1)  # BudgetError unless finite > 0

    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        if isinstance(budget, (int, float)) and not isinstance(budget, bool) and budget == 0:
            return math.inf  # a level with budget 0 is not measured
        a = self._alpha(budget, sensitivity)
        return 2.0 * a / (1.0 - a) ** 2

    def sample(self, values: np.ndarray, budget: float, sensitivity: Sensitivity, rng: Any) -> np.ndarray:
        values = np.asarray(values)
        a = self._alpha(budget, sensitivity)
        n = values.size
        # P(G >= k) = a^k  =>  G = floor(log(U) / log(a)) for U uniform in (0, 1]
        u1 = 1.0 - rng.uniform(n)
        u2 = 1.0 - rng.uniform(n)
        g1 = np.floor(np.log(u1) / math.log(a)).astype(np.int64)
        g2 = np.floor(np.log(u2) / math.log(a)).astype(np.int64)
        return np.rint(values).astype(np.int64) + (g1 - g2).reshape(values.shape)


class ExampleMaxAbsError(Metric):
    """Largest absolute error over the nodes, max |ŵ − w| (or max |ŵ − w| / max(w, tau))."""

    name = "example_max_abs_error"
    #: JSON schema of this metric's ``params`` in a spec (checked by ``hierdp validate``)
    params_schema = {
        "type": "object",
        "properties": {
            "tau": {"type": "number", "exclusiveMinimum": 0, "description": "relative to max(true, tau)"},
        },
        "additionalProperties": False,
    }

    def __call__(self, true: np.ndarray, estimate: np.ndarray, *, tree: Any = None, **params: Any) -> float:
        tau = params.get("tau", self.params.get("tau"))
        err = np.abs(np.asarray(estimate, dtype=float) - np.asarray(true, dtype=float))
        if tau is not None:
            err = err / np.maximum(np.asarray(true, dtype=float), float(tau))
        return float(err.max())


@hookimpl
def hierdp_register_mechanisms():
    return [ExampleGeometric]


@hookimpl
def hierdp_register_metrics():
    return [ExampleMaxAbsError]
