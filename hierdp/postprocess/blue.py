"""Best linear unbiased estimation on trees (Dawson et al. 2023, Alg. 1-2, Theorem 8)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hierdp import _kernels as K
from hierdp.errors import DataError
from hierdp.postprocess.base import Estimate, PostProcessor

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["BLUE", "blue"]


_BAD_INPUT = {
    1: "values contain NaN or infinity; mark unmeasured nodes with variance=inf instead",
    2: "variances must be non-negative (inf marks an unmeasured node)",
}
_STRUCT_KEY = "blue.structure"


def _as_2d_pair(tree: Tree, values: np.ndarray, variance: np.ndarray | None):
    """Shape checks; returns ``(y, y2, v2, variance shape)`` with y2, v2 C-contiguous (n, k), (n, kv)."""
    y = np.asarray(values, dtype=np.float64)
    if y.ndim not in (1, 2) or y.shape[0] != tree.n_nodes:
        raise DataError(f"values must have shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {y.shape}")
    y2 = np.ascontiguousarray(y.reshape(tree.n_nodes, -1))
    if variance is None:
        raise DataError("BLUE needs per-node variances; pass variance= (inf for unmeasured nodes)")
    v = np.asarray(variance, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(tree.n_nodes, float(v))
    if v.shape not in ((tree.n_nodes,), y.shape):
        raise DataError(f"variance must have shape ({tree.n_nodes},) or {y.shape}, got {v.shape}")
    v2 = np.ascontiguousarray(v.reshape(tree.n_nodes, -1))
    return y, y2, v2, v.shape


def blue(tree: Tree, values: np.ndarray, variance: np.ndarray) -> Estimate:
    """Two-pass BLUE over internal-order arrays.

    Returns the weighted least-squares estimate of all node counts subject to
    consistency (parent = sum of children), with inverse-variance weights, and the exact
    variance of each estimate (diagonal of the estimator's covariance). Nodes with
    infinite variance carry no weight; where the data leave a node's value undetermined
    its residual share is split in proportion to leaf counts and its variance is ``inf``.
    Runs in O(n k) (two passes of a compiled loop; for one histogram with one variance
    per node, :func:`hierdp._kernels.blue_1d`, which also validates the input).
    """
    y, y2, v2, vshape = _as_2d_pair(tree, values, variance)
    n = tree.n_nodes
    if y2.shape[1] != 1 or v2.shape[1] != 1:
        bad = K.check_values_variances(y2, v2)  # one fused pass, no temporaries
        if bad:
            raise DataError(_BAD_INPUT[bad])
        x = np.empty_like(y2)
        xv = np.empty_like(v2)
        K.blue_2d(tree._parent, tree._n_children, tree._leafcount, y2, v2, x, xv)
        return Estimate(values=x.reshape(y.shape), variance=xv.reshape(vshape), info={"method": "blue"})
    st = tree.cache.get(_STRUCT_KEY)  # immutable structure arrays; a racing rebuild is harmless
    if st is None:
        st = K.blue_structure(tree._parent, tree._n_children)
        tree.cache[_STRUCT_KEY] = st
    n1, first, cidx = st
    y1, v1 = y2.reshape(n), v2.reshape(n)
    x = np.empty(n)
    xv = np.empty(n)
    bad = K.blue_1d(first, cidx, tree._leafcount, n1, y1, v1, x, xv)
    if bad:
        raise DataError(_BAD_INPUT[bad])
    return Estimate(values=x.reshape(y.shape), variance=xv.reshape(vshape), info={"method": "blue"})


class BLUE(PostProcessor):
    """Best linear unbiased estimate (two-pass, Dawson et al. Alg. 2): consistent, minimum variance."""

    name = "blue"
    requires_variance = True
    consistent = True

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        est = blue(tree, estimate.values, estimate.variance)
        # later steps of a chain (nonneg, round) optimise against the original measurements
        est.info["measurement_variance"] = estimate.info.get("measurement_variance", estimate.variance)
        return est
