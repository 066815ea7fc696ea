"""The one count check of a release: true values that cannot be counts are refused
before any noise is drawn, whole or a part of the tree at a time. The messages say what,
never which node or value (they are private)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp import rules, subtrees
from hierdp._kernels import jit as _jit
from hierdp._kernels import threads as _threads
from hierdp._kernels.tree_kernels import children_mismatch
from hierdp.errors import (
    DataError,
)
from hierdp.tree import Tree

if TYPE_CHECKING:
    pass


def check_values(tree: Tree, values: np.ndarray) -> np.ndarray:
    vals = np.asarray(values)
    if vals.ndim not in (1, 2) or vals.shape[0] != tree.n_nodes:
        raise DataError(f"true values must have shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {vals.shape}")
    if vals.dtype == object or not (np.issubdtype(vals.dtype, np.number) or vals.dtype == bool):
        raise DataError(f"true values must be numeric, got dtype {vals.dtype}")
    if np.issubdtype(vals.dtype, np.floating) and not np.all(np.isfinite(vals)):
        raise DataError("true values contain NaN or infinity")
    if vals.dtype == np.uint64 and vals.size and vals.max() > np.iinfo(np.int64).max:
        rules.enforce(rules.value_range_problem(float(vals.max())), DataError)
    if vals.size and vals.dtype != bool:
        # exact for integers: |int64 min| does not fit int64, so compare the two ends
        hi, lo = vals.max(), vals.min()
        big = max(abs(int(hi)), abs(int(lo))) if np.issubdtype(vals.dtype, np.integer) else max(abs(hi), abs(lo))
        rules.enforce(rules.value_range_problem(big), DataError)
    return vals


NEGATIVE_COUNTS = ("node counts must be non-negative; some are negative (values not shown: they are private). "
                    "Pass check_counts=False to release such values as given (the ledger says so)")


COUNTS_DO_NOT_ADD_UP = ("some internal nodes are not the sum of their leaves (values not shown: they are private); "
                         "node counts of a hierarchy add up: pass the leaf counts through tree.aggregate(...), or "
                         "check_counts=False to release the values as given (the ledger says so)")


def count_problem(tree: Tree, vals: np.ndarray, check: Any) -> str | None:
    """Node values that cannot be counts (``check_counts``): ``True`` (default; ``"strict"``
    is the same, its older spelling) refuses a negative one and a node that is not the sum
    of its leaves, cell by cell for ``(n, k)`` values (one vectorised bottom-up pass: exact
    for integers, 1e-9 relative for floats, whose sums depend on the order of addition);
    ``False`` checks nothing. Says what, never which node or value (they are private)."""
    if check is False:
        return None
    if check is not True and check != "strict":
        return f"check_counts must be True, 'strict' or False, got {check!r:.40}"
    if vals.dtype == bool or not vals.size:
        return None
    if vals.min() < 0:
        return NEGATIVE_COUNTS
    if tree.n_leaves == tree.n_nodes:  # a lone root: nothing to add up
        return None
    if vals.dtype == np.int64 and vals.size > _jit.SMALL_INPUT:
        got = _children_mismatch(tree, vals)
        if got == 1:
            return COUNTS_DO_NOT_ADD_UP
        if got == 0:
            return None  # (2, a sum past int64: the aggregation below says so)
    agg = tree.aggregate(vals[tree.leaves])
    if np.issubdtype(vals.dtype, np.integer):
        off = bool(np.any(agg != vals))
    else:  # non-negative leaves: a sum's rounding error is relative to the sum itself
        off = not np.allclose(agg, vals, rtol=1e-9, atol=1e-12 * float(agg.max(initial=0.0)))
    if off:
        return COUNTS_DO_NOT_ADD_UP
    return None


_CHECK_PIECE = 1 << 22  # child values a piece of the counts check


def _children_mismatch(tree: Tree, vals: np.ndarray) -> int:
    """:func:`hierdp._kernels.tree_kernels.children_mismatch` over every internal node of
    ``tree`` for its non-negative int64 ``vals`` (external order, ``(n,)`` or ``(n, k)``),
    in pieces of about the same number of child rows on ``hierdp.get_threads()`` threads:
    0 every node with children is their sum, 1 some is not, 2 a sum passes int64. For
    integers this is the rule of :func:`count_problem` (node = sum of its leaves), by
    induction from the leaves up."""
    ia = tree.internal
    v2 = np.ascontiguousarray(vals.reshape(vals.shape[0], -1))
    perm = ia.perm if ia.perm is not None else np.zeros(0, np.int64)
    ptr, idx = ia.child_ptr, ia.child_idx
    n_par = int(np.count_nonzero(ia.n_children))  # the nodes with children: the internal order's first
    rows = int(ptr[n_par])
    per = max(1, _CHECK_PIECE // max(1, v2.shape[1]))  # child rows a piece
    cuts = np.unique(np.searchsorted(ptr[: n_par + 1], np.arange(0, rows, per), side="right") - 1)
    bounds = [int(c) for c in cuts] + [n_par]
    pieces = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    got = _threads.run_pieces(lambda r: children_mismatch(v2, perm, ptr, idx, r[0], r[1]), pieces)
    return max(got, default=0)


def part_count_problem(parent: np.ndarray, vals: np.ndarray, check: Any, roots_parent: np.ndarray | None = None,
                       roots_vals: np.ndarray | None = None) -> str | None:
    """:func:`count_problem` for a part of the tree given as parent-first local ``parent``
    (-1: no parent inside) and, for the top part, the subtree roots below it (each root's
    parent's position in the part, and the roots' counts, already checked by their tasks;
    their rows are not copied): non-negative, and every node with children their sum (cell
    by cell; exact for integers, 1e-9 relative for floats). Says what, never which node."""
    if check is not False and check is not True and check != "strict":
        return f"check_counts must be True, 'strict' or False, got {check!r:.40}"
    if check is False or vals.dtype == bool or not vals.size:
        return None
    if vals.min() < 0:
        return NEGATIVE_COUNTS
    floating = np.issubdtype(vals.dtype, np.floating) or (
        roots_vals is not None and np.issubdtype(roots_vals.dtype, np.floating))
    sums = np.zeros(vals.shape, dtype=np.float64 if floating else np.int64)
    rows = np.flatnonzero(parent >= 0)
    # children's rows of a parent-first part are grouped by parent already: one slice, no copy
    kids = vals[rows[0]:] if rows.size and rows.size == vals.shape[0] - rows[0] else vals[rows]
    has = np.zeros(parent.size, dtype=bool)
    groups = [(parent[rows], kids)]
    if roots_parent is not None and roots_vals is not None:
        groups.append((roots_parent, roots_vals))
    for par, kid in groups:
        if not par.size:
            continue
        if not np.all(par[1:] >= par[:-1]):  # grouped by parent for one reduceat (a stable sort)
            o = np.argsort(par, kind="stable")
            par, kid = par[o], kid[o]
        starts = np.flatnonzero(np.r_[True, par[1:] != par[:-1]])
        sums[par[starts]] += np.add.reduceat(kid, starts, axis=0, dtype=sums.dtype)
        has[par] = True
    got, want = sums[has], vals[has]
    if not floating:
        off = bool(np.any(got != want))
    else:
        off = not np.allclose(got, want, rtol=1e-9, atol=1e-12 * float(np.abs(got).max(initial=0.0)))
    return COUNTS_DO_NOT_ADD_UP if off else None


def task_counts(task: subtrees.SubtreeTask, counts: Any, n_cells: int) -> np.ndarray:
    """The counts a ``counts_of`` gave for ``task``, as ``(m, n_cells)``; one-line errors."""
    a = np.asarray(counts)
    what = "the top part" if task.index < 0 else f"task {task.index}"
    if a.shape not in ((task.n_nodes,), (task.n_nodes, n_cells)) or (a.ndim == 1 and n_cells != 1):
        raise DataError(f"counts_of({what}) must return shape ({task.n_nodes}, {n_cells})"
                        f"{f' or ({task.n_nodes},)' if n_cells == 1 else ''} in task.nodes order, got {a.shape}")
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise DataError(f"counts_of({what}) must return numbers, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating) and a.size and not np.isfinite(a).all():
        raise DataError(f"counts_of({what}) returned NaN or infinity")
    if a.size and a.dtype != bool:
        big = max(abs(int(a.max())), abs(int(a.min()))) if np.issubdtype(a.dtype, np.integer) else \
            float(np.abs(a).max())
        rules.enforce(rules.value_range_problem(big), DataError)
    return a.reshape(task.n_nodes, n_cells)
