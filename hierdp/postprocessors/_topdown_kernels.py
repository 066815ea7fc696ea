"""Compiled per-parent steps of the top-down ``nonneg`` and ``round`` modes
(:mod:`hierdp.postprocessors.topdown`): the weighted projection of a parent's children
onto ``{x >= 0, sum x = s}`` and its integer counterpart.

The kernels take one range of parents ``[lo, hi)`` whose own values are final and write
their children: parents of one height class are independent, so a class runs in pieces
on several threads and gives the same numbers whatever the cut.
"""

from __future__ import annotations

import heapq

import numpy as np

from hierdp._kernels.jit import numba as nb

_jit = nb.njit(cache=True, nogil=True)

#: an infinite variance (a node BLUE cannot identify) is replaced by this number: the
#: projection's limit as that variance grows is reached to float64 precision (such
#: children take every adjustment first, their weight is 0), and no inf - inf arises
BIG_VAR = 1e150


@_jit
def project_group(a, v, m, s, x, t, order):
    """The weighted projection onto the simplex of mass ``s``, exactly, O(m log m).

    Minimise ``sum_j (x_j - a_j)^2 / v_j`` subject to ``x >= 0``, ``sum_j x_j = s``
    (``a``, ``v``: the first ``m`` entries; ``v_j = 0``: ``x_j = max(a_j, 0)`` is held, it
    is a known value). KKT: ``x_j = max(0, a_j - mu v_j)`` with one multiplier ``mu``
    (the constraint ``sum x = s``); ``f(mu) = sum_j v_j max(0, t_j - mu)``, ``t_j = a_j / v_j``,
    is continuous, piecewise linear and strictly decreasing where positive, so the root
    of ``f(mu) = s`` lies between two consecutive breakpoints ``t``: sorted in decreasing
    order, the first ``r`` whose ``mu_r = (sum_{i<=r} a_i - s) / sum_{i<=r} v_i`` is
    ``>= t_{r+1}`` gives it (the projection onto the simplex of Held, Wolfe & Crowder 1974
    and Michelot 1986, with weights). Writes ``x``; returns ``(mu, residual)`` where
    ``residual`` is ``s`` minus the mass placed (0 unless the known values exceed ``s``
    or no child has a positive variance). ``t`` and ``order``: workspace of size >= m;
    an infinite ``v_j`` is replaced in place by :data:`BIG_VAR`.
    """
    rest = s
    nf = 0
    for j in range(m):
        if v[j] > BIG_VAR:  # inf: its limit (in place)
            v[j] = BIG_VAR
        if v[j] > 0.0:
            t[nf] = -a[j] / v[j]  # ascending order of -t = descending t
            order[nf] = j
            nf += 1
        else:
            xj = a[j] if a[j] > 0.0 else 0.0
            x[j] = xj
            rest -= xj
    if nf == 0:
        return 0.0, rest
    if rest <= 0.0:
        for q in range(nf):
            x[order[q]] = 0.0
        return np.inf, rest
    if nf <= 32:  # a stable insertion sort of (t, order) in place: no allocation for small groups
        for r in range(1, nf):
            tr = t[r]
            jr = order[r]
            q = r - 1
            while q >= 0 and t[q] > tr:
                t[q + 1] = t[q]
                order[q + 1] = order[q]
                q -= 1
            t[q + 1] = tr
            order[q + 1] = jr
    else:
        srt = np.argsort(t[:nf], kind="mergesort")
        sj = order[:nf][srt]
        order[:nf] = sj
    A = 0.0
    V = 0.0
    mu = 0.0
    for r in range(nf):
        j = order[r]
        A += a[j]
        V += v[j]
        mu = (A - rest) / V
        if r + 1 == nf:
            break
        jn = order[r + 1]
        if mu >= a[jn] / v[jn]:
            break
    placed = 0.0
    for q in range(nf):
        j = order[q]
        xj = a[j] - mu * v[j]
        xj = xj if xj > 0.0 else 0.0
        x[j] = xj
        placed += xj
    return mu, rest - placed


@_jit
def lower_bounds(parent, exact, xhat, low):
    """``low[v]``: the mass that must lie under v, per cell: v's own value when v is known
    exactly (variance 0), else the sum of its children's bounds (0 at a free leaf). One
    pass bottom-up (children have larger indices than their parent, internal order)."""
    n, k = xhat.shape
    ke = exact.shape[1]
    for i in range(n):
        for c in range(k):
            low[i, c] = 0.0
    for i in range(n - 1, -1, -1):
        for c in range(k):
            if exact[i, c if ke > 1 else 0]:
                xv = xhat[i, c]
                low[i, c] = xv if xv > 0.0 else 0.0
            p = parent[i]
            if p >= 0:
                low[p, c] += low[i, c]


