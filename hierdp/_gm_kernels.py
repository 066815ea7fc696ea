"""Compiled O(n) passes for the Generation Matrix, GMC and the consistency baselines.

All arrays are in descending-height ("internal") order: the root is 0, every parent
precedes its children, the ``n1`` non-leaf nodes form the prefix ``[0, n1)`` and the
leaves the suffix ``[n1, n)`` (Cai et al., Def. 3 and 6). Leaves that share a parent are
stored as *runs* ``(start, stop, parent)`` so the leaf passes, which carry most of the
nodes, read the values contiguously and never touch a per-leaf parent index.
"""

from __future__ import annotations

from hierdp._jit import numba as nb
import numpy as np

_jit = nb.njit(cache=True, nogil=True)
_jit_fast = nb.njit(cache=True, nogil=True, fastmath=False, boundscheck=False)


# --------------------------------------------------------------------------- structure
@_jit
def leaf_runs(parent, n1):
    """Maximal runs of consecutive leaves (indices >= n1) with the same parent.

    Returns ``(starts, parents)`` (int64); run r covers ``[starts[r], starts[r+1])`` with
    ``starts[-1] == n``.
    """
    n = parent.shape[0]
    count = 0
    prev = -2
    for i in range(n1, n):
        if parent[i] != prev:
            count += 1
            prev = parent[i]
    starts = np.empty(count + 1, np.int64)
    pars = np.empty(count, np.int64)
    r = 0
    prev = -2
    for i in range(n1, n):
        if parent[i] != prev:
            starts[r] = i
            pars[r] = parent[i]
            r += 1
            prev = parent[i]
    starts[count] = n
    return starts, pars


@_jit
def gmc_theta(parent, n_children, n1):
    """Alg. 1 of Cai et al.: theta_i = |C_i| - sum_{j in C_i, j <= n1} (1 + theta_j)^-1.

    Returns ``theta' = theta + 1`` for the ``n1`` non-leaf nodes (formula 39's vector).
    """
    theta = np.empty(n1)
    for i in range(n1):
        theta[i] = n_children[i]
    for i in range(n1 - 1, 0, -1):
        theta[parent[i]] -= 1.0 / (1.0 + theta[i])
    for i in range(n1):
        theta[i] += 1.0
    return theta


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


# --------------------------------------------------------------------------- GMC stage 2
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
    for i in range(n1):
        for c in range(k):
            acc[i, c] = 0.0
    for r in range(leaf_parents.shape[0]):
        p = leaf_parents[r]
        for i in range(leaf_starts[r], leaf_starts[r + 1]):
            for c in range(k):
                acc[p, c] -= v[i, c]
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


# --------------------------------------------------------------------------- propagation
@_jit
def upward_2d(parent, w_node, w_edge, v, out):
    """Prop. 2: ``z = G^-T v``, z_i = (v_i + sum_{j in C_i} w_{j->i} z_j) / w_i (bottom-up)."""
    n, k = v.shape
    acc = np.zeros((n, k))
    for i in range(n - 1, -1, -1):
        for c in range(k):
            z = (v[i, c] + acc[i, c]) / w_node[i]
            out[i, c] = z
            if i > 0:
                acc[parent[i], c] += w_edge[i] * z
    return out


@_jit
def downward_2d(parent, w_node, w_edge, v, out):
    """Prop. 3: ``z = G^-1 v``, z_i = (v_i + w_{i->f_i} z_{f_i}) / w_i (top-down)."""
    n, k = v.shape
    for i in range(n):
        for c in range(k):
            if i == 0:
                out[i, c] = v[i, c] / w_node[i]
            else:
                out[i, c] = (v[i, c] + w_edge[i] * out[parent[i], c]) / w_node[i]
    return out


# --------------------------------------------------------------------------- boosting
@_jit
def boosting_2d(parent, height, child_ptr, child_idx, k_fan, v, out, z):
    """Boosting (Hay et al. 2010) with branching factor ``k_fan`` and node heights ``l``.

    Bottom-up: z_v = v_v on leaves, else
    z_v = (k^l - k^(l-1)) / (k^l - 1) v_v + (k^(l-1) - 1) / (k^l - 1) sum_{c} z_c.
    Top-down: out_root = z_root, out_c = z_c + (out_v - sum_{u in C_v} z_u) / k.
    Exact least squares on complete k-ary trees; on other trees the top-down split by
    ``1/k`` does not sum to the parent's residual (the paper's Table 3 "bias").
    """
    n, kk = v.shape
    kf = float(k_fan)
    for i in range(n - 1, -1, -1):
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc == 0:
            for c in range(kk):
                z[i, c] = v[i, c]
            continue
        l = height[i]
        if kf == 1.0:
            a = 1.0 / l
        else:
            kl = kf ** l
            a = (kl - kl / kf) / (kl - 1.0)
        for c in range(kk):
            s = 0.0
            for t in range(child_ptr[i], child_ptr[i + 1]):
                s += z[child_idx[t], c]
            z[i, c] = a * v[i, c] + (1.0 - a) * s
    for c in range(kk):
        out[0, c] = z[0, c]
    for i in range(n):
        a0 = child_ptr[i]
        a1 = child_ptr[i + 1]
        if a1 == a0:
            continue
        for c in range(kk):
            s = 0.0
            for t in range(a0, a1):
                s += z[child_idx[t], c]
            res = (out[i, c] - s) / kf
            for t in range(a0, a1):
                j = child_idx[t]
                out[j, c] = z[j, c] + res
    return out


