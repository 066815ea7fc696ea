"""Contribution bounding: at most ``c`` rows per privacy unit.

With a privacy-unit column (a person, a household, a device) and ``max_contributions =
c``, every unit keeps at most ``c`` of its rows, chosen uniformly at random; then one
unit changes each level's counts by at most ``c`` in L1 (``Sensitivity.bounded(c)``).
The choice uses the release's random source (secure by default): each row gets a random
64-bit key, rows are ranked by key within their unit (ties broken by a second key, then
by position, which keeps the choice uniform), and rows ranked below ``c`` are kept.
Vectorised: one sort, no Python loop over units.

The number of dropped rows is a fact about the private data: callers must keep it out
of public outputs (``Ledger.private_notes``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hierdp.errors import DataError, expected_one_of
from hierdp.rng import RandomSource

__all__ = ["bound_contributions", "check_max_contributions"]


def check_max_contributions(max_contributions: object) -> int:
    """``max_contributions`` as an int >= 1, else :class:`DataError`."""
    if isinstance(max_contributions, bool) or not isinstance(max_contributions, (int, np.integer)):
        raise DataError(f"max_contributions must be an integer >= 1, got {max_contributions!r}")
    if max_contributions < 1:
        raise DataError(f"max_contributions must be an integer >= 1, got {max_contributions!r}")
    return int(max_contributions)


def bound_contributions(df: pd.DataFrame, unit: str, max_contributions: int,
                        rng: RandomSource) -> tuple[pd.DataFrame, int]:
    """Keep at most ``max_contributions`` rows per value of ``df[unit]``, uniformly at random.

    Returns ``(bounded_df, n_dropped)``; ``bounded_df`` keeps the original row order and
    index. Missing unit values (NA) are an error: every row must belong to a unit.
    """
    c = check_max_contributions(max_contributions)
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"bound_contributions needs a pandas DataFrame, got {type(df).__name__}")
    if unit not in df.columns:
        raise DataError(expected_one_of("privacy-unit column", unit, [str(x) for x in df.columns]))
    n = len(df)
    if n == 0:
        return df.copy(), 0
    col = df[unit]
    if col.isna().any():
        raise DataError(f"privacy-unit column {unit!r} has missing values; every row needs a unit")
    codes, _ = pd.factorize(col, sort=False)
    codes = codes.astype(np.int64)
    k1 = rng.words(n)
    k2 = rng.words(n)
    # sort by (unit, key1, key2): np.lexsort sorts by the last key first
    order = np.lexsort((k2, k1, codes))
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_codes)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    rank = np.arange(n) - group_start
    keep = np.zeros(n, dtype=bool)
    keep[order[rank < c]] = True
    n_dropped = int(n - keep.sum())
    return df.iloc[np.flatnonzero(keep)].copy(), n_dropped