@_jit
def project_parents(child_ptr, child_idx, xhat, var, low, x, lo, hi):
    """Children of parents ``[lo, hi)``: ``x[children, c]`` = the projection of their
    ``xhat`` onto ``{x_j >= low_j, sum x_j = x[parent, c]}`` weighted by ``1 / var``
    (:func:`project_group` after shifting by the lower bounds). ``var`` has one column
    (shared by the cells) or k. Returns the largest ``|residual|`` (0 for a feasible input).
    ``low`` of another shape than ``xhat`` (e.g. ``(1, 1)``): every bound is 0."""
    k = xhat.shape[1]
    kv = var.shape[1]
    has_low = low.shape[0] == xhat.shape[0] and low.shape[1] == k
    maxc = 0
    for i in range(lo, hi):
        nc = child_ptr[i + 1] - child_ptr[i]
        maxc = nc if nc > maxc else maxc
    a = np.empty(maxc)
    v = np.empty(maxc)
    xs = np.empty(maxc)
    t = np.empty(maxc)
    order = np.empty(maxc, np.int64)
    worst = 0.0
    for i in range(lo, hi):
        b, e = child_ptr[i], child_ptr[i + 1]
        m = e - b
        if m == 0:
            continue
        for c in range(k):
            s = x[i, c]
            for q in range(m):
                j = child_idx[b + q]
                v[q] = var[j, c if kv > 1 else 0]
                lj = low[j, c] if has_low else 0.0
                a[q] = xhat[j, c] - lj
                s -= lj
            mu, res = project_group(a, v, m, s, xs, t, order)
            for q in range(m):
                j = child_idx[b + q]
                x[j, c] = (low[j, c] if has_low else 0.0) + xs[q]
            res = abs(res)
            worst = res if res > worst else worst
    return worst


#: groups of at most this many children pick their |D| units by a scan of the children's
#: next-unit costs (:func:`_units_by_scan`) instead of a heap: no list allocated per group
SCAN_MAX = 24


@_jit
def _units_by_scan(a, v, m, z, D, c):
    """The heap step of :func:`integer_group` for a small group, with the same units in the
    same order: each step takes the child of least key ``(cost, j)`` — the key the heap
    orders by, a unique one per child (j breaks ties), so the heap's pop is this minimum —
    ``D > 0``: the unit cost ``(2 (z_j - a_j) + 1) / v_j`` over children with ``v_j > 0``,
    adding a unit; ``D < 0``: the negated cost ``-(2 (z_j - a_j) - 1) / v_j`` over those
    with ``z_j > 0``, removing one. ``c``: workspace of size >= m (the keys; each key is
    recomputed only for the child that moved, by the heap's expression)."""
    if D > 0:
        for j in range(m):
            if v[j] > 0.0:
                c[j] = (2.0 * (z[j] - a[j]) + 1.0) / v[j]
        for _ in range(D):
            jb = -1
            for j in range(m):
                if v[j] > 0.0 and (jb < 0 or c[j] < c[jb]):
                    jb = j
            z[jb] += 1
            c[jb] = (2.0 * (z[jb] - a[jb]) + 1.0) / v[jb]
    else:
        for j in range(m):
            if v[j] > 0.0 and z[j] > 0:
                c[j] = -(2.0 * (z[j] - a[j]) - 1.0) / v[j]
        for _ in range(-D):
            jb = -1
            for j in range(m):
                if v[j] > 0.0 and z[j] > 0 and (jb < 0 or c[j] < c[jb]):
                    jb = j
            z[jb] -= 1
            if z[jb] > 0:
                c[jb] = -(2.0 * (z[jb] - a[jb]) - 1.0) / v[jb]