# --------------------------------------------------------------------------- nonneg helpers
@_jit
def leaf_gradient_2d(parent, n1, w, x, xhat, g):
    """g_i = sum over the path root..i of w_j (x_j - xhat_j) (top-down prefix sums).

    On leaves this is the gradient of 1/2 sum_j w_j (x_j - xhat_j)^2 with respect to the
    leaf value (every node is the sum of its leaves). ``w`` is (n, kw), kw in {1, k}.
    """
    n, k = x.shape
    kw = w.shape[1]
    for i in range(n):
        for c in range(k):
            cw = c if kw > 1 else 0
            wi = w[i, cw]
            t = 0.0 if wi == 0.0 else wi * (x[i, c] - xhat[i, c])
            if i == 0:
                g[i, c] = t
            else:
                g[i, c] = g[parent[i], c] + t
    return g


# --------------------------------------------------------------------------- rounding
@_jit
def _select_kth_smallest(a, lo, hi, kth):
    """In-place quickselect on ``a[lo:hi]``: the value of rank ``kth`` (0-based) in it."""
    lo_, hi_ = lo, hi - 1
    target = lo + kth
    while lo_ < hi_:
        pivot = a[(lo_ + hi_) // 2]
        i, j = lo_, hi_
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if target <= j:
            hi_ = j
        elif target >= i:
            lo_ = i
        else:
            break
    return a[target]


@nb.njit(cache=True, nogil=True, inline="always")
def _round_up_largest_small(frac, base, nc, D):
    """:func:`_round_up_largest` for a few children: rank directly, without branches (the
    comparisons of fractional parts are coin flips for the branch predictor). Inlined: a
    call passing arrays costs reference counting, more than the work for 2-16 children."""
    for t in range(nc):
        ft = frac[t]
        rank = 0
        for q in range(nc):
            fq = frac[q]
            rank += (fq > ft) | ((fq == ft) & (q < t))
        base[t] += (ft > 0.0) & (rank < D)


@_jit
def _round_up_largest(frac, base, nc, D, counts, members):
    """Add 1 to ``base[t]`` for the D largest ``frac[t]`` (ties: lowest t first), O(nc);
    ``0 <= D <=`` the number of positive fractions.

    Small groups rank directly; larger ones bucket the fractions (in [0, 1)) into
    ``B ~ nc`` buckets, take every bucket above the one holding the D-th largest, and rank
    only the few members of that boundary bucket.
    """
    if nc <= 16:
        _round_up_largest_small(frac, base, nc, D)
        return
    B = nc if nc < 1024 else 1024
    for b in range(B):
        counts[b] = 0
    for t in range(nc):  # branch-free: fractional parts are random
        ft = frac[t]
        b = int(ft * B)
        b = b if b < B else B - 1
        counts[b] += ft > 0.0
    above = 0
    bb = B - 1
    while bb >= 0 and above + counts[bb] < D:
        above += counts[bb]
        bb -= 1
    need = D - above            # members of bucket bb that go up (1 <= need <= counts[bb])
    m = 0
    for t in range(nc):
        ft = frac[t]
        pos = ft > 0.0
        b = int(ft * B)
        b = b if b < B else B - 1
        base[t] += pos & (b > bb)
        members[m] = t
        m += pos & (b == bb)
    if m > 32:  # many ties or clustered fractions: a stable sort of the boundary bucket
        fm = np.empty(m)
        for a in range(m):
            fm[a] = -frac[members[a]]
        order = np.argsort(fm, kind="mergesort")
        for a in range(need):
            base[members[order[a]]] += 1
        return
    for a in range(m):
        t = members[a]
        ft = frac[t]
        rank = 0
        for q in range(m):
            u = members[q]
            fq = frac[u]
            rank += (fq > ft) | ((fq == ft) & (u < t))
        base[t] += rank < need


@_jit
def round_top_down_2d(child_ptr, child_idx, x, out, atol):
    """Top-down controlled rounding to consistent non-negative integers.

    Root: nearest integer of max(x, 0). For a node with integer target R and children
    with values x_c >= 0 (negatives count as 0): every child gets floor(x_c) and the
    D = R - sum floor(x_c) remaining units go, one each, to the children with the largest
    fractional parts (bucket selection, O(#children)). When the input is consistent
    0 <= D <= #fractional children, so every child stays strictly within 1 of its input
    and already integral children keep their value. Otherwise (inconsistent input) the
    surplus or deficit is spread as evenly as possible without going below 0.
    Values within ``atol`` of an integer are treated as that integer.
    """
    n, k = x.shape
    maxc = 0
    for i in range(n):
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc > maxc:
            maxc = nc
    frac = np.empty(maxc)
    base = np.empty(maxc, np.int64)
    counts = np.zeros(1025, np.int64)
    members = np.empty(maxc, np.int64)
    for c in range(k):
        x0 = x[0, c]
        if x0 < 0.0:
            x0 = 0.0
        out[0, c] = np.int64(np.floor(x0 + 0.5))
    for i in range(n):
        a0 = child_ptr[i]
        nc = child_ptr[i + 1] - a0
        if nc == 0:
            continue
        for c in range(k):
            tot = 0
            nfrac = 0
            for t in range(nc):
                xv = x[child_idx[a0 + t], c]
                if xv < 0.0:
                    xv = 0.0
                fl = np.floor(xv)
                f = xv - fl
                if f <= atol:
                    f = 0.0
                elif f >= 1.0 - atol:
                    fl += 1.0
                    f = 0.0
                else:
                    nfrac += 1
                base[t] = np.int64(fl)
                frac[t] = f
                tot += base[t]
            D = out[i, c] - tot
            if 0 <= D <= nfrac:  # always, for consistent input: one predictable branch
                if nc <= 16:
                    _round_up_largest_small(frac, base, nc, D)
                elif D > 0:
                    _round_up_largest(frac, base, nc, D, counts, members)
            elif D > 0:
                # all fractional children go up; spread the rest evenly
                for t in range(nc):
                    if frac[t] > 0.0:
                        base[t] += 1
                rest = D - nfrac
                q = rest // nc
                rem = rest - q * nc
                for t in range(nc):
                    base[t] += q
                    if t < rem:
                        base[t] += 1
            else:
                need = -D
                while need > 0:
                    # take one unit from each positive child in turn
                    progressed = False
                    for t in range(nc):
                        if need == 0:
                            break
                        if base[t] > 0:
                            base[t] -= 1
                            need -= 1
                            progressed = True
                    if not progressed:
                        break
            for t in range(nc):
                out[child_idx[a0 + t], c] = base[t]
    return out


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
    inf = np.inf
    z = np.empty((n1, k))
    u = np.empty((n1, k))
    s = np.zeros((n1, k))
    su = np.zeros((n1, k))
    ninf = np.zeros((n1, k), np.int64)
    g = np.empty((n1, k))
    ga = np.empty((n1, k))
    nbad = np.zeros(k, np.int64)
    for i in range(n - 1, n1 - 1, -1):
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
    for i in range(n1 - 1, -1, -1):
        p = parent[i]
        for c in range(k):
            vi = d[i, c]
            U = su[i, c]
            S = s[i, c]
            if vi == inf:
                zi = S
                ui = U
            elif U == inf:
                zi = xhat[i, c]
                ui = vi
            elif U == 0.0:
                zi = S
                ui = 0.0
            else:
                zi = (xhat[i, c] * U + S * vi) / (vi + U)
                ui = vi * U / (vi + U)
            z[i, c] = zi
            u[i, c] = ui
            if p >= 0:
                s[p, c] += zi
                su[p, c] += ui
                if ui == inf:
                    ninf[p, c] += leafcount[i]
    for i in range(n1):
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
    for i in range(n1, n):
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
    return nbad


@_jit
def nnls_finish_2d(parent, n1, y, xhat, d, fixed, x):
    """Finish ``nonneg``: exact zeros on fixed leaves, round-off clipped on free ones, the
    non-leaves re-aggregated bottom-up (in place on ``x``); then the KKT residual.

    Returns ``(residual, complementarity, objective)``: the largest relative violation of
    g >= 0 on fixed leaves and g = 0 on free ones (relative to the path sums of the terms
    of g), sum_j |l_j g_j| over the leaves, and sum_i (x_i - y_i)^2 / d_i (finite d).
    """
    n, k = xhat.shape
    inf = np.inf
    for i in range(n1):
        for c in range(k):
            x[i, c] = 0.0
    for i in range(n - 1, n1 - 1, -1):
        p = parent[i]
        for c in range(k):
            v = x[i, c]
            if fixed[i - n1, c] or v < 0.0:
                v = 0.0
            x[i, c] = v
            if p >= 0:
                x[p, c] += v
    for i in range(n1 - 1, 0, -1):
        p = parent[i]
        for c in range(k):
            x[p, c] += x[i, c]
    g = np.empty((n1, k))
    ga = np.empty((n1, k))
    res = 0.0
    comp = 0.0
    obj = 0.0
    for i in range(n):
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
