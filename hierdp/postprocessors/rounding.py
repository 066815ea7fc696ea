"""Consistent non-negative integer counts by top-down controlled rounding.

Two methods (:class:`ControlledRounding`, parameter ``method``): ``"topdown"``, the
default, the closest integers under each fixed parent in the norm weighted by the input's
variances, in TopDown's query ordering (totals first, then the cells with both margins
exact; ties broken by the release's key, :func:`hierdp.postprocessors.topdown.topdown_passes`),
or cell by cell (``ordering="cells"``, :func:`hierdp.postprocessors.topdown.topdown_round`);
``"remainder"``, below (unweighted, within 1 of a consistent input; ties in label order).

Beyond the papers. Given a consistent, non-negative real estimate (e.g. the output of
``nonneg``), the root is rounded to the nearest integer and, top-down, each node's
integer value is split among its children: every child gets ``floor(x_c)`` and the
remaining ``D = R - sum floor(x_c)`` units go one each to the children with the largest
fractional parts. For consistent input ``floor(sum f) <= D <= ceil(sum f)`` (f: the
children's fractional parts), so ``0 <= D <= #children with a fraction``: every node
ends strictly within 1 of its input, integral nodes keep their value, and an input that
is already integral and consistent is returned unchanged. One pass, O(n) (a partition
per sibling group). Inconsistent or negative input still yields consistent non-negative
integers (negatives count as 0; a surplus or deficit is spread evenly), without the
within-1 guarantee.

Exact nodes (variance 0, e.g. invariants) hold integers in a consistent input, and an
integral node keeps its value (above), so controlled rounding with fixed totals needs no
extra step: every exact node, at any depth, keeps its integer. :class:`ControlledRounding`
checks it and refuses an exact node that is not an integer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from hierdp._kernels.jit import for_size
from hierdp._kernels.memory import large_empty
from hierdp._kernels.threads import run_pieces
from hierdp._kernels.tree_pieces import PARALLEL_MIN, tree_pieces
from hierdp.errors import DataError
from hierdp.postprocessors import _rounding_kernels as RK
from hierdp.postprocessors.base import Estimate, PostProcessor, checked_variance, finite_values, node_values
from hierdp.postprocessors.topdown import (
    check_ordering,
    cuts_by_children,
    ordering_maps,
    topdown_passes,
    topdown_round,
    wide,
)

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["ControlledRounding", "controlled_round", "METHODS"]

#: the methods of :class:`ControlledRounding`, the default first
METHODS = ("topdown", "remainder")


def _refuse(tree: Tree, y: np.ndarray) -> NoReturn:
    """The one-line error for the values the kernels found unfit: :func:`finite_values`'
    for NaN or infinity, else the one for values too large to hold every integer."""
    finite_values(tree, y)
    raise DataError("round works on counts below 2**53 (float64 holds every integer only up to there); "
                    "scale the values down first")


def controlled_round(tree: Tree, values: np.ndarray, *, atol: float = 1e-7) -> np.ndarray:
    """Consistent non-negative int64 counts within 1 of ``values`` (internal order).

    The kernels check the values as they read them (NaN, infinity and magnitudes from
    2**53 up are refused with a one-line error): no separate pass over the input."""
    y = node_values(tree, values)
    if not 0 <= atol < 0.5:
        raise DataError(f"atol must be in [0, 0.5), got {atol!r}")
    y2 = np.ascontiguousarray(y.reshape(tree.n_nodes, -1))
    out = large_empty(y2.shape, np.int64)
    if tree.n_nodes < PARALLEL_MIN and not wide(tree, y2.shape[1]):
        bad = for_size(RK.round_top_down_2d, y2.size)(tree.internal.child_ptr, tree.internal.child_idx, y2,
                                                      out, float(atol))
        if bad:
            _refuse(tree, y)
        return out.reshape(y.shape)
    # parents one height class at a time, top-down, each class in pieces on several threads
    # (a tree below PARALLEL_MIN nodes too when its node-cells are many)
    ptr, idx = tree.internal.child_ptr, tree.internal.child_idx
    root = y2[0]
    if not np.all(np.abs(root) < RK.EXACT_MAX):
        _refuse(tree, y)
    out[0] = np.floor(np.maximum(root, 0.0) + 0.5).astype(np.int64)
    pieces = tree_pieces(tree)
    classes = cuts_by_children(tree, pieces, y2.shape[1])
    if y2.shape[1] == 1 and pieces.children_in_order:  # 1-D values, children i+1.. (hierdp's own order)
        y1, o1 = y2[:, 0], out[:, 0]

        def piece(r: tuple[int, int]) -> int:
            return int(RK.round_parents_1d(ptr, y1, o1, float(atol), r[0], r[1]))
    else:
        def piece(r: tuple[int, int]) -> int:
            return int(RK.round_parents(ptr, idx, y2, out, float(atol), r[0], r[1]))
    for cls in classes:  # each returns its count of unfit values
        if sum(run_pieces(piece, cls)):
            _refuse(tree, y)
    return out.reshape(y.shape)


class ControlledRounding(PostProcessor):
    """Consistent non-negative integers, top-down from the rounded root, by one of two
    methods (parameter ``method``).

    ``"topdown"`` (the default): each parent's children are the non-negative integers
    summing to the parent's integers closest to their input in the norm weighted by the
    input's variances. ``ordering="total"`` (the default; TopDown's rounder, Abowd et al.
    2022, Sec. 7.2): the children's totals first (controlled rounding of their weighted
    projection under the parent's total), then their cells by controlled rounding with
    both margins exact (each column the parent's cell, each row the child's total: every
    cell within 1 of the real two-margin projection, the weighted distance minimal;
    :func:`hierdp.postprocessors.topdown.topdown_passes`); the bottom level cell by cell.
    Ties among equal distances are broken by uniforms keyed on the release's key and the
    node's identity, so no unit gains by its label, and a split release gives the same
    integers. ``ordering="cells"``: every cell alone, ties in label order
    (:func:`hierdp.postprocessors.topdown.topdown_round`, the method before issue 47). It
    also accepts an input that is not consistent or not non-negative (e.g. BLUE's).

    ``"remainder"``: each parent's integer is split among its children by the
    largest-remainder rule (:func:`controlled_round`): every node within 1 of a consistent
    non-negative input, unweighted, ties in label order (the default before issue 47).
    ``atol``: distance to an integer treated as 0.
    """

    name = "round"
    requires_variance = False
    consistent = True
    requires_consistent_input = True
    #: both methods run per subtree given its root's integer
    #: (:func:`hierdp.postprocessors.topdown.topdown_round`, ``fixed_root=``)
    splittable = True

    def __init__(self, atol: float = 1e-7, method: str = "topdown", ordering: Any = "total") -> None:
        if not 0 <= float(atol) < 0.5:
            raise DataError(f"atol must be in [0, 0.5), got {atol!r}")
        if method not in METHODS:
            raise DataError(f"round: unknown method {method!r}; use one of {', '.join(map(repr, METHODS))}")
        self.atol = float(atol)
        self.method = method
        self.ordering = check_ordering(ordering, "round")
        # a split release runs the top-down integer step per subtree (method "topdown"); the
        # remainder rule breaks ties among siblings its own way, so it is not offered there
        self.split_mode = "top_down" if method == "topdown" else None

    @property
    def couples_cells(self) -> bool:
        """Whether a node's cells are solved together (ordering ``"total"``: each child's total held)."""
        return self.method == "topdown" and self.ordering != "cells"

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        var = checked_variance(tree, estimate.variance, np.shape(estimate.values))
        k = int(np.prod(np.shape(estimate.values)[1:], dtype=np.int64))
        if self.method == "topdown" and self.ordering != "cells":
            seed = 0 if estimate.tiebreak is None else int(estimate.tiebreak)
            return Estimate(topdown_passes(tree, estimate.values, var, integer=True, totals=estimate.exact_totals,
                                           marginals=ordering_maps(self.ordering, k, "round"), seed=seed,
                                           atol=self.atol),
                            None if var is None else var.copy(),
                            {"method": "round", "mode": "topdown", "ordering": self.ordering})
        if self.method == "topdown":
            return Estimate(topdown_round(tree, estimate.values, var, totals=estimate.exact_totals),
                            None if var is None else var.copy(),
                            {"method": "round", "mode": "topdown"})
        out = controlled_round(tree, estimate.values, atol=self.atol)
        info = {"method": "round"}
        if var is not None and np.any(var == 0):
            exact = np.broadcast_to(var.reshape(var.shape + (1,) * (out.ndim - var.ndim)) == 0, out.shape)
            xin = np.asarray(estimate.values, dtype=np.float64)[exact]
            if np.any(np.abs(xin - np.rint(xin)) > self.atol) or np.any(out[exact] != np.rint(xin)):
                raise DataError("round: a node known exactly (variance 0, e.g. an invariant) is not an integer or "
                                "could not keep its value; invariants must be integer counts of a consistent input")
        return Estimate(out, None if var is None else var.copy(), info)
