"""Two-pass BLUE for small trees as numpy passes by height class (issue 30 item 5).

The same estimator and case analysis as :func:`hierdp.postprocessors._blue_kernels.blue_2d`
(Dawson et al. 2023, Alg. 1 CombineEstimates + Alg. 2): the compiled kernels cost a
compile or a cache load on first use, and interpreted they cost ~10 µs a node, so small
trees run these passes instead, one numpy pass per height class. hierdp's internal order
keeps each height class contiguous and every child of a node of height h has height
< h, so the bottom-up pass can take the classes h = 1, 2, ... and scatter each class's
summaries into its parents (``np.bincount``), and the top-down pass the classes in the
reverse order. Equal to the kernels to round-off (the sums run in another order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["MAX_CLASSES", "usable", "blue_small"]

#: trees of more height classes than this run the kernels (each class costs ~30 numpy
#: calls, so a deep chain would cost more than the interpreted kernel)
MAX_CLASSES = 48


def usable(tree: Tree) -> bool:
    """Whether the tree is shallow enough for :func:`blue_small` (:data:`MAX_CLASSES`)."""
    return tree.n_nodes > 0 and int(tree.internal.height[0]) <= MAX_CLASSES


def _scatter(acc: np.ndarray, lo: int, hi: int, rel: np.ndarray, vals: np.ndarray) -> None:
    """``acc[lo + rel[i]] += vals[i]`` row by row, column by column (``np.bincount``: several
    times faster than ``np.add.at``; the parents of a height class span ``[lo, hi)``)."""
    for c in range(vals.shape[1]):
        acc[lo:hi, c] += np.bincount(rel, weights=vals[:, c], minlength=hi - lo)


def blue_small(tree: Tree, y: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BLUE estimates and their exact variances, by numpy passes per height class.

    Parameters
    ----------
    tree : Tree
        The public structure (internal order).
    y : float64 array (n, k)
        Measurements (finite; the caller validates).
    var : float64 array (n, kv), kv in {1, k}
        Their variances: ``inf`` marks an unmeasured node, 0 an exactly known one.

    Returns
    -------
    x, xvar : float64 arrays (n, k) and (n, kv)
        As :func:`hierdp.postprocessors._blue_kernels.blue_2d` writes them: pass 1
        ``z_v``, ``u_v`` by CombineEstimates (inverse-variance merge of ``y_v`` with the
        children's sum ``S``, variance sum ``U``); pass 2 ``x_c = z_c + w_c (x_p - S_p)``
        with ``w_c = u_c / U_p`` and ``Var(x_c) = u_c - u_c w_c + w_c^2 Var(x_p)``.
        Children without information (``u = inf``) share the residual by leaf count and
        keep ``inf`` (a single one is determined: ``Var(x_p) + U_p``); when ``U_p = 0``
        the residual is split equally.
    """
    ti = tree.internal
    parent, nch, leafcount, height = ti.parent, ti.n_children, ti.leafcount, ti.height
    n, k = y.shape
    kv = var.shape[1]
    inf = np.inf
    lc = leafcount.astype(np.float64)[:, None]
    z = np.empty((n, k))
    u = np.empty((n, kv))
    S = np.zeros((n, k))      # sum of the children's z
    U = np.zeros((n, kv))     # sum of the children's finite u
    cnt = np.zeros((n, kv))   # leaves below children with u = inf
    nunc = np.zeros((n, kv))  # children with u = inf
    top = int(height[0])
    slices = [ti.height_slice(h) for h in range(1, top + 1)]
    # ---- pass 1, bottom-up by height class
    for h, sl in enumerate(slices, start=1):
        vi = var[sl]
        if h == 1:  # leaves: z = y (0 when unmeasured), u = var
            zi = np.where(vi == inf, 0.0, y[sl])
            ui = vi.copy()
        else:  # CombineEstimates(y, v, S, U), the cases in blue_combine's order
            yi, Si = y[sl], S[sl]
            Ui = np.where(cnt[sl] > 0.0, inf, U[sl])
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                r = 1.0 / (vi + Ui)
                zi = (yi * Ui + Si * vi) * r
                ui = vi * Ui * r
            zi = np.where(Ui <= 0.0, Si, zi)
            ui = np.where(Ui <= 0.0, 0.0, ui)
            zi = np.where(vi <= 0.0, yi, zi)
            ui = np.where(vi <= 0.0, 0.0, ui)
            zi = np.where(Ui == inf, yi, zi)
            ui = np.where(Ui == inf, vi, ui)
            zi = np.where(vi == inf, Si, zi)
            ui = np.where(vi == inf, Ui, ui)
        z[sl] = zi
        u[sl] = ui
        par = parent[sl]
        if h == top:  # the root (nothing above)
            break
        lo = int(par.min())
        hi = int(par.max()) + 1
        rel = par - lo
        _scatter(S, lo, hi, rel, zi)
        isinf = ui == inf
        if isinf.any():
            _scatter(U, lo, hi, rel, np.where(isinf, 0.0, ui))
            _scatter(cnt, lo, hi, rel, np.where(isinf, lc[sl], 0.0))
            _scatter(nunc, lo, hi, rel, isinf.astype(np.float64))
        else:
            _scatter(U, lo, hi, rel, ui)
    # ---- pass 2, top-down (the root keeps x = z, xvar = u)
    x = z
    xvar = u
    for sl in reversed(slices[:-1]):
        par = parent[sl]
        ui = u[sl]
        Up, cp, vp = U[par], cnt[par], xvar[par]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            w = ui / Up
            val = ui - ui * w + w * w * vp
            val = np.where(val > 0.0, val, 0.0)
            # U = 0 (every child exact): equal shares, variance 0
            w = np.where(Up == 0.0, 1.0 / nch[par].astype(np.float64)[:, None], w)
            val = np.where(Up == 0.0, 0.0, val)
            # some child without information: it takes the residual by leaf count
            vdet = np.where((nunc[par] == 1.0) & (vp < inf), vp + Up, inf)
            uninf = ui == inf
            w = np.where(cp > 0.0, np.where(uninf, lc[sl] / cp, 0.0), w)
            val = np.where(cp > 0.0, np.where(uninf, vdet, ui), val)
        xvar[sl] = val
        x[sl] = x[sl] + w * (x[par] - S[par])
    return x, xvar
