"""Every registered plan (built-in or plugin) passes the public contract suite."""

import numpy as np
import pytest

from hierdp import registry
from hierdp.accounting import Spend
from hierdp.plans.base import Plan
from hierdp.postprocessors.base import Measurements
from hierdp.testing import BasePlanTests
from hierdp.testing.postprocessors import contract_trees

NAMES = registry.names("plan")


def test_the_built_in_plans_are_registered():
    assert {"per_level", "ghazi"} <= set(NAMES)


class TestEveryRegisteredPlan(BasePlanTests):
    @pytest.fixture(params=NAMES)
    def plan(self, request):
        return registry.create("plan", request.param)


# ---------------------------------------------------------------- the suite can fail
class _Overspends(Plan):
    name = "broken_overspend"
    budget_unit = "epsilon"

    def measure(self, tree, values, *, total, delta, sensitivity, rng):
        return Measurements(np.asarray(values, float), np.ones(tree.n_nodes), spends=[Spend(2 * total, "epsilon")])


class _LeaksCounts(Plan):
    name = "broken_leak"
    budget_unit = "epsilon"

    def measure(self, tree, values, *, total, delta, sensitivity, rng):
        return Measurements(np.asarray(values, float), np.ones(tree.n_nodes), spends=[Spend(total, "epsilon")],
                            info={"true": np.asarray(values).copy()})


def test_suite_detects_overspending():
    with pytest.raises(Exception, match="exceed"):
        BasePlanTests().test_spends_within_the_total(_Overspends(), contract_trees()["ragged"])


def test_suite_detects_true_counts_in_info():
    with pytest.raises(AssertionError, match="true counts"):
        BasePlanTests().test_measurements_shape_and_info(_LeaksCounts(), contract_trees()["ragged"])
