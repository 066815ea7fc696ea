"""Compiled active-set steps of the non-negative consistent least squares, used by
:mod:`hierdp.postprocessors.nonneg`: each step is the two-pass BLUE recursion (Dawson et
al. 2023, Alg. 2) with the fixed leaves known exactly, fused with the KKT check.

Arrays are in internal order: parents before children, leaves in the suffix ``[n1, n)``.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb
from hierdp._kernels.kernel_common import blue_combine

_jit = nb.njit(cache=True, nogil=True)


@_jit
def nnls_step_2d(parent, n_children, leafcount, n1, xhat, d, fixed, tol, x, bad):
    """One active-set step of the non-negative consistent least squares (``nonneg``).

    Solves min sum_i (x_i - xhat_i)^2 / d_i over consistent x with the leaves flagged in
    ``fixed`` (m, k; leaves are ``[n1, n)``) held at 0 -- the two-pass BLUE recursion of
    Dawson et al. (Alg. 2) with those leaves exactly known -- and, in the same top-down
    pass, the leaf gradient g_j = sum over the path root..j of (x_i - xhat_i) / d_i.
    Flags in ``bad`` the KKT violations: a free leaf below ``-tol (|xhat_j| + sqrt(d_j))``
    (round-off on its own scale) or a fixed leaf with ``g_j < -tol * gscale_j`` (gscale:
    the path sum of (|x - xhat| + |xhat| + 1) / d, the size of the terms of g).
    ``d`` must be > 0 (``inf`` = unmeasured). Returns the number of violations per column.
    """
    n, k = xhat.shape
    z, u, s, su, ninf, g, ga = nnls_workspace(n1, k)
    nnls_leaves_up(parent, n1, xhat, d, fixed, s, su, ninf, n1, n)
    nnls_internal_up(parent, leafcount, xhat, d, z, u, s, su, ninf, 0, n1)
    nnls_internal_down(parent, n_children, leafcount, xhat, d, x, z, u, s, su, ninf, g, ga, 0, n1)
    nbad = np.zeros(k, np.int64)
    nnls_leaves_down(parent, n1, xhat, d, fixed, tol, x, bad, s, su, ninf, g, ga, nbad, n1, n)
    return nbad


# The four passes of nnls_step_2d over node ranges (uint64 bounds, see
# _blue_kernels.flat_leaves_up): one call each over the whole range above, or one height
# class at a time in pieces cut at parent boundaries on several threads
# (hierdp/_kernels/tree_pieces.py), with the same arithmetic and the same order of each parent's
# terms either way.
@_jit
def input_flags(y, var, lo, hi):
    """Over [lo, hi) of 1-D values and variances: (values not finite, variances NaN or
    negative, variances 0), counted branch-free (vectorised), for ``nonneg``'s input
    checks in pieces."""
    nonfinite = 0
    bad = 0
    zero = 0
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        yi = y[i]
        vi = var[i]
        nonfinite += not (yi - yi == 0.0)
        bad += not (vi >= 0.0)
        zero += vi == 0.0
    return nonfinite, bad, zero


@_jit
def nnls_workspace(n1, k):
    """(z, u, s, su, ninf, g, ga): per non-leaf node and column; s, su, ninf zeroed."""
    return (np.empty((n1, k)), np.empty((n1, k)), np.zeros((n1, k)), np.zeros((n1, k)),
            np.zeros((n1, k), np.int64), np.empty((n1, k)), np.empty((n1, k)))


@_jit
def nnls_leaves_up(parent, n1, xhat, d, fixed, s, su, ninf, lo, hi):
    """Free leaves [lo, hi) into their parents' sums, bottom-up."""
    inf = np.inf
    k = xhat.shape[1]
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        i = top - j
        p = parent[i]
        for c in range(k):
            if fixed[i - n1, c]:
                continue
            vi = d[i, c]
            su[p, c] += vi
            if vi == inf:
                ninf[p, c] += 1
            else:
                s[p, c] += xhat[i, c]


@_jit
def nnls_internal_up(parent, leafcount, xhat, d, z, u, s, su, ninf, lo, hi):
    """Non-leaf nodes [lo, hi) of one height class, bottom-up: z, u and the parents' sums."""
    inf = np.inf
    k = xhat.shape[1]
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        i = top - j
        p = parent[i]
        for c in range(k):
            zi, ui = blue_combine(xhat[i, c], d[i, c], s[i, c], su[i, c])
            z[i, c] = zi
            u[i, c] = ui
            if p >= 0:
                s[p, c] += zi
                su[p, c] += ui
                if ui == inf:
                    ninf[p, c] += leafcount[i]


