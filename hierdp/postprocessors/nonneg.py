"""Consistent *and* non-negative estimates: the post-processor ``nonneg``.

Two methods (:class:`NonNegative`, parameter ``method``): ``"topdown"``, the default,
fixes each parent's value from the root down and projects its children under it
(:mod:`hierdp.postprocessors.topdown`: every level sums to the released root, so the
aggregates keep BLUE's unbiasedness); ``"global"``, this module's :func:`nonneg`, the
exact weighted least squares with x >= 0 over the whole table, below.

Beyond the papers (Cai et al. name it as open at scale in their conclusion). The global
method solves

    minimise  sum_i (x_i - y_i)^2 / var_i   subject to  x consistent,  x >= 0,

where ``var`` are the *measurement* variances (``inf`` = unmeasured, weight 0). Every
consistent x is the aggregate of its leaf values l, and x >= 0 iff l >= 0, so this is
a non-negative least-squares problem in l. Because the unconstrained optimum xhat (BLUE,
the weighted projection onto the consistent subspace) satisfies Pythagoras,
``|x - y|_W^2 = |x - xhat|_W^2 + |xhat - y|_W^2`` for consistent x, the solver works on
xhat.

Algorithm: block principal pivoting for the linear complementarity problem of the KKT
conditions (Judice & Pires 1994; Murty's single-pivot rule as the finite fallback).
For an active set Z (leaves fixed at 0) the equality-constrained problem is one BLUE
pass with those leaves measured exactly at 0; the leaf gradient
``g_j = sum over the path root..j of w_i (x_i - xhat_i)`` is one top-down pass.
Optimality (KKT): l >= 0, g >= 0 on fixed leaves, g = 0 on free leaves. Each iteration
is O(n k); the iteration count depends on the data (typically a handful).

The result's ``info`` reports ``kkt_residual`` (relative), ``complementarity``,
``iterations``, ``converged`` and ``objective`` (against the input values).

Exact nodes (variance 0, e.g. invariants): the problem gains equality constraints
``sum of the leaves under v = c_v``. Their Lagrange multipliers enter the leaf gradient
as one shift per *region* (the leaves whose lowest exact ancestor is the same node r):
KKT becomes ``g_j + L_r = 0`` on free leaves and ``g_j + L_r >= 0`` on fixed ones, where
``L_r = -g`` of any free leaf of r (all agree at the equality-constrained optimum) and is
free when r has no free leaf. The same block principal pivoting runs with BLUE passes
that hold the exact nodes, and a region that must carry mass always keeps a free leaf
(:func:`_nonneg_exact`, numpy, one pass per height).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp._kernels.jit import for_size
from hierdp._kernels.memory import large_empty
from hierdp._kernels.threads import run_pieces, spans, zero_in_pieces
from hierdp._kernels.tree_pieces import PARALLEL_MIN, PIECE, Pieces, paired, tree_pieces
from hierdp.errors import DataError, warn
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _nonneg_kernels as NK
from hierdp.postprocessors.base import (
    Estimate,
    PostProcessor,
    checked_variance,
    finite_values,
    node_values,
    node_variance,
)
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.topdown import check_ordering, ordering_maps, topdown_nonneg, topdown_passes

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["NonNegative", "NonnegConvergenceWarning", "nonneg", "METHODS"]

#: the methods of :class:`NonNegative`, the default first
METHODS = ("topdown", "global")


class NonnegConvergenceWarning(UserWarning):
    """The non-negative solver stopped at ``max_iter`` before the KKT conditions held."""


def _blue(tree: Tree, y2: np.ndarray, d2: np.ndarray) -> np.ndarray:
    if y2.shape[1] == 1 and tree.n_nodes >= PARALLEL_MIN:  # BLUE in pieces, on every thread

        return blue(tree, y2[:, 0], d2[:, 0]).values.reshape(y2.shape)
    x = np.empty_like(y2)
    xv = np.empty_like(d2)
    for_size(BK.blue_2d, y2.size)(tree.internal.parent, tree.internal.n_children, tree.internal.leafcount, y2, d2,
                                  x, xv)
    return x


def _by_runs(pieces: Pieces, xhat: np.ndarray) -> bool:
    """One histogram on a tree whose leaves come in long runs of siblings: the leaf passes
    go run by run (the same sums, loaded and stored once per run)."""
    return xhat.shape[1] == 1 and pieces.long_runs


def _leaf_by_leaf(pieces: Pieces, xhat: np.ndarray) -> bool:
    """One histogram, each parent's leaves one run, but short runs: the 1-D leaf passes go
    leaf by leaf."""
    return xhat.shape[1] == 1 and pieces.one_run_per_parent and not _by_runs(pieces, xhat)


def _step_pieces(tree: Tree, pieces: Pieces, xhat: np.ndarray, d2: np.ndarray, fixed: np.ndarray, tol: float,
                 x: np.ndarray, bad: np.ndarray, ws: tuple) -> np.ndarray:
    """:func:`NK.nnls_step_2d`, its passes run piece by piece on ``hierdp.get_threads()``
    threads (the same bits and counts whatever the thread count). ``ws``: the workspace
    (z, u, s, su, ninf, g, ga) and the leaves' constants (:func:`NK.leaf_constants`)."""
    z, u, s, su, ninf, g, ga, ivl, thl = ws
    par, lc, nch, n1 = tree.internal.parent, tree.internal.leafcount, tree.internal.n_children, pieces.n1
    runs = _by_runs(pieces, xhat)
    flat = _leaf_by_leaf(pieces, xhat)
    top = pieces.above_leaf_parents if runs or flat else n1  # the 1-D leaf passes store the other nodes' sums
    zero_in_pieces((s, su, ninf), top)
    if runs or flat:  # 1-D views of the leaves
        lst, pars = pieces.run_starts - n1, pieces.run_parents
        xl, dl, fl, xol, bl = xhat[n1:, 0], d2[n1:, 0], fixed[:, 0], x[n1:, 0], bad[:, 0]
        lpar = par[n1:]
        lcuts = [(a - n1, b - n1) for a, b in pieces.leaves]
    if runs:
        run_pieces(lambda r: NK.nnls_leaves_up_runs1(lst, pars, xl, dl, fl, s, su, ninf, r[0], r[1]),
                   pieces.run_cuts)
    elif flat:
        run_pieces(lambda r: NK.nnls_leaves_up_flat1(lpar, xl, dl, fl, s, su, ninf, *r), paired(lcuts))
    else:
        run_pieces(lambda r: NK.nnls_leaves_up(par, n1, xhat, d2, fixed, s, su, ninf, r[0], r[1]), pieces.leaves)
    if xhat.shape[1] == 1:  # 1-D views of the non-leaf prefix
        xh1, d1, x1 = xhat[:n1, 0], d2[:n1, 0], x[:n1, 0]
        z1, u1, s1, su1, ninf1, g1, ga1 = (a[:, 0] for a in ws[:7])
        for cls in pieces.classes:
            run_pieces(lambda r: NK.nnls_internal_up1(par, lc, xh1, d1, z1, u1, s1, su1, ninf1, r[0], r[1]), cls)
        for cls in reversed(pieces.classes):
            run_pieces(lambda r: NK.nnls_internal_down1(par, nch, lc, xh1, d1, x1, z1, u1, s1, su1, ninf1, g1, ga1,
                                                        r[0], r[1]), cls)
    else:
        for cls in pieces.classes:
            run_pieces(lambda r: NK.nnls_internal_up(par, lc, xhat, d2, z, u, s, su, ninf, r[0], r[1]), cls)
        for cls in reversed(pieces.classes):
            run_pieces(lambda r: NK.nnls_internal_down(par, nch, lc, xhat, d2, x, z, u, s, su, ninf, g, ga, r[0],
                                                       r[1]), cls)

    def leaves(r: tuple[int, int]) -> np.ndarray:
        count = np.zeros(xhat.shape[1], np.int64)
        if runs:
            NK.nnls_leaves_down_runs1(lst, pars, xl, dl, fl, tol, x, xol, bl, s, su, ninf, g, ga, count, r[0], r[1])
        elif flat:
            NK.nnls_leaves_down_flat1(lpar, xl, dl, ivl, thl, fl, tol, x, xol, bl, s, su, ninf, g, ga, count, r[0],
                                      r[1])
        else:
            NK.nnls_leaves_down(par, n1, xhat, d2, fixed, tol, x, bad, s, su, ninf, g, ga, count, r[0], r[1])
        return count

    return np.sum(run_pieces(leaves, pieces.run_cuts if runs else lcuts if flat else pieces.leaves), axis=0)


