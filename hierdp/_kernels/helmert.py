"""The Helmert rotation of every node's cells, compiled: :func:`helmert_rows`.

The plan ``marginals`` (:mod:`hierdp.plans.marginals`) rotates each node's histogram
``(k_1, ..., k_D)`` by the orthonormal Helmert matrix along every cell dimension, four
times per release. With numpy each dimension is a separate pass over the whole ``(n, k)``
array (a batched matrix product, or cumulative sums), and the small dimensions cost as
much as the large one. This kernel rotates one node at a time, every dimension while
its ``k`` values are in the L1 cache, each in ``O(m)`` operations per vector (the
cumulative-sum formulas of :func:`hierdp.plans.marginals._helmert_axis`), in exactly the same order of floating-point
operations as that numpy function: the two give the same bits (tested), so a small tree
rotated by numpy and a large one by this kernel agree to the last bit (a split release
mixes both), and it takes less CPU per transform than numpy's batched BLAS products.
"""

from __future__ import annotations

import math

import numpy as np

from hierdp._kernels.jit import numba as nb

#: modes of :func:`helmert_rows`: ``H``, ``H^T``, ``(H^T)^2`` elementwise
FWD, BWD, SQ = 0, 1, 2


@nb.njit(cache=True, nogil=True, inline="always")
def _axis(row, m, stride, k, mode, inv, inv2, ratio, run, head):
    """One dimension (size ``m``, ``stride`` values apart) of one node's ``k`` values, in
    place. The ``k / m`` vectors advance together, one position ``i`` at a time: the
    running sums are independent (no chain of dependent additions), and the inner loop is
    contiguous when ``stride > 1``."""
    block = m * stride
    outer = k // block
    root = math.sqrt(float(m))
    if mode == 0:
        for o in range(outer):
            for j in range(stride):
                run[o * stride + j] = row[o * block + j]
        for i in range(1, m):
            fi = float(i)
            for o in range(outer):
                for j in range(stride):
                    q = o * stride + j
                    x = row[o * block + i * stride + j]
                    run[q] += x
                    row[o * block + i * stride + j] = ((run[q] - x) - fi * x) * inv[i]
        for o in range(outer):
            for j in range(stride):
                row[o * block + j] = run[o * stride + j] / root
        return
    for o in range(outer):
        for j in range(stride):
            x = row[o * block + j]
            head[o * stride + j] = x / root if mode == 1 else x / float(m)
    for i in range(m - 1, -1, -1):
        fi = float(i)
        for o in range(outer):
            for j in range(stride):
                q = o * stride + j
                x = row[o * block + i * stride + j]
                if i == 0:
                    w = 0.0
                elif mode == 1:
                    w = x * inv[i]
                else:
                    w = x * inv2[i]
                if i == m - 1:
                    run[q] = w
                else:
                    run[q] += w
                if mode == 1:
                    row[o * block + i * stride + j] = (head[q] + (run[q] - w)) - fi * w
                else:
                    row[o * block + i * stride + j] = (head[q] + (run[q] - w)) + x * ratio[i]


@nb.njit(cache=True, nogil=True)
def helmert_rows(a, out, sizes, mode, lo, hi):
    """Rows ``[lo, hi)`` of ``out`` ``(n, k)`` = the Helmert transform ``mode`` of the same
    rows of ``a`` along every cell dimension (``sizes``, row-major, product ``k``).

    Along one dimension of size ``m`` (``inv_i = 1 / sqrt(i (i+1))``, ``inv_0 = 1``,
    ``C_i = a_0 + ... + a_i`` summed left to right, ``R_i = w_{m-1} + ... + w_i`` right to left):
    ``FWD``: ``out_0 = C_{m-1} / sqrt(m)``, ``out_i = ((C_i - a_i) - i a_i) inv_i``;
    ``BWD``: ``w_i = a_i inv_i`` (``w_0 = 0``), ``out_i = (a_0 / sqrt(m) + (R_i - w_i)) - i w_i``;
    ``SQ``: ``w_i = a_i inv2_i`` with ``inv2_i = 1 / (i (i+1))`` (``w_0 = 0``),
    ``out_i = (a_0 / m + (R_i - w_i)) + a_i (i / (i + 1))``.
    """
    k = a.shape[1]
    D = sizes.shape[0]
    biggest = 1
    for d in range(D):
        biggest = max(biggest, sizes[d])
    inv = np.empty(biggest)
    inv2 = np.empty(biggest)
    ratio = np.empty(biggest)
    run = np.empty(k)
    head = np.empty(k)
    for r in range(lo, hi):
        row = out[r]
        for c in range(k):
            row[c] = a[r, c]
        stride = k
        for d in range(D):
            m = sizes[d]
            stride //= m
            if m == 1:
                continue
            for i in range(m):
                fi = float(i)
                norm = math.sqrt(fi * (fi + 1.0)) if i > 0 else 1.0
                inv[i] = 1.0 / norm
                inv2[i] = 1.0 / (norm * norm)
                ratio[i] = fi / (fi + 1.0)
            _axis(row, m, stride, k, mode, inv, inv2, ratio, run, head)
