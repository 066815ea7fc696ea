"""Deep trees (issue 35 item 8): a path of 10⁴ levels releases, consistently, with work
linear in the level count (no step re-does all earlier levels at each level)."""

from __future__ import annotations

import numpy as np
import pytest

import hierdp
from hierdp.accounting import Accountant, Spend
from hierdp.errors import BudgetError

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

N_LEVELS = 10_000


def _path(n: int) -> hierdp.Tree:
    return hierdp.Tree.from_parent(np.arange(-1, n - 1))


def test_spend_all_is_spend_one_by_one():
    spends = [Spend(0.1, "epsilon", f"l{i}") for i in range(10)] + [Spend(0.2, "epsilon", "g", group="a"),
                                                                   Spend(0.3, "epsilon", "h", group="a")]
    one, many = Accountant(budget=1.3), Accountant(budget=1.3)
    for s in spends:
        one.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
    many.spend_all(spends)
    assert many.spends == one.spends and many.total == one.total


def test_spend_all_refuses_the_first_spend_that_does_not_fit_as_spend_does():
    spends = [Spend(0.25, "epsilon", f"l{i}") for i in range(6)]
    one, many = Accountant(budget=1.0), Accountant(budget=1.0)
    with pytest.raises(BudgetError) as e1:
        for s in spends:
            one.spend(s.amount, label=s.label)
    with pytest.raises(BudgetError) as e2:
        many.spend_all(spends)
    assert str(e1.value) == str(e2.value) and "l4" in str(e2.value)
    assert many.spends == one.spends


def test_a_path_of_ten_thousand_levels_releases_consistently_with_linear_accounting(monkeypatch):
    summed = []
    total = Accountant._total
    monkeypatch.setattr(Accountant, "_total", staticmethod(lambda spends: summed.append(len(spends)) or total(spends)))
    tree = _path(N_LEVELS)
    values = tree.aggregate(np.random.default_rng(0).integers(0, 5, tree.n_leaves))
    r = hierdp.release(tree, values, epsilon=1.0, seed=1)
    # composing the spends looks at each a bounded number of times (was N_LEVELS² / 2)
    assert sum(summed) < 20 * N_LEVELS
    assert len(r.ledger.levels) == N_LEVELS and r.ledger.epsilon == pytest.approx(1.0)
    est = np.asarray(r.estimate.values, dtype=float)
    # a path: every node has one child, so a consistent release gives every node the same value
    assert np.allclose(est, est[0])
    assert np.all(np.isfinite(r.estimate.variance))



def test_a_deep_path_works_out_each_mechanism_parameter_once_per_budget(monkeypatch):
    """Exact parameters (rationals, ~70 µs each) once per distinct budget, not per level."""
    calls = []
    params = hierdp.mechanisms.DiscreteLaplace.params
    monkeypatch.setattr(hierdp.mechanisms.DiscreteLaplace, "params",
                        lambda self, b, s: calls.append(b) or params(self, b, s))
    tree = _path(2_000)
    hierdp.release(tree, tree.aggregate(np.ones(tree.n_leaves, dtype=np.int64)), epsilon=1.0, seed=2)
    assert len(calls) <= 4, len(calls)


def test_the_ledger_of_a_deep_path_is_compact_as_text_and_complete_as_json():
    tree = _path(N_LEVELS)
    r = hierdp.release(tree, tree.aggregate(np.ones(tree.n_leaves, dtype=np.int64)), epsilon=1.0, seed=2)
    text = str(r.ledger)
    assert len(text) < 2_000, len(text)  # was 548 kB: one line per level
    assert f"{N_LEVELS} levels total ... level_{N_LEVELS - 1} (depths 0-{N_LEVELS - 1}, 1 nodes each)" in text
    back = hierdp.Ledger.from_json(r.ledger.to_json())
    assert back.levels == r.ledger.levels
    assert len(r.ledger.to_json()) < 300_000


def test_a_short_run_of_levels_is_written_level_by_level():
    tree = _path(4)
    r = hierdp.release(tree, tree.aggregate(np.ones(tree.n_leaves, dtype=np.int64)), epsilon=1.0, seed=2)
    assert "  - level_2 (depth 2, 1 nodes): epsilon = 0.25" in str(r.ledger)