def _finish_pieces(tree: Tree, pieces: Pieces, y2: np.ndarray, xhat: np.ndarray, d2: np.ndarray,
                   fixed: np.ndarray, x: np.ndarray, ws: tuple) -> tuple[float, float, float]:
    """:func:`NK.nnls_finish_2d` in pieces; the partial sums are added in piece order (the
    pieces do not depend on the thread count, so neither do the sums)."""
    par, n1 = tree.internal.parent, pieces.n1
    g, ga = ws[5], ws[6]
    x[:n1] = 0.0
    if _by_runs(pieces, xhat):
        lst, pars, fl, xol = pieces.run_starts - n1, pieces.run_parents, fixed[:, 0], x[n1:, 0]
        run_pieces(lambda r: NK.finish_leaves_up_runs1(lst, pars, fl, x, xol, r[0], r[1]), pieces.run_cuts)
    else:
        run_pieces(lambda r: NK.finish_leaves_up(par, n1, fixed, x, r[0], r[1]), pieces.leaves)
    for cls in pieces.classes:
        run_pieces(lambda r: NK.finish_internal_up(par, x, r[0], r[1]), cls)
    parts = []
    for cls in [*reversed(pieces.classes), pieces.leaves]:
        parts += run_pieces(lambda r: NK.finish_down(par, n1, y2, xhat, d2, fixed, x, g, ga, r[0], r[1]), cls)
    resid, comp, obj = 0.0, 0.0, 0.0
    for r_, c_, o_ in parts:
        resid = max(resid, r_)
        comp += c_
        obj += o_
    return resid, comp, obj


