"""Release counts on a private PrivTree decomposition of a public taxonomy, or of mixed
numeric × categorical attributes (Zhang, Xiao & Xie 2016, §3.5).

:func:`release_taxonomy` spends ``structure_share`` of ε on
:class:`~hierdp.decompositions.taxonomy.TaxonomyPrivTree` (which categories to expand, a
private output recorded in the ledger), counts the released leaves with the rest through
the ``leaves`` plan (disjoint leaves: parallel composition; sensitivity x with
``contributions`` = x) and makes every released node the sum of its leaves (BLUE by
default). The result is a normal :class:`~hierdp.result.ReleaseResult` on the released
sub-taxonomy, whose labels are the taxonomy's. :func:`release_mixed` does the same with
:class:`~hierdp.decompositions.mixed.MixedPrivTree` on a DataFrame and returns a
:class:`RegionsResult` whose ``frame`` has one row per region.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from hierdp import registry, rules
from hierdp.accounting import pure_epsilon
from hierdp.accounting.session import Reservation, Session
from hierdp.decompositions.mixed import MixedPrivTree, MixedStructure
from hierdp.decompositions.taxonomy import TaxonomyPrivTree
from hierdp.errors import BudgetError, DataError
from hierdp.frontends.base import (
    PLAN_DEFAULT,
    admit_private_structure,
    canonical_keywords,
    door_rng,
    release_path,
    take,
)
from hierdp.plans.leaves import Leaves
from hierdp.result import ReleaseResult
from hierdp.tree import Tree

__all__ = ["release_taxonomy", "release_mixed", "RegionsResult", "TAXONOMY_PARAMETERS", "MIXED_PARAMETERS"]


#: The keywords of the taxonomy PrivTree (beside the shared release keywords).
TAXONOMY_PARAMETERS: tuple[str, ...] = ("score", "sensitivity", "theta", "beta", "max_depth")
#: The keywords of the mixed PrivTree (beside the shared release keywords).
MIXED_PARAMETERS: tuple[str, ...] = ("theta", "beta", "max_depth", "max_halvings", "max_nodes")


def release_taxonomy(taxonomy: Tree, leaf_counts: Any, epsilon: float | None = None, *, delta: float | None = None,
                     rho: float | None = None, session: Session | Reservation | None = None, seed: int | None = None,
                     neighbours: str = "add_remove", invariants: Any = None, postprocess: Any = PLAN_DEFAULT,
                     epsilon_share: float | None = None, max_contributions: int | None = None,
                     score: str | Callable[[np.ndarray], np.ndarray] = "count", sensitivity: int | None = None,
                     mechanism: Any = "discrete_laplace", notes: Sequence[str] = (), privacy_unit: str | None = None,
                     _door: str = "release_taxonomy()", **params: Any) -> ReleaseResult:
    """PrivTree on ``taxonomy`` (Zhang et al. 2016, §3.5), then the leaf counts.

    ``leaf_counts``: private counts of the taxonomy's leaves (``taxonomy.leaves`` order),
    ``(n_leaves,)`` or per-bin ``(n_leaves, k)`` for histogram scores (the release counts
    the bins' sum). ``score``/``sensitivity``/``theta``/``beta``/``max_depth``: see
    :class:`TaxonomyPrivTree`; ``max_contributions`` = x leaves one tuple may reach (λ and
    the leaf noise scaled by x). ``epsilon_share`` of ``epsilon`` (default half, §3.4) pays
    for the structure, the rest for the leaves. ``privacy_unit``: the ledger's description
    of one tuple (default one row). ``session``: checked against the whole spend before the
    structure's noise is drawn. ``neighbours``/``invariants``: refused (the structure is
    private). Older spellings: ``structure_share``, ``contributions``.

    Parameters
    ----------
    taxonomy : Tree
        The public taxonomy.
    leaf_counts : array_like
        Private counts of its leaves, ``(n_leaves,)`` or ``(n_leaves, k)``.
    epsilon, delta, rho : float, optional
        The total privacy loss (structure and counts), as in :func:`hierdp.release`.
    session : Session, optional
        Draw the spend from this :class:`hierdp.Session` (checked before any noise).
    seed : int, optional
        Reproducible noise for tests (NOT FOR PUBLICATION).
    neighbours, invariants : optional
        Only ``"add_remove"`` and no invariants (the structure is private).
    postprocess : str, sequence or None, optional
        Post-processing of the counts (default: the plan's, ``["blue"]``).
    epsilon_share : float, optional
        The share of ``epsilon`` that chooses the expansion (default half).
    max_contributions : int, optional
        x: the leaves one tuple may reach.
    score : str or callable, default "count"
        What decides a split (see :class:`TaxonomyPrivTree`).
    sensitivity : int, optional
        The score's sensitivity.
    mechanism : str or Mechanism, default "discrete_laplace"
        The noise on the leaf counts.
    notes : sequence of str, default ()
        Public notes for the ledger.
    privacy_unit : str, optional
        The ledger's description of one tuple.
    **params
        ``theta``, ``beta``, ``max_depth`` (see :class:`TaxonomyPrivTree`).

    Returns
    -------
    ReleaseResult
        The expanded tree's estimates and ledger.
    """
    given = canonical_keywords(_door, params, (*TAXONOMY_PARAMETERS[2:], "epsilon_share", "max_contributions"),
                               release_taxonomy)
    structure_share = take(_door, given, "epsilon_share", epsilon_share)
    structure_share = 0.5 if structure_share is None else structure_share
    max_contributions = take(_door, given, "max_contributions", max_contributions)
    eps = pure_epsilon(epsilon)
    rules.enforce(rules.share_problem(structure_share), BudgetError)
    contributions = {} if max_contributions is None else {"contributions": max_contributions}
    # through the registry: the decomposition's parameters are checked as in a spec
    decomp = registry.create("decomposition", TaxonomyPrivTree.name, taxonomy=taxonomy, score=score,
                             sensitivity=sensitivity, **contributions, **given)
    paid = admit_private_structure(_door, "privtree_taxonomy", epsilon=eps, delta=delta, rho=rho, session=session,
                                   seed=seed, neighbours=neighbours, invariants=invariants, mechanism=mechanism)
    rng = door_rng(seed, 54321)
    structure = decomp.decompose(leaf_counts, budget=eps * float(structure_share), rng=rng)
    counts = np.asarray(leaf_counts)
    counts = counts.sum(axis=1) if counts.ndim == 2 else counts
    values = structure.tree.aggregate(structure.leaf_counts(counts.astype(np.int64)))
    x = decomp.contributions
    unit: dict[str, Any] = {"privacy_unit": privacy_unit} if privacy_unit is not None else {}
    pp = {} if postprocess is PLAN_DEFAULT else {"postprocess": postprocess}
    return release_path(structure.tree, values, epsilon=eps, delta=delta, rho=rho, session=paid,
                        plan=Leaves(mechanism), seed=seed,
                        notes=list(notes) + ["privtree_taxonomy: which categories are expanded is a private output "
                                             "paid from the budget"],
                        structure=structure, max_contributions=x if x > 1 else None, **unit, **pp)


@dataclass(repr=False)
class RegionsResult(ReleaseResult):
    """A release on a mixed numeric × categorical decomposition: ``structure`` and a
    ``frame`` with one row per region (:meth:`MixedStructure.region_frame` plus
    ``estimate`` and ``std``)."""

    structure: MixedStructure | None = None

    @cached_property
    def frame(self) -> pd.DataFrame:
        if self.structure is None:
            raise DataError("this RegionsResult has no structure; make it with release_mixed(...)")
        out = self.structure.region_frame()
        out["estimate"] = self.estimate.values
        out["std"] = self.std if self.std is not None else np.full(self.tree.n_nodes, np.nan)
        return out


def release_mixed(data: pd.DataFrame, numeric: Mapping[str, Any] | None = None,
                  categorical: Mapping[str, Tree] | None = None, epsilon: float | None = None, *,
                  delta: float | None = None, rho: float | None = None, session: Session | None = None,
                  seed: int | None = None, neighbours: str = "add_remove", invariants: Any = None,
                  postprocess: Any = PLAN_DEFAULT, epsilon_share: float | None = None,
                  max_contributions: int | None = None, mechanism: Any = "discrete_laplace",
                  notes: Sequence[str] = (), _door: str = "release_mixed()", **params: Any) -> RegionsResult:
    """PrivTree on numeric × categorical columns of ``data`` (§3.5), then the region counts.

    ``numeric``: ``{column: (low, high)}`` public bounds; ``categorical``: ``{column:
    Tree}`` public taxonomies (the column holds leaf labels). ``theta``, ``beta``,
    ``max_depth``, ``max_halvings``, ``max_nodes``: see :class:`MixedPrivTree`; ``max_contributions`` = x
    leaves per tuple. ``epsilon_share`` of ``epsilon`` (default half) pays for the
    structure. ``session``: checked against the whole spend before the structure's noise
    is drawn. ``neighbours``/``invariants``: refused (the structure is private). Older
    spellings: ``structure_share``, ``contributions``.

    Parameters
    ----------
    data : pandas.DataFrame
        The private rows.
    numeric : mapping, optional
        ``{column: (low, high)}`` public bounds.
    categorical : mapping, optional
        ``{column: Tree}`` public taxonomies.
    epsilon, delta, rho : float, optional
        The total privacy loss (structure and counts), as in :func:`hierdp.release`.
    session : Session, optional
        Draw the spend from this :class:`hierdp.Session` (checked before any noise).
    seed : int, optional
        Reproducible noise for tests (NOT FOR PUBLICATION).
    neighbours, invariants : optional
        Only ``"add_remove"`` and no invariants (the structure is private).
    postprocess : str, sequence or None, optional
        Post-processing of the counts (default: the plan's, ``["blue"]``).
    epsilon_share : float, optional
        The share of ``epsilon`` that chooses the regions (default half).
    max_contributions : int, optional
        x: the leaves one tuple may reach.
    mechanism : str or Mechanism, default "discrete_laplace"
        The noise on the region counts.
    notes : sequence of str, default ()
        Public notes for the ledger.
    **params
        ``theta``, ``beta``, ``max_depth``, ``max_halvings``, ``max_nodes`` (see
        :class:`MixedPrivTree`).

    Returns
    -------
    RegionsResult
        The regions' estimates and ledger.
    """
    given = canonical_keywords(_door, params, (*MIXED_PARAMETERS, "epsilon_share", "max_contributions"),
                               release_mixed)
    structure_share = take(_door, given, "epsilon_share", epsilon_share)
    structure_share = 0.5 if structure_share is None else structure_share
    max_contributions = take(_door, given, "max_contributions", max_contributions)
    eps = pure_epsilon(epsilon)
    rules.enforce(rules.share_problem(structure_share), BudgetError)
    contributions = {} if max_contributions is None else {"contributions": max_contributions}
    # through the registry: the decomposition's parameters are checked as in a spec
    decomp = registry.create("decomposition", MixedPrivTree.name, numeric=numeric, categorical=categorical,
                             **contributions, **given)
    paid = admit_private_structure(_door, "privtree_mixed", epsilon=eps, delta=delta, rho=rho, session=session,
                                   seed=seed, neighbours=neighbours, invariants=invariants, mechanism=mechanism)
    rng = door_rng(seed, 777)
    structure = decomp.decompose(data, budget=eps * float(structure_share), rng=rng)
    values = structure.tree.aggregate(structure.leaf_counts(data))
    x = decomp.contributions
    pp = {} if postprocess is PLAN_DEFAULT else {"postprocess": postprocess}
    r = release_path(structure.tree, values, epsilon=eps, delta=delta, rho=rho, session=paid,
                     plan=Leaves(mechanism), seed=seed,
                     notes=list(notes) + ["privtree_mixed: the regions are a private output paid from the budget"],
                     structure=structure, max_contributions=x if x > 1 else None, **pp)
    return RegionsResult(tree=r.tree, estimate=r.estimate, measurements=r.measurements, ledger=r.ledger,
                         meta=dict(r.meta), structure=structure)
