"""Compiled propagation passes of the Generation Matrix (Cai et al., Props. 2-3), used by
:mod:`hierdp.generation_matrix`: ``G^-T v`` bottom-up and ``G^-1 v`` top-down, in O(n k)
over internal-order arrays (every parent precedes its children).
"""

from __future__ import annotations

import numpy as np

from hierdp._jit import numba as nb

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
