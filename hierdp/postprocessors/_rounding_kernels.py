"""Compiled top-down controlled rounding, used by :mod:`hierdp.postprocessors.rounding`.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb

_jit = nb.njit(cache=True, nogil=True)


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


#: values from here up in magnitude are refused (float64 holds every integer only below it)
EXACT_MAX = 2.0**53


@nb.njit(cache=True, nogil=True, inline="always")
def _floor_frac(xv, atol):
    """(floor, fractional part) of max(xv, 0); parts within ``atol`` of 0 or 1 count as
    whole numbers (fraction 0). For values below 2**53: the kernels look for unfit ones
    (:func:`_unfit`) before they use a fraction to index anything."""
    xv = xv if xv > 0.0 else 0.0
    fl = np.floor(xv)
    f = xv - fl
    up = f >= 1.0 - atol
    fl = fl + 1.0 if up else fl
    f = 0.0 if (f <= atol) | up else f
    return fl, f


@nb.njit(cache=True, nogil=True, inline="always")
def _unfit(xv):
    """1 when xv is NaN, infinite or >= 2**53 in magnitude (not a count round works on)."""
    return not (abs(xv) < EXACT_MAX)


@_jit
def _round_inconsistent(frac, base, nc, D, nfrac):
    """Inconsistent input (D outside [0, #fractional children]): a surplus makes every
    fractional child go up and is spread evenly; a deficit takes one unit from each
    positive child in turn, never going below 0."""
    if D > 0:
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
        # as many whole rounds as fit (a round takes one unit from every positive child;
        # r rounds take sum_t min(base_t, r)), found by bisection, then one partial round
        # in child order: O(nc log max(base)) whatever the deficit (a unit at a time was
        # O(deficit): hours for a parent of 0 over children of 1e9)
        need = -D
        top = 0
        total = 0
        for t in range(nc):
            total += base[t]
            top = max(top, base[t])
        if need >= total:
            for t in range(nc):
                base[t] = 0
            return
        lo = 0      # sum_t min(base_t, lo) <= need < sum_t min(base_t, hi)
        hi = top
        while hi - lo > 1:
            mid = (lo + hi) // 2
            taken = 0
            for t in range(nc):
                taken += min(base[t], mid)
            if taken <= need:
                lo = mid
            else:
                hi = mid
        for t in range(nc):
            take = min(base[t], lo)
            base[t] -= take
            need -= take
        for t in range(nc):
            if need == 0:
                break
            if base[t] > 0:
                base[t] -= 1
                need -= 1


@_jit
def round_top_down_2d(child_ptr, child_idx, x, out, atol):
    """Top-down controlled rounding to consistent non-negative integers (into ``out``).

    Root: nearest integer of max(x, 0). For a node with integer target R and children
    with values x_c >= 0 (negatives count as 0): every child gets floor(x_c) and the
    D = R - sum floor(x_c) remaining units go, one each, to the children with the largest
    fractional parts (ties: the first child first; O(#children)). When the input is
    consistent 0 <= D <= #fractional children, so every child stays strictly within 1 of
    its input and already integral children keep their value. Otherwise (inconsistent
    input) the surplus or deficit is spread as evenly as possible without going below 0.
    Values within ``atol`` of an integer are treated as that integer.

    Returns the number of values that are NaN, infinite or >= 2**53 in magnitude (the
    caller refuses the result unless 0).
    """
    n, k = x.shape
    bad = 0
    for c in range(k):
        x0 = x[0, c]
        bad += _unfit(x0)
        x0 = x0 if x0 > 0.0 else 0.0
        out[0, c] = np.int64(np.floor(x0 + 0.5)) if x0 < EXACT_MAX else 0
    if bad:
        return bad
    return round_parents(child_ptr, child_idx, x, out, atol, 0, n)


@_jit
def round_parents(child_ptr, child_idx, x, out, atol, lo, hi):
    """The children of parents [lo, hi) of :func:`round_top_down_2d` (each parent's own
    value ``out[i]`` already final); returns the count of unfit values among them.
    Parents of one height class are independent: a piece of a class per thread
    (hierdp/_kernels/tree_pieces.py), the same integers whatever the cut."""
    k = x.shape[1]
    maxc = 0
    for i in range(lo, hi):
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc > maxc:
            maxc = nc
    frac = np.empty(maxc)
    base = np.empty(maxc, np.int64)
    counts = np.zeros(1025, np.int64)
    members = np.empty(maxc, np.int64)
    bad = 0
    for i in range(lo, hi):
        a0 = child_ptr[i]
        nc = child_ptr[i + 1] - a0
        if nc == 0:
            continue
        for c in range(k):
            tot = 0
            nfrac = 0
            for t in range(nc):
                xv = x[child_idx[a0 + t], c]
                bad += _unfit(xv)
                fl, f = _floor_frac(xv, atol)
                base[t] = np.int64(fl)
                frac[t] = f
                tot += base[t]
                nfrac += f > 0.0
            if bad:  # refused by the caller: no more work
                return bad
            D = out[i, c] - tot
            if 0 <= D <= nfrac:  # always, for consistent input: one predictable branch
                if nc <= 16:
                    _round_up_largest_small(frac, base, nc, D)
                elif D > 0:
                    _round_up_largest(frac, base, nc, D, counts, members)
            else:
                _round_inconsistent(frac, base, nc, D, nfrac)
            for t in range(nc):
                out[child_idx[a0 + t], c] = base[t]
    return bad


@_jit
def round_parents_1d(child_ptr, x, out, atol, lo, hi):
    """:func:`round_parents` for one histogram on a tree whose children are numbered
    consecutively (``child_idx == arange(1, n)``, as in hierdp's own order): node i's
    children are ``child_ptr[i] + 1 ..`` and the values are 1-D. The same integers.

    Written for speed (measured on binary, random fan-out 2-5 and census-like trees):
    parents of 1-5 children run straight-line code, one block per fan-out, their values
    in registers: child t goes up when its fraction is positive and fewer than D
    children rank before it (a larger fraction, or an equal one and earlier). (A loop
    over a scratch array was 30% slower on the random tree, and 2.5x on the binary one:
    the scratch is reloaded after every store to ``out``.) Larger parents write the floors in one
    vectorised pass, the fractions in a second, count them into ``B ~ #children``
    buckets and scan from the top for the bucket holding the D-th largest; when that
    whole bucket goes up one more vectorised pass finishes, else its few members are
    ranked. Indices are uint64 (no wraparound test per access).
    """
    U = nb.uint64
    maxc = 5
    for i in range(U(lo), U(hi)):
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc > maxc:
            maxc = nc
    bad = 0
    for t in range(U(child_ptr[lo] + 1), U(child_ptr[hi] + 1)):  # every child of the range, vectorised
        bad += _unfit(x[t])
    if bad:
        return bad
    frac = np.empty(maxc)
    base = np.empty(maxc, np.int64)
    bucket = np.empty(maxc, np.int64)
    counts = np.empty(1025, np.int64)
    members = np.empty(maxc, np.int64)
    for i in range(U(lo), U(hi)):
        a0 = U(child_ptr[i] + 1)
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc == 0:
            continue
        R = out[i]
        if nc <= 5:  # written out per fan-out: in registers, no loop (see the docstring)
            if nc == 2:
                fl0, f0 = _floor_frac(x[a0], atol)
                fl1, f1 = _floor_frac(x[a0 + U(1)], atol)
                D = R - (np.int64(fl0) + np.int64(fl1))
                done = 0 <= D <= (f0 > 0.0) + (f1 > 0.0)
                if done:
                    r0 = f1 > f0
                    r1 = f0 >= f1
                    out[a0] = np.int64(fl0) + ((f0 > 0.0) & (r0 < D))
                    out[a0 + U(1)] = np.int64(fl1) + ((f1 > 0.0) & (r1 < D))
            elif nc == 3:
                fl0, f0 = _floor_frac(x[a0], atol)
                fl1, f1 = _floor_frac(x[a0 + U(1)], atol)
                fl2, f2 = _floor_frac(x[a0 + U(2)], atol)
                D = R - (np.int64(fl0) + np.int64(fl1) + np.int64(fl2))
                done = 0 <= D <= (f0 > 0.0) + (f1 > 0.0) + (f2 > 0.0)
                if done:
                    r0 = (f1 > f0) + (f2 > f0)
                    r1 = (f0 >= f1) + (f2 > f1)
                    r2 = (f0 >= f2) + (f1 >= f2)
                    out[a0] = np.int64(fl0) + ((f0 > 0.0) & (r0 < D))
                    out[a0 + U(1)] = np.int64(fl1) + ((f1 > 0.0) & (r1 < D))
                    out[a0 + U(2)] = np.int64(fl2) + ((f2 > 0.0) & (r2 < D))
            elif nc == 4:
                fl0, f0 = _floor_frac(x[a0], atol)
                fl1, f1 = _floor_frac(x[a0 + U(1)], atol)
                fl2, f2 = _floor_frac(x[a0 + U(2)], atol)
                fl3, f3 = _floor_frac(x[a0 + U(3)], atol)
                D = R - (np.int64(fl0) + np.int64(fl1) + np.int64(fl2) + np.int64(fl3))
                done = 0 <= D <= (f0 > 0.0) + (f1 > 0.0) + (f2 > 0.0) + (f3 > 0.0)
                if done:
                    r0 = (f1 > f0) + (f2 > f0) + (f3 > f0)
                    r1 = (f0 >= f1) + (f2 > f1) + (f3 > f1)
                    r2 = (f0 >= f2) + (f1 >= f2) + (f3 > f2)
                    r3 = (f0 >= f3) + (f1 >= f3) + (f2 >= f3)
                    out[a0] = np.int64(fl0) + ((f0 > 0.0) & (r0 < D))
                    out[a0 + U(1)] = np.int64(fl1) + ((f1 > 0.0) & (r1 < D))
                    out[a0 + U(2)] = np.int64(fl2) + ((f2 > 0.0) & (r2 < D))
                    out[a0 + U(3)] = np.int64(fl3) + ((f3 > 0.0) & (r3 < D))
            elif nc == 5:
                fl0, f0 = _floor_frac(x[a0], atol)
                fl1, f1 = _floor_frac(x[a0 + U(1)], atol)
                fl2, f2 = _floor_frac(x[a0 + U(2)], atol)
                fl3, f3 = _floor_frac(x[a0 + U(3)], atol)
                fl4, f4 = _floor_frac(x[a0 + U(4)], atol)
                D = R - (np.int64(fl0) + np.int64(fl1) + np.int64(fl2) + np.int64(fl3) + np.int64(fl4))
                done = 0 <= D <= (f0 > 0.0) + (f1 > 0.0) + (f2 > 0.0) + (f3 > 0.0) + (f4 > 0.0)
                if done:
                    r0 = (f1 > f0) + (f2 > f0) + (f3 > f0) + (f4 > f0)
                    r1 = (f0 >= f1) + (f2 > f1) + (f3 > f1) + (f4 > f1)
                    r2 = (f0 >= f2) + (f1 >= f2) + (f3 > f2) + (f4 > f2)
                    r3 = (f0 >= f3) + (f1 >= f3) + (f2 >= f3) + (f4 > f3)
                    r4 = (f0 >= f4) + (f1 >= f4) + (f2 >= f4) + (f3 >= f4)
                    out[a0] = np.int64(fl0) + ((f0 > 0.0) & (r0 < D))
                    out[a0 + U(1)] = np.int64(fl1) + ((f1 > 0.0) & (r1 < D))
                    out[a0 + U(2)] = np.int64(fl2) + ((f2 > 0.0) & (r2 < D))
                    out[a0 + U(3)] = np.int64(fl3) + ((f3 > 0.0) & (r3 < D))
                    out[a0 + U(4)] = np.int64(fl4) + ((f4 > 0.0) & (r4 < D))
            else:
                fl0, f0 = _floor_frac(x[a0], atol)
                D = R - np.int64(fl0)
                done = 0 <= D <= (f0 > 0.0)
                if done:
                    out[a0] = np.int64(fl0) + ((f0 > 0.0) & (D > 0))
            if done:
                continue
        ncu = U(nc)
        tot = 0
        nfrac = 0
        for t in range(ncu):  # the floors (vectorised; the fractions' store would stop that)
            fl, f = _floor_frac(x[a0 + t], atol)
            out[a0 + t] = np.int64(fl)
            tot += np.int64(fl)
            nfrac += f > 0.0
        for t in range(ncu):
            fl, f = _floor_frac(x[a0 + t], atol)
            frac[t] = f
        D = R - tot
        if D <= 0 or D >= nfrac:  # nothing, every fraction, or inconsistent input
            if D == nfrac:
                for t in range(ncu):
                    out[a0 + t] += frac[t] > 0.0
            elif D != 0:
                for t in range(ncu):
                    base[t] = out[a0 + t]
                _round_inconsistent(frac, base, nc, D, nfrac)
                for t in range(ncu):
                    out[a0 + t] = base[t]
            continue
        if nc <= 16:
            for t in range(ncu):
                ft = frac[t]
                rank = 0
                for q in range(ncu):
                    fq = frac[q]
                    rank += (fq > ft) | ((fq == ft) & (q < t))
                out[a0 + t] += (ft > 0.0) & (rank < D)
            continue
        # bucket b < B holds the fractions in [b / B, (b + 1) / B); bucket B the zeros
        B = nc if nc < 1024 else 1024
        fB = float(B)
        for b in range(U(B + 1)):
            counts[b] = 0
        for t in range(ncu):
            f = frac[t]
            q = min(np.int64(f * fB), B - 1)
            bucket[t] = q if f > 0.0 else B
        for t in range(ncu):
            counts[bucket[t]] += 1
        above = 0
        bb = B - 1
        while above + counts[bb] < D:  # stops at the bucket of the D-th largest (D <= #fractions)
            above += counts[bb]
            bb -= 1
        need = D - above  # members of bucket bb that go up (1 <= need <= counts[bb])
        if need == counts[bb]:
            for t in range(ncu):
                q = bucket[t]
                out[a0 + t] += (q >= bb) & (q < B)
            continue
        m = 0
        for t in range(ncu):
            q = bucket[t]
            out[a0 + t] += (q > bb) & (q < B)
            members[m] = t
            m += q == bb
        if m > 32:  # many ties or clustered fractions: a stable sort of the boundary bucket
            fm = np.empty(m)
            for a in range(m):
                fm[a] = -frac[members[a]]
            order = np.argsort(fm, kind="mergesort")
            for a in range(need):
                out[a0 + U(members[order[a]])] += 1
            continue
        for a in range(U(m)):
            t = members[a]
            ft = frac[t]
            rank = 0
            for qq in range(U(m)):
                u = members[qq]
                fq = frac[u]
                rank += (fq > ft) | ((fq == ft) & (u < t))
            out[a0 + U(t)] += rank < need
    return 0
