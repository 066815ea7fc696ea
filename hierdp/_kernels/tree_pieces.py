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
    from hierdp._kernels.protocols import TreeLike as Tree

__all__ = ["PIECE", "PARALLEL_MIN", "RUNS_FROM", "BLOCKS", "Pieces", "tree_pieces", "paired", "block_groups"]

#: nodes per piece (about 1 MiB of float64 per array touched)
PIECE = 1 << 17
#: trees with fewer nodes run every pass in one piece
PARALLEL_MIN = 1 << 20
#: leaves per run of siblings from which leaf passes go run by run (a run's sum in a
#: register) rather than leaf by leaf (each leaf reads its parent)
RUNS_FROM = 8
#: subtree blocks of a level-structured tree (see :attr:`Pieces.block_bounds`): enough
#: for 4 groups a thread on 64 threads
BLOCKS = 256
_KEY = "hierdp.tree_pieces"


@dataclass(frozen=True)
class Pieces:
    """``leaves``: ranges of the trailing run of leaves ``[n1, n)``; ``classes``: the
    internal height classes bottom-up (height 2 first), each a list of ranges.

    The leaves also come as *runs* of siblings: run r is ``[run_starts[r],
    run_starts[r + 1])`` with parent ``run_parents[r]``, and ``run_cuts`` are the ranges of
    runs that make up each piece of ``leaves`` (``one_run_per_parent``: no parent has two
    runs, so run kernels may write a parent's sums once)."""

    n1: int
    leaves: list[tuple[int, int]]
    classes: list[list[tuple[int, int]]]
    run_starts: np.ndarray
    run_parents: np.ndarray
    run_cuts: list[tuple[int, int]]
    one_run_per_parent: bool
    children_in_order: bool = False  # child_idx == arange(1, n): node i's children are consecutive
    #: the leaf runs are, one to one and in order, the children of the height-2 class (every
    #: leaf's parent has height 2; the root is above it): passes may take that class and
    #: its leaves together, piece by piece of ``classes[0]`` (complete trees)
    bottom_runs: bool = False
    #: every run of sibling leaves has the same length (complete trees): a loop over one
    #: run's leaves runs the same number of times for each parent, and its end is predicted
    equal_runs: bool = False
    #: trees whose leaves are all at one depth, so each height class is one level, and whose
    #: children are numbered in their parents' order (``children_in_order``): the nodes
    #: below height ``block_height`` cut into :data:`BLOCKS` blocks of whole subtrees,
    #: those of consecutive nodes of that height (balanced by leaf count).
    #: ``block_bounds[L]`` cuts the nodes of height ``L + 1`` into the blocks' ranges:
    #: block b holds ``[block_bounds[L, b], block_bounds[L, b + 1])`` at that height, and
    #: consecutive blocks together hold one range at every height. A pass may then take a
    #: group of blocks from the leaves up to height ``block_height - 1`` in one go, its
    #: parents never in another group's blocks. ``None`` elsewhere.
    block_bounds: np.ndarray | None = None
    block_height: int = 0

    @property
    def above_leaf_parents(self) -> int:
        """Nodes ``[0, above_leaf_parents)`` are those of height 3 or more: every node of
        height 2 has only leaves as children, so a leaf pass that *stores* each parent's
        sum (every parent's leaves in one run) leaves only this prefix to be zeroed."""
        return self.classes[0][0][0] if self.classes else 0

    @property
    def above_blocks(self) -> list[list[tuple[int, int]]]:
        """The height classes a pass that takes the subtree blocks (:attr:`block_bounds`)
        still runs class by class: those of height ``block_height`` and up, the root's
        included (empty without blocks)."""
        return self.classes[self.block_height - 2:] if self.block_bounds is not None else []

    @property
    def long_runs(self) -> bool:
        """Leaf passes go run by run: each parent's leaves are one run, and the runs hold
        :data:`RUNS_FROM` leaves or more on average (census-like: ~52; binary: 2, random
        fan-out 2-5: ~2.9 go leaf by leaf)."""
        return self.one_run_per_parent and self.mean_run >= RUNS_FROM

    @property
    def mean_run(self) -> float:
        """Leaves per run of siblings."""
        return (self.run_starts[-1] - self.n1) / max(1, self.run_parents.size)


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
        leaves, classes = [(n1, n)], [[(0, n1)]] if n1 else []
    else:
        classes = []
        for h in range(2, tree.height + 1):
            sl = tree.internal.height_slice(h)
            classes.append(_cuts(par, sl.start, sl.stop))
        leaves = _cuts(par, n1, n)
    lp = par[n1:]
    starts = np.r_[0, np.flatnonzero(lp[1:] != lp[:-1]) + 1, lp.size].astype(np.int64) + n1
    parents = par[starts[:-1]].astype(np.int64)
    one_run = bool(parents.size == 0 or np.bincount(parents, minlength=max(n1, 1)).max() == 1)
    cut = np.searchsorted(starts, [a for a, _ in leaves] + [leaves[-1][1]])
    run_cuts = [(int(a), int(b)) for a, b in zip(cut[:-1], cut[1:], strict=True)]
    idx = tree.internal.child_idx
    in_order = bool(idx.size == n - 1 and np.all(idx[1:] - idx[:-1] == 1) and (n == 1 or idx[0] == 1))
    c0 = classes[0][0][0] if classes else 0
    bottom = bool(c0 > 0 and parents.size == n1 - c0 and np.array_equal(parents, np.arange(c0, n1)))
    lengths = np.diff(starts)
    equal = bool(lengths.size == 0 or np.all(lengths == lengths[0]))
    bounds, hb = _blocks(tree, n1) if in_order and n >= PARALLEL_MIN else (None, 0)
    pieces = Pieces(n1, leaves, classes, starts, parents, run_cuts, one_run, in_order, bottom, equal, bounds, hb)
    tree.cache[_KEY] = pieces
    return pieces


