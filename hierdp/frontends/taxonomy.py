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

from hierdp import registry
from hierdp.accounting import check_epsilon
from hierdp.decompositions.mixed import MixedPrivTree, MixedStructure
from hierdp.decompositions.taxonomy import TaxonomyPrivTree
from hierdp.errors import BudgetError, DataError
from hierdp.pipeline import release
from hierdp.plans.leaves import Leaves
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

__all__ = ["release_taxonomy", "release_mixed", "RegionsResult"]


def release_taxonomy(taxonomy: Tree, leaf_counts: Any, *, epsilon: float | None = None,
                     structure_share: float = 0.5, score: str | Callable[[np.ndarray], np.ndarray] = "count",
                     sensitivity: int | None = None, seed: int | None = None,
                     mechanism: Any = "discrete_laplace", postprocess: Any = ("blue",),
                     notes: Sequence[str] = (), privacy_unit: str | None = None, **params: Any) -> ReleaseResult:
    """PrivTree on ``taxonomy`` (Zhang et al. 2016, §3.5), then the leaf counts.

    ``leaf_counts``: private counts of the taxonomy's leaves (``taxonomy.leaves`` order),
    ``(n_leaves,)`` or per-bin ``(n_leaves, k)`` for histogram scores (the release counts
    the bins' sum). ``score``/``sensitivity``/``theta``/``beta``/``max_depth``/
    ``contributions``: see :class:`TaxonomyPrivTree`. ``structure_share`` of ``epsilon``
    (default half, §3.4) pays for the structure, the rest for the leaves. ``privacy_unit``:
    the ledger's description of one tuple (default one row).
    """
    if epsilon is None:
        raise BudgetError("no privacy budget given: pass epsilon=<positive number>")
    eps = check_epsilon(epsilon)
    if isinstance(structure_share, bool) or not (0 < float(structure_share) < 1):
        raise BudgetError(f"structure_share must be strictly between 0 and 1, got {structure_share!r}")
    decomp = registry.create("decomposition", TaxonomyPrivTree.name, taxonomy=taxonomy, score=score,
                             sensitivity=sensitivity, **params)  # parameters checked as in a spec
    rng = make_rng(None if seed is None else (int(seed) * 2654435761 + 54321) % (1 << 63))
    structure = decomp.decompose(leaf_counts, budget=eps * float(structure_share), rng=rng)
    counts = np.asarray(leaf_counts)
    counts = counts.sum(axis=1) if counts.ndim == 2 else counts
    values = structure.tree.aggregate(structure.leaf_counts(counts.astype(np.int64)))
    x = decomp.contributions
    unit: dict[str, Any] = {"privacy_unit": privacy_unit} if privacy_unit is not None else {}
    return release(structure.tree, values, epsilon=eps, plan=Leaves(mechanism), postprocess=postprocess, seed=seed,
                   notes=list(notes) + ["privtree_taxonomy: which categories are expanded is a private output "
                                        "paid from the budget"],
                   structure=structure, max_contributions=x if x > 1 else None, **unit)


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
                  categorical: Mapping[str, Tree] | None = None, *, epsilon: float | None = None,
                  structure_share: float = 0.5, seed: int | None = None, mechanism: Any = "discrete_laplace",
                  postprocess: Any = ("blue",), notes: Sequence[str] = (), **params: Any) -> RegionsResult:
    """PrivTree on numeric × categorical columns of ``data`` (§3.5), then the region counts.

    ``numeric``: ``{column: (low, high)}`` public bounds; ``categorical``: ``{column:
    Tree}`` public taxonomies (the column holds leaf labels). ``theta``, ``beta``,
    ``max_depth``, ``max_halvings``, ``contributions``: see :class:`MixedPrivTree`.
    ``structure_share`` of ``epsilon`` (default half) pays for the structure.
    """
    if epsilon is None:
        raise BudgetError("no privacy budget given: pass epsilon=<positive number>")
    eps = check_epsilon(epsilon)
    if isinstance(structure_share, bool) or not (0 < float(structure_share) < 1):
        raise BudgetError(f"structure_share must be strictly between 0 and 1, got {structure_share!r}")
    decomp = registry.create("decomposition", MixedPrivTree.name, numeric=numeric, categorical=categorical,
                             **params)  # parameters checked as in a spec
    rng = make_rng(None if seed is None else (int(seed) * 2654435761 + 777) % (1 << 63))
    structure = decomp.decompose(data, budget=eps * float(structure_share), rng=rng)
    values = structure.tree.aggregate(structure.leaf_counts(data))
    x = decomp.contributions
    r = release(structure.tree, values, epsilon=eps, plan=Leaves(mechanism), postprocess=postprocess, seed=seed,
                notes=list(notes) + ["privtree_mixed: the regions are a private output paid from the budget"],
                structure=structure, max_contributions=x if x > 1 else None)
    return RegionsResult(tree=r.tree, estimate=r.estimate, measurements=r.measurements, ledger=r.ledger,
                         meta=dict(r.meta), structure=structure)
