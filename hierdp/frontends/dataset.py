"""The dataset front-end: ``hierdp.dptree("records/", ...)`` on Parquet or CSV files on disk.

A dataset is one file, a folder (its Parquet or CSV files, sub-folders included, hidden
files and ``_*`` markers skipped) or a glob, of records or of pre-aggregated counts
(``count=``). The arguments are the pandas door's (``levels``, ``domains``, ``cells``,
``count``, ``unit``, ``max_contributions``, ``unknown``, ``root``), plus how the files are
read (``format``, ``memory``, ``temp_directory``, ``threads``, ``labels_as_text``).

**Engine: DuckDB** (``pip install "hierdp[dataset]"``). Counting records to
``(leaf, cell)`` beyond memory runs on an embedded engine that spills to disk, never on
hand-written chunking. DuckDB is chosen because on a group-by count beyond memory
(``benchmarks/bench_dataset_door.py``; figures in ``docs/appendix/performance-log.md``)
it was as fast as Polars' streaming engine or faster, at half to a fifth of the memory,
and because its memory limit and spill folder are explicit, documented settings that
bound the whole query (hash tables spill to ``temp_directory``); Polars' streaming
engine has no memory limit to set.
Both are set here: ``memory=`` (default a quarter of the physical memory) and
``temp_directory=`` (DuckDB spills into a new owner-only folder made inside it, by default
inside the system's temporary folder, and removed afterwards: DuckDB itself makes its
spill files readable by others).

What runs where:

* in DuckDB — reading, the checks of the count column, the contribution-bounding group-by
  (which units have more than ``c`` rows) and the count: each record is joined to its
  leaf (a table of the public tree's leaf paths) and its cell (one table per cell
  dimension), and counted per ``leaf * k + cell``;
* in Python, with hierdp's randomness — the rows of the units over the bound (usually
  few), fetched in chunks of whole units: each unit keeps ``c`` rows chosen uniformly at
  random by :func:`hierdp.frontends._contributions.bound_contributions`, the pandas
  door's choice for the same key (the bounding key is drawn from the release's random
  source, secure by default; never the engine's ``random()``);
* the domain checks — the records that join no leaf or cell (none, normally) are grouped
  into their distinct paths and placed by the pandas door's own code, so a value outside
  a declared domain, a missing value or a ragged path gets the pandas door's error word
  for word, with the file it was found in; a file without a needed column gets the
  pandas error for a missing column, naming the file.

True counts are never logged or put in a message. :meth:`DatasetDPTree.counted` writes
the counts of every (leaf, cell) to a work folder, ordered by the tree's internal leaf
order, so that :meth:`CountedDataset.counts_of` reads one subtree task's counts without
reading the rest (the out-of-core runner's input).
"""

from __future__ import annotations

import glob as _glob
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp._kernels.private import make_private_folder
from hierdp._kernels.threads import MAX_THREADS
from hierdp.decompositions.declared import Declared
from hierdp.errors import DataError, MissingDependencyError, expected_one_of
from hierdp.frontends._cells import check_cell_columns, domain_error, resolve_cells
from hierdp.frontends._contributions import bounded_rows, bounding_key, check_max_contributions, content_hash
from hierdp.frontends.base import register_door, suggest_keywords
from hierdp.frontends.counting import _place_paths, leaf_counts_to_nodes, total_problem
from hierdp.frontends.tree_door import TreeDoor
from hierdp.io.readers import csv_header
from hierdp.rng import make_rng
from hierdp.subtrees import parse_memory
from hierdp.tree import Tree

__all__ = ["DatasetDPTree", "CountedDataset", "dataset_files", "MEMORY_SHARE"]

#: the share of the physical memory DuckDB may use by default (``memory=``)
MEMORY_SHARE = 0.25
#: file extension -> format
_EXTENSIONS = {".parquet": "parquet", ".pq": "parquet", ".parq": "parquet", ".csv": "csv", ".csv.gz": "csv",
               ".tsv": "csv"}
#: the releases of each dataset (its resolved files) in this process: a path takes no weak
#: reference, so the list lives as long as the process (see base.releases_of)
_SPENT_BY_FILES: dict[tuple[str, ...], list[dict[str, Any]]] = {}
#: rows of over-bound units fetched per chunk (whole units per chunk)
_CHUNK_ROWS = 2_000_000
#: rows per Parquet row group of a counted dataset (a task's counts skip the other groups)
_ROW_GROUP = 65_536


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError:  # pragma: no cover - exercised only without duckdb
        raise MissingDependencyError("duckdb", "dataset") from None
    return duckdb


def _format_of(path: Path) -> str | None:
    name = path.name.lower()
    for ext, fmt in _EXTENSIONS.items():
        if name.endswith(ext):
            return fmt
    return None


def dataset_files(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                  format: str | None = None) -> tuple[list[Path], str]:
    """The files of a dataset and their format (``"parquet"`` or ``"csv"``).

    ``source`` is one file, a folder (its files with a known extension, sub-folders
    included, hidden and ``_``-prefixed names skipped), a glob (``**`` allowed; a path that
    exists is taken as it is, even when it reads as a pattern, e.g. ``p[01].parquet``) or a
    list of files. ``format`` overrides the extension. A missing path, an empty folder or a mix of
    formats is a one-line :class:`~hierdp.errors.DataError`.
    """
    if format is not None and format not in ("parquet", "csv"):
        raise DataError(f"format={format!r}: expected 'parquet' or 'csv'")
    if isinstance(source, (list, tuple)):
        files = [Path(os.fspath(f)) for f in source]
        what = "the list of files"
        missing = [f for f in files if not f.is_file()]
        if missing:
            raise DataError(f"dataset file {str(missing[0])!r} does not exist; check the path")
    else:
        text = os.fspath(source)  # type: ignore[arg-type]  # a str or PathLike here
        p = Path(text).expanduser()
        what = repr(text)
        if any(ch in text for ch in "*?[") and not p.exists():  # an existing path names itself, pattern or not
            files = sorted(Path(f) for f in _glob.glob(str(p), recursive=True) if Path(f).is_file())
            if not files:
                raise DataError(f"no file matches the dataset pattern {text!r} (looked in {p.parent.resolve()}); "
                                "check the pattern")
        elif p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file()
                           and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)
                           and (format is not None or _format_of(f) is not None))
            if not files:
                raise DataError(f"dataset folder {text!r} holds no Parquet or CSV file (*.parquet, *.csv); "
                                "check the folder, or give a glob such as 'records/*.parquet'")
        elif p.is_file():
            files = [p]
        else:
            raise DataError(f"dataset {text!r} does not exist (looked for {p.resolve()}); give a file, a folder or "
                            "a glob such as 'records/*.parquet'")
    if not files:
        raise DataError(f"{what} names no file; give a file, a folder or a glob")
    if format is None:
        fmts = {_format_of(f) for f in files}
        if None in fmts:
            bad = next(f for f in files if _format_of(f) is None)
            raise DataError(f"cannot tell the format of {bad.name!r} from its extension; pass format='parquet' or "
                            "format='csv'")
        if len(fmts) > 1:
            raise DataError(f"dataset {what} mixes Parquet and CSV files; give one format (a narrower glob)")
        format = fmts.pop()
    return files, str(format)


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - platform without sysconf
        return 16 * 1024**3


