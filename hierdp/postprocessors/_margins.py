"""Per-parent kernels of the top-down integer steps with both margins held (issue 47, items 2 and 3).

A parent with ``m`` children and ``n`` cells: the children x cells table, each column summing
to the parent's cell and, for every child, each group of cells (a partition of the cells,
``group (n,)`` in ``[0, G)``) summing to the child's held marginal. The problem separates by
group into independent two-margin (transportation-polytope) problems, solved here one group
at a time:

- :func:`project_margins`: the non-negative table closest to real estimates in the weighted
  norm ``sum w (X - xhat)^2``. Its KKT form is ``X_ij = max(0, xhat_ij + (a_i + b_j) / w_ij)``;
  the kernel maximises the concave dual by a semismooth Newton method on the multipliers of
  the shorter side (the other side's multipliers solved exactly, row by row, by sorting the
  breakpoints), with an exact line search on the directional derivative (piecewise linear),
  and falls back to exact coordinate ascent if Newton stalls. When the support stops
  changing the Newton step solves the equality-constrained least squares on it exactly.
  Directions come from a Cholesky factor up to 128 multipliers, beyond by conjugate
  gradients on the supports (inexact Newton); a long line finds its multiplier by Newton's
  method from the last one (O(k) a step) instead of sorting its breakpoints.
- :func:`round_margins`: controlled rounding of a real table with integer margins: every cell
  to its floor or ceiling, every margin exact, ``sum w (Z - X)^2`` minimal, ties broken by
  ``u``. A min-cost flow: each line (the longer side) first takes its cheapest roundings up,
  then successive shortest paths on the exchange graph of the shorter side (8 cells of a
  group: a graph of 8 nodes, Bellman-Ford) move the excess to the deficits. Beyond 32 nodes
  (a county's tracts x 2,016 cells) node prices first move most of the excess, then
  Dijkstra with potentials finds the paths on the bipartite residual graph (O(E log V) a
  path on the E fractional entries); both give the same choice.
- :func:`round_vector`: the same for one vector under a total.

Costs of rounding up are compared exactly: ``w (1 - 2 f)`` quantised per group to integers of
at most 2**50 (ties in the floats stay ties, sums are exact), then ``u`` (quantised to 2**40)
only among equal primary costs; so the tie-break never changes the weighted-distance optimum
(up to the 2**-50 relative quantisation of the costs) and favours no index.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import for_size
from hierdp._kernels.jit import numba as nb

__all__ = ["project_margins", "round_margins", "round_vector"]

_jit = nb.njit(cache=True, nogil=True)

#: primary costs (w (1 - 2 f)) are quantised to integers of magnitude at most this
_PRIMARY = 2.0**50
#: tie-break values u in [0, 1) are quantised to integers below this
_SECONDARY = 2.0**40
#: Newton iterations per round before coordinate ascent takes over, and rounds
_NEWTON_ITERS = 60
_ROUNDS = 6
_SWEEPS = 2000
#: the column residual (relative to the largest margin of the group) counted as converged
_GTOL = 1e-13
#: Newton directions by a dense factorisation up to this many multipliers, by conjugate
#: gradients beyond (a county of 2,346 tracts: k = 2,016 cells)
_DENSE = 128
#: controlled rounding by the exchange graph on the shorter side up to this many nodes, by
#: shortest paths on the bipartite residual graph beyond (:func:`_round_flow`)
_EXCHANGE = 32
#: price sweeps before the shortest paths of :func:`_round_flow` (stopped when a sweep moves
#: less than a quarter of the excess)
_PRICE_SWEEPS = 30


# ----------------------------------------------------------------------------------------------
# projection


@_jit
def _sort_desc(key, idx, k):
    """Reorder the permutation ``idx[:k]`` of 0..k-1 so that ``key[idx]`` descends: an insertion
    sort, fast from the previous iteration's order (nearly sorted); argsort for long lines."""
    if k <= 24:
        for j in range(1, k):
            v = idx[j]
            kv = key[v]
            q = j - 1
            while q >= 0 and key[idx[q]] < kv:
                idx[q + 1] = idx[q]
                q -= 1
            idx[q + 1] = v
    else:
        o = np.argsort(-key[:k], kind="mergesort")
        for j in range(k):
            idx[j] = o[j]


@_jit
def _line_newton(key, S, i, r, a0, k):
    """The root ``a`` of ``f(a) = sum_j max(0, (key_j + a) S_ij) - r`` (convex, piecewise linear,
    non-decreasing) by Newton's method from ``a0``: the first step lands at or right of the
    root, later steps descend to it and stop when the support repeats; then ``a`` is the exact
    formula on the root's support, as the sorted search gives it. O(k) a step and a few steps
    from the previous iteration's multiplier, where sorting costs O(k log k). NaN if it has not
    settled in 64 steps (the caller sorts)."""
    a = a0
    T0 = np.nan
    S0 = np.nan
    for _it in range(64):
        T = 0.0
        Ssum = 0.0
        for j in range(k):
            if key[j] + a > 0.0:
                T += key[j] * S[i, j]
                Ssum += S[i, j]
        if Ssum == 0.0:
            jm = 0
            for j in range(1, k):
                if key[j] > key[jm]:
                    jm = j
            T = key[jm] * S[i, jm]
            Ssum = S[i, jm]
        a = (r - T) / Ssum
        if T == T0 and Ssum == S0:
            return a
        T0 = T
        S0 = Ssum
    return np.nan


@_jit
def _solve_lines(D, S, r, b, a, X, key, order):
    """For every line i, the multiplier ``a[i]`` with ``sum_j max(0, (D_ij + a_i + b_j) S_ij) == r_i``
    (exact: on short lines the breakpoints sorted, ``order[i]`` keeping line i's order for the
    next call; on long lines Newton's method from the multiplier ``a[i]`` holds on entry), and
    the table ``X``. ``r > 0``."""
    p, k = D.shape
    for i in range(p):
        for j in range(k):
            key[j] = D[i, j] + b[j]
        ai = np.nan
        if k > 24 and np.isfinite(a[i]):
            ai = _line_newton(key, S, i, r[i], a[i], k)
        if not np.isfinite(ai):
            idx = order[i]
            _sort_desc(key, idx, k)
            T = 0.0
            Ssum = 0.0
            for q in range(k):
                j = idx[q]
                T += key[j] * S[i, j]
                Ssum += S[i, j]
                ai = (r[i] - T) / Ssum
                if q == k - 1 or ai + key[idx[q + 1]] <= 0.0:
                    break
        a[i] = ai
        for j in range(k):
            v = (key[j] + ai) * S[i, j]
            X[i, j] = v if v > 0.0 else 0.0