@_jit
def nnls_internal_down(parent, n_children, leafcount, xhat, d, x, z, u, s, su, ninf, g, ga, lo, hi):
    """Non-leaf nodes [lo, hi) of one height class, top-down: x and the gradient sums."""
    inf = np.inf
    k = xhat.shape[1]
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        p = parent[i]
        for c in range(k):
            if p < 0:
                xi = z[i, c]
                gp = 0.0
                gap = 0.0
            else:
                ui = u[i, c]
                U = su[p, c]
                if U == inf:
                    w = leafcount[i] / ninf[p, c] if ui == inf else 0.0
                elif U == 0.0:
                    w = 1.0 / n_children[p]
                else:
                    w = ui / U
                xi = z[i, c] + w * (x[p, c] - s[p, c])
                gp = g[p, c]
                gap = ga[p, c]
            x[i, c] = xi
            vi = d[i, c]
            if vi == inf:
                g[i, c] = gp
                ga[i, c] = gap
            else:
                r = xi - xhat[i, c]
                g[i, c] = gp + r / vi
                ga[i, c] = gap + (abs(r) + abs(xhat[i, c]) + 1.0) / vi


@_jit
def nnls_leaves_down(parent, n1, xhat, d, fixed, tol, x, bad, s, su, ninf, g, ga, nbad, lo, hi):
    """Leaves [lo, hi): x, and the KKT violations flagged in ``bad`` and counted in ``nbad``."""
    inf = np.inf
    k = xhat.shape[1]
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        p = parent[i]
        j = i - n1
        for c in range(k):
            vi = d[i, c]
            if fixed[j, c]:
                xi = 0.0
            else:
                U = su[p, c]
                if U == inf:
                    w = 1.0 / ninf[p, c] if vi == inf else 0.0
                else:  # U > 0: this leaf is free with d > 0
                    w = vi / U
                zi = 0.0 if vi == inf else xhat[i, c]
                xi = zi + w * (x[p, c] - s[p, c])
            x[i, c] = xi
            if vi == inf:
                gi = g[p, c]
                gai = ga[p, c]
            else:
                r = xi - xhat[i, c]
                gi = g[p, c] + r / vi
                gai = ga[p, c] + (abs(r) + abs(xhat[i, c]) + 1.0) / vi
            if fixed[j, c]:
                b = gi < -tol * gai
            else:
                b = xi < -tol * (abs(xhat[i, c]) + (np.sqrt(vi) if vi != inf else 1.0))
            bad[j, c] = b
            if b:
                nbad[c] += 1


@_jit
def nnls_finish_2d(parent, n1, y, xhat, d, fixed, x):
    """Finish ``nonneg``: exact zeros on fixed leaves, round-off clipped on free ones, the
    non-leaves re-aggregated bottom-up (in place on ``x``); then the KKT residual.

    Returns ``(residual, complementarity, objective)``: the largest relative violation of
    g >= 0 on fixed leaves and g = 0 on free ones (relative to the path sums of the terms
    of g), sum_j |l_j g_j| over the leaves, and sum_i (x_i - y_i)^2 / d_i (finite d).
    """
    n, k = xhat.shape
    for i in range(n1):
        for c in range(k):
            x[i, c] = 0.0
    finish_leaves_up(parent, n1, fixed, x, n1, n)
    finish_internal_up(parent, x, 0, n1)
    g = np.empty((n1, k))
    ga = np.empty((n1, k))
    return finish_down(parent, n1, y, xhat, d, fixed, x, g, ga, 0, n)


@_jit
def finish_leaves_up(parent, n1, fixed, x, lo, hi):
    """Leaves [lo, hi), bottom-up: exact zeros on fixed leaves, round-off clipped on free
    ones, each added into its parent."""
    k = x.shape[1]
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        i = top - j
        p = parent[i]
        for c in range(k):
            v = x[i, c]
            if fixed[i - n1, c] or v < 0.0:
                v = 0.0
            x[i, c] = v
            if p >= 0:
                x[p, c] += v


