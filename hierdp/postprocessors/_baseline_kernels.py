"""Compiled passes of the consistency baselines, used by :mod:`hierdp.postprocessors.baselines`.
"""

from __future__ import annotations

from hierdp._kernels.jit import numba as nb

_jit = nb.njit(cache=True, nogil=True)


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
        l = height[i]  # noqa: E741  (the paper's l, a node's height)
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