@_jit
def _residual(X, c, g):
    """``g = c - X.sum(0)``; returns max |g|."""
    p, k = X.shape
    for j in range(k):
        g[j] = c[j]
    for i in range(p):
        for j in range(k):
            g[j] -= X[i, j]
    gmax = 0.0
    for j in range(k):
        gmax = max(gmax, abs(g[j]))
    return gmax


@_jit
def _newton_matrix(X, S, M, act):
    """The generalised Hessian of the reduced dual (negated; positive semidefinite):
    ``sum_i diag(s_i) - s_i s_i^T / sum(s_i)`` over each line's support."""
    p, k = X.shape
    for j in range(k):
        for q in range(k):
            M[j, q] = 0.0
    for i in range(p):
        na = 0
        Sa = 0.0
        for j in range(k):
            if X[i, j] > 0.0:
                act[na] = j
                na += 1
                Sa += S[i, j]
        if na == 0:
            continue
        for t in range(na):
            j = act[t]
            sj = S[i, j]
            M[j, j] += sj
            f = sj / Sa
            for v in range(na):
                q = act[v]
                M[j, q] -= f * S[i, q]


@_jit
def _cholesky_solve(M, g, d, k):
    """Solve ``M d = g`` (M symmetric positive definite, overwritten by its factor)."""
    for j in range(k):
        s = M[j, j]
        for q in range(j):
            s -= M[j, q] * M[j, q]
        if not s > 0.0:
            return False
        L = np.sqrt(s)
        M[j, j] = L
        for i in range(j + 1, k):
            t = M[i, j]
            for q in range(j):
                t -= M[i, q] * M[j, q]
            M[i, j] = t / L
    for i in range(k):
        t = g[i]
        for q in range(i):
            t -= M[i, q] * d[q]
        d[i] = t / M[i, i]
    for i in range(k - 1, -1, -1):
        t = d[i]
        for q in range(i + 1, k):
            t -= M[q, i] * d[q]
        d[i] = t / M[i, i]
    return True


@_jit
def _support(X, S, sp, sj, ss, sa, diag):
    """Each line's support (CSR ``sp``/``sj``, its ``1 / w`` in ``ss``, their sum in ``sa``) and
    the diagonal of the generalised Hessian of :func:`_newton_matrix`."""
    p, k = X.shape
    for j in range(k):
        diag[j] = 0.0
    n = 0
    for i in range(p):
        sp[i] = n
        Sa = 0.0
        for j in range(k):
            if X[i, j] > 0.0:
                sj[n] = j
                ss[n] = S[i, j]
                Sa += S[i, j]
                n += 1
        sa[i] = Sa
        for t in range(sp[i], n):
            diag[sj[t]] += ss[t] * (1.0 - ss[t] / Sa)
    sp[p] = n


@_jit
def _hessian_times(sp, sj, ss, sa, tau, mu, v, out):
    """``out = (H + tau 11' + mu I) v`` for the generalised Hessian ``H`` held as supports."""
    k = v.shape[0]
    total = 0.0
    for j in range(k):
        total += v[j]
    for j in range(k):
        out[j] = mu * v[j] + tau * total
    for i in range(sp.shape[0] - 1):
        lo = sp[i]
        hi = sp[i + 1]
        if hi == lo:
            continue
        t = 0.0
        for q in range(lo, hi):
            t += ss[q] * v[sj[q]]
        t /= sa[i]
        for q in range(lo, hi):
            j = sj[q]
            out[j] += ss[q] * (v[j] - t)


@_jit
def _cg_direction(X, S, g, d, mu, tau, eta, sp, sj, ss, sa, diag, r, z, pv, hp):
    """The Newton direction ``(H + tau 11' + mu I) d = g`` by conjugate gradients preconditioned
    by the diagonal, to the relative residual ``eta`` (an inexact Newton step: each product costs
    the support's size, not the k**3 of a factorisation). False when the system is not positive
    definite along the way."""
    k = g.shape[0]
    _support(X, S, sp, sj, ss, sa, diag)
    gg = 0.0
    for j in range(k):
        d[j] = 0.0
        r[j] = g[j]
        gg += g[j] * g[j]
        diag[j] += tau + mu
    stop = eta * eta * gg
    rz = 0.0
    for j in range(k):
        z[j] = r[j] / diag[j]
        pv[j] = z[j]
        rz += r[j] * z[j]
    for _it in range(max(50, 2 * k)):
        _hessian_times(sp, sj, ss, sa, tau, mu, pv, hp)
        php = 0.0
        for j in range(k):
            php += pv[j] * hp[j]
        if not php > 0.0:
            return _it > 0
        alpha = rz / php
        rr = 0.0
        for j in range(k):
            d[j] += alpha * pv[j]
            r[j] -= alpha * hp[j]
            rr += r[j] * r[j]
        if rr <= stop:
            return True
        rz_new = 0.0
        for j in range(k):
            z[j] = r[j] / diag[j]
            rz_new += r[j] * z[j]
        beta = rz_new / rz
        rz = rz_new
        for j in range(k):
            pv[j] = z[j] + beta * pv[j]
    return True


@_jit
def _solve_columns(DT, ST, c, a, b, XT, key, order):
    """Coordinate ascent's other half: every ``b[j]`` exact given ``a`` (on the transposed arrays)."""
    _solve_lines(DT, ST, c, a, b, XT, key, order)


