"""Measurement plans. Built-ins are registered through the ``hierdp_register_plans`` hook."""

from hierdp.plans.base import Plan
from hierdp.plans.ghazi import Ghazi
from hierdp.plans.leaves import Leaves
from hierdp.plans.marginals import Marginals
from hierdp.plans.per_level import PerLevel
from hierdp.plugins.markers import hookimpl

__all__ = ["Plan", "PerLevel", "Ghazi", "Leaves", "Marginals"]


@hookimpl
def hierdp_register_plans():
    return [PerLevel, Ghazi, Leaves, Marginals]
