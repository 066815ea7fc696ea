"""The Polars front-end: ``.dptree`` on ``polars.DataFrame`` and ``polars.LazyFrame``.

``df.dptree(levels=[...], domains=..., cells=..., unit=..., max_contributions=...)`` on a
Polars DataFrame or LazyFrame (a namespace registered with
``polars.api.register_dataframe_namespace`` / ``register_lazyframe_namespace``; its object
is callable) and ``hierdp.dptree(frame, ...)``: the pandas door's arguments, defaults,
errors (word for word) and, for the same seed, its release (``pip install
"hierdp[polars]"``).

What runs where:

* in Polars' engine (the streaming engine for a LazyFrame, so the records are never
  collected; the in-memory engine for a DataFrame) — the count: **one group-by** of the
  records on the level and cell columns with ``len`` (``sum`` of the count column with
  ``count=``), the checks of the count column (one aggregate), the distinct paths of
  ``"observed"`` domains (``unique``), and with contribution bounding the rows per unit
  (a group-by on ``unit``) and the rows of the units over the bound (a semi-join);
* in memory, with the pandas door's own code — the distinct (path, cell) combinations
  (leaves × cells at most, not records) are placed on the tree and checked against the
  declared domains (:func:`hierdp.frontends.counting._place_paths`), so an out-of-domain
  or missing value gets the pandas error word for word; then the release, as for pandas.

Contribution bounding makes exactly the pandas door's choice
(:func:`hierdp.frontends._contributions.bound_contributions`): which rows a unit keeps is
a function of the bounding key and of the rows' content, not of their order. Only the
rows of units with more than ``c`` rows can be dropped, so only theirs are fetched from
Polars (a semi-join) and the choice is made on them; the dropped rows' (path, cell)
counts are subtracted from the one group-by. Secure randomness by default (ChaCha20); a
seeded release equals the pandas one.

Nothing here logs or prints a count; the numbers of dropped rows are private notes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.decompositions.declared import Declared
from hierdp.errors import DataError, MissingDependencyError, expected_one_of
from hierdp.frontends._cells import domain_error, resolve_cells
from hierdp.frontends._contributions import bound_contributions, bounding_key, check_max_contributions
from hierdp.frontends.base import register_door, releases_of, suggest_keywords
from hierdp.frontends.counting import _place_paths, check_counts, keyed_counts, leaf_counts_to_nodes, total_problem
from hierdp.frontends.tree_door import TreeDoor
from hierdp.rng import make_rng

try:  # an optional dependency: pip install "hierdp[polars]"
    import polars as pl
except ImportError:  # exercised by tests/test_polars.py with the import made to fail
    raise MissingDependencyError("polars", "polars") from None

__all__ = ["PolarsDPTree", "DPTreePolarsNamespace"]

# internal column names (never shown)
_ROW, _LEN, _SUM, _FSUM, _DROP = "__hierdp_row__", "__hierdp_rows__", "__hierdp_sum__", "__hierdp_fsum__", \
    "__hierdp_dropped__"
_NODE, _CODE = "__hierdp_node__", "__hierdp_code__"


def _missing(kind: str, name: str, columns: Sequence[str]) -> DataError:
    """The pandas door's error for a missing column (``kind``: "level column", ...)."""
    return DataError(expected_one_of(kind, name, columns).replace(f"unknown {kind}", f"missing {kind}"))


