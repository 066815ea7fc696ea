"""Exact shares (issue 34 item 3): per-level budgets given as rationals stay exact to the ledger."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import hierdp
from hierdp.accounting.ledger import Ledger
from hierdp.errors import BudgetError, SpecError
from hierdp.report import budget_rows
from hierdp.spec import validate

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")



def _tree() -> tuple[hierdp.Tree, np.ndarray]:
    t = hierdp.Tree.complete(fanout=2, height=3)
    return t, t.aggregate(np.arange(t.n_leaves) % 7 + 3)


def _shares() -> dict[str, str]:
    """Three rationals adding up to exactly 1."""
    a, b = Fraction(1440, 4099000007), Fraction(1000, 4099000007)
    return {"total": str(a), "level_1": str(b), "level_2": str(1 - a - b)}


def test_rational_budgets_reach_the_ledger_and_the_report_exactly():
    t, v = _tree()
    shares = _shares()
    led = hierdp.release(t, v, epsilon=1.0, budget=shares, mechanism="discrete_laplace", seed=1).ledger
    assert {ls.level: ls.budget_exact for ls in led.levels} == shares
    assert all(ls.budget == float(Fraction(shares[ls.level])) for ls in led.levels)  # the number measured with
    back = Ledger.from_json(led.to_json())
    assert {ls.level: ls.budget_exact for ls in back.levels} == shares
    rows = budget_rows(back)
    assert {r["name"]: r["rational"] for r in rows} == {k: Fraction(x) for k, x in shares.items()}
    assert sum(r["share"] for r in rows) == 1  # exactly: the shares are the rationals given
    # a Fraction works the same; a list too
    led2 = hierdp.release(t, v, epsilon=1.0, budget=[Fraction(x) for x in shares.values()],
                          mechanism="discrete_laplace", seed=1).ledger
    assert [ls.budget_exact for ls in led2.levels] == list(shares.values())


def test_numbers_leave_the_ledger_as_it_was():
    t, v = _tree()
    led = hierdp.release(t, v, epsilon=1.0, budget=[0.25, 0.25, 0.5], mechanism="discrete_laplace", seed=1).ledger
    assert all(ls.budget_exact == "" for ls in led.levels)
    assert "budget_exact" not in led.to_json()
    strat = hierdp.release(t, v, epsilon=1.0, mechanism="discrete_laplace", seed=1).ledger
    assert "budget_exact" not in json.dumps(strat.to_dict())


@pytest.mark.parametrize("bad", ["1440/0", "abc", "-1/3", "1.5/2"])
def test_a_malformed_rational_is_one_clear_error(bad):
    t, v = _tree()
    with pytest.raises(BudgetError, match=r"budget for level 'total' must be a finite number >= 0 \(or an exact "
                                          r"rational such as '1440/4099'\)"):
        hierdp.release(t, v, epsilon=1.0, budget={"total": bad, "level_1": 0.5, "level_2": 0.5},
                       mechanism="discrete_laplace", seed=1)


SPEC = ("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}, "
        "{name: county, domain: observed}]}\nprivacy: {epsilon: 1}\n")


def test_a_spec_keeps_rational_shares_to_the_ledger():
    budget = 'budget: {per_level: {total: "1440/4099", state: "1000/4099", county: "1659/4099"}}\n'
    led = hierdp.run_spec(SPEC + budget, seed=1, write=False).ledger
    assert {ls.level: ls.budget_exact for ls in led.levels} == {"total": "1440/4099", "state": "1000/4099",
                                                               "county": "1659/4099"}
    with pytest.raises(SpecError, match="per-level budgets sum to"):
        validate(SPEC + 'budget: {per_level: {total: "1440/4099", state: "1000/4099", county: "1658/4099"}}\n')
    with pytest.raises(SpecError, match=r"budget\.per_level\.total"):
        validate(SPEC + 'budget: {per_level: {total: "a/b", state: 0.5, county: 0.5}}\n')
