"""Release counts on a private PrivTree decomposition of a public taxonomy (§3.5).

:func:`release_taxonomy` spends ``structure_share`` of ε on
:class:`~hierdp.decompositions.taxonomy.TaxonomyPrivTree` (which categories to expand, a
private output recorded in the ledger), counts the released leaves with the rest through
the ``leaves`` plan (disjoint leaves: parallel composition; sensitivity x with
``contributions`` = x) and makes every released node the sum of its leaves (BLUE by
default). The result is a normal :class:`~hierdp.result.ReleaseResult` on the released
sub-taxonomy, whose labels are the taxonomy's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hierdp.accounting import check_epsilon
from hierdp.decompositions.taxonomy import TaxonomyPrivTree
from hierdp.errors import BudgetError
from hierdp.pipeline import release
from hierdp.plans.leaves import Leaves
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

__all__ = ["release_taxonomy"]


def release_taxonomy(taxonomy: Tree, leaf_counts: Any, *, epsilon: float | None = None,
                     structure_share: float = 0.5, score: str | Callable[[np.ndarray], np.ndarray] = "count",
                     sensitivity: int | None = None, seed: int | None = None,
                     mechanism: Any = "discrete_laplace", postprocess: Any = ("blue",),
                     notes: Sequence[str] = (), **params: Any) -> ReleaseResult:
    """PrivTree on ``taxonomy`` (Zhang et al. 2016, §3.5), then the leaf counts.

    ``leaf_counts``: private counts of the taxonomy's leaves (``taxonomy.leaves`` order),
    ``(n_leaves,)`` or per-bin ``(n_leaves, k)`` for histogram scores (the release counts
    the bins' sum). ``score``/``sensitivity``/``theta``/``beta``/``max_depth``/
    ``contributions``: see :class:`TaxonomyPrivTree`. ``structure_share`` of ``epsilon``
    (default half, §3.4) pays for the structure, the rest for the leaves.
    """
    if epsilon is None:
        raise BudgetError("no privacy budget given: pass epsilon=<positive number>")
    eps = check_epsilon(epsilon)
    if isinstance(structure_share, bool) or not (0 < float(structure_share) < 1):
        raise BudgetError(f"structure_share must be strictly between 0 and 1, got {structure_share!r}")
    decomp = TaxonomyPrivTree(taxonomy, score=score, sensitivity=sensitivity, **params)
    rng = make_rng(None if seed is None else (int(seed) * 2654435761 + 54321) % (1 << 63))
    structure = decomp.decompose(leaf_counts, budget=eps * float(structure_share), rng=rng)
    counts = np.asarray(leaf_counts)
    counts = counts.sum(axis=1) if counts.ndim == 2 else counts
    values = structure.tree.aggregate(structure.leaf_counts(counts.astype(np.int64)))
    x = decomp.contributions
    return release(structure.tree, values, epsilon=eps, plan=Leaves(mechanism), postprocess=postprocess, seed=seed,
                   notes=list(notes) + ["privtree_taxonomy: which categories are expanded is a private output "
                                        "paid from the budget"],
                   structure=structure, max_contributions=x if x > 1 else None)
