"""Greedy per-level budgeting (Dawson et al. 2023, §5 and App. B, Algorithm 3).

``greedy`` is prior-based: it optimises the tree error on counts the caller supplies
(public or earlier data, or an earlier *noisy* release — the privacy-respecting use the
paper recommends), or, without a prior, on a data-independent objective.
``greedy_oracle`` optimises on the true counts: it is not differentially private, the
release marks its ledger so.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hierdp.budgets._objective import TreeErrorObjective, as_counts
from hierdp.budgets.base import BudgetStrategy
from hierdp.errors import BudgetError

if TYPE_CHECKING:
    from hierdp.mechanisms.base import Mechanism, Sensitivity
    from hierdp.tree import Tree

__all__ = ["Greedy", "GreedyOracle", "greedy_split"]

_TIE_RTOL = 1e-12
#: candidate splits are scored in chunks of at most this many cells (rows x max(levels,
#: classes)): memory stays O(levels + classes) per chunk however deep the tree
_CHUNK_CELLS = 1 << 21


def score_unit_steps(objective: TreeErrorObjective, base: np.ndarray, step: float) -> np.ndarray:
    """RMSRE_τ(T)² of the L candidates ``base + step·e_i`` (one per level), scored in
    chunks so that no L x L matrix is ever built (a 10⁴-level path would need 800 MB)."""
    L = base.size
    rows = max(1, _CHUNK_CELLS // max(L, getattr(objective, "n_groups", L)))
    out = np.empty(L)
    for a in range(0, L, rows):
        b = min(L, a + rows)
        cand = np.repeat(base[None, :], b - a, axis=0)
        cand[np.arange(b - a), np.arange(a, b)] += step
        out[a:b] = objective.mean_square(cand)
    return out


def greedy_split(objective: TreeErrorObjective, total: float, *, phases: int = 20,
                 gamma: float = 1e-5) -> np.ndarray:
    """Algorithm 3: start every level at γ·total/(d+1), then hand out (1-γ)·total in
    ``phases`` equal units, each to the level whose increase gives the lowest RMSRE_τ(T).

    All d+1 candidates of a phase are scored in one sweep of the variance kernel. Ties
    (scores within a relative 1e-12, i.e. equal up to rounding) go to the level nearest
    the root. (The paper starts from γ·ε/d per level; we use
    d+1 so that the split sums to exactly ``total``.) Returns budgets in depth order.
    """
    L = objective.tree.n_levels
    b = np.full(L, gamma * total / L)
    unit = (1.0 - gamma) * total / phases
    for _ in range(phases):
        err = score_unit_steps(objective, b, unit)
        # candidates equal up to rounding are ties (levels the tree treats symmetrically)
        i = int(np.flatnonzero(err <= err.min() * (1.0 + _TIE_RTOL))[0])
        b = b.copy()
        b[i] += unit
    return b * (total / b.sum())


class _GreedyBase(BudgetStrategy):
    """Shared parameters of the greedy strategies.

    ``max_levels``: the deepest tree the strategy splits a budget for (default
    :attr:`default_max_levels`), refused with a :class:`BudgetError` before any work.
    Scoring one phase costs (levels x classes) kernel steps, at least levels²: a
    10⁵-level path would run for hours (and, before candidates were scored in chunks,
    allocate 80 GB).
    """

    default_max_levels: ClassVar[int] = 10_000

    def __init__(self, *, tau: float = 10.0, phases: int = 20, gamma: float = 1e-5,
                 postprocessed: bool = True, max_levels: int | None = None) -> None:
        def number(x: Any) -> bool:
            return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)

        if isinstance(phases, bool) or not isinstance(phases, (int, np.integer)) or phases < 1:
            raise BudgetError(f"phases must be a positive integer, got {phases!r}")
        if not (number(gamma) and 0 < gamma < 1):
            raise BudgetError(f"gamma must be a number in (0, 1), got {gamma!r}")
        if not (number(tau) and np.isfinite(tau) and tau > 0):
            raise BudgetError(f"tau must be a positive number, got {tau!r}")
        if not isinstance(postprocessed, (bool, np.bool_)):
            raise BudgetError(f"postprocessed must be true or false, got {postprocessed!r}")
        if max_levels is None:
            max_levels = self.default_max_levels
        if isinstance(max_levels, bool) or not isinstance(max_levels, (int, np.integer)) or max_levels < 1:
            raise BudgetError(f"max_levels must be a positive integer, got {max_levels!r}")
        self.max_levels = int(max_levels)
        self.tau = float(tau)
        self.phases = int(phases)
        self.gamma = float(gamma)
        self.postprocessed = bool(postprocessed)
        self.last_objective: TreeErrorObjective | None = None

    _cost: ClassVar[str] = "its time grows as levels² or faster"
    _instead: ClassVar[str] = "'equal'"

    @abstractmethod
    def _counts(self, tree: Tree, true_values: np.ndarray | None) -> np.ndarray | None:
        """The counts that weigh the nodes: the prior, or the true counts for oracles."""

    def _objective(self, tree: Tree, mechanism: Mechanism, sensitivity: Sensitivity,
                   true_values: np.ndarray | None) -> TreeErrorObjective:
        obj = TreeErrorObjective(tree, self._counts(tree, true_values), tau=self.tau, mechanism=mechanism,
                                 sensitivity=sensitivity, postprocessed=self.postprocessed)
        self.last_objective = obj
        return obj

    def _split(self, obj: TreeErrorObjective, total: float) -> np.ndarray:
        return greedy_split(obj, total, phases=self.phases, gamma=self.gamma)

    def allocate(self, tree, total, *, mechanism, sensitivity, true_values=None):
        if not (np.isfinite(total) and total > 0):
            raise BudgetError(f"total budget must be a positive number, got {total!r}")
        if tree.n_levels > self.max_levels:  # public: the tree's shape, checked before any work
            raise BudgetError(
                f"budget {self.name!r} splits over at most max_levels={self.max_levels:,} levels ({self._cost}); "
                f"this tree has {tree.n_levels:,}: use budget {self._instead}, or pass a larger "
                "max_levels in the strategy's parameters")
        obj = self._objective(tree, mechanism, sensitivity, true_values)
        b = self._split(obj, float(total))
        return {name: float(x) for name, x in zip(tree.level_names, b)}


class _PriorMixin:
    prior: Any

    def _counts(self, tree, true_values):
        return None if self.prior is None else as_counts(tree, self.prior, "prior")


class _OracleMixin:
    reads_true_counts: ClassVar[bool] = True

    def _counts(self, tree, true_values):
        if true_values is None:
            raise BudgetError(
                f"budget {self.name!r} reads the true counts and got none; the release passes them only to "
                "strategies with reads_true_counts=True (use a prior-based strategy for a private release)"
            )
        return as_counts(tree, true_values, "true")


class Greedy(_PriorMixin, _GreedyBase):
    """Prior-based greedy split (Dawson et al. Alg. 3) minimising RMSRE_τ(T).

    Parameters
    ----------
    prior : array, Series or ReleaseResult, optional
        Counts for every node in the tree's node order, from public or earlier data or an
        earlier noisy release (the paper's "prior-based" budgeting). ``None`` weights all
        nodes alike (1/τ²): a data-independent split minimising the level-averaged variance.
    tau : float
        The RMSRE threshold τ (default 10).
    phases : int
        Number k of budget units (default 20, as in the paper).
    gamma : float
        The infinitesimal starting share γ (default 1e-5).
    postprocessed : bool
        Score BLUE estimates (default) or raw noisy measurements.
    max_levels : int, optional
        The deepest tree split (default 10,000): one phase scores every level on the
        whole tree (at least levels² steps), so deeper trees are refused with a
        :class:`~hierdp.errors.BudgetError` before any work.
    """

    name = "greedy"

    def __init__(self, *, prior: Any = None, **params: Any) -> None:
        super().__init__(**params)
        self.prior = prior


class GreedyOracle(_OracleMixin, _GreedyBase):
    """Greedy split on the TRUE counts (Dawson et al. App. B as stated). NOT private:
    the split depends on the data; the release flags its ledger as non-private."""

    name = "greedy_oracle"