@_jit
def finish_internal_up(parent, x, lo, hi):
    """Non-leaf nodes [lo, hi) of one height class, bottom-up, added into their parents."""
    k = x.shape[1]
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        i = top - j
        p = parent[i]
        if p >= 0:
            for c in range(k):
                x[p, c] += x[i, c]


@_jit
def finish_down(parent, n1, y, xhat, d, fixed, x, g, ga, lo, hi):
    """Nodes [lo, hi) top-down (a height class or leaves): the gradient path sums, and
    this range's (largest relative KKT violation, complementarity, objective)."""
    k = x.shape[1]
    inf = np.inf
    res = 0.0
    comp = 0.0
    obj = 0.0
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        p = parent[i]
        for c in range(k):
            gp = 0.0 if p < 0 else g[p, c]
            gap = 0.0 if p < 0 else ga[p, c]
            vi = d[i, c]
            if vi == inf:
                gi = gp
                gai = gap
            else:
                r = x[i, c] - xhat[i, c]
                gi = gp + r / vi
                gai = gap + (abs(r) + abs(xhat[i, c]) + 1.0) / vi
                e = x[i, c] - y[i, c]
                obj += e * e / vi
            if i < n1:
                g[i, c] = gi
                ga[i, c] = gai
            else:
                if gai == 0.0:  # no measurement on the leaf's path: the data do not constrain it
                    v = 0.0
                elif fixed[i - n1, c]:
                    v = -gi / gai if gi < 0.0 else 0.0
                else:
                    v = abs(gi) / gai
                if v > res:
                    res = v
                comp += abs(x[i, c] * gi)
    return res, comp, obj


# ---- one histogram, leaves run by run of siblings (census-like trees, ~50 leaves a run):
# a parent's terms are summed in registers (in any order: ``reassoc`` lets them vectorise)
# and its values loaded once per run, with one division per leaf instead of three. The
# last bits differ from the leaf-by-leaf passes above, not across threads (a run is one
# piece's). Arrays are 1-D leaf views (index j = leaf - n1) and ``lstarts`` the run starts
# minus n1; the sums are branch-free (which leaves are held at 0 is data).
@nb.njit(cache=True, nogil=True, inline="always")
def _leaf_kkt(vi, fx, xh, w, res, gp, gap, tol):
    """One leaf of a one-histogram step going down: its value (0 when fixed, else its
    own z plus its share ``w`` of the parent's residual ``res``) and whether it violates
    the KKT conditions (see :func:`nnls_step_2d`), from its parent's gradient sums."""
    inf = np.inf
    xi = 0.0 if fx else (0.0 if vi == inf else xh) + w * res
    if vi == inf:
        gi = gp
        gai = gap
    else:
        rr = xi - xh
        ivi = 1.0 / vi
        gi = gp + rr * ivi
        gai = gap + (abs(rr) + abs(xh) + 1.0) * ivi
    if fx:
        return xi, gi < -tol * gai
    return xi, xi < -tol * (abs(xh) + (np.sqrt(vi) if vi != inf else 1.0))


@nb.njit(cache=True, nogil=True, fastmath={"reassoc"})
def nnls_leaves_up_runs1(lstarts, pars, xl, dl, fixedl, s, su, ninf, rlo, rhi):
    """:func:`nnls_leaves_up` for k = 1, leaf runs [rlo, rhi)."""
    inf = np.inf
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        ss = 0.0
        uu = 0.0
        cnt = 0
        for j in range(nb.uint64(lstarts[r]), nb.uint64(lstarts[r + 1])):
            free = not fixedl[j]
            vi = dl[j]
            fin = vi < inf
            uu += vi if free else 0.0
            cnt += free and not fin
            ss += xl[j] if free and fin else 0.0
        p = pars[r]  # one run per parent: the sums are stored (nodes of height 2 are not zeroed)
        su[p, 0] = uu
        ninf[p, 0] = cnt
        s[p, 0] = ss