class PolarsDPTree(TreeDoor):
    """Records in a Polars DataFrame or LazyFrame placed on a public tree; what
    ``df.dptree(...)`` returns on a Polars frame.

    Same interface and results as :class:`~hierdp.frontends.pandas.DPTree`; the counting
    runs in Polars (see the module docstring), the release in memory.
    """

    def __init__(self, frame: Any, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None,
                 spent: list[dict[str, Any]] | None = None) -> None:
        if isinstance(frame, pl.DataFrame):
            lazy, self._streaming = frame.lazy(), False
        elif isinstance(frame, pl.LazyFrame):
            lazy, self._streaming = frame, True
        else:
            raise DataError(f"expected a polars DataFrame or LazyFrame, got {type(frame).__name__}")
        schema = lazy.collect_schema()
        columns = [str(c) for c in schema.names()]
        self._how_rows_count(columns, levels, root, count=count, unit=unit, max_contributions=max_contributions,
                             unknown=unknown, spent=spent)
        self._frame = frame
        self._lf = lazy
        self._schema = schema
        observed = lazy
        if count is not None:
            self._check_count_column(count)
            observed = lazy.filter(pl.col(count) != 0)  # a zero-count row is not an observation
        decl = Declared(self.levels, domains, root=root)
        if self._observed(domains):
            for lv in self.levels:
                if lv not in columns:
                    raise _missing("level column", lv, columns)
            # the distinct level paths are all "observed" domains need (and few)
            self._structure = decl.decompose(self._collect(observed.select(self.levels).unique()).to_pandas())
        else:  # the columns and their (pandas) types; no data read
            self._structure = decl.decompose(pl.DataFrame(schema=schema).to_pandas())
        self.cells = resolve_cells(cells, levels=self.levels, root=root, columns=columns,
                                   observed=lambda name: self._collect(
                                       observed.select(pl.col(name).unique()))[name].to_numpy())

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _observed(domains: Any) -> bool:
        if isinstance(domains, str):
            return domains == "observed"
        return isinstance(domains, Mapping) and any(isinstance(v, str) and v == "observed" for v in domains.values())

    def _collect(self, query: Any) -> Any:
        """Run a query: the streaming engine for a LazyFrame, the in-memory one for a DataFrame."""
        return query.collect(engine="streaming" if self._streaming else "auto")

    def _check_count_column(self, count: str) -> None:
        """The pandas door's checks of the count column (:func:`check_counts`), word for word:
        one aggregate in Polars (nulls, NaN, min, max, non-integer, infinite), then
        ``check_counts`` on a few representative values of the column's own type."""
        columns = [str(c) for c in self._schema.names()]
        if count not in columns:
            check_counts(pl.DataFrame(schema=self._schema).to_pandas(), count)  # the missing-column error
        dtype = self._schema[count]
        empty = pl.DataFrame(schema={count: dtype})
        if not (dtype.is_numeric() and dtype != pl.Boolean) or dtype.is_decimal():
            check_counts(empty.to_pandas(), count)  # the dtype error (in pandas' spelling of the type)
            return
        c = pl.col(count)
        if dtype.is_float():  # NaN and null are both missing in pandas; -inf is negative, inf not finite
            finite = c.filter(c.is_finite())
            aggs = [c.null_count().alias("nulls"), c.is_nan().sum().alias("nans"), finite.min().alias("min"),
                    finite.max().alias("max"), (finite != finite.floor()).any().alias("frac"),
                    c.is_infinite().any().alias("inf"), (c == -np.inf).any().alias("neginf")]
        else:
            aggs = [c.null_count().alias("nulls"), c.min().alias("min"), c.max().alias("max")]
        stats = self._collect(self._lf.select(aggs)).row(0, named=True)
        values: list[Any] = [v for v in (stats["min"], stats["max"]) if v is not None]
        if stats["nulls"] or stats.get("nans"):
            values.append(None)
        if stats.get("frac"):
            values.append(0.5)
        if stats.get("inf"):
            values.append(-np.inf if stats.get("neginf") else np.inf)
        check_counts(pl.DataFrame({count: values}, schema={count: dtype}, strict=False).to_pandas(), count)

    def _keys(self) -> list[str]:
        return list(self.levels) + list(self.cells)

    def _check_key_columns(self) -> None:
        columns = [str(c) for c in self._schema.names()]
        for lv in self.levels:
            if lv not in columns:
                raise _missing("level column", lv, columns)
        for name in self.cells:
            if name not in columns:
                raise _missing("cell column", name, columns)

    def _place(self, paths: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Flat (node, cell) key, out-of-domain mask and problems of distinct paths (a Polars
        frame of the level and cell columns): the pandas door's placement."""
        frame = paths.to_pandas()
        if self.cells:
            return _place_paths(self._structure, frame, self.cells)
        node, bad, problems = self._structure.locate_paths(frame)
        return node, bad, problems

    def _labels_as(self, index: pd.Index, name: str) -> Any:
        """The labels of a declared domain as a Polars Series of column ``name``'s type, when
        a join on it matches exactly what the pandas door matches (text labels in a text
        column, integer labels in an integer column); else None."""
        dtype = self._schema[name]
        values = index.to_numpy()
        if dtype == pl.String and (pd.api.types.is_string_dtype(index.dtype) or index.dtype == object) and all(
                isinstance(v, str) for v in values.tolist()):
            return pl.Series(name, values.astype(object), dtype=pl.String)
        if dtype.is_integer() and pd.api.types.is_integer_dtype(index.dtype):
            try:  # labels outside the column type's range: the pandas placement decides
                return pl.Series(name, values).cast(dtype, strict=True)
            except pl.exceptions.PolarsError:
                return None
        return None

    @functools.cached_property
    def _key_tables(self) -> tuple[Any, list[Any]] | None:
        """Polars tables that place in-domain rows by a join: the label path of every leaf at
        the deepest level with its external node id, and each cell dimension's labels with
        their codes. None when a join would not match like the pandas door (label types)."""
        levels = self._structure._levels  # depth by depth: sorted (parent * n_labels + code) keys
        columns: dict[str, np.ndarray] = {}
        prev_offset = 0
        for d, lo in enumerate(levels):
            n = max(len(lo.index), 1)
            parent, code = lo.keys // n, lo.keys % n
            if d:
                rows = parent - prev_offset
                columns = {name: col[rows] for name, col in columns.items()}
            columns[lo.name] = code
            prev_offset = lo.offset
        leaf = {}
        for lo in levels:
            labels = self._labels_as(lo.index, lo.name)
            if labels is None:
                return None
            leaf[lo.name] = labels.gather(columns[lo.name])
        last = levels[-1]
        leaf[_NODE] = pl.Series(_NODE, last.offset + np.arange(last.keys.size, dtype=np.int64))
        cell_tables = []
        for name, idx in self.cells.items():
            labels = self._labels_as(idx, name)
            if labels is None:
                return None
            cell_tables.append(pl.DataFrame({name: labels, _CODE + name: np.arange(len(idx), dtype=np.int64)}))
        return pl.DataFrame(leaf), cell_tables

    def _place_grouped(self, grouped: Any) -> tuple[Any, np.ndarray, np.ndarray, list[str]]:
        """Run the grouped (path, cell) combinations (a lazy query) and place them: in-domain
        ones by a Polars join on the public leaf paths and cell labels (in the same query), the
        others (none, normally) by the pandas door's own placement, for its errors word for word.
        Returns the combinations reordered, their keys, the out-of-domain mask and problems."""
        keys = self._keys()
        tables = self._key_tables
        if tables is None:
            grouped = self._collect(grouped)
            return (grouped, *self._place(grouped.select(keys)))
        leaf, cell_tables = tables
        joined = grouped.join(leaf.lazy(), on=list(self.levels), how="left")
        flat = pl.col(_NODE)
        for (name, idx), table in zip(self.cells.items(), cell_tables):
            joined = joined.join(table.lazy(), on=name, how="left")
            flat = flat * len(idx) + pl.col(_CODE + name)
        # one query: the group-by and the joins of its (path, cell) rows, run by the engine in one go
        joined = self._collect(joined.with_columns(flat.alias(_NODE)))
        matched = joined.filter(pl.col(_NODE).is_not_null())
        rest = joined.filter(pl.col(_NODE).is_null())
        key = matched[_NODE].to_numpy().astype(np.int64)
        bad = np.zeros(key.size, bool)
        problems: list[str] = []
        if rest.height:
            rkey, rbad, problems = self._place(rest.select(keys))
            key, bad = np.r_[key, rkey], np.r_[bad, rbad]
        return pl.concat([matched, rest]), key, bad, problems

    # -- contribution bounding ----------------------------------------------------------
    def _dropped_by_bound(self, rng: Any) -> tuple[Any, int]:
        """The level and cell values of the rows the contribution bound drops (a Polars
        frame, or None when no unit is over the bound) and their number: the pandas door's
        choice (:func:`~hierdp.frontends._contributions.bound_contributions`, a function of
        the bounding key and of the rows' content), made on the rows of the over-bound
        units only."""
        c = check_max_contributions(self.max_contributions)
        key = bounding_key(rng)  # drawn whatever the data, as every door draws it
        unit = cast(str, self.unit)
        sizes = self._collect(self._lf.group_by(unit).agg(pl.len().cast(pl.Int64).alias(_LEN)))
        if sizes.height == 0:
            return None, 0
        col = sizes[unit]
        if col.null_count() or (col.dtype.is_float() and bool(col.is_nan().any())):
            raise DataError(f"privacy-unit column {unit!r} has missing values; every row needs a unit")
        over = sizes.filter(pl.col(_LEN) > c)
        if over.height == 0:
            return None, 0  # every unit keeps all its rows
        rows = self._collect(self._lf.join(over.lazy().select(unit), on=unit, how="semi")
                             .select([unit, *self._keys()]))
        frame = rows.to_pandas(use_pyarrow_extension_array=True)  # Arrow-backed: no Python str per value
        kept, n_dropped = bound_contributions(frame, unit, c, key, content=self._keys())
        drop = np.ones(len(frame), dtype=bool)
        drop[kept.index.to_numpy()] = False
        return rows.filter(pl.Series(drop)).select(self._keys()), int(n_dropped)

    # -- what a door provides ------------------------------------------------------------
    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private notes; the counting runs in Polars.

        Parameters
        ----------
        rng : RandomSource, optional
            The source of the bounding key that picks the rows kept per unit
            (``max_contributions``); a seeded source gives the pandas door's choice.

        Returns
        -------
        (numpy.ndarray, dict)
            NON-PRIVATE: the exact counts ``(n,)`` or ``(n, k)``, and private notes (e.g.
            ``rows_dropped_by_contribution_bound``). Never publish them.
        """
        self._check_key_columns()
        notes: dict[str, Any] = {}
        keys = self._keys()
        dropped = None
        if self.unit is not None:
            dropped, n_dropped = self._dropped_by_bound(rng or make_rng(None))
            notes["rows_dropped_by_contribution_bound"] = n_dropped
        lf = self._lf
        aggs = [pl.len().cast(pl.Int64).alias(_LEN)]
        if self.count is not None:
            lf = lf.filter(pl.col(self.count) != 0)  # zero-count rows count nothing and are never out of domain
            aggs += [pl.col(self.count).cast(pl.Int64).sum().alias(_SUM),
                     pl.col(self.count).cast(pl.Float64).sum().alias(_FSUM)]
        grouped = lf.group_by(keys).agg(aggs)  # THE count: one group-by of the records (run below, once)
        if dropped is not None:  # take the rows the bound drops off their paths (bound and count exclude)
            minus = dropped.group_by(keys).agg(pl.len().cast(pl.Int64).alias(_DROP))
            # a path whose rows the bound all dropped stays (it counts 0): the domain check
            # sees every record's values, whatever the bounding key
            grouped = (grouped.join(minus.lazy(), on=keys, how="left", nulls_equal=True)
                       .with_columns(pl.col(_LEN) - pl.col(_DROP).fill_null(0)))
        grouped, key, bad, problems = self._place_grouped(grouped)
        rows = grouped[_LEN].to_numpy()
        if bad.any():
            if self.unknown == "raise":
                raise domain_error(problems)  # word for word the pandas error
            notes["rows_dropped_out_of_domain"] = int(rows[bad].sum())
        keep = ~bad
        k = self.n_cells
        if self.count is not None:  # as pandas: the total of the counts kept stays exact
            fsums = grouped[_FSUM].to_numpy()[keep]
            if float(fsums.sum()) > 2.0 * rules.MAX_EXACT_COUNT:  # an int64 sum could have wrapped
                rules.enforce(total_problem(fsums), DataError)
            sums = grouped[_SUM].to_numpy()[keep]
            rules.enforce(total_problem(sums), DataError)
        else:
            sums = rows[keep]
        counts = keyed_counts(key[keep], sums, self._structure.n_ext * k)
        return leaf_counts_to_nodes(self._structure.tree, counts.reshape(self._structure.n_ext, k)
                                    if self.cells else counts), notes

    def out_of_domain(self) -> Any:
        """NON-PRIVATE diagnostics: the rows outside the declared domains (or lacking a level
        or cell value), for fixing the domains. Never publish them.

        Returns
        -------
        polars.DataFrame or polars.LazyFrame
            Those rows (a LazyFrame for a LazyFrame: ``.collect()`` it); private.
        """
        self._check_key_columns()
        keys = self._keys()
        paths = self._collect(self._lf.select(keys).unique())
        _, bad, _ = self._place(paths)
        rows = self._lf.join(paths.filter(pl.Series(bad)).lazy(), on=keys, how="semi", nulls_equal=True)
        return rows if self._streaming else rows.collect()


class DPTreePolarsNamespace:
    """``df.dptree(levels, domains, count=None, unit=None, max_contributions=None, unknown="raise",
    cells=None)`` on a Polars DataFrame or LazyFrame, as ``df.dptree`` on pandas."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj
        self._spent = releases_of(obj)

    @suggest_keywords("df.dptree()")
    def __call__(self, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None) -> PolarsDPTree:
        """Place this frame's rows on a public tree: ``df.dptree(levels=[...], domains=...)``,
        as on pandas; the counting runs in Polars (streaming for a LazyFrame).

        Parameters
        ----------
        levels, domains, count, unit, max_contributions, unknown, root, cells
            As for ``df.dptree`` (:meth:`DPTreeFrameAccessor.__call__
            <hierdp.frontends.pandas.DPTreeFrameAccessor.__call__>`).

        Returns
        -------
        PolarsDPTree
            The door: ``.release(epsilon=...)``, ``.tree`` and the NON-PRIVATE diagnostics
            ``.true_counts()`` and ``.out_of_domain()``.

        Examples
        --------
        >>> import polars as pl, hierdp
        >>> df = pl.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> df.dptree(levels=["state", "county"], domains="observed").tree.n_nodes
        6
        """
        return PolarsDPTree(self._obj, levels, domains, count=count, unit=unit, max_contributions=max_contributions,
                            unknown=unknown, root=root, cells=cells, spent=self._spent)


pl.api.register_dataframe_namespace("dptree")(DPTreePolarsNamespace)
pl.api.register_lazyframe_namespace("dptree")(DPTreePolarsNamespace)


def _polars_door(data: Any, **keywords: Any) -> PolarsDPTree:
    levels = keywords.pop("levels", None)
    if levels is None:
        raise DataError(f"hierdp.dptree(polars {type(data).__name__}, ...) needs levels=[...] (the hierarchy "
                        "columns, top-down)")
    return DPTreePolarsNamespace(data)(levels, **keywords)


register_door("polars.DataFrame", lambda data: isinstance(data, pl.DataFrame), _polars_door)
register_door("polars.LazyFrame", lambda data: isinstance(data, pl.LazyFrame), _polars_door)
