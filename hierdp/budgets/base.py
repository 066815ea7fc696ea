"""The budget-strategy interface: how a total privacy budget is split over levels.

A strategy returns one budget per level name (depth 0, the grand total, is a level like
any other); a level given 0 is not measured. Splits compose by basic composition, so the
values must add up to the total. Strategies that read true counts set
``reads_true_counts = True``; the release passes them the true counts and marks the
ledger non-private.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hierdp.errors import BudgetError

if TYPE_CHECKING:
    from hierdp.mechanisms.base import Mechanism, Sensitivity
    from hierdp.tree import Tree

__all__ = ["BudgetStrategy", "Equal", "Leaves"]


class BudgetStrategy(ABC):
    """Base class of budget strategies (registered through ``hierdp_register_budgets``)."""

    name: ClassVar[str]
    reads_true_counts: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"budget strategy {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def allocate(
        self,
        tree: Tree,
        total: float,
        *,
        mechanism: Mechanism,
        sensitivity: Sensitivity,
        true_values: np.ndarray | None = None,
    ) -> dict[str, float]:
        """Per-level budgets (level name -> budget in the mechanism's unit) summing to ``total``."""

    def __repr__(self) -> str:
        return f"<budget {self.name!r}>"


class Equal(BudgetStrategy):
    """The same budget on every level, the total included (Dawson et al. §5: equal split)."""

    name = "equal"

    def allocate(self, tree: Tree, total: float, *, mechanism: Mechanism, sensitivity: Sensitivity,
                 true_values: np.ndarray | None = None) -> dict[str, float]:
        k = tree.n_levels
        return {name: total / k for name in tree.level_names}


class Leaves(BudgetStrategy):
    """The whole budget on the leaf level; internal nodes are estimated by aggregation."""

    name = "leaves"

    def allocate(self, tree: Tree, total: float, *, mechanism: Mechanism, sensitivity: Sensitivity,
                 true_values: np.ndarray | None = None) -> dict[str, float]:

        leaf_depths = np.unique(tree.internal.depth[tree.internal.n_children == 0])
        if leaf_depths.size != 1:
            raise BudgetError(
                "budget 'leaves' needs every leaf at the same depth; this tree's leaves sit at depths "
                f"{leaf_depths.tolist()}: give per-level budgets instead"
            )
        deepest = int(leaf_depths[0])
        return {name: (total if d == deepest else 0.0) for d, name in enumerate(tree.level_names)}
