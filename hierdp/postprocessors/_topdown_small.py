"""Top-down ``nonneg`` and ``round`` for small trees as numpy passes (issue 30 item 5).

The same steps as the kernels of :mod:`hierdp.postprocessors._topdown_kernels`
(``lower_bounds``, ``project_parents``, ``integer_parents``): the compiled kernels cost a
compile or a cache load on first use and interpreted they cost ~10 µs per child and cell,
so small trees run these passes instead. Parents of one height class are independent
(none is another's ancestor), so the pass takes the classes from the root's height down
and solves every (parent, cell) problem of a class at once. Each problem is one row of a
dense matrix: the parents of a class are bucketed by their number of children rounded up
to a power of two (at most a 2x padding, a few buckets per class), the padding sits past
the last child and holds zeros.

The continuous step is the weighted projection onto the simplex (Held, Wolfe & Crowder
1974; Michelot 1986, with weights; :func:`~hierdp.postprocessors._topdown_kernels.project_group`):
the breakpoints ``a_j / v_j`` sorted (stable, as the kernel's sorts), the prefix sums
``A_r``, ``V_r`` along each row (``np.cumsum`` along a row adds in the kernel's order, so
the multiplier is the kernel's to the bit), and the first ``r`` with
``mu_r >= a_{r+1} / v_{r+1}``. The integer step is the greedy rule on unit costs
(Gross 1956; Ibaraki & Katoh 1988; :func:`~hierdp.postprocessors._topdown_kernels.integer_group`):
the kernel's start ``floor(a - mu v + 1/2)``, then the ``|D|`` cheapest units to add (or
dearest to remove) chosen among every candidate unit by (cost, child index) — the units
the kernel's heap pops, ties to the lowest index — and the kernel's exchange check, row by
row. The integers equal the kernel's; the continuous values equal them to round-off.
A row whose candidate units would be too many (:data:`MAX_UNITS`) runs the kernel's own
plain-Python step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hierdp.postprocessors import _topdown_kernels as TK

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["lower_bounds_small", "project_small", "integer_small"]

#: a row of the integer step whose candidate units (:func:`_unit_keys`) exceed this runs
#: the kernel's plain-Python ``integer_group`` (rare: a child offers the units whose key is
#: within the |D|-th smallest first key, a few per child unless variances differ widely)
MAX_UNITS = 4096


def _buckets(tree: Tree):
    """Per height class, top-down, per bucket of fan-out: ``(parents, kids, mask)`` with
    ``kids`` (G, M) the children of each parent (padding: 0) and ``mask`` the real ones.
    Depends on the tree only (cached on it)."""
    key = "topdown_small.buckets"
    hit = tree.cache.get(key)
    if hit is not None:
        return hit
    ti = tree.internal
    ptr, idx = ti.child_ptr, ti.child_idx
    out = []
    for h in range(int(ti.height[0]), 1, -1):  # height 1: the leaves
        sl = ti.height_slice(h)
        par = np.arange(sl.start, sl.stop)
        m = ptr[par + 1] - ptr[par]
        par, m = par[m > 0], m[m > 0]
        width = 1 << np.ceil(np.log2(m)).astype(np.int64)
        for w in np.unique(width):
            p = par[width == w]
            cols = np.arange(int(w))
            mask = cols[None, :] < (ptr[p + 1] - ptr[p])[:, None]
            pos = np.where(mask, ptr[p][:, None] + cols[None, :], 0)
            kids = np.where(mask, idx[pos], 0)
            out.append((p, kids, mask))
    tree.cache[key] = out
    return out


def lower_bounds_small(tree: Tree, exact: np.ndarray, xhat: np.ndarray) -> np.ndarray:
    """``low`` as :func:`hierdp.postprocessors._topdown_kernels.lower_bounds` writes it
    (v's own value clipped at 0 when v is known exactly, else the sum of its children's),
    bottom-up by height class (sums to round-off)."""
    ti = tree.internal
    n, k = xhat.shape
    ex = np.broadcast_to(exact, (n, k))
    low = np.zeros((n, k))
    for h in range(1, int(ti.height[0]) + 1):
        sl = ti.height_slice(h)
        low[sl] = np.where(ex[sl], np.maximum(xhat[sl], 0.0), low[sl])
        par = ti.parent[sl]
        ok = par >= 0
        if ok.any():
            for c in range(k):
                low[:, c] += np.bincount(par[ok], weights=low[sl][ok, c], minlength=n)
    return low


def _rows(kids: np.ndarray, mask: np.ndarray, arr: np.ndarray) -> np.ndarray:
    """``arr[kids]`` as rows per (parent, cell): shape (G * k, M), padding 0."""
    g, w = kids.shape
    vals = np.where(mask[:, :, None], arr[kids], 0)  # (G, M, kc)
    return np.ascontiguousarray(vals.transpose(0, 2, 1)).reshape(-1, w)


def _var_rows(kids: np.ndarray, mask: np.ndarray, var: np.ndarray, k: int) -> np.ndarray:
    v = _rows(kids, mask, var)
    if var.shape[1] != k:
        v = np.repeat(v, k, axis=0)
    return np.minimum(v, TK.BIG_VAR)  # inf: its limit, as the kernel


def _project_rows(a: np.ndarray, v: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~hierdp.postprocessors._topdown_kernels.project_group` on every row (a, v,
    padding a = v = 0); ``s`` per row. Returns ``(x, mu, residual)``."""
    free = v > 0.0
    fixed_x = np.where(free, 0.0, np.maximum(a, 0.0))
    rest = np.subtract.accumulate(np.concatenate([s[:, None], fixed_x], axis=1), axis=1)[:, -1]
    nf = free.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # free children first (an overflowed breakpoint, +inf, is clamped below the others' inf)
        t = np.where(free, np.minimum(-a / np.where(free, v, 1.0), np.finfo(np.float64).max), np.inf)
        order = np.argsort(t, axis=1, kind="stable")
        fs = np.take_along_axis(free, order, 1)
        aS = np.where(fs, np.take_along_axis(a, order, 1), 0.0)
        vS = np.where(fs, np.take_along_axis(v, order, 1), 0.0)
        A = np.cumsum(aS, axis=1)
        V = np.cumsum(vS, axis=1)
        mu_r = (A - rest[:, None]) / V
        nxt = np.concatenate([aS[:, 1:] / vS[:, 1:], np.full((a.shape[0], 1), np.nan)], axis=1)
        r = np.arange(a.shape[1])[None, :]
        cond = (r == (nf[:, None] - 1)) | ((r < nf[:, None] - 1) & (mu_r >= nxt))
        mu = np.take_along_axis(mu_r, np.argmax(cond, axis=1)[:, None], 1)[:, 0]
        mu = np.where(nf == 0, 0.0, np.where(rest <= 0.0, np.inf, mu))
        xf = np.maximum(a - mu[:, None] * v, 0.0)
    x = np.where(free, np.where((rest <= 0.0)[:, None], 0.0, xf), fixed_x)
    placed = np.where(free, x, 0.0).sum(axis=1)
    res = np.where(nf == 0, rest, np.where(rest <= 0.0, rest, rest - placed))
    return x, mu, res


