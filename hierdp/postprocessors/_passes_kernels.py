"""The per-parent kernel of the top-down steps in passes (issue 47; :mod:`hierdp.postprocessors.passes`).

A parent's children, ``m`` of them with ``k`` cells each, are solved under the parent's
final cells in passes, coarsest first (TopDown's query ordering, Abowd et al. 2022, Sec. 7.2;
the production ordering in ``shared/census/pl94_persons_2020.yaml``, ``query_ordering``):

0. the children's **totals**: the non-negative values summing to the parent's total closest
   to the totals of their estimates, weighted by ``1 / var`` (a weighted projection onto the
   simplex, exact by sorting its breakpoints; integers: controlled rounding of that
   projection, :func:`hierdp.postprocessors._margins.round_vector_kernel`);
1. each held marginal of the ordering in turn (a nested chain: every marginal refines the one
   before), then the cells: the children x groups table, non-negative, each column summing to
   the parent's value of the group, each child's groups summing to its value from the pass
   before (the two-margin projection, :func:`hierdp.postprocessors._margins.project_groups`;
   integers: controlled rounding with both margins exact,
   :func:`hierdp.postprocessors._margins.round_groups`).

Variances. A cell's estimate has variance ``v`` (per node or per cell); a group's sum is given
the sum of its cells' variances (exact when the cells' errors are independent, as in
``per_level``; a proxy for the ``marginals`` plan's GLS estimate, whose cells are correlated).
Within one parent the variances are clamped to at most ``VAR_RATIO`` times the smallest
positive one (an unmeasured child, ``inf``, then takes the adjustment first, as in
:mod:`hierdp.postprocessors._topdown_kernels`, without overflowing the Newton steps).

Ties. Integer steps break ties among equal weighted distances by uniforms keyed on the
release's tie-break seed and the *global* identity of the node (its index in the full tree's
internal order), the pass and the group: a function of public identities and the seed only, so
the same in memory and in any subtree task, and no child gains by its label or position.
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb
from hierdp.postprocessors._margins import _solve_lines, project_groups, round_groups, round_vector_kernel

__all__ = ["passes_parents", "root_passes", "keyed_uniform", "VAR_RATIO"]

_jit = nb.njit(cache=True, nogil=True)

#: within one parent's children, variances are clamped to at most this times the smallest positive one (an
#: unmeasured cell, inf, among measured ones: the two-margin Newton steps stall from ratios of 1e6 on)
VAR_RATIO = 1e4


@nb.njit(cache=True, nogil=True, inline="always")
def _mix(z):
    """The splitmix64 finaliser (Steele, Lea & Flood 2014) on a uint64."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@_jit
def keyed_uniform(seed, node, pos):
    """A uniform in [0, 1) keyed on ``seed`` (uint64), the node's global identity and a position
    ``pos`` (pass and group) within the node: 53 bits of two splitmix64 rounds."""
    z = _mix(np.uint64(seed) ^ _mix(np.uint64(node) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(pos)))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@_jit
def _simplex(t, tw, s, out):
    """``out``: the non-negative values summing to ``s`` closest to ``t`` in ``sum tw (x - t)^2``
    (exact: the breakpoints sorted, :func:`hierdp.postprocessors._margins._solve_lines`)."""
    m = t.shape[0]
    if s <= 0.0:
        for i in range(m):
            out[i] = 0.0
        return
    D = np.empty((1, m))
    S = np.empty((1, m))
    for i in range(m):
        D[0, i] = t[i] * tw[i]
        S[0, i] = 1.0 / tw[i]
    r = np.array([s])
    b = np.zeros(m)
    a = np.empty(1)
    X = np.empty((1, m))
    key = np.empty(m)
    order = np.empty((1, m), np.int64)
    for i in range(m):
        order[0, i] = i
    _solve_lines(D, S, r, b, a, X, key, order)
    for i in range(m):
        out[i] = X[0, i]


@_jit
def _group_csr(prev, G):
    """The columns of a pass grouped by the pass before (``prev`` (G,): each column's group
    there): ``(cells, ptr)`` as :func:`project_groups` takes them."""
    Gp = 0
    for g in range(G):
        Gp = max(Gp, prev[g] + 1)
    cnt = np.zeros(Gp + 1, np.int64)
    for g in range(G):
        cnt[prev[g] + 1] += 1
    for q in range(Gp):
        cnt[q + 1] += cnt[q]
    pos = cnt[:-1].copy()
    cells = np.empty(G, np.int64)
    for g in range(G):
        cells[pos[prev[g]]] = g
        pos[prev[g]] += 1
    return cells, cnt


