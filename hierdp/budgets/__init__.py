"""Budget strategies. Built-ins are registered through the ``hierdp_register_budgets`` hook."""

from hierdp.budgets.base import BudgetStrategy, Equal, Leaves
from hierdp.budgets.greedy import Greedy, GreedyOracle
from hierdp.budgets.optimize import Optimal, OptimalOracle
from hierdp.plugins.markers import hookimpl

__all__ = ["BudgetStrategy", "Equal", "Leaves", "Greedy", "GreedyOracle", "Optimal", "OptimalOracle"]


@hookimpl
def hierdp_register_budgets():
    return [Equal, Leaves, Greedy, GreedyOracle, Optimal, OptimalOracle]
