"""Compiled O(n) passes over a tree's parent array, used by :mod:`hierdp.tree`.

Every kernel here is a single loop over node indices: a reverse loop visits children
before parents (bottom-up), a forward loop visits parents before children (top-down).
numba compiles them on first use and caches the machine code on disk.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb

_jit = nb.njit(cache=True, nogil=True)


@_jit
def depths_checked(parent):
    """Depth of every node of an arbitrarily numbered parent array.

    Returns ``(depth, bad)``: ``bad`` is -1 when the array is a tree, else a node on a cycle.
    """
    n = parent.shape[0]
    depth = np.full(n, -1, np.int64)
    state = np.zeros(n, np.int8)  # 0 unseen, 1 on the current path, 2 done
    stack = np.empty(n, np.int64)
    for i in range(n):
        if state[i] == 2:
            continue
        top = 0
        j = i
        while j != -1 and state[j] == 0:
            state[j] = 1
            stack[top] = j
            top += 1
            j = parent[j]
        if j != -1 and state[j] == 1:
            return depth, j
        base = -1 if j == -1 else depth[j]
        while top > 0:
            top -= 1
            k = stack[top]
            base += 1
            depth[k] = base
            state[k] = 2
    return depth, -1


@_jit
def heights_in_order(parent, order):
    """Node heights (leaves = 1, Generation Matrix Def. 2) visiting ``order`` (children first)."""
    n = parent.shape[0]
    h = np.ones(n, np.int64)
    for t in range(n):
        i = order[t]
        p = parent[i]
        if p >= 0 and h[p] < h[i] + 1:
            h[p] = h[i] + 1
    return h


@_jit
def depth_topological(parent):
    n = parent.shape[0]
    d = np.zeros(n, np.int64)
    for i in range(1, n):
        d[i] = d[parent[i]] + 1
    return d


@_jit
def height_topological(parent):
    n = parent.shape[0]
    h = np.ones(n, np.int64)
    for i in range(n - 1, 0, -1):
        p = parent[i]
        if h[p] < h[i] + 1:
            h[p] = h[i] + 1
    return h


@_jit
def sum_up_2d(parent, values, out):
    """out[v] = sum of ``values`` over the subtree of v; values/out shape (n, k)."""
    n, k = values.shape
    for i in range(n):
        for c in range(k):
            out[i, c] = values[i, c]
    for i in range(n - 1, 0, -1):
        p = parent[i]
        for c in range(k):
            out[p, c] += out[i, c]
    return out


@_jit
def sum_up_1d(parent, values, out):
    n = values.shape[0]
    for i in range(n):
        out[i] = values[i]
    for i in range(n - 1, 0, -1):
        out[parent[i]] += out[i]
    return out


@_jit
def sum_up_range(parent, values, out, lo, hi, store):
    """``out[parent[i]] += values[i]`` for i = hi-1 .. lo: one height class (or a piece of
    it cut at parent boundaries) of :func:`sum_up_1d` / :func:`sum_up_2d`'s loop, for
    threads (hierdp/_kernels/tree_pieces.py). Non-leaf classes pass ``values`` = ``out`` and
    ``store`` false. The leaf class may instead copy each leaf as it adds it
    (``store``: ``out[i] = values[i]``, a leaf's sum being its value), into an ``out``
    whose non-leaf rows hold their values. uint64 bounds: no wraparound test per access."""
    top = nb.uint64(hi - 1)
    if out.ndim == 1:
        for j in range(nb.uint64(hi - lo)):
            i = top - j
            v = values[i]
            if store:
                out[i] = v
            out[parent[i]] += v
    else:
        k = out.shape[1]
        for j in range(nb.uint64(hi - lo)):
            i = top - j
            p = parent[i]
            for c in range(k):
                v = values[i, c]
                if store:
                    out[i, c] = v
                out[p, c] += v


@_jit
def sum_up_blocks(parent, values, out, bounds, a, b, store):
    """Blocks ``[a, b)`` of :attr:`hierdp._kernels.tree_pieces.Pieces.block_bounds`, leaves first
    and then each height up to the block height - 1: every node adds into its parent,
    nodes taken high to low at each height, as in :func:`sum_up_1d`'s loop (the same bits).
    The blocks' parents are in no other blocks, so groups of blocks run at once; a
    group's heights are small enough to stay in cache from one to the next. The leaves
    come from ``values`` and are copied into ``out`` with ``store``, as in
    :func:`sum_up_range`; 1-D values. The loops are :func:`sum_up_range`'s written out:
    calling it per height is about 10% slower on one thread."""
    for lev in range(bounds.shape[0]):
        lo = bounds[lev, a]
        hi = bounds[lev, b]
        top = nb.uint64(hi - 1)
        if lev == 0:
            for j in range(nb.uint64(hi - lo)):
                i = top - j
                v = values[i]
                if store:
                    out[i] = v
                out[parent[i]] += v
        else:
            for j in range(nb.uint64(hi - lo)):
                i = top - j
                out[parent[i]] += out[i]


@_jit
def copy_range(values, out, lo, hi):
    """``out[lo:hi] = values[lo:hi]`` (rows) without the GIL."""
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        out[i] = values[i]


@_jit
def copy_sum_up_runs(starts, parents, values, out, rlo, rhi, store):
    """The leaf class of :func:`sum_up_range` run by run: the leaves of run r are ``[starts[r],
    starts[r + 1])``, all children of ``parents[r]`` (one run per parent). A run's sum is
    kept in a register and stored once, added in the one-loop kernel's order (last leaf
    first), so the bits are the same; each leaf's parent is not read. On the census-like
    tree (52 leaves a run) 0.0154 -> 0.0111 s for int64, 0.0293 -> 0.0115 s for float64.
    With ``store`` false the leaves' rows are not written (``values`` is ``out``, summed in
    place: a store of the value just read would still write its cache line back)."""
    for q in range(nb.uint64(rhi - rlo)):
        r = nb.uint64(rhi - 1) - nb.uint64(q)
        p = parents[r]
        acc = out[p]
        first = nb.uint64(starts[r])
        top = nb.uint64(starts[r + nb.uint64(1)] - 1)
        for j in range(top + nb.uint64(1) - first):
            i = top - j
            v = values[i]
            if store:
                out[i] = v
            acc += v
        out[p] = acc


@_jit
def ancestor_codes(parent, depth, codes, level):
    """For each node, the code of its ancestor at depth ``level`` (-1 above that depth)."""
    n = parent.shape[0]
    out = np.full(n, -1, np.int64)
    for i in range(n):
        d = depth[i]
        if d == level:
            out[i] = codes[i]
        elif d > level:
            out[i] = out[parent[i]]
    return out


# ----------------------------------------------------------------- small trees: numpy
#: Trees with at most this many nodes take the numpy passes below instead of the compiled
#: loops. A first release in a fresh install would otherwise spend ~0.7 s compiling five
#: tree kernels (measured by benchmarks/bench_startup.py) for a tree that numpy walks in
#: well under a millisecond; above this size the compiled loops win and their one-time
#: compile is amortised.
SMALL_TREE = 1 << 14


def _np_depths(parent: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`depths_checked` by pointer doubling: O(n log depth) vectorised steps."""
    n = parent.shape[0]
    jump = parent.copy()
    dist = (parent >= 0).astype(np.int64)
    for _ in range(max(1, int(n).bit_length()) + 1):
        m = jump >= 0
        if not m.any():
            return dist, -1
        dist[m] = dist[m] + dist[jump[m]]
        jump[m] = jump[jump[m]]
    # 2**k >= n steps up from a node whose ancestors never end lands on a cycle
    return dist, int(jump[np.flatnonzero(jump >= 0)[0]])


