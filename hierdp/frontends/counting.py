"""Counting records on a structure: true node counts, separate from building the structure.

Front-ends (pandas today; xarray and Dask on the roadmap) place records on a
:class:`~hierdp.decompositions.declared.DeclaredStructure` and count them here. Counts are
private: nothing here logs or prints them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hierdp.errors import DataError, expected_one_of
from hierdp.tree import Tree

__all__ = ["check_counts", "leaf_counts_to_nodes", "count_rows"]


def check_counts(df: pd.DataFrame, count: str) -> np.ndarray:
    """The pre-aggregated count column as int64; a one-line error for anything else."""
    if count not in df.columns:
        raise DataError(expected_one_of("count column", count, [str(c) for c in df.columns]).replace(
            "unknown count column", "missing count column"))
    c = df[count]
    if not pd.api.types.is_numeric_dtype(c) or pd.api.types.is_bool_dtype(c):
        raise DataError(f"count column {count!r} must hold non-negative integers, got dtype {c.dtype}")
    arr = c.to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(arr).any():
        raise DataError(f"count column {count!r} has missing values; fill or drop them")
    if (arr < 0).any():
        raise DataError(f"count column {count!r} has negative counts; counts must be >= 0")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
        raise DataError(f"count column {count!r} has non-integer counts; counts must be whole numbers")
    return arr.astype(np.int64)


def leaf_counts_to_nodes(tree: Tree, counts_ext: np.ndarray) -> np.ndarray:
    """Node counts (external order) from counts placed at the nodes rows reached (leaves)."""
    internal = tree.to_internal(counts_ext)
    # every row sits at a leaf (or stops at a leaf of a ragged tree): sum up the subtrees
    if np.any(internal[tree.internal.n_children > 0] != 0):
        raise DataError("some rows stop above the leaf level; every row needs a value for every level")
    return tree.to_external(tree.internal.sum_up(np.ascontiguousarray(internal)))


def count_rows(structure: Any, df: pd.DataFrame, *, count: str | None, unknown: str) -> tuple[np.ndarray, dict[str, Any]]:
    """True node counts (external order) of the rows of ``df`` and private notes.

    Rows outside the declared domains raise (``unknown="raise"``) or are dropped and
    counted in the private notes (``unknown="drop"``).
    """
    notes: dict[str, Any] = {}
    node, bad, examples = structure.locate(df)
    if bad.any():
        if unknown == "raise":
            raise DataError(
                "the data have " + "; ".join(examples) + " (values not shown: they are private; in Python, "
                "df.dptree(...).out_of_domain() lists the rows). Fix the domains, or pass unknown='drop' to drop such rows"
            )
        notes["rows_dropped_out_of_domain"] = int(bad.sum())
    weights = check_counts(df, count) if count is not None else None
    keep = ~bad
    w = None if weights is None else weights[keep]
    counts = np.bincount(node[keep], weights=w, minlength=structure.n_ext)
    counts = np.rint(counts).astype(np.int64) if w is not None else counts.astype(np.int64)
    return leaf_counts_to_nodes(structure.tree, counts), notes
