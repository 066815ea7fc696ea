"""The ``.dptree`` accessor on pandas DataFrames and Series.

``df.dptree(levels=[...], domains=...)`` and, for the output of
``df.groupby(levels).size()``, ``series.dptree(domains=...)`` (the MultiIndex names are
the levels, the values the counts). The accessor only stores the object; everything is
validated when it is called (conventions: validation in methods, not in ``__init__``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import pandas as pd

from hierdp.errors import DataError
from hierdp.frame import DPTree

__all__ = ["DPTreeFrameAccessor", "DPTreeSeriesAccessor"]


_SPENT: dict[int, list[dict[str, Any]]] = {}


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
    """``df.dptree(levels, domains, count=None, unit=None, max_contributions=None, unknown="raise")``."""

    def __init__(self, obj: pd.DataFrame) -> None:
        self._obj = obj
        self._spent = _spent_for(obj)

    def __call__(self, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total") -> DPTree:
        return DPTree(self._obj, levels, domains, count=count, unit=unit, max_contributions=max_contributions,
                      unknown=unknown, root=root, spent=self._spent)


@pd.api.extensions.register_series_accessor("dptree")
class DPTreeSeriesAccessor:
    """``counts.dptree(domains=...)`` for a Series of counts indexed by the levels."""

    def __init__(self, obj: pd.Series) -> None:
        self._obj = obj
        self._spent = _spent_for(obj)

    def __call__(self, domains: Any = None, *, levels: Sequence[str] | None = None, unknown: str = "raise",
                 root: str = "total") -> DPTree:
        s = self._obj
        names = [n for n in s.index.names]
        if any(n is None for n in names):
            raise DataError("the Series index must name its levels (e.g. the result of df.groupby([...]).size())")
        if levels is None:
            levels = names
        elif list(levels) != names:
            raise DataError(f"levels {list(levels)} do not match the index names {names}")
        value_name = "count" if "count" not in names else "__count__"
        frame = s.rename(value_name).reset_index()
        return DPTree(frame, levels, domains, count=value_name, unknown=unknown, root=root, spent=self._spent)
