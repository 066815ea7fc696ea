"""The tree error RMSRE_τ(T) of a per-level budget split, computed analytically.

Dawson et al. 2023 §3.2 define the tree error as the root of the level-averaged mean
squared relative error, RMSRE_τ(T)² = 1/(d+1) Σ_i 1/|L_i| Σ_{v∈L_i} RMSRE_τ(c_v, ĉ_v)², and
App. B notes that with unbiased estimates RMSRE_τ(c_v, x̂_v)² = var̂_v / max(τ, c_v)², so
the error of a split follows from variances alone: the mechanism's per-level variance
(``mechanism.variance(budget, sensitivity)``) and, after post-processing, the BLUE
variances of :mod:`hierdp.budgets._variance`. The counts ``c`` are a prior (public or
earlier, possibly noisy, data) or, for oracle strategies only, the true counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hierdp._kernels.jit import numba as nb
from hierdp.budgets._variance import class_tree, class_variances
from hierdp.errors import BudgetError

if TYPE_CHECKING:
    from hierdp.mechanisms.base import Mechanism, Sensitivity
    from hierdp.tree import Tree

__all__ = ["TreeErrorObjective", "as_counts"]


def as_counts(tree: Tree, counts: Any, what: str = "prior") -> np.ndarray:
    """Node counts in external order as float; accepts an array, a Series or a ReleaseResult."""
    if counts is None:
        raise BudgetError(f"no {what} counts given")
    est = getattr(counts, "estimate", None)
    if est is not None and hasattr(est, "values"):
        other = getattr(counts, "tree", None)
        if other is not None and other is not tree and other != tree:
            raise BudgetError(f"the {what} release was made on a different tree; pass its values aligned to this tree")
        counts = est.values
    if isinstance(counts, (pd.Series, pd.DataFrame)):
        idx = counts.index
        if not (isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1):
            # labelled by node id: align by the labels, never by position
            ids = pd.Index(np.arange(tree.n_nodes))
            if not (idx.is_unique and len(idx) == tree.n_nodes and ids.isin(idx).all()):
                raise BudgetError(f"{what} counts as a pandas object must be indexed by node id 0..{tree.n_nodes - 1} "
                                  "(each once), or pass a plain array in the tree's node order")
            counts = counts.reindex(ids)
        counts = counts.to_numpy()
    elif hasattr(counts, "to_numpy"):
        counts = counts.to_numpy()
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim not in (1, 2) or c.shape[0] != tree.n_nodes:
        raise BudgetError(
            f"{what} counts must have one row per node ({tree.n_nodes}) in the tree's node order, got shape {c.shape}"
        )
    if not np.all(np.isfinite(c)):
        raise BudgetError(f"{what} counts contain NaN or infinity; fill unknown nodes with 0")
    return c


def _count(idx) -> int:
    return idx.stop - idx.start if isinstance(idx, slice) else int(np.size(idx))


@nb.njit(cache=True, nogil=True)
def _group_weights(group, depth, counts, tau, inv_norm, out):
    """out[g] = Σ_{v in g} 1 / (max(τ, c_v)² |L_{d(v)}| (d+1)), one pass."""
    for i in range(counts.shape[0]):
        den = counts[i] if counts[i] > tau else tau
        out[group[i]] += inv_norm[depth[i]] / (den * den)
    return out


class TreeErrorObjective:
    """RMSRE_τ(T) as a function of per-level budgets (vectorised over candidate splits).

    ``counts`` (external order, ``(n,)`` or ``(n, k)``) define the weights
    1/max(τ, c_v)²; ``None`` weights every node by 1/τ² (a data-independent objective:
    the level-averaged variance). ``postprocessed=True`` scores the BLUE estimates
    (Dawson et al. Alg. 2), ``False`` the raw noisy measurements. ``n_evaluations``
    counts the candidate splits scored so far, ``n_passes`` the kernel sweeps.
    """

    def __init__(self, tree: Tree, counts: np.ndarray | None, *, tau: float, mechanism: Mechanism,
                 sensitivity: Sensitivity, postprocessed: bool = True) -> None:
        if not (np.isfinite(tau) and tau > 0):
            raise BudgetError(f"tau must be a positive number, got {tau!r}")
        self.tree = tree
        self.mechanism = mechanism
        self.sensitivity = sensitivity
        self.postprocessed = bool(postprocessed)
        L = tree.n_levels
        self.ct = class_tree(tree) if postprocessed else None
        level_size = np.array([_count(idx) for idx in tree.internal.level_index], dtype=np.float64)
        inv_norm = 1.0 / (level_size * L)  # 1 / (|L_i| (d+1))
        group = self.ct.node_class if postprocessed else tree.internal.depth
        n_groups = self.ct.n_classes if postprocessed else L
        self.n_groups = n_groups  # the width of one candidate's sweep (classes, or levels when raw)
        if counts is None:  # every node weighs 1/tau^2: class sizes suffice, no pass over the nodes
            if postprocessed:
                self.weights = self.ct.size * inv_norm[self.ct.depth] / tau**2
            else:
                self.weights = level_size * inv_norm / tau**2
        else:
            c = tree.to_internal(np.asarray(counts, dtype=np.float64))
            if c.ndim == 1:
                self.weights = _group_weights(group, tree.internal.depth, np.ascontiguousarray(c), float(tau), inv_norm,
                                              np.zeros(n_groups))
            else:
                q = (1.0 / np.maximum(tau, c) ** 2).mean(axis=1) * inv_norm[tree.internal.depth]
                self.weights = np.bincount(group, weights=q, minlength=n_groups)
        self.n_evaluations = 0
        self.n_passes = 0

    def level_variances(self, budgets: np.ndarray) -> np.ndarray:
        """Per-level input variances ``(L, C)`` for candidate budgets ``(C, L)`` (0 → inf)."""
        b = np.atleast_2d(np.asarray(budgets, dtype=np.float64))
        vals, inv = np.unique(b, return_inverse=True)
        var = np.full(vals.shape, np.inf)
        for i, x in enumerate(vals):
            if x > 0:
                var[i] = float(self.mechanism.variance(float(x), self.sensitivity))
        return var[inv.reshape(b.shape)].T

    def mean_square(self, budgets: np.ndarray) -> np.ndarray:
        """RMSRE_τ(T)² for each candidate split (rows of ``budgets``)."""
        lv = self.level_variances(budgets)
        self.n_evaluations += lv.shape[1]
        self.n_passes += 1
        if self.postprocessed:
            var = class_variances(self.ct, lv, copy=False)
        else:
            var = lv
        with np.errstate(invalid="ignore"):
            ms = (var @ self.weights) if self.postprocessed else (self.weights @ var)
        return np.where(np.isnan(ms), np.inf, ms)

    def __call__(self, budgets: np.ndarray) -> np.ndarray:
        """RMSRE_τ(T) for each candidate split."""
        return np.sqrt(self.mean_square(budgets))