@_jit
def _project_core(D, S, r, c, X, dense):
    """The projection of one group, lines ``r`` (p) x nodes ``c`` (k), ``D = xhat w``, ``S = 1 / w``,
    ``sum(r) == sum(c)`` to round-off, every margin > 0, p >= 2, k >= 2. Writes ``X``;
    returns 0, or 1 when it did not converge. ``dense``: Newton directions by a Cholesky factor
    (k**3; small k), else by conjugate gradients on the supports."""
    p, k = D.shape
    b = np.zeros(k)
    a = np.zeros(p)
    g = np.empty(k)
    d = np.empty(k)
    bt = np.empty(k)
    gt = np.empty(k)
    M = np.empty((k, k)) if dense else np.empty((1, 1))
    sp = np.empty(p + 1, np.int64)
    sj = np.empty(1 if dense else p * k, np.int64)
    ss = np.empty(1 if dense else p * k)
    sa = np.empty(p)
    cgv = np.empty((5, k))
    key = np.empty(max(p, k))
    idx = np.empty((p, k), np.int64)
    for i in range(p):
        for j in range(k):
            idx[i, j] = j
    act = np.empty(k, np.int64)
    Xt = np.empty((p, k))
    at = np.zeros(p)
    scale = 0.0
    ref = 0.0
    for j in range(k):
        scale = max(scale, c[j])
    for i in range(p):
        scale = max(scale, r[i])
        for j in range(k):
            ref += S[i, j]
    ref /= k
    tol = _GTOL * scale
    _solve_lines(D, S, r, b, a, X, key, idx)
    gmax = _residual(X, c, g)
    if gmax <= tol:
        return 0
    DT = np.ascontiguousarray(D.T)
    ST = np.ascontiguousarray(S.T)
    XT = np.empty((k, p))
    idxT = np.empty((k, p), np.int64)
    for j in range(k):
        for i in range(p):
            idxT[j, i] = i
    for _round in range(_ROUNDS):
        stall = 0
        for _it in range(_NEWTON_ITERS):
            mu = ref * (1e-14 + min(1e-6, gmax / scale))
            tau = ref / k
            if dense:
                _newton_matrix(X, S, M, act)
                for j in range(k):
                    for q in range(k):
                        M[j, q] += tau
                    M[j, j] += mu
                if not _cholesky_solve(M, g, d, k):
                    break
            else:
                eta = min(1e-2, np.sqrt(gmax / scale))
                if not _cg_direction(X, S, g, d, mu, tau, eta, sp, sj, ss, sa, cgv[0], cgv[1], cgv[2],
                                     cgv[3], cgv[4]):
                    break
            slope = 0.0
            for j in range(k):
                slope += g[j] * d[j]
            if not slope > 0.0:
                break
            # exact line search: phi'(t) = g(b + t d) . d is non-increasing and piecewise linear;
            # take t = 1 when phi'(1) >= 0, else a root of phi' by Illinois steps from [0, 1]
            lo = 0.0
            flo = slope
            hi = 1.0
            fhi = 0.0
            t = 1.0
            best = 0.0
            side = 0
            for _ls in range(40):
                for j in range(k):
                    bt[j] = b[j] + t * d[j]
                _solve_lines(D, S, r, bt, at, Xt, key, idx)
                gm = _residual(Xt, c, gt)
                ft = 0.0
                for j in range(k):
                    ft += gt[j] * d[j]
                if gm <= tol or ft >= 0.0:
                    best = t
                    if t == 1.0 or gm <= tol or ft <= 1e-6 * slope:
                        break
                    lo = t
                    flo = ft
                    if side == 1:
                        fhi *= 0.5
                    side = 1
                else:
                    hi = t
                    fhi = ft
                    if side == -1:
                        flo *= 0.5
                    side = -1
                if hi - lo <= 1e-14 * hi:
                    break
                t = lo + (hi - lo) * flo / (flo - fhi)
                if not (lo < t < hi):
                    t = 0.5 * (lo + hi)
            if best <= 0.0:
                stall += 1
                break
            for j in range(k):
                b[j] += best * d[j]
            if best == t:  # the line search's last evaluation is the new point
                X[:, :] = Xt
                a[:] = at
                g[:] = gt
                gnew = gm
            else:
                _solve_lines(D, S, r, b, a, X, key, idx)
                gnew = _residual(X, c, g)
            if gnew <= tol:
                return 0
            if gnew > 0.999 * gmax:
                stall += 1
                if stall > 5:
                    gmax = gnew
                    break
            else:
                stall = 0
            gmax = gnew
        # coordinate ascent: each multiplier exact in turn (converges, linearly)
        for _sw in range(_SWEEPS):
            _solve_columns(DT, ST, c, a, b, XT, key, idxT)
            _solve_lines(D, S, r, b, a, X, key, idx)
            gmax = _residual(X, c, g)
            if gmax <= tol:
                return 0
            if _sw >= 10 and _round < _ROUNDS - 1:
                break
    return 1


@_jit
def project_groups(xhat, w, col, row, cells, ptr, out):
    """:func:`project_margins` on validated arrays: the cells of group g are
    ``cells[ptr[g]:ptr[g + 1]]``. Returns the number of groups that did not converge."""
    m = xhat.shape[0]
    G = ptr.shape[0] - 1
    rows = np.empty(m, np.int64)
    failed = 0
    for i in range(m):
        for j in range(xhat.shape[1]):
            out[i, j] = 0.0
    for gi in range(G):
        lo = ptr[gi]
        hi = ptr[gi + 1]
        ncell = 0
        for t in range(lo, hi):
            ncell += col[cells[t]] > 0.0
        nrow = 0
        rsum = 0.0
        for i in range(m):
            if row[i, gi] > 0.0:
                rows[nrow] = i
                nrow += 1
                rsum += row[i, gi]
        if ncell == 0 or nrow == 0:
            continue
        pos = np.empty(ncell, np.int64)
        q = 0
        csum = 0.0
        for t in range(lo, hi):
            if col[cells[t]] > 0.0:
                pos[q] = cells[t]
                q += 1
                csum += col[cells[t]]
        if nrow == 1:
            for t in range(ncell):
                out[rows[0], pos[t]] = col[pos[t]]
            continue
        if ncell == 1:
            for t in range(nrow):
                out[rows[t], pos[0]] = row[rows[t], gi]
            continue
        f = csum / rsum  # the row margins made to add up exactly (they agree within 1e-9)
        if ncell <= nrow:  # lines: children; Newton on the cells' multipliers
            D = np.empty((nrow, ncell))
            S = np.empty((nrow, ncell))
            rr = np.empty(nrow)
            cc = np.empty(ncell)
            for t in range(nrow):
                i = rows[t]
                rr[t] = row[i, gi] * f
                for v in range(ncell):
                    j = pos[v]
                    D[t, v] = xhat[i, j] * w[i, j]
                    S[t, v] = 1.0 / w[i, j]
            for v in range(ncell):
                cc[v] = col[pos[v]]
            X = np.empty((nrow, ncell))
            failed += _project_core(D, S, rr, cc, X, ncell <= _DENSE)
            for t in range(nrow):
                for v in range(ncell):
                    out[rows[t], pos[v]] = X[t, v]
        else:  # lines: cells; Newton on the children's multipliers
            D = np.empty((ncell, nrow))
            S = np.empty((ncell, nrow))
            rr = np.empty(nrow)
            cc = np.empty(ncell)
            for v in range(ncell):
                j = pos[v]
                cc[v] = col[j]
                for t in range(nrow):
                    i = rows[t]
                    D[v, t] = xhat[i, j] * w[i, j]
                    S[v, t] = 1.0 / w[i, j]
            for t in range(nrow):
                rr[t] = row[rows[t], gi] * f
            X = np.empty((ncell, nrow))
            failed += _project_core(D, S, cc, rr, X, nrow <= _DENSE)
            for v in range(ncell):
                for t in range(nrow):
                    out[rows[t], pos[v]] = X[v, t]
    return failed


# ----------------------------------------------------------------------------------------------
# controlled rounding


