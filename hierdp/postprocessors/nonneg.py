"""Consistent *and* non-negative estimates: exact weighted least squares with x >= 0.

Beyond the papers (Cai et al. name it as open at scale in their conclusion). Solves

    minimise  sum_i (x_i - y_i)^2 / var_i   subject to  x consistent,  x >= 0,

where ``var`` are the *measurement* variances (``inf`` = unmeasured, weight 0). Every
consistent x is the aggregate of its leaf values l, and x >= 0 iff l >= 0, so this is
a non-negative least-squares problem in l. Because the unconstrained optimum xhat (BLUE,
the weighted projection onto the consistent subspace) satisfies Pythagoras,
``|x - y|_W^2 = |x - xhat|_W^2 + |xhat - y|_W^2`` for consistent x, the solver works on
xhat.

Algorithm: block principal pivoting for the linear complementarity problem of the KKT
conditions (Judice & Pires 1994; Murty's single-pivot rule as the finite fallback).
For an active set Z (leaves fixed at 0) the equality-constrained problem is one BLUE
pass with those leaves measured exactly at 0; the leaf gradient
``g_j = sum over the path root..j of w_i (x_i - xhat_i)`` is one top-down pass.
Optimality (KKT): l >= 0, g >= 0 on fixed leaves, g = 0 on free leaves. Each iteration
is O(n k); the iteration count depends on the data (typically a handful).

The result's ``info`` reports ``kkt_residual`` (relative), ``complementarity``,
``iterations``, ``converged`` and ``objective`` (against the input values).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp.errors import DataError
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _nonneg_kernels as NK
from hierdp.postprocessors.base import Estimate, PostProcessor, checked_variance, finite_values

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["NonNegative", "NonnegConvergenceWarning", "nonneg"]


class NonnegConvergenceWarning(UserWarning):
    """The non-negative solver stopped at ``max_iter`` before the KKT conditions held."""


def _blue(tree: Tree, y2: np.ndarray, d2: np.ndarray) -> np.ndarray:
    x = np.empty_like(y2)
    xv = np.empty_like(d2)
    BK.blue_2d(tree.internal.parent, tree.internal.n_children, tree.internal.leafcount, y2, d2, x, xv)
    return x


def nonneg(tree: Tree, values: np.ndarray, variance: np.ndarray | None = None, *, max_iter: int = 200,
           tol: float = 1e-9) -> tuple[np.ndarray, dict[str, Any]]:
    """Exact non-negative consistent weighted least squares (internal order).

    ``values`` (n,) or (n, k) are measurements or a consistent estimate; ``variance`` the
    measurement variances ((n,) or like ``values``; ``None`` = uniform; ``inf`` =
    unmeasured; must be > 0). Returns ``(x, info)``; ``x`` is consistent (it is the
    aggregate of its non-negative leaves) and non-negative.
    """
    y = finite_values(tree, values)
    n = tree.n_nodes
    k = 1 if y.ndim == 1 else y.shape[1]
    var = checked_variance(tree, variance, y.shape)
    if var is None:
        var = np.ones(n)
    if np.any(var == 0):
        raise DataError("nonneg needs positive variances (0 = exactly known nodes are not supported); "
                        "use 'blue' for exact constraints")
    y2 = np.ascontiguousarray(y.reshape(n, k))
    d2 = np.ascontiguousarray(np.broadcast_to(var.reshape(n, -1), (n, k)))
    xhat = _blue(tree, y2, d2)
    n1 = n - tree.n_leaves                       # leaves are the suffix [n1, n) (Def. 6 order)
    if n1 == 0:  # a single node: the closest non-negative value
        x1 = np.where(np.isinf(d2), 0.0, np.maximum(y2, 0.0))
        return x1.reshape(y.shape), {"method": "nonneg", "iterations": 0, "converged": True,
                                     "kkt_residual": 0.0, "complementarity": 0.0,
                                     "objective": float(np.sum(np.where(np.isinf(d2), 0.0, (x1 - y2) ** 2 / d2))),
                                     "n_zero_leaves": int(np.sum(x1 == 0))}
    fixed = xhat[n1:] < 0.0                       # Z: leaves held at 0, per column
    best = np.full(k, np.iinfo(np.int64).max)
    pivots = np.full(k, 3)
    bad = np.zeros_like(fixed)
    x = np.empty_like(y2)
    it = 0
    converged = False
    while True:
        it += 1
        nbad = NK.nnls_step_2d(tree.internal.parent, tree.internal.n_children, tree.internal.leafcount,
                               n1, xhat, d2, fixed, tol, x, bad)
        if not nbad.any():
            converged = True
            break
        if it >= max_iter:
            break
        for c in np.flatnonzero(nbad):  # a loop over columns, each vectorised
            if nbad[c] < best[c]:       # block principal pivoting: exchange every violation
                best[c] = nbad[c]
                pivots[c] = 3
                fixed[:, c] ^= bad[:, c]
            elif pivots[c] > 0:
                pivots[c] -= 1
                fixed[:, c] ^= bad[:, c]
            else:  # Murty's rule: flip the violating leaf with the largest index only
                j = np.flatnonzero(bad[:, c])[-1]
                fixed[j, c] = not fixed[j, c]
    # exact zeros on fixed leaves, round-off clipped on free ones, re-aggregated (in place)
    resid, comp, objective = NK.nnls_finish_2d(tree.internal.parent, n1, y2, xhat, d2, fixed, x)
    out = x
    info: dict[str, Any] = {
        "method": "nonneg",
        "iterations": it,
        "converged": converged,
        "kkt_residual": float(resid),
        "complementarity": float(comp),
        "objective": float(objective),
        "n_zero_leaves": int(fixed.sum()),
    }
    if not converged:
        warnings.warn(f"nonneg stopped after {max_iter} iterations with KKT residual {resid:.3g}; "
                      "raise max_iter", NonnegConvergenceWarning, stacklevel=2)
    return out.reshape(y.shape), info


class NonNegative(PostProcessor):
    """Exact non-negative consistent weighted least squares (block principal pivoting;
    KKT residual reported in ``info``). Parameters: ``max_iter`` (200), ``tol`` (1e-9)."""

    name = "nonneg"
    requires_variance = False
    consistent = True

    def __init__(self, max_iter: int = 200, tol: float = 1e-9) -> None:
        ok = (isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool) and max_iter >= 1
              and isinstance(tol, (int, float, np.floating)) and 0 < float(tol) < 1e-2)
        if not ok:
            raise DataError(f"nonneg needs an integer max_iter >= 1 and a number 0 < tol < 0.01, "
                            f"got {max_iter!r}, {tol!r}")
        self.max_iter = int(max_iter)
        self.tol = float(tol)

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        x, info = nonneg(tree, estimate.values, estimate.weights_variance, max_iter=self.max_iter, tol=self.tol)
        var = None if estimate.variance is None else np.array(estimate.variance, dtype=np.float64)
        if var is not None and not (estimate.linear and estimate.consistent):
            # the incoming variances are the measurements': report those of the linear
            # estimate with the same weights (BLUE), as after ["blue", "nonneg"]
            from hierdp.postprocessors.blue import blue

            var = blue(tree, np.zeros(np.shape(estimate.values)), var).variance
        if var is not None:
            info["variance_note"] = "variance of the linear consistent estimate (BLUE) with the same weights; " \
                                    "nonneg is not linear"
        return Estimate(x, var, info)
