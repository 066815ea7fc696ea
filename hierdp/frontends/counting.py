"""Counting records on a structure: true node counts, separate from building the structure.

Front-ends (pandas today; xarray and Dask on the roadmap) place records on a
:class:`~hierdp.decompositions.declared.DeclaredStructure` and count them here. Counts are
private: nothing here logs or prints them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.decompositions.declared import group_paths
from hierdp.errors import DataError, expected_one_of
from hierdp.frontends._cells import cell_codes, cell_sizes, domain_error
from hierdp.frontends._contributions import bound_contributions, bounded_rows, content_hash
from hierdp.tree import Tree

__all__ = ["dropped_notes", "DROPPED_BY_BOUND", "DROPPED_OUT_OF_DOMAIN",
           "check_counts", "counted_rows", "total_problem", "leaf_counts_to_nodes", "count_rows", "count_cells",
           "place_cells", "keyed_counts"]


def check_counts(df: pd.DataFrame, count: str) -> np.ndarray:
    """The pre-aggregated count column as int64; a one-line error for anything else."""
    if count not in df.columns:
        raise DataError(expected_one_of("count column", count, [str(c) for c in df.columns]).replace(
            "unknown count column", "missing count column"))
    c = df[count]
    if not pd.api.types.is_numeric_dtype(c) or pd.api.types.is_bool_dtype(c):
        raise DataError(f"count column {count!r} must hold non-negative integers, got dtype {c.dtype}")
    if c.isna().any():
        raise DataError(f"count column {count!r} has missing values; fill or drop them")
    if pd.api.types.is_integer_dtype(c):
        # integers stay integers: never through float64, which cannot hold odd counts above 2**53
        if pd.api.types.is_unsigned_integer_dtype(c) and len(c) and int(c.max()) > rules.MAX_EXACT_COUNT:
            rules.enforce(rules.value_range_problem(float(c.max()), f"a count in column {count!r}"), DataError)
        arr = c.to_numpy(dtype=np.int64)
        if (arr < 0).any():
            raise DataError(f"count column {count!r} has negative counts; counts must be >= 0")
        if arr.size:
            rules.enforce(rules.value_range_problem(int(arr.max()), f"a count in column {count!r}"), DataError)
        return arr
    arr = c.to_numpy(dtype=np.float64, na_value=np.nan)
    if (arr < 0).any():
        raise DataError(f"count column {count!r} has negative counts; counts must be >= 0")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
        raise DataError(f"count column {count!r} has non-integer counts; counts must be whole numbers")
    if arr.size:  # a float above 2**53 may already have lost its last digits
        rules.enforce(rules.value_range_problem(float(arr.max()), f"a count in column {count!r}"), DataError)
    return arr.astype(np.int64)


def counted_rows(df: pd.DataFrame, count: str | None) -> tuple[pd.DataFrame, np.ndarray | None]:
    """The rows that count something and their int64 counts (``None``: one row = one).

    A zero-count row (e.g. from ``groupby(observed=False)``) counts nothing wherever it
    points, so it is never out of domain: every front-end drops it before placing rows.
    """
    if count is None:
        return df, None
    weights = check_counts(df, count)
    if weights.size and not weights.all():
        nonzero = weights != 0
        return df[nonzero], weights[nonzero]
    return df, weights


def total_problem(weights: np.ndarray) -> str | None:
    """The sum of non-negative int64 counts must stay within MAX_EXACT_COUNT (then no
    int64 sum of a subset can overflow). Exact: the float sum decides unless it is close
    to the limit, where Python integers do."""
    approx = float(np.sum(weights, dtype=np.float64))
    if approx > 2.0 * rules.MAX_EXACT_COUNT:
        return rules.value_range_problem(approx, "the total of the counts")
    if approx > 0.5 * rules.MAX_EXACT_COUNT:
        return rules.value_range_problem(sum(int(w) for w in weights.tolist()), "the total of the counts")
    return None


def leaf_counts_to_nodes(tree: Tree, counts_ext: np.ndarray) -> np.ndarray:
    """Node counts (external order) from counts placed at the nodes rows reached (leaves).
    ``counts_ext`` is handed over: it may be summed in place."""
    internal = tree.to_internal(counts_ext)
    # every row sits at a leaf (or stops at a leaf of a ragged tree): sum up the subtrees
    if np.any(internal[tree.internal.n_children > 0] != 0):
        raise DataError("some rows stop above the leaf level; every row needs a value for every level")
    return tree.to_external(tree.internal.sum_up(np.ascontiguousarray(internal), consume=True))


def _grouped(structure: Any, df: Any, names: list[str]) -> tuple[np.ndarray | None, dict[str, Any] | Any]:
    """Rows grouped into their distinct paths over ``names`` (:func:`group_paths`): each
    row's path id and the paths' labels; ``(None, df)`` when the labels cannot be grouped
    (unhashable cells), so the caller places every row and the row-level checks speak."""
    grouped = group_paths(df, names)
    if grouped is None:
        return None, df
    return grouped


def _path_sums(gid: np.ndarray | None, n_paths: int, weights: np.ndarray | None) -> np.ndarray:
    """Rows (or, with ``weights``, int64 sums of the weights) per path."""
    if gid is None:  # ungrouped: every row is its own path
        return np.ones(n_paths, np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    return keyed_counts(gid, weights, n_paths)


def _bounded_paths(gid: np.ndarray | None, paths: Any, df: pd.DataFrame, names: list[str],
                   bound: tuple[str, int, Any]) -> tuple[np.ndarray | None, Any, pd.DataFrame, int]:
    """Contribution bounding on grouped rows (:func:`~hierdp.frontends._contributions.bounded_rows`):
    a row's content hash is its path's (each distinct path hashed once); the kept rows'
    path ids, and every path (the domain check covers the dropped rows too). Without
    grouping (unhashable labels) the rows themselves are bounded. Returns ``(gid, paths,
    df, n_dropped)``."""
    unit, c, key = bound
    if gid is None:
        df, n_dropped = bound_contributions(df, unit, c, key, content=names)
        return None, df, df, n_dropped
    phash = content_hash(paths, names)
    ids = gid
    keep, n_dropped = bounded_rows(df[unit], c, key, lambda over: phash[ids[over]])
    if keep is None:
        return gid, paths, df, 0
    # every path stays, also one whose rows the bound all dropped (it counts 0): the domain
    # check sees every record's values, whatever the bounding key
    return gid[keep], paths, df, n_dropped


def count_rows(structure: Any, df: pd.DataFrame, *, count: str | None,
               unknown: str, bound: tuple[str, int, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """True node counts (external order) of the rows of ``df`` and private notes.

    Rows are grouped into their distinct label paths in one vectorised pass over the
    columns' integer codes (:func:`~hierdp.decompositions.declared.group_paths`); only
    the distinct paths are placed on the tree and checked against the declared domains.
    Rows outside the declared domains raise (``unknown="raise"``; the message names levels,
    never values) or are dropped and their number kept in the private notes
    (``unknown="drop"``). With ``count=``, weights are summed per path in int64. With
    ``bound=(unit, c, key)`` each unit keeps at most ``c`` rows
    (:func:`~hierdp.frontends._contributions.bounded_rows`); every path is still checked.
    """
    notes: dict[str, Any] = {}
    df, weights = counted_rows(df, count)  # zero-count rows count nothing and are never out of domain
    gid, paths = _grouped(structure, df, list(structure.levels))
    if bound is not None:
        gid, paths, df, notes["rows_dropped_by_contribution_bound"] = _bounded_paths(
            gid, paths, df, list(structure.levels), bound)
    node, bad, examples = structure.locate_paths(paths)
    n_paths = node.size
    rows = _path_sums(gid, n_paths, None)
    if bad.any():
        if unknown == "raise":
            raise domain_error(examples)
        notes["rows_dropped_out_of_domain"] = int(rows[bad].sum())
    keep = ~bad
    if weights is None:
        sums = rows
    else:  # int64 sums (np.bincount would add the weights in float64)
        keep_rows = keep if gid is None else keep[gid]
        rules.enforce(total_problem(weights[keep_rows]), DataError)
        sums = _path_sums(gid, n_paths, weights)
    counts = np.zeros(structure.n_ext, dtype=np.int64)
    np.add.at(counts, node[keep], sums[keep])
    return leaf_counts_to_nodes(structure.tree, counts), notes


# -- histogram cells (n, k) ------------------------------------------------------------------

def _place_paths(structure: Any, paths: Any, cells: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    k = int(np.prod(cell_sizes(cells)))
    node, bad, problems = structure.locate_paths(paths)
    cell, cbad, cproblems = cell_codes(cells, paths)
    return np.maximum(node, 0) * k + cell, bad | cbad, problems + [p for p in cproblems if p not in problems]


def place_cells(structure: Any, df: Any, cells: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Flat (node, cell) key ``node * k + cell`` of each row, the mask of rows outside the
    declared level or cell domains, and the kinds of problem (levels first).

    ``cells`` is ``{dimension: pd.Index}`` (see :mod:`hierdp.frontends._cells`); ``df`` a
    DataFrame (or a mapping of columns) holding the level and cell columns. The distinct
    (path, cell) combinations are placed, then spread back to the rows.
    """
    gid, paths = _grouped(structure, df, list(structure.levels) + list(cells))
    key, bad, problems = _place_paths(structure, paths, cells)
    return (key, bad, problems) if gid is None else (key[gid], bad[gid], problems)


