"""Compiled GMC stages (Cai et al., Generation Matrix, Alg. 1-2, formulas 36 and 39, and
the weighted variant), used by :mod:`hierdp.postprocessors.gmc`.

All arrays are in descending-height ("internal") order: the root is 0, every parent
precedes its children, the ``n1`` non-leaf nodes form the prefix ``[0, n1)`` and the
leaves the suffix ``[n1, n)`` (Cai et al., Def. 3 and 6). Leaves that share a parent are
stored as *runs* ``(start, stop, parent)`` so the leaf passes, which carry most of the
nodes, read the values contiguously and never touch a per-leaf parent index.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb

_jit = nb.njit(cache=True, nogil=True)
_jit_fast = nb.njit(cache=True, nogil=True, fastmath=False, boundscheck=False)




@_jit
def weighted_scan(y, d, depth, values, lo, hi):
    """One pass over nodes ``[lo, hi)`` of one histogram and its variances: (every y
    finite, every d finite and > 0, ``d[i] == values[depth[i]]`` for every node).
    Branch-free: all three are read whole (the checks of weighted GMC's input and its
    per-level cache key at once; a tree's pieces combine with ``all``)."""
    yok = True
    dok = True
    const = True
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        yi = y[i]
        di = d[i]
        yok &= yi - yi == 0.0  # NaN for NaN and +-inf
        dok &= (di > 0.0) & (di < np.inf)
        const &= di == values[depth[i]]
    return yok, dok, const


@_jit
def constant_per_level(d, depth, values):
    """Whether ``d[i] == values[depth[i]]`` for every node (one pass, no temporaries)."""
    for i in range(nb.uint64(0), nb.uint64(d.shape[0])):
        if d[i] != values[depth[i]]:
            return False
    return True




@_jit
def gmc_weighted_stage1(parent, n1, d, leaf_starts, leaf_parents):
    """Stage 1 of the weighted GMC for node variances ``d`` (finite, > 0).

    Factorises ``M^T D M = L^T L`` (the weighted analogue of Theorem 8) by the same
    bottom-up recursion as Alg. 1: ``theta'_i = d_i + U_i`` with ``U_i = sum_c u_c``,
    ``u_c = d_c`` for a leaf child and ``u_c = d_c U_c / theta'_c`` otherwise. Returns
    ``(inv_theta, rho, u)`` on the non-leaf prefix with ``rho = d / theta'`` and
    ``u = d (1 - rho)``. With ``d = 1`` this reduces to Alg. 1 (``theta' = 1 + theta``).
    """
    U = np.zeros(n1)
    for r in range(leaf_parents.shape[0]):
        s = 0.0
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            s += d[i]
        U[leaf_parents[r]] += s
    inv_theta = np.empty(n1)
    rho = np.empty(n1)
    u = np.empty(n1)
    for i in range(n1 - 1, -1, -1):
        th = d[i] + U[i]
        inv_theta[i] = 1.0 / th
        rho[i] = d[i] / th
        u[i] = d[i] * U[i] / th
        if i > 0:
            U[parent[i]] += u[i]
    return inv_theta, rho, u


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _leaf_sums_2d(n1, leaf_starts, leaf_parents, v, acc):
    """``acc[:n1] = -(sum of each node's leaf-child values)``: the leaf part of ``M^T v``,
    shared by the (n, k) GMC kernels (formulas 36 and 39)."""
    k = v.shape[1]
    for i in range(n1):
        for c in range(k):
            acc[i, c] = 0.0
    for r in range(leaf_parents.shape[0]):
        p = leaf_parents[r]
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            for c in range(k):
                acc[p, c] -= v[i, c]


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _leaves_out_2d(n1, leaf_starts, leaf_parents, v, out, acc):
    """``out = v - M y`` on the leaves (``acc`` holds y of their parents); a tree that is a
    single node is returned as it is. Shared by the (n, k) GMC kernels."""
    n, k = v.shape
    for r in range(leaf_parents.shape[0]):
        p = leaf_parents[r]
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            for c in range(k):
                out[i, c] = v[i, c] + acc[p, c]
    if n1 == 0:
        for i in range(n):
            for c in range(k):
                out[i, c] = v[i, c]


@_jit_fast
def gmc_39_2d(parent, n1, inv_theta, leaf_starts, leaf_parents, v, out, work):
    """Formula (39): v - M G^-1 (theta' * G^-T (M^T v)) with G = G_{T(1)}^(theta', 1).

    ``v``/``out`` (n, k); ``work`` (n1, k) scratch. Bottom-up: ``z_i = (r_i + sum of the
    non-leaf children's z) / theta'_i`` with ``r = M^T v``; top-down:
    ``y_i = z_i + y_{f_i} / theta'_i``; then ``out = v - M y``.
    """
    n, k = v.shape
    acc = work
    _leaf_sums_2d(n1, leaf_starts, leaf_parents, v, acc)  # acc[p] = -(sum of p's leaf values)
    # non-leaves bottom-up: z_i = (v_i + acc_i) / theta'_i ; acc[f] += z_i - v_i
    for i in range(n1 - 1, 0, -1):
        p = parent[i]
        it = inv_theta[i]
        for c in range(k):
            z = (v[i, c] + acc[i, c]) * it
            acc[i, c] = z
            acc[p, c] += z - v[i, c]
    if n1 > 0:
        it = inv_theta[0]
        for c in range(k):
            z = (v[0, c] + acc[0, c]) * it
            acc[0, c] = z
            out[0, c] = v[0, c] - z
    # top-down: y_i = z_i + y_f / theta'_i ; out_i = v_i - y_i + y_f
    for i in range(1, n1):
        p = parent[i]
        it = inv_theta[i]
        for c in range(k):
            yf = acc[p, c]
            y = acc[i, c] + yf * it
            acc[i, c] = y
            out[i, c] = v[i, c] - y + yf
    _leaves_out_2d(n1, leaf_starts, leaf_parents, v, out, acc)
    return out


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _gmc_39_internal(parent, n1, inv_theta, v, out, acc):
    """The non-leaf part of formula (39) for one histogram (n1 >= 1), shared by the 1-D
    kernels: ``acc`` enters holding minus the sum of each node's leaf children; bottom-up
    it becomes z, top-down y, and ``out[:n1]`` is written."""
    for i in range(n1 - 1, 0, -1):
        z = (v[i] + acc[i]) * inv_theta[i]
        acc[i] = z
        acc[parent[i]] += z - v[i]
    z = (v[0] + acc[0]) * inv_theta[0]
    acc[0] = z
    out[0] = v[0] - z
    for i in range(1, n1):
        yf = acc[parent[i]]
        y = acc[i] + yf * inv_theta[i]
        acc[i] = y
        out[i] = v[i] - y + yf


@_jit_fast
def gmc_39_1d(parent, n1, inv_theta, leaf_starts, leaf_parents, v, out, work):
    """1-D specialisation of :func:`gmc_39_2d` (same formula (39))."""
    n = v.shape[0]
    acc = work
    for i in range(n1):
        acc[i] = 0.0
    for r in range(leaf_parents.shape[0]):
        s = 0.0
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            s += v[i]
        acc[leaf_parents[r]] -= s
    if n1 > 0:
        _gmc_39_internal(parent, n1, inv_theta, v, out, acc)
    for r in range(leaf_parents.shape[0]):
        yf = acc[leaf_parents[r]]
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            out[i] = v[i] + yf
    if n1 == 0:
        for i in range(n):
            out[i] = v[i]
    return out


@_jit_fast
def gmc_39_1d_flat(parent, n1, inv_theta, leaf_parent, v, out, work):
    """:func:`gmc_39_1d` with the leaves visited one by one through their parent index
    (``leaf_parent[i - n1]``) instead of run by run: no loop whose length changes from one
    parent to the next, which is faster when sibling runs are short (binary and random
    fan-out trees). Each parent's leaf children must be adjacent (one run per parent)."""
    n = v.shape[0]
    acc = work
    for i in range(n1):
        acc[i] = 0.0
    prev = -1
    s = 0.0
    for i in range(n1, n):  # acc[p] = -(sum of p's leaf children), summed in registers
        p = leaf_parent[i - n1]
        s = (s if p == prev else 0.0) + v[i]
        acc[p] = -s
        prev = p
    _gmc_39_internal(parent, n1, inv_theta, v, out, acc)
    for i in range(n1, n):
        out[i] = v[i] + acc[leaf_parent[i - n1]]
    return out


@_jit
def gmc_36_2d(parent, n1, w, leaf_starts, leaf_parents, v, out, work):
    """Formula (36): v - M G^-1 (G^-T (M^T v)) with G = G_{T(1)<-T} (Theorem 9 weights).

    ``w`` holds the node weights ``w_i = sqrt(1 + theta_i)``; the edge weights are
    ``1 / w_i`` (formula 37). Upward propagation (Prop. 2) then downward (Prop. 3).
    """
    n, k = v.shape
    acc = work
    _leaf_sums_2d(n1, leaf_starts, leaf_parents, v, acc)  # acc[p] = -(sum of p's leaf values)
    # r = M^T v ; upward G^T z = r: z_i = (r_i + sum_{j in C_i, j < n1} z_j / w_j) / w_i
    for i in range(n1 - 1, -1, -1):
        wi = w[i]
        for c in range(k):
            # acc holds -sum_leafchildren v + sum_{internal children} (z_j / w_j - v_j)
            z = (v[i, c] + acc[i, c]) / wi
            acc[i, c] = z
            if i > 0:
                acc[parent[i], c] += z / wi - v[i, c]
    # downward G y = z: y_i = (z_i + y_f / w_i) / w_i
    for i in range(n1):
        wi = w[i]
        for c in range(k):
            if i == 0:
                y = acc[i, c] / wi
                acc[i, c] = y
                out[i, c] = v[i, c] - y
            else:
                yf = acc[parent[i], c]
                y = (acc[i, c] + yf / wi) / wi
                acc[i, c] = y
                out[i, c] = v[i, c] - y + yf
    _leaves_out_2d(n1, leaf_starts, leaf_parents, v, out, acc)
    return out


@_jit_fast
def gmc_weighted_2d(parent, n1, d, inv_theta, rho, u, leaf_starts, leaf_parents, v, out, work):
    """Weighted GMC stage 2: ``v - D M (M^T D M)^-1 M^T v`` for node variances ``d``.

    With the stage-1 factors of :func:`gmc_weighted_stage1`: bottom-up
    ``p_i = r_i + sum_{j in C_i, j < n1} rho_j p_j``; top-down
    ``y_i = p_i / theta'_i + rho_i y_{f_i}``; ``out_i = v_i - rho_i p_i + u_i y_{f_i}`` on
    non-leaves and ``out_i = v_i + d_i y_{f_i}`` on leaves. ``d`` is (n,) or (n, k); the
    factors are (n1,) or (n1, k) accordingly.
    """
    n, k = v.shape
    kv = d.shape[1]
    acc = work
    _leaf_sums_2d(n1, leaf_starts, leaf_parents, v, acc)
    for i in range(n1 - 1, -1, -1):
        for c in range(k):
            cv = c if kv > 1 else 0
            pi = v[i, c] + acc[i, c]
            acc[i, c] = pi
            if i > 0:
                acc[parent[i], c] += rho[i, cv] * pi - v[i, c]
    for i in range(n1):
        for c in range(k):
            cv = c if kv > 1 else 0
            pi = acc[i, c]
            if i == 0:
                y = pi * inv_theta[i, cv]
                out[i, c] = v[i, c] - rho[i, cv] * pi
            else:
                yf = acc[parent[i], c]
                y = pi * inv_theta[i, cv] + rho[i, cv] * yf
                out[i, c] = v[i, c] - rho[i, cv] * pi + u[i, cv] * yf
            acc[i, c] = y
    for r in range(leaf_parents.shape[0]):
        p = leaf_parents[r]
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            for c in range(k):
                cv = c if kv > 1 else 0
                out[i, c] = v[i, c] + d[i, cv] * acc[p, c]
    if n1 == 0:
        for i in range(n):
            for c in range(k):
                out[i, c] = v[i, c]
    return out


# ---- formula (39) for one histogram cut into passes over node (or leaf-run) ranges, for
# threads (see hierdp/_kernels/tree_pieces.py). Each range kernel runs the arithmetic of the
# matching loop of gmc_39_1d / gmc_39_1d_flat (which agree bit for bit when every parent's
# leaves form one run), so any cut at parent boundaries gives the same bits. uint64 loop
# bounds: no wraparound test per access (see _blue_kernels.flat_leaves_up).
@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _p39_leaf_up(leaf_parent, o, v, acc, i, prev, s):
    p = leaf_parent[i - o]
    s = (s if p == prev else 0.0) + v[i]
    acc[p] = -s
    return p, s


@_jit_fast
def p39_leaves_up_flat(leaf_parent, n1, v, acc, lo, hi, lo2, hi2):
    """acc[p] = -(sum of p's leaf children) for leaves [lo, hi) and [lo2, hi2), one by one.

    The two ranges (whole pieces: no parent in both) run interleaved, so the two chains
    of dependent adds overlap (1.7x faster than one range at a time, measured); each
    parent's sum is added in the same order as in one loop."""
    o = nb.uint64(n1)
    a = nb.uint64(lo)
    b = nb.uint64(lo2)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    pa = -1
    sa = 0.0
    pb = -1
    sb = 0.0
    for j in range(c):
        pa, sa = _p39_leaf_up(leaf_parent, o, v, acc, a + j, pa, sa)
        pb, sb = _p39_leaf_up(leaf_parent, o, v, acc, b + j, pb, sb)
    for j in range(c, la):
        pa, sa = _p39_leaf_up(leaf_parent, o, v, acc, a + j, pa, sa)
    for j in range(c, lb):
        pb, sb = _p39_leaf_up(leaf_parent, o, v, acc, b + j, pb, sb)


@_jit_fast
def p39_leaves_up_runs(leaf_starts, leaf_parents, v, acc, rlo, rhi):
    """acc[p] = -(sum of p's leaf children) for leaf runs [rlo, rhi) (one run per parent:
    the sum is stored, so acc need not be zeroed first; -s is 0 - s exactly)."""
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        s = 0.0
        for i in range(nb.uint64(leaf_starts[r]), nb.uint64(leaf_starts[r + 1])):
            s += v[i]
        acc[leaf_parents[r]] = -s


@_jit_fast
def p39_internal_up(parent, inv_theta, v, out, acc, lo, hi, lo2, hi2):
    """Bottom-up over the non-leaf nodes [lo, hi) and [lo2, hi2) of one height class (two
    pieces interleaved, see :func:`p39_leaves_up_flat`; the root last, alone)."""
    if lo == 0:  # the root's class: the root alone
        z = (v[0] + acc[0]) * inv_theta[0]
        acc[0] = z
        out[0] = v[0] - z
        return
    ta = nb.uint64(hi - 1)
    tb = nb.uint64(hi2 - 1)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    for j in range(c):
        i = ta - j
        z = (v[i] + acc[i]) * inv_theta[i]
        acc[i] = z
        acc[parent[i]] += z - v[i]
        k = tb - j
        y = (v[k] + acc[k]) * inv_theta[k]
        acc[k] = y
        acc[parent[k]] += y - v[k]
    for j in range(c, la):
        i = ta - j
        z = (v[i] + acc[i]) * inv_theta[i]
        acc[i] = z
        acc[parent[i]] += z - v[i]
    for j in range(c, lb):
        k = tb - j
        y = (v[k] + acc[k]) * inv_theta[k]
        acc[k] = y
        acc[parent[k]] += y - v[k]


@_jit_fast
def p39_internal_down(parent, inv_theta, v, out, acc, lo, hi):
    """Top-down over the non-leaf nodes [lo, hi) of one height class (the root skipped)."""
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        if i > 0:
            yf = acc[parent[i]]
            y = acc[i] + yf * inv_theta[i]
            acc[i] = y
            out[i] = v[i] - y + yf


@_jit_fast
def p39_leaves_down_flat(leaf_parent, n1, v, out, acc, lo, hi):
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        out[i] = v[i] + acc[leaf_parent[i - n1]]


@_jit_fast
def p39_leaves_down_runs(leaf_starts, leaf_parents, v, out, acc, rlo, rhi):
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        yf = acc[leaf_parents[r]]
        for i in range(nb.uint64(leaf_starts[r]), nb.uint64(leaf_starts[r + 1])):
            out[i] = v[i] + yf


# ---- formula (39) by groups of subtree blocks (Pieces.block_bounds: trees whose leaves are
# all at one depth), leaves taken one by one: a group goes from its leaves up to just below
# the block height in one call, and back down, so its rows of one height are in cache when
# the next height reads them. Each node's arithmetic, and the order in which a parent
# receives its children's terms (leaves in order, other heights high to low), are those of
# p39_leaves_up_flat, p39_internal_up, p39_internal_down and p39_leaves_down_flat: the same
# bits. A group's blocks [a, m) and [m, b) run interleaved (no parent in both).
@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _leaves_up_halves(leaf_parent, o, v, acc, lo, mid, hi):
    """:func:`p39_leaves_up_flat` over the leaves [lo, mid) and [mid, hi), interleaved."""
    la = mid - lo
    lb = hi - mid
    c = la if la < lb else lb
    pa = -1
    sa = 0.0
    pb = -1
    sb = 0.0
    for j in range(c):
        pa, sa = _p39_leaf_up(leaf_parent, o, v, acc, lo + j, pa, sa)
        pb, sb = _p39_leaf_up(leaf_parent, o, v, acc, mid + j, pb, sb)
    for j in range(c, la):
        pa, sa = _p39_leaf_up(leaf_parent, o, v, acc, lo + j, pa, sa)
    for j in range(c, lb):
        pb, sb = _p39_leaf_up(leaf_parent, o, v, acc, mid + j, pb, sb)


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _p39_node_up(parent, inv_theta, v, acc, i):
    z = (v[i] + acc[i]) * inv_theta[i]
    acc[i] = z
    acc[parent[i]] += z - v[i]


@_jit_fast
def p39_up_blocks(parent, inv_theta, leaf_parent, n1, v, acc, bounds, a, m, b):
    """Bottom-up over blocks [a, m) and [m, b), leaves to just below the block height."""
    o = nb.uint64(n1)
    for lev in range(bounds.shape[0]):
        lo = nb.uint64(bounds[lev, a])
        mid = nb.uint64(bounds[lev, m])
        hi = nb.uint64(bounds[lev, b])
        la = mid - lo
        lb = hi - mid
        c = la if la < lb else lb
        if lev == 0:  # the leaves, in order, each parent's sum carried along
            _leaves_up_halves(leaf_parent, o, v, acc, lo, mid, hi)
        else:  # high to low
            ta = mid - nb.uint64(1)
            tb = hi - nb.uint64(1)
            for j in range(c):
                _p39_node_up(parent, inv_theta, v, acc, ta - j)
                _p39_node_up(parent, inv_theta, v, acc, tb - j)
            for j in range(c, la):
                _p39_node_up(parent, inv_theta, v, acc, ta - j)
            for j in range(c, lb):
                _p39_node_up(parent, inv_theta, v, acc, tb - j)


@_jit_fast
def p39_down_blocks(parent, inv_theta, leaf_parent, n1, v, out, acc, bounds, a, b):
    """Top-down over blocks [a, b), from just below the block height to the leaves."""
    o = nb.uint64(n1)
    for k in range(bounds.shape[0]):
        lev = bounds.shape[0] - 1 - k
        lo = nb.uint64(bounds[lev, a])
        hi = nb.uint64(bounds[lev, b])
        if lev == 0:
            for i in range(lo, hi):
                out[i] = v[i] + acc[leaf_parent[i - o]]
        else:
            for i in range(lo, hi):
                yf = acc[parent[i]]
                y = acc[i] + yf * inv_theta[i]
                acc[i] = y
                out[i] = v[i] - y + yf


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _pw_node_up(parent, rho, v, acc, i):
    pi = v[i] + acc[i]
    acc[i] = pi
    acc[parent[i]] += rho[i] * pi - v[i]


@_jit_fast
def pw_up_blocks(parent, rho, leaf_parent, n1, v, acc, bounds, a, m, b):
    """Weighted GMC's stage 2 bottom-up over blocks [a, m) and [m, b) (interleaved): the
    leaf pass of formula (39), then :func:`pw_internal_up`'s arithmetic, high to low."""
    o = nb.uint64(n1)
    for lev in range(bounds.shape[0]):
        lo = nb.uint64(bounds[lev, a])
        mid = nb.uint64(bounds[lev, m])
        hi = nb.uint64(bounds[lev, b])
        la = mid - lo
        lb = hi - mid
        c = la if la < lb else lb
        if lev == 0:  # formula (39)'s leaf pass
            _leaves_up_halves(leaf_parent, o, v, acc, lo, mid, hi)
        else:
            ta = mid - nb.uint64(1)
            tb = hi - nb.uint64(1)
            for j in range(c):
                _pw_node_up(parent, rho, v, acc, ta - j)
                _pw_node_up(parent, rho, v, acc, tb - j)
            for j in range(c, la):
                _pw_node_up(parent, rho, v, acc, ta - j)
            for j in range(c, lb):
                _pw_node_up(parent, rho, v, acc, tb - j)


@_jit_fast
def pw_down_blocks(parent, inv_theta, rho, u, d, leaf_parent, n1, v, out, acc, bounds, a, b):
    """Weighted GMC's stage 2 top-down over blocks [a, b): :func:`pw_internal_down`'s
    arithmetic, then :func:`pw_leaves_down_flat`'s."""
    o = nb.uint64(n1)
    for k in range(bounds.shape[0]):
        lev = bounds.shape[0] - 1 - k
        lo = nb.uint64(bounds[lev, a])
        hi = nb.uint64(bounds[lev, b])
        if lev == 0:
            for i in range(lo, hi):
                out[i] = v[i] + d[i] * acc[leaf_parent[i - o]]
        else:
            for i in range(lo, hi):
                pi = acc[i]
                yf = acc[parent[i]]
                out[i] = v[i] - rho[i] * pi + u[i] * yf
                acc[i] = pi * inv_theta[i] + rho[i] * yf


# ---- the bottom class and its leaves in one pass, when the leaf runs are, one to one and in
# order, the children of the nodes of height 2 (complete trees of small fan-out: the
# Pieces.bottom_runs case). Up, a node's leaf sum stays in a register: no acc[i] written by
# the leaf pass and read back by the class's pass; down, it is summed again (a run of a few
# leaves, read again from cache) and the node's y goes straight into its leaves: no acc[i]
# written and no per-leaf parent index read. Run r is node c0 + r's leaves. The arithmetic,
# and the order in which parents receive their children's terms, are those of the passes
# they replace (p39_leaves_up_flat then p39_internal_up, p39_internal_down then
# p39_leaves_down_flat): the same bits.
@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _run_sum(leaf_starts, v, r):
    s = 0.0
    for q in range(nb.uint64(leaf_starts[r]), nb.uint64(leaf_starts[r + 1])):
        s += v[q]
    return s


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _b39_up(parent, inv_theta, leaf_starts, o, v, acc, i):
    z = (v[i] + -_run_sum(leaf_starts, v, i - o)) * inv_theta[i]
    acc[parent[i]] += z - v[i]


@_jit_fast
def p39_bottom_up(parent, inv_theta, leaf_starts, c0, v, acc, lo, hi, lo2, hi2):
    """Formula (39) bottom-up over the height-2 nodes [lo, hi) and [lo2, hi2) (two pieces
    interleaved, each high to low) with their leaves."""
    o = nb.uint64(c0)
    ta = nb.uint64(hi - 1)
    tb = nb.uint64(hi2 - 1)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    for j in range(c):
        _b39_up(parent, inv_theta, leaf_starts, o, v, acc, ta - j)
        _b39_up(parent, inv_theta, leaf_starts, o, v, acc, tb - j)
    for j in range(c, la):
        _b39_up(parent, inv_theta, leaf_starts, o, v, acc, ta - j)
    for j in range(c, lb):
        _b39_up(parent, inv_theta, leaf_starts, o, v, acc, tb - j)


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _b39_down(parent, inv_theta, leaf_starts, o, v, out, acc, i):
    r = i - o
    it = inv_theta[i]
    z = (v[i] + -_run_sum(leaf_starts, v, r)) * it
    yf = acc[parent[i]]
    y = z + yf * it
    out[i] = v[i] - y + yf
    for q in range(nb.uint64(leaf_starts[r]), nb.uint64(leaf_starts[r + 1])):
        out[q] = v[q] + y


@_jit_fast
def p39_bottom_down(parent, inv_theta, leaf_starts, c0, v, out, acc, lo, hi, lo2, hi2):
    """Formula (39) top-down over the height-2 nodes [lo, hi) and [lo2, hi2) (interleaved)
    and their leaves."""
    o = nb.uint64(c0)
    a = nb.uint64(lo)
    b = nb.uint64(lo2)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    for j in range(c):
        _b39_down(parent, inv_theta, leaf_starts, o, v, out, acc, a + j)
        _b39_down(parent, inv_theta, leaf_starts, o, v, out, acc, b + j)
    for j in range(c, la):
        _b39_down(parent, inv_theta, leaf_starts, o, v, out, acc, a + j)
    for j in range(c, lb):
        _b39_down(parent, inv_theta, leaf_starts, o, v, out, acc, b + j)


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _bw_up(parent, rho, leaf_starts, o, v, acc, i):
    pi = v[i] + -_run_sum(leaf_starts, v, i - o)
    acc[parent[i]] += rho[i] * pi - v[i]


@_jit_fast
def pw_bottom_up(parent, rho, leaf_starts, c0, v, acc, lo, hi, lo2, hi2):
    """Weighted GMC bottom-up over the height-2 nodes [lo, hi) and [lo2, hi2) (interleaved,
    each high to low) with their leaves (the passes _leaves_up then pw_internal_up)."""
    o = nb.uint64(c0)
    ta = nb.uint64(hi - 1)
    tb = nb.uint64(hi2 - 1)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    for j in range(c):
        _bw_up(parent, rho, leaf_starts, o, v, acc, ta - j)
        _bw_up(parent, rho, leaf_starts, o, v, acc, tb - j)
    for j in range(c, la):
        _bw_up(parent, rho, leaf_starts, o, v, acc, ta - j)
    for j in range(c, lb):
        _bw_up(parent, rho, leaf_starts, o, v, acc, tb - j)


@nb.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _bw_down(parent, inv_theta, rho, u, d, leaf_starts, o, v, out, acc, i):
    r = i - o
    pi = v[i] + -_run_sum(leaf_starts, v, r)
    yf = acc[parent[i]]
    y = pi * inv_theta[i] + rho[i] * yf
    out[i] = v[i] - rho[i] * pi + u[i] * yf
    for q in range(nb.uint64(leaf_starts[r]), nb.uint64(leaf_starts[r + 1])):
        out[q] = v[q] + d[q] * y


@_jit_fast
def pw_bottom_down(parent, inv_theta, rho, u, d, leaf_starts, c0, v, out, acc, lo, hi, lo2, hi2):
    """Weighted GMC top-down over the height-2 nodes [lo, hi) and [lo2, hi2) (interleaved)
    and their leaves (the passes pw_internal_down then pw_leaves_down_flat)."""
    o = nb.uint64(c0)
    a = nb.uint64(lo)
    b = nb.uint64(lo2)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    for j in range(c):
        _bw_down(parent, inv_theta, rho, u, d, leaf_starts, o, v, out, acc, a + j)
        _bw_down(parent, inv_theta, rho, u, d, leaf_starts, o, v, out, acc, b + j)
    for j in range(c, la):
        _bw_down(parent, inv_theta, rho, u, d, leaf_starts, o, v, out, acc, a + j)
    for j in range(c, lb):
        _bw_down(parent, inv_theta, rho, u, d, leaf_starts, o, v, out, acc, b + j)


# ---- weighted GMC stage 2 for one histogram, in range passes (see the formula (39) ones
# above, whose leaves-up passes it shares): the arithmetic of gmc_weighted_2d's loops.
@_jit_fast
def pw_internal_up(parent, rho, v, acc, lo, hi):
    """Bottom-up over the non-leaf nodes [lo, hi) of one height class."""
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        i = top - j
        pi = v[i] + acc[i]
        acc[i] = pi
        if i > 0:
            acc[parent[i]] += rho[i] * pi - v[i]


@_jit_fast
def pw_internal_down(parent, inv_theta, rho, u, v, out, acc, lo, hi):
    """Top-down over the non-leaf nodes [lo, hi) of one height class."""
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        pi = acc[i]
        if i == 0:
            y = pi * inv_theta[i]
            out[i] = v[i] - rho[i] * pi
        else:
            yf = acc[parent[i]]
            y = pi * inv_theta[i] + rho[i] * yf
            out[i] = v[i] - rho[i] * pi + u[i] * yf
        acc[i] = y


@_jit_fast
def pw_leaves_down_flat(leaf_parent, n1, d, v, out, acc, lo, hi):
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        out[i] = v[i] + d[i] * acc[leaf_parent[i - n1]]


@_jit_fast
def pw_leaves_down_runs(leaf_starts, leaf_parents, d, v, out, acc, rlo, rhi):
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        a = acc[leaf_parents[r]]
        for i in range(nb.uint64(leaf_starts[r]), nb.uint64(leaf_starts[r + 1])):
            out[i] = v[i] + d[i] * a