@_jit
def _solve_children(Y, V, col, ids, maps, sizes, integer, seed, atol, res):
    """The passes for one parent: children's estimates ``Y`` (m, k) and variances ``V`` (m, k)
    (clamped, > 0), the parent's final cells ``col`` (k,), the children's global ids; writes the
    children's cells into ``res`` (m, k) float64 (integers when ``integer``). Returns
    ``(not converged, no rounding met the margins)`` counts."""
    m, k = Y.shape
    P = maps.shape[0]
    failed = 0
    bad = 0
    # pass 0: totals
    tot = np.zeros(m)
    tw = np.zeros(m)
    for i in range(m):
        s = 0.0
        sv = 0.0
        for j in range(k):
            s += Y[i, j]
            sv += V[i, j]
        tot[i] = s
        tw[i] = 1.0 / sv
    ptot = 0.0
    for j in range(k):
        ptot += col[j]
    rows = np.empty((m, 1))
    treal = np.empty(m)
    _simplex(tot, tw, ptot, treal)
    if integer:
        u = np.empty(m)
        for i in range(m):
            u[i] = keyed_uniform(seed, ids[i], 0)
        tint = np.empty(m, np.int64)
        bad += round_vector_kernel(treal, tw, np.int64(np.rint(ptot)), u, atol, tint)
        for i in range(m):
            rows[i, 0] = np.float64(tint[i])
    else:
        for i in range(m):
            rows[i, 0] = treal[i]
    prev_of_cell = np.zeros(k, np.int64)
    offset = 1
    for t in range(P + 1):
        G = k if t == P else sizes[t]
        # this pass's aggregates: estimates, variances, the parent's column
        YA = np.zeros((m, G))
        VA = np.zeros((m, G))
        cA = np.zeros(G)
        prevg = np.zeros(G, np.int64)
        for j in range(k):
            g = j if t == P else maps[t, j]
            cA[g] += col[j]
            prevg[g] = prev_of_cell[j]
            for i in range(m):
                YA[i, g] += Y[i, j]
                VA[i, g] += V[i, j]
        WA = np.empty((m, G))
        for i in range(m):
            for g in range(G):
                WA[i, g] = 1.0 / VA[i, g]
        cells, gptr = _group_csr(prevg, G)
        X = np.empty((m, G))
        failed += project_groups(YA, WA, cA, rows, cells, gptr, X)
        nxt = np.empty((m, G))
        if integer:
            cint = np.empty(G, np.int64)
            for g in range(G):
                cint[g] = np.int64(np.rint(cA[g]))
            rint = np.empty(rows.shape, np.int64)
            for i in range(m):
                for q in range(rows.shape[1]):
                    rint[i, q] = np.int64(np.rint(rows[i, q]))
            U = np.empty((m, G))
            for i in range(m):
                for g in range(G):
                    U[i, g] = keyed_uniform(seed, ids[i], offset + g)
            Z = np.empty((m, G), np.int64)
            bad += round_groups(X, WA, cint, rint, cells, gptr, U, atol, Z)
            for i in range(m):
                for g in range(G):
                    nxt[i, g] = np.float64(Z[i, g])
        else:
            for i in range(m):
                for g in range(G):
                    nxt[i, g] = X[i, g]
        rows = nxt
        offset += G
        if t < P:
            for j in range(k):
                prev_of_cell[j] = maps[t, j]
    for i in range(m):
        for j in range(k):
            res[i, j] = rows[i, j]
    return failed, bad


@_jit
def _cells_only(Y, V, col, ids, integer, seed, atol, res):
    """A parent's children cell by cell, no margin held across cells (TopDown's one pass at the
    Block level): each cell's children the non-negative values summing to the parent's cell
    (integers: rounded under it, ties keyed as in the passes). Returns the count of cells no
    rounding reached."""
    m, k = Y.shape
    t = np.empty(m)
    tw = np.empty(m)
    x = np.empty(m)
    u = np.empty(m)
    z = np.empty(m, np.int64)
    bad = 0
    for j in range(k):
        for i in range(m):
            t[i] = Y[i, j]
            tw[i] = 1.0 / V[i, j]
        _simplex(t, tw, col[j], x)
        if integer:
            for i in range(m):
                u[i] = keyed_uniform(seed, ids[i], 1 + j)
            bad += round_vector_kernel(x, tw, np.int64(np.rint(col[j])), u, atol, z)
            for i in range(m):
                res[i, j] = np.float64(z[i])
        else:
            for i in range(m):
                res[i, j] = x[i]
    return bad


