"""Every registered decomposition passes the public contract suite (plans: test_plan_contract.py),
a per_level plan with a Gaussian mechanism passes the plan suite, and the suites catch broken
implementations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierdp import registry
from hierdp.accounting import Spend
from hierdp.decompositions.base import Decomposition, Structure
from hierdp.plans.base import Plan
from hierdp.postprocessors.base import Measurements
from hierdp.testing import BaseDecompositionTests, BasePlanTests
from hierdp.tree import Tree

PLANS = registry.names("plan")
DECOMPOSITIONS = registry.names("decomposition")

def test_the_builtins_are_registered():
    assert "per_level" in PLANS and "declared" in DECOMPOSITIONS


class TestPerLevelWithAGaussianMechanism(BasePlanTests):
    @pytest.fixture
    def plan(self):
        return registry.create("plan", "per_level", mechanism="discrete_gaussian", budget="equal")


_PEOPLE = pd.DataFrame({"state": ["A", "A", "B", "B", "B"], "county": ["x", "y", "z", "z", "w"]})
_POINTS = pd.DataFrame(np.random.default_rng(0).uniform(0, 1, size=(400, 2)) ** 3, columns=["x", "y"])
_BOX = dict(columns=["x", "y"], bounds=[(0.0, 1.0), (0.0, 1.0)])
_DATA = {
    "declared": (dict(levels=["state", "county"], domains="observed"), _PEOPLE),
    "privtree": (_BOX, _POINTS),
    "simpletree": (dict(_BOX, height=4), _POINTS),
    "grid": (dict(_BOX, n=400), _POINTS),
    "suffix_tree": (dict(alphabet="ABC", max_length=6),
                    ["".join(np.random.default_rng(1).choice(list("ABC"), size=int(n))) for n in
                     np.random.default_rng(2).integers(0, 9, size=300)]),
    "privtree_taxonomy": (dict(taxonomy=Tree.complete(3, 4)), np.arange(27, dtype=np.int64) * 5),
    "privtree_mixed": (dict(numeric={"x": (0.0, 1.0)}, categorical={"leaf": Tree.complete(2, 3)}),
                       pd.DataFrame({"x": _POINTS["x"], "leaf": np.arange(400) % 4 + 3})),
}


@pytest.mark.parametrize("name", DECOMPOSITIONS)
def test_every_registered_decomposition_has_contract_data(name):
    assert name in _DATA, f"add contract data for decomposition {name!r} to this test"


class TestEveryRegisteredDecomposition(BaseDecompositionTests):
    @pytest.fixture(params=[n for n in DECOMPOSITIONS if n in _DATA])
    def decomposition(self, request):
        return registry.create("decomposition", request.param, **_DATA[request.param][0])

    @pytest.fixture
    def data(self, decomposition):
        return _DATA[decomposition.name][1]


# ----------------------------------------------------------------- the suites can fail
class _NoNoise(Plan):
    """Reports a spend but publishes the true counts."""

    name = "no_noise_test"
    budget_unit = "epsilon"

    def measure(self, tree, values, *, total, delta, sensitivity, rng):
        return Measurements(values=values.copy(), variance=np.ones(tree.n_nodes),
                            spends=[Spend(total, "epsilon", label="all")])


class _Overspends(_NoNoise):
    name = "overspends_test"

    def measure(self, tree, values, *, total, delta, sensitivity, rng):
        m = registry.create("plan", "per_level").measure(tree, values, total=total, delta=delta,
                                                         sensitivity=sensitivity, rng=rng)
        m.spends = m.spends + [Spend(total, "epsilon", label="again")]
        return m


class _SecretlyDataDependent(Decomposition):
    name = "secret_test"
    data_dependent = True

    def decompose(self, data=None, *, budget=None, rng=None):
        n = int(len(data))  # the size of private data chooses the tree, and nothing is paid
        return Structure(Tree.complete(2, 1 + n % 3))


def _run_suite(suite_cls, fixtures: dict, test_name: str, **kw):
    suite = suite_cls()
    getattr(suite, test_name)(**{**fixtures, **kw})


def test_plan_suite_catches_a_plan_without_noise():
    with pytest.raises(AssertionError, match="no noise"):
        _run_suite(BasePlanTests, {"plan": _NoNoise()}, "test_noise_is_added")


def test_plan_suite_catches_overspending():
    from hierdp.errors import BudgetError

    with pytest.raises(BudgetError, match="exceed the budget"):
        _run_suite(BasePlanTests, {"plan": _Overspends(), "tree": Tree.complete(2, 3)},
                   "test_spends_within_the_total")


def test_decomposition_suite_catches_an_unpaid_private_structure():
    with pytest.raises(AssertionError, match="private output"):
        _run_suite(BaseDecompositionTests, {"decomposition": _SecretlyDataDependent(), "data": _PEOPLE,
                                            "budget": 1.0}, "test_spends_match_the_kind")