def _pivot(fixed: np.ndarray, bad: np.ndarray, nbad: np.ndarray, best: np.ndarray, pivots: np.ndarray) -> None:
    """One exchange of block principal pivoting (Judice & Pires), per column with violations:
    exchange every violating leaf while the number of violations keeps falling (3 tries
    after it last fell), else Murty's rule (flip only the violating leaf of largest index,
    which guarantees termination). Updates ``fixed``, ``best`` and ``pivots`` in place."""
    for c in np.flatnonzero(nbad):  # a loop over columns, each vectorised
        if nbad[c] < best[c]:
            best[c] = nbad[c]
            pivots[c] = 3
            fixed[:, c] ^= bad[:, c]
        elif pivots[c] > 0:
            pivots[c] -= 1
            fixed[:, c] ^= bad[:, c]
        else:
            j = np.flatnonzero(bad[:, c])[-1]
            fixed[j, c] = not fixed[j, c]


def _check_in_pieces(tree: Tree, y: np.ndarray, var: np.ndarray | None) -> bool:
    """:func:`finite_values` and :func:`checked_variance`'s checks (the same errors) in
    one pass over pieces, on every thread; returns whether some variance is 0."""
    yf = np.ascontiguousarray(y).reshape(-1)
    vf = np.ascontiguousarray(var).reshape(-1) if var is not None else None
    if vf is None or vf.size != yf.size:  # variances per node for k > 1 histograms: numpy's checks
        finite_values(tree, y)
        checked_variance(tree, var, y.shape)
        return var is not None and bool(np.any(var == 0))
    flags = run_pieces(lambda r: NK.input_flags(yf, vf, r[0], r[1]), spans(yf.size, 8 * PIECE))
    if sum(f[0] for f in flags):
        finite_values(tree, y)  # its error
    if sum(f[1] for f in flags):
        checked_variance(tree, var, y.shape)  # its error
    return bool(sum(f[2] for f in flags))