def _blocks(tree: Tree, n1: int) -> tuple[np.ndarray | None, int]:
    """:attr:`Pieces.block_bounds` and ``block_height`` (children in their parents' order)."""
    H = tree.height  # noqa: N806
    depth = tree.internal.depth
    if n1 == 0 or np.any(depth[n1:] != H - 1):  # leaves at several depths: classes mix levels
        return None, 0
    hb = next((h for h in range(H, 1, -1) if _size(tree, h) >= BLOCKS), 0)
    if hb < 2:
        return None, 0
    top = tree.internal.height_slice(hb)
    weight = np.cumsum(tree.internal.leafcount[top])
    cut = np.searchsorted(weight, weight[-1] * np.arange(1, BLOCKS) / BLOCKS, side="right")
    lo = top.start + np.r_[0, cut, top.stop - top.start]  # block b's nodes of height hb
    ptr = tree.internal.child_ptr
    bounds = np.empty((hb - 1, BLOCKS + 1), np.int64)
    for h in range(hb - 1, 0, -1):  # children of consecutive nodes are consecutive: child k is node k + 1
        lo = ptr[lo] + 1
        bounds[h - 1] = lo
    return bounds, hb


def _size(tree: Tree, h: int) -> int:
    sl = tree.internal.height_slice(h)
    return sl.stop - sl.start


def block_groups(pieces: Pieces, threads: int) -> list[tuple[int, int]]:
    """Consecutive blocks in ``max(8, 4 threads)`` groups (at most :data:`BLOCKS`), as
    ``(first block, end block)``: how many are taken at once changes the time of a pass,
    not its result."""
    g = min(BLOCKS, max(8, 4 * threads))
    cuts = np.unique(np.linspace(0, BLOCKS, g + 1).astype(np.int64))
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def paired(ranges: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """Consecutive pieces two by two, ``(lo, hi, lo2, hi2)`` (an odd last one with an empty
    second range): kernels that run two pieces interleaved overlap their chains of
    dependent adds. No parent is in two pieces, so the results are the same."""
    out = []
    for k in range(0, len(ranges), 2):
        a, b = ranges[k]
        c, d = ranges[k + 1] if k + 1 < len(ranges) else (b, b)
        out.append((a, b, c, d))
    return out
