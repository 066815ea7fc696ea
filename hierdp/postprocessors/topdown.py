"""Top-down non-negative (and integer) consistent estimates with unbiased aggregates.

The shape of the Census Bureau's TopDown (Abowd et al. 2022, *The 2020 Census Disclosure
Avoidance System TopDown Algorithm*, HDSR, Sec. 7) and of Google's BlueDown: the tree is
solved from the root down. The root gets the BLUE root estimate clipped at 0; then every
parent's value is *fixed*, and its children are the non-negative values summing to it
closest to their BLUE estimates in the weighted norm ``sum_j (x_j - xhat_j)^2 / var_j``
(``var``: the BLUE variances; the same weighted least-squares family as the global
``nonneg``). Per parent and cell that is one projection onto a weighted simplex, solved
exactly in O(m log m) (:func:`hierdp.postprocessors._topdown_kernels.project_group`).
The integer step (:func:`topdown_round`) does the same with integers: the closest
non-negative integers summing to the parent's integer, exactly, by the greedy rule on
unit costs (:func:`hierdp.postprocessors._topdown_kernels.integer_group`).

Why aggregates stay unbiased. A projection only moves mass among siblings: the children
of a parent sum to the parent's released value, so every level (over nodes at one
depth, all leaves at the bottom) sums to the released root, which is the BLUE root
(unbiased) clipped at 0 — unbiased wherever the total is far from 0. The global
``nonneg`` instead minimises the squared error over the whole table: when most declared
leaves are empty, clipping their negative noise adds mass, and the least-squares fit
moves part of it up into the total (measured in ``docs/comparison.md``). Within a
level, mass still moves between siblings (populated places give some to empty ones);
that is the price of non-negative leaves that add up.

Cells ``(n, k)``: every cell is its own tree problem (the tree constraint acts on nodes,
per cell), so each parent's cell equals the sum of its children's, and a node's total
over its cells — the row sum, as the plans represent it (no separately measured total)
— equals the sum of its children's totals. Nodes known exactly (variance 0, e.g.
invariants) keep their value: each node carries the lower bound ``low`` (the known mass
below it, :func:`hierdp.postprocessors._topdown_kernels.lower_bounds`) and the
projection runs on ``x - low``, so a known node is fixed and no parent is given less
than the known mass under it.

Per subtree (``fixed_root=``): the pass below a node needs only that node's final value,
so a subtree task runs this on its own subtree with ``fixed_root`` = the value the levels
above gave it; the result equals the whole-tree pass restricted to the subtree.

Work: parents one height class at a time, top-down, each class cut into pieces run on
``hierdp.get_threads()`` threads (the cuts of ``round``; the same numbers whatever the
thread count); small trees take numpy passes per height class instead
(:mod:`hierdp.postprocessors._topdown_small`; the kernels interpreted, :func:`hierdp._kernels.jit.for_size`,
on deep ones).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp._kernels import jit as _jit
from hierdp._kernels import tree_pieces as TP
from hierdp._kernels.jit import for_size
from hierdp._kernels.threads import run_pieces
from hierdp._kernels.tree_pieces import PARALLEL_MIN, Pieces, tree_pieces
from hierdp.errors import DataError, warn
from hierdp.postprocessors import _blue_small
from hierdp.postprocessors import _passes_kernels as PK
from hierdp.postprocessors import _topdown_kernels as TK
from hierdp.postprocessors import _topdown_small as TS
from hierdp.postprocessors import _totals as TT
from hierdp.postprocessors.base import checked_variance, finite_values

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["topdown_nonneg", "topdown_round", "topdown_passes", "cuts_by_children", "wide", "ORDERINGS",
           "PL94_ORDERING", "check_ordering", "ordering_maps"]

_CUTS_KEY = "round.cuts"

#: the query orderings of the top-down steps by name, the default first: ``"total"`` each
#: parent's children's totals first, then their cells with both margins held
#: (:func:`topdown_passes`); ``"pl94"`` the 2020 P.L. 94 production rounder's passes
#: (:data:`PL94_ORDERING`); ``"cells"`` every cell alone (:func:`topdown_nonneg`,
#: :func:`topdown_round`). A mapping ``{"passes": [[dim, ...], ...], "cells": {dim: size, ...}}``
#: gives any chain of nested marginals held between the totals and the cells.
ORDERINGS = ("total", "pl94", "cells")

#: the rounder's passes of the 2020 P.L. 94 persons production run below the US (strategy
#: ``Strategy1b_ST_CTY_TR_BG_isoTot_Ordering_dsepJune3``; ``shared/census/pl94_persons_2020.yaml``,
#: ``query_ordering``): the total, then hhgq, hhgq x hispanic, hhgq x hispanic x cenrace, then
#: the cells (hhgq x votingage x hispanic x cenrace is every cell), over the P.L. 94 cells in
#: their production order
PL94_ORDERING: dict[str, Any] = {"passes": [["hhgq"], ["hhgq", "hispanic"], ["hhgq", "hispanic", "cenrace"]],
                                 "cells": {"hhgq": 8, "votingage": 2, "hispanic": 2, "cenrace": 63}}


def check_ordering(ordering: Any, where: str) -> Any:
    """``ordering`` checked (a name of :data:`ORDERINGS` or a passes mapping); one clear line otherwise."""
    if isinstance(ordering, str):
        if ordering not in ORDERINGS:
            raise DataError(f"{where}: unknown ordering {ordering!r}; use one of {', '.join(map(repr, ORDERINGS))} "
                            "or {'passes': [[dim, ...], ...], 'cells': {dim: size, ...}}")
        return ordering
    if not isinstance(ordering, dict) or set(ordering) != {"passes", "cells"}:
        raise DataError(f"{where}: an ordering is a name ({', '.join(map(repr, ORDERINGS))}) or a mapping with keys "
                        f"'passes' and 'cells', got {ordering!r:.80}")
    cells, passes = ordering["cells"], ordering["passes"]
    if not isinstance(cells, dict) or not cells or not all(
            isinstance(n, str) and isinstance(c, int) and not isinstance(c, bool) and c >= 1 for n, c in cells.items()):
        raise DataError(f"{where}: ordering 'cells' maps each cell dimension, in the histogram's order, to its size "
                        "(e.g. {'sex': 2, 'age': 5})")
    if not isinstance(passes, list) or not all(isinstance(q, list) and all(d in cells for d in q) for q in passes):
        raise DataError(f"{where}: ordering 'passes' is a list of marginals, each a list of dimensions of 'cells' "
                        f"({', '.join(cells)})")
    return {"passes": [list(q) for q in passes], "cells": dict(cells)}


def ordering_maps(ordering: Any, k: int, where: str = "ordering") -> np.ndarray | None:
    """The held marginals of ``ordering`` as :func:`topdown_passes` takes them (``(P, k)``
    group of each cell per pass), or None for ``"cells"`` (no pass: every cell alone)."""
    if ordering == "cells":
        return None
    if ordering == "total":
        return np.zeros((0, k), np.int64)
    spec = PL94_ORDERING if ordering == "pl94" else ordering
    sizes = list(spec["cells"].values())
    if int(np.prod(sizes)) != k:
        what = "the P.L. 94 cells (hhgq 8 x votingage 2 x hispanic 2 x cenrace 63)" if ordering == "pl94" else \
            f"its cells ({' x '.join(f'{n} {c}' for n, c in spec['cells'].items())})"
        raise DataError(f"{where}: the ordering is over {what} = {int(np.prod(sizes)):,} cells, the release has {k:,}")
    names = list(spec["cells"])
    grid = np.indices(sizes).reshape(len(sizes), k)  # each cell's coordinate per dimension, row-major
    rows = []
    for q in spec["passes"]:
        dims = [names.index(d) for d in names if d in q]  # the histogram's order
        if len(dims) == len(names):
            continue  # every dimension: the cells themselves, the last pass anyway
        g = np.zeros(k, np.int64)
        for d in dims:
            g = g * sizes[d] + grid[d]
        _, g = np.unique(g, return_inverse=True)
        rows.append(g.astype(np.int64))
    return np.array(rows, dtype=np.int64).reshape(len(rows), k)

#: inputs of SMALL_NUMPY_MIN to ``hierdp._kernels.jit.SMALL_INPUT`` node-cells on trees of at most
#: ``_blue_small.MAX_CLASSES`` height classes run as numpy passes
#: (:mod:`hierdp.postprocessors._topdown_small`); False: the kernels (interpreted there)
SMALL_NUMPY = True
#: below this many node-cells the interpreted kernels are cheaper than the numpy calls
SMALL_NUMPY_MIN = 256


def _small_numpy(tree: Tree, size: int, kernel) -> bool:
    """Whether the numpy passes run: a small input, unless ``kernel`` runs compiled at no
    compile (:func:`hierdp._kernels.jit.prefer_compiled`)."""
    return (SMALL_NUMPY and SMALL_NUMPY_MIN <= size <= _jit.SMALL_INPUT and _blue_small.usable(tree)
            and not _jit.prefer_compiled(kernel))


def cuts_by_children(tree: Tree, pieces: Pieces, cells: int = 1) -> list[list[tuple[int, int]]]:
    """Each height class of parents, top-down, cut where about PIECE child-cells
    (``hierdp._kernels.tree_pieces.PIECE``; ``cells`` per child) have gone by: the top-down
    passes' work is per child and cell, and a class of few parents with many children (the
    census's block groups: 218k parents, 11.4M blocks) cut by parents gave two uneven
    pieces. Parents of a class are independent, so any cut gives the same result; the cuts
    depend on the tree and ``cells`` only (cached on the tree). A tree below
    ``PARALLEL_MIN`` nodes (one piece in ``pieces``) is cut by its height classes, for
    releases of many cells (:func:`wide`)."""
    per = max(1, TP.PIECE // max(1, int(cells)))
    key = f"{_CUTS_KEY}.{per}"
    hit = tree.cache.get(key)
    if hit is not None:
        return hit
    ptr = tree.internal.child_ptr
    if tree.n_nodes < PARALLEL_MIN:
        spans = [tree.internal.height_slice(h) for h in range(tree.height, 1, -1)]
        classes = [(sl.start, sl.stop) for sl in spans if sl.stop > sl.start]
    else:
        classes = [(cls[0][0], cls[-1][1]) for cls in reversed(pieces.classes)]
    out = []
    for lo, hi in classes:
        kids = ptr[lo:hi + 1] - ptr[lo]
        at = np.searchsorted(kids, np.arange(per, int(kids[-1]), per), side="right") - 1
        bounds = np.unique(np.r_[0, at[at > 0], hi - lo]) + lo
        out.append([(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    tree.cache[key] = out
    return out


def wide(tree: Tree, cells: int) -> bool:
    """Whether a tree below ``PARALLEL_MIN`` nodes still has enough node-cells for its
    top-down passes to run a height class at a time in pieces on several threads."""
    return tree.n_nodes < PARALLEL_MIN <= tree.n_nodes * cells


def _by_class(tree: Tree, step: Any, cells: int = 1) -> list[Any]:
    """``step(lo, hi)`` over every parent, top-down: one call for a small tree (parents in
    index order are a top-down order), else a height class at a time in pieces (cut by
    child-cells, :func:`cuts_by_children`), on several threads. The same values either way."""
    n1 = tree.n_nodes - tree.n_leaves
    if n1 == 0:
        return []
    if tree.n_nodes < PARALLEL_MIN and not wide(tree, cells):
        return [step(0, n1, True)]
    out: list[Any] = []
    for cls in cuts_by_children(tree, tree_pieces(tree), cells):
        out += run_pieces(lambda r: step(r[0], r[1], False), cls)
    return out


def _inputs(tree: Tree, values: Any, variance: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """Values as (n, k) float64, variances as (n, 1) or (n, k) (1 when None), and which
    nodes are known exactly (variance 0)."""
    y = finite_values(tree, values)
    n = tree.n_nodes
    y2 = np.ascontiguousarray(y.reshape(n, -1))
    var = checked_variance(tree, variance, y.shape)
    if var is None:
        v2 = np.ones((n, 1))
    else:
        v2 = np.ascontiguousarray(var.reshape(n, -1), dtype=np.float64)
    return y2, v2, v2 == 0, y.shape


def _pin_totals(tree: Tree, y2: np.ndarray, v2: np.ndarray, totals: Any, *, integer: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes with an exact total over their cells (``totals``: (n,), NaN elsewhere, internal
    order; the invariant levels, a top of the tree): their cells solved jointly
    (:func:`hierdp.postprocessors._totals.solve_region`) and then held (variance 0) for
    the per-cell pass below them. Returns the values, variances and exact mask."""
    t = np.asarray(totals, dtype=np.float64).reshape(-1)
    n, k = y2.shape
    if t.size != n:
        raise DataError(f"totals must hold one value per node ({n}), NaN where a node's total is not exact")
    reg, par_reg = TT.total_region(tree.internal.parent, np.isfinite(t))
    if not reg.size:
        return y2, v2, v2 == 0
    fixed = TT.solve_region(par_reg, y2[reg], v2[reg], t[reg], integer=integer)
    y2 = y2.copy()
    y2[reg] = fixed
    v2 = np.array(np.broadcast_to(v2, (n, k)) if v2.shape[1] != k else v2, dtype=np.float64)
    v2[reg] = 0.0
    return y2, v2, v2 == 0


