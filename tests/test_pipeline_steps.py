"""The plan protocol and the named steps of a release (issue 29, item 3).

* ``Plan`` declares every flag the pipeline reads, with defaults; the pipeline reads them as
  attributes (no ``getattr`` with a default that would hide a misspelt flag);
* ``Measurements`` lives in ``hierdp.measurements`` (old import path kept), and plans do not
  import the post-processing base for it;
* the steps resolve → check → open_account → measure → account → post_process →
  build_ledger, called one by one, give the bits the original ``release`` gave (digests in
  ``test_pipeline_pinned``), and a refused release uses no randomness.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

import hierdp
from hierdp import pipeline
from hierdp.accounting import Spend
from hierdp.errors import BudgetError, PluginError, PrivacyError
from hierdp.execution.counts import check_values
from hierdp.measurements import Estimate, Measurements
from hierdp.plans.base import Plan
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng

from .test_architecture import import_graph
from .test_pipeline_pinned import CASES, _digest, _tree_and_values

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

FLAGS = {"default_postprocess": ("blue",), "supports_invariants": False, "invariant_covers": ("cells",),
         "takes_neighbours": False, "returns_estimate": False, "runs_by_subtree": False}


class _Minimal(Plan):
    """A third-party plan that declares nothing but its name and unit."""

    name = "minimal_test"
    budget_unit = "epsilon"

    def measure(self, tree, values, *, total, delta, sensitivity, rng):
        mech = hierdp.registry.create("mechanism", "laplace")  # the leaves only (disjoint: parallel composition)
        leaves = tree.internal.n_children == 0
        noisy, var = np.zeros(tree.n_nodes), np.full(tree.n_nodes, np.inf)
        noisy[leaves] = mech.sample(values[leaves], total, sensitivity, rng)
        var[leaves] = mech.variance(total, sensitivity)
        return Measurements(noisy, var, spends=[Spend(total, "epsilon")])


class _KeywordTotal(_Minimal):
    """A plan written for the keyword form of ``total``: refuses budgets above 2."""

    name = "keyword_total_test"

    def total(self, *, epsilon=None, delta=None, rho=None):
        if epsilon is None or epsilon > 2:
            raise PrivacyError("keyword_total_test takes epsilon <= 2")
        return epsilon, {"guarantee": "pure", "epsilon": epsilon, "delta": None, "rho": None}


def test_plan_declares_every_flag_the_pipeline_reads():
    for flag, default in FLAGS.items():
        assert getattr(Plan, flag) == default, flag
        assert flag in Plan.__dict__, f"Plan does not declare {flag}"
    p = _Minimal()
    assert (p.supports_invariants, p.invariant_covers, p.takes_neighbours, p.returns_estimate,
            p.default_postprocess) == (False, ("cells",), False, False, ("blue",))
    assert p.budget_owner == "plan 'minimal_test'"
    m = hierdp.registry.create("plan", "marginals")
    assert (m.supports_invariants, m.invariant_covers, m.takes_neighbours, m.returns_estimate,
            m.default_postprocess) == (True, ("total", "cells"), True, True, ())


def test_pipeline_reads_plan_flags_as_attributes():
    files = [Path(pipeline.__file__), *Path(pipeline.__file__).with_name("execution").glob("*.py")]
    assert len(files) > 5
    hidden = []
    for node in (n for f in files for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) >= 2:
            arg = node.args[1]
            if isinstance(arg, ast.Constant) and arg.value in FLAGS:
                hidden.append(arg.value)
    assert hidden == []


def test_an_undeclaring_plan_gets_the_defaults_in_a_release():
    t = hierdp.Tree.complete(fanout=2, height=2)
    with pytest.raises(PluginError, match="^plan 'minimal_test' cannot keep invariants exact; use plan='per_level' or "
                                          "'marginals', or drop invariants=$"):
        hierdp.release(t, np.array([4, 1, 3]), epsilon=1.0, plan=_Minimal(), neighbours="substitute",
                       invariants=["total"], seed=1)
    r = hierdp.release(t, np.array([4, 1, 3]), epsilon=1.0, plan=_Minimal(), seed=1)
    assert r.ledger.postprocess == ["blue"]


def test_a_plan_overriding_the_keyword_total_is_still_asked():
    t = hierdp.Tree.complete(fanout=2, height=2)
    with pytest.raises(PrivacyError, match="takes epsilon <= 2"):
        hierdp.release(t, np.array([4, 1, 3]), epsilon=3.0, plan=_KeywordTotal(), seed=1)
    assert hierdp.release(t, np.array([4, 1, 3]), epsilon=1.5, plan=_KeywordTotal(), seed=1).ledger.epsilon == 1.5


def test_measurements_have_their_own_module():
    from hierdp.postprocessors import base as pp_base

    assert pp_base.Measurements is Measurements and pp_base.Estimate is Estimate
    assert hierdp.Measurements is Measurements and hierdp.Estimate is Estimate
    graph = import_graph(type_checking=True)
    assert graph["hierdp.measurements"] == set()
    for mod in ("hierdp.plans.base", "hierdp.plans.per_level", "hierdp.plans.ghazi", "hierdp.plans.leaves",
                "hierdp.plans.marginals", "hierdp.pipeline"):
        assert "hierdp.measurements" in graph[mod], mod
        assert "hierdp.postprocessors.base" not in graph[mod] or mod == "hierdp.pipeline", mod


# ------------------------------------------------------------------------ the steps
def _by_steps(tree, values, *, session=None, structure=None, **kw):
    """What ``release`` does, one named step at a time."""
    vals = check_values(tree, values)
    r = pipeline.resolve(tree, n_cells=vals.shape[1] if vals.ndim == 2 else 1, **kw)
    pipeline.check(r, session)
    rng = make_rng(kw.get("seed"))
    internal = tree.to_internal(vals)
    acc, decomposition = pipeline.open_account(r, tree, structure)
    meas = pipeline.measure(r, tree, internal, total=r.total - acc.total, rng=rng, key=pipeline.noise_key(kw.get("seed")))
    guarantee = pipeline.account(r, acc, meas)
    est = pipeline.post_process(r, tree, meas, internal[r.invariants] if r.invariant_names else None)
    ledger = pipeline.build_ledger(r, tree, meas, guarantee, structure=structure, decomposition=decomposition, rng=rng)
    return ReleaseResult(tree=tree, estimate=pipeline.external_estimate(tree, est),
                         measurements=pipeline.external_estimate(tree, Estimate(meas.values, meas.variance,
                                                                                dict(meas.info))),
                         ledger=ledger)


@pytest.mark.parametrize("case, kw", [
    ("per_level", dict(epsilon=1.0, seed=3)),
    ("ghazi", dict(plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-6, seed=6)),
    ("invariants", dict(epsilon=0.7, seed=7, neighbours="substitute", invariants=["total", "level_1"],
                        postprocess=["blue", "nonneg"])),
])
def test_steps_one_by_one_give_the_original_bits(case, kw):
    t, v = _tree_and_values()
    if case == "ghazi":
        v = v * 50
    assert _digest(_by_steps(t, v, **kw)) == CASES[case][1]


def test_resolve_decides_without_true_counts_and_hides_private_notes():
    t, _ = _tree_and_values()
    r = pipeline.resolve(t, epsilon=1.0, rho=None, private_notes={"rows dropped": 987654},
                         neighbours="substitute", invariants=["total"])
    assert r.loss == hierdp.PrivacyLoss(epsilon=1.0) and r.total == 1.0 and r.guarantee["guarantee"] == "pure"
    assert [pp.name for pp in r.postprocessors] == ["blue"] and r.invariant_names == ["level 'total'"]
    assert "987654" not in repr(r) and "invariants=" not in repr(r)
    assert r.measure_keywords().keys() == {"invariants"}


def test_a_refused_release_uses_no_randomness(monkeypatch):
    """The session refuses before the random source is even made (no noise drawn)."""
    made = []
    real = pipeline.make_rng
    monkeypatch.setattr(pipeline, "make_rng", lambda seed: made.append(seed) or real(seed))
    t = hierdp.Tree.complete(fanout=2, height=2)
    s = hierdp.Session(epsilon=1.0)
    hierdp.release(t, np.array([4, 1, 3]), epsilon=0.6, session=s, seed=1)
    assert made == [1]
    with pytest.raises(BudgetError, match="needs epsilon=0.6 but the session has 0.4 left"):
        hierdp.release(t, np.array([4, 1, 3]), epsilon=0.6, session=s, seed=2)
    with pytest.raises(PluginError, match="would treat it as independent measurements"):
        hierdp.release(t, np.array([4, 1, 3]), epsilon=0.1, plan="marginals", postprocess=["blue"], seed=3)
    assert made == [1]


def test_release_keeps_its_signature():
    import inspect

    params = list(inspect.signature(hierdp.release).parameters)
    assert params == ["tree", "values", "epsilon", "delta", "rho", "plan", "mechanism", "budget", "postprocess",
                      "seed", "sensitivity", "privacy_unit", "max_contributions", "session", "notes",
                      "private_notes", "structure", "neighbours", "invariants", "allow_invariants_with_add_remove",
                      "invariants_cover", "check_counts", "split", "executor"]
    # check_counts: issue 35 item 5; split: issue 30 item 1 (releases by subtree); executor: issue 49 item 2
    # (where the subtree tasks run), added last
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        r = hierdp.release(hierdp.Tree.complete(fanout=2, height=2), np.array([4, 1, 3]), epsilon=1.0, seed=1)
    assert r.ledger.guarantee == "pure"
