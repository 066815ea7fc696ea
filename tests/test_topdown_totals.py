"""Top-down ``nonneg``/``round`` under node-total invariants (issue 31: the P.L. 94 chain with
US and state totals exact, by subtree): the joint projection of an invariant parent's
children against a brute-force quadratic programme and its KKT conditions, the controlled
rounding against enumeration of every floor/ceiling choice, and whole releases (the
``marginals`` plan, ``invariants_cover="total"``) in memory and by subtree."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest

from hierdp.errors import DataError
from hierdp.pipeline import release
from hierdp.postprocessors import _totals as TT
from hierdp.postprocessors.topdown import topdown_nonneg, topdown_round
from hierdp.tree import Tree
from tests.test_split import assert_same, random_tree

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _kkt_ok(x: np.ndarray, y: np.ndarray, var: np.ndarray, rows: np.ndarray, cols: np.ndarray | None,
            optimal: bool = True) -> None:
    """Feasible and (``optimal``) optimal: the gradient (x - y) / var is a_i + b_c on the
    support and at least it off the support (x = 0): the projection's optimality
    conditions, checked by recovering a, b by least squares on the support (unique when
    every row and column has support)."""
    assert (x >= 0).all()
    np.testing.assert_allclose(x.sum(axis=1), rows, atol=1e-7 * (1 + rows.max()))
    if cols is not None:
        np.testing.assert_allclose(x.sum(axis=0), cols, atol=1e-7 * (1 + cols.max()))
    if not optimal:
        return
    m, k = x.shape
    g = (x - y) / var
    sup = x > 1e-9
    # unknowns a (m) and b (k): g_ic = a_i + b_c on the support
    ri, ci = np.nonzero(sup)
    from scipy import sparse
    from scipy.sparse.linalg import lsqr

    e = np.arange(ri.size)
    A = sparse.csr_matrix((np.ones(ri.size), (e, ri)), shape=(ri.size, m + k))
    if cols is not None:
        A = A + sparse.csr_matrix((np.ones(ri.size), (e, m + ci)), shape=(ri.size, m + k))
    sol = lsqr(A, g[ri, ci], atol=1e-14, btol=1e-14, iter_lim=100000)[0]
    a = sol[:m]
    b = sol[m:] if cols is not None else np.zeros(k)
    lam = a[:, None] + b[None, :]
    scale = 1 + np.abs(g).max()
    assert np.abs((g - lam)[sup]).max() < 1e-6 * scale
    assert ((g - lam)[~sup] >= -1e-6 * scale).all()  # x = 0 only where moving up would not help


@pytest.mark.parametrize("seed", range(6))
def test_table_projection_is_the_constrained_least_squares(seed: int) -> None:
    """Against scipy's SLSQP on the same quadratic programme and the KKT conditions: rows and
    columns exact, zero rows and columns, negative estimates, unequal variances."""
    r = np.random.default_rng(seed)
    m, k = int(r.integers(1, 5)), int(r.integers(1, 7))
    y = r.normal(2.0, 3.0, (m, k))
    var = r.uniform(0.3, 3.0, (m, k))
    rows = r.integers(0, 12, m).astype(float)
    if seed % 3 == 0:
        rows[0] = 0.0
    cols = r.dirichlet(np.ones(k)) * rows.sum()
    if seed % 2 and k > 1:
        cols[-1] += cols[0]
        cols[0] = 0.0
    x = TT.nonneg_table(y, var, rows, cols)
    _kkt_ok(x, y, var, rows, cols, optimal=False)  # zero rows/columns: multipliers not unique; SLSQP below
    ref = _dykstra(y, var, rows, cols)
    np.testing.assert_allclose(x, ref, atol=1e-6 * (1 + rows.max()))


def _simplex_bisect(u: np.ndarray, s: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per row: the weighted projection of ``u`` onto {z >= 0, sum z = target}:
    z = max(0, u + t s) with t found by bisection (independent of the library's sorted
    breakpoints)."""
    lo = (-u / s).min(axis=1) - 1.0
    hi = (-u / s).max(axis=1) + target / s.min(axis=1) + 1.0
    for _ in range(100):
        t = (lo + hi) / 2
        low = np.maximum(0, u + t[:, None] * s).sum(axis=1) < target
        lo, hi = np.where(low, t, lo), np.where(low, hi, t)
    return np.maximum(0, u + hi[:, None] * s)


