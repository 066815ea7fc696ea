"""Compiled propagation passes of the Generation Matrix (Cai et al., Props. 2-3), used by
:mod:`hierdp.generation_matrix`: ``G^-T v`` bottom-up and ``G^-1 v`` top-down, in O(n k)
over internal-order arrays (every parent precedes its children).
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb

_jit = nb.njit(cache=True, nogil=True)


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
