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

from typing import Any

import numpy as np

from hierdp.budgets._objective import TreeErrorObjective
from hierdp.budgets.greedy import _GreedyBase, _OracleMixin, _PriorMixin, greedy_split

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
    vertices = np.full((L, L), lo) + np.eye(L) * (total - L * lo)
    starts = [start, np.full(L, total / L)]
    ms_v = objective.mean_square(vertices)
    starts += [vertices[i] for i in np.argsort(ms_v)[:2] if np.isfinite(ms_v[i])]
    # the objective is not convex: also start from the best splits between two levels (a
    # coarse grid, scored in one sweep), where greedy's unit steps and the vertices miss
    pairs = _pair_grid(L, total, lo)
    if len(pairs):
        ms_p = objective.mean_square(pairs)
        starts += [pairs[i] for i in np.argsort(ms_p)[:2] if np.isfinite(ms_p[i])]
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


def _pair_grid(L: int, total: float, lo: float, steps: int = 10) -> np.ndarray:
    """Splits putting all but the floor on two levels, in shares 1/steps .. (steps-1)/steps."""
    rows = []
    free = total - L * lo
    for i in range(L):
        for j in range(i + 1, L):
            for k in range(1, steps):
                x = np.full(L, lo)
                x[i] += free * k / steps
                x[j] += free * (steps - k) / steps
                rows.append(x)
    return np.array(rows).reshape(-1, L)


class Optimal(_PriorMixin, _GreedyBase):
    """Prior-based continuous split minimising RMSRE_τ(T) (at least as good as ``greedy``).

    Same parameters as :class:`hierdp.budgets.greedy.Greedy` (``prior``, ``tau``,
    ``phases`` and ``gamma`` for the greedy start, ``postprocessed``).
    """

    name = "optimal"

    def __init__(self, *, prior: Any = None, **params: Any) -> None:
        super().__init__(**params)
        self.prior = prior

    def _split(self, obj, total):
        return optimal_split(obj, total, phases=self.phases, gamma=self.gamma)


class OptimalOracle(_OracleMixin, _GreedyBase):
    """Continuous split on the TRUE counts. NOT private: the release flags its ledger."""

    name = "optimal_oracle"

    def _split(self, obj, total):
        return optimal_split(obj, total, phases=self.phases, gamma=self.gamma)
