"""Histogram cells per node: public cell domains, cell codes, and what the ledger says.

A census-style release is a histogram per geography (age x sex x ...): every node of the
tree carries ``k`` cells, ``k`` the product of the cell domains' sizes, laid out
row-major over the cell dimensions in the order they were declared (the last dimension
varies fastest, like ``numpy.reshape``). Cell domains are public like level domains
(design, privacy rule 1): a list of values, or ``"observed"`` (the user's assertion that
the values seen in the data are public). A value outside its cell domain is the same
error as a level value outside its domain.

Sensitivity (design, privacy rule 2): a row falls in one cell of one node per level, so
it changes one entry of the level's ``(n_level, k)`` vector by one: L1 = L2 = 1 per level,
whatever ``k``. With ``max_contributions=c`` rows per unit the rows of a unit may fall in
different cells (or nodes), still at most ``c`` entries change by one each in total:
``Sensitivity.bounded(c)`` (L1 = L2 = c) holds unchanged; contribution bounds count rows,
each row being one cell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hierdp.decompositions.declared import RESERVED_COLUMNS, check_text, domain_index
from hierdp.errors import DataError, HierarchyError, expected_one_of

__all__ = ["resolve_cells", "cell_sizes", "cell_codes", "cells_notes", "domain_error", "check_cell_columns",
           "check_columns"]

#: output columns a cell dimension cannot be named like ("cell" is the default cell name itself)
_RESERVED_FOR_CELLS = RESERVED_COLUMNS - {"cell"}


def _cell_index(values: Any, name: str) -> pd.Index:
    idx = domain_index(values, f"cell dimension {name!r}", "a list of values or 'observed'")
    if idx.dtype == object or pd.api.types.is_string_dtype(idx.dtype):
        if any(isinstance(v, str) and not v.strip() for v in idx):
            raise HierarchyError(f"cell dimension {name!r} has an empty label ''; give every value a visible name")
    return idx


def resolve_cells(cells: Mapping[str, Any] | None, *, levels: Sequence[str], root: str,
                  observed: Callable[[str], Any] | None = None,
                  columns: Sequence[Any] | None = None) -> dict[str, pd.Index]:
    """The declared cell domains as ``{dimension: pd.Index}`` in declaration order.

    ``cells`` maps each cell dimension (a column, or an array dimension) to its public
    values or to ``"observed"``; ``observed(name)`` returns the values seen in the data
    (called only for dimensions declared ``"observed"``). With ``columns``, a cell
    dimension missing from them is a :class:`DataError` (checked after the names).
    ``None`` or ``{}``: no cells.
    """
    if cells is None:
        return {}
    if not isinstance(cells, Mapping):
        raise HierarchyError(f"cells must be a dict {{dimension: [values] or 'observed'}}, e.g. "
                             f"cells={{'sex': ['F', 'M']}}; got {type(cells).__name__}")
    for name in cells:
        if not isinstance(name, str) or not name:
            raise HierarchyError(f"cell dimensions are named by strings; got {name!r}")
        if name in levels or name == root:
            raise HierarchyError(f"{name!r} is declared both as a level and as a cell dimension; it must be one or "
                                 "the other")
        if name in _RESERVED_FOR_CELLS:
            raise HierarchyError(f"cell dimension {name!r} has the name of an output column "
                                 f"({', '.join(sorted(_RESERVED_FOR_CELLS))}); rename it first")
    if columns is not None:
        check_cell_columns(cells, columns)
    out: dict[str, pd.Index] = {}
    for name, spec in cells.items():
        if isinstance(spec, str):
            if spec != "observed":
                raise HierarchyError(f"domain of cell dimension {name!r} must be a list of values or 'observed'; "
                                     f"got {spec!r}")
            if observed is None:
                raise HierarchyError(f"cell dimension {name!r} is declared 'observed' but no data were given")
            seen = np.asarray(observed(name), dtype=object)
            check_text(seen, f"cell column {name!r}", rows=False)  # distinct values: no row to name
            vals = pd.Index(pd.unique(pd.Series(seen).dropna().to_numpy()))
            try:
                vals = vals.sort_values()
            except TypeError:
                pass
            if len(vals) == 0:
                raise HierarchyError(f"cell dimension {name!r} is declared 'observed' but the data have no values "
                                     "for it; declare its values")
            out[name] = _cell_index(vals.infer_objects(), name)
        else:
            out[name] = _cell_index(spec, name)
    return out


def cell_sizes(cells: Mapping[str, pd.Index]) -> tuple[int, ...]:
    """Sizes of the cell dimensions (declaration order); ``()`` without cells."""
    return tuple(len(v) for v in cells.values())


def check_cell_columns(cells: Mapping[str, pd.Index], columns: Sequence[Any]) -> None:
    """A one-line :class:`DataError` when a cell column is missing (like a missing level column)."""
    cols = list(columns)
    for name in cells:
        if name not in cols:
            raise DataError(expected_one_of("cell column", name, [str(c) for c in cols]).replace(
                "unknown cell column", "missing cell column"))


def cell_codes(cells: Mapping[str, pd.Index], columns: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Flat cell code of each row (row-major over the cell dimensions), a mask of rows with
    a missing or out-of-domain cell value, and the kinds of problem (they name dimensions,
    never values, which are private)."""
    names = list(cells)
    n = len(columns[names[0]]) if names else 0
    flat = np.zeros(n, np.int64)
    bad = np.zeros(n, bool)
    problems: list[str] = []
    for name, idx in cells.items():
        col = columns[name]
        col = col if isinstance(col, pd.Series) else pd.Series(col)
        try:
            codes = np.asarray(idx.get_indexer(pd.Index(col)), dtype=np.int64)
        except Exception:  # unhashable or incomparable values
            # the lambda runs here, inside this iteration: binding idx late is harmless
            codes = np.asarray(pd.Index(col, dtype=object).map(lambda x: idx.get_loc(x) if x in idx else -1),  # noqa: B023
                               dtype=np.int64)
        miss = codes < 0
        if miss.any():
            isna = col.isna().to_numpy()
            what = (f"missing {name!r} values" if isna[miss].all()
                    else f"{name!r} values outside the declared cell domain")
            if what not in problems:
                problems.append(what)
        bad |= miss
        flat = flat * len(idx) + np.maximum(codes, 0)
    return flat, bad, problems


