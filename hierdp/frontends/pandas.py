"""The pandas front-end: ``.dptree`` on DataFrames and Series, and :class:`DPTree`.

``df.dptree(levels=[...], domains=...)`` and, for the output of
``df.groupby(levels).size()``, ``series.dptree(domains=...)`` (the MultiIndex names are
the levels, the values the counts). The structure comes from the ``declared``
decomposition; rows are counted by :mod:`hierdp.frontends.counting`. The accessor only
stores the object; everything is validated when it is called (conventions: validation in
methods, not in ``__init__``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.decompositions.declared import Declared, DeclaredStructure, check_levels
from hierdp.errors import DataError, PrivacyError, expected_one_of
from hierdp.frontends._cells import cell_codes, cell_sizes, cells_notes, resolve_cells
from hierdp.frontends._contributions import bound_contributions
from hierdp.frontends.counting import check_counts, count_cells, count_rows
from hierdp.frontends.points import PointsResult, release_points
from hierdp.frontends.sequences import SequenceResult, release_sequences
from hierdp.frontends.taxonomy import release_taxonomy
from hierdp.mechanisms.base import Sensitivity
from hierdp.pipeline import release
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

__all__ = ["DPTree", "DPTreeFrameAccessor", "DPTreeSeriesAccessor"]


class DPTree:
    """Private data placed on a public tree; what ``df.dptree(...)`` returns.

    Holds the frame (not copied), the declared structure and how rows count. Building it
    reads the data only to check the columns and the count column, and for levels whose
    domain is declared ``"observed"``; counts are computed at :meth:`release` (or by the
    non-private :meth:`true_counts`).
    """

    def __init__(
        self,
        df: pd.DataFrame,
        levels: Sequence[str],
        domains: Any = None,
        *,
        count: str | None = None,
        unit: str | None = None,
        max_contributions: int | None = None,
        unknown: str = "raise",
        root: str = "total",
        spent: list[dict[str, Any]] | None = None,
        cells: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(df, pd.DataFrame):
            raise DataError(f"expected a pandas DataFrame, got {type(df).__name__}")
        self._how_rows_count(df.columns, levels, root, count=count, unit=unit, max_contributions=max_contributions,
                             unknown=unknown, spent=spent)
        self._df = df
        if count is not None:
            # a zero-count row (e.g. from groupby(observed=False)) is not an observation
            observed_rows = df[check_counts(df, count) != 0]
        else:
            observed_rows = df
        self._structure = Declared(self.levels, domains, root=root).decompose(observed_rows)
        self.cells = self._resolve_cells(observed_rows, cells, root)

    def _how_rows_count(self, columns: Any, levels: Sequence[str], root: str, *, count: str | None,
                        unit: str | None, max_contributions: int | None, unknown: str,
                        spent: list[dict[str, Any]] | None) -> None:
        """Check and record how rows count (levels, count column, privacy unit and its bound,
        out-of-domain rule): one set of rules for every front-end built on DPTree."""
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
        # the public guarantee of each release of this data so far; the .dptree accessor
        # passes one list per DataFrame, so every DPTree built from it shares the count
        self._spent: list[dict[str, Any]] = [] if spent is None else spent

    def _resolve_cells(self, df: pd.DataFrame, cells: Mapping[str, Any] | None, root: str) -> dict[str, pd.Index]:
        """The declared cell domains ``{column: pd.Index}`` (``{}`` without cells); see
        :mod:`hierdp.frontends._cells`."""
        return resolve_cells(cells, levels=self.levels, root=root, observed=lambda name: df[name].dropna().unique(),
                             columns=cast(Sequence[Any], df.columns))

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
        return self._structure

    def _node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private diagnostics. Reads private data."""
        df = self._df
        notes: dict[str, Any] = {}
        if self.unit is not None:
            df, n_dropped = bound_contributions(df, self.unit, cast(int, self.max_contributions),
                                               rng or make_rng(None))
            notes["rows_dropped_by_contribution_bound"] = int(n_dropped)
        if self.cells:
            values, more = count_cells(self._structure, df, self.cells, count=self.count, unknown=self.unknown)
        else:
            values, more = count_rows(self._structure, df, count=self.count, unknown=self.unknown)
        notes.update(more)
        return values, notes

    def release_defaults(self) -> dict[str, Any]:
        """Release keywords implied by how rows count: the sensitivity (``Sensitivity.bounded(c)``
        with ``unit=``/``max_contributions=c``), the privacy-unit text and the bound."""
        if self.unit is not None:
            return {"sensitivity": Sensitivity.bounded(cast(int, self.max_contributions)),
                    "privacy_unit": f"one value of column {self.unit!r}",
                    "max_contributions": self.max_contributions}
        if self.count is not None:
            return {"privacy_unit": f"one individual counted in column {self.count!r}"}
        return {}

    def out_of_domain(self) -> pd.DataFrame:
        """NON-PRIVATE diagnostics: the rows of the data that fall outside the declared domains
        (or lack a level value), for fixing the domains. Never publish them."""
        _, bad, _ = self._structure.locate(self._df)
        if self.cells:
            bad = bad | cell_codes(self.cells, self._df)[1]
        return self._df[bad]

    def true_counts(self) -> np.ndarray:
        """NON-PRIVATE: the exact node counts (external order), for evaluation only."""
        return self._node_values()[0]

    def _check_release_keywords(self, kwargs: dict[str, Any]) -> None:
        """How rows count is fixed when the DPTree is built: a release may declare a larger
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

    def release(self, epsilon: float | None = None, **kwargs: Any) -> ReleaseResult:
        """Release the counts privately; keywords as :func:`hierdp.release` (``session=`` draws
        the spend from a :class:`hierdp.Session`).

        >>> import pandas as pd, hierdp
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> r = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=7)
        >>> r.frame.columns.tolist()
        ['level', 'state', 'county', 'estimate', 'std']
        """
        seed = kwargs.get("seed")
        rules.enforce(rules.seed_problem(seed), DataError)
        bound_rng = make_rng(None if seed is None else (int(seed) * 2654435761 + 97) % (1 << 63))
        values, private_notes = self._node_values(bound_rng)
        notes = list(kwargs.pop("notes", ()))
        if self.unknown == "drop":
            # stated whatever the data: whether any row was dropped is itself private
            notes.append("rows outside the declared domains, if any, were dropped (unknown='drop'); "
                         "whether and how many is not public")
        if self.cells:
            notes.extend(cells_notes(self.cells, unit=self.unit, max_contributions=self.max_contributions,
                                     count=self.count))
        self._check_release_keywords(kwargs)
        for key, value in self.release_defaults().items():
            if key == "sensitivity":  # the bound's sensitivity under the release's neighbour relation
                value = value.for_neighbours(kwargs.get("neighbours", "add_remove"))
            kwargs.setdefault(key, value)
        if self.cells:
            kwargs["plan"] = _plan_with_cells(kwargs.get("plan"), self.cells)
            if kwargs["plan"] is None:
                del kwargs["plan"]
        result = release(self.tree, values, epsilon=epsilon, notes=notes, private_notes=private_notes, **kwargs)
        if self.cells:
            result.meta["cells"] = dict(self.cells)  # the labels of the k cells, for .frame and .to_xarray()
        led = result.ledger
        self._spent.append({"guarantee": led.guarantee, "epsilon": led.epsilon, "delta": led.delta, "rho": led.rho})
        if len(self._spent) > 1:
            led.notes.append(f"release {len(self._spent)} of the same DataFrame object in this process: together "
                             f"they spend {self.spent_text()} under basic composition (copies and data loaded "
                             "again are not counted; use hierdp.Session for a budget several releases draw from)")
        return result

    def privtree(self, epsilon: float | None = None, **kwargs: Any) -> ReleaseResult:
        """PrivTree on this declared tree as a public taxonomy (Zhang et al. 2016, §3.5):
        which categories to expand is decided privately, then the expanded tree's leaves
        are counted (:func:`hierdp.frontends.taxonomy.release_taxonomy`; keywords
        ``structure_share``, ``score``, ``theta``, ``beta``, ``max_depth``, ``seed``, ...).
        With ``unit=``/``max_contributions=c`` a unit reaches at most c leaves:
        ``contributions`` is c (λ and the leaf noise scaled by c)."""
        if self.cells:
            raise DataError("privtree on a DPTree with cells= is not supported; build the DPTree without cells")
        seed = kwargs.get("seed")
        rules.enforce(rules.seed_problem(seed), DataError)
        if self.unit is not None and self.max_contributions is not None:
            c = int(kwargs.setdefault("contributions", self.max_contributions))
            if c < self.max_contributions:
                raise PrivacyError(f"contributions={c} is below max_contributions={self.max_contributions}: a unit "
                                   "may reach that many leaves; leave contributions out")
        kwargs.setdefault("privacy_unit", self.release_defaults().get("privacy_unit"))
        bound_rng = make_rng(None if seed is None else (int(seed) * 2654435761 + 97) % (1 << 63))
        values, _ = self._node_values(bound_rng)
        result = release_taxonomy(self.tree, values[np.asarray(self.tree.leaves)], epsilon=epsilon, **kwargs)
        led = result.ledger
        self._spent.append({"guarantee": led.guarantee, "epsilon": led.epsilon, "delta": led.delta, "rho": led.rho})
        return result

    @property
    def releases(self) -> list[dict[str, Any]]:
        """The public guarantee (epsilon, delta, rho) of each release made from this data
        (every DPTree built with ``df.dptree`` on the same DataFrame object counts)."""
        return [dict(r) for r in self._spent]

    def spent_text(self) -> str:
        """What the releases of this data spend together (basic composition), as text."""
        parts = []
        for key in ("epsilon", "delta", "rho"):
            # zCDP releases are counted in rho (the epsilon they state is a conversion)
            vals = [r[key] for r in self._spent
                    if r[key] is not None and not (key == "epsilon" and r["guarantee"] == "zcdp")]
            if vals:
                parts.append(f"{key}={math.fsum(vals):.6g}")
        return ", ".join(parts) if parts else "nothing"

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


_SPENT: dict[int, list[dict[str, Any]]] = {}


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


def _spent_for(obj: pd.DataFrame | pd.Series) -> list[dict[str, Any]]:
    """The releases made so far from this DataFrame/Series object (by identity, for as long
    as it lives): every DPTree built from it shares the list, so a ledger can state what
    the releases of the same data spend together. (pandas builds a new accessor per
    attribute access, so the accessor itself cannot hold it.)"""
    key = id(obj)
    spent = _SPENT.get(key)
    if spent is None:
        spent = _SPENT[key] = []
        weakref.finalize(obj, _SPENT.pop, key, None)
    return spent


@pd.api.extensions.register_dataframe_accessor("dptree")
class DPTreeFrameAccessor:
    """``df.dptree(levels, domains, count=None, unit=None, max_contributions=None, unknown="raise", cells=None)``."""

    def __init__(self, obj: pd.DataFrame) -> None:
        self._obj = obj
        self._spent = _spent_for(obj)

    def __call__(self, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None) -> DPTree:
        return DPTree(self._obj, levels, domains, count=count, unit=unit, max_contributions=max_contributions,
                      unknown=unknown, root=root, spent=self._spent, cells=cells)

    def privtree(self, columns: Sequence[str], bounds: Any, epsilon: float | None = None,
                 **kwargs: Any) -> PointsResult:
        """A private spatial decomposition of the points in ``columns`` inside the public
        ``bounds`` and its region counts: :func:`hierdp.frontends.points.release_points`
        (``method="privtree"`` by default; ``"simpletree"`` and ``"grid"`` for baselines)."""
        result = release_points(self._obj, columns, bounds, epsilon=epsilon, **kwargs)
        led = result.ledger
        self._spent.append({"guarantee": led.guarantee, "epsilon": led.epsilon, "delta": led.delta, "rho": led.rho})
        return result

    def suffix_tree(self, column: str, epsilon: float | None = None, max_length: int | None = None,
                    alphabet: Any = None, **kwargs: Any) -> SequenceResult:
        """A private prediction suffix tree over the sequences in ``column`` (strings or
        lists of symbols; one row = one sequence = one privacy unit) with ``alphabet`` declared
        (a list) or ``"observed"`` and l⊤ = ``max_length``:
        :func:`hierdp.frontends.sequences.release_sequences`."""
        result = release_sequences(self._obj, column, epsilon=epsilon, max_length=max_length, alphabet=alphabet,
                                   **kwargs)
        led = result.ledger
        self._spent.append({"guarantee": led.guarantee, "epsilon": led.epsilon, "delta": led.delta, "rho": led.rho})
        return result


@pd.api.extensions.register_series_accessor("dptree")
class DPTreeSeriesAccessor:
    """``counts.dptree(domains=...)`` for a Series of counts indexed by the levels."""

    def __init__(self, obj: pd.Series) -> None:
        self._obj = obj
        self._spent = _spent_for(obj)

    def __call__(self, domains: Any = None, *, levels: Sequence[str] | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None) -> DPTree:
        s = self._obj
        names = [cast(str, n) for n in s.index.names]
        if any(n is None for n in names):
            raise DataError("the Series index must name its levels (e.g. the result of df.groupby([...]).size())")
        if levels is None:
            levels = [n for n in names if not cells or n not in cells]
        elif list(levels) + [n for n in names if n not in levels] != names or sorted(
                n for n in names if n not in levels) != sorted(cells or ()):
            raise DataError(f"levels {list(levels)} (and cells {list(cells or ())}) do not match the index names "
                            f"{names}: the index names the levels, top-down, then the cell dimensions")
        value_name = "count" if "count" not in names else "__count__"
        frame = s.rename(value_name).reset_index()
        return DPTree(frame, levels, domains, count=value_name, unknown=unknown, root=root, spent=self._spent,
                      cells=cells)
