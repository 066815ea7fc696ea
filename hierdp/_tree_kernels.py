"""Compiled O(n) passes over a tree's parent array, used by :mod:`hierdp.tree`.

Every kernel here is a single loop over node indices: a reverse loop visits children
before parents (bottom-up), a forward loop visits parents before children (top-down).
numba compiles them on first use and caches the machine code on disk.
"""

from __future__ import annotations

from hierdp._jit import numba as nb
import numpy as np

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
