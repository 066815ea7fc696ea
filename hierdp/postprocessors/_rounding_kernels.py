"""Compiled top-down controlled rounding, used by :mod:`hierdp.postprocessors.rounding`.
"""

from __future__ import annotations

import numpy as np

from hierdp._jit import numba as nb

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


@nb.njit(cache=True, nogil=True, inline="always")
def _floor_frac(xv, atol):
    """(floor, fractional part) of max(xv, 0); parts within ``atol`` of 0 or 1 count as
    whole numbers (fraction 0)."""
    if xv < 0.0:
        xv = 0.0
    fl = np.floor(xv)
    f = xv - fl
    if f <= atol:
        f = 0.0
    elif f >= 1.0 - atol:
        fl += 1.0
        f = 0.0
    return np.int64(fl), f


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
        need = -D
        while need > 0:
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
    for c in range(k):
        x0 = x[0, c]
        if x0 < 0.0:
            x0 = 0.0
        out[0, c] = np.int64(np.floor(x0 + 0.5))
    round_parents(child_ptr, child_idx, x, out, atol, 0, n)
    return out


@_jit
def round_parents(child_ptr, child_idx, x, out, atol, lo, hi):
    """The children of parents [lo, hi) of :func:`round_top_down_2d` (each parent's own
    value ``out[i]`` already final). Parents of one height class are independent: a
    piece of a class per thread (hierdp/_tree_pieces.py), the same integers whatever the cut."""
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
    for i in range(lo, hi):
        a0 = child_ptr[i]
        nc = child_ptr[i + 1] - a0
        if nc == 0:
            continue
        for c in range(k):
            tot = 0
            nfrac = 0
            for t in range(nc):
                b, f = _floor_frac(x[child_idx[a0 + t], c], atol)
                base[t] = b
                frac[t] = f
                tot += b
                nfrac += f > 0.0
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


@_jit
def round_parents_1d(child_ptr, x, out, atol, lo, hi):
    """:func:`round_parents` for one histogram on a tree whose children are numbered
    consecutively (``child_idx == arange(1, n)``, as in hierdp's own order): node i's
    children are ``child_ptr[i] + 1 ..`` and the values are 1-D. The same integers."""
    maxc = 0
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc > maxc:
            maxc = nc
    frac = np.empty(maxc)
    base = np.empty(maxc, np.int64)
    counts = np.zeros(1025, np.int64)
    members = np.empty(maxc, np.int64)
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        a0 = child_ptr[i] + 1
        nc = child_ptr[i + 1] - child_ptr[i]
        if nc == 0:
            continue
        tot = 0
        nfrac = 0
        for t in range(nc):
            b, f = _floor_frac(x[a0 + t], atol)
            base[t] = b
            frac[t] = f
            tot += b
            nfrac += f > 0.0
        D = out[i] - tot
        if 0 <= D <= nfrac:
            if nc <= 16:
                _round_up_largest_small(frac, base, nc, D)
            elif D > 0:
                _round_up_largest(frac, base, nc, D, counts, members)
        else:
            _round_inconsistent(frac, base, nc, D, nfrac)
        for t in range(nc):
            out[a0 + t] = base[t]
