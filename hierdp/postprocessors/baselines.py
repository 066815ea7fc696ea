"""Baseline post-processors of the Generation Matrix paper's experiments (Table 2).

- ``none``: Processless, the noisy measurements as they are.
- ``boosting``: Hay et al. (2010), exact for complete k-ary trees with uniform noise; on
  other trees it uses the root's fan-out (as Cai et al. did) and its output is not
  consistent (:class:`BoostingWarning`).
- ``privtrie``: the recursive optimally consistent post-processing (PrivTrie, Wang et al.
  2018) written plainly in Python as a readable reference: a bottom-up recursion that
  combines each node's measurement with the sum of its children's estimates by inverse
  variance, then a top-down recursion that splits each parent's residual among its
  children in proportion to their variances. Slow by design (a Python call per node).
- ``dense``: weighted least squares solved with dense linear algebra, for small trees.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from hierdp.errors import DataError, warn
from hierdp.generation_matrix import ancestor_matrix
from hierdp.postprocessors import _baseline_kernels as BLK
from hierdp.postprocessors.base import Estimate, PostProcessor, checked_variance, finite_values

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["BoostingWarning", "Processless", "Boosting", "PrivTrie", "DenseLS", "boosting", "privtrie",
           "dense_ls", "DENSE_MAX_NODES"]

#: the dense solver refuses larger trees (O(n^2) memory, O(n^3) time)
DENSE_MAX_NODES = 4000


class BoostingWarning(UserWarning):
    """Boosting was applied outside its domain (not a complete k-ary tree, or non-uniform
    noise): the output is not the optimal consistent estimate and may be inconsistent."""


class Processless(PostProcessor):
    """Processless: returns the measurements unchanged (not consistent)."""

    name = "none"
    requires_variance = False
    consistent = False
    linear = True

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        y = finite_values(tree, estimate.values)
        var = checked_variance(tree, estimate.variance, y.shape)
        return Estimate(y.copy(), None if var is None else var.copy(), {"method": "none"})


# --------------------------------------------------------------------------- boosting
def _is_complete(tree: Tree, k: int) -> bool:
    nc = tree.internal.n_children
    internal = nc > 0
    return bool(np.all(nc[internal] == k) and np.all(tree.internal.depth[~internal] == tree.n_levels - 1))


def boosting(tree: Tree, values: np.ndarray) -> np.ndarray:
    """Boosting (Hay et al. 2010, Theorem 3) with the root's fan-out k, internal order.

    Warns :class:`BoostingWarning` when the tree is not a complete k-ary tree.
    """
    y = finite_values(tree, values)
    k = int(tree.internal.n_children[0])
    if tree.n_nodes > 1 and not _is_complete(tree, k):
        warn(
            f"boosting assumes a complete {k}-ary tree (the root's fan-out); this tree is not one, so the "
            "output is not consistent; use 'gmc' or 'blue' instead",
            BoostingWarning,
        )
    y2 = np.ascontiguousarray(y.reshape(tree.n_nodes, -1))
    out = np.empty_like(y2)
    z = np.empty_like(y2)
    BLK.boosting_2d(tree.internal.parent, tree.internal.height, tree.internal.child_ptr, tree.internal.child_idx,
                    max(k, 1), y2, out, z)
    return out.reshape(y.shape)


class Boosting(PostProcessor):
    """Boosting (Hay et al. 2010): optimal for complete k-ary trees and uniform noise only."""

    name = "boosting"
    requires_variance = False
    consistent = False  # only on complete k-ary trees
    linear = True

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        y = finite_values(tree, estimate.values)
        var = checked_variance(tree, estimate.variance, y.shape)
        if var is not None and not np.all(np.isfinite(var)):
            raise DataError("boosting needs every level measured (an unmeasured level's values are placeholders); "
                            "use 'blue' or 'gmc'")
        if var is not None and not np.all(var == var.flat[0]):
            warn("boosting assumes the same noise variance at every node; the given variances differ "
                 "and are ignored; use 'gmc' or 'blue' for per-level budgets", BoostingWarning)
        return Estimate(boosting(tree, y), None, {"method": "boosting"})


# --------------------------------------------------------------------------- PrivTrie (plain reference)
def _privtrie_1d(children: list[list[int]], y: list[float], var: list[float]) -> list[float]:
    n = len(y)
    z = [0.0] * n
    u = [0.0] * n

    def up(v: int) -> None:
        kids = children[v]
        if not kids:
            z[v], u[v] = y[v], var[v]
            return
        s = su = 0.0
        for c in kids:
            up(c)
            s += z[c]
            su += u[c]
        z[v] = (y[v] * su + s * var[v]) / (var[v] + su)
        u[v] = var[v] * su / (var[v] + su)

    x = [0.0] * n

    def down(v: int) -> None:
        kids = children[v]
        if not kids:
            return
        s = su = 0.0
        for c in kids:
            s += z[c]
            su += u[c]
        r = x[v] - s
        for c in kids:
            x[c] = z[c] + r * u[c] / su
            down(c)

    up(0)
    x[0] = z[0]
    down(0)
    return x


def privtrie(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None) -> np.ndarray:
    """Recursive optimally consistent estimate (PrivTrie's post-processing), plain Python.

    ``variance``: per-node variances (finite, positive), default uniform. Internal order.
    """
    y = finite_values(tree, values)
    n = tree.n_nodes
    var = checked_variance(tree, variance, y.shape)
    if var is None:
        var = np.ones(n)
    if not np.all(np.isfinite(var)) or np.any(var <= 0):
        raise DataError("privtrie needs finite, positive variances; use 'blue' for unmeasured or exact nodes")
    ptr, idx = tree.internal.child_ptr.tolist(), tree.internal.child_idx.tolist()
    children = [idx[ptr[i]:ptr[i + 1]] for i in range(n)]
    y2 = y.reshape(n, -1)
    v2 = var.reshape(n, -1)
    out = np.empty_like(y2)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 2 * tree.n_levels + 100))
    try:
        for c in range(y2.shape[1]):
            vc = v2[:, c if v2.shape[1] > 1 else 0]
            out[:, c] = _privtrie_1d(children, y2[:, c].tolist(), vc.tolist())
    finally:
        sys.setrecursionlimit(old)
    return out.reshape(y.shape)


class PrivTrie(PostProcessor):
    """PrivTrie's recursive optimally consistent post-processing, plain Python (a reference)."""

    name = "privtrie"
    requires_variance = False
    consistent = True
    linear = True

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        return Estimate(privtrie(tree, estimate.values, estimate.variance), None, {"method": "privtrie"})


# --------------------------------------------------------------------------- dense reference
def dense_ls(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares over the leaves with dense linear algebra (small trees).

    Minimises ``sum_i (x_i - y_i)^2 / var_i`` over consistent ``x = A l`` (A: leaf-to-node
    aggregation); ``inf`` variance = weight 0. Returns ``(x, Var(x))`` where the variance is
    the diagonal of ``A (A^T W A)^+ A^T``, and ``inf`` for nodes the measurements do not
    determine (their row of A is outside the row space of the measured rows). Raises for more
    than ``DENSE_MAX_NODES`` nodes.
    """
    y = finite_values(tree, values)
    n = tree.n_nodes
    if n > DENSE_MAX_NODES:
        raise DataError(f"the dense solver is for trees of at most {DENSE_MAX_NODES} nodes (got {n}); "
                        "use 'gmc' or 'blue'")
    var = checked_variance(tree, variance, y.shape)
    if var is None:
        var = np.ones(n)
    if np.any(var == 0):
        raise DataError("the dense solver needs positive variances (0 = exactly known is not supported); use 'blue'")

    leaves = np.flatnonzero(tree.internal.n_children == 0)
    A = ancestor_matrix(tree).T.toarray()[:, leaves]  # A[i, l] = 1 iff leaf l is in i's subtree
    A = np.ascontiguousarray(A)
    y2 = y.reshape(n, -1)
    v2 = var.reshape(n, -1)
    out = np.empty_like(y2)
    ovar = np.empty_like(v2)
    for c in range(y2.shape[1]):
        vc = v2[:, c if v2.shape[1] > 1 else 0]
        w = np.where(np.isinf(vc), 0.0, 1.0 / vc)
        sw = np.sqrt(w)
        sol, *_ = np.linalg.lstsq(A * sw[:, None], y2[:, c] * sw, rcond=None)
        out[:, c] = A @ sol
        if c < v2.shape[1]:
            B = A * sw[:, None]
            cov = np.linalg.pinv(B.T @ B)
            ovar[:, c] = np.einsum("ij,jk,ik->i", A, cov, A)
            # a node is determined only if its row of A lies in the row space of the
            # measured rows; otherwise its value is not identified: variance inf
            proj = A @ (np.linalg.pinv(B) @ B)
            undetermined = np.linalg.norm(A - proj, axis=1) > 1e-8 * (1.0 + np.linalg.norm(A, axis=1))
            ovar[undetermined, c] = np.inf
    return out.reshape(y.shape), ovar.reshape(var.shape)


class DenseLS(PostProcessor):
    """Dense weighted least squares (a reference for small trees, at most DENSE_MAX_NODES nodes)."""

    name = "dense"
    requires_variance = False
    consistent = True
    linear = True

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        x, v = dense_ls(tree, estimate.values, estimate.variance)
        return Estimate(x, v if estimate.variance is not None else None, {"method": "dense"})
