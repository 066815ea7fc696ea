"""Top-down steps under invariant node totals: the levels whose totals are published exactly.

The 2020 Census published the US and state population totals exactly (invariants) while
every cell below them is noisy. A top-down pass (:mod:`hierdp.postprocessors.topdown`)
solves every cell as its own tree problem, which cannot keep a node's *total over its
cells* exact: the cells of an invariant node are coupled through that total. TopDown
(Abowd et al. 2022, *The 2020 Census Disclosure Avoidance System TopDown Algorithm*, HDSR,
Sec. 7.2-7.3) solves those levels jointly over the cells, one parent at a time:

* the **root** with an invariant total ``T``: its cells are the non-negative values summing
  to ``T`` closest to their estimates in the weighted norm ``sum_c (x_c - y_c)^2 / var_c``;
* the **invariant children of a fixed parent** (the states under the US): the ``m x k``
  table ``x_ic >= 0`` whose row sums are the children's invariant totals ``T_i`` and whose
  column sums are the parent's released cells ``P_c``, closest to the estimates in the same
  weighted norm (a weighted projection onto a transportation polytope);

and then every node below the invariant levels is solved per cell as before, under its
parent's released cells (the invariant nodes' cells are fixed: variance 0).

**The projection** (:func:`nonneg_table`). With multipliers ``a_i`` (rows) and ``b_c``
(columns) the KKT conditions give ``x_ic = max(0, y_ic + (a_i + b_c) var_ic)``; the dual
``g(a, b)`` is concave and differentiable (the primal is strictly convex), so maximising
it exactly over the column block and then the row block in turn converges to the optimum
(block coordinate ascent; Tseng 2001). Each block is one exact piecewise-linear root per
column (row): the breakpoints sorted, the crossing read off the running sums. Once the
support settles, one Newton step on it (the linear system of the active entries, a Schur
complement of size ``m``) lands on the optimum to round-off; it is kept only when it
lowers the residual, so the iteration stays monotone.

**Integers** (:func:`round_table`). Each entry becomes its floor or its ceiling, the rows
and columns keep their integer sums exactly, and the entries rounded up minimise
``sum w_ic ((1 - f_ic)^2 - f_ic^2)`` (``f``: the fractional part, ``w = 1 / var``: the
squared weighted distance to the input): TopDown's controlled rounding. It is a
transportation problem with unit capacities — a totally unimodular linear programme, so
the dual simplex method (HiGHS, through :func:`scipy.optimize.linprog`) returns an
integral vertex; a single row (the root) is the greedy choice of its smallest costs.

Every step reads only the estimates (noisy) and the invariants (published): post-processing.
The region loop runs once per invariant parent with invariant children (the US, or each
state when counties are invariant too): a handful of small problems, not a per-node loop.
"""

from __future__ import annotations

import numpy as np

from hierdp.errors import DataError

__all__ = ["total_region", "nonneg_table", "round_table", "solve_region"]

#: the row/column residual, relative to the largest total, that ends the projection
TOL = 1e-11
#: block sweeps before giving up (each sweep is one exact column and one exact row block)
MAX_SWEEPS = 5000