def project_small(tree: Tree, xhat: np.ndarray, var: np.ndarray, low: np.ndarray, x: np.ndarray) -> float:
    """Every parent's children, top-down, as
    :func:`hierdp.postprocessors._topdown_kernels.project_parents` writes them (``x[0]``
    set by the caller). Returns the largest ``|residual|``."""
    k = xhat.shape[1]
    worst = 0.0
    for p, kids, mask in _buckets(tree):
        lo = _rows(kids, mask, low)
        a = _rows(kids, mask, xhat) - lo
        v = _var_rows(kids, mask, var, k)
        s = np.subtract.accumulate(np.concatenate([x[p].reshape(-1, 1), lo], axis=1), axis=1)[:, -1]
        xs, _, res = _project_rows(a, v, s)
        xg = (lo + xs).reshape(len(p), k, -1).transpose(0, 2, 1)  # (G, M, k)
        x[kids[mask]] = xg[mask]
        if res.size:
            worst = max(worst, float(np.max(np.abs(res))))
    return worst


def _cost_add(z: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    return (2.0 * (z - a) + 1.0) / v


def _cost_remove(z: np.ndarray, a: np.ndarray, v: np.ndarray) -> np.ndarray:
    return (2.0 * (z - a) - 1.0) / v


def _unit_keys(z, a, v, free, D):
    """Per row, the key of each child's next unit (D > 0: its cost to add; D < 0: minus
    its cost to remove, inf where the child holds none) and the bound ``L``: the |D|-th
    smallest of those keys (inf if fewer), which no chosen unit's key exceeds."""
    with np.errstate(divide="ignore", invalid="ignore"):
        key0 = np.where((D > 0)[:, None], _cost_add(z, a, v), -_cost_remove(z, a, v))
    key0 = np.where(free & ((D > 0)[:, None] | (z > 0)), key0, np.inf)
    nd = np.abs(D)
    srt = np.sort(key0, axis=1)
    L = np.where(nd <= z.shape[1], np.take_along_axis(srt, np.minimum(nd - 1, z.shape[1] - 1)[:, None], 1)[:, 0],
                 np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        reach = np.floor((L[:, None] - key0) * v / 2.0) + 2.0  # units of key <= L, plus a margin
    cnt = np.where(np.isfinite(key0) & (key0 <= L[:, None]), np.minimum(np.nan_to_num(reach, posinf=2.0**62),
                                                                          nd[:, None]), 0)
    cnt = np.where((D < 0)[:, None], np.minimum(cnt, z), cnt)
    return cnt.astype(np.int64)


def _take_units(z, a, v, D, cnt):
    """The kernel's heap phase: ``|D|`` units added (D > 0, the cheapest by (cost, child))
    or removed (D < 0, the dearest held, by (-cost, child)), among the candidate units
    ``cnt`` per child (:func:`_unit_keys`), counted per child; ragged, no padding."""
    g, w = z.shape
    flat = cnt.reshape(-1)
    cell = np.repeat(np.arange(g * w), flat)
    start = np.cumsum(flat) - flat
    step = np.arange(cell.size) - np.repeat(start, flat)
    row, child = cell // w, cell % w
    sgn = np.sign(D)[row]
    zz = z.reshape(-1)[cell] + sgn * step
    af, vf = a.reshape(-1)[cell], v.reshape(-1)[cell]
    key = np.where(sgn > 0, _cost_add(zz, af, vf), -_cost_remove(zz, af, vf))
    order = np.lexsort((step, child, key, row))
    rs = row[order]
    first = np.searchsorted(rs, np.arange(g))
    rank = np.arange(order.size) - first[rs]
    take = order[rank < np.abs(D)[rs]]
    picked = np.bincount(cell[take], minlength=g * w).reshape(g, w)
    return z + np.sign(D)[:, None] * picked


def _integer_rows(a: np.ndarray, v: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~hierdp.postprocessors._topdown_kernels.integer_group` on every row.
    Returns ``(z, units not placed)``."""
    g, w = a.shape
    free = v > 0.0
    fixed_z = np.where(free, 0, np.maximum(np.rint(a), 0.0).astype(np.int64))
    rest = S - fixed_z.sum(axis=1)
    nf = free.sum(axis=1)
    missed = np.where((nf == 0) | (rest <= 0), rest, 0)
    go = (nf > 0) & (rest > 0)
    z = fixed_z.copy()
    if not go.any():
        return z, missed
    ag, vg, fg = a[go], v[go], free[go]
    # the kernel's start: the projection's multiplier of the same row (project_group is
    # given ``rest`` and subtracts the known values again, as the kernel does)
    _, mu, _ = _project_rows(ag, vg, rest[go].astype(np.float64))
    with np.errstate(invalid="ignore"):
        zf = np.floor(ag - mu[:, None] * vg + 0.5)
    zg = np.where(fg, np.maximum(zf, 0.0), 0.0).astype(np.int64)
    zg = np.where(fg, zg, fixed_z[go])
    D = rest[go] - np.where(fg, zg, 0).sum(axis=1)
    cnt = _unit_keys(zg, ag, vg, fg, D)
    heavy = (D != 0) & (cnt.sum(axis=1) > MAX_UNITS)
    light = (D != 0) & ~heavy
    if light.any():
        li = np.flatnonzero(light)
        got = _take_units(zg[li], ag[li], vg[li], D[li], cnt[li])
        ok = np.abs(got - zg[li]).sum(axis=1) == np.abs(D[li])  # too few candidates (never seen): the kernel
        zg[li[ok]] = got[ok]
        heavy[li[~ok]] = True
    for r in np.flatnonzero(heavy):  # the kernel's own step (plain Python), rare
        zr = np.empty(w, np.int64)
        ar, vr = ag[r].copy(), vg[r].copy()
        TK.integer_group.py_func(ar, vr, w, int(S[go][r]), zr, np.empty(w), np.empty(w), np.empty(w, np.int64))
        zg[r] = zr
    if (~heavy).any():
        zg[~heavy] = _exchange(zg[~heavy], ag[~heavy], vg[~heavy], fg[~heavy])
    z[go] = zg
    return z, missed


def _exchange(z, a, v, free):
    """The kernel's last check, every row at once: while the cheapest unit to add costs
    less than the dearest held (relative 1e-12), move one (first index on ties)."""
    g, w = z.shape
    active = np.ones(g, bool)
    for _ in range(w):
        with np.errstate(divide="ignore", invalid="ignore"):
            ca = np.where(free, _cost_add(z, a, v), np.inf)
            cr = np.where(free & (z > 0), _cost_remove(z, a, v), -np.inf)
        ja, jr = np.argmin(ca, axis=1), np.argmax(cr, axis=1)
        rows = np.arange(g)
        cav, crv = ca[rows, ja], cr[rows, jr]
        move = active & np.isfinite(cav) & np.isfinite(crv) & (ja != jr)
        with np.errstate(invalid="ignore"):
            move &= crv - cav > 1e-12 * (np.abs(cav) + np.abs(crv))
        active &= move
        if not move.any():
            break
        z[rows[move], ja[move]] += 1
        z[rows[move], jr[move]] -= 1
    return z


def integer_small(tree: Tree, y: np.ndarray, var: np.ndarray, lowi: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    """Every parent's children, top-down, as
    :func:`hierdp.postprocessors._topdown_kernels.integer_parents` writes them (``out[0]``
    set by the caller). Returns ``(units not placed, values unfit)``."""
    k = y.shape[1]
    missed = 0
    for p, kids, mask in _buckets(tree):
        yv = y[kids[mask]]
        bad = int(np.count_nonzero(~(np.abs(yv) < 2.0**53)))
        if bad:
            return missed, bad
        lo = _rows(kids, mask, lowi)
        a = _rows(kids, mask, y) - lo
        v = _var_rows(kids, mask, var, k)
        S = out[p].reshape(-1) - lo.sum(axis=1)
        z, miss = _integer_rows(a, v, S)
        missed += int(np.abs(miss).sum())
        zg = (lo + z).reshape(len(p), k, -1).transpose(0, 2, 1)
        out[kids[mask]] = zg[mask]
    return missed, 0
