"""The built-in plan ``leaves``: one mechanism call on the leaves only.

Each privacy unit lies in one leaf (or, with ``max_contributions`` = c, changes the leaf
vector by at most the sensitivity), and the leaves of any tree are disjoint, so measuring
all of them — at whatever depths they sit — costs the total once (parallel composition).
Internal nodes are not measured (variance ``inf``); a consistent post-processor (BLUE,
GMC) gives them the sum of their leaves. This is how PrivTree (Zhang et al. 2016, §3.4)
releases counts on its decomposition, whose leaves are at different depths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp import rules
from hierdp.accounting import PrivacyLoss, Spend
from hierdp.accounting.ledger import LevelSpend
from hierdp.errors import BudgetError
from hierdp.measurements import Measurements
from hierdp.plans.base import Plan
from hierdp.plans.per_level import key_for, mechanism_budget_unit, mechanism_total, node_identities, resolve_mechanism

if TYPE_CHECKING:
    from hierdp.keyed_noise import NoiseKey
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["Leaves"]

#: the measurement id (:mod:`hierdp.keyed_noise`) of the leaf counts
MEASUREMENT = 1


class Leaves(Plan):
    """Measure every leaf with ``mechanism`` (default ``discrete_laplace``) at the whole
    total; internal nodes are left to post-processing."""

    name = "leaves"
    keyed_noise = True

    def __init__(self, mechanism: Any = "discrete_laplace") -> None:
        self.mechanism = resolve_mechanism(mechanism)

    @property
    def budget_unit(self) -> str:
        return mechanism_budget_unit(self.mechanism)

    @property
    def budget_owner(self) -> str:
        return f"mechanism {self.mechanism.name!r}"

    def total_for(self, loss: PrivacyLoss) -> tuple[float, dict[str, Any]]:
        return mechanism_total(self.mechanism, loss)

    def measure(self, tree: Tree, values: np.ndarray, *, total: float, delta: float | None,
                sensitivity: Sensitivity, rng: RandomSource, key: NoiseKey | None = None,
                node_ids: np.ndarray | None = None) -> Measurements:
        """Measure the leaves; ``key`` and ``node_ids`` key the noise per node as for
        ``per_level`` (:func:`hierdp.plans.per_level.measure`)."""
        mech = self.mechanism
        key = key_for(rng, key)
        ids = node_identities(tree, node_ids)
        if not total > 0:
            raise BudgetError("no budget left for the leaf counts; lower the structure's share")
        rules.enforce(rules.delta_mechanism_problem(mech.name, mech.delta_per_use, 1, delta), BudgetError)
        leaves = np.flatnonzero(tree.internal.n_children == 0)  # internal ids of the leaves
        out_dtype = np.int64 if (mech.integer and np.issubdtype(values.dtype, np.integer)) else np.float64
        noisy = np.zeros(values.shape, dtype=out_dtype)
        variance = np.full(tree.n_nodes, np.inf)
        noisy[leaves] = mech.sample_keyed(values[leaves], total, sensitivity, key, ids[leaves], MEASUREMENT)
        var = float(mech.variance(total, sensitivity))
        variance[leaves] = var
        unit = "epsilon" if mech.budget_unit == "epsilon" else "rho"
        level = LevelSpend(level="leaves", depth=-1, budget=float(total), unit=mech.budget_unit,
                           mechanism=mech.name, n_nodes=int(leaves.size), noise_variance=var,
                           sensitivity_l1=sensitivity.l1, sensitivity_l2=sensitivity.l2)
        return Measurements(values=noisy, variance=variance,
                            spends=[Spend(float(total), unit, label="leaves", delta=mech.delta_per_use)],
                            levels=[level], info={"budget_strategy": "leaves only"})

    def ledger_fields(self) -> dict[str, str]:
        return {"mechanism": self.mechanism.name, "budget_strategy": "leaves only (parallel composition)"}

    def __repr__(self) -> str:
        return f"<plan 'leaves' mechanism={self.mechanism.name!r}>"