@nb.njit(cache=True, nogil=True, error_model="numpy")  # 1 / U is inf when U = 0 (not used then)
def nnls_leaves_down_runs1(lstarts, pars, xl, dl, fixedl, tol, x, xol, badl, s, su, ninf, g, ga, nbad, rlo, rhi):
    """:func:`nnls_leaves_down` for k = 1, leaf runs [rlo, rhi) (``xol``: the leaves of x)."""
    inf = np.inf
    count = 0
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        p = pars[r]
        U = su[p, 0]
        invU = 1.0 / U
        np_ = ninf[p, 0]
        res = x[p, 0] - s[p, 0]
        gp = g[p, 0]
        gap = ga[p, 0]
        for j in range(nb.uint64(lstarts[r]), nb.uint64(lstarts[r + 1])):
            vi = dl[j]
            if U == inf:
                w = 1.0 / np_ if vi == inf else 0.0
            else:
                w = vi * invU
            xi, b = _leaf_kkt(vi, fixedl[j], xl[j], w, res, gp, gap, tol)
            xol[j] = xi
            badl[j] = b
            count += b
    nbad[0] += count


@nb.njit(cache=True, nogil=True, fastmath={"reassoc"})
def finish_leaves_up_runs1(lstarts, pars, fixedl, x, xol, rlo, rhi):
    """:func:`finish_leaves_up` for k = 1, leaf runs [rlo, rhi)."""
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        acc = 0.0
        for j in range(nb.uint64(lstarts[r]), nb.uint64(lstarts[r + 1])):
            v = xol[j]
            v = 0.0 if fixedl[j] or v < 0.0 else v
            xol[j] = v
            acc += v
        x[pars[r], 0] += acc


# ---- one histogram, leaves one by one (short runs of siblings: binary, random fan-out):
# 1-D leaf views, a run's sums carried in registers and stored at each step (every
# parent's leaves are one run and come first into its zeroed sums, so the stored sums are
# the same bits as the scattered ones), two divisions per leaf instead of three.
@nb.njit(cache=True, nogil=True, inline="always")
def _up_flat1_leaf(p, prev, free, vi, xv, uu, cnt, ss):
    """One leaf of :func:`nnls_leaves_up_flat1`: its parent's running sums (restarted
    where the parent changes)."""
    keep = p == prev
    fin = vi < np.inf
    uu = (uu if keep else 0.0) + (vi if free else 0.0)
    cnt = (cnt if keep else 0) + (free and not fin)
    ss = (ss if keep else 0.0) + (xv if free and fin else 0.0)
    return uu, cnt, ss


@_jit
def nnls_leaves_up_flat1(lpar, xl, dl, fixedl, s, su, ninf, lo, hi, lo2, hi2):
    """:func:`nnls_leaves_up` for k = 1 over leaves [lo, hi) and [lo2, hi2) (leaf
    indices; ``lpar`` their parents), each high to low as the one-loop pass. The two
    pieces run interleaved so that their chains of dependent adds overlap (no parent is
    in both, so each sum is the same). The stores are written out in each loop: a helper
    that takes the arrays and stores, even ``inline="always"``, makes this pass slower."""
    pa = -1
    ua = 0.0
    ca = 0
    sa = 0.0
    pb = -1
    ub = 0.0
    cb = 0
    sb = 0.0
    ta = nb.uint64(hi - 1)
    tb = nb.uint64(hi2 - 1)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    m = la if la < lb else lb
    for jj in range(m):
        j = ta - jj
        p = lpar[j]
        ua, ca, sa = _up_flat1_leaf(p, pa, not fixedl[j], dl[j], xl[j], ua, ca, sa)
        su[p, 0] = ua
        ninf[p, 0] = ca
        s[p, 0] = sa
        pa = p
        j = tb - jj
        p = lpar[j]
        ub, cb, sb = _up_flat1_leaf(p, pb, not fixedl[j], dl[j], xl[j], ub, cb, sb)
        su[p, 0] = ub
        ninf[p, 0] = cb
        s[p, 0] = sb
        pb = p
    for jj in range(m, la):
        j = ta - jj
        p = lpar[j]
        ua, ca, sa = _up_flat1_leaf(p, pa, not fixedl[j], dl[j], xl[j], ua, ca, sa)
        su[p, 0] = ua
        ninf[p, 0] = ca
        s[p, 0] = sa
        pa = p
    for jj in range(m, lb):
        j = tb - jj
        p = lpar[j]
        ub, cb, sb = _up_flat1_leaf(p, pb, not fixedl[j], dl[j], xl[j], ub, cb, sb)
        su[p, 0] = ub
        ninf[p, 0] = cb
        s[p, 0] = sb
        pb = p


