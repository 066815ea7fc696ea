"""The ``source`` section: the private data's files (their header only) or a bundled demo."""

from __future__ import annotations

from typing import Any

from hierdp.data import DEMOS, demo_path
from hierdp.errors import DataError, did_you_mean
from hierdp.frontends.dataset import dataset_files
from hierdp.io.readers import csv_header
from hierdp.spec.validate.context import Context, format_of, get, kind_of

__all__ = ["SourceChecks"]


class SourceChecks(Context):
    """Checks of ``source``; sets ``self.header`` (the source's column names) when known."""

    def source(self) -> dict[str, Any]:
        """The source files (or demo), their format, the selected columns, count and filters."""
        s = self.data.get("source")
        out: dict[str, Any] = {"files": [], "demo": None, "format": "csv", "columns": None, "count": None,
                               "filter": [], "engine": "pandas"}
        if not isinstance(s, dict):
            return out
        out["engine"] = get(s, "engine", str, "pandas")
        if out["engine"] == "dask":
            if "demo" in s:
                self.err(("source", "engine"), "engine: dask reads source files (source.path); a bundled demo is "
                                               "read in memory: remove `engine: dask`", prefer_key=True)
            problem = _dask_problem()
            if problem is not None:
                self.err(("source", "engine"), problem)
        if out["engine"] == "spark":
            if "demo" in s:
                self.err(("source", "engine"), "engine: spark reads source files (source.path); a bundled demo is "
                                               "read in memory: remove `engine: spark`", prefer_key=True)
            problem = _spark_problem()
            if problem is not None:
                self.err(("source", "engine"), problem)
        if out["engine"] == "duckdb":
            if "demo" in s:
                self.err(("source", "engine"), "engine: duckdb reads source files (source.path); a bundled demo is "
                                               "read in memory: remove `engine: duckdb`", prefer_key=True)
            if s.get("filter"):
                self.err(("source", "filter"), "engine: duckdb counts every record of the files; source.filter "
                                               "is not supported there: filter the files first, or remove "
                                               "`engine: duckdb`", prefer_key=True)
            problem = _duckdb_problem()
            if problem is not None:
                self.err(("source", "engine"), problem)
        if out["engine"] == "polars":
            if "demo" in s:
                self.err(("source", "engine"), "engine: polars reads source files (source.path); a bundled demo is "
                                               "read in memory: remove `engine: polars`", prefer_key=True)
            if s.get("filter"):
                self.err(("source", "filter"), "engine: polars counts every record of the files; source.filter "
                                               "is not supported there: filter the files first, or remove "
                                               "`engine: polars`", prefer_key=True)
            problem = _polars_problem()
            if problem is not None:
                self.err(("source", "engine"), problem)
        path, demo = get(s, "path", str), get(s, "demo", str)
        out["columns"] = get(s, "columns", list)
        out["count"] = get(s, "count", str)
        out["filter"] = [f for f in get(s, "filter", list, []) if isinstance(f, dict)
                         and isinstance(f.get("column"), str) and "op" in f and "value" in f]
        if "path" in s and "demo" in s:
            self.err(("source", "demo"), "give either source.path or source.demo, not both", prefer_key=True)
            return out
        if "path" not in s and "demo" not in s:
            self.err(("source",), "the source needs `path:` (a CSV/Parquet file or glob) or `demo:` "
                                  "(a bundled dataset, e.g. census)")
            return out
        for i, f in enumerate(get(s, "filter", list, [])):
            if isinstance(f, dict) and f.get("op") in ("in", "not_in") and "value" in f \
                    and not isinstance(f["value"], list):
                self.err(("source", "filter", i, "value"), f"operator {f['op']!r} needs a list of values, "
                                                           f"got {kind_of(f['value'])}; write value: [a, b]")
            elif isinstance(f, dict) and f.get("op") not in ("in", "not_in") and isinstance(f.get("value"),
                                                                                              (list, dict)):
                self.err(("source", "filter", i, "value"), f"operator {f.get('op')!r} compares with one value, "
                                                           f"got {kind_of(f['value'])}; use op: in for a list")
        if demo is not None:

            out["demo"] = demo
            if demo not in DEMOS:
                self.err(("source", "demo"), f"unknown demo dataset {demo!r}{did_you_mean(demo, DEMOS)}; "
                                             f"bundled: {', '.join(sorted(DEMOS))}")
                return out
            if self.check_files:
                self.header = _demo_columns(demo)
        elif path is not None and self.resolve(path).is_dir():
            # a folder of parts, whatever the engine: every Parquet/CSV file in it (the dataset door's rule)
            try:
                files, fmt_found = dataset_files(self.resolve(path), get(s, "format", str))
            except DataError as exc:
                self.err(("source", "path"), str(exc))
                return out
            out["files"], out["format"] = files, fmt_found
            if self.check_files:
                self.header = self.read_header(files, fmt_found, ("source", "path"))
        elif path is not None:
            files = self.resolve_glob(path, ("source", "path"))
            out["files"] = files
            fmt = get(s, "format", str)
            if fmt is None and files:
                fmts = {format_of(f) for f in files}
                if None in fmts:
                    bad = next(f for f in files if format_of(f) is None)
                    self.err(("source", "path"), f"cannot tell the format of {bad.name!r} from its extension; "
                                                 "add `format: csv` or `format: parquet`")
                    return out
                if len(fmts) > 1:
                    self.err(("source", "path"), "the glob matches both CSV and Parquet files; "
                                                 "narrow the pattern to one format")
                    return out
                fmt = fmts.pop()
            out["format"] = fmt or "csv"
            if self.check_files and files:
                self.header = self.read_header(files, out["format"], ("source", "path"))
        if self.header is not None:
            cols = set(self.header)
            for i, c in enumerate(out["columns"] or []):
                if isinstance(c, str) and c not in cols:
                    self.err(("source", "columns", i), self.missing_col(c))
            if out["count"] is not None and out["count"] not in cols:
                self.err(("source", "count"), self.missing_col(out["count"]))
            for i, f in enumerate(get(s, "filter", list, [])):
                if isinstance(f, dict) and isinstance(f.get("column"), str) and f["column"] not in cols:
                    self.err(("source", "filter", i, "column"), self.missing_col(f["column"]))
        return out


    def check_dataset_engine(self, levels: Any, cells: Any, decomposition: Any, engine: str = "duckdb") -> None:
        """What ``engine: duckdb`` (the dataset door) does not do: a spatial decomposition,
        and level or cell columns read under another name; ``engine: polars`` (the Polars
        door) reads no decomposition either."""
        if decomposition is not None:
            self.err(("source", "engine"), f"engine: {engine} counts records on a declared hierarchy; a "
                                           f"decomposition reads the points in memory: remove `engine: {engine}`",
                     prefer_key=True)
        if engine != "duckdb":
            return
        for item in [*(levels or []), *(cells or [])]:
            if getattr(item, "column", None) != getattr(item, "name", None):
                self.err(("source", "engine"), f"engine: duckdb reads each level and cell column under its own name; "
                                               f"{item.name!r} reads column {item.column!r}: name it {item.column!r}, "
                                               "or remove `engine: duckdb`", prefer_key=True)
                return