@nb.njit(cache=True, nogil=True, inline="always")
def _primary(n):
    """The primary costs' bound for a group of ``n`` lines and nodes: ``_PRIMARY``, lowered on
    large groups so that path sums of up to ``2 n`` costs and their potentials stay in int64."""
    b = 1
    while (1 << b) < 2 * n + 2:
        b += 1
    return min(_PRIMARY, 2.0 ** (60 - b))


@nb.njit(cache=True, nogil=True, inline="always")
def _less(a1, a2, b1, b2):
    """(a1, a2) < (b1, b2) lexicographically."""
    return (a1 < b1) | ((a1 == b1) & (a2 < b2))


@_jit
def _arc(K1, K2, elig, chosen, need_line, A1, A2, arow, j, q):
    """The exchange arc j -> q: the cheapest line (first of equal ones) holding a unit at j and
    none at eligible q, its cost difference in (A1, A2); ``arow = -1`` when there is none."""
    p = K1.shape[0]
    arow[j, q] = -1
    for i in range(p):
        if need_line[i] == 0 or not chosen[i, j] or not elig[i, q] or chosen[i, q]:
            continue
        c1 = K1[i, q] - K1[i, j]
        c2 = K2[i, q] - K2[i, j]
        if arow[j, q] < 0 or _less(c1, c2, A1[j, q], A2[j, q]):
            A1[j, q] = c1
            A2[j, q] = c2
            arow[j, q] = i


@_jit
def _round_core(K1, K2, elig, need_line, need_node, chosen):
    """Min-cost choice of entries to round up: line i (p lines) takes ``need_line[i]`` eligible
    entries, node j (k nodes) ``need_node[j]``, minimising the lexicographic sum of (K1, K2).
    Writes ``chosen``; returns 0, or 1 when no such choice exists (inconsistent margins).

    Each line first takes its cheapest entries; the excess of the nodes then moves to their
    deficits along shortest paths (Bellman-Ford) of the exchange graph on the nodes: an arc
    j -> l moves one line's unit from j to l at the cheapest such line's cost difference.
    Every arc starts non-negative and shortest-path augmentation keeps the residual graph
    free of negative cycles, so the result is optimal (successive shortest paths)."""
    p, k = K1.shape
    cnt = np.zeros(k, np.int64)
    if not _take_cheapest(K1, K2, elig, need_line, chosen, cnt):
        return 1
    excess = _excess(cnt, need_node)
    if excess <= 0:
        return -excess
    A1 = np.empty((k, k), np.int64)
    A2 = np.empty((k, k), np.int64)
    arow = np.empty((k, k), np.int64)
    d1 = np.empty(k, np.int64)
    d2 = np.empty(k, np.int64)
    reach = np.empty(k, np.bool_)
    pred = np.empty(k, np.int64)
    path = np.empty(k + 1, np.int64)
    chg = np.empty(k + 1, np.int64)  # chg[1:L + 1]: the lines the last path changed
    L = 0
    for j in range(k):
        for q in range(k):
            _arc(K1, K2, elig, chosen, need_line, A1, A2, arow, j, q)
    while excess > 0:
        if L > 0:  # the lines the last path changed: their arcs again, exactly as from scratch
            for j in range(k):
                for q in range(k):
                    r0 = arow[j, q]
                    for t in range(1, L + 1):
                        if chg[t] == r0:
                            _arc(K1, K2, elig, chosen, need_line, A1, A2, arow, j, q)
                            break
            for t in range(1, L + 1):
                i = chg[t]
                for j in range(k):
                    if not chosen[i, j]:
                        continue
                    for q in range(k):
                        if elig[i, q] and not chosen[i, q]:
                            c1 = K1[i, q] - K1[i, j]
                            c2 = K2[i, q] - K2[i, j]
                            if arow[j, q] < 0 or _less(c1, c2, A1[j, q], A2[j, q]) or (
                                    c1 == A1[j, q] and c2 == A2[j, q] and i < arow[j, q]):
                                A1[j, q] = c1
                                A2[j, q] = c2
                                arow[j, q] = i
        for j in range(k):
            reach[j] = cnt[j] > need_node[j]
            d1[j] = 0
            d2[j] = 0
            pred[j] = -1
        changed = True
        rounds = 0
        while changed:
            changed = False
            rounds += 1
            if rounds > k + 1:
                return 1  # a negative cycle: cannot happen with consistent input
            for j in range(k):
                if not reach[j]:
                    continue
                for q in range(k):
                    if arow[j, q] < 0:
                        continue
                    n1 = d1[j] + A1[j, q]
                    n2 = d2[j] + A2[j, q]
                    if not reach[q] or _less(n1, n2, d1[q], d2[q]):
                        reach[q] = True
                        d1[q] = n1
                        d2[q] = n2
                        pred[q] = j
                        changed = True
        end = -1
        for j in range(k):
            if reach[j] and cnt[j] < need_node[j]:
                if end < 0 or _less(d1[j], d2[j], d1[end], d2[end]):
                    end = j
        if end < 0:
            return 1
        L = 0
        q = end
        while pred[q] >= 0:
            path[L] = q
            L += 1
            q = pred[q]
            if L > k:
                return 1
        path[L] = q
        # path[L] is an excess node, path[0] the deficit; augment arc by arc
        for t in range(L, 0, -1):
            j = path[t]
            q = path[t - 1]
            i = arow[j, q]
            chosen[i, j] = False
            chosen[i, q] = True
            chg[t] = i
        cnt[path[L]] -= 1
        cnt[end] += 1
        excess -= 1
    for j in range(k):
        if cnt[j] != need_node[j]:
            return 1
    return 0


@_jit
def _excess(cnt, need_node):
    """The units the nodes hold above their needs; when none: 0 if every node has its need,
    else -1 (a negative need or a deficit no excess can fill: inconsistent margins)."""
    excess = 0
    for j in range(cnt.shape[0]):
        if need_node[j] < 0:
            return -1
        if cnt[j] > need_node[j]:
            excess += cnt[j] - need_node[j]
    if excess == 0:
        for j in range(cnt.shape[0]):
            if cnt[j] != need_node[j]:
                return -1
    return excess


@_jit
def _take_cheapest(K1, K2, elig, need_line, chosen, cnt):
    """Each line's ``need_line[i]`` cheapest eligible entries chosen (by (K1, K2), first index of
    equal ones), ``cnt`` the nodes' counts; False when a line cannot take its need."""
    p, k = K1.shape
    idx = np.empty(k, np.int64)
    for j in range(k):
        cnt[j] = 0
    for i in range(p):
        ne = 0
        for j in range(k):
            chosen[i, j] = False
            if elig[i, j]:
                idx[ne] = j
                ne += 1
        need = need_line[i]
        if need < 0 or need > ne:
            return False
        if need == 0:
            continue
        if need < ne:
            if ne > 24:
                o = np.empty(ne, np.int64)
                for t in range(ne):
                    o[t] = idx[t]
                _sort_pairs(K1[i], K2[i], o)
                for t in range(ne):
                    idx[t] = o[t]
            else:
                for t in range(1, ne):  # insertion sort by (K1, K2) ascending
                    v = idx[t]
                    q = t - 1
                    while q >= 0 and _less(K1[i, v], K2[i, v], K1[i, idx[q]], K2[i, idx[q]]):
                        idx[q + 1] = idx[q]
                        q -= 1
                    idx[q + 1] = v
        for t in range(need):
            chosen[i, idx[t]] = True
            cnt[idx[t]] += 1
    return True


