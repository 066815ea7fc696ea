"""The plan interface: how a release measures a structure.

A plan turns the release's :class:`~hierdp.accounting.PrivacyLoss` into a total budget in
its own unit (:meth:`Plan.total_for`); then it receives the public tree, the private node
values (internal order), that total, the sensitivity of one privacy unit and the random
source, and returns :class:`~hierdp.measurements.Measurements`: noisy values, their
variances where they exist, the spends it made (:class:`hierdp.accounting.Spend`, composed
by the accountant into the ledger) and a per-level summary. Plans are the only place
besides mechanisms where true counts meet randomness; what comes out is private.

The class attributes of :class:`Plan` are the whole protocol the release pipeline reads
(:mod:`hierdp.pipeline`): what the default post-processing is, whether the plan keeps
invariants and how, whether it takes the neighbour relation, and whether its measurements
are already an estimate.

Built-in: ``per_level`` (one mechanism call per level, with a budget strategy; Dawson et
al. §3-4, Cai et al. §5). The built-in ``per_level``, ``leaves`` and ``marginals`` plans
set :attr:`Plan.keyed_noise`: the release hands them its
:class:`~hierdp.keyed_noise.NoiseKey` and every node's noise depends only on the key, the
node's identity in the full tree and the cell, whatever subtree task measures it.
Third-party plans register through ``hierdp_register_plans``
and run :class:`hierdp.testing.BasePlanTests`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hierdp.accounting import PrivacyLoss, loss_total

if TYPE_CHECKING:
    from hierdp.measurements import Measurements
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["Plan"]


class Plan(ABC):
    """Base class of measurement plans (registered through ``hierdp_register_plans``).

    Subclasses set ``name`` and implement :attr:`budget_unit` and :meth:`measure`;
    parameters are constructor keywords. ``integer``: integer true counts give integer
    noisy values. A plan that reads true counts to *choose* how to measure (beyond
    measuring them) lists why in :meth:`non_private_reasons`; the ledger then marks the
    release non-private.
    """

    name: ClassVar[str]
    #: the post-processing chain a release uses when none is given (``blue`` needs the
    #: variances of a linear plan; a non-linear plan such as ``ghazi`` sets ``()``)
    default_postprocess: ClassVar[tuple[str, ...]] = ("blue",)
    #: the plan honours ``invariants=`` of :func:`hierdp.release`: ``measure`` takes an
    #: ``invariants`` keyword (internal-order boolean mask) and measures those nodes exactly
    #: at no cost; a release with invariants and a plan without this is refused
    supports_invariants: ClassVar[bool] = False
    #: what an invariant of a node with histogram cells can fix: ``"cells"`` (every cell)
    #: and/or ``"total"`` (the node's total over its cells). With more than one, ``measure``
    #: takes an ``invariants_cover`` keyword saying which the release asked for
    invariant_covers: ClassVar[tuple[str, ...]] = ("cells",)
    #: ``measure`` takes a ``neighbours`` keyword (``"add_remove"`` or ``"substitute"``),
    #: e.g. to derive the sensitivity of marginals (:func:`hierdp.rules.marginal_sensitivity`)
    takes_neighbours: ClassVar[bool] = False
    #: the measurements are already a consistent linear estimate with exact variances (a
    #: GLS estimate): post-processors that treat their input as independent measurements
    #: (linear steps that need variances, e.g. ``blue``) are refused after it
    returns_estimate: ClassVar[bool] = False
    #: ``measure`` takes ``key`` (a :class:`~hierdp.keyed_noise.NoiseKey`: noise keyed per
    #: node, the same for a node whatever subtree task measures it) and ``node_ids`` (each
    #: node's identity in the full tree); the release passes its key
    keyed_noise: ClassVar[bool] = False
    #: the release may run by subtree (``split=``, a spec's ``split``/``execution``): the plan
    #: measures node by node with a budget fixed on the whole tree, and the split stages
    #: (:mod:`hierdp.execution.stages`) know its measurements and its GLS
    runs_by_subtree: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"plan {self.name!r} takes no parameters, got {sorted(params)}")

    @property
    @abstractmethod
    def budget_unit(self) -> str:
        """``"epsilon"`` (pure ε-DP), ``"rho"`` (ρ-zCDP) or ``"approx"`` ((ε, δ)-DP)."""

    @property
    def budget_owner(self) -> str:
        """What the budget's unit comes from, for messages: ``"plan 'ghazi'"``, or the
        mechanism of a plan that measures with one (``"mechanism 'gaussian'"``)."""
        return f"plan {self.name!r}"

    def total_for(self, loss: PrivacyLoss) -> tuple[float, dict[str, Any]]:
        """The total budget in :attr:`budget_unit` for the release's (valid) ``loss``, and
        the ledger's guarantee fields (:func:`hierdp.accounting.loss_total`); refuses a kind
        of loss the plan cannot honour (:class:`~hierdp.errors.PrivacyError`).

        A plan written for the keyword form overrides :meth:`total` instead; it is called
        with the loss's fields.
        """
        if type(self).total is not Plan.total:  # a plan that still overrides the keyword form
            return self.total(epsilon=loss.epsilon, delta=loss.delta, rho=loss.rho)
        return loss_total(self.budget_unit, loss, mechanism=self.name)

    def calibrate(self, tree: Tree, loss: PrivacyLoss, total: float, guarantee: dict[str, Any], *,
                  sensitivity: Sensitivity, invariants: np.ndarray | None = None) -> tuple[float, dict[str, Any]]:
        """:meth:`total_for`'s ``total`` and ``guarantee`` once the public ``tree``, the
        ``sensitivity`` and the invariant mask are known (issue 34): a plan whose tight
        calibration depends on its per-level split (the discrete Gaussian's exact curve)
        refines them here. Reads no true count; by default returns them unchanged."""
        return total, guarantee

    def total(self, *, epsilon: float | None = None, delta: float | None = None,
              rho: float | None = None) -> tuple[float, dict[str, Any]]:
        """:meth:`total_for` of the loss these keywords give (validated here:
        :meth:`hierdp.accounting.PrivacyLoss.of`)."""
        return self.total_for(PrivacyLoss.of(epsilon, delta, rho, unit=self.budget_unit, who=self.budget_owner))

    @abstractmethod
    def measure(self, tree: Tree, values: np.ndarray, *, total: float, delta: float | None,
                sensitivity: Sensitivity, rng: RandomSource) -> Measurements:
        """Measure the internal-order ``values`` of ``tree`` within ``total`` (and ``delta``)."""

    def non_private_reasons(self) -> list[str]:
        """Why this plan's releases are not differentially private (empty for a private plan)."""
        return []

    def ledger_fields(self) -> dict[str, str]:
        """``mechanism`` and ``budget_strategy`` texts for the ledger."""
        return {"mechanism": self.name, "budget_strategy": self.name}

    def __repr__(self) -> str:
        return f"<plan {self.name!r}>"
