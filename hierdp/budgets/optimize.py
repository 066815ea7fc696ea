"""Continuous optimisation of the per-level budget split for RMSRE_τ(T).

Dawson et al. (2023, §5) optimise the split greedily on a grid of k units (Alg. 3);
here the same objective — the tree error computed from BLUE (or raw) variances — is
minimised over the continuous simplex {b ≥ b_min, Σ b = total} with SLSQP (scipy),
started from the greedy split, the equal split, the two best "all on one level" splits and
the two best splits between two levels (a coarse grid). The
objective is not convex in the budgets (the discrete Laplace variance falls
exponentially in ε, so concentrating budget can pay off more than greedy unit steps
see), hence the several starts. The result is never worse than greedy: the greedy split
is returned if no start improves on it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from hierdp.budgets import greedy as _greedy
from hierdp.budgets._objective import TreeErrorObjective
from hierdp.budgets.greedy import _GreedyBase, _OracleMixin, _PriorMixin, greedy_split, score_unit_steps

__all__ = ["Optimal", "OptimalOracle", "optimal_split"]


def optimal_split(objective: TreeErrorObjective, total: float, *, phases: int = 20, gamma: float = 1e-5,
                  maxiter: int = 200) -> np.ndarray:
    """Minimise RMSRE_τ(T)² over per-level budgets summing to ``total``.

    Gradients are forward differences, all levels scored in one sweep of the variance
    kernel. Each level keeps at least γ·total/(d+1), as in Alg. 3. Starts: the greedy
    split, the equal split, the two best vertices (all but the floor on one level) and
    the two best two-level splits of a coarse grid.
    """
    L = objective.tree.n_levels
    start = greedy_split(objective, total, phases=phases, gamma=gamma)
    best = start
    best_f = float(objective.mean_square(start)[0])
    if L == 1:
        return best
    lo = gamma * total / L
    scale = best_f if np.isfinite(best_f) and best_f > 0 else 1.0
    h = 1e-6 * total

    def fun(x: np.ndarray):
        x = np.maximum(x, lo)
        cand = np.vstack([x, x + np.eye(L) * h])
        ms = objective.mean_square(cand) / scale
        f0 = ms[0]
        grad = (ms[1:] - f0) / h
        if not np.all(np.isfinite(ms)):
            return 1e300, np.zeros(L)
        return float(f0), grad

    cons = ({"type": "eq", "fun": lambda x: np.sum(x) - total, "jac": lambda x: np.ones(L)},)
    floor = np.full(L, lo)
    starts = [start, np.full(L, total / L)]
    ms_v = score_unit_steps(objective, floor, total - L * lo)  # the vertices, in chunks
    for i in np.argsort(ms_v, kind="stable")[:2]:
        if np.isfinite(ms_v[i]):
            v = floor.copy()
            v[i] += total - L * lo
            starts.append(v)
    # the objective is not convex: also start from the best splits between two levels (a
    # coarse grid, scored in chunks), where greedy's unit steps and the vertices miss
    starts += _best_pairs(objective, L, total, lo)
    from scipy.optimize import minimize  # ~0.3-0.9 s to import: only when a split is optimised

    for x0 in starts:
        res = minimize(fun, x0, jac=True, method="SLSQP", bounds=[(lo, total)] * L, constraints=cons,
                       options={"maxiter": maxiter, "ftol": 1e-12})
        x = np.clip(res.x, lo, None)
        x = x * (total / x.sum())
        f = float(objective.mean_square(x)[0])
        if f < best_f:
            best, best_f = x, f
    return best


def _pair_grid(L: int, total: float, lo: float, steps: int = 10, first: int = 0,
               count: int | None = None) -> np.ndarray:
    """Splits putting all but the floor on two levels i < j, in shares 1/steps ..
    (steps-1)/steps of level i (pairs in lexicographic order, shares innermost): rows
    ``first .. first+count-1`` of that list (all by default)."""
    iu, ju = np.triu_indices(L, 1)
    total_rows = iu.size * (steps - 1)
    stop = total_rows if count is None else min(total_rows, first + count)
    r = np.arange(first, stop)
    pair, k = r // (steps - 1), r % (steps - 1) + 1
    free = total - L * lo
    x = np.full((r.size, L), lo)
    x[np.arange(r.size), iu[pair]] += free * k / steps
    x[np.arange(r.size), ju[pair]] += free * (steps - k) / steps
    return x


def _best_pairs(objective: TreeErrorObjective, L: int, total: float, lo: float, steps: int = 10,
                keep: int = 2) -> list[np.ndarray]:
    """The ``keep`` best rows of :func:`_pair_grid` (ties to the first), scored in chunks
    so that memory stays O(levels x classes per chunk), not O(levels³)."""
    n_rows = L * (L - 1) // 2 * (steps - 1)
    rows = max(1, _greedy._CHUNK_CELLS // max(L, getattr(objective, "n_groups", L)))
    best: list[tuple[float, int, np.ndarray]] = []
    for a in range(0, n_rows, rows):
        x = _pair_grid(L, total, lo, steps, a, rows)
        ms = objective.mean_square(x)
        for i in np.argsort(ms, kind="stable")[:keep]:
            if np.isfinite(ms[i]):
                best.append((float(ms[i]), a + int(i), x[i].copy()))
        best = sorted(best, key=lambda t: (t[0], t[1]))[:keep]
    return [x for _, _, x in best]


class _OptimalCost:
    #: SLSQP keeps a dense levels x levels matrix and solves with it every iteration, and
    #: the two-level starts score levels² / 2 x 9 splits over the whole tree (levels³ work)
    default_max_levels: ClassVar[int] = 256
    _cost: ClassVar[str] = ("SLSQP over one variable per level and a grid of two-level splits: memory grows as "
                            "levels², time as levels³")
    _instead: ClassVar[str] = "'greedy' (or 'greedy_oracle' for the oracle) or 'equal'"


class Optimal(_OptimalCost, _PriorMixin, _GreedyBase):
    """Prior-based continuous split minimising RMSRE_τ(T) (at least as good as ``greedy``).

    Same parameters as :class:`hierdp.budgets.greedy.Greedy` (``prior``, ``tau``,
    ``phases`` and ``gamma`` for the greedy start, ``postprocessed``); ``max_levels``
    defaults to 256 here (the optimiser is dense in the levels: memory levels², time
    levels³); deeper trees are refused with a :class:`~hierdp.errors.BudgetError`
    naming ``greedy`` and ``equal``.
    """

    name = "optimal"

    def __init__(self, *, prior: Any = None, **params: Any) -> None:
        super().__init__(**params)
        self.prior = prior

    def _split(self, obj, total):
        return optimal_split(obj, total, phases=self.phases, gamma=self.gamma)


class OptimalOracle(_OptimalCost, _OracleMixin, _GreedyBase):
    """Continuous split on the TRUE counts. NOT private: the release flags its ledger."""

    name = "optimal_oracle"

    def _split(self, obj, total):
        return optimal_split(obj, total, phases=self.phases, gamma=self.gamma)