@_jit
def _sort_pairs(a1, a2, o):
    """Sort the indices ``o`` by ``(a1[o], a2[o], o)`` ascending (stable merge sort on the keys)."""
    n = o.shape[0]
    tmp = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            x = lo
            y = mid
            t = lo
            while x < mid and y < hi:
                if _less(a1[o[y]], a2[o[y]], a1[o[x]], a2[o[x]]):
                    tmp[t] = o[y]
                    y += 1
                else:
                    tmp[t] = o[x]
                    x += 1
                t += 1
            while x < mid:
                tmp[t] = o[x]
                x += 1
                t += 1
            while y < hi:
                tmp[t] = o[y]
                y += 1
                t += 1
        for t in range(n):
            o[t] = tmp[t]
        width *= 2


@nb.njit(cache=True, nogil=True, inline="always")
def _heap_less(h1, h2, hv, a, b):
    """Heap entry ``a`` before ``b``: by (key1, key2), then vertex."""
    return _less(h1[a], h2[a], h1[b], h2[b]) or (h1[a] == h1[b] and h2[a] == h2[b] and hv[a] < hv[b])


@nb.njit(cache=True, nogil=True, inline="always")
def _heap_swap(h1, h2, hv, a, b):
    h1[a], h1[b] = h1[b], h1[a]
    h2[a], h2[b] = h2[b], h2[a]
    hv[a], hv[b] = hv[b], hv[a]


@_jit
def _heap_push(h1, h2, hv, size, a1, a2, v):
    t = size
    h1[t] = a1
    h2[t] = a2
    hv[t] = v
    while t > 0:
        par = (t - 1) // 2
        if not _heap_less(h1, h2, hv, t, par):
            break
        _heap_swap(h1, h2, hv, t, par)
        t = par
    return size + 1


@_jit
def _heap_pop(h1, h2, hv, size):
    """Moves the least (key, vertex) to position ``size - 1``; returns the new size."""
    size -= 1
    _heap_swap(h1, h2, hv, 0, size)
    t = 0
    while True:
        a = 2 * t + 1
        if a >= size:
            break
        c = a + 1 if a + 1 < size and _heap_less(h1, h2, hv, a + 1, a) else a
        if not _heap_less(h1, h2, hv, c, t):
            break
        _heap_swap(h1, h2, hv, t, c)
        t = c
    return size