def nonneg(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None, *, max_iter: int = 200,
           tol: float = 1e-9) -> tuple[np.ndarray, dict[str, Any]]:
    """Exact non-negative consistent weighted least squares (internal order).

    ``values`` (n,) or (n, k) are measurements or a consistent estimate; ``variance`` the
    measurement variances ((n,) or like ``values``; ``None`` = uniform; ``inf`` =
    unmeasured; must be > 0). Returns ``(x, info)``; ``x`` is consistent (it is the
    aggregate of its non-negative leaves) and non-negative.
    """
    n = tree.n_nodes
    if n >= PARALLEL_MIN:  # the checks of finite_values and checked_variance, in one pass in pieces
        y = node_values(tree, values)
        var = None if variance is None else node_variance(tree, variance, y.shape)
        zero = _check_in_pieces(tree, y, var)
    else:
        y = finite_values(tree, values)
        var = checked_variance(tree, variance, y.shape)
        zero = var is not None and bool(np.any(var == 0))
    k = 1 if y.ndim == 1 else y.shape[1]
    if var is None:
        var = np.ones(n)
    y2 = np.ascontiguousarray(y.reshape(n, k))
    d2 = np.ascontiguousarray(np.broadcast_to(var.reshape(n, -1), (n, k)))
    if zero:
        x, info = _nonneg_exact(tree, y2, d2, max_iter=max_iter, tol=tol)
        return x.reshape(y.shape), info
    xhat = _blue(tree, y2, d2)
    n1 = n - tree.n_leaves                       # leaves are the suffix [n1, n) (Def. 6 order)
    if n1 == 0:  # a single node: the closest non-negative value
        x1 = np.where(np.isinf(d2), 0.0, np.maximum(y2, 0.0))
        return x1.reshape(y.shape), {"method": "nonneg", "iterations": 0, "converged": True,
                                     "kkt_residual": 0.0, "complementarity": 0.0,
                                     "objective": float(np.sum(np.where(np.isinf(d2), 0.0, (x1 - y2) ** 2 / d2))),
                                     "n_zero_leaves": int(np.sum(x1 == 0))}
    fixed = np.empty(xhat[n1:].shape, bool)      # Z: leaves held at 0, per column
    run_pieces(lambda r: np.less(xhat[n1 + r[0]:n1 + r[1]], 0.0, out=fixed[r[0]:r[1]]), spans(n - n1, 8 * PIECE))
    best = np.full(k, np.iinfo(np.int64).max)
    pivots = np.full(k, 3)
    bad = np.zeros_like(fixed)
    x = large_empty(y2.shape)
    it = 0
    converged = False
    pieces = tree_pieces(tree) if n >= PARALLEL_MIN else None
    # numpy's allocations (not the kernels'): pages are touched once, by the passes, and
    # large ones get transparent huge pages; the steps zero what they add into
    ws: tuple = ()
    if pieces is not None:
        consts: tuple = (None, None)
        if _leaf_by_leaf(pieces, xhat):  # the constants of its leaf-by-leaf passes
            ivl, thl = large_empty(n - n1), large_empty(n - n1)
            xl, dl = xhat[n1:, 0], d2[n1:, 0]
            run_pieces(lambda r: NK.leaf_constants(xl[r[0]:r[1]], dl[r[0]:r[1]], tol, ivl[r[0]:r[1]], thl[r[0]:r[1]]),
                       [(a - n1, b - n1) for a, b in pieces.leaves])
            consts = (ivl, thl)
        ws = (*(np.empty((n1, k)) for _ in range(4)), np.empty((n1, k), np.int64), np.empty((n1, k)),
              np.empty((n1, k)), *consts)
    while True:
        it += 1
        if pieces is not None:
            nbad = _step_pieces(tree, pieces, xhat, d2, fixed, tol, x, bad, ws)
        else:
            nbad = for_size(NK.nnls_step_2d, xhat.size)(tree.internal.parent, tree.internal.n_children,
                                                        tree.internal.leafcount, n1, xhat, d2, fixed, tol, x, bad)
        if not nbad.any():
            converged = True
            break
        if it >= max_iter:
            break
        _pivot(fixed, bad, nbad, best, pivots)
    # exact zeros on fixed leaves, round-off clipped on free ones, re-aggregated (in place)
    if pieces is not None:
        resid, comp, objective = _finish_pieces(tree, pieces, y2, xhat, d2, fixed, x, ws)
    else:
        resid, comp, objective = for_size(NK.nnls_finish_2d, xhat.size)(tree.internal.parent, n1, y2, xhat, d2,
                                                                        fixed, x)
    out = x
    info = {
        "method": "nonneg",
        "iterations": it,
        "converged": converged,
        "kkt_residual": float(resid),
        "complementarity": float(comp),
        "objective": float(objective),
        "n_zero_leaves": int(np.count_nonzero(fixed)),  # faster than fixed.sum() on a bool array
    }
    if not converged:
        warn(f"nonneg stopped after {max_iter} iterations with KKT residual {resid:.3g}; "
             "raise max_iter", NonnegConvergenceWarning)
    return out.reshape(y.shape), info