def _memory_bytes(memory: Any) -> int:
    if memory is None:
        return max(int(_physical_memory() * MEMORY_SHARE), 256 * 1024**2)
    try:
        return parse_memory(memory)
    except DataError:
        raise DataError(f"memory={memory!r:.40}: expected a positive number of bytes or text such as '4GiB' "
                        "(DuckDB's memory limit; it spills to temp_directory beyond it)") from None


def _glob_escape(path: str) -> str:
    """``path`` as a DuckDB glob that matches only itself: each ``*``, ``?`` and ``[`` in a
    class of its own (``[*]``, ``[?]``, ``[[]``); DuckDB has no option to read a name as it is."""
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in path)


def _q(name: str) -> str:
    """A SQL identifier, quoted."""
    return '"' + str(name).replace('"', '""') + '"'


def _lit(text: str) -> str:
    """A SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


def _is_text(idx: pd.Index) -> bool:
    return bool(len(idx)) and (pd.api.types.is_string_dtype(idx.dtype) or idx.dtype == object) and all(
        isinstance(v, str) for v in idx)


def _is_number(idx: pd.Index) -> bool:
    return pd.api.types.is_integer_dtype(idx.dtype) and not pd.api.types.is_bool_dtype(idx.dtype)


def _sql_family(sql_type: str) -> str:
    t = sql_type.upper()
    if t in ("VARCHAR", "TEXT", "STRING") or t.startswith("VARCHAR"):
        return "text"
    if t in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
             "UBIGINT", "UHUGEINT"):
        return "integer"
    return "other"


def _leaf_paths(structure: Any) -> tuple[pd.DataFrame, np.ndarray]:
    """The label paths of the deepest level's nodes (one column per level) and their
    external ids: the join table that places records on leaves. Vectorised per level."""
    levels = structure._levels
    if not levels:
        return pd.DataFrame(), np.zeros(0, np.int64)
    ext = levels[-1].offset + np.arange(levels[-1].keys.size, dtype=np.int64)
    node = ext
    cols: dict[str, Any] = {}
    for lo in reversed(levels):  # one vectorised step per level, deepest first
        n = len(lo.index)
        key = lo.keys[node - lo.offset]
        cols[lo.name] = lo.index.take(key % n).to_numpy()
        node = key // n  # the parent's external id
    return pd.DataFrame({lo.name: cols[lo.name] for lo in levels}), ext


class DatasetDPTree(TreeDoor):
    """Records (or pre-aggregated counts) in Parquet or CSV files placed on a public tree;
    what ``hierdp.dptree("records/", ...)`` returns.

    Same interface as :class:`~hierdp.frontends.pandas.DPTree`; counting runs in DuckDB
    (see the module docstring), the release in memory. The public structure comes from the
    declared domains (``"observed"`` reads only the distinct level paths). Building the
    door reads the files' headers and, for ``count=``, checks the count column.

    Parameters
    ----------
    source : a file, a folder, a glob or a list of files (Parquet or CSV).
    levels, domains, count, unit, max_contributions, unknown, root, cells
        As for ``df.dptree(...)`` (:class:`~hierdp.frontends.pandas.DPTree`).
    format : ``"parquet"`` or ``"csv"``; default from the extension.
    memory : DuckDB's memory limit (bytes or text such as ``"4GiB"``); default
        :data:`MEMORY_SHARE` of the physical memory. Beyond it DuckDB spills to
        ``temp_directory``.
    temp_directory : where DuckDB spills: into a new owner-only folder made inside it (and
        removed afterwards); default the system's temporary folder.
    threads : DuckDB's threads (default: its own, one per core; at most 1024).
    labels_as_text : read the level and cell columns as text (CSV always is: codes such as
        ``"01"`` keep their leading zeros; declare text domains).
    prefixes : ``{level: (column, length)}``: a level read as the first ``length`` characters of
        another column (a census GEOID's State, County, ...: :meth:`hierdp.Tree.from_geoids`),
        computed in DuckDB; that column must be in every file.
    """

    _accessor = "dataset"

    @suggest_keywords("hierdp.dptree(path)")
    def __init__(self, source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], levels: Sequence[str],
                 domains: Any = None, *, count: str | None = None, unit: str | None = None,
                 max_contributions: int | None = None, unknown: str = "raise", root: str = "total",
                 cells: Mapping[str, Any] | None = None, format: str | None = None, memory: Any = None,
                 temp_directory: str | os.PathLike[str] | None = None, threads: int | None = None,
                 labels_as_text: bool = False, spent: list[dict[str, Any]] | None = None,
                 prefixes: Mapping[str, tuple[str, int]] | None = None) -> None:
        duckdb = _duckdb()
        self._prefixes = {str(k): (str(c), int(n)) for k, (c, n) in (prefixes or {}).items()}
        self.files, self.format = dataset_files(source, format)
        self.memory = _memory_bytes(memory)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise DataError(f"threads={threads!r}: expected a whole number >= 1")
        if threads is not None and threads > MAX_THREADS:  # DuckDB never finished starting 10**6 threads
            raise DataError(f"threads={threads!r:.40}: at most {MAX_THREADS} (more threads than cores gain nothing)")
        self.threads = threads
        self._temp_given = None if temp_directory is None else Path(os.fspath(temp_directory))
        self._progress = False  # DuckDB's progress bar while counting (counted(progress=True), a terminal)
        self._text_asked = bool(labels_as_text)
        self._labels_as_text = self._text_asked or self.format == "csv"
        self._duckdb = duckdb
        headers = self._headers()
        # a file's own column named as a derived level (DuckDB's names ignore case: 'block' is
        # 'Block') is replaced by the prefix, not mistaken for it
        derived = {name.lower() for name in self._prefixes}
        codes = {col for col, _ in self._prefixes.values()}
        self._shadowed = sorted({c for cols in headers.values() for c in cols
                                 if c.lower() in derived and c not in codes})
        for f, cols in headers.items():  # a level read as a prefix: the code's column, then the level
            cols[:] = [c for c in cols if c not in self._shadowed]
            for name, (col, _) in self._prefixes.items():
                if col not in cols:
                    raise DataError(f"{self._part_name(f)}: {expected_one_of('code column', col, cols)}".replace(
                        "unknown code column", "missing code column"))
                cols.append(name)
        union = list(dict.fromkeys(c for h in headers.values() for c in h))
        if spent is None:  # every door on the same files shares the count of their releases
            spent = _SPENT_BY_FILES.setdefault(tuple(str(f.resolve()) for f in self.files), [])
        self._how_rows_count(union, levels, root, count=count, unit=unit, max_contributions=max_contributions,
                             unknown=unknown, spent=spent)
        if unit is not None:
            check_max_contributions(max_contributions)
        cell_names = list(cells) if isinstance(cells, Mapping) else []
        self._check_parts(headers, cell_names)
        self._cell_names = cell_names
        with self._connect() as con:
            self._types = self._column_types(con)
            if count is not None:
                self._check_count_column(con)
            meta = self._select(con, self.levels + cell_names, limit=0)
            decl = Declared(self.levels, domains, root=root)
            if self._observed(domains):
                paths = self._select(con, self.levels, distinct=True)
                self._structure = decl.decompose(paths)
            else:
                self._structure = decl.decompose(meta)
            self.cells = resolve_cells(cells, levels=self.levels, root=root, columns=list(meta.columns),
                                       observed=lambda name: self._select(con, [name], distinct=True)[name])

    # -- reading --------------------------------------------------------------------------
    def _headers(self) -> dict[Path, list[str]]:
        """Each file's column names (Parquet schema / CSV header row), metadata only."""
        out: dict[Path, list[str]] = {}
        for f in self.files:  # one per file, never per row
            if self.format == "parquet":
                try:
                    import pyarrow.parquet as pq
                except ImportError:  # pragma: no cover - exercised only without pyarrow
                    raise MissingDependencyError("pyarrow", "dataset") from None
                try:
                    out[f] = [str(n) for n in pq.read_schema(f).names]
                except Exception as exc:  # a garbled file: name it, one line
                    raise DataError(f"{f}: not a readable Parquet file ({type(exc).__name__}); check the file and "
                                    "its format") from None
            else:
                out[f] = csv_header(f)
        return out

    def _check_parts(self, headers: Mapping[Path, list[str]], cell_names: list[str]) -> None:
        """The pandas door's error for a missing unit, count, level or cell column, naming
        the file that lacks it."""
        for f, cols in headers.items():
            try:
                if self.unit is not None and self.unit not in cols:
                    raise DataError(expected_one_of("privacy-unit column", self.unit, cols).replace(
                        "unknown privacy-unit column", "missing privacy-unit column"))
                if self.count is not None and self.count not in cols:
                    raise DataError(expected_one_of("count column", self.count, cols).replace(
                        "unknown count column", "missing count column"))
                for lv in self.levels:
                    if lv not in cols:
                        raise DataError(expected_one_of("level column", lv, cols).replace(
                            "unknown level column", "missing level column"))
                check_cell_columns({name: pd.Index([]) for name in cell_names}, cols)
            except DataError as exc:
                raise DataError(f"{self._part_name(f)}: {exc}") from None

    def _part_name(self, f: Path) -> str:
        return f"dataset part {f.name!r}" if len(self.files) > 1 else f"dataset file {f.name!r}"

    def _read_error(self, exc: Exception) -> DataError | None:
        """One line for a DuckDB error about the dataset's files: a file gone, garbled or
        (CSV) ragged since the door was built, naming the file and the fix; ``None`` for an
        error that is not about the files (DuckDB's own stands). Never DuckDB's text: it
        holds SQL and, for a CSV, may quote a row of the data."""
        gone = [f for f in self.files if not f.is_file()]
        if gone:
            return DataError(f"{self._part_name(gone[0])} is gone (deleted or moved after the dataset was opened); "
                             "restore it, or open the dataset again to read the files there are now")
        duckdb = self._duckdb
        if isinstance(exc, (duckdb.ParserException, duckdb.CatalogException)):  # hierdp's SQL, not the files
            return None
        msg = str(exc)
        named = [f for f in self.files if str(f) in msg or _glob_escape(str(f)) in msg]
        if self.format == "parquet":
            if isinstance(exc, duckdb.BinderException):
                return None
            columns = self.levels + list(self._cell_names) + [str(c) for c in (self.count, self.unit) if c]
            suspects = named or [f for f in self.files if not _parquet_readable(f, columns)]
            if not suspects:  # every file reads: not about them
                return None
            return DataError(f"{self._part_name(suspects[0])}: not a readable Parquet file (garbled, cut short or "
                             "changed after the dataset was opened); check the file, or write it again")
        if not isinstance(exc, (self._duckdb.InvalidInputException, self._duckdb.IOException,
                                self._duckdb.ConversionException, self._duckdb.BinderException)):
            return None
        for f in named + [f for f in self.files if f not in named]:
            found = _ragged_row(f)
            if found is not None:
                row, n, m = found
                return DataError(f"{self._part_name(f)}: row {row} has {n} field{'s' * (n != 1)}, the header has {m} "
                                 "(a ragged CSV); give every row one value per column of the header")
        if isinstance(exc, self._duckdb.BinderException):
            return None
        where = self._part_name(named[0]) if named else "a file of the dataset"
        if "unicode" in msg.lower() or "utf" in msg.lower():
            return DataError(f"{where}: bytes that are not UTF-8 text; save the file as UTF-8")
        return DataError(f"{where}: not a readable CSV (DuckDB could not parse it: quoting, separators or line "
                         "ends); check the file, or read it with engine: pandas")

    def _connect(self) -> Any:
        return _Connection(self)

    def _reader(self, filename: bool = False) -> str:
        # DuckDB reads every name it is given as a glob, a list included: escaped, each names
        # exactly its file (p[01].parquet is not p0 and p1)
        files = "[" + ", ".join(_lit(_glob_escape(str(f))) for f in self.files) + "]"
        extra = ", filename = true" if filename else ""
        if self.format == "parquet":
            read = f"read_parquet({files}, union_by_name = true{extra})"
        else:  # the separator pandas reads: DuckDB's guess on a ragged file is "no separator at all"
            read = f"read_csv({files}, header = true, delim = ',', all_varchar = true, union_by_name = true{extra})"
        if not self._prefixes:
            return read
        derived = ", ".join(f"substr(CAST({_q(col)} AS VARCHAR), 1, {n}) AS {_q(name)}"
                            for name, (col, n) in self._prefixes.items())
        drop = f" EXCLUDE ({', '.join(_q(c) for c in self._shadowed)})" if self._shadowed else ""
        return f"(SELECT *{drop}, {derived} FROM {read})"

    def _column_types(self, con: Any) -> dict[str, str]:
        rows = con.execute(f"DESCRIBE SELECT * FROM {self._reader()}").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def _label(self, name: str) -> str:
        """A level or cell column as read (as text with ``labels_as_text``)."""
        if self._labels_as_text and _sql_family(self._types.get(name, "VARCHAR")) != "text":
            return f"CAST({_q(name)} AS VARCHAR) AS {_q(name)}"
        return _q(name)

    def _count_expr(self) -> str:
        c = _q(str(self.count))
        if self.format == "csv":
            return f"TRY_CAST({c} AS DOUBLE)"
        return c

    def _where(self) -> str:
        """Zero-count rows count nothing (the pandas door drops them before placing rows)."""
        return "" if self.count is None else f" WHERE {self._count_expr()} <> 0"

    def _select(self, con: Any, names: list[str], *, distinct: bool = False, limit: int | None = None
                ) -> pd.DataFrame:
        cols = ", ".join(self._label(n) for n in names)
        sql = (f"SELECT {'DISTINCT ' if distinct else ''}{cols} FROM {self._reader()}{self._where()}"
               f"{'' if limit is None else f' LIMIT {int(limit)}'}")
        return con.execute(sql).df()

    def _check_count_column(self, con: Any) -> None:
        """The pandas door's checks of the count column (:func:`~hierdp.frontends.counting.check_counts`)."""
        c, name = self._count_expr(), str(self.count)
        sql_type = self._types.get(name, "VARCHAR")
        if self.format == "parquet" and (_sql_family(sql_type) == "text" or sql_type.upper() == "BOOLEAN"
                                         or not (_sql_family(sql_type) == "integer" or sql_type.upper() in (
                                             "FLOAT", "DOUBLE", "REAL") or sql_type.upper().startswith("DECIMAL"))):
            raise DataError(f"count column {name!r} must hold non-negative integers, got dtype {sql_type}")
        text_bad = f"count(*) FILTER (WHERE {_q(name)} IS NOT NULL AND {c} IS NULL)" if self.format == "csv" else "0"
        missing, negative, fraction, text, top = con.execute(
            f"SELECT count(*) FILTER (WHERE {_q(name)} IS NULL), count(*) FILTER (WHERE {c} < 0), "
            f"count(*) FILTER (WHERE isinf(CAST({c} AS DOUBLE)) OR isnan(CAST({c} AS DOUBLE)) "
            f"OR CAST({c} AS DOUBLE) <> floor(CAST({c} AS DOUBLE))), {text_bad}, "
            f"max(CAST({c} AS DOUBLE)) FROM {self._reader()}").fetchone()
        if text:
            raise DataError(f"count column {name!r} must hold non-negative integers, got text")
        if missing:
            raise DataError(f"count column {name!r} has missing values; fill or drop them")
        if negative:
            raise DataError(f"count column {name!r} has negative counts; counts must be >= 0")
        if fraction:
            raise DataError(f"count column {name!r} has non-integer counts; counts must be whole numbers")
        if top is not None:
            rules.enforce(rules.value_range_problem(float(top), f"a count in column {name!r}"), DataError)

    # -- counting -------------------------------------------------------------------------
    def _weight(self) -> str:
        return "1" if self.count is None else f"CAST({self._count_expr()} AS BIGINT)"

    def _join_tables(self, con: Any) -> tuple[str, str, int]:
        """Register the leaf paths and the cell codes; the joins and the key expression."""
        names = list(self.cells)
        k = self.n_cells
        paths, ext = _leaf_paths(self._structure)
        joins, conds = [], []
        for lv in self.levels:
            idx = pd.Index(paths[lv]) if len(paths) else pd.Index([])
            conds.append(self._match(lv, idx, f"src.{_q(lv)} = leaf.{_q(lv)}"))
        con.register("hierdp_leaf", paths.assign(hierdp_ext=ext))
        joins.append(f"LEFT JOIN hierdp_leaf leaf ON {' AND '.join(conds) if conds else 'false'}")
        key = f"leaf.hierdp_ext * {k}"
        stride = k
        for i, name in enumerate(names):
            idx = self.cells[name]
            stride //= len(idx)
            con.register(f"hierdp_cell{i}", pd.DataFrame({"v": idx.to_numpy(), "code": np.arange(len(idx))}))
            cond = self._match(name, idx, f"src.{_q(name)} = c{i}.v")
            joins.append(f"LEFT JOIN hierdp_cell{i} c{i} ON {cond}")
            key += f" + c{i}.code * {stride}"
        return " ".join(joins), key, k

    def _match(self, name: str, idx: pd.Index, cond: str) -> str:
        """The join condition of a column with its declared domain: ``false`` (every record
        then takes the exact pandas path) where the types differ (text against numbers)."""
        fam = "text" if self._labels_as_text else _sql_family(self._types.get(name, "VARCHAR"))
        if (fam == "text" and _is_text(idx)) or (fam == "integer" and _is_number(idx)):
            return cond
        if fam == "text" and _is_number(idx) and name in self._csv_numbers():
            return cond.replace(f"src.{_q(name)}", f"TRY_CAST(src.{_q(name)} AS BIGINT)", 1)
        return "false"

    def _domain_index(self, name: str) -> pd.Index:
        if name in self.cells:
            return self.cells[name]
        return next(lo.index for lo in self._structure._levels if lo.name == name)

    def _csv_numbers(self) -> list[str]:
        """CSV label columns read as numbers, as ``pandas.read_csv`` reads them: those whose
        declared domain holds integers (text domains keep codes such as ``"01"`` as text)."""
        if self.format != "csv" or self._text_asked:
            return []
        return [n for n in self.levels + list(self.cells) if _is_number(self._domain_index(n))]

    def _as_read(self, paths: pd.DataFrame) -> pd.DataFrame:
        """Distinct paths with the :meth:`_csv_numbers` columns made numbers where every
        value is one (other values stay text: outside the domain, as in pandas)."""
        out = paths.copy()
        for name in self._csv_numbers():
            col = out[name]
            num = pd.to_numeric(col, errors="coerce")
            whole = num.notna() & (num == np.floor(num))
            if whole.all() and len(col):
                out[name] = num.astype(np.int64)
            elif whole.any():
                out[name] = pd.Series(np.where(whole, num.astype("Int64").astype(object), col.astype(object)),
                                      index=col.index, dtype=object)
        return out

    def _source(self, over: bool) -> str:
        """The records (the label columns and their weight), without the rows of the units
        over the bound (``over``); the kept rows of those units follow from Python."""
        cols = ", ".join(self._label(n) for n in self.levels + list(self.cells))
        base = f"SELECT {cols}, {self._weight()} AS hierdp_w FROM {self._reader()}{self._where()}"
        if not over:
            return base
        unit = _q(str(self.unit))
        names = ", ".join(_q(n) for n in self.levels + list(self.cells))
        return (f"{base}{' AND' if self._where() else ' WHERE'} {unit} NOT IN (SELECT u FROM hierdp_over) "
                f"UNION ALL SELECT {names}, hierdp_w FROM hierdp_kept")

    def _bound(self, con: Any, rng: Any) -> tuple[bool, int]:
        """Contribution bounding: the units over ``c`` found by a group-by in DuckDB, their rows
        fetched in chunks of whole units and ``c`` of each unit's rows kept uniformly at random
        by the pandas door's choice (a function of the bounding key drawn from hierdp's
        random source and of the rows' content); the kept rows are registered as
        ``hierdp_kept``. Returns whether any unit was over and the rows dropped."""
        unit, c = str(self.unit), int(self.max_contributions or 0)
        key = bounding_key(rng)  # drawn whatever the data, as every door draws it
        u = _q(unit)
        n_missing = con.execute(f"SELECT count(*) FROM {self._reader()} WHERE {u} IS NULL").fetchone()[0]
        if n_missing:
            raise DataError(f"privacy-unit column {unit!r} has missing values; every row needs a unit")
        con.execute(f"CREATE OR REPLACE TEMP TABLE hierdp_over AS SELECT {u} AS u, count(*) AS n "
                    f"FROM {self._reader()} GROUP BY {u} HAVING count(*) > {c}")
        n_rows = con.execute("SELECT coalesce(sum(n), 0) FROM hierdp_over").fetchone()[0]
        if not n_rows:
            return False, 0
        n_chunks = max(1, math.ceil(int(n_rows) / _CHUNK_ROWS))
        names = self.levels + list(self.cells)
        labels = ", ".join(self._label(n) for n in names)
        kept: list[pd.DataFrame] = []
        dropped = 0
        for i in range(n_chunks):  # one chunk of whole units at a time (not a loop per row or unit)
            rows = con.execute(
                f"SELECT {labels}, {u} AS {_q(unit)} FROM {self._reader()} "
                f"WHERE {u} IN (SELECT u FROM hierdp_over WHERE hash(u) % {n_chunks} = {i})").df()
            # the choice depends on the key and the rows' content (the values as the pandas
            # door reads them), not on their order
            read = self._as_read(rows)

            def row_hash(over: np.ndarray, read: pd.DataFrame = read) -> np.ndarray:
                return content_hash(read[names].iloc[over], names)

            keep, n_dropped = bounded_rows(read[unit], c, key, row_hash)
            dropped += n_dropped
            # a dropped row stays with weight 0: the domain check sees every record's values
            w = np.ones(len(rows), np.int64) if keep is None else keep.astype(np.int64)
            kept.append(rows[names].assign(hierdp_w=w).groupby(names, dropna=False, sort=False)["hierdp_w"]
                        .sum().reset_index())
        frame = pd.concat(kept, ignore_index=True)
        frame["hierdp_w"] = frame["hierdp_w"].astype(np.int64)
        con.register("hierdp_kept", frame)
        return True, dropped

    @overload
    def _leaf_keys(self, rng: Any = None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]: ...

    @overload
    def _leaf_keys(self, rng: Any = None, *, into: Path) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
        ...

    def _leaf_keys(self, rng: Any = None, *, into: Path | None = None
                   ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]] | None:
        """True counts per (leaf, cell) key ``ext * k + cell``: keys (ascending) and counts
        (int64), and the private notes. Reads private data.

        ``into``: when every record joins a leaf and a cell, DuckDB writes the counts file of
        :meth:`counted` there itself (sorted out of core, never whole in this process: the
        whole US's 52 million block-cells took 8.7 GB as numpy arrays) and this returns None,
        the notes in ``_written_notes``; otherwise the keys as without it."""
        notes: dict[str, Any] = {}
        with self._connect() as con:
            over = False
            if self.unit is not None:
                over, dropped = self._bound(con, rng if rng is not None else make_rng(None))
                notes["rows_dropped_by_contribution_bound"] = int(dropped)
            joins, key, k = self._join_tables(con)
            # grouped to distinct (path, cell) first, then placed: faster than placing every
            # record, as records share paths
            names = ", ".join(_q(n) for n in self.levels + list(self.cells))
            src = f"SELECT {names}, sum(hierdp_w) AS hierdp_w FROM ({self._source(over)}) GROUP BY ALL"
            keyed = (f"SELECT coalesce({key}, -1) AS key, CAST(round(sum(src.hierdp_w)) AS BIGINT) AS w "
                     f"FROM ({src}) src {joins} GROUP BY ALL")
            if into is not None:
                con.execute(f"CREATE TEMP TABLE hierdp_keyed AS {keyed}")
                unplaced_n, total = con.execute("SELECT count(*) FILTER (WHERE key < 0), "
                                                "sum(CAST(w AS HUGEINT)) FILTER (WHERE key >= 0) "
                                                "FROM hierdp_keyed").fetchall()[0]
                if not unplaced_n:
                    if self.count is not None:
                        rules.enforce(rules.value_range_problem(int(total or 0), "the total of the counts"),
                                      DataError)
                    self._copy_counts(con, k, into)
                    self._written_notes = notes
                    return None
                keyed = "SELECT key, w FROM hierdp_keyed"
            rows = con.execute(f"SELECT key, w FROM ({keyed}) ORDER BY key").fetchnumpy()
            keys = np.asarray(rows["key"], dtype=np.int64)
            w = np.asarray(rows["w"], dtype=np.int64)
            unplaced = keys < 0
            placed_keys, placed_w = keys[~unplaced], w[~unplaced]
            if unplaced.any():
                extra_keys, extra_w, more = self._residual(con, src, joins, key)
                notes.update(more)
                placed_keys = np.r_[placed_keys, extra_keys]
                placed_w = np.r_[placed_w, extra_w]
        if self.count is not None:
            rules.enforce(total_problem(placed_w), DataError)
        return placed_keys, placed_w, notes

    def _copy_counts(self, con: Any, k: int, path: Path) -> None:
        """The non-zero ``(leaf, cell, count)`` rows of ``hierdp_keyed`` (every key placed),
        ``leaf`` the tree's internal id, sorted by ``(leaf, cell)`` into ``path`` in row groups
        of :data:`_ROW_GROUP` rows with min/max statistics, written by DuckDB (out of core)
        into a hidden file of the private folder, made 0600, synced, then renamed onto
        ``path``."""
        import pyarrow as pa

        inv = self.tree.internal.inverse_perm
        if inv is None:
            leaf = f"h.key // {k}"
            join = ""
        else:
            con.register("hierdp_inv", pa.table({"ext": pa.array(np.arange(inv.size, dtype=np.int64)),
                                                 "leaf": pa.array(np.asarray(inv, dtype=np.int64))}))
            leaf = "i.leaf"
            join = f"JOIN hierdp_inv i ON i.ext = h.key // {k}"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
        os.close(fd)
        try:
            con.execute(f"COPY (SELECT CAST({leaf} AS BIGINT) AS leaf, CAST(h.key % {k} AS INTEGER) AS cell, "
                        f"h.w AS count FROM hierdp_keyed h {join} WHERE h.w != 0 ORDER BY 1, 2) "
                        f"TO {_lit(tmp)} (FORMAT parquet, ROW_GROUP_SIZE {_ROW_GROUP})")
            # made 0600 after the COPY: DuckDB writes the file anew (0644), so a mode set before,
            # as hierdp.execution.folders.atomic does, would not hold (the folder is 0700)
            os.chmod(tmp, 0o600)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _residual(self, con: Any, src: str, joins: str, key: str) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """The records that joined no leaf or cell, grouped into their distinct paths and
        placed by the pandas door's code: its errors word for word (and the file), or
        dropped with ``unknown="drop"``, or placed where a ragged path ends at a leaf."""
        names = self.levels + list(self.cells)
        cols = ", ".join(f"src.{_q(n)}" for n in names)
        paths = con.execute(f"SELECT {cols}, sum(src.hierdp_w) AS hierdp_w FROM ({src}) src {joins} "
                            f"WHERE ({key}) IS NULL GROUP BY ALL").df()
        w = paths.pop("hierdp_w").to_numpy(np.float64)
        w = np.rint(w).astype(np.int64)
        read = self._as_read(paths)
        if self.cells:
            placed, bad, problems = _place_paths(self._structure, read, self.cells)
        else:
            placed, bad, problems = self._structure.locate_paths(read)
        notes: dict[str, Any] = {}
        if bad.any():
            if self.unknown == "raise":
                raise DataError(f"{str(domain_error(problems, 'dataset'))} [found in "
                                f"{self._where_found(con, paths[bad])}]")
            notes["rows_dropped_out_of_domain"] = int(w[bad].sum())
        return placed[~bad].astype(np.int64), w[~bad], notes

    def _where_found(self, con: Any, bad: pd.DataFrame) -> str:
        """The name of the first file holding one of the ``bad`` paths (never a value)."""
        names = self.levels + list(self.cells)
        con.register("hierdp_bad", bad.head(1000).reset_index(drop=True))
        cond = " AND ".join(f"src.{_q(n)} IS NOT DISTINCT FROM b.{_q(n)}" for n in names)
        labels = ", ".join(self._label(n) for n in names)
        try:
            row = con.execute(f"SELECT min(src.hierdp_file) FROM (SELECT {labels}, filename AS hierdp_file FROM "
                              f"{self._reader(filename=True)}) src JOIN hierdp_bad b ON {cond}").fetchone()
        except (self._duckdb.Error, DataError):  # labels of different types: fall back to no file name
            row = None
        if row is None or row[0] is None:
            return "the dataset"
        return self._part_name(Path(row[0]))

    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private notes; counted in DuckDB. Reads
        private data; ``rng`` draws the contribution bounds.

        Parameters
        ----------
        rng : RandomSource, optional
            The randomness that picks the rows kept per unit (``max_contributions``);
            ``None`` uses the secure source.
        source : str, optional
            The input's identity, recorded with the counts so that a resumed run finds them
            (:meth:`CountedDataset.reopen`) instead of counting again.
        progress : bool, default False
            DuckDB's progress bar while it counts (on a terminal only).

        Returns
        -------
        (numpy.ndarray, dict)
            NON-PRIVATE: the exact counts ``(n,)`` or ``(n, k)``, and private notes (e.g.
            ``rows_dropped_out_of_domain``). Never publish them.
        """
        keys, w, notes = self._leaf_keys(rng)
        k = self.n_cells
        flat = np.zeros(self._structure.n_ext * k, np.int64)
        np.add.at(flat, keys, w)
        counts = flat.reshape(self._structure.n_ext, k) if self.cells else flat
        return leaf_counts_to_nodes(self._structure.tree, counts), notes

    def out_of_domain(self) -> pd.DataFrame:
        """NON-PRIVATE diagnostics: the distinct level and cell paths of the records outside
        the declared domains, with their number of records (``n``) and the file. Never
        publish them.

        Returns
        -------
        pandas.DataFrame
            NON-PRIVATE: the level and cell columns, ``file`` and ``n``.
        """
        names = self.levels + list(self.cells)
        with self._connect() as con:
            joins, key, _ = self._join_tables(con)
            labels = ", ".join(self._label(n) for n in names)
            cols = ", ".join(f"src.{_q(n)}" for n in names)
            frame = con.execute(
                f"SELECT {cols}, src.hierdp_file AS file, count(*) AS n FROM (SELECT {labels}, filename AS "
                f"hierdp_file FROM {self._reader(filename=True)}) src {joins} WHERE ({key}) IS NULL "
                f"GROUP BY ALL ORDER BY ALL").df()
        if frame.empty:
            return frame
        read = self._as_read(frame)
        located = (_place_paths(self._structure, read, self.cells) if self.cells
                   else self._structure.locate_paths(read))
        return frame[located[1]].reset_index(drop=True)

    @staticmethod
    def _observed(domains: Any) -> bool:
        if isinstance(domains, str):
            return domains == "observed"
        return isinstance(domains, Mapping) and any(isinstance(v, str) and v == "observed" for v in domains.values())

    # -- the counted dataset for the out-of-core runner -------------------------------------
    def counted(self, workdir: str | os.PathLike[str], rng: Any = None, *, source: str | None = None,
                progress: bool = False) -> CountedDataset:
        """Count the dataset once into ``workdir`` (PRIVATE: true counts on disk; keep the
        folder as protected as the data, and delete it after the release).

        Writes ``counts.parquet``: the non-zero ``(leaf, cell, count)`` rows, ``leaf`` the full
        tree's internal id, sorted by ``(leaf, cell)`` in row groups of 65,536 rows with
        min/max statistics: a subtree's leaves are consecutive in the internal order (a
        level-complete tree), so one task's counts are read from its own row groups only.
        ``rng`` draws the contribution bounds (secure by default). Returns the
        :class:`CountedDataset` (``.tree``, ``.n_cells``, ``.counts_of(task)``).

        Parameters
        ----------
        workdir : str or os.PathLike
            The folder to write ``counts.parquet`` in (PRIVATE): created with mode 0700, or an
            existing folder of this user's that is already owner-only (anything else, e.g. a
            folder someone else made or one open to others, is refused); the file is 0600
            from its first byte.
        rng : RandomSource, optional
            The randomness that picks the rows kept per unit (``max_contributions``);
            ``None`` uses the secure source.
        source : str, optional
            The input's identity, recorded with the counts so that a resumed run finds them
            (:meth:`CountedDataset.reopen`) instead of counting again.
        progress : bool, default False
            DuckDB's progress bar while it counts (on a terminal only).

        Returns
        -------
        CountedDataset
            Its ``counts_of`` is the ``counts_of`` of :func:`hierdp.outofcore.release_to_dataset`.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = make_private_folder(Path(os.fspath(workdir)), "counts folder")  # never adopted
        self._progress = bool(progress) and sys.stderr.isatty()
        try:
            found = self._leaf_keys(rng, into=folder / "counts.parquet")
        finally:
            self._progress = False
        k = self.n_cells
        tree = self.tree
        if found is not None:  # some records joined no leaf: placed in pandas, written from numpy
            keys, w, notes = found
            ext = keys // k
            inv = tree.internal.inverse_perm
            leaf = ext if inv is None else np.asarray(inv)[ext]
            cell = keys % k
            order = np.lexsort((cell, leaf))
            nz = w[order] != 0
            table = pa.table({"leaf": leaf[order][nz].astype(np.int64), "cell": cell[order][nz].astype(np.int32),
                              "count": w[order][nz].astype(np.int64)})
            _write_private(folder / "counts.parquet", lambda fh: pq.write_table(
                table, fh, row_group_size=_ROW_GROUP, write_statistics=True))
        else:
            notes = self._written_notes
        # written last: the counts are complete (PRIVATE: the notes hold private figures)
        meta = json.dumps({"n_nodes": tree.n_nodes, "n_cells": k, "levels": list(self.levels), "source": source,
                           "notes": notes}, default=str).encode()
        _write_private(folder / "counts.json", lambda fh: fh.write(meta))
        return CountedDataset(tree, k, folder, notes)