def _dykstra(y: np.ndarray, var: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Dykstra's alternating projections (weighted norm) onto the row set and the column set
    (each with z >= 0): converges to the projection onto their intersection."""
    x = y.copy()
    p = np.zeros_like(y)
    q = np.zeros_like(y)
    for _ in range(50000):
        u = x + p
        z = _simplex_bisect(u, var, rows)
        p = u - z
        u = z + q
        x_new = _simplex_bisect(u.T, var.T, cols).T
        q = u - x_new
        if np.abs(x_new - x).max() < 1e-13:
            return x_new
        x = x_new
    return x


def test_row_only_projection_and_large_tables() -> None:
    """The root (one row, no parent): the closest non-negative cells summing to its total;
    and a census-sized 51 x 2,016 table converges with exact margins."""
    r = np.random.default_rng(3)
    y = r.normal(5, 4, (1, 50))
    var = r.uniform(0.5, 2, (1, 50))
    x = TT.nonneg_table(y, var, np.array([300.0]), None)
    _kkt_ok(x, y, var, np.array([300.0]), None)
    m, k = 51, 2016
    w = r.pareto(1.0, k) + 0.01
    true = np.stack([r.multinomial(int(p), w / w.sum()) for p in r.integers(10**4, 10**6, m)]).astype(float)
    var = r.uniform(15, 60, (m, k))
    y = true + r.normal(size=(m, k)) * np.sqrt(var)
    x = TT.nonneg_table(y, var, true.sum(1), true.sum(0))
    _kkt_ok(x, y, var, true.sum(1), true.sum(0))


@pytest.mark.parametrize("seed", range(10))
def test_controlled_rounding_is_the_best_floor_or_ceiling(seed: int) -> None:
    """Every entry its floor or ceiling, rows and columns exact, and the smallest weighted
    squared distance among all such roundings (enumerated), with weights that matter."""
    r = np.random.default_rng(100 + seed)
    m, k = 3, 4
    x = r.integers(0, 6, (m, k)).astype(float)
    rows, cols = x.sum(1), x.sum(0)
    for _ in range(5):  # zero-margin cycle moves keep the integer margins and make fractions
        i, j = r.permutation(m)[:2]
        c, d = r.permutation(k)[:2]
        mv = float(np.clip(r.uniform(-0.9, 0.9), -min(x[i, c], x[j, d]), min(x[i, d], x[j, c])))
        x[i, c] += mv
        x[j, d] += mv
        x[i, d] -= mv
        x[j, c] -= mv
    var = np.exp(r.uniform(-3, 2, (m, k)))
    got = TT.round_table(x, var, rows, cols)
    assert (got >= 0).all() and (got.sum(1) == rows).all() and (got.sum(0) == cols).all()
    assert (np.abs(got - x) < 1).all()
    best = np.inf
    fl = np.floor(x)
    for up in itertools.product((0, 1), repeat=m * k):
        cand = fl + np.reshape(up, (m, k))
        if (cand.sum(1) == rows).all() and (cand.sum(0) == cols).all() and (np.abs(cand - x) < 1).all():
            best = min(best, ((cand - x) ** 2 / var).sum())
    assert ((got - x) ** 2 / var).sum() <= best + 1e-9


def test_row_only_rounding_is_the_weighted_largest_remainder() -> None:
    """One row (the root): the entries rounded up are those whose rounding up costs least in
    the weighted norm, (1 - 2f) / var — here the first (0.2), not the largest remainder
    (0.45, whose variance 0.1 makes moving it dear)."""
    x = np.array([[0.4, 1.15, 2.45]])
    var = np.array([[1.0, 1.0, 0.1]])
    np.testing.assert_array_equal(TT.round_table(x, var, np.array([4.0]), None), [[1, 1, 2]])


def _tree_and_counts(seed: int, k: int = 6, n: int = 600) -> tuple[Tree, np.ndarray]:
    t = random_tree(n, 4, seed=seed)
    r = np.random.default_rng(seed)
    leaves = r.integers(0, 4, size=(t.n_leaves, k)) * (r.random((t.n_leaves, k)) < 0.4)
    return t, t.aggregate(leaves)


def test_topdown_functions_keep_totals_and_cells_consistent() -> None:
    """``topdown_nonneg``/``topdown_round`` with ``totals`` on the first two levels: those
    totals exact, every node non-negative, every cell consistent down the tree."""
    t, vals = _tree_and_counts(5)
    r = np.random.default_rng(1)
    y = t.to_internal(vals + r.normal(0, 2.0, vals.shape))
    var = np.full(t.n_nodes, 4.0)
    d = t.internal.depth
    tot = np.where(d <= 1, t.to_internal(vals).sum(axis=1).astype(float), np.nan)
    from hierdp.postprocessors.blue import blue

    b = blue(t, y, var)
    x = topdown_nonneg(t, b.values, b.variance, totals=tot)
    assert (x >= 0).all()
    np.testing.assert_allclose(x[d <= 1].sum(axis=1), tot[d <= 1], rtol=1e-10)
    z = topdown_round(t, x, b.variance, totals=tot)
    assert z.dtype == np.int64 and (z >= 0).all()
    np.testing.assert_array_equal(z[d <= 1].sum(axis=1), tot[d <= 1].astype(np.int64))
    ext = t.to_external(z)
    assert all(t.is_consistent(ext[:, c]) for c in range(vals.shape[1]))
    with pytest.raises(DataError, match="invariants from the top"):
        topdown_nonneg(t, b.values, b.variance, totals=np.where(d == 1, tot, np.nan))
    with pytest.raises(DataError, match="either fixed_root or totals"):
        topdown_nonneg(t, b.values, b.variance, totals=tot, fixed_root=1.0)


def _plan() -> dict[str, Any]:
    return {"name": "marginals", "cells": {"a": 3, "b": 2}, "mechanism": "discrete_gaussian",
            "strategy": {"L2": {("a",): 0.4, ("b",): 0.3, (): 0.3}}}


CHAIN = ["nonneg", {"name": "round", "method": "topdown"}]


def test_census_chain_with_total_invariants_in_memory_and_by_subtree() -> None:
    """The P.L. 94 chain on a small tree: ``marginals`` (discrete Gaussian) with the totals of
    the first two levels invariant, then top-down ``nonneg`` and ``round``: totals exact,
    consistent non-negative integers; by subtree, ``nonneg`` equals the in-memory release to
    round-off and ``round`` is within 1 of it (rounding is discontinuous at round-off ties)
    with the same totals."""
    t, vals = _tree_and_counts(7)
    kw: dict[str, Any] = dict(rho=0.5, seed=3, plan=_plan(), invariants=["L0", "L1"], invariants_cover="total",
                              allow_invariants_with_add_remove=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_nn = release(t, vals, postprocess=["nonneg"], **kw)
        ref = release(t, vals, postprocess=CHAIN, **kw)
    inv = np.concatenate((t.level_nodes("L0"), t.level_nodes("L1")))
    x = ref.estimate.values
    assert x.dtype == np.int64 and (x >= 0).all()
    np.testing.assert_array_equal(x[inv].sum(axis=1), vals[inv].sum(axis=1))
    assert all(t.is_consistent(x[:, c]) for c in range(vals.shape[1]))
    assert not np.array_equal(x[inv], vals[inv])  # only the totals are exact, not the cells
    for split in ("L1", "L3"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nn = release(t, vals, postprocess=["nonneg"], split=split, **kw)
            got = release(t, vals, postprocess=CHAIN, split=split, **kw)
        assert_same(nn.estimate.values, ref_nn.estimate.values)
        g = got.estimate.values
        assert np.abs(g - x).max() <= 1
        np.testing.assert_array_equal(g[inv].sum(axis=1), vals[inv].sum(axis=1))
        assert all(t.is_consistent(g[:, c]) for c in range(vals.shape[1]))


def test_chains_that_cannot_keep_totals_are_still_refused() -> None:
    """The global ``nonneg`` treats cells one by one: with node-total invariants it is refused
    after the fact, as before (top-down ``nonneg`` needs invariants from the top: tested on
    the function above; a release implies the levels above its invariant ones)."""
    t, vals = _tree_and_counts(8, n=40)
    kw: dict[str, Any] = dict(rho=0.5, seed=3, plan=_plan(), invariants_cover="total",
                              allow_invariants_with_add_remove=True)
    from hierdp.errors import PluginError

    with pytest.raises(PluginError, match="does not keep the invariant node totals"):
        release(t, vals, postprocess=[{"name": "nonneg", "method": "global"}], invariants=["L0", "L1"], **kw)
