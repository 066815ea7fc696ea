"""The plan interface: how a release measures a structure.

A plan receives the public tree, the private node values (internal order), the total
budget in its own unit, the sensitivity of one privacy unit and the random source, and
returns :class:`~hierdp.postprocessors.base.Measurements`: noisy values, their variances
where they exist, the spends it made (:class:`hierdp.accounting.Spend`, composed by the
accountant into the ledger) and a per-level summary. Plans are the only place besides
mechanisms where true counts meet randomness; what comes out is private.

Built-in: ``per_level`` (one mechanism call per level, with a budget strategy; Dawson et
al. §3-4, Cai et al. §5). Third-party plans register through ``hierdp_register_plans``
and run :class:`hierdp.testing.BasePlanTests`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hierdp.accounting import total_budget

if TYPE_CHECKING:
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.postprocessors.base import Measurements
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["Plan"]


class Plan(ABC):
    """Base class of measurement plans (registered through ``hierdp_register_plans``).

    Subclasses set ``name`` and implement :attr:`budget_unit` and :meth:`measure`;
    parameters are constructor keywords. ``integer``: integer true counts give integer
    noisy values. A plan that reads true counts to *choose* how to measure (beyond
    measuring them) lists why in :meth:`non_private_reasons`; the ledger then marks the
    release non-private.
    """

    name: ClassVar[str]
    #: the post-processing chain a release uses when none is given (``blue`` needs the
    #: variances of a linear plan; a non-linear plan such as ``ghazi`` sets ``()``)
    default_postprocess: ClassVar[tuple[str, ...]] = ("blue",)

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"plan {self.name!r} takes no parameters, got {sorted(params)}")

    @property
    @abstractmethod
    def budget_unit(self) -> str:
        """``"epsilon"`` (pure ε-DP), ``"rho"`` (ρ-zCDP) or ``"approx"`` ((ε, δ)-DP)."""

    def total(self, *, epsilon: float | None, delta: float | None, rho: float | None) -> tuple[float, dict[str, Any]]:
        """The total budget in :attr:`budget_unit` and the ledger's guarantee fields
        (:func:`hierdp.accounting.total_budget`)."""
        return total_budget(self.budget_unit, epsilon=epsilon, delta=delta, rho=rho, mechanism=self.name)

    @abstractmethod
    def measure(self, tree: Tree, values: np.ndarray, *, total: float, delta: float | None,
                sensitivity: Sensitivity, rng: RandomSource) -> Measurements:
        """Measure the internal-order ``values`` of ``tree`` within ``total`` (and ``delta``)."""

    def non_private_reasons(self) -> list[str]:
        """Why this plan's releases are not differentially private (empty for a private plan)."""
        return []

    def ledger_fields(self) -> dict[str, str]:
        """``mechanism`` and ``budget_strategy`` texts for the ledger."""
        return {"mechanism": self.name, "budget_strategy": self.name}

    def __repr__(self) -> str:
        return f"<plan {self.name!r}>"
