"""The built-in decomposition ``declared``: a public tree from declared domains.

Privacy rule 1 (design): the structure is public. Each level declares its domain:

* a list / array / ``pd.Index`` — the level's values, under *every* parent (a product,
  e.g. every day under every location);
* a dict ``{parent_label: [values]}`` — values per parent (e.g. counties per state); keys
  may also be full label paths (tuples) when parent labels repeat;
* a ``DataFrame`` of public paths (e.g. a published geography file) with the columns of
  this level and of every level above it;
* ``"observed"`` — the user's explicit assertion that the values seen in the data are
  public knowledge (the "known attributes" of Dawson et al.); with pre-aggregated counts
  a zero-count row is not an observation;
* ``"categories"`` — for a pandas categorical column: its declared categories are the
  domain (an explicit opt-in: categories often come from a public code list, but are
  never used as a domain unless asked).

``domains="observed"`` applies the assertion to all levels; a DataFrame applies to every
level whose column it has. Declared values absent from the data become zero-count nodes;
data outside a declared domain raise (or, with ``unknown="drop"``, are dropped and the
number kept out of the public ledger).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hierdp.decompositions.base import Decomposition, Structure
from hierdp.errors import DataError, HierarchyError, expected_one_of
from hierdp.tree import Tree

__all__ = ["Declared", "DeclaredStructure", "build_structure", "check_levels", "group_paths", "NO_DOMAIN_MESSAGE",
           "RESERVED_COLUMNS"]

#: Output columns of a release table; levels cannot use these names.
RESERVED_COLUMNS = frozenset({"level", "node", "cell", "estimate", "std", "noisy", "ci_low", "ci_high", "status"})

NO_DOMAIN_MESSAGE = (
    "no domain declared for level {level!r}: the tree's structure must be public, so declare "
    "each level's values (e.g. domains={{{level!r}: [...]}}, a per-parent dict, or a DataFrame of public paths), "
    "or pass domains='observed' (or {{{level!r}: 'observed'}}) to assert that the values seen in the data are public"
)


@dataclass
class _Level:
    name: str
    index: pd.Index  # label values; codes index into it
    keys: np.ndarray  # sorted parent_ext * ncodes + code of the nodes of this depth
    offset: int  # external id of the first node of this depth
    provenance: str


@dataclass
class DeclaredStructure(Structure):
    """A public tree built from declared domains, plus what is needed to place rows in it."""

    levels: list[str] = field(default_factory=list)
    _levels: list[_Level] = field(default_factory=list, repr=False)
    n_ext: int = 0

    def locate(self, columns: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Place records given their level columns (a DataFrame, or a mapping from level
        name to an array of labels): the external node id of each row (the deepest node its
        path reaches), a mask of rows outside the declared domains, and the kinds of problem
        found per level (for error messages; they name levels, never values, which come from
        the private data).

        Many rows are grouped into their distinct label paths first (:func:`group_paths`)
        and only those are placed on the tree, then spread back to the rows: the same
        result as placing every row, at the cost of one factorisation per column."""
        n_rows = len(columns[self.levels[0]]) if self.levels else 0
        if n_rows >= _GROUP_ABOVE:
            grouped = group_paths(columns, self.levels)
            if grouped is not None:
                gid, paths = grouped
                node, bad, examples = self.locate_paths(paths)
                return node[gid], bad[gid], examples
        return self.locate_paths(columns)

    def locate_paths(self, columns: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """:meth:`locate` without grouping: one search per level over all given rows (use it
        on distinct paths, e.g. those of :func:`group_paths`)."""
        n_rows = len(columns[self.levels[0]]) if self.levels else 0
        node = np.zeros(n_rows, np.int64)
        bad = np.zeros(n_rows, bool)
        examples: list[str] = []
        n_children_ext = self.tree.n_children
        for lo in self._levels:
            col = pd.Series(columns[lo.name]) if not isinstance(columns[lo.name], pd.Series) else columns[lo.name]
            _check_label_column(col, lo.name)
            isna = col.isna().to_numpy()
            codes = _codes_for(lo.index, col)
            found = _find(lo, node, codes)
            # rows that stop early: allowed only where the node reached is a leaf (ragged trees)
            stop_here = isna & ~bad & (n_children_ext[np.maximum(node, 0)] == 0)
            miss = ~bad & ~stop_here & (found < 0)
            if miss.any():
                what = f"missing {lo.name!r} values" if isna[miss].all() else (
                    f"{lo.name!r} values outside the declared domain" + ("" if lo.offset == 1 else " of their parent"))
                if what not in examples:
                    examples.append(what)
            bad |= miss
            node = np.where(bad, -1, np.where(stop_here, node, found))
        return node, bad, examples


class Declared(Decomposition):
    """Public structure from declared domains (lists, per parent, paths, or ``observed``).

    Parameters: ``levels`` (column names, top-down), ``domains`` (see the module
    docstring), ``root`` (name of depth 0, default ``total``). :meth:`decompose` reads the
    data only for levels declared ``observed`` (values the user asserted public) and to
    check that the level columns exist.
    """

    name = "declared"
    data_dependent = False

    def __init__(self, levels: Sequence[str] = (), domains: Any = None, root: str = "total") -> None:
        self.levels = check_levels(levels, root)
        self.domains = domains
        self.root = root

    def decompose(self, data: Any = None, *, budget: float | None = None, rng: Any = None) -> DeclaredStructure:
        return build_structure(data, self.levels, self.domains, root=self.root)


def first_invalid_text(values: Any) -> int | None:
    """The position in ``values`` (a sequence or array) of the first text that is not valid
    Unicode (a lone surrogate such as ``"\\ud800"``, e.g. from bytes decoded with
    ``errors="surrogateescape"``: it cannot be encoded as UTF-8, so no table can hold it),
    else ``None``. One encode of the distinct values in C; the rows are searched only when
    one of them fails."""
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.dtype.kind == "U":  # numpy's fixed-width text holds surrogates too
        arr = arr.astype(object)
    if arr.dtype != object or arr.size == 0:
        return None
    arr = arr.ravel()
    if not _invalid_among(pd.unique(arr)):
        return None
    return next(i for i, v in enumerate(arr) if isinstance(v, str) and not _encodes(v))


def _invalid_among(uniq: Any) -> bool:
    """Whether distinct values ``uniq`` hold text that cannot be encoded as UTF-8."""
    try:
        "\x00".join(uniq).encode("utf-8")
        return False
    except TypeError:  # not all text: check the strings among them
        return not all(_encodes(v) for v in uniq if isinstance(v, str))
    except UnicodeEncodeError:
        return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def invalid_text_error(what: str, position: int | None, private: bool = True) -> DataError:
    """The one-line error for :func:`first_invalid_text`: names ``what`` and the position
    (``None``: among distinct values, no row to name), never the value when ``private``."""
    shown = "the label is not shown: labels are private" if private else "a declared value"
    where = f" at position {position} (0-based; {shown})" if position is not None else f" ({shown})"
    return DataError(f"{what} holds text that is not valid Unicode{where}: a lone "
                     "surrogate, e.g. from bytes decoded with errors='surrogateescape'; decode the source with "
                     "errors='replace' or a correct encoding, or fix that value")


def domain_index(values: Any, what: str, forms: str) -> pd.Index:
    """A declared public domain as a ``pd.Index``: a non-empty list of distinct, non-missing
    values (``what`` names it in errors, e.g. "level 'state'"; ``forms`` the accepted forms)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise HierarchyError(f"domain of {what} must be {forms}; got {values!r}")
    if not isinstance(values, (pd.Index, np.ndarray, pd.Series)):
        values = list(values)
    if not hasattr(values, "dtype") or values.dtype.kind in "OU":  # text that no table could hold
        pos = first_invalid_text(np.asarray(values, dtype=object))
        if pos is not None:
            raise invalid_text_error(f"the domain of {what}", pos, private=False)
    idx = pd.Index(list(values) if not isinstance(values, (pd.Index, np.ndarray, pd.Series)) else values)
    if len(idx) == 0:
        raise HierarchyError(f"domain of {what} is empty; declare at least one value")
    if idx.hasnans:
        raise HierarchyError(f"domain of {what} contains a missing value; remove it")
    if not idx.is_unique:
        dup = idx[idx.duplicated()].unique()[:3].tolist()
        raise HierarchyError(f"domain of {what} lists {dup} more than once; list each value once")
    return idx


def _as_index(values: Any, level: str) -> pd.Index:
    idx = domain_index(values, f"level {level!r}", "a list of values, 'observed', a dict or a DataFrame")
    _no_blank_labels(idx, level)
    return idx


def _no_blank_labels(idx: pd.Index, level: str) -> None:
    """An empty or blank label would print like a missing value in the output (and read
    back as one), so its row could not be told from its parent's; two labels that print
    the same (``1`` and ``'1'``) would be two nodes nobody can tell apart."""
    if idx.dtype == object or pd.api.types.is_string_dtype(idx.dtype):
        if any(isinstance(v, str) and not v.strip() for v in idx):
            raise HierarchyError(f"level {level!r} has an empty label ''; give every value a visible name "
                                 "(empty cells read back as missing)")
    if idx.dtype == object:
        text = idx.astype(str)
        if text.duplicated().any():
            same = text[text.duplicated()][0]
            kinds = sorted({type(v).__name__ for v, t in zip(idx, text) if t == same})
            raise HierarchyError(f"level {level!r} has labels of different types that print the same ({same!r} as "
                                 f"{' and '.join(kinds)}); make the column one type, e.g. df[{level!r}].astype(str)")


def _check_label_column(col: pd.Series, level: str) -> None:
    """A level column holds labels (strings, numbers): a list, dict or set in a cell is a
    DataError, and so is text that is not valid Unicode (:func:`first_invalid_text`)."""
    if col.dtype == object:
        try:
            uniq = pd.unique(col.to_numpy())
        except TypeError:
            bad = next((type(v).__name__ for v in col if isinstance(v, (list, dict, set, np.ndarray))), "unhashable")
            raise DataError(f"level column {level!r} holds {bad} values; each cell must be one label (a string or "
                            f"a number), e.g. explode the lists with df.explode({level!r}) first") from None
        if _invalid_among(uniq):
            check_text(col.to_numpy(), f"level column {level!r}")
    elif isinstance(col.dtype, pd.CategoricalDtype) and col.dtype.categories.dtype == object:
        pos = first_invalid_text(col.dtype.categories.to_numpy())
        if pos is not None:  # the first row holding that category, else the category's own position
            rows = np.flatnonzero(col.cat.codes.to_numpy() == pos)
            raise invalid_text_error(f"level column {level!r}", int(rows[0])) if rows.size else \
                invalid_text_error(f"the categories of level column {level!r}", pos)


def check_text(values: Any, what: str, rows: bool = True) -> None:
    """A :class:`DataError` naming ``what`` and the position (when ``rows``: ``values`` are
    the rows, not distinct values) when ``values`` hold text that is not valid Unicode; the
    value itself is never shown."""
    pos = first_invalid_text(values)
    if pos is not None:
        raise invalid_text_error(what, pos if rows else None)


def _categories(df: pd.DataFrame | None, level: str) -> pd.Index:
    """The declared categories of a categorical level column (``domains="categories"``)."""
    if df is None:
        raise HierarchyError(f"level {level!r} is declared 'categories' but no data were given")
    col = df[level]
    if not isinstance(col.dtype, pd.CategoricalDtype):
        raise HierarchyError(f"level {level!r} is declared 'categories' but its column has dtype {col.dtype}, not "
                             f"category; declare its values, or convert it with df[{level!r}].astype('category')")
    return pd.Index(col.cat.categories)


def _normalize_domains(domains: Any, levels: Sequence[str], df: pd.DataFrame | None = None) -> dict[str, Any]:
    if domains is None:
        raise HierarchyError(NO_DOMAIN_MESSAGE.format(level=levels[0]))
    if isinstance(domains, str):
        if domains not in ("observed", "categories"):
            raise HierarchyError(f"domains must be 'observed', 'categories', a dict per level or a DataFrame; "
                                 f"got {domains!r}")
        return {lv: _categories(df, lv) if domains == "categories" else "observed" for lv in levels}
    memo: dict[int, pd.DataFrame] = {}
    domains = _pandas_frame(domains, memo)
    if isinstance(domains, Mapping):  # the same Polars frame for several levels stays one frame (one set of paths)
        domains = {k: _pandas_frame(v, memo) for k, v in domains.items()}
    if isinstance(domains, pd.DataFrame):
        missing = [lv for lv in levels if lv not in domains.columns]
        if missing:
            raise HierarchyError(NO_DOMAIN_MESSAGE.format(level=missing[0])
                                 + f" (the domains DataFrame has no column {missing[0]!r})")
        return {lv: domains for lv in levels}
    if isinstance(domains, Mapping):
        unknown = [k for k in domains if k not in levels]
        if unknown:
            raise HierarchyError(expected_one_of("level in domains", unknown[0], levels))
        out = {}
        for lv in levels:
            if lv not in domains:
                raise HierarchyError(NO_DOMAIN_MESSAGE.format(level=lv))
            out[lv] = _categories(df, lv) if isinstance(domains[lv], str) and domains[lv] == "categories" \
                else domains[lv]
        return out
    raise HierarchyError(f"domains must be 'observed', a dict per level or a DataFrame (pandas or Polars); got "
                         f"{_type_name(domains)}; convert it to a pandas DataFrame first (e.g. its .to_pandas())")


def _type_name(x: Any) -> str:
    """``x``'s type with its module (``pyarrow.lib.Table``), builtins by their plain name."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _pandas_frame(x: Any, memo: dict[int, pd.DataFrame]) -> Any:
    """A Polars DataFrame or LazyFrame as a pandas DataFrame (public domains are small; one
    conversion per frame, memoised by identity); anything else as it is."""
    t = type(x)
    if t.__module__.split(".")[0] != "polars" or t.__name__ not in ("DataFrame", "LazyFrame"):
        return x
    if id(x) not in memo:
        memo[id(x)] = (x.collect() if t.__name__ == "LazyFrame" else x).to_pandas()
    return memo[id(x)]


def _codes_for(index: pd.Index, column: pd.Series) -> np.ndarray:
    try:
        return np.asarray(index.get_indexer(pd.Index(column)), dtype=np.int64)
    except TypeError:  # incomparable values (unhashable ones are refused by _check_label_column)
        if isinstance(column, pd.Series):
            _check_label_column(column, str(column.name))
        return np.asarray(pd.Index(column, dtype=object).map(lambda x: index.get_loc(x) if x in index else -1),
                          dtype=np.int64)


def _find(level: _Level, parent_ext: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """External node ids for (parent, code) pairs at this level; -1 where absent."""
    n = len(level.index)
    key = parent_ext * n + codes
    pos = np.searchsorted(level.keys, key)
    pos_c = np.minimum(pos, max(level.keys.size - 1, 0))
    ok = (codes >= 0) & (parent_ext >= 0) & (level.keys.size > 0)
    if level.keys.size:
        ok &= level.keys[pos_c] == key
    return np.where(ok, level.offset + pos_c, -1)


#: inputs with at least this many rows are grouped into their distinct paths before being placed
_GROUP_ABOVE = 4096
#: a key space of at most this many entries per row is compacted through a dense table (else hashed)
_DENSE_PER_ROW = 2
_DENSE_MIN = 1 << 16


def _factorize(col: Any) -> tuple[np.ndarray, Any]:
    """Integer codes (-1 for a missing value) and the distinct values they index: a
    categorical column's own codes and categories, any other column factorised once."""
    if isinstance(col, pd.Categorical) or isinstance(getattr(col, "dtype", None), pd.CategoricalDtype):
        cat = col if isinstance(col, pd.Categorical) else col.array
        return cat.codes, cat.categories  # a read-only view: never modified
    if not isinstance(col, (pd.Series, pd.Index, np.ndarray, pd.api.extensions.ExtensionArray)):
        col = pd.Series(col) if not isinstance(col, (str, bytes)) else col
    codes, uniques = pd.factorize(col)
    return codes, uniques


def _compact(key: np.ndarray, space: int, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids ``0..P-1`` of the values of ``key`` (all in ``[0, space)``) and the distinct
    values themselves (``uniq[ids] == key``). A small key space goes through a presence
    table (two passes, no sort, no hash); a large one through pandas' int64 hash table."""
    if space <= max(_DENSE_PER_ROW * n_rows, _DENSE_MIN):
        present = np.zeros(space, bool)
        present[key] = True
        table = np.cumsum(present, dtype=np.int64)
        table -= 1
        return table[key], np.flatnonzero(present)
    ids, uniq = pd.factorize(key)
    return np.asarray(ids, dtype=np.int64), np.asarray(uniq, dtype=np.int64)


def _decode(uniq: np.ndarray, base: np.ndarray, radices: list[int]) -> np.ndarray:
    """Per-level codes ``(P, levels)`` of compacted mixed-radix keys ``base_id * prod(radices) + ...``
    (each digit a level code + 1, so 0 is a missing value)."""
    u = uniq.copy()
    digits = []
    for r in reversed(radices):
        digits.append(u % r - 1)
        u //= r
    return np.column_stack([base[u], *digits[::-1]]) if digits else base[u]


def group_paths(columns: Any, names: Sequence[str]) -> tuple[np.ndarray, dict[str, pd.Series]] | None:
    """Group rows by their label path over the columns ``names``: each row's path id
    ``gid`` (``0..P-1``) and, per column, the labels of the ``P`` distinct paths (categorical
    Series; a missing value stays missing). ``None`` when a column cannot be factorised
    (unhashable cells): callers then work row by row, where the error is raised.

    Vectorised grouping as in a database hash/radix group-by: every column is reduced to
    integer codes once (a categorical column's codes are used as they are), the codes are
    combined into one mixed-radix int64 key, and the key is compacted to dense ids whenever
    its space would outgrow the rows (a presence table when the space is small, a hash
    table otherwise). No Python work per row or per path.
    """
    n = len(columns[names[0]]) if names else 0
    key: np.ndarray | None = None
    space, base = 1, np.zeros((1, 0), np.int64)
    radices: list[int] = []
    uniques_of: list[Any] = []
    for nm in names:
        try:
            codes, uniques = _factorize(columns[nm])
        except TypeError:  # unhashable labels
            return None
        uniques_of.append(uniques)
        r = len(uniques) + 1
        if key is not None and space * r > max(_DENSE_PER_ROW * n, _DENSE_MIN):
            key, uniq = _compact(key, space, n)
            base, space, radices = _decode(uniq, base, radices), len(uniq), []
        if key is None:
            key = codes.astype(np.int64, copy=True)
        else:  # in place: one int64 array for the whole key
            key *= r
            key += codes
        key += 1  # digit = code + 1, so a missing value (-1) is digit 0
        del codes
        space *= r
        radices.append(r)
    if key is None:
        return np.zeros(n, np.int64), {}
    gid, uniq = _compact(key, space, n)
    paths = _decode(uniq, base, radices)
    labels = {nm: pd.Series(pd.Categorical.from_codes(paths[:, i], categories=pd.Index(uniques)), name=nm)
              for i, (nm, uniques) in enumerate(zip(names, uniques_of))}
    return gid, labels


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique`` of int64 keys by sort and mask (numpy 2.4's hash-based ``np.unique``
    is several times slower on millions of int64 keys)."""
    if keys.size == 0:
        return keys.astype(np.int64)
    s = np.sort(keys.astype(np.int64, copy=False))
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def build_structure(df: pd.DataFrame | None, levels: Sequence[str], domains: Any, *,
                    root: str = "total") -> DeclaredStructure:
    """Build the public tree of ``levels`` from declared ``domains`` (see module docstring).

    ``df`` is read only for levels declared ``"observed"`` (and to check columns exist).
    """
    levels = check_levels(levels, root)
    if df is not None:
        missing = [lv for lv in levels if lv not in df.columns]
        if missing:
            raise DataError(expected_one_of("level column", missing[0], [str(c) for c in df.columns]).replace(
                "unknown level column", "missing level column"))
        for lv in levels:
            _check_label_column(df[lv], lv)
    specs = _normalize_domains(domains, levels, df)
    parents_ext = [np.array([-1], np.int64)]
    codes_ext = [np.array([0], np.int64)]
    lv_objs: list[_Level] = []
    n_prev_start, n_prev = 0, 1  # external id range of the previous depth
    data_nodes = None  # per data row: external node id at the previous depth
    frame_rows: dict[int, np.ndarray] = {}  # per paths DataFrame: its rows' nodes at the previous depth
    if df is not None and any(isinstance(s, str) and s == "observed" for s in specs.values()):
        data_nodes = np.zeros(len(df), np.int64)
    for d, lv in enumerate(levels, start=1):
        spec = specs[lv]
        prev_ids = np.arange(n_prev_start, n_prev_start + n_prev)
        if isinstance(spec, str) and spec == "observed":
            if df is None:
                raise HierarchyError(f"level {lv!r} is declared 'observed' but no data were given")
            col = df[lv]
            vals = col[(data_nodes >= 0) & col.notna().to_numpy()]
            uniq = pd.unique(vals.to_numpy())
            idx = pd.Index(uniq)
            _no_blank_labels(idx, lv)
            try:
                idx = idx.sort_values()
            except TypeError:
                pass
            codes = _codes_for(idx, col)
            ok = (data_nodes >= 0) & (codes >= 0)
            pairs_p, pairs_c = data_nodes[ok], codes[ok]
            provenance = "observed in the data (asserted public by the user)"
        elif isinstance(spec, pd.DataFrame) and (d == 1 or frame_rows.get(id(spec)) is not None):
            # every level above came from this same frame: track each of its rows' node one
            # level at a time (one factorisation and one sort per level; no per-path work)
            if lv not in spec.columns:
                raise HierarchyError(f"the public paths given for level {lv!r} lack column {lv!r}; "
                                     "a paths DataFrame needs the columns of the level and every level above it")
            col = spec[lv]
            if col.isna().any():
                raise HierarchyError(f"the public paths for level {lv!r} contain missing values; remove those rows")
            codes, uniques = pd.factorize(col)  # on the column's own array (no object copy of every row)
            idx = _as_index(np.asarray(uniques.to_numpy()), lv)  # the values in order of first appearance
            row_node = np.zeros(len(spec), np.int64) if d == 1 else frame_rows[id(spec)]
            row_keys = row_node * max(len(idx), 1) + codes
            pairs_p = pairs_c = None
            provenance = f"declared public paths ({len(idx)} distinct values)"
        elif isinstance(spec, pd.DataFrame):
            need = list(levels[:d])
            miss = [c for c in need if c not in spec.columns]
            if miss:
                raise HierarchyError(f"the public paths given for level {lv!r} lack column {miss[0]!r}; "
                                     "a paths DataFrame needs the columns of the level and every level above it")
            paths = spec[need].drop_duplicates()
            if paths[lv].isna().any():
                raise HierarchyError(f"the public paths for level {lv!r} contain missing values; remove those rows")
            idx = _as_index(pd.unique(paths[lv].to_numpy()), lv)
            node = np.zeros(len(paths), np.int64)
            for dd, (plv, lobj) in enumerate(zip(levels[:d - 1], lv_objs), start=1):
                node = _find(lobj, node, _codes_for(lobj.index, paths[plv]))
                if np.any(node < 0):
                    bad = paths.iloc[int(np.flatnonzero(node < 0)[0])][need[:dd]].tolist()
                    raise HierarchyError(f"public path {bad} for level {lv!r} is not under any declared "
                                         f"{plv!r} node; fix the paths or the domain of {plv!r}")
            pairs_p, pairs_c = node, _codes_for(idx, paths[lv])
            provenance = f"declared public paths ({len(idx)} distinct values)"
        elif isinstance(spec, Mapping):
            if d == 1:
                idx = None
                raise HierarchyError(f"level {lv!r} is the first level: its domain cannot be per parent; give a list")
            plv = lv_objs[-1]
            plab = plv.index[codes_ext[-1]]
            keys = list(spec.keys())
            all_vals: list[Any] = []
            for v in spec.values():
                if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                    raise HierarchyError(f"per-parent domain of {lv!r} must map each parent to a list of values; "
                                         f"got {v!r}")
                all_vals.extend(list(v))
            idx = pd.Index(pd.unique(pd.Index(all_vals).to_numpy())) if all_vals else pd.Index([])
            if idx.hasnans:
                raise HierarchyError(f"per-parent domain of {lv!r} contains a missing value; remove it")
            paths_prev = _paths_of(lv_objs, parents_ext, codes_ext, d - 1)
            pp, pc = [], []
            unique_labels = not plab.duplicated().any()
            used = set()
            for j, (lab, path) in enumerate(zip(plab, paths_prev)):
                if path in spec:
                    key = path
                elif lab in spec:
                    if not unique_labels and (plab == lab).sum() > 1:
                        raise HierarchyError(
                            f"per-parent domain of {lv!r} is keyed by {lab!r}, which names several {plv.name!r} "
                            "nodes; key it by the full path tuple instead")
                    key = lab
                else:
                    raise HierarchyError(f"per-parent domain of {lv!r} has no entry for {plv.name} {lab!r}; "
                                         "add one (in Python, an empty list makes that node a leaf; "
                                         "a YAML domain list needs at least one value)")
                used.add(key)
                vals = list(spec[key])
                if len(set(vals)) != len(vals):
                    raise HierarchyError(f"per-parent domain of {lv!r} lists a value twice under {lab!r}")
                c = idx.get_indexer(vals)
                pp.append(np.full(len(c), prev_ids[j]))
                pc.append(c)
            extra = [k for k in keys if k not in used]
            if extra:
                raise HierarchyError(f"per-parent domain of {lv!r} has entries for unknown {plv.name} values "
                                     f"{extra[:3]}; remove them or declare them in {plv.name!r}")
            pairs_p = np.concatenate(pp) if pp else np.zeros(0, np.int64)
            pairs_c = np.concatenate(pc) if pc else np.zeros(0, np.int64)
            provenance = f"declared per parent ({len(idx)} distinct values)"
        else:
            idx = _as_index(spec, lv)
            pairs_p = np.repeat(prev_ids, len(idx))
            pairs_c = np.tile(np.arange(len(idx)), n_prev)
            provenance = f"declared list ({len(idx)} values, under every parent)"
        ncode = max(len(idx), 1)
        if pairs_p is None or pairs_c is None:
            keys = _sorted_unique(row_keys)
        else:
            keys = _sorted_unique(pairs_p.astype(np.int64) * ncode + pairs_c.astype(np.int64))
        start = n_prev_start + n_prev
        # the frame's rows' nodes at this depth, for the next level (none after the last)
        frame_rows = {id(spec): start + np.searchsorted(keys, row_keys)} if pairs_p is None and d < len(levels) else {}
        level = _Level(name=lv, index=idx, keys=keys, offset=start, provenance=provenance)
        lv_objs.append(level)
        parents_ext.append(keys // ncode)
        codes_ext.append(keys % ncode)
        if data_nodes is not None:
            codes = _codes_for(idx, df[lv])
            found = _find(level, data_nodes, codes)
            data_nodes = np.where(data_nodes >= 0, found, -1)
        n_prev_start, n_prev = start, keys.size
        if n_prev == 0:
            raise HierarchyError(f"level {lv!r} has no nodes: its domain is empty under every parent")
    parent = np.concatenate(parents_ext)
    codes_all = np.concatenate(codes_ext)
    shape = Tree.from_parent(parent)
    codes_int = codes_all if shape.internal.perm is None else codes_all[shape.internal.perm]
    level_labels = [pd.Index([root])] + [lo.index for lo in lv_objs]
    provenance = {root: "the root (always present)"}
    provenance.update({lo.name: lo.provenance for lo in lv_objs})
    tree = Tree(shape.internal.parent, perm=shape.internal.perm, level_names=[root, *levels], level_labels=level_labels,
                codes=codes_int, provenance=provenance, _check=False)
    return DeclaredStructure(tree=tree, levels=list(levels), _levels=lv_objs, n_ext=parent.size)


def _paths_of(lv_objs: list[_Level], parents_ext: list[np.ndarray], codes_ext: list[np.ndarray], depth: int) -> list:
    """Label-path tuples of the nodes at ``depth`` (>= 1), in external order."""
    offsets = [0] + [lo.offset for lo in lv_objs]
    cols = []
    node = np.arange(parents_ext[depth].size)
    d = depth
    while d >= 1:
        lo = lv_objs[d - 1]
        cols.append(lo.index[codes_ext[d][node]])
        parent_ids = parents_ext[d][node]
        node = parent_ids - offsets[d - 1]
        d -= 1
    cols.reverse()
    return list(zip(*cols))


def check_levels(levels: Any, root: str) -> list[str]:
    """Level names: a non-empty list of distinct column names, none the root's or an output column's."""
    if isinstance(levels, str) or not isinstance(levels, Sequence) or len(levels) == 0:
        raise HierarchyError("levels must be a non-empty list of column names, e.g. ['state', 'county']; "
                             f"got {levels!r}")
    levels = list(levels)
    if len(set(levels)) != len(levels):
        dup = sorted({x for x in levels if levels.count(x) > 1})
        raise HierarchyError(f"levels {dup} appear more than once; each level needs its own column")
    if root in levels:
        raise HierarchyError(f"a level is named {root!r}, the name of the root level; rename it or pass root=")
    clash = [lv for lv in levels if lv in RESERVED_COLUMNS]
    if clash:
        raise HierarchyError(f"level {clash[0]!r} has the name of an output column "
                             f"({', '.join(sorted(RESERVED_COLUMNS))}); "
                             "rename the column first, e.g. df.rename(columns={...})")
    return levels