def _write_private(path: Path, write: Any) -> None:
    """``write(fh)`` into a new file beside ``path`` made 0600 from its first byte (``mkstemp``:
    ``O_CREAT | O_EXCL | O_NOFOLLOW``), synced, then renamed onto ``path``: never a half-written
    file under the final name, never a file someone else made or holds open."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CountedDataset:
    """True (leaf, cell) counts of a dataset on disk (PRIVATE), read one subtree task at a
    time; made by :meth:`DatasetDPTree.counted`.

    Attributes
    ----------
    tree : the public tree. n_cells : cells per node. path : the ``counts.parquet`` file.
    notes : the private notes of the count (rows dropped by the contribution bound ...).
    """

    def __init__(self, tree: Tree, n_cells: int, folder: Path, notes: dict[str, Any]) -> None:
        self.tree = tree
        self.n_cells = int(n_cells)
        self.folder = folder
        self.path = folder / "counts.parquet"
        self.notes = notes

    @classmethod
    def reopen(cls, folder: str | os.PathLike[str], tree: Tree) -> CountedDataset:
        """The counts :meth:`DatasetDPTree.counted` wrote in ``folder`` (complete: its
        ``counts.json``), for ``tree``: a resumed release reads them instead of counting the
        records again (the same counts, the same sample of a unit's rows).

        Parameters
        ----------
        folder : str or os.PathLike
            The counts folder (PRIVATE), as :meth:`DatasetDPTree.counted` left it.
        tree : Tree
            The public tree the counts are of (its node count is checked).

        Returns
        -------
        CountedDataset
            The counts, with their private notes.
        """
        folder = Path(os.fspath(folder))
        meta = json.loads((folder / "counts.json").read_text(encoding="utf-8"))
        if meta.get("n_nodes") != tree.n_nodes:
            raise DataError(f"the counts in {str(folder)!r} are of another tree ({meta.get('n_nodes')} nodes, not "
                            f"{tree.n_nodes}); delete the folder to count again")
        return cls(tree, int(meta["n_cells"]), folder, dict(meta.get("notes") or {}))

    def counts_of(self, task: Any) -> np.ndarray:
        """True counts of ``task.nodes`` (the full tree's internal ids, ascending, all levels
        of the task; a :class:`~hierdp.subtrees.SubtreeTask`) as ``(m,)`` without cells or
        ``(m, n_cells)``: the task's leaves read from their row groups only (a filter on the
        sorted ``leaf`` column), then summed up the task's own tree.

        Parameters
        ----------
        task : hierdp.subtrees.SubtreeTask
            The task whose ``nodes`` (and ``parent``) to count.

        Returns
        -------
        numpy.ndarray
            NON-PRIVATE: the exact int64 counts ``(m,)`` or ``(m, n_cells)``, in the order of
            ``task.nodes``. Never publish them.
        """
        import pyarrow.parquet as pq

        nodes = np.asarray(task.nodes, dtype=np.int64)
        m, k = nodes.size, self.n_cells
        parent = np.asarray(task.parent, dtype=np.int64)
        off = parent.size - m  # 1: a subtree task's unmeasured root comes first; 0: the top part
        vals = np.zeros((m + off, k), np.int64)
        ti = self.tree.internal
        if m and off == 1:  # a block of whole subtrees: its own leaves, from their row groups only
            leaves = nodes[ti.n_children[nodes] == 0]
            if leaves.size:
                table = pq.read_table(self.path, filters=[("leaf", ">=", int(leaves.min())),
                                                          ("leaf", "<=", int(leaves.max()))])
                self._add(vals, nodes, off, table, None)
        elif m:  # the top part: every leaf, streamed by row group, summed to its ancestor in the part
            depth = np.asarray(ti.depth)
            top_depth = int(depth[nodes].max())
            pf = pq.ParquetFile(self.path)
            for i in range(pf.num_row_groups):  # one row group at a time (bounded memory)
                self._add(vals, nodes, off, pf.read_row_group(i), top_depth)
        local = Tree(parent, _check=False)
        sums = local.to_external(local.internal.sum_up(np.ascontiguousarray(local.to_internal(vals)), consume=True))
        out = np.asarray(sums)[off:]
        return out[:, 0].copy() if k == 1 else out

    def _add(self, vals: np.ndarray, nodes: np.ndarray, off: int, table: Any, depth: int | None) -> None:
        """Add a table's (leaf, cell, count) rows at the task nodes holding their leaves
        (``depth``: at the leaves' ancestors of that depth)."""
        node = table.column("leaf").to_numpy().astype(np.int64)
        if depth is not None:  # one vectorised step per level
            ti = self.tree.internal
            d = np.asarray(ti.depth)
            par = np.asarray(ti.parent)
            while True:
                deep = d[node] > depth
                if not deep.any():
                    break
                node = np.where(deep, par[node], node)
        m = nodes.size
        pos = np.searchsorted(nodes, node)
        ok = (pos < m) & (nodes[np.minimum(pos, m - 1)] == node)
        np.add.at(vals, (pos[ok] + off, table.column("cell").to_numpy()[ok].astype(np.int64)),
                  table.column("count").to_numpy()[ok])


def _parquet_readable(f: Path, columns: list[str]) -> bool:
    """Whether pyarrow reads ``f``'s ``columns`` (those it has) through, one batch at a time
    (the error path only)."""
    try:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(f)
        have = [c for c in columns if c in pf.schema_arrow.names]
        for _ in pf.iter_batches(columns=have):
            pass
    except Exception:
        return False
    return True


def _ragged_row(f: Path) -> tuple[int, int, int] | None:
    """The first row of the CSV ``f`` whose number of fields is not the header's: ``(row, its
    fields, the header's)``, rows counted from 1 with the header (as an editor numbers lines
    when no field holds a line break); ``None`` if there is none. Reads the file (the error
    path only)."""
    import csv

    try:
        with open(f, newline="", encoding="utf-8-sig", errors="replace") as fh:
            rows = csv.reader(fh)
            header = next(rows, None)
            if header is None:
                return None
            for i, row in enumerate(rows, start=2):
                if row and len(row) != len(header):
                    return i, len(row), len(header)
    except (OSError, csv.Error):
        return None
    return None


class _Guarded:
    """A DuckDB connection whose errors about the dataset's files become the door's one line
    (:meth:`DatasetDPTree._read_error`); everything else as DuckDB's."""

    def __init__(self, con: Any, door: DatasetDPTree) -> None:
        self._con, self._door = con, door

    def _run(self, name: str, *args: Any, **kw: Any) -> Any:
        try:
            return getattr(self._con, name)(*args, **kw)
        except self._door._duckdb.Error as exc:
            err = self._door._read_error(exc)
            if err is None:
                raise
            raise err from None

    def execute(self, *args: Any, **kw: Any) -> _Guarded:
        self._run("execute", *args, **kw)
        return self

    def fetchall(self) -> Any:
        return self._run("fetchall")

    def fetchone(self) -> Any:
        return self._run("fetchone")

    def fetchnumpy(self) -> Any:
        return self._run("fetchnumpy")

    def df(self) -> Any:
        return self._run("df")

    def register(self, *args: Any) -> Any:
        return self._con.register(*args)


class _Connection:
    """A DuckDB connection with the door's memory limit, spill folder and threads; closes
    (and removes a temporary spill folder) on exit."""

    def __init__(self, door: DatasetDPTree) -> None:
        self._door = door
        self._tmp: str | None = None
        self._con: Any = None

    def __enter__(self) -> Any:
        door = self._door
        # DuckDB makes its spill files (the records' values) 0644: they go to a fresh 0700
        # folder of their own, inside temp_directory when one is given
        if door._temp_given is not None:
            door._temp_given.mkdir(parents=True, exist_ok=True)
        self._tmp = spill = tempfile.mkdtemp(prefix="hierdp-duckdb-", dir=door._temp_given)
        config = {"memory_limit": f"{max(door.memory // 2**20, 64)}MiB", "temp_directory": spill,
                  "preserve_insertion_order": False}
        if door.threads is not None:
            config["threads"] = door.threads
        try:
            self._con = door._duckdb.connect(":memory:", config=config)
            self._con.execute(f"SET enable_progress_bar = {'true' if getattr(door, '_progress', False) else 'false'}")
        except Exception:
            self.__exit__(None, None, None)
            raise
        return _Guarded(self._con, door)

    def __exit__(self, *exc: Any) -> None:
        if self._con is not None:
            self._con.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _dataset_door(data: Any, **keywords: Any) -> DatasetDPTree:
    levels = keywords.pop("levels", None)
    if levels is None:
        raise DataError("hierdp.dptree(path, ...) needs levels=[...] (the hierarchy columns, top-down)")
    return DatasetDPTree(data, levels, **keywords)


register_door("dataset path", lambda data: isinstance(data, (str, os.PathLike)), _dataset_door)
