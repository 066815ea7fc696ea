"""Helpers shared by the compiled kernels of several modules.

* :func:`aligned_empty`: work buffers staggered modulo 4 KiB (no L1 cache aliasing);
* :func:`zero_range`: a GIL-free fill of zeros (for :func:`hierdp._kernels.threads.zero_in_pieces`);
* :func:`blue_combine`: the BLUE combine rule, the one place that merges a node's own
  measurement with the sum of its children's estimates (used by the BLUE, ``nonneg``
  and budget-variance kernels). It is inlined into its callers by numba.

numba's disk cache keys a kernel on its own file only, so callers would keep a helper's
old machine code after an edit here; :func:`hierdp._kernels.jit.shared_kernels_tag` keys hierdp's
cache folder by this file's source instead (with ``NUMBA_CACHE_DIR`` set by hand, clear
that folder after editing this file).
"""

from __future__ import annotations

import numpy as np

from hierdp._kernels.jit import numba as nb


def aligned_empty(shape: tuple, offset_lines: int) -> np.ndarray:
    """float64 array whose data start ``offset_lines`` cache lines past a 4 KiB boundary.

    Work arrays of ~2^k bytes that share an address modulo 4096 alias in the L1 cache
    (2-3x slower passes on deep binary trees); staggering the offsets
    avoids it. Large ones come from :func:`hierdp._kernels.memory.large_empty` (huge pages).
    """
    from hierdp._kernels.memory import large_empty

    return large_empty(tuple(shape), np.float64, 64 * offset_lines)


@nb.njit(cache=True, nogil=True)
def zero_range(a, lo, hi):
    """``a[lo:hi] = 0`` for a 1-D array, without the GIL (numpy's fill of a slice holds it,
    and is slower)."""
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        a[i] = 0


@nb.njit(cache=True, nogil=True, inline="always")
def blue_combine(y, v, S, U):
    """Merge a node's measurement ``y`` (variance ``v``) with the sum ``S`` of its children's
    estimates (variance ``U``): the inverse-variance step of Dawson et al. 2023, Alg. 1
    (CombineEstimates), pass 1 of the two-pass BLUE (Alg. 2).

    Returns ``(z, u)`` with ``z = (y U + S v) / (v + U)`` and ``u = v U / (v + U)`` when
    both variances are finite and positive; otherwise, in this order: ``v = inf`` (the node
    is unmeasured) gives ``(S, U)``; ``U = inf`` (some child carries no information) gives
    ``(y, v)``; ``v = 0`` (the node is known exactly) gives ``(y, 0)``; ``U = 0`` (the
    children are known exactly) gives ``(S, 0)``. Callers encode "some child is
    uninformative" by passing ``U = inf``. Variances must be >= 0 (not NaN); a caller that
    has not validated them must not trust the result.
    """
    # the special cases behind one branch, the merge last: the layout measured fastest
    # over all callers (testing the finite, positive case first cost the general BLUE
    # path and the budget variances 10-15%)
    if (v == np.inf) | (U == np.inf) | (v <= 0.0) | (U <= 0.0):
        if v == np.inf:
            return S, U
        if U == np.inf:
            return y, v
        if v <= 0.0:  # 0, or invalid input (reported by the caller)
            return y, 0.0
        return S, 0.0
    r = 1.0 / (v + U)
    return (y * U + S * v) * r, v * U * r