def _is_consistent(tree: Tree, values: Any) -> bool:
    """Whether ``values`` already satisfy parent = sum of children (relative 1e-9): a plan
    that hands on its own linear consistent estimate (``marginals``) keeps its variances."""
    y = np.asarray(values, dtype=np.float64)
    n1 = tree.n_nodes - tree.n_leaves
    if n1 == 0:
        return True
    leaves = np.zeros_like(y)
    leaves[n1:] = y[n1:]
    agg = tree.internal.sum_up(leaves, consume=True)
    return bool(np.all(np.abs(agg[:n1] - y[:n1]) <= 1e-9 * (1.0 + np.abs(y[:n1]))))


def _blue_full(tree: Tree, y2: np.ndarray, d2: np.ndarray) -> np.ndarray:

    return np.asarray(blue(tree, y2, d2).values).reshape(y2.shape)


def _top_down(tree: Tree, own: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``out[v] = start[v]`` where given (not NaN) else ``out[parent] + own[v]``: one pass per
    height (parents precede children in the internal, descending-height order)."""
    par = tree.internal.parent
    out = np.empty_like(own)
    H = int(tree.internal.height[0]) if tree.n_nodes else 0
    for h in range(H, 0, -1):
        sl = tree.internal.height_slice(h)
        p = par[sl]
        base = np.where((p >= 0)[:, None], out[np.maximum(p, 0)], 0.0)
        out[sl] = np.where(np.isnan(start[sl]), base + own[sl], start[sl])
    return out


def _scatter_add(out: np.ndarray, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray | None) -> None:
    """``out[rows, cols] += weights`` (1 when None) with repeats, by one bincount (np.add.at is slow)."""
    flat = rows.astype(np.int64) * out.shape[1] + cols
    out += np.bincount(flat, weights=weights, minlength=out.size).reshape(out.shape)


def _nonneg_exact(tree: Tree, y2: np.ndarray, d2: np.ndarray, *, max_iter: int,
                  tol: float) -> tuple[np.ndarray, dict[str, Any]]:
    """Non-negative consistent WLS with exact nodes (variance 0) as equality constraints.

    Block principal pivoting on the leaves as in :func:`nonneg`, with the KKT conditions of
    the equality-constrained problem (module docstring): region multipliers ``L_r``.
    """
    n, k = y2.shape
    par = tree.internal.parent
    n1 = n - tree.n_leaves
    exact = d2 == 0.0
    if np.any(y2[exact] < -1e-9 * (1.0 + np.abs(y2[exact]))):
        raise DataError("nonneg: a node known exactly (variance 0) is negative, so no non-negative estimate keeps "
                        "it; correct it or give it a positive variance")
    try:
        xhat = _blue_full(tree, y2, d2)
    except DataError:
        raise DataError("nonneg: nodes known exactly (variance 0) contradict each other (an exact node is not the "
                        "sum of the exact nodes below it); correct them or give them positive variances") from None
    w = np.where(np.isfinite(d2) & ~exact, 1.0 / np.where(exact, 1.0, d2), 0.0)
    # region of each node: its lowest exact ancestor-or-self (n: none); parents come first
    reg = np.full((n, k), n, dtype=np.int64)
    for h in range(int(tree.internal.height[0]), 0, -1):
        sl = tree.internal.height_slice(h)
        p = par[sl]
        inherited = np.where((p >= 0)[:, None], reg[np.maximum(p, 0)], n)
        reg[sl] = np.where(exact[sl], np.arange(sl.start, sl.stop)[:, None], inherited)
    lreg = reg[n1:]
    leaf_exact = exact[n1:]
    cols = np.arange(k)
    # mass each region must carry beyond its nested exact regions
    need = np.zeros((n + 1, k))
    ex_r, ex_c = np.nonzero(exact)
    _scatter_add(need, ex_r, ex_c, xhat[ex_r, ex_c])
    pr = par[ex_r]
    has_p = pr >= 0
    _scatter_add(need, reg[np.maximum(pr, 0), ex_c][has_p], ex_c[has_p], -xhat[ex_r, ex_c][has_p])
    scale = 1.0 + float(np.max(np.abs(xhat), initial=0.0))
    needs_mass = need > 1e-9 * scale
    needs_mass[n1:n] = False  # an exact leaf is its own region and no variable
    fixed = (xhat[n1:] < 0.0) & ~leaf_exact
    best = np.full(k, np.iinfo(np.int64).max)
    pivots = np.full(k, 3)
    it = 0
    converged = False
    x = xhat
    while True:
        it += 1
        # every region that must carry mass keeps a free leaf (else the constraints contradict)
        free = ~fixed & ~leaf_exact
        nfree = np.zeros((n + 1, k))
        fr, fc = np.nonzero(free)
        _scatter_add(nfree, lreg[fr, fc], fc, None)
        starved = needs_mass & (nfree == 0)
        starved[n] = False
        if starved.any():
            cand = np.where(~leaf_exact & starved[lreg, cols[None, :]], xhat[n1:], -np.inf)
            for r, c in zip(*np.nonzero(starved)):
                j = int(np.argmax(np.where(lreg[:, c] == r, cand[:, c], -np.inf)))
                fixed[j, c] = False
            free = ~fixed & ~leaf_exact
        yy = xhat.copy()
        dd = d2.copy()
        yy[n1:][fixed] = 0.0
        dd[n1:][fixed] = 0.0
        x = _blue_full(tree, yy, dd)
        own = w * (x - xhat)
        g = _top_down(tree, own, np.full((n, k), np.nan))[n1:]
        gscale = _top_down(tree, w * (np.abs(x - xhat) + np.abs(xhat) + 1.0), np.full((n, k), np.nan))[n1:]
        # region multipliers L_r = -mean g over the region's free leaves; none: no condition
        gs = np.zeros((n + 1, k))
        cnt = np.zeros((n + 1, k))
        fr, fc = np.nonzero(free)
        _scatter_add(gs, lreg[fr, fc], fc, g[fr, fc])
        _scatter_add(cnt, lreg[fr, fc], fc, None)
        lam = np.where(cnt > 0, -gs / np.maximum(cnt, 1), np.inf)
        lam[n] = 0.0
        shift = lam[lreg, cols[None, :]]
        xl = x[n1:]
        bad = (free & (xl < -tol * (np.abs(xhat[n1:]) + np.sqrt(np.where(np.isfinite(d2[n1:]), d2[n1:], 0.0))
                                    + 1e-12 * scale))) \
            | (fixed & (g + shift < -tol * gscale))
        nbad = bad.sum(axis=0)
        if not nbad.any():
            converged = True
            break
        if it >= max_iter:
            break
        _pivot(fixed, bad, nbad, best, pivots)
    # exact zeros on fixed leaves, round-off clipped on free ones, re-aggregated
    leaves = np.where(fixed, 0.0, np.maximum(x[n1:], 0.0))
    leaves[leaf_exact] = xhat[n1:][leaf_exact]
    full = np.zeros((n, k))
    full[n1:] = leaves
    out = tree.internal.sum_up(full, consume=True)
    fin = np.isfinite(d2) & ~exact
    objective = float(np.sum(np.where(fin, (out - y2) ** 2 / np.where(fin, d2, 1.0), 0.0)))
    info: dict[str, Any] = {"method": "nonneg", "iterations": it, "converged": converged,
                            "kkt_violations": int(nbad.sum()), "objective": objective,
                            "n_zero_leaves": int(np.count_nonzero(fixed)), "exact_nodes": int(exact.any(axis=1).sum())}
    if not converged:
        warn(f"nonneg stopped after {max_iter} iterations with {int(nbad.sum())} KKT violations; "
             "raise max_iter", NonnegConvergenceWarning)
    return out, info


class NonNegative(PostProcessor):
    """Consistent non-negative estimates, by one of two methods (parameter ``method``).

    ``"topdown"`` (the default): the root is BLUE's root clipped at 0, then each
    parent's value is fixed and its children are the non-negative values summing to it
    closest to their BLUE estimates, weighted by the BLUE variances
    (:func:`hierdp.postprocessors.topdown.topdown_nonneg`; TopDown's and BlueDown's
    shape). Every level sums to the released root, so aggregates keep BLUE's
    unbiasedness; right for releases whose totals and large areas must not drift
    (census practice), above all when most declared nodes are empty.

    ``"global"``: exact non-negative consistent weighted least squares over the whole
    table (block principal pivoting; KKT residual reported in ``info``; :func:`nonneg`):
    the smallest total weighted squared distance to the measurements. Right when most
    nodes are populated (clipping is rare) and the whole table's squared error is the
    aim; with many empty declared nodes it moves mass up the tree (the total's bias in
    ``docs/comparison.md``).

    ``ordering`` (top-down only): ``"total"`` (the default) solves each parent's children in
    passes, TopDown's production query ordering (Abowd et al. 2022, Sec. 7.2): their totals
    first (the non-negative totals summing to the parent's closest to the totals of their
    estimates), then their cells with both margins held (each column summing to the parent's
    cell, each row to the child's total; :func:`hierdp.postprocessors.topdown.topdown_passes`);
    the bottom level (children all leaves) cell by cell, as TopDown's Block level. So a unit's
    total keeps what the GLS estimate knows of it instead of becoming the sum of its clipped
    cells. ``"cells"``: every cell alone under the parent's cell (the method before issue 47).
    With one cell per node the two agree.

    Parameters: ``method`` (``"topdown"``), ``ordering`` (``"total"``), and for ``"global"``
    ``max_iter`` (200) and ``tol`` (1e-9).
    """

    name = "nonneg"
    requires_variance = False
    consistent = True
    #: the top-down method runs per subtree given its root's final value
    #: (:func:`hierdp.postprocessors.topdown.topdown_nonneg`, ``fixed_root=``)
    splittable = True

    def __init__(self, max_iter: int = 200, tol: float = 1e-9, method: str = "topdown",
                 ordering: Any = "total") -> None:
        ok = (isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool) and max_iter >= 1
              and isinstance(tol, (int, float, np.floating)) and 0 < float(tol) < 1e-2)
        if not ok:
            raise DataError(f"nonneg needs an integer max_iter >= 1 and a number 0 < tol < 0.01, "
                            f"got {max_iter!r}, {tol!r}")
        if method not in METHODS:
            raise DataError(f"nonneg: unknown method {method!r}; use one of {', '.join(map(repr, METHODS))}")
        ordering = check_ordering(ordering, "nonneg")
        self.max_iter = int(max_iter)
        self.tol = float(tol)
        self.method = method
        self.ordering = ordering
        # top-down runs per subtree from its root's value; the global projection cannot
        self.split_mode = "top_down" if method == "topdown" else None

    @property
    def couples_cells(self) -> bool:
        """Whether a node's cells are solved together (ordering ``"total"``: each child's total held)."""
        return self.method == "topdown" and self.ordering != "cells"

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        if self.method == "topdown":
            return self._topdown(tree, estimate)
        x, info = nonneg(tree, estimate.values, estimate.weights_variance, max_iter=self.max_iter, tol=self.tol)
        var = None if estimate.variance is None else np.array(estimate.variance, dtype=np.float64)
        if var is not None and not (estimate.linear and (estimate.consistent or _is_consistent(tree, estimate.values))):
            # the incoming variances are the measurements': report those of the linear
            # estimate with the same weights (BLUE), as after ["blue", "nonneg"]

            var = blue(tree, np.zeros(np.shape(estimate.values)), var).variance
        if var is not None:
            info["variance_note"] = "variance of the linear consistent estimate (BLUE) with the same weights; " \
                                    "nonneg is not linear"
        return Estimate(x, var, info)

    def _topdown(self, tree: Tree, estimate: Estimate) -> Estimate:
        """BLUE's values and variances (computed here from the measurements unless the
        input already is a linear consistent estimate), then the top-down pass."""
        values, var = estimate.values, estimate.variance
        if not (estimate.linear and (estimate.consistent or _is_consistent(tree, values))):
            wv = estimate.weights_variance
            y = finite_values(tree, values)
            checked = None if wv is None else checked_variance(tree, wv, y.shape)
            b = blue(tree, y, np.ones(tree.n_nodes) if checked is None else checked)
            values, var = b.values, b.variance
        k = int(np.prod(np.shape(values)[1:], dtype=np.int64))
        if self.ordering != "cells" and k > 1:
            x = topdown_passes(tree, values, var, integer=False, totals=estimate.exact_totals,
                               marginals=ordering_maps(self.ordering, k, "nonneg"))
        else:
            x = topdown_nonneg(tree, values, var, totals=estimate.exact_totals)
        # a direct solution (one exact projection per parent and cell), not an iteration:
        # "converged" and "iterations" keep the global method's keys meaningful
        info: dict[str, Any] = {"method": "nonneg", "mode": "topdown", "converged": True, "iterations": 0}
        if var is not None:
            var = np.array(var, dtype=np.float64)
            info["variance_note"] = "variance of the linear consistent estimate (BLUE) with the same weights; " \
                                    "nonneg is not linear"
        return Estimate(x, var, info)
