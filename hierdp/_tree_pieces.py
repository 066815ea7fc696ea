"""Cutting a tree's O(n) passes into pieces that threads can run at once.

A bottom-up pass (each node adds into its parent) can run the nodes of one height class
at the same time once every lower class is done, provided two pieces never add into the
same parent: pieces are cut at parent boundaries, and only in a class where each
parent's children form one run (true of the order hierdp builds: ties by depth, then
parent). A top-down pass reads only the parent, so any cut works. A node's arithmetic,
and the order in which a parent receives its children's terms, are those of the
single-threaded loop (classes bottom-up are indices high to low), so results are the
same bits whatever the thread count. Cuts are fixed per tree (:data:`PIECE` nodes), not
per thread count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["PIECE", "PARALLEL_MIN", "Pieces", "tree_pieces"]

#: nodes per piece (about 1 MiB of float64 per array touched)
PIECE = 1 << 17
#: trees with fewer nodes run every pass in one piece
PARALLEL_MIN = 1 << 20
_KEY = "hierdp.tree_pieces"


@dataclass(frozen=True)
class Pieces:
    """``leaves``: ranges of the trailing run of leaves ``[n1, n)``; ``classes``: the
    internal height classes bottom-up (height 2 first), each a list of ranges."""

    n1: int
    leaves: list[tuple[int, int]]
    classes: list[list[tuple[int, int]]]


def _cuts(par: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into ranges of about PIECE nodes, each cut where the parent changes;
    one range when some parent's children in [lo, hi) are not one run."""
    if hi - lo <= PIECE:
        return [(lo, hi)]
    seg = par[lo:hi]
    starts = np.flatnonzero(seg[1:] != seg[:-1]) + 1
    run_parents = seg[np.r_[0, starts]]
    if not np.all(run_parents[1:] > run_parents[:-1]) and np.unique(run_parents).size != run_parents.size:
        return [(lo, hi)]
    idx = np.searchsorted(starts, np.arange(PIECE, hi - lo, PIECE))
    bounds = np.unique(np.r_[0, starts[idx[idx < starts.size]], hi - lo]) + lo
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def tree_pieces(tree: Tree) -> Pieces:
    """The pieces of ``tree``'s passes (cached on the tree; public structure only)."""
    hit = tree.cache.get(_KEY)
    if hit is not None:
        return hit
    par = tree.internal.parent
    n = tree.n_nodes
    n1 = int(np.count_nonzero(tree.internal.n_children))
    if n < PARALLEL_MIN:
        pieces = Pieces(n1, [(n1, n)], [[(0, n1)]] if n1 else [])
    else:
        classes = []
        for h in range(2, tree.height + 1):
            sl = tree.internal.height_slice(h)
            classes.append(_cuts(par, sl.start, sl.stop))
        pieces = Pieces(n1, _cuts(par, n1, n), classes)
    tree.cache[_KEY] = pieces
    return pieces
