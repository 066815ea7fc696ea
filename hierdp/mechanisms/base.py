"""The mechanism interface.

A mechanism adds noise to the true counts of one level of the tree at a time. The
release asks it for noisy values and for the exact variance of the noise it added, so
that post-processors (e.g. BLUE, Dawson et al. Alg. 2) can weight the measurements.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hierdp.errors import BudgetError
from hierdp.keyed_noise import KIND_NODE, KeyedStream, NoiseKey, nonce_word
from hierdp.rng import RandomSource

__all__ = ["Sensitivity", "Mechanism", "check_budget", "NEIGHBOURS", "keyed_rows"]

#: the neighbour relations a release can be private under: ``add_remove`` (unbounded DP: one
#: privacy unit is added or removed) and ``substitute`` (bounded DP: one unit's records are
#: replaced by another unit's, the number of units stays the same)
NEIGHBOURS = ("add_remove", "substitute")


@dataclass(frozen=True)
class Sensitivity:
    """Sensitivity of one level's node values to one privacy unit.

    ``l1`` and ``l2`` are the norms of the largest change one unit can make to the
    vector of node values of a level (all cells included). One row per person falling
    in one leaf gives ``l1 = l2 = 1``; with at most ``c`` rows per unit, ``l1 = c`` and
    ``l2 = c`` (all rows may land in the same node); ``linf`` bounds one cell.

    These are add/remove norms; :meth:`for_neighbours` gives the substitution ones.

    Parameters
    ----------
    l1 : float, default 1.0
        The L1 sensitivity (Laplace mechanisms).
    l2 : float, default 1.0
        The L2 sensitivity (Gaussian mechanisms).
    linf : float, default 1.0
        The largest change to one cell.

    Examples
    --------
    >>> from hierdp import Sensitivity
    >>> Sensitivity(l1=3, l2=3).for_neighbours("substitute").l1
    6.0
    """

    l1: float = 1.0
    l2: float = 1.0
    linf: float = 1.0

    def __post_init__(self) -> None:
        for name in ("l1", "l2", "linf"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) or v <= 0:
                shown = v if len(repr(v)) <= 40 else f"a number of {len(str(v))} digits"
                raise BudgetError(f"sensitivity {name} must be a positive finite number, got {shown}")

    def covers(self, other: Sensitivity) -> bool:
        """At least as large as ``other`` in the norms mechanisms calibrate on (l1, l2): a
        safe stand-in for it. (The release's floor check does not call this method, which a
        subclass could redefine: it accepts only a ``Sensitivity`` itself and compares the
        numbers in :func:`hierdp.rules.sensitivity_problem`.)"""
        return self.l1 >= other.l1 and self.l2 >= other.l2

    @classmethod
    def bounded(cls, max_contributions: int, cells_per_row: int = 1) -> Sensitivity:
        """Sensitivity when each unit contributes at most ``max_contributions`` rows."""
        c = float(max_contributions) * cells_per_row
        return cls(l1=c, l2=c, linf=float(max_contributions))

    def for_neighbours(self, neighbours: str) -> Sensitivity:
        """The sensitivity under ``neighbours`` of a release whose add/remove sensitivity is ``self``.

        Substitution replaces one unit's contribution ``u`` by another's ``v`` (both
        non-negative vectors over the level's nodes and cells, ``|u|_1, |v|_1 <= l1``), so
        the level changes by ``v - u``:

        * ``|v - u|_1 <= |u|_1 + |v|_1 <= 2 l1`` (reached when u and v sit in different
          nodes: one person moves from one node to another);
        * ``|v - u|_2^2 = |u|_2^2 + |v|_2^2 - 2 u.v <= |u|_2^2 + |v|_2^2 <= 2 l2^2`` since
          ``u.v >= 0`` for non-negative vectors, so ``|v - u|_2 <= sqrt(2) l2`` (reached by
          ``c`` rows moved together from one node to another: ``sqrt(2) c``);
        * one cell changes by at most what one unit holds there, ``linf`` (an addition and
          a removal in the same cell cancel).

        With ``max_contributions = c`` this gives ``(2c, sqrt(2) c)``; with one row per
        person ``(2, sqrt(2))`` per level, as long as the person stays in the tree (one who
        leaves the declared domains changes each level like a removal, which is covered).
        """
        if neighbours == "add_remove":
            return self
        if neighbours == "substitute":
            return Sensitivity(l1=2.0 * self.l1, l2=math.sqrt(2.0) * self.l2, linf=self.linf)
        raise BudgetError(f"neighbours must be one of {', '.join(map(repr, NEIGHBOURS))}, got {neighbours!r:.60}")


class Mechanism(ABC):
    """Base class of noise mechanisms (registered through ``hierdp_register_mechanisms``).

    Subclasses set ``name`` (registry key), ``budget_unit`` (``"epsilon"`` for pure
    ε-DP mechanisms, ``"rho"`` for ρ-zCDP ones) and ``integer`` (whether the output of
    integer input is integer), and implement :meth:`variance` and :meth:`sample`.
    Parameters of a mechanism are keyword arguments of its constructor.

    Conventions checked by :class:`hierdp.testing.BaseMechanismTests`: ``variance`` is
    the exact per-cell variance, ``inf`` at budget 0 (an unmeasured level); an invalid
    budget raises :class:`~hierdp.errors.BudgetError` (use :meth:`check_budget`);
    ``sample`` works on any shape and draws all randomness from ``rng``;
    :meth:`audit_neighbours` gives the worst-case pair for :mod:`hierdp.accounting.audit`.

    Releases measure through :meth:`sample_keyed` (noise keyed per node,
    :mod:`hierdp.keyed_noise`), whose default calls ``sample`` once per node on that node's
    own keyed stream; a mechanism for large trees overrides it (and :meth:`keyed_sampler`).
    """

    name: ClassVar[str]
    budget_unit: ClassVar[str] = "epsilon"
    integer: ClassVar[bool] = False

    @property
    def delta_per_use(self) -> float:
        """δ of one use (one measured level) of an (ε, δ) mechanism; 0 for pure ε and ρ ones.
        A release accounts it (basic composition) and needs ``delta=`` to cover it."""
        return 0.0

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"mechanism {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        """Exact variance of the noise added to each cell at this per-level budget."""

    @abstractmethod
    def sample(
        self, values: np.ndarray, budget: float, sensitivity: Sensitivity, rng: RandomSource
    ) -> np.ndarray:
        """Noisy copy of ``values`` (any shape), private at ``budget`` for ``sensitivity``."""

    def sampler(self, budget: float, sensitivity: Sensitivity, *,
                many_calls: bool = False) -> Callable[[np.ndarray, RandomSource], np.ndarray]:
        """``f(values, rng)`` = ``self.sample(values, budget, sensitivity, rng)``, for a plan
        that samples many levels at one budget (a deep tree: 10⁵ levels). A subclass may work
        out its parameters once here; ``many_calls`` says that many calls will follow (worth
        a one-off cost such as loading a compiled kernel). The draws are those of ``sample``."""
        return lambda values, rng: self.sample(values, budget, sensitivity, rng)

    def sample_keyed(self, values: np.ndarray, budget: float, sensitivity: Sensitivity, key: NoiseKey,
                     ids: np.ndarray, measurement: int = 0) -> np.ndarray:
        """Noisy copy of ``values`` (shape ``(n,)`` or ``(n, k)``: row ``r`` is node
        ``ids[r]``, its global identity) with noise keyed per node (:mod:`hierdp.keyed_noise`):
        row ``r``'s noise depends only on ``key``, ``measurement``, ``ids[r]`` and the cell,
        never on the other rows or their order, so any split of the nodes gives the same noise.

        This default serves a third-party mechanism that implements only :meth:`sample`:
        ``sample`` is called once per row with a random source of that node's own (an
        unbounded ChaCha20 stream of nonce ``(3, measurement, ids[r])``). Correct and
        split-invariant, but a Python call per node (about 10-50 µs): override it with a
        vectorised version for large trees, as the built-in mechanisms do.
        """
        vals, ids = keyed_rows(values, ids)
        n0 = nonce_word(KIND_NODE, measurement)
        rows = [np.asarray(self.sample(vals[r:r + 1], budget, sensitivity, KeyedStream(key, n0, int(ids[r]))))
                for r in range(vals.shape[0])]
        if not rows:
            return np.asarray(self.sample(vals, budget, sensitivity, KeyedStream(key, n0, 0)))
        return np.concatenate(rows, axis=0).reshape(vals.shape)

    def keyed_sampler(self, budget: float, sensitivity: Sensitivity) -> Callable[..., np.ndarray]:
        """``f(values, key, ids, measurement)`` = :meth:`sample_keyed` at this budget, for a
        plan that samples many levels at one budget (a subclass may work out its parameters once)."""
        return lambda values, key, ids, measurement=0: self.sample_keyed(values, budget, sensitivity, key, ids,
                                                                         measurement)

    def check_budget(self, budget: float) -> float:
        """The budget as a float; :class:`BudgetError` unless it is finite and > 0."""
        return check_budget(budget, self.budget_unit, self.name)

    def audit_neighbours(self, sensitivity: Sensitivity) -> tuple[np.ndarray, np.ndarray]:
        """Worst-case neighbouring inputs for :mod:`hierdp.accounting.audit`: one cell moved by the full
        sensitivity (L1 for ε mechanisms, L2 for ρ ones). Override when another pair is worse."""
        delta = sensitivity.l1 if self.budget_unit == "epsilon" else sensitivity.l2
        return np.zeros(1, dtype=np.int64 if self.integer else np.float64), \
            np.array([delta], dtype=np.int64 if self.integer else np.float64)

    def __repr__(self) -> str:
        return f"<mechanism {self.name!r}>"


def keyed_rows(values: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (shape ``(n,)`` or ``(n, k)``) and ``ids`` (``n`` non-negative integer
    node identities) checked for a keyed sample."""
    vals = np.asarray(values)
    ids_arr = np.asarray(ids)
    if vals.ndim not in (1, 2):
        raise ValueError(f"keyed noise takes values of shape (n,) or (n, cells), got shape {vals.shape}")
    if ids_arr.ndim != 1 or ids_arr.shape[0] != vals.shape[0] or not (
            ids_arr.size == 0 or np.issubdtype(ids_arr.dtype, np.integer)):
        raise ValueError(f"keyed noise needs one integer node identity per row: {vals.shape[0]} rows, ids of shape "
                         f"{ids_arr.shape} ({ids_arr.dtype})")
    ids_arr = ids_arr.astype(np.int64, copy=False)
    if ids_arr.size and int(ids_arr.min()) < 0:
        raise ValueError("node identities must be non-negative (the node's index in the full tree's internal order)")
    return vals, ids_arr


def check_budget(budget: object, unit: str = "epsilon", mechanism: str = "") -> float:
    """Validate one per-level budget: a finite number > 0 (0 means "not measured" and is
    handled by the caller, never by a mechanism)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float, np.integer, np.floating)) \
            or not _finite(budget) or budget <= 0:
        who = f" for mechanism {mechanism!r}" if mechanism else ""
        shown = budget if len(repr(budget)) <= 40 else f"a number of {len(str(budget))} digits"
        raise BudgetError(f"{unit} budget{who} must be a finite number > 0, got {shown}")
    return float(budget)


def _finite(v: object) -> bool:
    """Whether ``v`` is a finite float64 (an int too large for float64 is not)."""
    try:
        return math.isfinite(float(v))  # type: ignore[arg-type]
    except OverflowError:
        return False