@_jit
def _round_flow(K1, K2, elig, need_line, need_node, chosen):
    """:func:`_round_core` for large tables: the same minimum (the lexicographic optimum, unique
    for tie-break values in general position), by successive shortest paths on the bipartite
    residual graph (node -> line: give back a chosen entry, cost -K; line -> node: take an
    eligible one, cost +K) with Dijkstra on reduced costs (Johnson potentials: lines start at
    minus their dearest chosen entry, which the cheapest-first start makes feasible), stopped
    at the sink. O(E log V) a path on the E eligible entries, against the exchange graph's
    O(k**2 p) arcs. Returns 0, or 1 when no choice exists."""
    p, k = K1.shape
    cnt = np.zeros(k, np.int64)
    if not _take_cheapest(K1, K2, elig, need_line, chosen, cnt):
        return 1
    excess = _excess(cnt, need_node)
    if excess <= 0:
        return -excess
    # eligible entries by line (lp, lq) and by node (cp, ni)
    lp = np.zeros(p + 1, np.int64)
    cp = np.zeros(k + 1, np.int64)
    for i in range(p):
        for j in range(k):
            if elig[i, j]:
                lp[i + 1] += 1
                cp[j + 1] += 1
    for i in range(p):
        lp[i + 1] += lp[i]
    for j in range(k):
        cp[j + 1] += cp[j]
    E = lp[p]
    lq = np.empty(E, np.int64)
    ni = np.empty(E, np.int64)
    fill = cp[:k].copy()
    t = 0
    for i in range(p):
        for j in range(k):
            if elig[i, j]:
                lq[t] = j
                t += 1
                ni[fill[j]] = i
                fill[j] += 1
    # node prices (p1, p2): each line keeps its need cheapest entries by K + price, so the choice
    # stays a minimum for the counts it gives; raising an over-chosen node's price just enough
    # for its excess of lines to move to their next best entry (Gauss-Seidel sweeps, an auction
    # start) leaves the shortest paths below far fewer units to move
    p1 = np.zeros(k, np.int64)
    p2 = np.zeros(k, np.int64)
    tl = np.empty(p, np.int64)
    t1a = np.empty(p, np.int64)
    t2a = np.empty(p, np.int64)
    alt = np.empty(p, np.int64)
    for _sweep in range(_PRICE_SWEEPS):
        before = excess
        for j in range(k):
            e = cnt[j] - need_node[j]
            if e <= 0:
                continue
            nl = 0
            for x in range(cp[j], cp[j + 1]):
                i = ni[x]
                if not chosen[i, j]:
                    continue
                best = -1
                b1 = 0
                b2 = 0
                for y in range(lp[i], lp[i + 1]):
                    q = lq[y]
                    if chosen[i, q]:
                        continue
                    c1 = K1[i, q] + p1[q]
                    c2 = K2[i, q] + p2[q]
                    if best < 0 or _less(c1, c2, b1, b2):
                        best = q
                        b1 = c1
                        b2 = c2
                if best < 0:
                    continue
                tl[nl] = i
                alt[nl] = best
                t1a[nl] = b1 - (K1[i, j] + p1[j])
                t2a[nl] = b2 - (K2[i, j] + p2[j])
                nl += 1
            if nl == 0:
                continue
            o = np.arange(nl)
            _sort_pairs(t1a, t2a, o)
            take = min(e, nl)
            last = o[take - 1]
            d1_ = t1a[last]
            d2_ = t2a[last] + 1
            if take < nl and t1a[o[take]] == d1_ and t2a[o[take]] == d2_ - 1:
                continue  # a tie at the cut: moving exactly e lines is not a price; leave it to the paths
            p1[j] += d1_
            p2[j] += d2_
            for r in range(take):
                z = o[r]
                i = tl[z]
                q = alt[z]
                chosen[i, j] = False
                chosen[i, q] = True
                cnt[q] += 1
            cnt[j] -= take
        excess = _excess(cnt, need_node)
        if excess <= 0 or excess * 4 > before * 3:
            break
    if excess <= 0:
        return -excess
    V = k + p + 1  # nodes 0..k-1, lines k..k+p-1, the sink k+p
    sink = k + p
    pi1 = np.zeros(V, np.int64)
    pi2 = np.zeros(V, np.int64)
    for j in range(k):
        pi1[j] = -p1[j]
        pi2[j] = -p2[j]
    for i in range(p):
        has = False
        b1 = 0
        b2 = 0
        for e in range(lp[i], lp[i + 1]):
            j = lq[e]
            if chosen[i, j]:
                c1 = K1[i, j] + p1[j]
                c2 = K2[i, j] + p2[j]
                if not has or _less(b1, b2, c1, c2):
                    b1 = c1
                    b2 = c2
                has = True
        if not has:
            for e in range(lp[i], lp[i + 1]):
                j = lq[e]
                c1 = K1[i, j] + p1[j]
                c2 = K2[i, j] + p2[j]
                if not has or _less(c1, c2, b1, b2):
                    b1 = c1
                    b2 = c2
                has = True
        pi1[k + i] = -b1
        pi2[k + i] = -b2
    d1 = np.empty(V, np.int64)
    d2 = np.empty(V, np.int64)
    seen = np.empty(V, np.bool_)
    done = np.empty(V, np.bool_)
    pred = np.empty(V, np.int64)
    cap = E + 2 * V + 8
    h1 = np.empty(cap, np.int64)
    h2 = np.empty(cap, np.int64)
    hv = np.empty(cap, np.int64)
    while excess > 0:
        # the super-source's potential: the largest of the excess nodes' (its arcs reduced >= 0)
        s1 = 0
        s2 = 0
        first = True
        t1 = 0
        t2 = 0
        tfirst = True
        for j in range(k):
            if cnt[j] > need_node[j] and (first or _less(s1, s2, pi1[j], pi2[j])):
                s1 = pi1[j]
                s2 = pi2[j]
                first = False
            if cnt[j] < need_node[j] and (tfirst or _less(pi1[j], pi2[j], t1, t2)):
                t1 = pi1[j]
                t2 = pi2[j]
                tfirst = False
        if tfirst:
            return 1
        for v in range(V):
            seen[v] = False
            done[v] = False
            pred[v] = -1
        size = 0
        for j in range(k):
            if cnt[j] > need_node[j]:
                d1[j] = s1 - pi1[j]
                d2[j] = s2 - pi2[j]
                seen[j] = True
                size = _heap_push(h1, h2, hv, size, d1[j], d2[j], j)
        D1 = 0
        D2 = 0
        reached = False
        while size > 0:
            size = _heap_pop(h1, h2, hv, size)
            a1 = h1[size]
            a2 = h2[size]
            v = hv[size]
            if done[v] or a1 != d1[v] or a2 != d2[v]:
                continue
            done[v] = True
            if v == sink:
                D1 = a1
                D2 = a2
                reached = True
                break
            if v < k:  # a node: give back a chosen entry of a line, or end here at a deficit
                if cnt[v] < need_node[v]:
                    n1 = a1 + pi1[v] - t1
                    n2 = a2 + pi2[v] - t2
                    if not seen[sink] or _less(n1, n2, d1[sink], d2[sink]):
                        d1[sink] = n1
                        d2[sink] = n2
                        seen[sink] = True
                        pred[sink] = v
                        size = _heap_push(h1, h2, hv, size, n1, n2, sink)
                for e in range(cp[v], cp[v + 1]):
                    i = ni[e]
                    if not chosen[i, v]:
                        continue
                    w = k + i
                    if done[w]:
                        continue
                    n1 = a1 - K1[i, v] + pi1[v] - pi1[w]
                    n2 = a2 - K2[i, v] + pi2[v] - pi2[w]
                    if not seen[w] or _less(n1, n2, d1[w], d2[w]):
                        d1[w] = n1
                        d2[w] = n2
                        seen[w] = True
                        pred[w] = v
                        size = _heap_push(h1, h2, hv, size, n1, n2, w)
            else:  # a line: take an eligible entry it does not hold
                i = v - k
                for e in range(lp[i], lp[i + 1]):
                    q = lq[e]
                    if chosen[i, q] or done[q]:
                        continue
                    n1 = a1 + K1[i, q] + pi1[v] - pi1[q]
                    n2 = a2 + K2[i, q] + pi2[v] - pi2[q]
                    if not seen[q] or _less(n1, n2, d1[q], d2[q]):
                        d1[q] = n1
                        d2[q] = n2
                        seen[q] = True
                        pred[q] = v
                        size = _heap_push(h1, h2, hv, size, n1, n2, q)
        if not reached:
            return 1
        # potentials: settled vertices by their distance, the rest by the sink's
        for v in range(V - 1):
            if done[v] and _less(d1[v], d2[v], D1, D2):
                pi1[v] += d1[v]
                pi2[v] += d2[v]
            else:
                pi1[v] += D1
                pi2[v] += D2
        end = pred[sink]
        q = end
        steps = 0
        while pred[q] >= 0:  # q a node reached from line i = pred[q] - k, reached from node pred[i]
            w = pred[q]
            i = w - k
            j = pred[w]
            chosen[i, q] = True
            chosen[i, j] = False
            q = j
            steps += 1
            if steps > V:
                return 1
        cnt[q] -= 1
        cnt[end] += 1
        excess -= 1
    for j in range(k):
        if cnt[j] != need_node[j]:
            return 1
    return 0


@nb.njit(cache=True, nogil=True, inline="always")
def _snap(xv, atol):
    """(floor, fractional part) of ``xv >= 0``; parts within ``atol`` of 0 or 1 count as whole."""
    fl = np.floor(xv)
    f = xv - fl
    up = f >= 1.0 - atol
    fl = fl + 1.0 if up else fl
    f = 0.0 if (f <= atol) | up else f
    return fl, f


