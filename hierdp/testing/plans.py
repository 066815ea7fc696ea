"""Contract tests every measurement plan must pass (built-in or plugin).

Subclass :class:`BasePlanTests` and provide a ``plan`` fixture returning an instance;
optionally ``privacy`` (the budget keywords the plan accepts, default
``{"epsilon": 1.0}``)::

    import pytest
    from hierdp.testing import BasePlanTests

    class TestMine(BasePlanTests):
        @pytest.fixture
        def plan(self):
            return MyPlan()

What is checked, on the suite's trees (complete, ragged with shuffled numbering, path, star):

- ``measure`` returns :class:`~hierdp.postprocessors.base.Measurements` with values of
  the input's shape and, when given, non-negative variances of shape ``(n,)`` or the
  values' shape; it does not modify its input;
- the spends are reported, positive, in the plan's unit, and compose (basic composition,
  parallel groups at their maximum) to at most the total;
- the same seed gives the same measurements; the values are noisy (a plan that returns
  the true counts is caught); no per-node array in ``info`` equals the true counts;
- ``total`` answers every budget form with a guarantee or a one-line ``HierDPError``;
- a release through :func:`hierdp.release` with the plan works and its ledger carries the
  plan's name and a guarantee for the declared budget.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from hierdp.accounting import Accountant
from hierdp.errors import HierDPError, NotForPublicationWarning
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.base import Plan
from hierdp.postprocessors.base import Measurements
from hierdp.rng import make_rng
from hierdp.testing.postprocessors import contract_trees
from hierdp.tree import Tree

__all__ = ["BasePlanTests"]

_TREES = {k: v for k, v in contract_trees().items() if v.n_nodes >= 3}


def _counts(tree: Tree, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return tree.aggregate(rng.integers(0, 200, tree.n_leaves))


class BasePlanTests:
    """Subclass with a ``plan`` fixture (and optionally ``privacy``)."""

    @pytest.fixture
    def privacy(self) -> dict[str, Any]:
        return {"epsilon": 1.0}

    @pytest.fixture(params=sorted(_TREES))
    def tree(self, request) -> Tree:
        return _TREES[request.param]

    def _measure(self, plan: Plan, tree: Tree, values: np.ndarray, privacy: dict, seed: int) -> Measurements:
        total, _ = plan.total(epsilon=privacy.get("epsilon"), delta=privacy.get("delta"), rho=privacy.get("rho"))
        return plan.measure(tree, tree.to_internal(values), total=total, delta=privacy.get("delta"),
                            sensitivity=Sensitivity(), rng=make_rng(seed))

    def test_is_a_plan(self, plan):
        assert isinstance(plan, Plan)
        assert isinstance(plan.name, str) and plan.name == plan.name.lower()
        assert plan.budget_unit in ("epsilon", "rho", "approx")

    def test_measurements_shape_and_variances(self, plan, tree, privacy):
        x = _counts(tree)
        before = x.copy()
        m = self._measure(plan, tree, x, privacy, seed=1)
        assert isinstance(m, Measurements)
        np.testing.assert_array_equal(x, before)  # input untouched
        assert np.shape(m.values) == x.shape
        assert np.issubdtype(np.asarray(m.values).dtype, np.number)
        if m.variance is not None:
            v = np.asarray(m.variance, dtype=np.float64)
            assert v.shape in ((tree.n_nodes,), x.shape)
            assert np.all(v >= 0) and not np.any(np.isnan(v))

    def test_spends_compose_within_the_total(self, plan, tree, privacy):
        total, _ = plan.total(epsilon=privacy.get("epsilon"), delta=privacy.get("delta"), rho=privacy.get("rho"))
        m = self._measure(plan, tree, _counts(tree), privacy, seed=2)
        assert m.spends, "a plan must report what it spent"
        unit = "rho" if plan.budget_unit == "rho" else "epsilon"
        acc = Accountant(unit=unit, budget=total)
        for s in m.spends:
            assert s.amount > 0 and s.unit == unit
            acc.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
        assert acc.total <= total * (1 + 1e-12)
        if privacy.get("delta") is not None:
            assert acc.delta_total <= privacy["delta"] * (1 + 1e-12)

    def test_same_seed_same_measurements_and_noise_is_added(self, plan, privacy):
        tree = Tree.complete(3, 5)
        x = _counts(tree, 3)
        a = self._measure(plan, tree, x, privacy, seed=7)
        b = self._measure(plan, tree, x, privacy, seed=7)
        np.testing.assert_array_equal(a.values, b.values)
        measured = np.ones(tree.n_nodes, bool) if a.variance is None else np.isfinite(np.asarray(a.variance))
        truth = tree.to_internal(x)
        assert np.any(np.asarray(a.values)[measured] != truth[measured]), "no noise: the true counts came back"
        for key, val in a.info.items():
            if isinstance(val, np.ndarray) and val.shape == truth.shape:
                assert not np.array_equal(val, truth), f"info[{key!r}] holds the true counts"

    @pytest.mark.parametrize("budget", [{"epsilon": 1.0}, {"rho": 0.5}, {"epsilon": 1.0, "delta": 1e-6},
                                        {"epsilon": -1.0}, {}])
    def test_total_answers_every_budget_form_clearly(self, plan, budget):
        try:
            total, g = plan.total(epsilon=budget.get("epsilon"), delta=budget.get("delta"), rho=budget.get("rho"))
        except HierDPError as exc:
            assert str(exc) and "\n" not in str(exc)
            return
        assert total > 0 and g["guarantee"] in ("pure", "zcdp", "approx")

    def test_release_through_the_pipeline(self, plan, privacy):
        from hierdp.pipeline import release

        tree = Tree.complete(2, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotForPublicationWarning)
            r = release(tree, _counts(tree, 5), plan=plan, postprocess=[], seed=11, **privacy)
        assert r.ledger.plan == plan.name
        assert r.ledger.guarantee in ("pure", "zcdp", "approx")
        assert np.shape(r.estimate.values) == (tree.n_nodes,)