@_jit
def passes_parents(ptr, idx, y, v, exact, ids, maps, sizes, mode, out, lo, hi, integer, seed, atol):
    """Parents ``lo .. hi`` (internal order), each with its final cells in ``out`` already: their
    children's cells by the passes (module docstring). ``y`` (n, k) estimates, ``v`` (n, 1) or
    (n, k) variances (``inf`` allowed), ``exact`` (n,) nodes known exactly (every cell; their
    values are kept: a parent's children are all exact or none), ``ids`` (n,) global node
    identities, ``maps`` (P, k) the held marginals' group of each cell and ``sizes`` (P,) their
    group counts, ``mode`` (n,) per parent 1 (the passes) or 0 (cell by cell, :func:`_cells_only`),
    ``out`` (n, k) float64 or int64. Returns ``(not converged, no rounding, mixed)``:
    counts of parents whose projection did not converge, whose rounding met no margin, and whose
    children were partly exact."""
    k = y.shape[1]
    kv = v.shape[1]
    failed = 0
    bad = 0
    mixed = 0
    for p in range(lo, hi):
        a = ptr[p]
        m = ptr[p + 1] - a
        if m == 0:
            continue
        ne = 0
        for q in range(a, a + m):
            ne += exact[idx[q]]
        if ne == m:
            for q in range(a, a + m):
                c = idx[q]
                for j in range(k):
                    out[c, j] = np.rint(y[c, j]) if integer else y[c, j]
            continue
        if ne:
            mixed += 1
            continue
        zero = True
        for j in range(k):
            if out[p, j] != 0:
                zero = False
                break
        if m == 1 or zero:
            for q in range(a, a + m):
                c = idx[q]
                for j in range(k):
                    out[c, j] = out[p, j] if m == 1 else 0
            continue
        # the children in the order of their global ids: the same arithmetic whatever order a
        # (sub)tree lists them in, so a subtree task gives the whole tree's numbers bit for bit
        gid = np.empty(m, np.int64)
        for t in range(m):
            gid[t] = ids[idx[a + t]]
        kids = idx[a:a + m][np.argsort(gid, kind="mergesort")]
        Y = np.empty((m, k))
        V = np.empty((m, k))
        cid = np.empty(m, np.int64)
        vmin = np.inf
        for t in range(m):
            c = kids[t]
            cid[t] = ids[c]
            for j in range(k):
                Y[t, j] = y[c, j]
                vv = v[c, j if kv > 1 else 0]
                V[t, j] = vv
                if 0.0 < vv < vmin:
                    vmin = vv
        if not vmin < np.inf:
            vmin = 1.0
        vmax = vmin * VAR_RATIO
        for t in range(m):
            for j in range(k):
                vv = V[t, j]
                V[t, j] = vmin if vv <= 0.0 else (vmax if vv > vmax else vv)
        col = np.empty(k)
        for j in range(k):
            col[j] = np.float64(out[p, j])
        res = np.empty((m, k))
        if mode[p]:
            f, b = _solve_children(Y, V, col, cid, maps, sizes, integer, seed, atol, res)
            failed += f
            bad += b
        else:
            bad += _cells_only(Y, V, col, cid, integer, seed, atol, res)
        for t in range(m):
            c = kids[t]
            for j in range(k):
                out[c, j] = res[t, j]
    return failed, bad, mixed


@_jit
def root_passes(y0, v0, total, integer, seed, root_id, atol, out):
    """The root's cells under its total ``total`` (a non-negative number; an integer when
    ``integer``): the non-negative cells summing to it closest to ``y0`` weighted by ``1 / v0``
    (clamped as for children), rounded under it with ties keyed on the root's id. Returns 0, or
    1 when no rounding reached the total."""
    k = y0.shape[0]
    vmin = np.inf
    for j in range(k):
        if 0.0 < v0[j] < vmin:
            vmin = v0[j]
    if not vmin < np.inf:
        vmin = 1.0
    w = np.empty(k)
    for j in range(k):
        vv = v0[j]
        vv = vmin if vv <= 0.0 else min(vv, vmin * VAR_RATIO)
        w[j] = 1.0 / vv
    x = np.empty(k)
    _simplex(y0, w, total, x)
    if not integer:
        for j in range(k):
            out[j] = x[j]
        return 0
    u = np.empty(k)
    for j in range(k):
        u[j] = keyed_uniform(seed, root_id, 1 + j)
    z = np.empty(k, np.int64)
    bad = round_vector_kernel(x, w, np.int64(np.rint(total)), u, atol, z)
    for j in range(k):
        out[j] = z[j]
    return bad
