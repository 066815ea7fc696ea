"""Contribution bounding: at most ``c`` rows per privacy unit, the same choice on every engine.

With a privacy-unit column (a person, a household, a device) and ``max_contributions =
c``, every unit keeps at most ``c`` of its rows, chosen uniformly at random; then one
unit changes each level's counts by at most ``c`` in L1 (``Sensitivity.bounded(c)``).

The choice is a function of the data's *content* and a 256-bit bounding key, never of
the rows' order or of how an engine partitions them, so that the pandas, Polars, Dask,
Spark and dataset doors keep the same rows for the same key (and a rerun task keeps
the rows it kept before):

1. only units with more than ``c`` rows are looked at (the others keep every row);
2. a unit's rows are put in a canonical order by the hash of their *content*, the
   values of the columns a release counts (its level and cell columns,
   :func:`content_hash`); rows of equal content are interchangeable (they add to the
   same count), so which of them comes first does not matter;
3. the row at place ``j`` of unit ``u`` gets the key ``PRF(K, u, j)``: 64-bit word
   ``j mod 8`` of the ChaCha20 block (RFC 8439) under the bounding key ``K`` with the
   nonce ``(TAG, hash(u))`` and block counter ``j div 8``
   (:func:`hierdp.keyed_noise.chacha_block`, tested against OpenSSL);
4. the ``c`` rows of smallest ``(key, j)`` are kept.

Under a random ``K`` the keys of one unit are independent uniform 64-bit words (ChaCha20
is a pseudorandom function), so every ``c``-subset of the unit's rows is equally
likely: the law of a uniform choice. Two units whose 64-bit hashes collide would share
keys; each still gets a uniform subset.

*Privacy does not rest on the key.* For any fixed ``K`` the kept rows of a unit are a
function of that unit's rows only, so a dataset and its neighbour (one unit added or
removed) differ in at most ``c`` kept rows: the sensitivity holds whatever ``K`` is,
and even an adversary who knew it learns nothing the counts' noise does not cover. The
key exists so that the choice is uniform and cannot be steered by crafted data; it is
drawn from the release's random source (secure by default, seeded in tests) on the
driver and handed to the tasks, which never draw randomness of their own.

The number of dropped rows is a fact about the private data: callers must keep it out
of public outputs (``Ledger.private_notes``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hierdp._kernels.jit import numba as nb
from hierdp.errors import DataError, expected_one_of
from hierdp.keyed_noise import chacha_block
from hierdp.rng import RandomSource

__all__ = ["bound_contributions", "bounded_rows", "bounding_key", "check_max_contributions", "combine_hashes",
           "content_hash", "value_hash"]

#: the first nonce word of the bounding PRF ("bnd\0"): a constant, since the key is the
#: bounding key alone (never a release's noise key)
_TAG = 0x646E62
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
#: tags that keep integers, other numbers, text and missing values apart in the hashes
_FLOAT, _TEXT, _NA = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_SEED = np.uint64(0x243F6A8885A308D3)


def check_max_contributions(max_contributions: object) -> int:
    """``max_contributions`` as an int >= 1, else :class:`DataError`."""
    if isinstance(max_contributions, bool) or not isinstance(max_contributions, (int, np.integer)):
        raise DataError(f"max_contributions must be an integer >= 1, got {max_contributions!r}")
    if max_contributions < 1:
        raise DataError(f"max_contributions must be an integer >= 1, got {max_contributions!r}")
    return int(max_contributions)


def bounding_key(rng: RandomSource) -> np.ndarray:
    """A 256-bit bounding key drawn from ``rng``: the first four 64-bit words, as the eight
    little-endian 32-bit words ChaCha20 takes (an ``int64`` array of 8)."""
    words = np.asarray(rng.words(4), dtype=np.uint64)
    lo = (words & np.uint64(0xFFFFFFFF)).astype(np.int64)
    hi = (words >> np.uint64(32)).astype(np.int64)
    return np.column_stack([lo, hi]).reshape(-1)


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser (a bijection of 64-bit words), elementwise on uint64."""
    z = z.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _int_hash(v: np.ndarray) -> np.ndarray:
    return _mix(np.asarray(v, dtype=np.int64).view(np.uint64))


