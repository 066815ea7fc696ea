"""The per-parent kernels with both margins held (hierdp/postprocessors/_margins.py, issue 47).

Every result is compared with an independent reference: brute force over the zero sets of the
projection (each an equality-constrained least squares solved by numpy) and over all floor /
ceiling patterns of the rounding; larger instances by their KKT conditions and against scipy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import optimize, stats

from hierdp._kernels import jit
from hierdp.postprocessors import _margins as M

# ------------------------------------------------------------------------------------------------
# references


def _constraints(m, n, group, G):
    """(A, kinds): rows of A are the column sums, then row[i, g] for every child and group."""
    A = []
    for j in range(n):
        a = np.zeros((m, n))
        a[:, j] = 1
        A.append(a.ravel())
    for i in range(m):
        for g in range(G):
            a = np.zeros((m, n))
            a[i, group == g] = 1
            A.append(a.ravel())
    return np.array(A)


def _brute_project(xhat, w, col, row, group):
    """The minimum over every set of cells held at 0 of the equality-constrained weighted least
    squares on the other cells, among the candidates that are feasible (>= 0, margins met)."""
    m, n = xhat.shape
    G = row.shape[1]
    A = _constraints(m, n, group, G)
    b = np.concatenate([col, row.ravel()])
    N = m * n
    best, best_obj = None, np.inf
    for zeros in itertools.product([False, True], repeat=N):
        free = ~np.array(zeros)
        if not free.any():
            continue
        Af = A[:, free]
        k = int(free.sum())
        K = np.block([[np.diag(2 * w.ravel()[free]), Af.T], [Af, np.zeros((len(b), len(b)))]])
        rhs = np.concatenate([2 * (w * xhat).ravel()[free], b])
        sol = np.linalg.lstsq(K, rhs, rcond=None)[0]
        x = np.zeros(N)
        x[free] = sol[:k]
        if x.min() < -1e-10 or np.abs(A @ x - b).max() > 1e-9 * max(1.0, b.max()):
            continue
        obj = float(np.sum(w.ravel() * (x - xhat.ravel()) ** 2))
        if obj < best_obj:
            best, best_obj = x.reshape(m, n), obj
    return best, best_obj


def _objective(X, xhat, w):
    return float(np.sum(w * (X - xhat) ** 2))


def _margins_ok(X, col, row, group, rtol=1e-9):
    scale = max(1.0, float(col.max(initial=0.0)))
    assert np.abs(X.sum(0) - col).max(initial=0.0) <= rtol * scale
    for g in range(row.shape[1]):
        assert np.abs(X[:, group == g].sum(1) - row[:, g]).max(initial=0.0) <= rtol * scale


def _kkt_ok(X, xhat, w, col, row, group, tol=1e-8):
    """Primal feasibility, X >= 0, and multipliers a (per child and group), b (per cell) with
    w (X - xhat) == a + b on the support and xhat + (a + b) / w <= 0 on the zeros."""
    m, n = X.shape
    G = row.shape[1]
    _margins_ok(X, col, row, group)
    assert X.min() >= 0.0
    scale = max(1.0, float(np.abs(w * xhat).max()), float((w * X).max()))
    supp = X > 1e-12 * max(1.0, float(col.max()))
    rows, cells = np.nonzero(supp)
    # unknowns: a[i, g] (m * G), b[j] (n); the multiplier of child i in cell j is a[i, group[j]]
    A = np.zeros((len(rows), m * G + n))
    A[np.arange(len(rows)), rows * G + group[cells]] = 1
    A[np.arange(len(rows)), m * G + cells] = 1
    t = (w * (X - xhat))[supp] / scale
    ab = np.linalg.lstsq(A, t, rcond=None)[0]
    assert np.abs(A @ ab - t).max() <= tol
    # the multipliers are unique only on the support's connected components: the zeros' condition
    # is the feasibility of a linear program
    zr, zc = np.nonzero(~supp)
    Z = np.zeros((len(zr), m * G + n))
    Z[np.arange(len(zr)), zr * G + group[zc]] = 1
    Z[np.arange(len(zr)), m * G + zc] = 1
    lp = optimize.linprog(np.zeros(m * G + n), A_ub=Z if len(zr) else None,
                          b_ub=(-(w * xhat)[~supp] / scale + tol) if len(zr) else None,
                          A_eq=A, b_eq=A @ ab, bounds=(None, None), method="highs")
    assert lp.status == 0, "no multipliers meet the KKT conditions"


def _instance(rng, m, n, G, neg=True, scale=5.0):
    """A random consistent instance: margins from a random non-negative table, xhat noisy."""
    group = np.sort(rng.integers(0, G, n)) if G > 1 else np.zeros(n, np.int64)
    group[:G] = np.arange(G)  # every group has a cell
    group = np.sort(group)
    T = rng.random((m, n)) * scale * (rng.random((m, n)) < 0.8)
    col = T.sum(0)
    row = np.stack([T[:, group == g].sum(1) for g in range(G)], axis=1)
    xhat = T + rng.normal(size=(m, n)) * scale * (1.0 if neg else 0.2)
    w = rng.uniform(0.2, 3.0, (m, n))
    return xhat, w, col, row, group


# ------------------------------------------------------------------------------------------------
# project_margins


@pytest.mark.parametrize("seed", range(12))
def test_project_equals_brute_force_on_tiny_instances(seed):
    rng = np.random.default_rng(seed)
    m = 2 + seed % 2
    n = 2 + seed % 3
    G = 1 if seed % 4 < 2 or n < 2 else 2
    xhat, w, col, row, group = _instance(rng, m, n, G)
    X = M.project_margins(xhat, w, col, row, group)
    ref, ref_obj = _brute_project(xhat, w, col, row, group)
    assert ref is not None
    assert abs(_objective(X, xhat, w) - ref_obj) <= 1e-9 * max(1.0, ref_obj)
    np.testing.assert_allclose(X, ref, rtol=0, atol=1e-8)
    _kkt_ok(X, xhat, w, col, row, group)


def test_project_hand_computed():
    # one child's table is fixed by the margins when m = 1; two children x two cells with
    # totals 1, 1 and cells 1, 1: X = [[1 - t, t], [t, 1 - t]], minimise over t of
    # (1 - t - 1)^2 + (t - 0)^2 + (t - 0)^2 + (1 - t - 1)^2 = 4 t^2 with xhat = identity -> t = 0
    eye = np.eye(2)
    X = M.project_margins(eye, np.ones((2, 2)), np.ones(2), np.ones((2, 1)), np.zeros(2, np.int64))
    np.testing.assert_allclose(X, eye, atol=1e-12)
    # xhat = [[0, 0], [0, 0]] -> every t in [0, 1] costs (1-t)^2*2 + 2 t^2: t = 1/2
    X = M.project_margins(np.zeros((2, 2)), np.ones((2, 2)), np.ones(2), np.ones((2, 1)), np.zeros(2, np.int64))
    np.testing.assert_allclose(X, 0.5, atol=1e-12)
    # the weight pulls the heavy cell to its estimate 0: w = [[3, 1], [1, 1]], X00 = 1 - t; objective
    # 3 (1-t)^2 + t^2 + t^2 + (1-t)^2 = 4 (1-t)^2 + 2 t^2, least at 12 t = 8: t = 2/3
    w = np.array([[3.0, 1.0], [1.0, 1.0]])
    X = M.project_margins(np.zeros((2, 2)), w, np.ones(2), np.ones((2, 1)), np.zeros(2, np.int64))
    np.testing.assert_allclose(X, [[1 / 3, 2 / 3], [2 / 3, 1 / 3]], atol=1e-12)


def test_project_degenerate_cases():
    rng = np.random.default_rng(3)
    # m = 1: the table is the parent's cells
    col = np.array([1.0, 0.0, 2.5, 4.0])
    X = M.project_margins(rng.normal(size=(1, 4)), np.ones((1, 4)), col, col.sum(keepdims=True)[None], np.zeros(4, int))
    np.testing.assert_array_equal(X, col[None])
    # an all-zero parent
    X = M.project_margins(rng.normal(size=(3, 4)), np.ones((3, 4)), np.zeros(4), np.zeros((3, 1)), np.zeros(4, int))
    np.testing.assert_array_equal(X, 0.0)
    # a zero column and a zero row margin
    xhat, w, col, row, group = _instance(rng, 4, 5, 1)
    col[2] = 0.0
    row[:, 0] = row[:, 0] / row[:, 0].sum() * col.sum()
    row[1, 0] += row[3, 0]
    row[3, 0] = 0.0
    X = M.project_margins(xhat, w, col, row, group)
    assert np.all(X[:, 2] == 0.0) and np.all(X[3] == 0.0)
    _kkt_ok(X, xhat, w, col, row, group)
    ref, ref_obj = _brute_project(xhat[:3][:, [0, 1, 3, 4]], w[:3][:, [0, 1, 3, 4]], col[[0, 1, 3, 4]], row[:3],
                                  group[:4])
    np.testing.assert_allclose(X[:3][:, [0, 1, 3, 4]], ref, atol=1e-8)
    # one cell per group: the children's marginals are the column
    row2 = np.array([[1.0, 2.0], [3.0, 0.5]])
    X = M.project_margins(rng.normal(size=(2, 2)), np.ones((2, 2)), row2.sum(0), row2, np.array([0, 1]))
    np.testing.assert_allclose(X, row2)


@pytest.mark.parametrize("seed", range(6))
def test_project_larger_instances_satisfy_kkt(seed):
    rng = np.random.default_rng(100 + seed)
    m, n, G = [(30, 16, 2), (5, 40, 1), (60, 24, 3), (8, 8, 1), (200, 16, 2), (3, 50, 5)][seed]
    xhat, w, col, row, group = _instance(rng, m, n, G)
    X = M.project_margins(xhat, w, col, row, group)
    _kkt_ok(X, xhat, w, col, row, group)


@pytest.mark.parametrize("shape", [(40, 60), (150, 200)])
def test_project_long_lines_and_many_multipliers(shape):
    # lines longer than 24 take Newton's method on their multiplier (not the sort), and more than
    # _DENSE multipliers take conjugate-gradient Newton directions: both certified by the KKT
    # conditions, and the two direction solvers (Cholesky, CG) reach the same table
    m, n = shape
    rng = np.random.default_rng(m)
    xhat, w, col, row, group = _instance(rng, m, n, 1)
    X = M.project_margins(xhat, w, col, row, group)
    _kkt_ok(X, xhat, w, col, row, group)
    # the kernel's orientation: lines are the longer side (the cells here), Newton on the children
    assert n > m
    D = np.ascontiguousarray((xhat * w).T)
    S = np.ascontiguousarray((1.0 / w).T)
    r = row[:, 0] * (col.sum() / row[:, 0].sum())
    tables = []
    for dense in (True, False):
        Y = np.empty((n, m))
        assert M._project_core(D, S, col.copy(), r.copy(), Y, dense) == 0
        tables.append(Y.T)
    np.testing.assert_allclose(tables[0], tables[1], rtol=0, atol=1e-9 * col.max())
    np.testing.assert_allclose(tables[1], X, rtol=0, atol=1e-9 * col.max())
    assert (m > M._DENSE) == (m == 150)  # project_margins itself took the CG directions there


@pytest.mark.parametrize("seed", range(3))
def test_project_no_worse_than_scipy(seed):
    rng = np.random.default_rng(200 + seed)
    m, n, G = 4, 6, 2
    xhat, w, col, row, group = _instance(rng, m, n, G)
    X = M.project_margins(xhat, w, col, row, group)
    A = _constraints(m, n, group, G)[: n + (m - 1) * G]  # the last child's rows are implied by the others
    b = np.concatenate([col, row.ravel()])[: n + (m - 1) * G]
    res = optimize.minimize(lambda x: np.sum(w.ravel() * (x - xhat.ravel()) ** 2), np.full(m * n, col.mean() / m),
                            jac=lambda x: 2 * w.ravel() * (x - xhat.ravel()), hess=lambda x: np.diag(2 * w.ravel()),
                            method="trust-constr", constraints=[optimize.LinearConstraint(A, b, b)],
                            bounds=optimize.Bounds(0, np.inf), options={"gtol": 1e-12, "xtol": 1e-14, "maxiter": 5000})
    ours = _objective(X, xhat, w)
    assert ours <= res.fun + 1e-9 * max(1.0, res.fun)
    # and no feasible perturbation (along the constraints' null space, staying >= 0) improves it
    ns = np.linalg.svd(A)[2][np.linalg.matrix_rank(A):]
    for _ in range(200):
        d = (rng.normal(size=ns.shape[0]) @ ns).reshape(m, n)
        for step in (1e-3, 1e-5):
            Y = X + step * d
            if Y.min() >= 0:
                assert _objective(Y, xhat, w) >= ours - 1e-12 * max(1.0, ours)


def test_project_refuses_bad_input():
    z = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="disagree"):
        M.project_margins(np.zeros((2, 3)), np.ones((2, 3)), np.ones(3), np.ones((2, 1)), z)
    with pytest.raises(ValueError, match="w must be > 0"):
        M.project_margins(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(3), np.full((2, 1), 1.5), z)
    with pytest.raises(ValueError, match=">= 0"):
        M.project_margins(np.zeros((2, 3)), np.ones((2, 3)), np.array([-1.0, 2, 2]), np.full((2, 1), 1.5), z)
    with pytest.raises(ValueError, match="finite"):
        M.project_margins(np.full((2, 3), np.nan), np.ones((2, 3)), np.ones(3), np.full((2, 1), 1.5), z)
    with pytest.raises(ValueError, match="group"):
        M.project_margins(np.zeros((2, 3)), np.ones((2, 3)), np.ones(3), np.full((2, 1), 1.5), np.array([0, 1, 0]))


# ------------------------------------------------------------------------------------------------
# round_margins and round_vector


def _brute_round(X, w, col_int, row_int, group, u=None):
    """The minimum weighted distance over every floor / ceiling pattern meeting the margins, and
    (with u) the pattern of least sum of u over the cells rounded up among those of that cost."""
    fl = np.floor(X)
    fr = np.nonzero(X - fl > 0)
    best, best_cost, best_u = None, np.inf, np.inf
    for ups in itertools.product([0, 1], repeat=len(fr[0])):
        Z = fl.copy()
        Z[fr] += ups
        if not np.array_equal(Z.sum(0), col_int):
            continue
        if any(not np.array_equal(Z[:, group == g].sum(1), row_int[:, g]) for g in range(row_int.shape[1])):
            continue
        cost = float(np.sum(w * (Z - X) ** 2))
        su = float(np.sum(u[fr] * np.array(ups))) if u is not None else 0.0
        if cost < best_cost - 1e-12 * max(1.0, best_cost) or (
                abs(cost - best_cost) <= 1e-12 * max(1.0, best_cost) and su < best_u):
            best, best_cost, best_u = Z, cost, su
    return best, best_cost


def _round_instance(rng, m, n, G):
    """A real table with integer margins: an integer table plus moves around random 2x2 cycles."""
    group = np.sort(np.concatenate([np.arange(G), rng.integers(0, G, n - G)]))
    Z = rng.integers(0, 4, (m, n)).astype(float)
    X = Z.copy()
    for _ in range(3 * m * n):
        i, k = rng.choice(m, 2, replace=False)
        g = rng.integers(G)
        cells = np.nonzero(group == g)[0]
        if len(cells) < 2:
            continue
        j, jj = rng.choice(cells, 2, replace=False)
        lo = -min(X[i, j], X[k, jj])
        hi = min(X[i, jj], X[k, j])
        t = rng.uniform(lo, hi)
        X[i, j] += t
        X[k, jj] += t
        X[i, jj] -= t
        X[k, j] -= t
    X = np.maximum(X, 0.0)
    col = np.rint(X.sum(0)).astype(np.int64)
    row = np.rint(np.stack([X[:, group == g].sum(1) for g in range(G)], 1)).astype(np.int64)
    return X, col, row, group


@pytest.mark.parametrize("seed", range(20))
def test_round_margins_minimal_against_brute_force(seed):
    rng = np.random.default_rng(300 + seed)
    m, n, G = [(2, 3, 1), (3, 3, 1), (3, 4, 2), (2, 6, 1), (4, 3, 1)][seed % 5]
    X, col, row, group = _round_instance(rng, m, n, G)
    if seed % 3 == 0:  # equal weights
        w = np.ones((m, n))
    else:
        w = rng.uniform(0.2, 3.0, (m, n))
    u = rng.random((m, n))
    Z = M.round_margins(X, w, col, row, group, u)
    ref, ref_cost = _brute_round(X, w, col, row, group, u)
    assert ref is not None
    assert Z.dtype == np.int64
    assert np.all((Z == np.floor(X)) | (Z == np.ceil(X)))
    np.testing.assert_array_equal(Z.sum(0), col)
    for g in range(G):
        np.testing.assert_array_equal(Z[:, group == g].sum(1), row[:, g])
    cost = float(np.sum(w * (Z - X) ** 2))
    assert cost <= ref_cost + 1e-12 * max(1.0, ref_cost)
    np.testing.assert_array_equal(Z, ref)  # and among equal costs the least sum of u


def test_round_margins_ties_pick_least_u():
    # every cell 1/2, equal weights: every rounding with the margins costs the same; the one
    # chosen has the smallest sum of u over the cells rounded up (brute force)
    rng = np.random.default_rng(7)
    for _ in range(10):
        X = np.full((4, 4), 0.5)
        u = rng.random((4, 4))
        Z = M.round_margins(X, np.ones((4, 4)), np.full(4, 2), np.full((4, 1), 2), np.zeros(4, np.int64), u)
        ref, _ = _brute_round(X, np.ones((4, 4)), np.full(4, 2), np.full((4, 1), 2), np.zeros(4, np.int64), u)
        np.testing.assert_array_equal(Z, ref)


def test_round_margins_larger_tables_exact_and_deterministic():
    rng = np.random.default_rng(11)
    # the last two take the shortest paths on the bipartite graph (more than _EXCHANGE nodes)
    for m, n, G in [(60, 24, 3), (5, 40, 1), (200, 16, 2), (70, 50, 1), (40, 90, 1)]:
        X, col, row, group = _round_instance(rng, m, n, G)
        w = rng.uniform(0.5, 2.0, (m, n))
        u = rng.random((m, n))
        Z = M.round_margins(X, w, col, row, group, u)
        assert np.all((Z == np.floor(X)) | (Z == np.ceil(X)))
        np.testing.assert_array_equal(Z.sum(0), col)
        for g in range(G):
            np.testing.assert_array_equal(Z[:, group == g].sum(1), row[:, g])
        np.testing.assert_array_equal(Z, M.round_margins(X.copy(), w, col, row, group, u.copy()))
        # the minimum against an independent solver: the transportation LP of the roundings up
        # (totally unimodular, so its optimum is the best rounding's), solved by HiGHS
        fl = np.floor(X)
        frac = X - fl
        el = frac > 1e-7
        cost = (w * (1 - 2 * frac))[el]
        ri, ci = np.nonzero(el)
        A_eq, b_eq = [], []
        for j in range(n):
            A_eq.append((ci == j).astype(float))
            b_eq.append(col[j] - fl[:, j].sum())
        for i in range(m):
            for g in range(G):
                A_eq.append(((ri == i) & (group[ci] == g)).astype(float))
                b_eq.append(row[i, g] - fl[i, group == g].sum())
        lp = optimize.linprog(cost, A_eq=np.array(A_eq), b_eq=np.array(b_eq), bounds=(0, 1), method="highs")
        assert lp.status == 0
        ours = float(np.sum((w * (1 - 2 * frac))[(Z > fl) & el]))
        assert abs(ours - lp.fun) <= 1e-9 * max(1.0, abs(lp.fun))


@pytest.mark.parametrize("seed", range(3))
def test_round_flow_equals_the_exchange_graph(seed):
    # two exact methods for the same choice (lines take need_line entries, nodes need_node, the
    # lexicographic sum of (K1, K2) least): the exchange graph (_round_core) and the prices plus
    # shortest paths on the bipartite graph (_round_flow) choose the same entries; K2 random, so
    # the optimum is unique; a third of the instances tie every primary cost
    rng = np.random.default_rng(seed)
    for trial in range(40):
        p, k = (int(v) for v in rng.integers(2, 70, 2))
        el = rng.random((p, k)) < rng.uniform(0.3, 1.0)
        K1 = rng.integers(-50, 50, (p, k)) * (10**6 if trial % 2 else 1)
        if trial % 3 == 0:
            K1[:] = 7
        K2 = rng.integers(0, 2**40, (p, k))
        Z = el & (rng.random((p, k)) < 0.5)
        need_line, need_node = Z.sum(1).astype(np.int64), Z.sum(0).astype(np.int64)
        a, b = np.zeros((p, k), bool), np.zeros((p, k), bool)
        assert M._round_core(K1, K2, el, need_line, need_node, a) == 0
        assert M._round_flow(K1, K2, el, need_line, need_node, b) == 0
        np.testing.assert_array_equal(a, b)
    # inconsistent needs: both refuse
    el = np.ones((3, 3), bool)
    K = np.zeros((3, 3), np.int64)
    for core in (M._round_core, M._round_flow):
        assert core(K, K, el, np.array([1, 1, 1]), np.array([3, 1, 0]), np.zeros((3, 3), bool)) == 1


def test_round_margins_interpreted_equals_compiled():
    rng = np.random.default_rng(5)
    X, col, row, group = _round_instance(rng, 30, 12, 3)
    w = rng.uniform(0.5, 2.0, X.shape)
    u = rng.random(X.shape)
    cells, ptr, _ = M._groups(group, 12, 3)
    outs = []
    for kernel in (M.round_groups, jit.interpreted(M.round_groups)):
        out = np.empty(X.shape, np.int64)
        assert kernel(X, w, col, row, cells, ptr, u, 1e-7, out) == 0
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    xhat, w, col2, row2, group2 = _instance(rng, 12, 10, 2)
    cells, ptr, _ = M._groups(group2, 10, 2)
    res = []
    for kernel in (M.project_groups, jit.interpreted(M.project_groups)):
        out = np.empty(xhat.shape)
        assert kernel(xhat, w, col2, row2, cells, ptr, out) == 0
        res.append(out)
    np.testing.assert_array_equal(res[0], res[1])


def _spearman_of_shift(shifts):
    m = shifts.shape[1]
    return stats.spearmanr(np.arange(m), shifts.mean(0)).statistic


def test_round_margins_ties_are_fair():
    # 200 children x 4 cells, every cell 1/4 (equal weights): each child takes one cell up and
    # each cell 50 children; over 120 draws of u a child's mean shift in cell 0 is uncorrelated
    # with its index (a label-order tie-break gives Spearman near -1)
    m, n = 200, 4
    X = np.full((m, n), 0.25)
    rng = np.random.default_rng(2024)
    shifts = np.array([M.round_margins(X, np.ones((m, n)), np.full(n, m // 4), np.ones((m, 1), np.int64),
                                       np.zeros(n, np.int64), rng.random((m, n)))[:, 0] - 0.25 for _ in range(120)])
    assert abs(_spearman_of_shift(shifts)) < 0.2
    # and the transposed orientation (more cells than children with units to place): 6 x 24
    m, n = 6, 24
    X = np.full((m, n), 0.5)
    sh = np.array([M.round_margins(X, np.ones((m, n)), np.full(n, 3), np.full((m, 1), 12), np.zeros(n, np.int64),
                                   rng.random((m, n)))[0] - 0.5 for _ in range(150)])
    assert abs(_spearman_of_shift(sh)) < 0.2


def test_round_margins_refuses_bad_input():
    X = np.array([[0.5, 0.5], [0.5, 0.5]])
    z = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="col_int must be the margins of X"):
        M.round_margins(X, np.ones((2, 2)), np.array([2, 1]), np.array([[2], [1]]), z, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="row_int must be the margins of X"):
        M.round_margins(X, np.ones((2, 2)), np.array([1, 1]), np.array([[2], [0]]), z, np.zeros((2, 2)))
    # margins no rounding meets (the checks above keep them from the kernel): the kernel says so
    cells, ptr, _ = M._groups(z, 2, 1)
    out = np.empty((2, 2), np.int64)
    assert M.round_groups(X, np.ones((2, 2)), np.array([2, 0]), np.array([[2], [0]]), cells, ptr,
                          np.zeros((2, 2)), 1e-7, out) == 1
    with pytest.raises(ValueError, match=">= 0"):
        M.round_margins(-X, np.ones((2, 2)), np.array([1, 1]), np.array([[1], [1]]), z, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="integers"):
        M.round_margins(X, np.ones((2, 2)), np.array([1.0, 1.0]), np.array([[1], [1]]), z, np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        M.round_margins(X, np.ones((2, 2)), np.array([1, 1]), np.array([[1], [1]]), z, np.ones((2, 2)))


@pytest.mark.parametrize("seed", range(15))
def test_round_vector_against_brute_force(seed):
    rng = np.random.default_rng(500 + seed)
    n = 2 + seed % 7
    x = rng.uniform(0, 6, n)
    if seed % 3 == 0:
        x = np.floor(x) + 0.5
    w = np.ones(n) if seed % 2 else rng.uniform(0.3, 3, n)
    lo, hi = int(np.floor(x).sum()), int(np.ceil(x).sum())
    target = int(rng.integers(lo, hi + 1))
    u = rng.random(n)
    z = M.round_vector(x, w, target, u)
    best = None
    for ups in itertools.product([0, 1], repeat=n):
        c = np.where(np.array(ups) == 1, np.ceil(x), np.floor(x))
        if c.sum() != target or any(ups[i] and x[i] == np.floor(x[i]) for i in range(n)):
            continue
        key = (round(float(np.sum(w * (c - x) ** 2)), 12), float(np.sum(u * np.array(ups))))
        if best is None or key < best[0]:
            best = (key, c)
    assert best is not None
    assert z.sum() == target
    np.testing.assert_array_equal(z, best[1])


def test_round_vector_fair_and_refusals():
    rng = np.random.default_rng(9)
    n = 200
    x = np.full(n, 0.5)
    sh = np.array([M.round_vector(x, np.ones(n), n // 2, rng.random(n)) - 0.5 for _ in range(120)])
    assert abs(_spearman_of_shift(sh)) < 0.2
    with pytest.raises(ValueError, match="out of reach"):
        M.round_vector(np.array([0.5, 0.5]), np.ones(2), 3, np.zeros(2))
    with pytest.raises(ValueError, match="integer"):
        M.round_vector(np.array([0.5, 0.5]), np.ones(2), 1.0, np.zeros(2))  # type: ignore[arg-type]
