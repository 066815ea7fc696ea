"""Compiled two-pass BLUE (Dawson et al. 2023, Alg. 1 CombineEstimates + Alg. 2), used by
:mod:`hierdp.postprocessors.blue` (and by ``gmc``/``nonneg`` for exact variances).

Arrays are in parent-before-child order (hierdp's internal order: every leaf in the
trailing run ``[n1, n)``). A node's own measurement is merged with the sum of its
children's estimates by :func:`hierdp._kernels.kernel_common.blue_combine`.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb
from hierdp._kernels.kernel_common import blue_combine

_jit = nb.njit(cache=True, nogil=True)


@_jit
def _uninformed_children(parent, n1, var, xvar, su):
    """After pass 1 of :func:`blue_2d`: per parent (n1, kv), the number of children without
    information (u = inf) and the sum of the others' u, or empty arrays when no parent
    has such a child. A parent with exactly one determines it: x_c = x_p - (the siblings'
    z), Var(x_c) = Var(x_p) + that sum."""
    n = var.shape[0]
    kv = var.shape[1]
    inf = np.inf
    need = False
    for p in range(n1):
        for cv in range(kv):
            if su[p, cv] < 0.0:
                need = True
    if not need:
        return np.zeros((0, kv), np.int64), np.zeros((0, kv))
    nunc = np.zeros((n1, kv), np.int64)
    uinf = np.zeros((n1, kv))
    for i in range(1, n):
        p = parent[i]
        for cv in range(kv):
            u = xvar[i, cv] if i < n1 else var[i, cv]
            if u == inf:
                nunc[p, cv] += 1
            else:
                uinf[p, cv] += u
    return nunc, uinf


@_jit
def _determined(nunc, uinf, p, cv, vp):
    """Variance of the single uninformative child of ``p`` (inf unless it is the only one)."""
    return vp + uinf[p, cv] if nunc[p, cv] == 1 and vp < np.inf else np.inf


@_jit
def _blue_prefix_general(parent, n_children, leafcount, y, var, x, xvar, s, su, n1):
    """Passes 1b and 2a of :func:`blue_2d` for any k, kv (see there); returns the
    :func:`_uninformed_children` statistics for pass 2b."""
    n, k = y.shape
    kv = var.shape[1]
    inf = np.inf
    # ---- pass 1b: the prefix, bottom-up; z -> x[i], u -> xvar[i]
    for i in range(n1 - 1, -1, -1):
        leaf = n_children[i] == 0
        for c in range(k):
            cv = c if kv > 1 else 0
            vi = var[i, cv]
            if leaf:
                if vi == inf:
                    x[i, c] = 0.0
                else:
                    x[i, c] = y[i, c]
                if c == 0 or kv > 1:
                    xvar[i, cv] = vi
                continue
            U = su[i, cv]  # < 0: some child carries no information
            zi, ui = blue_combine(y[i, c], vi, s[i, c], inf if U < 0.0 else U)
            x[i, c] = zi
            if c == 0 or kv > 1:
                xvar[i, cv] = ui
        p = parent[i]
        if p >= 0:
            for c in range(k):
                s[p, c] += x[i, c]
            for cv in range(kv):
                ui = xvar[i, cv]
                if ui == inf:
                    su[p, cv] = -float(leafcount[i]) if su[p, cv] >= 0.0 else su[p, cv] - leafcount[i]
                elif su[p, cv] >= 0.0:
                    su[p, cv] += ui
    nunc, uinf = _uninformed_children(parent, n1, var, xvar, su)
    # ---- pass 2a: the prefix, top-down (the root keeps x = z, xvar = u)
    for i in range(1, n1):
        p = parent[i]
        for cv in range(kv):
            ui = xvar[i, cv]
            U = su[p, cv]
            vp = xvar[p, cv]
            if U < 0.0:
                if ui == inf:
                    w = leafcount[i] / (-U)
                    xvar[i, cv] = _determined(nunc, uinf, p, cv, vp)
                else:
                    w = 0.0
                    xvar[i, cv] = ui
            elif U == 0.0:
                w = 1.0 / n_children[p]
                xvar[i, cv] = 0.0
            else:
                w = ui / U
                val = ui - ui * w + w * w * vp
                xvar[i, cv] = val if val > 0.0 else 0.0
            if kv == 1:
                for c in range(k):
                    x[i, c] = x[i, c] + w * (x[p, c] - s[p, c])
            else:
                x[i, cv] = x[i, cv] + w * (x[p, cv] - s[p, cv])
    return nunc, uinf


@_jit
def blue_2d(parent, n_children, leafcount, y, var, x, xvar):
    """Two-pass BLUE on a tree (Dawson et al. 2023, Alg. 1 CombineEstimates + Alg. 2).

    Parameters are in parent-before-child order. ``y`` (n, k) are measurements with
    variances ``var`` (n, kv), kv in {1, k}; ``inf`` marks an unmeasured node (weight 0),
    0 an exactly known one. ``leafcount`` (n,) counts the leaves below each node and
    splits a residual among children that carry no information (a least-squares
    solution; such nodes keep infinite variance). Writes the estimates to ``x`` (n, k)
    and their exact variances to ``xvar`` (n, kv).

    Pass 1 (bottom-up): z_v combines y_v with the sum of the children's z by inverse
    variance; u_v is its variance. Pass 2 (top-down): x_c = z_c + u_c / U (x_v - S),
    where S, U are the sums of the children's z and u, and
    Var(x_c) = u_c - u_c^2 / U + (u_c / U)^2 Var(x_v).

    The trailing run of leaves ``[n1, n)`` (every leaf, in descending-height order) is
    streamed by tight loops that store nothing per leaf (a leaf's z and u are its
    measurement and variance). For the prefix ``[0, n1)``, z and u live in ``x`` and
    ``xvar`` until pass 2 overwrites them, and the children's variance sum doubles as the
    count of leaves below unmeasured children (stored negated once a child's u is inf),
    so only the two sums S and U are allocated.
    """
    n, k = y.shape
    kv = var.shape[1]
    inf = np.inf
    n1 = n
    while n1 > 0 and n_children[n1 - 1] == 0:
        n1 -= 1
    if n1 == 0:  # a single node, the root, is a leaf
        for c in range(k):
            cv = c if kv > 1 else 0
            x[0, c] = 0.0 if var[0, cv] == inf else y[0, c]
        for cv in range(kv):
            xvar[0, cv] = var[0, cv]
        return x, xvar
    s = np.zeros((n1, k))
    su = np.zeros((n1, kv))  # sum of children's u; -(leaves below inf children) once one is inf
    # ---- pass 1a: trailing leaves (z = y, or 0 when unmeasured; u = var)
    if kv == 1 and k == 1:
        # leaves sharing a parent are usually contiguous: sum a run in registers
        i = n - 1
        while i >= n1:
            p = parent[i]
            ss = 0.0
            uu = 0.0
            cnt = 0.0
            while i >= n1 and parent[i] == p:
                vi = var[i, 0]
                if vi == inf:
                    cnt += 1.0
                else:
                    uu += vi
                    ss += y[i, 0]
                i -= 1
            s[p, 0] += ss
            if cnt > 0.0:
                su[p, 0] = -cnt if su[p, 0] >= 0.0 else su[p, 0] - cnt
            elif su[p, 0] >= 0.0:
                su[p, 0] += uu
    else:
        for i in range(n - 1, n1 - 1, -1):
            p = parent[i]
            if kv == 1:
                vi = var[i, 0]
                if vi == inf:
                    su[p, 0] = -1.0 if su[p, 0] >= 0.0 else su[p, 0] - 1.0
                else:
                    if su[p, 0] >= 0.0:
                        su[p, 0] += vi
                    for c in range(k):
                        s[p, c] += y[i, c]
            else:
                for c in range(k):
                    vi = var[i, c]
                    if vi == inf:
                        su[p, c] = -1.0 if su[p, c] >= 0.0 else su[p, c] - 1.0
                    else:
                        if su[p, c] >= 0.0:
                            su[p, c] += vi
                        s[p, c] += y[i, c]
    # ---- pass 1b: the prefix, bottom-up; z -> x[i], u -> xvar[i]
    if kv == 1 and k == 1:
        for i in range(n1 - 1, -1, -1):
            vi = var[i, 0]
            if n_children[i] == 0:
                zi = 0.0 if vi == inf else y[i, 0]
                ui = vi
            else:
                U = su[i, 0]  # < 0: some child carries no information
                zi, ui = blue_combine(y[i, 0], vi, s[i, 0], inf if U < 0.0 else U)
            x[i, 0] = zi
            xvar[i, 0] = ui
            p = parent[i]
            if p >= 0:
                s[p, 0] += zi
                if ui == inf:
                    su[p, 0] = -float(leafcount[i]) if su[p, 0] >= 0.0 else su[p, 0] - leafcount[i]
                elif su[p, 0] >= 0.0:
                    su[p, 0] += ui
        nunc, uinf = _uninformed_children(parent, n1, var, xvar, su)
        # ---- pass 2a (k = 1): the prefix, top-down
        for i in range(1, n1):
            p = parent[i]
            ui = xvar[i, 0]
            U = su[p, 0]
            if U > 0.0:
                w = ui / U
                val = ui - ui * w + w * w * xvar[p, 0]
                xvar[i, 0] = val if val > 0.0 else 0.0
            elif U < 0.0:
                if ui == inf:
                    w = leafcount[i] / (-U)
                    xvar[i, 0] = _determined(nunc, uinf, p, 0, xvar[p, 0])
                else:
                    w = 0.0
            else:
                w = 1.0 / n_children[p]
                xvar[i, 0] = 0.0
            x[i, 0] = x[i, 0] + w * (x[p, 0] - s[p, 0])
    else:
        nunc, uinf = _blue_prefix_general(parent, n_children, leafcount, y, var, x, xvar, s, su, n1)
    # ---- pass 2b: trailing leaves
    if kv == 1 and k == 1:
        pprev = -1
        invU = 0.0
        rp = 0.0
        vp = 0.0
        special = False
        for i in range(n1, n):
            p = parent[i]
            if p != pprev:  # per-parent quantities, once per run of siblings
                pprev = p
                U = su[p, 0]
                special = U <= 0.0
                invU = 1.0 / U if not special else 0.0
                rp = x[p, 0] - s[p, 0]
                vp = xvar[p, 0]
            ui = var[i, 0]
            if not special:
                w = ui * invU
                val = ui - ui * w + w * w * vp
                xvar[i, 0] = val if val > 0.0 else 0.0
                x[i, 0] = y[i, 0] + w * rp
            else:
                U = su[p, 0]
                if U < 0.0:
                    if ui == inf:
                        xvar[i, 0] = _determined(nunc, uinf, p, 0, vp)
                        x[i, 0] = rp / (-U)
                    else:
                        xvar[i, 0] = ui
                        x[i, 0] = y[i, 0]
                else:
                    xvar[i, 0] = 0.0
                    x[i, 0] = (0.0 if ui == inf else y[i, 0]) + rp / n_children[p]
        return x, xvar
    # general shapes
    for i in range(n1, n):
        p = parent[i]
        for cv in range(kv):
            ui = var[i, cv]
            U = su[p, cv]
            if U < 0.0:
                if ui == inf:
                    w = 1.0 / (-U)
                    xvar[i, cv] = _determined(nunc, uinf, p, cv, xvar[p, cv])
                else:
                    w = 0.0
                    xvar[i, cv] = ui
            elif U == 0.0:
                w = 1.0 / n_children[p]
                xvar[i, cv] = 0.0
            else:
                w = ui / U
                val = ui - ui * w + w * w * xvar[p, cv]
                xvar[i, cv] = val if val > 0.0 else 0.0
            if kv == 1:
                if ui == inf:
                    for c in range(k):
                        x[i, c] = w * (x[p, c] - s[p, c])
                else:
                    for c in range(k):
                        x[i, c] = y[i, c] + w * (x[p, c] - s[p, c])
            else:
                zi = 0.0 if ui == inf else y[i, cv]
                x[i, cv] = zi + w * (x[p, cv] - s[p, cv])
    return x, xvar


@_jit
def blue_1d(first, cidx, leafcount, n1, y, var, x, xvar):
    """Two-pass BLUE for one histogram with one variance per node (k = kv = 1), fused with
    input validation; same estimator and case analysis as :func:`blue_2d` (Dawson et al.
    2023, Alg. 1 CombineEstimates + Alg. 2).

    Each pass visits the internal nodes ``[0, n1)`` and, for each, its children (every leaf
    is in the trailing run ``[n1, n)``, so a node is internal iff its index is below n1).
    The children of ``p`` are ``range(first[p], first[p + 1])`` when ``cidx`` is empty (the
    parent array is non-decreasing, e.g. breadth-first numbering), else
    ``cidx[first[p] - 1 : first[p + 1] - 1]`` (the CSR list).

    Pass 1 (bottom-up) sums the children's z into S and their u into U in registers and
    stores z_p, u_p in ``x[p]``, ``xvar[p]``; a leaf's z, u are read from ``y``, ``var``
    (z = 0 when var = inf). Pass 2 (top-down) writes the children's estimates
    x_c = z_c + w_c (x_p - S) and variances u_c - u_c w_c + w_c^2 Var(x_p), w_c = u_c / U.
    Children carrying no information (u = inf) share the residual in proportion to their
    leaf counts and keep var inf; if U = 0 the residual is split equally among the
    (exactly known) children. No scratch arrays: with contiguous children and at least
    as many leaves as internal nodes, pass 1 parks S and U (or minus the leaf count below
    uninformative children) in the leaf slots ``n - n1 + p`` of ``x``, ``xvar``, which
    pass 2 reads before any child write reaches them (``first[p] <= n - n1 + p`` as
    every internal node has a child); otherwise pass 2 recomputes the sums from the
    children.

    Returns 0; 5 when some variance is 0 (the caller checks that the exactly known nodes
    agree with each other); 1 if ``y`` has NaN/inf, or 2 if ``var`` has NaN or negative
    entries (then ``x``, ``xvar`` hold garbage).
    """
    n = y.shape[0]
    inf = np.inf
    contig = cidx.shape[0] == 0
    park = contig and n - n1 >= n1
    off = n - n1
    acc = 0     # counts non-finite y (y - y is NaN exactly for those): an integer chain, 1 cycle an add
    bad = 0     # counts NaN or negative variances
    exact = 0   # counts variances 0 (checked by the caller)
    if n1 == 0:  # a single node, the root, is a leaf
        acc += not (y[0] - y[0] == 0.0)
        bad += not (var[0] >= 0.0)
        x[0] = 0.0 if var[0] == inf else y[0]
        xvar[0] = var[0]
    # ---- pass 1: bottom-up, z -> x[p], u -> xvar[p]
    for p in range(n1 - 1, -1, -1):
        S = 0.0
        U = 0.0
        cnt = 0.0  # leaves below children with u = inf
        a = first[p]
        b = first[p + 1]
        if contig:
            for c in range(a, min(b, n1)):  # internal children first, then leaves
                uc = xvar[c]
                S += x[c]
                if uc == inf:
                    cnt += leafcount[c]
                else:
                    U += uc
            for c in range(max(a, n1), b):
                zc = y[c]
                uc = var[c]
                acc += not (zc - zc == 0.0)
                bad += not (uc >= 0.0)
                exact += uc == 0.0
                if uc == inf:
                    cnt += 1.0
                else:
                    S += zc
                    U += uc
        else:
            for j in range(a - 1, b - 1):
                c = cidx[j]
                if c >= n1:
                    zc = y[c]
                    uc = var[c]
                    acc += not (zc - zc == 0.0)
                    bad += not (uc >= 0.0)
                    exact += uc == 0.0
                    if uc == inf:
                        cnt += 1.0
                    else:
                        S += zc
                        U += uc
                else:
                    uc = xvar[c]
                    S += x[c]
                    if uc == inf:
                        cnt += leafcount[c]
                    else:
                        U += uc
        vi = var[p]
        yi = y[p]
        acc += not (yi - yi == 0.0)
        bad += not (vi >= 0.0)
        exact += vi == 0.0
        zi, ui = blue_combine(yi, vi, S, inf if cnt > 0.0 else U)
        x[p] = zi
        xvar[p] = ui
        if park:
            x[off + p] = S
            xvar[off + p] = -cnt if cnt > 0.0 else U
    if acc:
        return 1
    if bad:
        return 2
    # ---- pass 2: top-down (the root keeps x = z, xvar = u)
    for p in range(n1):
        a = first[p]
        b = first[p + 1]
        if park:
            S = x[off + p]
            U = xvar[off + p]
            cnt = 0.0
            if U < 0.0:
                cnt = -U
        else:
            S = 0.0
            U = 0.0
            cnt = 0.0
            for j in range(a, b):
                c = j if contig else cidx[j - 1]
                if c >= n1:
                    uc = var[c]
                    if uc == inf:
                        cnt += 1.0
                    else:
                        S += y[c]
                        U += uc
                else:
                    uc = xvar[c]
                    S += x[c]
                    if uc == inf:
                        cnt += leafcount[c]
                    else:
                        U += uc
        rp = x[p] - S
        vp = xvar[p]
        if cnt == 0.0 and U > 0.0:
            invU = 1.0 / U
            if contig:
                for c in range(a, min(b, n1)):
                    uc = xvar[c]
                    w = uc * invU
                    val = uc - uc * w + w * w * vp
                    xvar[c] = val if val > 0.0 else 0.0
                    x[c] = x[c] + w * rp
                for c in range(max(a, n1), b):
                    uc = var[c]
                    w = uc * invU
                    val = uc - uc * w + w * w * vp
                    xvar[c] = val if val > 0.0 else 0.0
                    x[c] = y[c] + w * rp
            else:
                for j in range(a - 1, b - 1):
                    c = cidx[j]
                    if c >= n1:
                        zc = y[c]
                        uc = var[c]
                    else:
                        zc = x[c]
                        uc = xvar[c]
                    w = uc * invU
                    val = uc - uc * w + w * w * vp
                    xvar[c] = val if val > 0.0 else 0.0
                    x[c] = zc + w * rp
        elif cnt > 0.0:
            # children without information share the residual by leaf count; a single one
            # is determined, x_c = x_p - (its siblings' z), with variance Var(x_p) + U
            # (x_p does not depend on p's subtree once p's own estimate ignored it)
            nunc = 0
            uinf = 0.0  # (U itself may hold the parked leaf count here)
            for j in range(a, b):
                c = j if contig else cidx[j - 1]
                uc = var[c] if c >= n1 else xvar[c]
                if uc == inf:
                    nunc += 1
                else:
                    uinf += uc
            vdet = vp + uinf if nunc == 1 and vp < inf else inf
            for j in range(a, b):
                c = j if contig else cidx[j - 1]
                if c >= n1:
                    uc = var[c]
                    if uc == inf:
                        x[c] = rp / cnt
                        xvar[c] = vdet
                    else:
                        x[c] = y[c]
                        xvar[c] = uc
                else:
                    uc = xvar[c]
                    if uc == inf:
                        x[c] = x[c] + rp * (leafcount[c] / cnt)
                        xvar[c] = vdet
        else:  # U == 0: every child is known exactly; split the residual equally
            w = 1.0 / (b - a)
            for j in range(a, b):
                c = j if contig else cidx[j - 1]
                if c >= n1:
                    x[c] = y[c] + w * rp
                else:
                    x[c] = x[c] + w * rp
                xvar[c] = 0.0
    return 5 if exact else 0


@_jit
def blue_flat_1d(par, n1, y, var, x, xvar, W):
    """Two-pass BLUE for one histogram without per-parent child loops: the same estimator
    as :func:`blue_1d` (Dawson et al. 2023, Alg. 1-2), for trees whose fan-out changes
    from one node to the next (the branch predictor misses every variable-length child
    loop there; here every loop is over node indices and branch-free in the common case).

    ``par`` is the parent array (int32 when the tree fits), ``W`` a scratch (n1, 2).
    Pass 1 sums each node's (z, u) into its parent's ``W`` (leaves first: every parent's
    leaf children must be adjacent, as in hierdp's internal order), then finishes the
    internal nodes bottom-up. Pass 2 (top-down) replaces ``W[p]`` by
    ``a_p = (x_p - S_p) / U_p`` and ``1 / U_p``, so that each child gets
    ``x_c = z_c + u_c a_p`` and ``Var(x_c) = u_c (1 - w_c) + w_c^2 Var(x_p)`` with Theorem 8's
    weight ``w_c = u_c / U_p`` (a sum of non-negative terms: no cancellation when the
    parent's own measurement is nearly uninformative).

    Returns 0; 1 if ``y`` has NaN/inf; 2 if ``var`` has NaN or negative entries; 3 if some
    internal node has children with no information (a leaf with var = inf), or some node
    is known exactly (var = 0): the caller then runs :func:`blue_1d`, which splits such
    residuals and reports exact nodes for checking. ``x``, ``xvar`` hold garbage unless 0 is returned.
    """
    n = y.shape[0]
    for p in range(n1):
        W[p, 0] = 0.0
        W[p, 1] = 0.0
    if flat_leaves_up(par, y, var, W, n1, n, n, n) + flat_internal_up(par, y, var, x, xvar, W, 0, n1):
        return odd_code(y, var)
    flat_internal_down(par, x, xvar, W, 0, n1)
    flat_leaves_down(par, y, var, x, xvar, W, n1, n)
    return 0


# ---- blue_flat_1d cut into its four passes over node ranges, for threads (see
# hierdp/_kernels/tree_pieces.py): each range kernel runs the same arithmetic on [lo, hi) as the
# corresponding loop of blue_flat_1d, so any cut of the passes at parent boundaries gives
# the same bits as blue_flat_1d itself. Loop indices are uint64: numba then knows they
# are not negative and drops its wraparound test per access (which made a plain loop
# several times slower than numpy). ``lo``, ``hi`` must be >= 0.
@nb.njit(cache=True, nogil=True, inline="always")
def _flat_leaf_up(par, y, var, W, i, prev, s, u):
    """One leaf of pass 1: its parent's running sums (stored at each step); returns
    (parent, s, u, odd): odd when y is not finite or the variance is not > 0 (NaN,
    negative or 0; an infinite one shows in the parent's sum)."""
    p = par[i]
    yi = y[i]
    vi = var[i]
    keep = p == prev
    s = (s if keep else 0.0) + (yi if vi < np.inf else 0.0)
    u = (u if keep else 0.0) + vi
    W[p, 0] = s
    W[p, 1] = u
    return p, s, u, not ((yi - yi == 0.0) & (vi > 0.0))


@_jit
def flat_leaves_up(par, y, var, W, lo, hi, lo2, hi2):
    """Pass 1 over leaves [lo, hi) and [lo2, hi2) (two pieces, interleaved so that their
    chains of dependent adds overlap; each parent's sum in one-loop order); returns the
    number of odd leaves (see :func:`_flat_leaf_up`)."""
    odd = 0
    pa = -1
    sa = 0.0
    ua = 0.0
    pb = -1
    sb = 0.0
    ub = 0.0
    a0 = nb.uint64(lo)
    b0 = nb.uint64(lo2)
    la = nb.uint64(hi - lo)
    lb = nb.uint64(hi2 - lo2)
    c = la if la < lb else lb
    for j in range(c):
        pa, sa, ua, o = _flat_leaf_up(par, y, var, W, a0 + j, pa, sa, ua)
        odd += o
        pb, sb, ub, o = _flat_leaf_up(par, y, var, W, b0 + j, pb, sb, ub)
        odd += o
    for j in range(c, la):
        pa, sa, ua, o = _flat_leaf_up(par, y, var, W, a0 + j, pa, sa, ua)
        odd += o
    for j in range(c, lb):
        pb, sb, ub, o = _flat_leaf_up(par, y, var, W, b0 + j, pb, sb, ub)
        odd += o
    return odd


@_jit
def flat_internal_up(par, y, var, x, xvar, W, lo, hi):
    """Pass 1 over internal nodes [lo, hi) of one height class, bottom-up; returns the
    number of odd nodes: y not finite, a variance not > 0 (NaN, negative or 0; inf, an
    unmeasured node, is fine), or children whose variances do not sum to a finite
    positive U. One flag, not one count per kind (counting costs more of this pass); the
    caller tells the kinds apart when there are any. (Two pieces interleaved, as in
    :func:`flat_leaves_up`, are no faster here: this pass waits on its division, not on
    a chain of adds.)"""
    inf = np.inf
    odd = 0
    top = nb.uint64(hi - 1)
    for j in range(nb.uint64(hi - lo)):
        c = top - j
        S = W[c, 0]
        U = W[c, 1]
        vc = var[c]
        yc = y[c]
        odd += not ((yc - yc == 0.0) & (vc > 0.0) & (0.0 < U) & (U < inf))
        z, u = blue_combine(yc, vc, S, U)
        x[c] = z
        xvar[c] = u
        if c > 0:
            p = par[c]
            W[p, 0] += z
            W[p, 1] += u
    return odd


@_jit
def flat_internal_down(par, x, xvar, W, lo, hi):
    """Pass 2 over internal nodes [lo, hi) of one height class, top-down."""
    for c in range(nb.uint64(lo), nb.uint64(hi)):
        if c > 0:
            p = par[c]
            u = xvar[c]
            w = u * W[p, 1]
            x[c] += u * W[p, 0]
            v = u - u * w + w * w * xvar[p]
            xvar[c] = v if v > 0.0 else 0.0
        invU = 1.0 / W[c, 1]
        W[c, 0] = (x[c] - W[c, 0]) * invU
        W[c, 1] = invU


@_jit
def flat_leaves_down(par, y, var, x, xvar, W, lo, hi):
    """Pass 2 over leaves [lo, hi)."""
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        p = par[i]
        vi = var[i]
        w = vi * W[p, 1]
        x[i] = y[i] + vi * W[p, 0]
        v = vi - vi * w + w * w * xvar[p]
        xvar[i] = v if v > 0.0 else 0.0


# Both passes by groups of subtree blocks (hierdp._kernels.tree_pieces.Pieces.block_bounds: trees
# whose leaves are all at one depth), leaves one by one: a group goes from its leaves up to
# just below the block height in one call, and back down, each height's rows in cache for
# the next. The arithmetic and the order of every parent's terms are those of
# flat_leaves_up, flat_internal_up, flat_internal_down and flat_leaves_down (the same
# bits); going up, the group's halves [a, m) and [m, b) run interleaved.
@nb.njit(cache=True, nogil=True, inline="always")
def _flat_node_up(par, y, var, x, xvar, W, c):
    """One non-root node of :func:`flat_internal_up`; returns whether it is odd."""
    S = W[c, 0]
    U = W[c, 1]
    vc = var[c]
    yc = y[c]
    odd = not ((yc - yc == 0.0) & (vc > 0.0) & (0.0 < U) & (U < np.inf))
    z, u = blue_combine(yc, vc, S, U)
    x[c] = z
    xvar[c] = u
    p = par[c]
    W[p, 0] += z
    W[p, 1] += u
    return odd


@_jit
def up_blocks(par, y, var, x, xvar, W, bounds, a, m, b):
    """Pass 1 over blocks [a, m) and [m, b), leaves to just below the block height;
    returns the number of odd nodes (as :func:`flat_leaves_up` and
    :func:`flat_internal_up` count them)."""
    odd = 0
    for lev in range(bounds.shape[0]):
        lo = nb.uint64(bounds[lev, a])
        mid = nb.uint64(bounds[lev, m])
        hi = nb.uint64(bounds[lev, b])
        la = mid - lo
        lb = hi - mid
        c = la if la < lb else lb
        if lev == 0:
            pa = -1
            sa = 0.0
            ua = 0.0
            pb = -1
            sb = 0.0
            ub = 0.0
            for j in range(c):
                pa, sa, ua, o = _flat_leaf_up(par, y, var, W, lo + j, pa, sa, ua)
                odd += o
                pb, sb, ub, o = _flat_leaf_up(par, y, var, W, mid + j, pb, sb, ub)
                odd += o
            for j in range(c, la):
                pa, sa, ua, o = _flat_leaf_up(par, y, var, W, lo + j, pa, sa, ua)
                odd += o
            for j in range(c, lb):
                pb, sb, ub, o = _flat_leaf_up(par, y, var, W, mid + j, pb, sb, ub)
                odd += o
        else:  # high to low, one range (waits on its division, not on a chain of adds)
            top = hi - nb.uint64(1)
            for j in range(hi - lo):
                odd += _flat_node_up(par, y, var, x, xvar, W, top - j)
    return odd


@_jit
def down_blocks(par, y, var, x, xvar, W, bounds, a, b):
    """Pass 2 over blocks [a, b), from just below the block height to the leaves."""
    for k in range(bounds.shape[0]):
        lev = bounds.shape[0] - 1 - k
        lo = nb.uint64(bounds[lev, a])
        hi = nb.uint64(bounds[lev, b])
        if lev == 0:
            for i in range(lo, hi):
                p = par[i]
                vi = var[i]
                w = vi * W[p, 1]
                x[i] = y[i] + vi * W[p, 0]
                v = vi - vi * w + w * w * xvar[p]
                xvar[i] = v if v > 0.0 else 0.0
        else:
            for c in range(lo, hi):
                p = par[c]
                u = xvar[c]
                w = u * W[p, 1]
                x[c] += u * W[p, 0]
                v = u - u * w + w * w * xvar[p]
                xvar[c] = v if v > 0.0 else 0.0
                invU = 1.0 / W[c, 1]
                W[c, 0] = (x[c] - W[c, 0]) * invU
                W[c, 1] = invU


# The leaf passes run by run of siblings, for trees whose leaves come in long runs (the
# census: ~50 blocks per block group). Leaves-down is the arithmetic of flat_leaves_down
# with the parent's terms loaded once per run (the same bits, vectorised); leaves-up may
# add a run's terms in any order (``reassoc``: vectorised sums), which changes the last
# bits against flat_leaves_up but not across threads (a run is one piece's).
@nb.njit(cache=True, nogil=True, fastmath={"reassoc"})
def runs_leaves_up(starts, pars, y, var, W, rlo, rhi):
    """Pass 1 over leaf runs [rlo, rhi); returns the number of odd leaves (see
    :func:`_flat_leaf_up`)."""
    inf = np.inf
    odd = 0
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        s = 0.0
        u = 0.0
        for i in range(nb.uint64(starts[r]), nb.uint64(starts[r + 1])):
            yi = y[i]
            vi = var[i]
            odd += not ((yi - yi == 0.0) & (vi > 0.0))
            s += yi if vi < inf else 0.0
            u += vi
        p = pars[r]
        W[p, 0] = s
        W[p, 1] = u
    return odd


@_jit
def runs_leaves_down(starts, pars, y, var, x, xvar, W, rlo, rhi):
    """Pass 2 over leaf runs [rlo, rhi)."""
    for r in range(nb.uint64(rlo), nb.uint64(rhi)):
        p = pars[r]
        a = W[p, 0]
        b = W[p, 1]
        xp = xvar[p]
        for i in range(nb.uint64(starts[r]), nb.uint64(starts[r + 1])):
            vi = var[i]
            w = vi * b
            x[i] = y[i] + vi * a
            v = vi - vi * w + w * w * xp
            xvar[i] = v if v > 0.0 else 0.0


def blue_structure(parent, n_children):
    """Structure arrays for :func:`blue_1d`: ``(n1, first, cidx)`` (see there).

    ``first`` (n1 + 1,) holds 1 + the CSR offsets of the internal nodes' children; ``cidx``
    is empty when the parent array is non-decreasing (children are contiguous runs), else
    the CSR child list. int32 when the tree fits, to move fewer bytes.
    """
    n = parent.shape[0]
    idx = np.int32 if n < 2**31 - 1 else np.int64
    n1 = int(np.count_nonzero(n_children))
    first = np.empty(n1 + 1, idx)
    first[0] = 1
    np.cumsum(n_children[:n1], out=first[1:])
    first[1:] += 1
    par = parent[1:]
    if par.size < 2 or bool(np.all(par[1:] >= par[:-1])):
        cidx = np.empty(0, idx)
    else:
        cidx = (np.argsort(par, kind="stable") + 1).astype(idx)
    return n1, first, cidx


@_jit
def check_values_variances(y, var):
    """One fused validation pass: 1 if ``y`` has NaN/inf, 2 if ``var`` has NaN or negatives, else 0.

    Branch-free integer counts (vectorised by the compiler): ``y - y`` is NaN exactly for
    non-finite y; ``not (v >= 0)`` is true exactly for NaN or negative v.
    """
    yf = y.ravel()
    acc = 0
    for i in range(yf.size):
        acc += not (yf[i] - yf[i] == 0.0)
    if acc:
        return 1
    vf = var.ravel()
    bad = 0
    for i in range(vf.size):
        bad += not (vf[i] >= 0.0)
    return 2 if bad else 0


@_jit
def odd_code(y, var):
    """The flat kernels' return code once their passes found odd nodes: 1 if ``y`` has
    NaN/inf, else 2 if ``var`` has NaN or negatives, else 3 (exact or uninformative
    nodes: the per-parent kernel handles them)."""
    code = check_values_variances(y, var)
    return code if code else 3