@nb.njit(cache=True, nogil=True, error_model="numpy")
def nnls_leaves_down_flat1(lpar, xl, dl, ivl, thl, fixedl, tol, x, xol, badl, s, su, ninf, g, ga, nbad, lo, hi):
    """:func:`nnls_leaves_down` for k = 1 over leaves [lo, hi) (leaf indices), with the
    leaves' constants of every step computed once (:func:`leaf_constants`): one division
    per leaf, and the KKT test chosen without a branch."""
    inf = np.inf
    count = 0
    for j in range(nb.uint64(lo), nb.uint64(hi)):
        p = lpar[j]
        vi = dl[j]
        ivi = ivl[j]
        xh = xl[j]
        fx = fixedl[j]
        U = su[p, 0]
        if U == inf:
            w = 1.0 / ninf[p, 0] if vi == inf else 0.0
        else:
            w = vi / U  # inf or NaN when U = 0, i.e. every leaf of p is fixed: not used then
        xi = 0.0 if fx else (xh if ivi != 0.0 else 0.0) + w * (x[p, 0] - s[p, 0])
        rr = xi - xh
        gi = g[p, 0] + rr * ivi  # ivi = 0 (unmeasured leaf): the parent's sums
        gai = ga[p, 0] + (abs(rr) + abs(xh) + 1.0) * ivi
        b = (gi < -tol * gai) if fx else (xi < thl[j])
        xol[j] = xi
        badl[j] = b
        count += b
    nbad[0] += count


@nb.njit(cache=True, nogil=True, error_model="numpy")  # 1 / d without a zero test: d > 0
def leaf_constants(xl, dl, tol, ivl, thl):
    """Per leaf, what every active-set step uses (into ``ivl``, ``thl``): 1 / d (0 when
    unmeasured) and the threshold below which a free leaf violates the KKT conditions,
    ``-tol (|xhat| + sqrt(d))`` (``sqrt(d)`` read as 1 when unmeasured). The arrays are
    numpy's: a large array numba allocates is touched 4 KiB page by page, about 5x the
    time of numpy's (huge pages)."""
    inf = np.inf
    for j in range(nb.uint64(xl.size)):
        vi = dl[j]
        ivl[j] = 1.0 / vi  # 0 when vi = inf
        sq = np.sqrt(vi)
        thl[j] = -tol * (abs(xl[j]) + (sq if sq < inf else 1.0))


# ---- one histogram, non-leaf nodes: 1-D views (``*1`` arrays are the k = 1 columns of the
# workspace and of xhat, d, x restricted to the non-leaf prefix), one division per node
# going down instead of three.
@_jit
def nnls_internal_up1(parent, leafcount, xhat1, d1, z1, u1, s1, su1, ninf1, lo, hi):
    """:func:`nnls_internal_up` for k = 1."""
    inf = np.inf
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        i = top - j
        zi, ui = blue_combine(xhat1[i], d1[i], s1[i], su1[i])
        z1[i] = zi
        u1[i] = ui
        p = parent[i]
        if p >= 0:
            s1[p] += zi
            su1[p] += ui
            if ui == inf:
                ninf1[p] += leafcount[i]


@nb.njit(cache=True, nogil=True, error_model="numpy")
def nnls_internal_down1(parent, n_children, leafcount, xhat1, d1, x1, z1, u1, s1, su1, ninf1, g1, ga1, lo, hi):
    """:func:`nnls_internal_down` for k = 1."""
    inf = np.inf
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        p = parent[i]
        if p < 0:
            xi = z1[i]
            gp = 0.0
            gap = 0.0
        else:
            ui = u1[i]
            U = su1[p]
            if U == inf:
                w = leafcount[i] / ninf1[p] if ui == inf else 0.0
            elif U == 0.0:
                w = 1.0 / n_children[p]
            else:
                w = ui / U
            xi = z1[i] + w * (x1[p] - s1[p])
            gp = g1[p]
            gap = ga1[p]
        x1[i] = xi
        vi = d1[i]
        if vi == inf:
            g1[i] = gp
            ga1[i] = gap
        else:
            r = xi - xhat1[i]
            ivi = 1.0 / vi
            g1[i] = gp + r * ivi
            ga1[i] = gap + (abs(r) + abs(xhat1[i]) + 1.0) * ivi