def _float_hash(v: np.ndarray) -> np.ndarray:
    """Whole numbers hash as the integers they are (``3.0`` as ``3``), others by their bits."""
    v = np.asarray(v, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(v) & (v == np.floor(v)) & (np.abs(v) < 2.0 ** 63)
    out = _mix(v.view(np.uint64) ^ _FLOAT)
    if whole.any():
        out[whole] = _int_hash(v[whole].astype(np.int64))
    return out


def _text_hash(values: np.ndarray) -> np.ndarray:
    """Text (an object array of ``str``) by SipHash-2-4 of its UTF-8 bytes (pandas' own)."""
    return _mix(pd.util.hash_array(np.asarray(values, dtype=object), categorize=True) ^ _TEXT)


def value_hash(column: Any) -> np.ndarray:
    """A 64-bit hash per value of ``column`` that depends on the value only, not on how an
    engine typed it: integers of any width (nullable or not, and whole floats) as
    integers, other numbers by their float64 bits, everything else by its text; every
    missing value alike.

    Parameters
    ----------
    column : pandas.Series or array-like

    Returns
    -------
    numpy.ndarray
        ``uint64``, one per value.
    """
    col = column if isinstance(column, pd.Series) else pd.Series(column)
    dt = col.dtype
    if isinstance(dt, pd.CategoricalDtype):  # each category hashed once, by its value
        cat = pd.Categorical(col)
        codes = np.asarray(cat.codes, dtype=np.int64)
        out = value_hash(pd.Series(cat.categories))[np.maximum(codes, 0)] if len(cat.categories) else \
            np.zeros(len(codes), dtype=np.uint64)
        out[codes < 0] = _NA
        return out
    numeric = not isinstance(dt, pd.CategoricalDtype) and (
        pd.api.types.is_bool_dtype(dt) or pd.api.types.is_integer_dtype(dt) or pd.api.types.is_float_dtype(dt))
    if numeric or len(col) <= 64:
        return _hash_values(col)
    # text and other objects: each distinct value hashed once (labels repeat a lot)
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    out = _hash_values(pd.Series(np.asarray(uniques, dtype=object), dtype=object))[np.maximum(codes, 0)]
    out[codes < 0] = _NA
    return out


def _hash_values(col: pd.Series) -> np.ndarray:
    """:func:`value_hash`, value by value."""
    dt = col.dtype
    na = col.isna().to_numpy(dtype=bool)
    if isinstance(dt, pd.CategoricalDtype):
        col, dt = pd.Series(np.asarray(col, dtype=object)), np.dtype(object)
    if pd.api.types.is_bool_dtype(dt) or pd.api.types.is_integer_dtype(dt):
        if pd.api.types.is_unsigned_integer_dtype(dt) and len(col) and col.max() >= 2 ** 63:
            out = _float_hash(col.to_numpy(dtype=np.float64, na_value=np.nan))
        else:
            out = _int_hash(col.to_numpy(dtype=np.int64, na_value=0))
    elif pd.api.types.is_float_dtype(dt):
        out = _float_hash(col.to_numpy(dtype=np.float64, na_value=np.nan))
    else:
        values = np.array(col.astype(object), dtype=object)
        kind = pd.api.types.infer_dtype(values, skipna=True)
        filled = values.copy()  # missing values are set apart below (their hash is _NA)
        filled[na] = 0 if kind in ("integer", "floating", "mixed-integer-float", "boolean") else ""
        if kind in ("integer", "boolean"):
            out = _int_hash(filled.astype(np.int64))
        elif kind in ("floating", "mixed-integer-float"):
            out = _float_hash(filled.astype(np.float64))
        elif kind in ("string", "empty"):
            out = _text_hash(filled)
        else:  # mixed: per distinct value
            out = np.empty(len(filled), dtype=np.uint64)
            for i, x in enumerate(filled):
                if isinstance(x, (bool, np.bool_, int, np.integer)) and -2 ** 63 <= int(x) < 2 ** 63:
                    out[i] = _int_hash(np.array([int(x)]))[0]
                elif isinstance(x, (float, np.floating)):
                    out[i] = _float_hash(np.array([float(x)]))[0]
                else:
                    out[i] = _text_hash(np.array([str(x)], dtype=object))[0]
    out = np.asarray(out, dtype=np.uint64)
    out[na] = _NA
    return out


def content_hash(df: pd.DataFrame | Mapping[str, Any], columns: Sequence[str]) -> np.ndarray:
    """The 64-bit hash of each row's values in ``columns`` (in that order), by
    :func:`value_hash`: equal for rows of equal content on every engine."""
    if not len(columns):
        return np.full(len(df), _SEED, dtype=np.uint64)
    return combine_hashes([value_hash(df[name]) for name in columns])


def combine_hashes(column_hashes: Sequence[np.ndarray]) -> np.ndarray:
    """The content hash of rows from their columns' :func:`value_hash` arrays (in column
    order): what :func:`content_hash` computes, for engines that map values to hashes
    themselves."""
    h = np.full(len(column_hashes[0]), _SEED, dtype=np.uint64)
    for vh in column_hashes:
        h = _mix(h * np.uint64(0x100000001B3) + np.asarray(vh, dtype=np.uint64))
    return h


@nb.njit(cache=True, nogil=True)
def _unsigned_key(x):
    """An int64 bit pattern as a key that orders like the unsigned 64-bit word."""
    return x ^ (-9223372036854775807 - 1)


@nb.njit(cache=True, nogil=True)
def _sort_rows(rows, key):
    """``rows`` in place by ``key[rows]`` (ascending, stable): insertion sort for the few
    rows a unit usually has, a merge sort beyond."""
    m = rows.shape[0]
    if m > 32:
        o = np.argsort(key[rows], kind="mergesort")
        rows[:] = rows[o]
        return
    for a in range(1, m):
        r = rows[a]
        kr = key[r]
        b = a - 1
        while b >= 0 and key[rows[b]] > kr:
            rows[b + 1] = rows[b]
            b -= 1
        rows[b + 1] = r


@nb.njit(cache=True, nogil=True)
def _choose(keyw, ucode, n_units, uhash, chash, c, drop):  # pragma: no cover - compiled
    """Mark in ``drop`` the rows over the bound ``c``. ``ucode[i]`` is row ``i``'s unit
    (``0 <= ucode < n_units``), ``uhash`` the units' hashes (int64 patterns), ``chash``
    the rows' content hashes as unsigned-order keys. Per unit: its rows in content order
    get places ``j = 0, 1, ...``; place ``j`` gets 64-bit word ``j % 8`` of ChaCha20 block
    ``j // 8`` under ``keyw`` with nonce ``(_TAG, uhash low, uhash high)``; the rows of
    the ``c`` smallest ``(key, j)`` stay."""
    n = ucode.shape[0]
    start = np.zeros(n_units + 1, dtype=np.int64)
    for i in range(n):
        start[ucode[i] + 1] += 1
    for g in range(n_units):
        start[g + 1] += start[g]
    fill = start[:-1].copy()
    rows = np.empty(n, dtype=np.int64)
    for i in range(n):  # a stable counting sort by unit
        rows[fill[ucode[i]]] = i
        fill[ucode[i]] += 1
    blk = np.empty(8, dtype=np.int64)
    m32 = 0xFFFFFFFF
    most = 0
    for g in range(n_units):
        most = max(most, start[g + 1] - start[g])
    pk = np.empty(most, dtype=np.int64)
    places = np.empty(most, dtype=np.int64)
    for g in range(n_units):
        s, e = start[g], start[g + 1]
        m = e - s
        if m <= c:
            continue
        part = rows[s:e]
        _sort_rows(part, chash)
        h = uhash[g]
        for j in range(m):  # word j % 8 of block j // 8: one block per 8 places
            if j % 8 == 0:
                chacha_block(keyw, _TAG, h & m32, (h >> 32) & m32, j // 8, blk, 0)
            pk[j] = _unsigned_key(blk[j % 8])
            places[j] = j
        here = places[:m]
        _sort_rows(here, pk)  # stable: equal keys stay in place order
        for t in range(c, m):
            drop[part[here[t]]] = True


def bounded_rows(units: pd.Series, max_contributions: int, key: RandomSource | np.ndarray,
                 row_hash: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray | None, int]:
    """Which rows the bound keeps: :func:`bound_contributions` on a unit column and the rows'
    content hashes (``row_hash(rows)``: the :func:`content_hash` of the given row positions,
    asked only for the rows of units over the bound).

    Returns
    -------
    (numpy.ndarray or None, int)
        A boolean mask of the kept rows (``None``: every row is kept) and the number dropped.
    """
    c = check_max_contributions(max_contributions)
    keyw = np.asarray(key, dtype=np.int64) if isinstance(key, np.ndarray) else bounding_key(key)
    if keyw.shape != (8,):
        raise ValueError("a bounding key is 8 32-bit words (bounding_key)")
    n = len(units)
    if n == 0:
        return None, 0
    if units.isna().any():
        raise DataError(f"privacy-unit column {units.name!r} has missing values; every row needs a unit")
    codes, uniques = pd.factorize(units, sort=False)
    sizes = np.bincount(codes)
    over_units = np.flatnonzero(sizes > c)
    if over_units.size == 0:
        return None, 0
    if sizes.max() >= 2 ** 32:
        raise DataError(f"a unit of {units.name!r} has 2**32 rows or more; bound it before the release")
    compact = np.full(sizes.size, -1, dtype=np.int64)
    compact[over_units] = np.arange(over_units.size)
    row_unit = compact[codes]
    over = np.flatnonzero(row_unit >= 0)  # the rows of units over the bound
    chash = np.asarray(row_hash(over), dtype=np.uint64).view(np.int64) ^ np.int64(-2 ** 63)
    uhash = value_hash(pd.Series(uniques).iloc[over_units]).view(np.int64)
    drop = np.zeros(over.size, dtype=np.bool_)
    _choose(keyw, row_unit[over], over_units.size, np.ascontiguousarray(uhash), chash, c, drop)
    keep = np.ones(n, dtype=bool)
    keep[over[drop]] = False
    return keep, int(drop.sum())


def bound_contributions(df: pd.DataFrame, unit: str, max_contributions: int, key: RandomSource | np.ndarray,
                        content: Sequence[str] | None = None) -> tuple[pd.DataFrame, int]:
    """Keep at most ``max_contributions`` rows per value of ``df[unit]``, uniformly at random.

    Parameters
    ----------
    df : pandas.DataFrame
        The records.
    unit : str
        The privacy-unit column; a missing value is an error (every row needs a unit).
    max_contributions : int
        ``c >= 1``.
    key : RandomSource or numpy.ndarray
        The bounding key (:func:`bounding_key`), or a random source to draw it from.
    content : sequence of str, optional
        The columns whose values a release counts (levels, then cell columns); rows equal
        in them are interchangeable. Default: every column but ``unit``.

    Returns
    -------
    (pandas.DataFrame, int)
        The kept rows (original order and index) and the number dropped.
    """
    check_max_contributions(max_contributions)
    if not isinstance(df, pd.DataFrame):
        raise DataError(f"bound_contributions needs a pandas DataFrame, got {type(df).__name__}")
    if unit not in df.columns:
        raise DataError(expected_one_of("privacy-unit column", unit, [str(x) for x in df.columns]))
    names = [x for x in df.columns if x != unit] if content is None else list(content)
    keep, n_dropped = bounded_rows(df[unit], max_contributions, key,
                                   lambda over: content_hash(df[names].iloc[over], names))
    if keep is None:
        return df.copy(), 0
    return df.iloc[np.flatnonzero(keep)].copy(), n_dropped
