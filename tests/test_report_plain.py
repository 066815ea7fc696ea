"""The report's plain-language part (issue 53 item 2): what ε (or ρ) means for one person,
what a neighbour is in this release, which tables and cells were published, which figures
were published exactly.

References are worked out by hand from the definitions, not by the code under test: the odds
factor e^ε (e = 2.718281828...), the most one can believe afterwards p' = e^ε p / (1 - p + e^ε p)
(Bayes with a likelihood ratio of at most e^ε), the power of a test at false-positive rate
1/100, at most e^ε/100 + δ; node counts of complete trees (fanout^depth).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import hierdp
from hierdp import _report_plain as plain
from hierdp import report as rep
from hierdp.accounting.ledger import Ledger, LevelSpend
from tests.test_report import PLANTED, _html, _marginals, _per_level, _privtree, html_text

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def paragraphs(text: str) -> dict[str, str]:
    """The plain-language paragraphs of a report page by id, as text (``e<sup>ε</sup>`` read
    as ``e^ε``)."""
    m = re.search(r'<section id="plain-language">(.*?)</section>', text, re.S)
    assert m, "no plain-language section"
    body = m.group(1).replace("<sup>ε</sup>", "^ε")
    return {k: html_text(v) for k, v in re.findall(r'<p id="(plain-[a-z]+)"[^>]*>(.*?)</p>', body, re.S)}


def _ledger(**kw) -> Ledger:
    kw.setdefault("levels", [LevelSpend("total", 0, 0.5, "epsilon", "discrete_laplace", 1, 8.0),
                             LevelSpend("county", 1, 0.5, "epsilon", "discrete_laplace", 12, 8.0)])
    return Ledger(**kw)


# ------------------------------------------------------------------ the numbers, by hand
def test_odds_factor_and_posterior_are_the_hand_computed_values():
    assert plain.odds_factor(1.0) == pytest.approx(2.718281828459045)
    assert plain.odds_factor(0.0) == 1.0
    assert plain.odds_factor(1e6) == math.inf
    # p' = e p / (1 - p + e p): 0.5 -> e / (1 + e); 0.1 -> (e/9) / (1 + e/9)
    assert plain.posterior(0.5, 1.0) == pytest.approx(0.7310585786300049)
    assert plain.posterior(0.1, 1.0) == pytest.approx(0.2319693)
    assert plain.posterior(0.5, 0.0) == 0.5
    assert plain.posterior(0.5, 1e6) == 1.0


# ------------------------------------------------------------------ the page
def test_epsilon_one_reads_as_odds_factor_e(tmp_path):
    text = _html(_per_level(), tmp_path)
    assert text.index('id="plain-language"') < text.index('id="guarantee"')       # near the top, before §1
    p = paragraphs(text)
    assert list(p) == ["plain-loss", "plain-neighbours", "plain-published", "plain-exact"]
    loss = p["plain-loss"]
    assert "privacy-loss parameter is ε = 1." in loss
    assert "at most e^ε = 2.72 times as likely" in loss and "by a factor of at most 2.72" in loss
    assert "even odds (50 %) beforehand can be believed at most 73 % after" in loss
    assert "10 % likely, at most 23 %" in loss
    assert "says “yes” at most 2.72 times in 100" in loss
    assert "δ" not in loss                                                       # pure ε: no slack
    assert "one without them" in loss
    assert "e<sup>ε</sup> = 2.72" in text                                        # e to the power ε, typeset


def test_epsilon_one_half_and_ten_by_hand():
    p = {q.ident: q.text for q in plain.plain_language(_ledger(guarantee="pure", epsilon=0.5))}["plain-loss"]
    # e^0.5 = 1.6487; 0.5 -> 1.6487/2.6487 = 62.2 %; 0.1 -> 0.18319/1.18319 = 15.5 %
    assert "e^ε = 1.65 times" in p and "at most 62 % after" in p and "10 % likely, at most 15 %" in p
    assert "at most 1.65 times in 100" in p
    p = {q.ident: q.text for q in plain.plain_language(_ledger(guarantee="pure", epsilon=10.0))}["plain-loss"]
    # e^10 = 22026.47: a factor past 100 makes the 1-in-100 test bound empty, so it is not stated
    assert "e^ε = 22,026 times" in p and "at most 99.995 % after" in p and "times in 100" not in p


def test_zcdp_reads_its_epsilon_at_delta_with_the_slack():
    led = _ledger(guarantee="zcdp", epsilon=3.0, delta=1e-6, rho=0.25,
                  levels=[LevelSpend("total", 0, 0.25, "rho", "discrete_gaussian", 1, 2.0)])
    loss = {q.ident: q.text for q in plain.plain_language(led)}["plain-loss"]
    assert "zero-concentrated differential privacy with ρ = 0.25, which the ledger states as ε = 3 at δ = 1e-06" \
        in loss
    # e^3 = 20.0855; 0.5 -> 20.0855/21.0855 = 95.3 %; 0.1 -> 2.23172/3.23172 = 69.1 %; 100 (e^3/100 + δ) = 20.0856
    assert "e^ε = 20.1 times as likely" in loss and "give or take an extra probability of at most δ = 1e-06" in loss
    assert "Leaving δ aside" in loss and "at most 95 % after" in loss and "10 % likely, at most 69 %" in loss
    assert "at most 20.1 times in 100" in loss and "adds its own ρ" in loss
    # no δ in the ledger: no odds factor made up
    bare = {q.ident: q.text for q in plain.plain_language(_ledger(guarantee="zcdp", epsilon=None, rho=0.25))}
    assert "no single odds factor" in bare["plain-loss"] and "e^ε" not in bare["plain-loss"]


def test_substitution_invariants_and_cells(tmp_path):
    result = _marginals()                       # substitute, invariants total and state, age x sex cells
    p = paragraphs(_html(result, tmp_path))
    assert "one where they are replaced by another person's" in p["plain-loss"]
    assert "e^ε = 7.39" in p["plain-loss"]                        # ε = 2: e² = 7.389
    assert "have the same number of people and differ in one person's records" in p["plain-neighbours"]
    pub = p["plain-published"]
    # 2 states of 2 counties each: 1 + 2 + 4 rows; 4 cells each: 28 figures
    assert "3 levels were published" in pub and "total (1 row), state (2 rows) and county (4 rows); 7 rows in all" \
        in pub
    assert "Each row is split into 4 cells, age (2: young, old) × sex (2: F, M): 28 published figures." in pub
    exact = p["plain-exact"]
    assert "published exactly, without noise, and are NOT protected" in exact
    for inv in result.ledger.invariants:
        assert inv in exact


def test_the_unit_its_bound_and_an_unmeasured_level():
    led = _ledger(guarantee="pure", epsilon=1.0, privacy_unit="one value of column 'person_id'",
                  max_contributions=3,
                  levels=[LevelSpend("total", 0, 0.0, "epsilon", "discrete_laplace", 1, math.inf),
                          LevelSpend("county", 1, 1.0, "epsilon", "discrete_laplace", 12, 8.0)])
    p = {q.ident: q.text for q in plain.plain_language(led)}
    assert "as the ledger records it: one value of column 'person_id'." in p["plain-neighbours"]
    assert "at most 3 rows (capped before the noise was added)" in p["plain-neighbours"]
    assert "added or removed" in p["plain-neighbours"]
    assert "Not measured (no budget spent on it): total; its figures" in p["plain-published"]
    assert "total (1 row) and county (12 rows); 13 rows in all" in p["plain-published"]
    # a unit that is not a person is called a unit
    seq = {q.ident: q.text for q in plain.plain_language(_ledger(guarantee="pure", epsilon=1.0,
                                                                 privacy_unit="one sequence"))}
    assert "any one unit in the data" in seq["plain-loss"] and "person" not in seq["plain-loss"]


def test_the_form_of_the_published_figures_follows_the_chain(tmp_path):
    p = paragraphs(_html(_per_level(postprocess=["blue", "nonneg", "round"]), tmp_path, "r.html"))
    assert "whole numbers, none below zero" in p["plain-published"]
    p = paragraphs(_html(_per_level(), tmp_path, "b.html"))
    assert "can be below zero or fractional" in p["plain-published"]
    # complete tree, fanout 3, three levels: 1 + 3 + 9 rows
    assert "nation (1 row), region (3 rows) and district (9 rows); 13 rows in all" in p["plain-published"]
    assert p["plain-exact"] == "Nothing: every published figure carries noise."


def test_a_seeded_release_is_cautioned_first(tmp_path):
    p = paragraphs(_html(_per_level(seed=5), tmp_path))
    assert list(p)[0] == "plain-caution"
    assert "NOT FOR PUBLICATION (seeded randomness (seed=5))" in p["plain-caution"]


def test_a_points_release_says_what_was_measured_and_that_its_cells_came_from_the_data(tmp_path):
    result = _privtree()
    p = paragraphs(_html(result, tmp_path))["plain-published"]
    depth = np.asarray(result.tree.depth)
    assert f"{depth.max() + 1} levels were published" in p and f"{result.tree.n_nodes:,} rows in all" in p
    leaves = result.ledger.levels[0]
    assert f"Measured with noise: leaves ({leaves.n_nodes:,} rows)" in p
    assert "chosen from the data (privtree)" in p


def test_a_deep_chain_is_named_as_runs():
    tree = hierdp.Tree.from_parent(np.arange(-1, 29))          # 30 levels, one node each
    result = hierdp.release(tree, np.full(30, 3), epsilon=3.0, postprocess=[])
    p = {q.ident: q.text for q in plain.plain_language(result.ledger, result)}["plain-published"]
    assert "30 levels were published, one table each with one row per unit of the level: the 30 levels total … " \
           "level_29 (1 row each); 30 rows in all." in p


def test_a_ledger_alone_has_the_section_and_no_true_count(tmp_path):
    result = _per_level()
    text = rep.report_html(Ledger.from_json(result.ledger.to_json()))
    p = paragraphs(text)
    assert "nation (1 row), region (3 rows) and district (9 rows)" in p["plain-published"]
    for body in paragraphs(_html(result, tmp_path)).values():
        assert str(PLANTED) not in body and f"{PLANTED:,}" not in body
