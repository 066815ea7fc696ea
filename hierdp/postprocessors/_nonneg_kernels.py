"""Compiled active-set steps of the non-negative consistent least squares, used by
:mod:`hierdp.postprocessors.nonneg`: each step is the two-pass BLUE recursion (Dawson et
al. 2023, Alg. 2) with the fixed leaves known exactly, fused with the KKT check.

Arrays are in internal order: parents before children, leaves in the suffix ``[n1, n)``.
"""

from __future__ import annotations

import numpy as np

from hierdp._jit import numba as nb
from hierdp._kernel_common import blue_combine

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
            zi, ui = blue_combine(xhat[i, c], d[i, c], s[i, c], su[i, c])
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