def _np_by_depth(depth: np.ndarray) -> list[np.ndarray]:
    """Node indices per depth, shallowest first."""
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max(initial=0)) + 2))
    return [order[bounds[d]:bounds[d + 1]] for d in range(bounds.size - 1)]


def _np_heights(parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    h = np.ones(parent.shape[0], np.int64)
    for nodes in reversed(_np_by_depth(depth)[1:]):
        np.maximum.at(h, parent[nodes], h[nodes] + 1)
    return h


def _np_sum_up(parent: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = values.copy()
    for nodes in reversed(_np_by_depth(depth)[1:]):
        np.add.at(out, parent[nodes], out[nodes])
    return out


def _np_ancestor_codes(parent: np.ndarray, depth: np.ndarray, codes: np.ndarray, level: int) -> np.ndarray:
    out = np.full(parent.shape[0], -1, np.int64)
    layers = _np_by_depth(depth)
    if level < len(layers):
        out[layers[level]] = codes[layers[level]]
        for nodes in layers[level + 1:]:
            out[nodes] = out[parent[nodes]]
    return out


def tree_depths(parent: np.ndarray) -> tuple[np.ndarray, int]:
    """Depths of any parent array and a node on a cycle (-1 for a tree)."""
    return _np_depths(parent) if parent.shape[0] <= SMALL_TREE else depths_checked(parent)


def tree_heights(parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Heights (leaves 1) of any parent array with known depths."""
    if parent.shape[0] <= SMALL_TREE:
        return _np_heights(parent, depth)
    return heights_in_order(parent, np.argsort(-depth, kind="stable"))


def internal_depths(parent: np.ndarray) -> np.ndarray:
    """Depths of a parent array numbered parents first."""
    return _np_depths(parent)[0] if parent.shape[0] <= SMALL_TREE else depth_topological(parent)


def internal_heights(parent: np.ndarray) -> np.ndarray:
    """Heights of a parent array numbered parents first."""
    if parent.shape[0] <= SMALL_TREE:
        return _np_heights(parent, _np_depths(parent)[0])
    return height_topological(parent)


def subtree_sums(parent: np.ndarray, depth: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Subtree sums of (n,) or (n, k) values of a parent array numbered parents first
    (numpy's ``add.at`` by depth up to :data:`SMALL_TREE` values, which compiles nothing;
    for more, even on a small tree of many cells, the kernel: ``add.at`` of rows is slow)."""
    if values.size <= SMALL_TREE:
        return _np_sum_up(parent, depth, values)
    if values.ndim == 1:
        return sum_up_1d(parent, values, np.empty_like(values))
    return sum_up_2d(parent, np.ascontiguousarray(values), np.empty_like(values))


def ancestor_codes_at(parent: np.ndarray, depth: np.ndarray, codes: np.ndarray, level: int) -> np.ndarray:
    """For each node, the code of its ancestor at depth ``level`` (-1 above that depth)."""
    if parent.shape[0] <= SMALL_TREE:
        return _np_ancestor_codes(parent, depth, codes, level)
    return ancestor_codes(parent, depth, codes, level)


@_jit
def children_mismatch(vals, perm, child_ptr, child_idx, lo, hi):
    """Whether the internal-order nodes ``lo .. hi - 1`` that have children each equal the
    sum of their children's rows, cell by cell, for non-negative int64 ``vals`` of shape
    ``(n, k)`` in external order (row of internal node ``v``: ``perm[v]``, or ``v`` when
    ``perm`` is empty). Returns 0 when they do, 1 at the first node that does not, 2 when a
    sum passed 2**63 - 1 (a partial sum of non-negative values wraps to a negative one the
    first time it does: its sign bit is kept in ``ovf``). Each row is read once as a child
    and once as a parent: the whole check in one pass, instead of aggregating the leaves
    and comparing every node (about seven numpy passes)."""
    k = vals.shape[1]
    acc = np.empty(k, np.int64)
    ident = perm.shape[0] == 0
    for p in range(lo, hi):
        a = child_ptr[p]
        b = child_ptr[p + 1]
        if a == b:
            continue
        ch = child_idx[a]
        r = ch if ident else perm[ch]
        for c in range(k):
            acc[c] = vals[r, c]
        ovf = np.int64(0)
        for t in range(a + 1, b):
            ch = child_idx[t]
            r = ch if ident else perm[ch]
            for c in range(k):
                s = acc[c] + vals[r, c]
                ovf |= s
                acc[c] = s
        if ovf < 0:
            return 2
        rp = p if ident else perm[p]
        off = np.int64(0)
        for c in range(k):
            off |= acc[c] ^ vals[rp, c]
        if off != 0:
            return 1
    return 0