def _setup(tree: Tree, values: Any, variance: Any, fixed_root: Any, totals: Any, *, integer: bool
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """The top-down steps' inputs (:func:`_inputs`) with the node-total invariants pinned
    (:func:`_pin_totals`); ``fixed_root`` and ``totals`` both given is one line."""
    y2, v2, exact, shape = _inputs(tree, values, variance)
    if totals is not None:
        if fixed_root is not None:
            raise DataError(f"{'round' if integer else 'nonneg'}: give either fixed_root or totals (the totals fix "
                            "the root's cells)")
        y2, v2, exact = _pin_totals(tree, y2, v2, totals, integer=integer)
    return y2, v2, exact, shape


def _root_value(fixed_root: Any, k: int, what: str) -> np.ndarray:
    r = np.asarray(fixed_root, dtype=np.float64).reshape(-1)
    if r.size == 1:
        r = np.full(k, float(r[0]))
    if r.size != k or not np.all(np.isfinite(r)) or np.any(r < 0):
        raise DataError(f"{what}: fixed_root must be one non-negative number or one per cell ({k}), "
                        f"got {fixed_root!r:.60}")
    return r


def topdown_nonneg(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None, *,
                   fixed_root: float | np.ndarray | None = None, totals: np.ndarray | None = None) -> np.ndarray:
    """Top-down non-negative consistent values (internal order).

    Parameters
    ----------
    tree : Tree
        The public tree.
    values : ndarray, shape (n,) or (n, k)
        A consistent estimate to start from, normally BLUE's (Dawson et al., Alg. 2); only
        the children's values are read below the root.
    variance : ndarray, optional
        Its per-node variances, (n,) or like ``values`` (BLUE's): the weights ``1 / var``
        of each parent's projection. ``None``: equal weights. ``inf``: weight 0 (such a
        child takes the adjustment first); ``0``: known exactly, kept.
    fixed_root : float or ndarray (k,), optional
        The root's value (per cell), e.g. a subtree root's value from the levels above.
        Default: the root's ``values`` clipped at 0 (at least the known mass below it).
    totals : ndarray (n,), optional
        Exact totals over the cells (node-total invariants; NaN where a node has none), on a
        top of the tree (whole levels from the root down): those nodes' cells are solved
        jointly first, each parent's invariant children under their totals and the parent's
        cells (TopDown's step; :mod:`hierdp.postprocessors._totals`), then held.

    Returns
    -------
    ndarray
        Non-negative values, each parent equal to the sum of its children (in every cell).
    """
    y2, v2, exact, shape = _setup(tree, values, variance, fixed_root, totals, integer=False)
    n, k = y2.shape
    small = _small_numpy(tree, n * k, TK.project_parents)
    low = np.zeros((n, k) if small else (1, 1))  # (1, 1): no bounds, and no node-cell sized zeros to read
    if exact.any():
        low = np.zeros((n, k))
        if small:
            low = TS.lower_bounds_small(tree, exact, y2)
        else:
            for_size(TK.lower_bounds, n * k)(tree.internal.parent, exact, y2, low)
    x = np.empty_like(y2)
    if fixed_root is None:
        x[0] = np.maximum(np.maximum(y2[0], 0.0), low[0])  # an exact root: low[0] is its own value
    else:
        x[0] = _root_value(fixed_root, k, "nonneg")
    ptr, idx = tree.internal.child_ptr, tree.internal.child_idx

    def step(lo: int, hi: int, small: bool) -> float:
        kern = for_size(TK.project_parents, n * k) if small else TK.project_parents
        return float(kern(ptr, idx, y2, v2, low, x, lo, hi))

    if small:
        worst = TS.project_small(tree, y2, v2, low, x) if n > 1 else 0.0
    else:
        worst = max(_by_class(tree, step, k), default=0.0)
    if worst > 1e-6 * (1.0 + float(np.max(np.abs(x[0])))):
        raise DataError("nonneg (top-down): the values known exactly (variance 0) exceed their parent's value or "
                        "a parent has no child free to move; give consistent exact values (invariants from the top)")
    return x.reshape(shape)


def topdown_round(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None, *,
                  fixed_root: int | np.ndarray | None = None, totals: np.ndarray | None = None) -> np.ndarray:
    """Top-down non-negative consistent integers (int64, internal order).

    The root is ``values[root]`` rounded (half up, at least 0; or ``fixed_root``); then,
    top-down, each parent's children are the non-negative integers summing to the
    parent's integer that are closest to their ``values`` in the norm
    ``sum_j (z_j - y_j)^2 / var_j`` (exact: the greedy rule on unit costs, see
    :func:`hierdp.postprocessors._topdown_kernels.integer_group`). With equal variances
    among siblings and a consistent input this is the largest-remainder rule, so every
    node stays within 1 of its input; with unequal ones a high-variance child may move
    further (it is the closest point in that norm). The input need not be consistent or
    non-negative (the projection handles both). Nodes known exactly (variance 0) keep
    their value, which must be an integer. ``totals`` (n,), NaN where none: exact integer
    totals over the cells on a top of the tree (node-total invariants), solved jointly
    first by controlled rounding (:func:`hierdp.postprocessors._totals.round_table`), then
    held; ``values`` must keep them (``topdown_nonneg`` with the same ``totals``).
    """
    y2, v2, exact, shape = _setup(tree, values, variance, fixed_root, totals, integer=True)
    n, k = y2.shape
    # two reductions, no copies (np.abs and a comparison made two node-cell sized arrays)
    if not (-(2.0**53) < float(y2.min(initial=0.0)) and float(y2.max(initial=0.0)) < 2.0**53):
        raise DataError("round works on counts below 2**53 (float64 holds every integer only up to there); "
                        "scale the values down first")
    small = _small_numpy(tree, n * k, TK.integer_parents)
    # no node known exactly: every lower bound is 0, and the compiled pass is told so by a
    # (1, 1) array (not rint and a cast of zeros over every node-cell)
    lowi = np.zeros((n, k) if small else (1, 1), np.int64)
    if exact.any():
        low = np.zeros((n, k))
        ex = np.broadcast_to(exact, (n, k))
        if np.any(np.abs(y2[ex] - np.rint(y2[ex])) > 1e-6):
            raise DataError("round: a node known exactly (variance 0, e.g. an invariant) is not an integer; "
                            "invariants must be integer counts")
        if small:
            low = TS.lower_bounds_small(tree, exact, np.rint(y2))
        else:
            for_size(TK.lower_bounds, n * k)(tree.internal.parent, exact, np.rint(y2), low)
        lowi = np.rint(low).astype(np.int64)
    out = np.empty((n, k), np.int64)
    if fixed_root is None:
        root = np.floor(np.maximum(y2[0], 0.0) + 0.5)
        ex0 = np.broadcast_to(exact[0], (k,))
        root[ex0] = np.rint(y2[0][ex0])
        out[0] = np.maximum(root.astype(np.int64), lowi[0])
    else:
        r = _root_value(fixed_root, k, "round")
        if np.any(r != np.rint(r)):
            raise DataError(f"round: fixed_root must be integers, got {fixed_root!r:.60}")
        out[0] = r.astype(np.int64)
    ptr, idx = tree.internal.child_ptr, tree.internal.child_idx

    def step(lo: int, hi: int, small: bool) -> tuple[int, int]:
        kern = for_size(TK.integer_parents, n * k) if small else TK.integer_parents
        missed, bad = kern(ptr, idx, y2, v2, lowi, out, lo, hi)
        return int(missed), int(bad)

    res = [TS.integer_small(tree, y2, v2, lowi, out)] if small and n > 1 else _by_class(tree, step, k)
    if sum(r[0] for r in res):
        raise DataError("round (top-down): the values known exactly (variance 0) exceed their parent's integer or "
                        "a parent has no child free to move; give consistent exact values (invariants from the top)")
    return out.reshape(shape)


def _check_maps(maps: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The held marginals of an ordering as ``(maps (P, k), sizes (P,))``: each row maps a cell
    to its group (0 .. G-1, every group used), each refining the row before."""
    if maps is None:
        return np.zeros((0, k), np.int64), np.zeros(0, np.int64)
    m = np.asarray(maps)
    if m.ndim != 2 or m.shape[1] != k or (m.size and not np.issubdtype(m.dtype, np.integer)):
        raise DataError(f"an ordering's marginals must map each of the {k} cells to a group (integers, shape (P, {k}))")
    m = np.ascontiguousarray(m, dtype=np.int64)
    sizes = np.zeros(m.shape[0], np.int64)
    prev = np.zeros(k, np.int64)
    for t, row in enumerate(m):
        if row.min(initial=0) < 0 or np.unique(row).size != int(row.max(initial=-1)) + 1:
            raise DataError(f"ordering pass {t + 1}: groups must be numbered 0 .. G-1, every one used")
        pairs = np.unique(np.stack((row, prev)), axis=1)
        if np.unique(pairs[0]).size != pairs.shape[1]:
            raise DataError(f"ordering pass {t + 1} does not refine the pass before it (the held marginals must be "
                            "nested, coarsest first)")
        sizes[t] = int(row.max(initial=-1)) + 1
        prev = row
    return m, sizes


#: the passes read the variances to this many significant bits, the values to VALUE_BITS (of float64's 53)
WEIGHT_BITS = 24
VALUE_BITS = 32


def _bits(v: np.ndarray, bits: int) -> np.ndarray:
    """A copy of ``v`` with its finite non-zero entries rounded to ``bits`` significant bits
    (0, inf and the sign kept). A GLS estimate computed by another path (a subtree task's
    passes) differs from the in-memory one in the last bits, and the passes would carry that
    into the integers' near-ties; rounded, both paths read the same numbers (unless an entry
    lies within a few ulps of a rounding boundary: about one in 2**(50 - bits) of the entries
    that differ at all). The change is far below the noise (2**-32 relative for values)."""
    v = np.array(v, dtype=np.float64)
    fin = np.isfinite(v) & (v != 0)
    if fin.any():
        drop = 52 - bits
        b = v[fin].view(np.uint64)
        b = (b + np.uint64(1 << (drop - 1))) & ~np.uint64((1 << drop) - 1)
        v[fin] = b.view(np.float64)
    return v


def _exact_from_the_top(tree: Tree, exact2: np.ndarray, exact_all: np.ndarray, root_fixed: bool) -> bool:
    """Whether the nodes known exactly are whole nodes (every cell) closed upwards (each one's
    parent known too; the root when fixed): what the passes hold (a parent's children all
    known or none, and no unknown node above a known one)."""
    if np.any(exact2.any(axis=1) & ~exact_all):
        return False
    known = exact_all.copy()
    known[0] |= root_fixed
    par = tree.internal.parent
    if not np.all(known[par[1:]] | ~known[1:]):
        return False
    n_known = np.bincount(par[1:], weights=known[1:], minlength=tree.n_nodes)
    n_kids = np.bincount(par[1:], minlength=tree.n_nodes)
    return bool(np.all((n_known == 0) | (n_known == n_kids)))


def topdown_passes(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None, *, integer: bool,
                   fixed_root: float | np.ndarray | None = None, totals: np.ndarray | None = None,
                   marginals: np.ndarray | None = None, passes_at: np.ndarray | None = None,
                   node_ids: np.ndarray | None = None, seed: int = 0, atol: float = 1e-7) -> np.ndarray:
    """Top-down consistent non-negative values (or integers), each parent's children solved in
    passes: their totals first, then each held marginal, then the cells, every pass holding the
    parent's final values and the earlier passes exactly (TopDown's query ordering, Abowd et al.
    2022, Sec. 7.2; :mod:`hierdp.postprocessors._passes_kernels`).

    Parameters
    ----------
    tree : Tree
        The public tree.
    values : ndarray, shape (n, k)
        The estimate to start from, normally the GLS estimate (internal order).
    variance : ndarray, optional
        Its variances, (n,), (n, 1) or (n, k): the weights ``1 / var`` (``inf``: unmeasured,
        takes the adjustment first; ``0`` on every cell of a node: known exactly, kept).
    integer : bool
        Integers (controlled rounding in each pass, every held margin exact) or reals.
    fixed_root : float or ndarray (k,), optional
        The root's final cells (a subtree root's from the levels above).
    totals : ndarray (n,), optional
        Exact totals over the cells on a top of the tree (node-total invariants), solved jointly
        first (:mod:`hierdp.postprocessors._totals`), then held.
    marginals : ndarray (P, k), optional
        The held marginals between the totals and the cells, coarsest first: row ``t`` maps each
        cell to its group; each row refines the one before.
    passes_at : ndarray (n,) of bool, optional
        The parents whose children are solved in passes (internal order); the others' children
        cell by cell, no total held (TopDown's Block level). Default: every parent whose
        children are not all leaves.
    node_ids : ndarray (n,), optional
        Each node's index in the full tree's internal order (default: ``arange(n)``): with
        ``seed`` it keys the tie-breaks, so a subtree gives the whole tree's integers.
    seed : int
        The release's tie-break seed (64 bits; :func:`hierdp.keyed_noise.tiebreak_seed`).
    atol : float
        Values within ``atol`` of an integer count as that integer (integers only).

    Returns
    -------
    ndarray, shape (n, k)
        float64, or int64 when ``integer``: each parent equal to the sum of its children.
    """
    y2, v2, exact2, shape = _setup(tree, values, variance, fixed_root, totals, integer=integer)
    n, k = y2.shape
    if integer and not (-(2.0**52) < float(y2.min(initial=0.0)) and float(y2.max(initial=0.0)) < 2.0**52):
        raise DataError("round works on counts below 2**52; scale the values down first")
    exact_all = np.asarray(exact2.all(axis=1), dtype=bool)
    if not _exact_from_the_top(tree, exact2, exact_all, fixed_root is not None):
        # nodes known exactly that are not whole sibling groups from the top (an invariant leaf,
        # a node exact in some cells): the cell-by-cell steps carry their lower bounds
        if integer:
            return topdown_round(tree, values, variance, fixed_root=cast(Any, fixed_root), totals=totals)
        return topdown_nonneg(tree, values, variance, fixed_root=fixed_root, totals=totals)
    v2 = _bits(v2, WEIGHT_BITS)
    y2 = np.where(exact2, y2, _bits(y2, VALUE_BITS))  # known values (a subtree's held roots) as given
    maps, sizes = _check_maps(marginals, k)
    ids = np.arange(n, dtype=np.int64) if node_ids is None else np.ascontiguousarray(node_ids, dtype=np.int64)
    if ids.shape != (n,):
        raise DataError(f"node_ids must hold one id per node ({n})")
    out = np.empty((n, k), np.int64 if integer else np.float64)
    if fixed_root is not None:
        r = _root_value(fixed_root, k, "round" if integer else "nonneg")
        if integer and np.any(r != np.rint(r)):
            raise DataError(f"round: fixed_root must be integers, got {fixed_root!r:.60}")
        out[0] = r
    elif exact_all[0]:
        out[0] = np.rint(y2[0]) if integer else y2[0]
    else:
        t0 = max(float(y2[0].sum()), 0.0)
        t0 = float(np.floor(t0 + 0.5)) if integer else t0
        r0 = np.empty(k)
        v0 = np.ascontiguousarray(np.broadcast_to(v2[0], (k,)), dtype=np.float64)
        with np.errstate(over="ignore"):  # the keyed draws' uint64 arithmetic wraps when interpreted
            bad0 = for_size(PK.root_passes, n * k)(np.ascontiguousarray(y2[0]), v0, t0, integer, np.uint64(seed),
                                                   int(ids[0]), float(atol), r0)
        if bad0:
            raise DataError("round: the root's cells could not be rounded to its total")
        out[0] = r0
    ptr, idx = tree.internal.child_ptr, tree.internal.child_idx
    seed64 = np.uint64(int(seed) & (2**64 - 1))
    if k == 1:  # one cell: its total is the cell, the passes would solve it twice
        mode = np.zeros(n, np.int8)
    elif passes_at is None:
        mode = np.zeros(n, np.int8)
        n1 = ptr.size - 1
        # a parent in passes unless all its children are leaves (their own child pointers are empty)
        kids_inner = np.zeros(n, bool)
        kids_inner[:n1] = np.diff(ptr) > 0
        has_inner = np.zeros(idx.size + 1, np.int64)
        np.cumsum(kids_inner[idx], out=has_inner[1:])
        mode[:n1] = (has_inner[ptr[1:]] - has_inner[ptr[:-1]]) > 0
    else:
        mode = np.ascontiguousarray(passes_at, dtype=np.int8).reshape(-1)
        if mode.size != n:
            raise DataError(f"passes_at must hold one flag per node ({n})")

    def step(lo: int, hi: int, small: bool) -> tuple[int, int, int]:
        kern = for_size(PK.passes_parents, n * k) if small else PK.passes_parents
        with np.errstate(over="ignore"):  # the keyed draws' uint64 arithmetic wraps when interpreted
            f, b, mx = kern(ptr, idx, y2, v2, exact_all, ids, maps, sizes, mode, out, lo, hi, integer, seed64,
                            float(atol))
        return int(f), int(b), int(mx)

    res = _by_class(tree, step, k)
    if sum(r[2] for r in res):
        raise DataError("the passes need each parent's children all known exactly or none (invariants whole levels "
                        "from the top)")
    if sum(r[1] for r in res):
        raise DataError("round: a parent's integers could not meet its held margins (values known exactly that "
                        "exceed their parent's?)")
    if sum(r[0] for r in res):
        warn(f"the two-margin projection did not converge on {sum(r[0] for r in res)} parent(s); their children "
             "are approximate (please report it)", RuntimeWarning)
    return out.reshape(shape)