def total_region(parent: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nodes with an exact total (``mask``, internal order: parents before children) and
    each one's parent as a position among them (``-1``: the root).

    Refused in one line unless the region is a top of the tree: the root is in it, every
    ancestor of a member is a member, and each member has all or none of its children in
    it (whole levels, as the Census's invariant levels are)."""
    reg = np.flatnonzero(mask)
    if not reg.size:
        return reg, reg
    n = parent.size
    par = parent[reg]
    if reg[0] != 0 or np.any(par[1:] < 0) or not np.all(mask[np.maximum(par, 0)]):
        raise DataError("node-total invariants with top-down nonneg/round need invariants from the top (every ancestor "
                        "of an invariant node invariant, e.g. levels total and state)")
    n_children = np.bincount(parent[parent >= 0], minlength=n)
    inv_children = np.bincount(par[par >= 0], minlength=n)
    if np.any((inv_children[reg] > 0) & (inv_children[reg] < n_children[reg])):
        raise DataError("node-total invariants with top-down nonneg/round need each invariant node to have all or none "
                        "of its children invariant (use whole levels)")
    return reg, np.where(par >= 0, np.searchsorted(reg, np.maximum(par, 0)), -1)


def _block(u: np.ndarray, s: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per row ``g`` of ``u``/``s`` (G, E): the ``t_g`` with ``sum_e max(0, u_ge + t_g s_ge)
    = target_g`` (``s > 0``, ``target >= 0``; the smallest such ``t`` when ``target`` is 0)."""
    g, e = u.shape
    if e == 0:
        return np.zeros(g)
    bp = -u / s  # entry e is active (positive) for t > bp
    order = np.argsort(bp, axis=1, kind="stable")
    bps = np.take_along_axis(bp, order, axis=1)
    cu = np.cumsum(np.take_along_axis(u, order, axis=1), axis=1)
    cs = np.cumsum(np.take_along_axis(s, order, axis=1), axis=1)
    f = np.zeros((g, e))  # the sum at each breakpoint: the entries before it active
    f[:, 1:] = cu[:, :-1] + bps[:, 1:] * cs[:, :-1]
    j = np.maximum((f <= target[:, None]).sum(axis=1) - 1, 0)
    rows = np.arange(g)
    t = (target - cu[rows, j]) / cs[rows, j]
    return np.where(target > 0, t, bps[:, 0])


def nonneg_table(y: np.ndarray, var: np.ndarray, rows: np.ndarray, cols: np.ndarray | None) -> np.ndarray:
    """The non-negative ``(m, k)`` table closest to ``y`` in ``sum (x - y)^2 / var`` whose row
    sums are ``rows`` and, when given, whose column sums are ``cols``.

    Parameters
    ----------
    y : ndarray, shape (m, k)
        The estimates (e.g. the GLS estimate of each child's cells).
    var : ndarray, shape (m, k)
        Their variances, positive and finite (the caller maps 0 and ``inf``).
    rows : ndarray, shape (m,)
        The exact row totals (non-negative).
    cols : ndarray, shape (k,), optional
        The exact column totals (the parent's released cells), summing to ``rows.sum()``.

    Returns
    -------
    ndarray, shape (m, k)
        The projection (module docstring: exact block ascent on the dual, then a Newton step
        on the settled support); the column sums hold to round-off, the row sums to
        :data:`TOL` relative.
    """
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(var, dtype=np.float64)
    m, k = y.shape
    rows = np.asarray(rows, dtype=np.float64)
    scale = 1.0 + float(np.max(rows, initial=0.0))
    if cols is None:  # rows only: one exact block
        a = _block(y, s, rows)
        return np.maximum(0.0, y + a[:, None] * s)
    cols = np.asarray(cols, dtype=np.float64)
    if abs(float(rows.sum()) - float(cols.sum())) > 1e-9 * (1.0 + float(cols.sum())):
        raise DataError("node-total invariants contradict the parent's released cells (the children's invariant "
                        "totals do not add up to the parent's total); give consistent invariants")
    a = np.zeros(m)
    b = _block((y + a[:, None] * s).T, s.T, cols)
    best = np.inf
    for sweep in range(MAX_SWEEPS):
        x = np.maximum(0.0, y + (a[:, None] + b[None, :]) * s)
        res = float(np.max(np.abs(x.sum(axis=1) - rows), initial=0.0))
        if res <= TOL * scale:
            return x
        if sweep % 4 == 3 and res < best:  # the support has had time to settle: try a Newton step on it
            a2, b2 = _newton(y, s, x > 0, a, b, rows, cols)
            b2 = _block((y + a2[:, None] * s).T, s.T, cols)
            x2 = np.maximum(0.0, y + (a2[:, None] + b2[None, :]) * s)
            res2 = float(np.max(np.abs(x2.sum(axis=1) - rows), initial=0.0))
            if res2 < res:
                a, b, res = a2, b2, res2
                if res <= TOL * scale:
                    return x2
        best = min(best, res)
        a = _block(y + b[None, :] * s, s, rows)
        b = _block((y + a[:, None] * s).T, s.T, cols)
    raise DataError(f"nonneg with invariant totals did not converge in {MAX_SWEEPS} sweeps (residual "
                    f"{res / scale:.1e} of the largest total); report this with the tree's shape")


def _newton(y: np.ndarray, s: np.ndarray, act: np.ndarray, a: np.ndarray, b: np.ndarray, rows: np.ndarray,
            cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The multipliers that make the row and column sums exact on the support ``act``:
    ``sum_{c in act_i} (y_ic + (a_i + b_c) s_ic) = rows_i`` and the same per column, solved
    by eliminating the columns (diagonal) and a least-squares solve of the ``m x m`` Schur
    complement (singular along ``a + t, b - t``). Columns without support keep ``b``."""
    sa = np.where(act, s, 0.0)
    ya = np.where(act, y, 0.0)
    dr, dc = sa.sum(axis=1), sa.sum(axis=0)
    ra = rows - ya.sum(axis=1)
    rb = cols - ya.sum(axis=0)
    live = dc > 0
    inv_dc = np.where(live, 1.0 / np.where(live, dc, 1.0), 0.0)
    schur = np.diag(dr) - (sa * inv_dc[None, :]) @ sa.T
    rhs = ra - sa @ (rb * inv_dc)
    a_new = np.linalg.lstsq(schur, rhs, rcond=None)[0]
    b_new = np.where(live, (rb - sa.T @ a_new) * inv_dc, b)
    return a_new, b_new


def round_table(x: np.ndarray, var: np.ndarray, rows: np.ndarray, cols: np.ndarray | None) -> np.ndarray:
    """Non-negative integers, each entry of ``x`` rounded down or up, whose row sums are
    ``rows`` and, when given, whose column sums are ``cols`` (all integers), minimising the
    squared weighted distance ``sum (z - x)^2 / var`` among those roundings.

    Parameters
    ----------
    x : ndarray, shape (m, k)
        A non-negative table whose row (and column) sums are ``rows`` (``cols``) to round-off.
    var : ndarray, shape (m, k)
        Positive variances (the weights ``1 / var``).
    rows, cols : ndarray
        Integer totals.

    Returns
    -------
    ndarray of int64, shape (m, k)
    """
    x = np.maximum(np.asarray(x, dtype=np.float64), 0.0)
    m, k = x.shape
    fl = np.floor(x)
    frac = x - fl
    cost = (1.0 - 2.0 * frac) / np.asarray(var, dtype=np.float64)  # the change of w (z - x)^2 when rounded up
    need_r = np.rint(np.asarray(rows, dtype=np.float64) - fl.sum(axis=1)).astype(np.int64)
    out = fl.astype(np.int64)
    if cols is None:
        if np.any(need_r < 0) or np.any(need_r > k):
            raise DataError("round with invariant totals: the input does not sum to its invariant total; "
                            "give the non-negative estimate that keeps it (nonneg first)")
        order = np.argsort(cost, axis=1, kind="stable")
        up = np.arange(k)[None, :] < need_r[:, None]
        np.put_along_axis(out, order, np.take_along_axis(out, order, axis=1) + up, axis=1)
        return out
    need_c = np.rint(np.asarray(cols, dtype=np.float64) - fl.sum(axis=0)).astype(np.int64)
    cand = frac > 0
    ri, ci = np.nonzero(cand)
    if int(need_r.sum()) != int(need_c.sum()) or np.any(need_r < 0) or np.any(need_c < 0):
        raise DataError("round with invariant totals: the input does not keep the invariant totals or the parent's "
                        "cells; give the non-negative estimate that keeps them (nonneg first)")
    if ri.size:
        from scipy import sparse
        from scipy.optimize import linprog

        nv = ri.size
        a_eq = sparse.csr_matrix((np.ones(2 * nv), (np.concatenate((ri, m + ci)), np.tile(np.arange(nv), 2))),
                                 shape=(m + k, nv))
        res = linprog(cost[ri, ci], A_eq=a_eq, b_eq=np.concatenate((need_r, need_c)).astype(np.float64),
                      bounds=(0.0, 1.0), method="highs")
        if res.status != 0:
            raise DataError("round with invariant totals: no rounding keeps the invariant totals and the parent's "
                            "cells (the input is not consistent); give the non-negative estimate that keeps them")
        e = np.rint(res.x)
        if np.max(np.abs(res.x - e), initial=0.0) > 1e-6:
            raise DataError("round with invariant totals: the rounding programme returned a fractional solution; "
                            "report this with the tree's shape")
        out[ri, ci] += e.astype(np.int64)
    if not (np.array_equal(out.sum(axis=1), np.rint(rows).astype(np.int64))
            and np.array_equal(out.sum(axis=0), np.rint(cols).astype(np.int64))):
        raise DataError("round with invariant totals: no rounding keeps the invariant totals and the parent's cells "
                        "(the input is not consistent); give the non-negative estimate that keeps them")
    return out


def _variances(var: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Finite positive variances for the weighted norm: ``inf`` (no information) becomes a
    variance far above the others (such a cell takes the adjustment first), ``0`` one far
    below (it stays put unless it must move)."""
    v = np.array(np.broadcast_to(np.asarray(var, dtype=np.float64).reshape(shape[0], -1), shape), dtype=np.float64)
    fin = np.isfinite(v) & (v > 0)
    hi = float(np.max(v[fin], initial=1.0))
    lo = float(np.min(v[fin], initial=1.0))
    v[np.isinf(v)] = hi * 1e12
    v[~(v > 0)] = lo * 1e-12
    return v


def solve_region(par_reg: np.ndarray, y: np.ndarray, var: np.ndarray, totals: np.ndarray, *,
                 integer: bool) -> np.ndarray:
    """The released cells of the invariant-total nodes (a top of the tree,
    :func:`total_region`), top-down: the root under its total, then the invariant children
    of each member under their totals and their parent's released cells.

    Parameters
    ----------
    par_reg : ndarray (r,)
        Each member's parent as a position among the members (``-1``: the root, first).
    y : ndarray (r, k)
        Their estimates (``nonneg``: the GLS estimate; ``round``: ``nonneg``'s output).
    var : ndarray (r,) or (r, k)
        Their variances (the weights).
    totals : ndarray (r,)
        Their invariant totals (integers for ``integer=True``).
    integer : bool
        ``round`` (:func:`round_table`) instead of ``nonneg`` (:func:`nonneg_table`).

    Returns
    -------
    ndarray (r, k)
        float64 for ``nonneg``, int64 for ``round``.
    """
    r, k = y.shape
    v = _variances(var, (r, k))
    t = np.asarray(totals, dtype=np.float64)
    if np.any(t < 0) or (integer and np.any(t != np.rint(t))):
        raise DataError("node-total invariants must be non-negative integer counts")
    out = np.zeros((r, k), np.int64 if integer else np.float64)
    solve = round_table if integer else nonneg_table
    out[0] = solve(y[:1], v[:1], t[:1], None)[0]
    order = np.argsort(par_reg[1:], kind="stable") + 1  # members grouped by parent, parents in order
    starts = np.searchsorted(par_reg[order], np.arange(r + 1))
    for p in range(r):  # parents with invariant children: the top levels only (US; states if counties are)
        kids = order[starts[p]:starts[p + 1]]
        if kids.size:
            out[kids] = solve(y[kids], v[kids], t[kids], out[p])
    return out