@_jit
def integer_group(a, v, m, S, z, xs, t, order):
    """The integers closest to ``a`` in the norm ``sum_j (z_j - a_j)^2 / v_j`` with
    ``z >= 0`` and ``sum_j z_j = S``, exactly (``v_j = 0``: ``z_j = max(rint(a_j), 0)`` held).

    Why it is exact. Write ``f_j(z) = (z - a_j)^2 / v_j``; the objective is
    ``sum_j f_j(0) + sum_j sum_{u < z_j} c_j(u)`` with the *unit costs*
    ``c_j(u) = f_j(u + 1) - f_j(u) = (2 (u - a_j) + 1) / v_j``, increasing in u
    (convexity). Any z with ``sum z = S`` chooses S units, a prefix of each child's; the S
    cheapest units of all children form prefixes (costs increase along each child), so
    choosing them is optimal (Gross 1956; Ibaraki & Katoh 1988, resource allocation with a
    separable convex objective), and a z is optimal iff no exchange of one unit lowers
    the cost: ``min_j c_j(z_j) >= max_{j: z_j > 0} c_j(z_j - 1)``.

    Steps: the continuous projection (:func:`project_group`) gives the multiplier mu; the
    units of cost ``<= -2 mu`` are ``z_j = max(0, floor(a_j - mu v_j + 1/2))`` per child —
    a set of cheapest units, optimal for its own sum; then the ``|S - sum z|`` cheapest
    units are added (or the dearest removed) one at a time from a heap (a set of cheapest
    units stays one), O((m + |D|) log m) with ``|D| <= m / 2 + 1``; a last check of the
    exchange condition moves a unit while that lowers the cost (float round-off near a
    tie only). Ties go to the lowest child index. With equal variances this is the
    largest-remainder rule. Returns the units that could not be placed (0 unless the
    known values exceed S or no child has a positive variance).
    """
    rest = S
    nf = 0
    for j in range(m):
        if v[j] > BIG_VAR:  # inf: its limit (in place)
            v[j] = BIG_VAR
        if v[j] > 0.0:
            nf += 1
        else:
            zj = np.rint(a[j])
            zj = zj if zj > 0.0 else 0.0
            z[j] = np.int64(zj)
            rest -= z[j]
    if nf == 0:
        return rest
    if rest <= 0:
        for j in range(m):
            if v[j] > 0.0:
                z[j] = 0
        return rest
    mu, _ = project_group(a, v, m, float(rest), xs, t, order)
    tot = 0
    for j in range(m):
        if v[j] > 0.0:
            zj = np.floor(a[j] - mu * v[j] + 0.5)
            zj = zj if zj > 0.0 else 0.0
            z[j] = np.int64(zj)
            tot += z[j]
    D = rest - tot
    if D != 0 and m <= SCAN_MAX:
        _units_by_scan(a, v, m, z, D, xs)
    elif D > 0:  # add the D cheapest units
        h = [(0.0, np.int64(0))]
        h.pop()
        for j in range(m):
            if v[j] > 0.0:
                h.append(((2.0 * (z[j] - a[j]) + 1.0) / v[j], np.int64(j)))
        heapq.heapify(h)
        for _ in range(D):
            cst, j = heapq.heappop(h)
            z[j] += 1
            heapq.heappush(h, ((2.0 * (z[j] - a[j]) + 1.0) / v[j], j))
    elif D < 0:  # remove the -D dearest units (a max-heap by negated cost)
        h = [(0.0, np.int64(0))]
        h.pop()
        for j in range(m):
            if v[j] > 0.0 and z[j] > 0:
                h.append((-(2.0 * (z[j] - a[j]) - 1.0) / v[j], np.int64(j)))
        heapq.heapify(h)
        for _ in range(-D):
            cst, j = heapq.heappop(h)
            z[j] -= 1
            if z[j] > 0:
                heapq.heappush(h, (-(2.0 * (z[j] - a[j]) - 1.0) / v[j], j))
    for _ in range(m):  # the exchange condition (guards round-off in mu near a tie)
        ja = -1
        jr = -1
        ca = np.inf
        cr = -np.inf
        for j in range(m):
            if v[j] > 0.0:
                cj = (2.0 * (z[j] - a[j]) + 1.0) / v[j]
                if cj < ca:
                    ca = cj
                    ja = j
                if z[j] > 0:
                    rj = (2.0 * (z[j] - a[j]) - 1.0) / v[j]
                    if rj > cr:
                        cr = rj
                        jr = j
        if ja < 0 or jr < 0 or ja == jr or not cr - ca > 1e-12 * (abs(ca) + abs(cr)):
            break
        z[ja] += 1
        z[jr] -= 1
    return 0


@_jit
def integer_parents(child_ptr, child_idx, y, var, lowi, out, lo, hi):
    """Children of parents ``[lo, hi)``: ``out[children, c]`` = the integers closest to
    their ``y`` with ``out_j >= lowi_j`` summing to ``out[parent, c]``, weighted by
    ``1 / var`` (:func:`integer_group` after shifting by the integer lower bounds).
    Returns ``(units not placed, values unfit)``: values NaN, infinite or from 2**53 up
    in magnitude are unfit (counted, and the caller refuses the input). ``lowi`` of
    another shape than ``y`` (e.g. ``(1, 1)``): every lower bound is 0 (no node known
    exactly), without an array of zeros to read."""
    k = y.shape[1]
    kv = var.shape[1]
    has_low = lowi.shape[0] == y.shape[0] and lowi.shape[1] == k
    maxc = 0
    for i in range(lo, hi):
        nc = child_ptr[i + 1] - child_ptr[i]
        maxc = nc if nc > maxc else maxc
    a = np.empty(maxc)
    v = np.empty(maxc)
    xs = np.empty(maxc)
    t = np.empty(maxc)
    order = np.empty(maxc, np.int64)
    z = np.empty(maxc, np.int64)
    missed = 0
    bad = 0
    for i in range(lo, hi):
        b, e = child_ptr[i], child_ptr[i + 1]
        m = e - b
        if m == 0:
            continue
        for c in range(k):
            S = out[i, c]
            for q in range(m):
                j = child_idx[b + q]
                yj = y[j, c]
                if not abs(yj) < 2.0**53:
                    bad += 1
                    yj = 0.0
                v[q] = var[j, c if kv > 1 else 0]
                lj = lowi[j, c] if has_low else 0
                a[q] = yj - lj
                S -= lj
            if bad:
                return missed, bad
            missed += abs(integer_group(a, v, m, S, z, xs, t, order))
            for q in range(m):
                j = child_idx[b + q]
                out[j, c] = (lowi[j, c] if has_low else 0) + z[q]
    return missed, bad
