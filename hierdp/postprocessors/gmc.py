"""GMC: Generation Matrix-based optimally consistent release (Cai et al., Alg. 1-2).

Stage 1 (structure only, cached in ``tree.cache``): ``theta`` of Alg. 1, i.e. the
Generation Matrix ``G_{T^(1)<-T}`` with ``M_T^T M_T = G^T G`` (Theorems 8-9), plus the
runs of sibling leaves the kernels stream over. Stage 2 (per release): formula (39),
``v - M G'^-1 (theta' * G'^-T (M^T v))`` with ``G' = G_{T^(1)}^(theta', 1)``, two O(n)
passes; formula (36) (square roots) on request.

Non-uniform variances (per-level budgets) use the weighted generalisation the paper
points to: ``v - D M (M^T D M)^-1 M^T v`` with ``D = diag(variances)``; ``M^T D M`` is
factorised by the same bottom-up recursion as Alg. 1 (``theta'_i = d_i + U_i``, see
:func:`hierdp.postprocessors._gmc_kernels.gmc_weighted_stage1`). Its result is the weighted
least-squares consistent estimate, i.e. the BLUE of Dawson et al. (Theorem 8 there).

Chaining: the chain (:mod:`hierdp.postprocessors.chain`) hands the *measurement*
variances on in ``Estimate.measurement_variance`` so that a later ``nonneg`` minimises
the original weighted objective rather than one weighted by the posterior variances.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp._kernels.jit import for_size
from hierdp._kernels.kernel_common import aligned_empty as _aligned_empty
from hierdp._kernels.threads import get_threads, run_pieces, spans, zero_in_pieces
from hierdp._kernels.tree_pieces import PARALLEL_MIN, PIECE, Pieces, block_groups, paired, tree_pieces
from hierdp.errors import DataError
from hierdp.generation_matrix import SHORT_RUNS as SHORT_RUNS  # re-exported: where callers have read it
from hierdp.generation_matrix import GMCStructure, gmc_structure
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _gmc_kernels as GK
from hierdp.postprocessors.base import (
    Estimate,
    PostProcessor,
    checked_variance,
    finite_values,
    node_values,
    node_variance,
)
from hierdp.postprocessors.blue import blue

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["GMC", "GMCStructure", "gmc_structure", "gmc", "gmc_weighted"]

_WCACHE_KEY = "gmc.weighted"
_WCACHE_MAX = 8
_WCACHE_LOCK = threading.Lock()




def _unit_variance(st: GMCStructure, tree: Tree) -> np.ndarray:
    """Diagonal of ``I - M (M^T M)^-1 M^T``: the variance of each GMC output per unit
    of (uniform) input variance; its sum is the number of leaves (Theorem 5). Cached on
    the tree's stage-1 structure."""
    if st._unit_variance is None:
        n = tree.n_nodes
        x = np.empty((n, 1))
        xv = np.empty((n, 1))
        for_size(BK.blue_2d, tree.n_nodes)(tree.internal.parent, tree.internal.n_children, tree.internal.leafcount,
                                           np.zeros((n, 1)), np.ones((n, 1)), x, xv)
        st._unit_variance = xv[:, 0]
        st._unit_variance.setflags(write=False)
    return st._unit_variance


def _work(st: GMCStructure, k: int) -> np.ndarray:
    """A scratch (n1, k) buffer from the structure's pool (re-used: no page faults per call)."""
    pool = st._pool
    try:
        buf = pool.pop()
    except IndexError:
        buf = None
    if buf is None or buf.shape[1] != k:
        buf = _aligned_empty((st.n1, k), 5)
    return buf