def count_cells(structure: Any, df: pd.DataFrame, cells: Any, *, count: str | None,
                unknown: str, bound: tuple[str, int, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """True node histograms ``(n, k)`` (external order) of the rows of ``df`` and private notes.

    Like :func:`count_rows`, with each row also placed in one cell (row-major over the
    declared cell dimensions): the distinct (path, cell) combinations are grouped, placed
    and checked. Rows with a level or cell value outside its declared domain raise
    (``unknown="raise"``) or are dropped (``unknown="drop"``, counted in the private notes).
    """
    k = int(np.prod(cell_sizes(cells)))
    notes: dict[str, Any] = {}
    df, weights = counted_rows(df, count)
    gid, paths = _grouped(structure, df, list(structure.levels) + list(cells))
    if bound is not None:
        gid, paths, df, notes["rows_dropped_by_contribution_bound"] = _bounded_paths(
            gid, paths, df, list(structure.levels) + list(cells), bound)
    key, bad, problems = _place_paths(structure, paths, cells)
    if bad.any():
        if unknown == "raise":
            raise domain_error(problems)
        notes["rows_dropped_out_of_domain"] = int(_path_sums(gid, key.size, None)[bad].sum())
    keep = ~bad
    if weights is not None:  # as count_rows: int64 sums never wrap around
        keep_rows = keep if gid is None else keep[gid]
        rules.enforce(total_problem(weights[keep_rows]), DataError)
    sums = _path_sums(gid, key.size, weights)
    counts = np.zeros(structure.n_ext * k, np.int64)
    np.add.at(counts, key[keep], sums[keep])
    return leaf_counts_to_nodes(structure.tree, counts.reshape(structure.n_ext, k)), notes


def keyed_counts(key: np.ndarray, weights: np.ndarray | None, size: int) -> np.ndarray:
    """``np.bincount`` of ``key`` (int64 result; integer weights summed exactly)."""
    if weights is None:
        return np.bincount(key, minlength=size).astype(np.int64, copy=False)
    w = np.asarray(weights, dtype=np.int64)
    if w.size and int(w.max(initial=0)) * 1.0 * max(len(w), 1) >= 2.0 ** 53:
        # sums could exceed float64's exact integers: add in int64 instead
        out = np.zeros(size, np.int64)
        np.add.at(out, key, w)
        return out
    return np.rint(np.bincount(key, weights=w, minlength=size)).astype(np.int64)


#: reserved keys of a worker's (key, count) result: rows the contribution bound dropped,
#: rows outside the public domains (``unknown="drop"``); leaf-cell keys are >= 0
DROPPED_BY_BOUND, DROPPED_OUT_OF_DOMAIN = -1, -2


def dropped_notes(keys: np.ndarray, w: np.ndarray, bounded: bool) -> dict[str, Any]:
    """The private notes of the rows a distributed door dropped, from its workers' summed
    ``(key, count)`` rows (:data:`DROPPED_BY_BOUND`, :data:`DROPPED_OUT_OF_DOMAIN`):
    ``rows_dropped_by_contribution_bound`` when the door bounds contributions, and
    ``rows_dropped_out_of_domain`` when any row was dropped that way. Never published."""
    notes: dict[str, Any] = {}
    if bounded:
        notes["rows_dropped_by_contribution_bound"] = int(w[keys == DROPPED_BY_BOUND].sum())
    n_ood = int(w[keys == DROPPED_OUT_OF_DOMAIN].sum())
    if n_ood:
        notes["rows_dropped_out_of_domain"] = n_ood
    return notes