@_jit
def round_groups(X, w, col_int, row_int, cells, ptr, u, atol, out):
    """:func:`round_margins` on validated arrays (``out`` int64, like ``X``); returns the number of
    groups whose margins no rounding of ``X`` meets."""
    m = X.shape[0]
    G = ptr.shape[0] - 1
    bad = 0
    frac = np.empty(X.shape)
    for gi in range(G):
        lo = ptr[gi]
        hi = ptr[gi + 1]
        ng = hi - lo
        R = np.empty(m, np.int64)
        C = np.empty(ng, np.int64)
        for v in range(ng):
            C[v] = col_int[cells[lo + v]]
        cmax = 0.0
        for i in range(m):
            R[i] = row_int[i, gi]
            for v in range(ng):
                j = cells[lo + v]
                fl, f = _snap(X[i, j], atol)
                out[i, j] = np.int64(fl)
                frac[i, j] = f
                R[i] -= np.int64(fl)
                C[v] -= np.int64(fl)
                if f > 0.0:
                    cmax = max(cmax, abs(w[i, j] * (1.0 - 2.0 * f)))
        rows = np.empty(m, np.int64)
        nrow = 0
        for i in range(m):
            if R[i] != 0:
                rows[nrow] = i
                nrow += 1
        if nrow == 0:
            for v in range(ng):
                bad += C[v] != 0
            continue
        scale = _primary(nrow + ng) / cmax if cmax > 0.0 else 1.0
        if ng <= nrow:  # lines: children; exchange graph on the cells
            K1 = np.empty((nrow, ng), np.int64)
            K2 = np.empty((nrow, ng), np.int64)
            el = np.empty((nrow, ng), np.bool_)
            ch = np.empty((nrow, ng), np.bool_)
            nl = np.empty(nrow, np.int64)
            for t in range(nrow):
                i = rows[t]
                nl[t] = R[i]
                for v in range(ng):
                    j = cells[lo + v]
                    f = frac[i, j]
                    el[t, v] = f > 0.0
                    K1[t, v] = np.int64(np.rint(w[i, j] * (1.0 - 2.0 * f) * scale))
                    K2[t, v] = np.int64(u[i, j] * _SECONDARY)
            fail = _round_core(K1, K2, el, nl, C, ch) if ng <= _EXCHANGE else _round_flow(K1, K2, el, nl, C, ch)
            if fail:
                bad += 1
                continue
            for t in range(nrow):
                for v in range(ng):
                    out[rows[t], cells[lo + v]] += ch[t, v]
        else:  # lines: cells; exchange graph on the children
            K1 = np.empty((ng, nrow), np.int64)
            K2 = np.empty((ng, nrow), np.int64)
            el = np.empty((ng, nrow), np.bool_)
            ch = np.empty((ng, nrow), np.bool_)
            nn = np.empty(nrow, np.int64)
            for t in range(nrow):
                nn[t] = R[rows[t]]
            for v in range(ng):
                j = cells[lo + v]
                for t in range(nrow):
                    i = rows[t]
                    f = frac[i, j]
                    el[v, t] = f > 0.0
                    K1[v, t] = np.int64(np.rint(w[i, j] * (1.0 - 2.0 * f) * scale))
                    K2[v, t] = np.int64(u[i, j] * _SECONDARY)
            fail = _round_core(K1, K2, el, C, nn, ch) if nrow <= _EXCHANGE else _round_flow(K1, K2, el, C, nn, ch)
            if fail:
                bad += 1
                continue
            for v in range(ng):
                for t in range(nrow):
                    out[rows[t], cells[lo + v]] += ch[v, t]
    return bad


@_jit
def round_vector_kernel(x, w, target, u, atol, out):
    """:func:`round_vector` on validated arrays; returns 0, or 1 when ``target`` is out of reach."""
    n = x.shape[0]
    frac = np.empty(n)
    R = target
    ne = 0
    cmax = 0.0
    for i in range(n):
        fl, f = _snap(x[i], atol)
        out[i] = np.int64(fl)
        frac[i] = f
        R -= np.int64(fl)
        if f > 0.0:
            ne += 1
            cmax = max(cmax, abs(w[i] * (1.0 - 2.0 * f)))
    if R < 0 or R > ne:
        return 1
    if R == 0:
        return 0
    scale = _PRIMARY / cmax if cmax > 0.0 else 1.0
    pos = np.empty(ne, np.int64)
    K1 = np.empty(ne, np.int64)
    K2 = np.empty(ne, np.int64)
    t = 0
    for i in range(n):
        if frac[i] > 0.0:
            pos[t] = i
            K1[t] = np.int64(np.rint(w[i] * (1.0 - 2.0 * frac[i]) * scale))
            K2[t] = np.int64(u[i] * _SECONDARY)
            t += 1
    o2 = np.argsort(K2, kind="mergesort")  # by K1, then K2: two stable sorts
    K1o = np.empty(ne, np.int64)
    for t in range(ne):
        K1o[t] = K1[o2[t]]
    o1 = np.argsort(K1o, kind="mergesort")
    for t in range(R):
        out[pos[o2[o1[t]]]] += 1
    return 0


# ----------------------------------------------------------------------------------------------
# the public (private-module) functions: checks, then the kernels


