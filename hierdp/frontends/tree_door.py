"""Doors on a public, declared tree: :class:`TreeDoor`, the base of the pandas, xarray and
Dask doors.

A door on a declared tree provides the levels, the public structure (declared domains),
the cells, how rows count, the true counts (:meth:`TreeDoor.node_values`, private) and
the non-private out-of-domain report (:meth:`TreeDoor.out_of_domain`); the release
(:meth:`TreeDoor.release`, :meth:`TreeDoor.privtree_taxonomy`) is shared and takes the
one release path of :mod:`hierdp.frontends.base`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.accounting.session import Reservation, Session
from hierdp.decompositions.declared import DeclaredStructure, check_levels
from hierdp.errors import DataError, PrivacyError, expected_one_of
from hierdp.frontends._cells import cell_sizes, cells_notes
from hierdp.frontends.base import (
    PLAN_DEFAULT,
    admit,
    admit_private_structure,
    canonical_keywords,
    door_rng,
    record_release,
    release_path,
    spent_text,
    take,
)
from hierdp.frontends.taxonomy import TAXONOMY_PARAMETERS, release_taxonomy
from hierdp.mechanisms.base import Sensitivity
from hierdp.result import ReleaseResult
from hierdp.tree import Tree

__all__ = ["TreeDoor"]


def _plan_with_cells(plan: Any, cells: Mapping[str, Any]) -> Any:
    """A plan that measures marginals over the cells (``marginals``) gets the declared cell
    dimensions when it was not given them."""
    if plan == "marginals":
        plan = {"name": "marginals"}
    if isinstance(plan, Mapping) and plan.get("name") == "marginals":
        params = dict(plan.get("params") or {})
        if "cells" not in plan and "cells" not in params:
            return {**plan, "cells": {k: list(v) for k, v in cells.items()}}
    elif getattr(plan, "name", None) == "marginals" and getattr(plan, "cells", 0) is None:
        return plan.with_cells({k: list(v) for k, v in cells.items()})
    return plan


class TreeDoor(ABC):
    """A door whose structure is a public, declared tree (pandas, xarray, Dask).

    A door provides ``levels`` (top-down, the root first), the public ``structure`` (and
    its ``tree``), the declared ``cells`` (``{}`` without), how rows count (``count``,
    ``unit``, ``max_contributions``, ``unknown``; :meth:`release_defaults`), the true
    counts (:meth:`node_values`, private) and the non-private out-of-domain report
    (:meth:`out_of_domain`). The release (:meth:`release`, :meth:`privtree_taxonomy`) is
    shared: it validates the release keywords once and takes :func:`release_path`.
    """

    levels: list[str]
    cells: dict[str, pd.Index]
    count: str | None
    unit: str | None
    max_contributions: int | None
    unknown: str
    _structure: DeclaredStructure
    #: the accessor spelling in messages (``df``, ``da``, ``ddf``)
    _accessor: str = "df"

    def _how_rows_count(self, columns: Any, levels: Sequence[str], root: str, *, count: str | None,
                        unit: str | None, max_contributions: int | None, unknown: str,
                        spent: list[dict[str, Any]] | None, count_text: str | None = None) -> None:
        """Check and record how rows count (levels, count column, privacy unit and its bound,
        out-of-domain rule): one set of rules for every door on a declared tree.
        ``count_text``: how the ledger names the counts (default ``column 'count'``)."""
        if unknown not in ("raise", "drop"):
            raise DataError(f"unknown={unknown!r}: expected 'raise' (default) or 'drop'")
        rules.enforce(rules.unit_bound_problem(unit=unit is not None, max_contributions=max_contributions is not None,
                                               count=count is not None), DataError)
        if isinstance(max_contributions, int) and max_contributions > rules.MAX_EXACT_COUNT:
            rules.enforce(rules.max_contributions_problem(max_contributions), DataError)
        if unit is not None and unit not in columns:
            raise DataError(expected_one_of("privacy-unit column", unit, [str(c) for c in columns]).replace(
                "unknown privacy-unit column", "missing privacy-unit column"))
        self.levels = check_levels(levels, root)
        self.count = count
        self.unit = unit
        self.max_contributions = max_contributions
        self.unknown = unknown
        self._count_text = count_text if count_text is not None or count is None else f"column {count!r}"
        # the public guarantee of each release of this data so far; the accessor passes one
        # list per data object (releases_of), so every door built from it shares the count
        self._spent: list[dict[str, Any]] = [] if spent is None else spent

    # -- what a door provides ------------------------------------------------------------
    @abstractmethod
    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts ``(n,)`` or ``(n, k)`` (external order) and private notes.
        Reads private data; ``rng`` draws the contribution bounds."""

    @abstractmethod
    def out_of_domain(self) -> Any:
        """NON-PRIVATE diagnostics: the data outside the declared domains. Never publish them."""

    def _node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Older name of :meth:`node_values`."""
        return self.node_values(rng)

    @property
    def n_cells(self) -> int:
        """Cells per node: the product of the cell domains' sizes (1 without cells)."""
        return int(np.prod(cell_sizes(self.cells))) if self.cells else 1

    @property
    def tree(self) -> Tree:
        """The public tree."""
        return self._structure.tree

    @property
    def structure(self) -> DeclaredStructure:
        """The public structure (declared domains)."""
        return self._structure

    def release_defaults(self) -> dict[str, Any]:
        """Release keywords implied by how rows count: the sensitivity (``Sensitivity.bounded(c)``
        with ``unit=``/``max_contributions=c``), the privacy-unit text and the bound.

        Returns
        -------
        dict
            ``{"sensitivity": ..., "privacy_unit": ..., "max_contributions": ...}`` as they apply.
        """
        if self.unit is not None:
            return {"sensitivity": Sensitivity.bounded(cast(int, self.max_contributions)),
                    "privacy_unit": f"one value of column {self.unit!r}",
                    "max_contributions": self.max_contributions}
        if self.count is not None:
            return {"privacy_unit": f"one individual counted in {self._count_text}"}
        return {}

    def true_counts(self) -> np.ndarray:
        """NON-PRIVATE: the exact node counts (external order), for evaluation only.

        Returns
        -------
        numpy.ndarray
            ``(n,)``, or ``(n, k)`` with histogram cells. Never publish them.
        """
        return self.node_values()[0]

    # -- the release ---------------------------------------------------------------------
    def _check_release_keywords(self, kwargs: dict[str, Any]) -> None:
        """How rows count is fixed when the door is built: a release may declare a larger
        sensitivity (conservative), never a smaller one, and may not restate the bound or
        the privacy unit (PrivacyError)."""
        implied = self.release_defaults()
        how = (f"df.dptree(..., unit={self.unit!r}, max_contributions={self.max_contributions})"
               if self.unit is not None else "df.dptree(...)")
        floor = implied.get("sensitivity", Sensitivity())  # one row (or one counted individual) = 1
        neighbours = kwargs.get("neighbours", "add_remove")
        rules.enforce(rules.neighbours_problem(neighbours), PrivacyError)
        floor = floor.for_neighbours(neighbours)  # substitution: 2c and sqrt(2) c
        rules.enforce(rules.sensitivity_problem(kwargs.get("sensitivity"), floor, how), PrivacyError)
        for key in ("max_contributions", "privacy_unit"):
            if key in kwargs and kwargs[key] != implied.get(key):
                fix = ("bound rows per unit with df.dptree(..., unit='column', max_contributions=c)"
                       if key == "max_contributions" else f"it follows from {how}")
                raise PrivacyError(f"{key} is not a release() option for a DPTree: {fix}")

    def release(self, epsilon: float | None = None, *, delta: float | None = None, rho: float | None = None,
                session: Session | None = None, seed: int | None = None, neighbours: str = "add_remove",
                invariants: Any = None, postprocess: Any = PLAN_DEFAULT, plan: Any = "per_level",
                mechanism: Any = None, budget: Any = None, sensitivity: Sensitivity | None = None,
                invariants_cover: str = "total", allow_invariants_with_add_remove: bool = False,
                notes: Sequence[str] = (), split: Any = None, **older: Any) -> ReleaseResult:
        """Release the counts privately (the keywords of :func:`hierdp.release`).

        ``session=`` draws the spend from a :class:`hierdp.Session` (checked before the data
        are read or any noise drawn); ``seed=`` is for tests (NOT FOR PUBLICATION). How rows
        count (``unit``, ``max_contributions``) is fixed when the door is built. ``split=``
        (a level name, ``"auto"`` or ``{"memory": "4GiB"}``) runs the release by subtree
        (:mod:`hierdp.subtrees`): the same estimate and ledger as in memory.

        Parameters
        ----------
        epsilon : float or PrivacyLoss, optional
            Total ε (with ``delta``: (ε, δ)-DP); give ``epsilon`` or ``rho``.
        delta : float, optional
            δ of (ε, δ)-DP, or the δ at which a ρ-zCDP release also states its (ε, δ).
        rho : float, optional
            Total ρ of ρ-zCDP (Gaussian mechanisms).
        session : Session, optional
            Draw the spend from this :class:`hierdp.Session` (refused before any data are read
            when it would overspend).
        seed : int, optional
            Reproducible noise for tests; the ledger is marked NOT FOR PUBLICATION.
        neighbours : {"add_remove", "substitute"}, default "add_remove"
            The neighbour relation of the guarantee.
        invariants : str, sequence or None, optional
            Levels, node ids or label paths published exactly (not protected).
        postprocess : str, sequence or None, optional
            Post-processors in order (default: the plan's, ``["blue"]`` for ``per_level``).
        plan : str, dict or MeasurementPlan, default "per_level"
            ``"per_level"``, ``"marginals"`` (histogram cells), ``"ghazi"``, or a plan.
        mechanism : str, dict or Mechanism, optional
            ``"discrete_laplace"`` (default under ε), ``"discrete_gaussian"`` (under ρ), ...
        budget : str, dict, list or BudgetStrategy, optional
            The split over the levels: ``"equal"`` (default), ``"leaves"``, ``"greedy"``,
            ``"optimal"``, ``{"strategy": name, **params}``, per-level amounts
            ``{"state": 0.2, "county": 0.8}`` adding up to the total, or a list, one per
            level, the root first (see :func:`hierdp.release`).
        sensitivity : Sensitivity, optional
            A larger sensitivity than the one the door's ``max_contributions`` implies.
        invariants_cover : {"total", "cells"}, default "total"
            With histogram cells: fix each invariant node's total, or every cell of it.
        allow_invariants_with_add_remove : bool, default False
            Accept invariants under ``neighbours="add_remove"``.
        notes : sequence of str, default ()
            Public notes for the ledger.
        split : str, int, dict or None, optional
            Release by subtree: a level name or depth, ``"auto"`` or ``{"memory": "4GiB"}``.
        **older
            ``privacy_unit`` and ``max_contributions`` (also under older spellings): fixed when
            the door is built, so accepted only when they restate it (else PrivacyError).

        Returns
        -------
        ReleaseResult
            The estimate (``.frame``, ``.std``, ``.intervals()``) and its ledger.

        Examples
        --------
        >>> import pandas as pd, hierdp
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> r = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=7)
        >>> r.frame.columns.tolist()
        ['level', 'state', 'county', 'estimate', 'std']
        """
        values, keywords = self.release_inputs(
            epsilon=epsilon, delta=delta, rho=rho, session=session, seed=seed, neighbours=neighbours,
            invariants=invariants, postprocess=postprocess, plan=plan, mechanism=mechanism, budget=budget,
            sensitivity=sensitivity, invariants_cover=invariants_cover,
            allow_invariants_with_add_remove=allow_invariants_with_add_remove, notes=notes, split=split, **older)
        result = release_path(self.tree, cast(np.ndarray, values), **keywords)
        if self.cells:
            result.meta["cells"] = dict(self.cells)  # the labels of the k cells, for .frame and .to_xarray()
        led = result.ledger
        record_release(self._spent, led)
        if len(self._spent) > 1:
            led.notes.append(f"release {len(self._spent)} of the same DataFrame object in this process: together "
                             f"they spend {self.spent_text()} under basic composition (copies and data loaded "
                             "again are not counted; use hierdp.Session for a budget several releases draw from)")
        return result

    def release_inputs(self, epsilon: float | None = None, *, delta: float | None = None, rho: float | None = None,
                       session: Session | None = None, seed: int | None = None, neighbours: str = "add_remove",
                       invariants: Any = None, postprocess: Any = PLAN_DEFAULT, plan: Any = "per_level",
                       mechanism: Any = None, budget: Any = None, sensitivity: Sensitivity | None = None,
                       invariants_cover: str = "total", allow_invariants_with_add_remove: bool = False,
                       notes: Sequence[str] = (), split: Any = None, values: bool = True,
                       **older: Any) -> tuple[np.ndarray | None, dict[str, Any]]:
        """What :meth:`release` hands to :func:`hierdp.release`: the true node counts (external
        order; private) and the release keywords (checked, with the door's sensitivity,
        notes and cell plan), for a runner that releases them another way (e.g.
        :func:`hierdp.outofcore.release_to_dataset`). Reads the data; draws no noise.
        ``values=False``: the counts are not read (``None``, and no private notes of the
        count: a runner that counts task by task, e.g. from
        :meth:`hierdp.frontends.dataset.DatasetDPTree.counted`, adds its own).

        Parameters
        ----------
        epsilon, delta, rho, session, seed, neighbours, invariants, postprocess, plan, mechanism
            As for :meth:`release`.
        budget, sensitivity, invariants_cover, allow_invariants_with_add_remove, notes, split
            As for :meth:`release`.
        values : bool, default True
            Read the true counts; ``False`` returns ``None`` in their place.
        **older
            As for :meth:`release`.

        Returns
        -------
        (numpy.ndarray or None, dict)
            NON-PRIVATE: the exact node counts (``None`` with ``values=False``), and the
            keywords for :func:`hierdp.release`. Never publish the counts.
        """
        where = f"{self._accessor}.dptree(...).release()"
        kwargs: dict[str, Any] = canonical_keywords(where, older, ("privacy_unit", "max_contributions"),
                                                     type(self).release)
        if sensitivity is not None:
            kwargs["sensitivity"] = sensitivity
        if neighbours != "add_remove":
            kwargs["neighbours"] = neighbours
        if self.cells:
            plan = _plan_with_cells(plan, self.cells)
        admit(where, epsilon=epsilon, delta=delta, rho=rho, session=session, seed=seed, neighbours=neighbours,
              plan=plan, mechanism=mechanism, budget=budget)
        counts: np.ndarray | None = None
        private_notes: Any = {}
        if values:
            counts, private_notes = self.node_values(door_rng(seed, 97))
        all_notes = list(notes)
        if self.unknown == "drop":
            # stated whatever the data: whether any row was dropped is itself private
            all_notes.append("rows outside the declared domains, if any, were dropped (unknown='drop'); "
                             "whether and how many is not public")
        if self.cells:
            all_notes.extend(cells_notes(self.cells, unit=self.unit, max_contributions=self.max_contributions,
                                         count=self.count, who=self._count_text))
        self._check_release_keywords(kwargs)
        for key, value in self.release_defaults().items():
            if key == "sensitivity":  # the bound's sensitivity under the release's neighbour relation
                value = value.for_neighbours(neighbours)
            kwargs.setdefault(key, value)
        if postprocess is not PLAN_DEFAULT:
            kwargs["postprocess"] = postprocess
        return counts, dict(epsilon=epsilon, delta=delta, rho=rho, session=session, seed=seed,
                            neighbours=neighbours, invariants=invariants, plan=plan, mechanism=mechanism,
                            budget=budget, invariants_cover=invariants_cover,
                            allow_invariants_with_add_remove=allow_invariants_with_add_remove,
                            notes=all_notes, private_notes=private_notes, split=split,
                            **{k: v for k, v in kwargs.items() if k != "neighbours"})

    def privtree_taxonomy(self, epsilon: float | None = None, *, delta: float | None = None,
                          rho: float | None = None, session: Session | None = None, seed: int | None = None,
                          neighbours: str = "add_remove", invariants: Any = None, postprocess: Any = PLAN_DEFAULT,
                          epsilon_share: float | None = None, max_contributions: int | None = None,
                          mechanism: Any = "discrete_laplace", notes: Sequence[str] = (),
                          **params: Any) -> ReleaseResult:
        """PrivTree on this declared tree as a public taxonomy (Zhang et al. 2016, §3.5):
        which categories to expand is decided privately, then the expanded tree's leaves
        are counted (:func:`hierdp.frontends.taxonomy.release_taxonomy`; its keywords
        ``epsilon_share``, ``score``, ``theta``, ``beta``, ``max_depth``, ...). With
        ``unit=``/``max_contributions=c`` a unit reaches at most c leaves: the release's
        ``max_contributions`` is c (λ and the leaf noise scaled by c). ``privtree`` is the
        older name of this method.

        Parameters
        ----------
        epsilon, delta, rho : float, optional
            The total privacy loss (expansion and counts), as in :func:`hierdp.release`.
        session : Session, optional
            Draw the spend from this :class:`hierdp.Session`.
        seed : int, optional
            Reproducible noise for tests (NOT FOR PUBLICATION).
        neighbours, invariants : optional
            Only ``"add_remove"`` and no invariants (the expansion is private).
        postprocess : str, sequence or None, optional
            Post-processing of the counts.
        epsilon_share : float, optional
            The share of ``epsilon`` that chooses the expansion (default half).
        max_contributions : int, optional
            Must agree with the door's bound when given.
        mechanism : str or Mechanism, default "discrete_laplace"
            The noise on the leaf counts.
        notes : sequence of str, default ()
            Public notes for the ledger.
        **params
            ``score``, ``theta``, ``beta``, ``max_depth``
            (:func:`hierdp.frontends.taxonomy.release_taxonomy`).

        Returns
        -------
        ReleaseResult
        """
        where = f"{self._accessor}.dptree(...).privtree_taxonomy()"
        given_name = "contributions" if "contributions" in params else "max_contributions"
        extra = canonical_keywords(where, params, (*TAXONOMY_PARAMETERS, "epsilon_share", "max_contributions",
                                                   "privacy_unit"), type(self).privtree_taxonomy)
        epsilon_share = take(where, extra, "epsilon_share", epsilon_share)
        max_contributions = take(where, extra, "max_contributions", max_contributions)
        if self.cells:
            raise DataError("privtree on a DPTree with cells= is not supported; build the DPTree without cells")
        rules.enforce(rules.seed_problem(seed), DataError)
        if self.unit is not None and self.max_contributions is not None:
            c = int(self.max_contributions if max_contributions is None else max_contributions)
            if c < self.max_contributions:
                raise PrivacyError(f"{given_name}={c} is below max_contributions={self.max_contributions}: a unit "
                                   f"may reach that many leaves; leave {given_name} out")
            max_contributions = c
        extra.setdefault("privacy_unit", self.release_defaults().get("privacy_unit"))
        paid: Session | Reservation | None = session
        if epsilon is not None:  # the taxonomy door refuses a missing budget itself
            # charged from here on: bounding contributions and the structure draw randomness before the release
            paid = admit_private_structure(where, "privtree_taxonomy", epsilon=epsilon, delta=delta, rho=rho,
                                           session=session, seed=seed, neighbours=neighbours, invariants=invariants,
                                           mechanism=mechanism)
        values, _ = self.node_values(door_rng(seed, 97))
        result = release_taxonomy(self.tree, values[np.asarray(self.tree.leaves)], epsilon=epsilon, delta=delta,
                                  rho=rho, session=paid, seed=seed, neighbours=neighbours, invariants=invariants,
                                  postprocess=postprocess, epsilon_share=epsilon_share,
                                  max_contributions=max_contributions, mechanism=mechanism, notes=notes, **extra)
        record_release(self._spent, result.ledger)
        return result

    def privtree(self, epsilon: float | None = None, **kwargs: Any) -> ReleaseResult:
        """Older name of :meth:`privtree_taxonomy` (PrivTree on this declared tree as a
        public taxonomy; ``df.dptree.privtree`` is the spatial PrivTree on points).

        Parameters
        ----------
        epsilon : float, optional
            The total ε.
        **kwargs
            The keywords of :meth:`privtree_taxonomy`.

        Returns
        -------
        ReleaseResult
        """
        return self.privtree_taxonomy(epsilon, **kwargs)

    @property
    def releases(self) -> list[dict[str, Any]]:
        """The public guarantee (epsilon, delta, rho) of each release made from this data
        (every door built on the same data object counts)."""
        return [dict(r) for r in self._spent]

    def spent_text(self) -> str:
        """What the releases of this data spend together (basic composition), as text.

        Returns
        -------
        str
            E.g. ``"epsilon=1.5"``.
        """
        return spent_text(self._spent)

    def __repr__(self) -> str:
        t = self.tree
        doms = "; ".join(f"{k}: {v}" for k, v in t.provenance.items() if k in self.levels)
        kind = f"pre-aggregated (count={self.count!r})" if self.count else (
            f"record-level, unit={self.unit!r} (≤{self.max_contributions} rows)" if self.unit else
            "record-level (one row = one individual)")
        cells = ("; cells: " + " x ".join(f"{name} ({len(idx)})" for name, idx in self.cells.items())
                 if getattr(self, "cells", None) else "")
        return (f"<DPTree {' > '.join(self.levels)}: {t.n_nodes:,} public nodes, {t.n_leaves:,} leaves{cells}; "
                f"{kind}; domains: {doms}>")