def domain_error(problems: Sequence[str], accessor: str = "df") -> DataError:
    """The out-of-domain error of every front-end (pandas with or without cells, xarray,
    Dask, specs): the kinds of problem (naming levels and cell dimensions, never values),
    and both fixes. ``accessor`` names the object whose ``.dptree(...).out_of_domain()``
    lists the offending rows (``"df"``, ``"da"``, ``"ddf"``)."""
    return DataError(
        "the data have " + "; ".join(problems) + " (values not shown: they are private). Fix the domains, or drop "
        "such rows (unknown='drop' [spec: hierarchy.unknown: drop]; in Python "
        f"{accessor}.dptree(...).out_of_domain() lists them)"
    )


def cells_notes(cells: Mapping[str, pd.Index], *, unit: str | None, max_contributions: int | None,
                count: str | None, who: str | None = None) -> list[str]:
    """Ledger notes stating the sensitivity of a release with histogram cells; ``who``
    names the counts as the user has them (default ``column '<count>'``)."""
    sizes = cell_sizes(cells)
    k = int(np.prod(sizes)) if sizes else 1
    dims = " x ".join(f"{name} ({len(idx)})" for name, idx in cells.items())
    who = f"individual counted in {who or f'column {count!r}'}" if count is not None else "row"
    notes = [f"histogram cells per node: {dims} = {k} cells, row-major over the cell dimensions in that order; "
             f"every {who} falls in exactly one cell of one node per level, so a level's sensitivity over all its "
             "cells is L1 = L2 = 1 per individual"]
    if unit is not None:
        notes.append(f"contribution bounds count rows, each row in one cell: a unit (column {unit!r}) with at most "
                     f"{max_contributions} rows changes at most {max_contributions} cells of a level by one each, "
                     f"whether its rows share a cell or fall in several: Sensitivity.bounded({max_contributions}) "
                     f"(L1 = L2 = {max_contributions}) holds for all cells together")
    else:
        notes.append("if one individual may fall in several cells (or rows), the L1 = L2 = 1 sensitivity does not "
                     "hold: bound the rows per unit with unit='column', max_contributions=c (each row one cell), "
                     "which gives Sensitivity.bounded(c)")
    return notes


def check_columns(columns: Sequence[Any], levels: Sequence[str], cells: Mapping[str, Any], count: str | None,
                   unit: str | None) -> None:
    """The pandas errors for a missing level, cell, count or privacy-unit column (the doors
    that check a partition's or batch's columns on a worker: Dask, Spark)."""
    cols = [str(c) for c in columns]
    for lv in levels:
        if lv not in cols:
            raise DataError(expected_one_of("level column", lv, cols).replace("unknown level column",
                                                                              "missing level column"))
    check_cell_columns(cells, cols)
    if count is not None and count not in cols:
        raise DataError(expected_one_of("count column", count, cols).replace("unknown count column",
                                                                             "missing count column"))
    if unit is not None and unit not in cols:
        raise DataError(expected_one_of("privacy-unit column", unit, cols).replace("unknown privacy-unit column",
                                                                                   "missing privacy-unit column"))
