"""Invariants: nodes published exactly, honoured by every estimator.

References built here, never from the code under test: the equality-constrained weighted
least squares by its dense KKT system (numpy), the non-negative one by scipy's SLSQP, and
an empirical audit on substitution neighbours that keep (or break) the invariants.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize

import hierdp
from hierdp.accounting.audit import audit
from hierdp.accounting.ledger import Ledger
from hierdp.errors import BudgetError, DataError, PluginError, PrivacyError
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.per_level import PerLevel
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.nonneg import nonneg
from hierdp.rng import make_rng

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _random_tree(rng, n_max=25):
    parent = [-1]
    for i in range(1, int(rng.integers(6, n_max))):
        parent.append(int(rng.integers(0, i)))
    return hierdp.Tree.from_parent(parent)


def _incidence(t):
    """M[v, j] = 1 when leaf j (tree.leaves order) lies under node v (external ids)."""
    M = np.zeros((t.n_nodes, t.n_leaves))
    for j, leaf in enumerate(t.leaves):
        v = int(leaf)
        while v >= 0:
            M[v, j] = 1.0
            v = int(t.parent[v])
    return M


def _dense_constrained_ls(t, y, v, exact):
    """min sum over measured non-exact nodes (x - y)^2 / v s.t. x = M l, x[exact] = y[exact]:
    the KKT system [[M'WM, E'], [E, 0]] [l; lam] = [M'Wy; c]. Returns x and the exact
    variance of each x (x is linear in the measurements: x = P y_measured + const)."""
    M = _incidence(t)
    meas = np.flatnonzero(np.isfinite(v) & ~exact)
    W = np.diag(1.0 / v[meas])
    A = M[meas]
    E = M[exact]
    m = t.n_leaves
    K = np.block([[A.T @ W @ A, E.T], [E, np.zeros((E.shape[0], E.shape[0]))]])
    rhs = np.concatenate([A.T @ W @ y[meas], y[exact]])
    # dependent invariants (an exact parent of exact children) make K singular in the
    # multipliers only; the leaf part of the least-squares solution is unique
    sol = np.linalg.lstsq(K, rhs, rcond=None)[0]
    x = M @ sol[:m]
    # P: response of x to each measured value (the constants c do not vary)
    R = np.vstack([A.T @ W, np.zeros((E.shape[0], meas.size))])
    P = M @ np.linalg.lstsq(K, R, rcond=None)[0][:m]
    var = (P ** 2 * v[meas][None, :]).sum(axis=1)
    return x, var


@pytest.mark.parametrize("seed", range(12))
def test_blue_with_invariants_equals_dense_constrained_least_squares(seed):
    rng = np.random.default_rng(seed)
    t = _random_tree(rng)
    true = t.aggregate(rng.integers(0, 50, t.n_leaves)).astype(float)
    v = rng.uniform(0.5, 4.0, t.n_nodes)
    internal = np.flatnonzero(t.n_children > 0)
    v[rng.choice(internal, size=internal.size // 3, replace=False)] = np.inf  # unmeasured internal nodes
    exact = np.zeros(t.n_nodes, dtype=bool)
    exact[rng.choice(t.n_nodes, size=max(1, t.n_nodes // 4), replace=False)] = True
    y = true + rng.normal(0, 2.0, t.n_nodes)
    y[exact] = true[exact]
    v[exact] = 0.0
    est = hierdp.postprocess("blue", t, y, variance=v)
    x_ref, var_ref = _dense_constrained_ls(t, y, v, exact)
    assert np.max(np.abs(est.values - x_ref)) <= 1e-8 * np.max(np.abs(x_ref))
    assert np.max(np.abs(est.variance - var_ref)) <= 1e-8 * np.max(var_ref)
    assert np.all(est.values[exact] == pytest.approx(true[exact], abs=1e-9))
    assert np.all(est.variance[exact] == 0.0)
    gmc = hierdp.postprocess("gmc", t, y, variance=v)
    np.testing.assert_allclose(gmc.values, x_ref, rtol=0, atol=1e-8 * np.max(np.abs(x_ref)))


@pytest.mark.parametrize("seed", range(8))
def test_nonneg_with_invariants_is_optimal_and_exact(seed):
    """Against SLSQP on the leaf variables with the invariants as equality constraints."""
    rng = np.random.default_rng(100 + seed)
    t = _random_tree(rng, 18)
    k = 2
    true = t.aggregate(rng.integers(0, 4, (t.n_leaves, k))).astype(float)
    v = rng.uniform(0.5, 3.0, t.n_nodes)
    y = true + rng.normal(0, 3.0, true.shape)
    exact = np.zeros(t.n_nodes, dtype=bool)
    exact[rng.choice(t.n_nodes, size=2, replace=False)] = True
    y[exact] = true[exact]
    v[exact] = 0.0
    x, info = nonneg(t, t.to_internal(y), t.to_internal(v))
    x = t.to_external(x)
    assert info["converged"]
    M = _incidence(t)
    meas = ~exact
    rows: list[int] = []  # independent invariant rows (SLSQP needs full-rank equalities)
    for r in np.flatnonzero(exact):
        if np.linalg.matrix_rank(M[rows + [r]]) == len(rows) + 1:
            rows.append(r)
    for c in range(k):
        np.testing.assert_allclose(x[exact, c], true[exact, c], atol=1e-9)
        assert x[:, c].min() >= 0
        np.testing.assert_allclose(x[:, c], M @ x[t.leaves, c], atol=1e-9)  # consistent

        def f(leaf, c=c):
            return 0.5 * np.sum((M[meas] @ leaf - y[meas, c]) ** 2 / v[meas])

        res = minimize(f, np.full(t.n_leaves, 1.0), jac=lambda z, c=c: M[meas].T @ ((M[meas] @ z - y[meas, c]) / v[meas]),
                       bounds=[(0, None)] * t.n_leaves, method="SLSQP",
                       constraints=[{"type": "eq", "fun": lambda z, c=c: M[rows] @ z - y[rows, c],
                                     "jac": lambda z: M[rows]}], options={"ftol": 1e-14, "maxiter": 2000})
        assert res.success
        assert f(x[t.leaves, c]) <= res.fun + 1e-7 * (1 + res.fun)


CHAINS = [["blue"], ["gmc"], ["blue", "nonneg"], ["blue", "nonneg", "round"], ["gmc", "nonneg", "round"],
          ["nonneg", "round"]]


@pytest.mark.parametrize("chain", CHAINS, ids="-".join)
def test_every_output_keeps_the_invariants(chain):
    t = hierdp.Tree.complete(fanout=3, height=4)
    rng = np.random.default_rng(4)
    vals = t.aggregate(rng.integers(0, 6, t.n_leaves))
    inv_nodes = [5, 7, 20]  # a level-2 node, another, and a leaf
    r = hierdp.release(t, vals, epsilon=0.5, seed=5, neighbours="substitute", invariants=["level_1", *inv_nodes],
                       postprocess=chain)
    idx = np.r_[0, 1:4, inv_nodes]  # the root is implied (the sum of level_1)
    assert np.array_equal(r.estimate.values[idx], vals[idx])
    if r.estimate.variance is not None:
        assert np.all(r.estimate.variance[idx] == 0.0)
        assert np.all(r.estimate.variance[np.setdiff1d(np.arange(t.n_nodes), idx)] > 0)
    x = np.asarray(r.estimate.values, dtype=float)
    np.testing.assert_allclose(t.aggregate(x[t.leaves]), x, atol=1e-6)  # consistent
    if "round" in chain:
        assert r.estimate.values.dtype.kind == "i" and r.estimate.values.min() >= 0


def test_budget_skips_invariant_levels():
    t = hierdp.Tree.complete(fanout=2, height=4)
    vals = t.aggregate(np.arange(t.n_leaves))
    r = hierdp.release(t, vals, epsilon=1.5, seed=1, neighbours="substitute", invariants=["level_1"])
    # level_1 invariant implies the total: 'equal' splits 1.5 over the two other levels
    assert r.ledger.by_level() == pytest.approx({"total": 0.0, "level_1": 0.0, "level_2": 0.75, "level_3": 0.75})
    assert [ls.noise_variance for ls in r.ledger.levels[:2]] == [0.0, 0.0]
    with pytest.raises(BudgetError, match="level 'level_1' is an invariant"):
        hierdp.release(t, vals, epsilon=1.0, seed=1, neighbours="substitute", invariants=["level_1"],
                       budget={"level_1": 0.5, "level_3": 0.5})


def test_invariants_need_substitution_or_an_explicit_opt_in():
    t = hierdp.Tree.complete(fanout=2, height=2)
    with pytest.raises(PrivacyError, match="neighbours='substitute'"):
        hierdp.release(t, np.array([2, 1, 1]), epsilon=1.0, seed=1, invariants=["total"])
    r = hierdp.release(t, np.array([2, 1, 1]), epsilon=1.0, seed=1, invariants=["total"],
                       allow_invariants_with_add_remove=True)
    assert r.ledger.neighbours == "add_remove" and r.ledger.invariants == ["level 'total'"]
    text = str(r.ledger)
    assert "NOT protected" in text and "leave them unchanged" in text


def test_plans_that_cannot_keep_invariants_refuse_them():
    t = hierdp.Tree.complete(fanout=2, height=3)
    with pytest.raises(PluginError, match="cannot keep invariants exact"):
        hierdp.release(t, t.aggregate(np.ones(4, int)), epsilon=1.0, delta=1e-6, plan="ghazi", seed=1,
                       neighbours="substitute", invariants=["total"])


def test_unknown_invariant_and_ledger_round_trip():
    t = hierdp.Tree.complete(fanout=2, height=2)
    with pytest.raises(DataError, match="unknown invariant level 'levl_1'"):
        hierdp.release(t, np.array([2, 1, 1]), epsilon=1.0, seed=1, neighbours="substitute", invariants=["levl_1"])
    r = hierdp.release(t, np.array([2, 1, 1]), epsilon=1.0, seed=1, neighbours="substitute", invariants=["total"])
    back = Ledger.from_json(r.ledger.to_json())
    assert back.invariants == ["level 'total'"] and back.neighbours == "substitute"
    d = json.loads(r.ledger.to_json())
    d.pop("invariants")
    assert Ledger.from_dict(d).invariants == []


def test_frames_take_label_paths_and_cells_stay_exact():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"state": rng.choice(["A", "B"], 400), "county": rng.choice(["x", "y", "z"], 400),
                       "sex": rng.choice(["F", "M"], 400)})
    dpt = df.dptree(levels=["state", "county"], domains="observed", cells={"sex": ["F", "M"]})
    with pytest.raises(PluginError, match="invariants_cover='cells'"):
        dpt.release(epsilon=1.0, seed=2, neighbours="substitute", invariants=["state"])  # totals: per_level cannot
    r = dpt.release(epsilon=1.0, seed=2, neighbours="substitute", invariants=["state", ("A", "x")],
                    invariants_cover="cells", postprocess=["blue", "nonneg", "round"])
    true = dpt.true_counts()
    t = dpt.tree
    for node in (t.node_id(), t.node_id("A"), t.node_id("B"), t.node_id("A", "x")):
        assert np.array_equal(r.estimate.values[node], true[node])
    assert "node A/x" in r.ledger.invariants


def _llr(noisy, x0, x1, scale):
    return ((np.abs(noisy - x0) - np.abs(noisy - x1)) / scale).sum(axis=1)


@pytest.mark.parametrize("keeps,violates", [(True, False), (False, True)])
def test_audit_on_substitutions_that_keep_the_invariants(keeps, violates):
    """level_1 invariant (and the total it implies). A person moving between two leaves of
    the same level_1 node keeps the invariants: the release (measurements then BLUE) stays
    within ε. Moving across level_1 nodes changes an invariant: no guarantee, and the audit
    shows it (the invariant nodes differ, the event separates the inputs)."""
    eps = 1.0
    t = hierdp.Tree.complete(fanout=2, height=4)   # 8 leaves; leaves 7..10 under node 1
    base = np.array([3, 0, 2, 0, 1, 1, 0, 2])
    moved = base.copy()
    if keeps:
        moved[0] -= 1
        moved[3] += 1       # leaf 7 -> leaf 10, both under level_1 node 1, different level_2 nodes
    else:
        moved[0] -= 1
        moved[4] += 1       # leaf 7 -> leaf 11, under the other level_1 node
    x0, x1 = t.aggregate(base), t.aggregate(moved)
    mask = np.zeros(t.n_nodes, dtype=bool)
    mask[:3] = True         # total, level_1 (complete tree: internal order = external)
    plan = PerLevel(mechanism="discrete_laplace", budget="equal")
    sens = Sensitivity().for_neighbours("substitute")
    b = eps / 2  # two measured levels (level_2, level_3)
    scale = np.where(mask, np.inf, sens.l1 / b)

    def sample(x, m, rng):
        vals = np.ascontiguousarray(np.broadcast_to(x[:, None], (t.n_nodes, m)))
        meas = plan.measure(t, vals, total=eps, delta=None, sensitivity=sens, rng=rng, invariants=mask)
        est = blue(t, meas.values.astype(float), meas.variance)   # the release's estimator
        return np.hstack([meas.values.T.astype(float), est.values.T])

    def stat(out):
        noisy = out[:, :t.n_nodes]
        llr = _llr(noisy[:, ~mask], x0[~mask], x1[~mask], scale[~mask])
        # an invariant node that differs gives the attacker certainty
        return llr + 1e3 * np.abs(noisy[:, mask] - x0[mask]).sum(axis=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = audit(sample, x0, x1, statistic=stat, n=40_000, claimed=eps, rng=make_rng(3))
    assert res.violates is violates, str(res)


def _census_spec(tmp_path, privacy_extra: str, budget: str = "per_level: {county: 1.0, tract: 1.0}"):
    import shutil
    from pathlib import Path

    ex = Path(hierdp.__file__).parent / "examples"
    shutil.copytree(ex / "data", tmp_path / "data")
    text = (ex / "census.yaml").read_text()
    text = text.replace("  epsilon: 2.0\n", "  epsilon: 2.0\n" + privacy_extra)
    text = text.replace("per_level: {total: 0.2, state: 0.3, county: 0.5, tract: 1.0}", budget)
    text = text.replace("path: out/census.csv", f"path: {tmp_path / 'out' / 'c.csv'}")
    spec = tmp_path / "c.yaml"
    spec.write_text(text)
    return spec


def test_specs_state_neighbours_and_invariants(tmp_path):
    from hierdp.spec import run_spec

    spec = _census_spec(tmp_path, "  neighbours: substitute\n  invariants: [total, state]\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_spec(str(spec), seed=3, write=False)
    assert r.ledger.neighbours == "substitute"
    assert r.ledger.invariants == ["level 'total'", "level 'state'"]
    f = r.frame
    top = f[f.level.isin(["total", "state"])]
    assert (top["std"] == 0).all()


def test_spec_validation_refuses_invariants_under_add_remove(tmp_path):
    from hierdp.errors import SpecError
    from hierdp.spec import validate

    spec = _census_spec(tmp_path, "  invariants: [total, stat]\n")
    with pytest.raises(SpecError) as info:
        validate(str(spec))
    text = str(info.value)
    assert "privacy.invariants" in text and "neighbours='substitute'" in text and "did you mean 'state'" in text