def _spark_problem() -> str | None:
    """Why ``engine: spark`` cannot run here (pyspark missing), else None (Java is checked
    when the session starts)."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return "engine: spark needs the optional package pyspark; install it with: pip install 'hierdp[spark]'"
    return None


def _dask_problem() -> str | None:
    """Why ``engine: dask`` cannot run here (dask.dataframe missing), else None."""
    try:
        import dask.dataframe  # noqa: F401
    except ImportError:
        return ("engine: dask needs the optional package dask (dask.dataframe); install it with: "
                "pip install 'hierdp[dask]' (or remove `engine: dask` to read the source with pandas)")
    return None


def _polars_problem() -> str | None:
    """Why ``engine: polars`` cannot run here (polars missing), else None."""
    try:
        import polars  # noqa: F401
    except ImportError:
        return ("engine: polars needs the optional package polars; install it with: "
                "pip install 'hierdp[polars]' (or remove `engine: polars` to read the source with pandas)")
    return None


def _duckdb_problem() -> str | None:
    """Why ``engine: duckdb`` cannot run here (duckdb or pyarrow missing), else None."""
    try:
        import duckdb  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return ("engine: duckdb needs the optional packages duckdb and pyarrow; install them with: "
                "pip install 'hierdp[dataset]' (or remove `engine: duckdb` to read the source with pandas)")
    return None


def _demo_columns(name: str) -> list[str]:
    """Column names of a bundled demo dataset (its header row only)."""

    from importlib import resources


    with resources.as_file(demo_path(name)) as path:
        return csv_header(path)

