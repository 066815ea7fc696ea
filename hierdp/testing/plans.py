"""Contract tests every measurement plan must pass (built-in or plugin).

Subclass :class:`BasePlanTests` and provide a ``plan`` fixture returning an instance::

    import pytest
    from hierdp.testing import BasePlanTests

    class TestMine(BasePlanTests):
        @pytest.fixture
        def plan(self):
            return MyPlan()

What is checked, on the small trees of :func:`hierdp.testing.postprocessors.contract_trees`
with integer counts (consistent, non-negative):

- ``budget_unit`` is one of ``"epsilon"``, ``"rho"``, ``"approx"``; ``total`` accepts a
  budget in that unit and returns the ledger's guarantee fields, and ``total_for`` (what
  :func:`hierdp.release` asks, with a :class:`~hierdp.accounting.PrivacyLoss`) agrees;
- a budget in a unit the plan cannot honour is refused with a :class:`hierdp.HierDPError`
  (pure ε for an (ε, δ) or ρ plan; ρ for a pure plan);
- ``measure`` returns :class:`~hierdp.measurements.Measurements` with values of
  shape ``(n,)``, numeric and finite where measured; variances ``None`` or of shape ``(n,)``
  and ``>= 0``; per-node ``info`` arrays of length ``n``;
- spends are :class:`hierdp.accounting.Spend` objects whose composition (an
  :class:`~hierdp.accounting.Accountant`) stays within the total and, for (ε, δ), within δ;
- a fixed seed gives identical measurements; the inputs are not modified;
- ``info`` holds no true count (checkable only in part: no per-node ``info`` array
  equals the true counts) and can be copied;
- noise is added (a plan that returns the true counts is caught); every budget form gets
  a guarantee or a one-line error; a release through :func:`hierdp.release` works and its
  ledger names the plan.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
import pytest

from hierdp.accounting import Accountant, PrivacyLoss, Spend
from hierdp.errors import HierDPError, NotForPublicationWarning
from hierdp.measurements import Measurements
from hierdp.mechanisms.base import Sensitivity
from hierdp.pipeline import release
from hierdp.plans.base import Plan
from hierdp.rng import make_rng
from hierdp.testing.postprocessors import contract_trees
from hierdp.tree import Tree

__all__ = ["BasePlanTests"]

_TREES = contract_trees()
_BUDGETS = {"epsilon": {"epsilon": 1.0}, "rho": {"rho": 0.5}, "approx": {"epsilon": 1.0, "delta": 1e-6}}


def _counts(tree: Tree, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    leaves = (rng.pareto(1.3, tree.n_leaves) * 20).astype(np.int64)
    return tree.to_internal(tree.aggregate(leaves)).astype(np.int64)


class BasePlanTests:
    """Contract suite for plans; subclass and provide ``plan``."""

    @pytest.fixture
    def plan(self) -> Plan:  # pragma: no cover - must be overridden
        raise NotImplementedError("provide a `plan` fixture returning an instance")

    @pytest.fixture(params=sorted(_TREES))
    def tree(self, request) -> Tree:
        return _TREES[request.param]

    @staticmethod
    def _measure(plan: Plan, tree: Tree, values: np.ndarray,
                 seed: int = 0) -> tuple[Measurements, float, dict[str, Any]]:
        budget = _BUDGETS[plan.budget_unit]
        total, guarantee = plan.total(epsilon=budget.get("epsilon"), delta=budget.get("delta"),
                                      rho=budget.get("rho"))
        meas = plan.measure(tree, values, total=total, delta=budget.get("delta"), sensitivity=Sensitivity(),
                            rng=make_rng(seed))
        return meas, total, guarantee

    def test_registry_attributes_and_unit(self, plan: Plan) -> None:
        assert isinstance(plan.name, str) and plan.name == plan.name.lower()
        assert plan.budget_unit in ("epsilon", "rho", "approx")
        assert isinstance(plan.ledger_fields(), dict) and {"mechanism", "budget_strategy"} <= set(plan.ledger_fields())

    def test_total_in_its_unit(self, plan: Plan) -> None:
        budget = _BUDGETS[plan.budget_unit]
        total, guarantee = plan.total(epsilon=budget.get("epsilon"), delta=budget.get("delta"),
                                      rho=budget.get("rho"))
        assert total > 0 and guarantee["guarantee"] in ("pure", "zcdp", "approx")
        if plan.budget_unit == "approx":
            assert guarantee["guarantee"] == "approx" and guarantee["delta"] == budget["delta"]

    def test_total_for_the_loss_value_agrees(self, plan: Plan) -> None:
        budget = _BUDGETS[plan.budget_unit]
        assert plan.total_for(PrivacyLoss(**budget)) == plan.total(**budget)

    def test_refuses_a_unit_it_cannot_honour(self, plan: Plan) -> None:
        bad = {"epsilon": {"rho": 0.5}, "rho": {"epsilon": 1.0}, "approx": {"epsilon": 1.0}}[plan.budget_unit]
        with pytest.raises(HierDPError):
            plan.total(epsilon=bad.get("epsilon"), delta=bad.get("delta"), rho=bad.get("rho"))

    def test_measurements_shape_and_info(self, plan: Plan, tree: Tree) -> None:
        x = _counts(tree)
        meas, _, _ = self._measure(plan, tree, x)
        assert isinstance(meas, Measurements)
        vals = np.asarray(meas.values)
        assert vals.shape == (tree.n_nodes,) and np.issubdtype(vals.dtype, np.number)
        if meas.variance is not None:
            var = np.asarray(meas.variance)
            assert var.shape == (tree.n_nodes,) and np.all(var >= 0)
            assert np.all(np.isfinite(vals[np.isfinite(var)]))
        else:
            assert np.all(np.isfinite(vals))
        assert isinstance(meas.info, dict)
        for key, v in meas.info.items():
            if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == tree.n_nodes:
                assert not (np.issubdtype(v.dtype, np.number) and np.array_equal(v, x) and np.any(x != 0)), \
                    f"info[{key!r}] equals the true counts"
        copy.deepcopy(meas.info)

    def test_spends_within_the_total(self, plan: Plan, tree: Tree) -> None:
        meas, total, guarantee = self._measure(plan, tree, _counts(tree, 1))
        assert meas.spends, "a plan must report its spends"
        acc = Accountant(unit="rho" if plan.budget_unit == "rho" else "epsilon", budget=total)
        for s in meas.spends:
            assert isinstance(s, Spend) and s.amount > 0
            acc.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
        assert acc.total <= total * (1 + 1e-9)
        if plan.budget_unit == "approx":
            assert acc.delta_total <= guarantee["delta"] * (1 + 1e-9)
        else:
            assert acc.delta_total == 0 or plan.budget_unit == "epsilon"

    def test_deterministic_for_a_seed_and_inputs_untouched(self, plan: Plan, tree: Tree) -> None:
        x = _counts(tree, 2)
        x0 = x.copy()
        a, _, _ = self._measure(plan, tree, x, seed=5)
        b, _, _ = self._measure(plan, tree, x, seed=5)
        np.testing.assert_array_equal(np.asarray(a.values), np.asarray(b.values))
        np.testing.assert_array_equal(x, x0)
        assert [(s.amount, s.label, s.delta) for s in a.spends] == [(s.amount, s.label, s.delta) for s in b.spends]

    def test_noise_is_added(self, plan: Plan) -> None:
        """A plan that hands back the true counts (under any ledger) is caught."""
        tree = Tree.complete(3, 5)
        x = _counts(tree, 3)
        meas, _, _ = self._measure(plan, tree, x, seed=7)
        measured = np.ones(tree.n_nodes, bool) if meas.variance is None else np.isfinite(np.asarray(meas.variance))
        assert np.any(np.asarray(meas.values)[measured] != x[measured]), "no noise: the true counts came back"

    @pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}, {"epsilon": 1.0, "delta": 1e-6},
                                        {"epsilon": -1.0}, {}])
    def test_total_answers_every_budget_form_clearly(self, plan: Plan, budget: dict[str, float]) -> None:
        try:
            total, g = plan.total(epsilon=budget.get("epsilon"), delta=budget.get("delta"), rho=budget.get("rho"))
        except HierDPError as exc:
            assert str(exc) and "\n" not in str(exc)
            return
        assert total > 0 and g["guarantee"] in ("pure", "zcdp", "approx")

    def test_release_through_the_pipeline(self, plan: Plan) -> None:

        tree = Tree.complete(2, 4)
        x = tree.to_external(_counts(tree, 5))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotForPublicationWarning)
            r = release(tree, x, plan=plan, seed=11, **_BUDGETS[plan.budget_unit])
        assert r.ledger.plan == plan.name
        assert r.ledger.guarantee in ("pure", "zcdp", "approx")
        assert np.shape(r.estimate.values) == (tree.n_nodes,)