def _gmc_39_pieces(st: GMCStructure, pieces: Pieces, v: np.ndarray, out: np.ndarray, acc: np.ndarray) -> None:
    """Formula (39) for one histogram, its passes run piece by piece on
    ``hierdp.get_threads()`` threads: the bits of :func:`GK.gmc_39_1d` whatever the
    thread count. The leaves (with the height-2 class, or with whole subtrees, where
    :func:`_bottom_strategy` says so) go up first and down last; the classes above them
    go class by class in between."""
    zero_in_pieces((acc,), pieces.above_leaf_parents)  # the leaf pass stores every other node's sum
    par1, inv, n1, lp = st.parent1, st.inv_theta, st.n1, st.leaf_parent
    ls, c0, bounds = st.leaf_starts, pieces.above_leaf_parents, pieces.block_bounds
    how, bottom, above = _bottom_plan(st, pieces)
    if how == "height2":
        run_pieces(lambda r: GK.p39_bottom_up(par1, inv, ls, c0, v, acc, *r), bottom)
    elif how == "blocks":
        run_pieces(lambda g: GK.p39_up_blocks(par1, inv, lp, n1, v, acc, bounds, g[0], (g[0] + g[1]) // 2, g[1]),
                   bottom)
    else:
        _leaves_up(st, pieces, v, acc)
    for cls in above:
        run_pieces(lambda r: GK.p39_internal_up(par1, inv, v, out, acc, *r), paired(cls))
    for cls in reversed(above):
        run_pieces(lambda r: GK.p39_internal_down(par1, inv, v, out, acc, r[0], r[1]), cls)
    if how == "height2":
        run_pieces(lambda r: GK.p39_bottom_down(par1, inv, ls, c0, v, out, acc, *r), bottom)
    elif how == "blocks":
        run_pieces(lambda g: GK.p39_down_blocks(par1, inv, lp, n1, v, out, acc, bounds, g[0], g[1]), bottom)
    elif lp is not None:
        run_pieces(lambda r: GK.p39_leaves_down_flat(lp, n1, v, out, acc, r[0], r[1]), pieces.leaves)
    else:
        starts, pars = pieces.run_starts, pieces.run_parents
        run_pieces(lambda r: GK.p39_leaves_down_runs(starts, pars, v, out, acc, r[0], r[1]), pieces.run_cuts)


def _bottom_strategy(st: GMCStructure, pieces: Pieces) -> str:
    """How GMC's passes take the leaves: ``"height2"`` with the height-2 class
    (:func:`_bottom_with_leaves`), ``"blocks"`` by groups of subtree blocks (leaves one by
    one on a tree with ``Pieces.block_bounds``), else ``"leaves"`` alone."""
    if _bottom_with_leaves(st, pieces):
        return "height2"
    if st.leaf_parent is not None and pieces.block_bounds is not None:
        return "blocks"
    return "leaves"


def _bottom_plan(st: GMCStructure, pieces: Pieces) -> tuple[str, list, list[list[tuple[int, int]]]]:
    """:func:`_bottom_strategy`'s choice, the pieces its bottom passes take up and down
    (the height-2 class's pieces in pairs, or groups of subtree blocks; none when the
    leaves go alone) and the classes that go class by class between them, the same for
    formula (39) and weighted GMC."""
    how = _bottom_strategy(st, pieces)
    if how == "height2":
        return how, paired(pieces.classes[0]), pieces.classes[1:]
    if how == "blocks":
        return how, block_groups(pieces, get_threads()), pieces.above_blocks
    return how, [], pieces.classes


def _bottom_with_leaves(st: GMCStructure, pieces: Pieces) -> bool:
    """Whether the passes take the height-2 class and its leaves together
    (``GK.p39_bottom_up`` and the like): the leaf runs are that class's children one to one
    (``pieces.bottom_runs``), short, and all of one length (complete trees of small
    fan-out), so that summing a run again going down costs less than storing and
    reloading each node's sum, and the loop over a run's leaves ends where it is predicted
    to (two threads a little faster on a complete binary tree). Where runs differ in length
    the loops' ends are mispredicted, and long runs make summing again cost more than it
    saves (about twice as slow on both): such trees keep the separate passes."""
    return st.leaf_parent is not None and pieces.bottom_runs and pieces.equal_runs


def _leaves_up(st: GMCStructure, pieces: Pieces, v: np.ndarray, acc: np.ndarray) -> None:
    """``acc[p] = -(sum of p's leaf children)``, piece by piece, leaf by leaf or run by run
    as the structure chose (shared by formula (39) and the weighted stage 2)."""
    if st.leaf_parent is not None:
        lp, n1 = st.leaf_parent, st.n1
        run_pieces(lambda r: GK.p39_leaves_up_flat(lp, n1, v, acc, *r), paired(pieces.leaves))
    else:
        starts, pars = pieces.run_starts, pieces.run_parents
        run_pieces(lambda r: GK.p39_leaves_up_runs(starts, pars, v, acc, r[0], r[1]), pieces.run_cuts)


def _gmc_weighted_pieces(st: GMCStructure, pieces: Pieces, f: _WeightedFactors, v: np.ndarray, out: np.ndarray,
                         acc: np.ndarray) -> None:
    """:func:`GK.gmc_weighted_2d` for one histogram and one variance column, its passes run
    piece by piece on ``hierdp.get_threads()`` threads (the same bits), the leaves taken
    as in :func:`_gmc_39_pieces`."""
    zero_in_pieces((acc,), pieces.above_leaf_parents)  # the leaf pass stores every other node's sum
    par1, n1, lp = st.parent1, st.n1, st.leaf_parent
    d, inv, rho, u = f.d[:, 0], f.inv_theta[:, 0], f.rho[:, 0], f.u[:, 0]
    ls, c0, bounds = st.leaf_starts, pieces.above_leaf_parents, pieces.block_bounds
    how, bottom, above = _bottom_plan(st, pieces)
    if how == "height2":
        run_pieces(lambda r: GK.pw_bottom_up(par1, rho, ls, c0, v, acc, *r), bottom)
    elif how == "blocks":
        run_pieces(lambda g: GK.pw_up_blocks(par1, rho, lp, n1, v, acc, bounds, g[0], (g[0] + g[1]) // 2, g[1]),
                   bottom)
    else:
        _leaves_up(st, pieces, v, acc)
    for cls in above:
        run_pieces(lambda r: GK.pw_internal_up(par1, rho, v, acc, r[0], r[1]), cls)
    for cls in reversed(above):
        run_pieces(lambda r: GK.pw_internal_down(par1, inv, rho, u, v, out, acc, r[0], r[1]), cls)
    if how == "height2":
        run_pieces(lambda r: GK.pw_bottom_down(par1, inv, rho, u, d, ls, c0, v, out, acc, *r), bottom)
    elif how == "blocks":
        run_pieces(lambda g: GK.pw_down_blocks(par1, inv, rho, u, d, lp, n1, v, out, acc, bounds, g[0], g[1]),
                   bottom)
    elif lp is not None:
        run_pieces(lambda r: GK.pw_leaves_down_flat(lp, n1, d, v, out, acc, r[0], r[1]), pieces.leaves)
    else:
        starts, pars = pieces.run_starts, pieces.run_parents
        run_pieces(lambda r: GK.pw_leaves_down_runs(starts, pars, d, v, out, acc, r[0], r[1]), pieces.run_cuts)

def gmc(tree: Tree, values: np.ndarray, *, formula: int = 39, out: np.ndarray | None = None) -> np.ndarray:
    """Optimally consistent release for uniform noise (Alg. 2 step 5), internal order.

    ``formula=39`` (default) is the square-root-free form, ``36`` the original one. Values
    ``(n,)`` or ``(n, k)`` (k histograms in one pass). Returns the projection of
    ``values`` onto the consistent subspace (formula 8). Non-finite input is detected
    after the pass: every value reaches the root's output.
    """
    y = node_values(tree, values)
    if formula not in (36, 39):
        raise DataError(f"formula must be 36 or 39 (Cai et al.), got {formula!r}")
    st = gmc_structure(tree)
    if st.n1 == 0:
        return finite_values(tree, y).copy()
    y2 = np.ascontiguousarray(y.reshape(tree.n_nodes, -1))
    k = y2.shape[1]
    if out is None:
        o2 = _aligned_empty(y2.shape, 11)
    else:
        if out.shape != y.shape or out.dtype != np.float64 or not out.flags.c_contiguous:
            raise DataError(f"out must be a C-contiguous float64 array of shape {y.shape}")
        o2 = out.reshape(y2.shape)
    work = _work(st, k)
    try:
        if formula == 39 and k == 1 and tree.n_nodes >= PARALLEL_MIN and tree_pieces(tree).one_run_per_parent:
            _gmc_39_pieces(st, tree_pieces(tree), y2.reshape(-1), o2.reshape(-1), work.reshape(-1))
        elif formula == 39 and k == 1 and st.leaf_parent is not None:
            for_size(GK.gmc_39_1d_flat, tree.n_nodes)(st.parent1, st.n1, st.inv_theta, st.leaf_parent, y2.reshape(-1),
                                                      o2.reshape(-1),
                                                      work.reshape(-1))
        elif formula == 39 and k == 1:
            for_size(GK.gmc_39_1d, tree.n_nodes)(st.parent1, st.n1, st.inv_theta, st.leaf_starts, st.leaf_parents,
                                                 y2.reshape(-1), o2.reshape(-1), work.reshape(-1))
        elif formula == 39:
            for_size(GK.gmc_39_2d, y2.size)(st.parent1, st.n1, st.inv_theta, st.leaf_starts, st.leaf_parents, y2,
                                            o2, work)
        else:
            for_size(GK.gmc_36_2d, y2.size)(st.parent1, st.n1, np.sqrt(st.theta), st.leaf_starts, st.leaf_parents,
                                            y2, o2, work)
    finally:
        st._pool.append(work)
    if not np.all(np.isfinite(o2[0])):
        raise DataError("values contain NaN or infinity; mark unmeasured nodes with variance=inf instead")
    return o2.reshape(y.shape)


@dataclass
class _WeightedFactors:
    d: np.ndarray        # (n, kv)
    inv_theta: np.ndarray
    rho: np.ndarray
    u: np.ndarray
    variance: np.ndarray | None = None  # output variance (n, kv), filled lazily


def _level_firsts(tree: Tree) -> list[tuple[int, bool]]:
    """(first node, empty?) per depth; a level is a slice or an index array."""
    return [(idx.start, idx.stop <= idx.start) if isinstance(idx, slice) else (int(idx[0]) if idx.size else 0,
                                                                             idx.size == 0)
            for idx in tree.internal.level_index]


def _level_key(tree: Tree, d2: np.ndarray, constant: bool | None = None) -> tuple | None:
    """Per-level variances as a hashable key when ``d2`` is constant on every level
    (``constant``: already known, from :func:`GK.weighted_scan`)."""
    if d2.shape[1] != 1:
        return None
    d = d2[:, 0]
    ends = _level_firsts(tree)
    values = d[[first for first, _ in ends]]
    if constant is None:
        constant = for_size(GK.constant_per_level, tree.n_nodes)(d, tree.internal.depth, values)  # one pass
    if not constant:
        return None
    return tuple(None if empty else float(v) for (_, empty), v in zip(ends, values, strict=True))


def _weighted_factors(tree: Tree, d2: np.ndarray, constant: bool | None = None) -> _WeightedFactors:
    st = gmc_structure(tree)
    key = _level_key(tree, d2, constant)
    cache = tree.cache.setdefault(_WCACHE_KEY, {})
    if key is not None:
        with _WCACHE_LOCK:
            hit = cache.get(key)
        if hit is not None:
            return hit
    d2 = d2.copy()  # the factors outlive this call: never keep a view of the caller's array
    n1 = st.n1
    kv = d2.shape[1]
    inv = np.empty((n1, kv))
    rho = np.empty((n1, kv))
    u = np.empty((n1, kv))
    for c in range(kv):  # a loop over variance columns, each an O(n) pass
        a, b, w = for_size(GK.gmc_weighted_stage1, tree.n_nodes)(st.parent1, n1, np.ascontiguousarray(d2[:, c]),
                                                                 st.leaf_starts, st.leaf_parents)
        inv[:, c], rho[:, c], u[:, c] = a, b, w
    f = _WeightedFactors(d=d2, inv_theta=inv, rho=rho, u=u)
    if key is not None:
        with _WCACHE_LOCK:  # threads may share a tree
            while len(cache) >= _WCACHE_MAX:
                cache.pop(next(iter(cache)))
            cache[key] = f
    return f


def gmc_weighted(tree: Tree, values: np.ndarray, variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted GMC: ``v - D M (M^T D M)^-1 M^T v``, D = diag(variance), internal order.

    ``variance`` is ``(n,)`` or the shape of ``values``; entries must be finite and
    positive (see :class:`GMC` for unmeasured nodes). Returns ``(estimate, variance of the
    estimate)``; stage 1 is cached per tree when the variances are constant per level.
    The variance of the estimate depends on the variances only, and comes back read-only
    (shared with the cache when the variances are constant per level; copy it to change it).
    """
    y = node_values(tree, values)
    v: np.ndarray | None = None if variance is None else node_variance(tree, variance, y.shape)
    constant = None
    ok = False
    if v is not None and y.ndim == 1 and v.ndim == 1 and y.size:  # one pass checks all, and finds the cache key
        ends = _level_firsts(tree)
        lv = np.ascontiguousarray(v)[[first for first, _ in ends]]
        yc, vc, depth, n = np.ascontiguousarray(y), np.ascontiguousarray(v), tree.internal.depth, tree.n_nodes
        scan = for_size(GK.weighted_scan, n)
        flags = run_pieces(lambda r: scan(yc, vc, depth, lv, r[0], r[1]),
                           spans(n, PIECE) if n >= PARALLEL_MIN else [(0, n)])  # serial, it held the speedup to 1.3x
        yok, ok, constant = (all(column) for column in zip(*flags))
        if not yok:
            finite_values(tree, y)  # its error
    if not ok or v is None:
        y = finite_values(tree, y)
        v = checked_variance(tree, variance, y.shape)
        if v is None or not (v.min() > 0 and v.max() < np.inf):  # finite and positive, in two reductions
            raise DataError("gmc_weighted needs finite, positive variances; use 'blue' for unmeasured or exact nodes")
    st = gmc_structure(tree)
    if st.n1 == 0:  # a single node: nothing to reconcile
        return y.copy(), v.copy()
    n = tree.n_nodes
    y2 = np.ascontiguousarray(y.reshape(n, -1))
    d2 = np.ascontiguousarray(v.reshape(n, -1))
    f = _weighted_factors(tree, d2, constant)
    o2 = np.empty_like(y2)
    work = _work(st, y2.shape[1])
    try:
        if y2.shape[1] == 1 and d2.shape[1] == 1 and n >= PARALLEL_MIN and tree_pieces(tree).one_run_per_parent:
            _gmc_weighted_pieces(st, tree_pieces(tree), f, y2[:, 0], o2[:, 0], work[:, 0])
        else:
            for_size(GK.gmc_weighted_2d, y2.size)(st.parent1, st.n1, f.d, f.inv_theta, f.rho, f.u,
                                                  st.leaf_starts, st.leaf_parents, y2, o2, work)
    finally:
        st._pool.append(work)
    if f.variance is None:
        x = np.empty((n, d2.shape[1]))
        xv = np.empty_like(x)
        for_size(BK.blue_2d, d2.size)(tree.internal.parent, tree.internal.n_children, tree.internal.leafcount,
                                      np.zeros_like(d2), d2, x, xv)
        xv.flags.writeable = False  # shared by every call with these variances (cached): read-only, not copied
        f.variance = xv
    return o2.reshape(y.shape), f.variance.reshape(v.shape)


class GMC(PostProcessor):
    """Generation Matrix-based optimally consistent release (Cai et al., Alg. 2; weighted for
    per-level budgets). Parameter ``formula``: 39 (default, square-root free) or 36."""

    name = "gmc"
    requires_variance = False
    consistent = True
    linear = True
    split_mode = "gls"  # the weighted least-squares estimate: split exactly (hierdp.subtrees)

    def __init__(self, formula: int = 39) -> None:
        if formula not in (36, 39):
            raise DataError(f"formula must be 36 or 39 (Cai et al.), got {formula!r}")
        self.formula = formula

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        y = node_values(tree, estimate.values)
        var = checked_variance(tree, estimate.variance, y.shape)
        info: dict[str, Any] = {"method": "gmc", "formula": self.formula}
        if var is None:
            return Estimate(gmc(tree, y, formula=self.formula), None, info)
        finite_pos = bool(np.all(np.isfinite(var)) and np.all(var > 0))
        if finite_pos and np.all(var == var.flat[0]):
            out = gmc(tree, y, formula=self.formula)
            st = gmc_structure(tree)
            uv = _unit_variance(st, tree) * float(var.flat[0])
            ov = uv if var.ndim == 1 else np.repeat(uv[:, None], var.shape[1], axis=1)
            return Estimate(out, ov, info)
        y = finite_values(tree, y)
        if finite_pos:
            out, ov = gmc_weighted(tree, y, var)
            info["method"] = "gmc_weighted"
            return Estimate(out, ov, info)
        # unmeasured (inf) or exactly known (0) nodes: the weighted GMC's factorisation
        # needs finite positive variances; the same estimator (weighted least squares =
        # BLUE) is computed by the two-pass BLUE, which handles both cases.

        est = blue(tree, y, var)
        info["method"] = "blue"
        info["note"] = "variances contain inf or 0: computed by the equivalent two-pass BLUE"
        return Estimate(est.values, est.variance, info)

    def __repr__(self) -> str:
        return f"<postprocessor 'gmc' formula={self.formula}>"