def _groups(group: np.ndarray, n: int, G: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(cells ordered by group, CSR pointer, G) of ``group`` (n,) ints in [0, G)."""
    group = np.asarray(group)
    if group.shape != (n,) or not np.issubdtype(group.dtype, np.integer):
        raise ValueError(f"group must be an integer array of shape ({n},), one group per cell")
    if n and group.min() < 0:
        raise ValueError("group must hold group numbers >= 0")
    G = int(group.max()) + 1 if G is None else G
    if n and group.max() >= G:
        raise ValueError(f"group must hold group numbers below {G} (the columns of row)")
    cells = np.argsort(group, kind="stable").astype(np.int64)
    ptr = np.zeros(G + 1, np.int64)
    np.cumsum(np.bincount(group, minlength=G), out=ptr[1:])
    return cells, ptr, G


def _float2(name: str, a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, not {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return a


def _weights(w: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    w = _float2("w", w, shape)
    if w.size and not w.min() > 0.0:
        raise ValueError("w must be > 0 (weights are 1 / variance of the estimates)")
    return w


def _margin_sums(row: np.ndarray, col: np.ndarray, group: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """(row.sum(0), the column sums per group)."""
    return row.sum(axis=0), np.bincount(group, weights=col, minlength=G)


def project_margins(xhat: np.ndarray, w: np.ndarray, col: np.ndarray, row: np.ndarray,
                    group: np.ndarray) -> np.ndarray:
    """The non-negative children x cells table closest to ``xhat`` with both margins held.

    Parameters
    ----------
    xhat : ndarray, shape (m, n)
        Real estimates (may be negative or exceed the margins).
    w : ndarray, shape (m, n)
        Positive weights, 1 / variance of each estimate.
    col : ndarray, shape (n,)
        The parent's cells, >= 0: each column of the result sums to its cell.
    row : ndarray, shape (m, G)
        The children's held marginals, >= 0: ``X[i, group == g].sum() == row[i, g]``.
        ``row.sum(0)[g]`` must equal ``col[group == g].sum()`` within 1e-9 (relative).
    group : ndarray, shape (n,)
        The group of each cell, ints in ``[0, G)`` (G = 1: only each child's total is held).

    Returns
    -------
    ndarray, shape (m, n)
        The exact minimiser of ``sum w (X - xhat)**2`` subject to ``X >= 0`` and the margins.

    Raises
    ------
    ValueError
        On shapes, non-finite values, weights <= 0, negative margins or margins that disagree.
    RuntimeError
        If the solver did not converge (not seen in testing; please report it).
    """
    xhat = np.asarray(xhat, dtype=np.float64)
    if xhat.ndim != 2:
        raise ValueError(f"xhat must be a 2-D array (children x cells), not {xhat.ndim}-D")
    m, n = xhat.shape
    xhat = _float2("xhat", xhat, (m, n))
    w = _weights(w, (m, n))
    col = _float2("col", col, (n,))
    row = np.asarray(row, dtype=np.float64)
    if row.ndim != 2 or row.shape[0] != m:
        raise ValueError(f"row must have shape ({m}, G): one held marginal per child and group")
    row = _float2("row", row, row.shape)
    cells, ptr, G = _groups(group, n, row.shape[1])
    if (col.size and col.min() < 0) or (row.size and row.min() < 0):
        raise ValueError("col and row must be >= 0 (the held margins are non-negative)")
    rs, cs = _margin_sums(row, col, np.asarray(group), G)
    if np.any(np.abs(rs - cs) > 1e-9 * np.maximum(np.maximum(np.abs(rs), np.abs(cs)), 1e-300)):
        raise ValueError("row and col disagree: row.sum(0)[g] must equal col[group == g].sum() for every group")
    out = np.empty((m, n))
    failed = for_size(project_groups, m * n)(xhat, w, col, row, cells, ptr, out)
    if failed:
        raise RuntimeError(f"project_margins did not converge on {failed} group(s); please report it")
    return out


def round_margins(X: np.ndarray, w: np.ndarray, col_int: np.ndarray, row_int: np.ndarray, group: np.ndarray,
                  u: np.ndarray, *, atol: float = 1e-7) -> np.ndarray:
    """Controlled rounding of a children x cells table with both integer margins held.

    Parameters
    ----------
    X : ndarray, shape (m, n)
        The real table, >= 0, whose margins are ``col_int`` and ``row_int``.
    w : ndarray, shape (m, n)
        Positive weights of the weighted distance ``sum w (Z - X)**2``.
    col_int : ndarray, shape (n,)
        Integer column sums.
    row_int : ndarray, shape (m, G)
        Integer held marginals of the children, per group of cells.
    group : ndarray, shape (n,)
        The group of each cell, ints in ``[0, G)``.
    u : ndarray, shape (m, n)
        Uniform values in [0, 1) that break ties (derived by the caller from the release key).
    atol : float
        Values within ``atol`` of an integer count as that integer.

    Returns
    -------
    ndarray of int64, shape (m, n)
        Every ``Z_ij`` in ``{floor(X_ij), ceil(X_ij)}``, every margin exact, the weighted
        distance minimal; among equal distances, the smallest sum of ``u`` over the cells rounded up.

    Raises
    ------
    ValueError
        On shapes, non-finite or negative values, or margins that no rounding of ``X`` meets.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array (children x cells), not {X.ndim}-D")
    m, n = X.shape
    X = _float2("X", X, (m, n))
    if X.size and X.min() < -atol:
        raise ValueError("X must be >= 0 (round the non-negative table)")
    if X.size and X.max() >= 2.0**52:
        raise ValueError("X must be below 2**52 (float64 holds every integer only below it)")
    X = np.maximum(X, 0.0)
    w = _weights(w, (m, n))
    u = _float2("u", u, (m, n))
    if u.size and not (u.min() >= 0.0 and u.max() < 1.0):
        raise ValueError("u must lie in [0, 1)")
    col_int = np.ascontiguousarray(col_int)
    row_int = np.ascontiguousarray(row_int)
    for name, a in (("col_int", col_int), ("row_int", row_int)):
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name} must hold integers")
    col_int = col_int.astype(np.int64)
    row_int = row_int.astype(np.int64)
    if col_int.shape != (n,):
        raise ValueError(f"col_int must have shape ({n},)")
    if row_int.ndim != 2 or row_int.shape[0] != m:
        raise ValueError(f"row_int must have shape ({m}, G)")
    cells, ptr, G = _groups(group, n, row_int.shape[1])
    held = np.stack([np.bincount(np.asarray(group), weights=X[i], minlength=G) for i in range(m)]) if m else row_int
    for name, real, want in (("col_int", X.sum(axis=0), col_int), ("row_int", held, row_int)):
        if np.any(np.abs(real - want) > 1e-6 * np.maximum(1.0, np.abs(want))):
            raise ValueError(f"{name} must be the margins of X (X's own sums, integers)")
    out = np.empty((m, n), np.int64)
    bad = for_size(round_groups, m * n)(X, w, col_int, row_int, cells, ptr, u, float(atol), out)
    if bad:
        raise ValueError(f"no rounding of X meets the margins in {bad} group(s): col_int and row_int must be "
                         "the margins of X")
    return out


def round_vector(x: np.ndarray, w: np.ndarray, target: int, u: np.ndarray, *, atol: float = 1e-7) -> np.ndarray:
    """Integers within 1 of ``x`` summing to ``target``, at minimal weighted distance.

    Parameters
    ----------
    x : ndarray, shape (n,)
        Real values >= 0 (a child's totals under the parent's total).
    w : ndarray, shape (n,)
        Positive weights of ``sum w (z - x)**2``.
    target : int
        The sum of the result.
    u : ndarray, shape (n,)
        Uniform values in [0, 1) that break ties.
    atol : float
        Values within ``atol`` of an integer count as that integer.

    Returns
    -------
    ndarray of int64, shape (n,)

    Raises
    ------
    ValueError
        On shapes, non-finite or negative values, or a target that no rounding of ``x`` reaches.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"x must be a 1-D array, not {x.ndim}-D")
    n = x.shape[0]
    x = _float2("x", x, (n,))
    if n and x.min() < -atol:
        raise ValueError("x must be >= 0")
    if n and x.max() >= 2.0**52:
        raise ValueError("x must be below 2**52 (float64 holds every integer only below it)")
    x = np.maximum(x, 0.0)
    w = _weights(w, (n,))
    u = _float2("u", u, (n,))
    if n and not (u.min() >= 0.0 and u.max() < 1.0):
        raise ValueError("u must lie in [0, 1)")
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
        raise ValueError("target must be an integer")
    out = np.empty(n, np.int64)
    if for_size(round_vector_kernel, n)(x, w, np.int64(target), u, float(atol), out):
        raise ValueError("target is out of reach: it must lie between the sums of the floors and the ceilings of x")
    return out
