"""What a plan measured and what post-processing makes of it: :class:`Measurements`, :class:`Estimate`.

The two values handed between the stages of a release (design, "Data model"): a plan
returns :class:`Measurements` (noisy values, the exact variances of their noise, the spends
the accountant composes into the ledger); the post-processing chain turns them into an
:class:`Estimate`. Both are plain data: this module imports nothing from hierdp, so plans,
post-processors, the pipeline and results all use it without depending on one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Measurements", "Estimate"]


@dataclass
class Measurements:
    """What a plan measured: noisy node values and the exact variance of their noise.

    ``values`` has shape ``(n,)`` or ``(n, k)``; ``variance`` has shape ``(n,)`` (shared by
    the cells of a node) or the shape of ``values``, ``inf`` where a node was not measured.
    ``spends`` are the privacy costs the plan paid (:class:`hierdp.accounting.Spend`),
    ``levels`` its per-level summary for the ledger, ``info`` public diagnostics (e.g.
    per-node thresholds). Arrays are in the tree's internal order unless stated.
    Measurements are the only input a post-processing chain receives.
    """

    values: np.ndarray
    variance: np.ndarray | None = None
    spends: list[Any] = field(default_factory=list)
    levels: list[Any] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    #: the invariant nodes' published totals over their cells, NaN elsewhere ((n,), internal
    #: order), when a release keeps node totals exact (``invariants_cover="total"``); the
    #: top-down ``nonneg``/``round`` solve those nodes' cells jointly under them
    exact_totals: np.ndarray | None = None
    #: the release's tie-break seed (:func:`hierdp.keyed_noise.tiebreak_seed`): the integer
    #: steps break ties by uniforms keyed on it and the node; None: 0 (still keyed on the node)
    tiebreak: int | None = None

    def as_estimate(self) -> Estimate:
        """The measurements as the first estimate of a chain: linear in the noise, and not
        consistent unless the plan says otherwise (``info["consistent"]``/``info["linear"]``,
        e.g. a plan that hands on its own least-squares estimate, or integers).

        Returns
        -------
        Estimate
            The same values and variances, with the plan's ``linear``/``consistent`` flags.
        """
        return Estimate(values=self.values, variance=self.variance, info={},
                        measurement_variance=self.variance, linear=bool(self.info.get("linear", True)),
                        consistent=bool(self.info.get("consistent", False)), exact_totals=self.exact_totals,
                        tiebreak=self.tiebreak)


@dataclass
class Estimate:
    """Node values with their variances, as a post-processing step hands them on.

    ``values`` has shape ``(n,)`` or ``(n, k)``; ``variance`` has shape ``(n,)`` (shared by
    the cells of a node) or the shape of ``values``, ``inf`` where a node carries no
    information, or is ``None`` when unknown. ``info`` holds diagnostics (e.g. a KKT
    residual). Arrays are in the tree's internal (descending-height) order unless stated.

    The chain protocol (set by :func:`hierdp.postprocessors.chain.run_chain`, never by hand):
    ``measurement_variance`` is the variance of the original measurements (what a later
    weighted step such as ``nonneg`` optimises against); ``linear`` says the values are a
    linear function of the measurements (so ``variance`` is exact); ``consistent`` says
    every parent equals the sum of its children.
    """

    values: np.ndarray
    variance: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    measurement_variance: np.ndarray | None = None
    linear: bool = False
    consistent: bool = False
    #: the invariant nodes' published totals over their cells (NaN elsewhere), handed on by
    #: the chain (:attr:`Measurements.exact_totals`)
    exact_totals: np.ndarray | None = None
    #: the release's tie-break seed, handed on by the chain (:attr:`Measurements.tiebreak`)
    tiebreak: int | None = None

    @property
    def weights_variance(self) -> np.ndarray | None:
        """The variances a weighted step should use: the measurements' when known."""
        return self.measurement_variance if self.measurement_variance is not None else self.variance
