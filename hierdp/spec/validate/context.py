"""What every section check shares: the spec, its marks, the problems found so far, the
source header, and the helpers that resolve paths and read headers (never a private value)."""

from __future__ import annotations

import glob
import math
from pathlib import Path
from typing import Any

from hierdp.errors import DataError, did_you_mean
from hierdp.io.readers import csv_header
from hierdp.spec.loader import Issue, Marks

__all__ = ["Context", "KNOWN_EXTENSIONS", "format_of", "kind_of", "get", "num", "valid_list"]

#: file extension -> format
KNOWN_EXTENSIONS = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}


def kind_of(value: Any) -> str:
    """A value's kind in words (``a mapping``, ``a list``, ...)."""
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(type(value),
                                                                                          type(value).__name__)


def get(d: Any, key: str, typ: type | tuple = object, default: Any = None) -> Any:
    """``d[key]`` when ``d`` is a dict and the value has type ``typ`` (else ``default``)."""
    if isinstance(d, dict) and key in d and isinstance(d[key], typ) and not (
            typ in (int, float, (int, float)) and isinstance(d[key], bool)):
        return d[key]
    return default


def num(v: Any) -> float | None:
    """``v`` as a finite float, else ``None`` (booleans are not numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v) if math.isfinite(v) else None
    except OverflowError:  # an int beyond float64: the schema pass has said so
        return None


def valid_list(values: Any) -> bool:
    """A domain list the schema accepts: non-empty, scalar items, no duplicates."""
    if not isinstance(values, list) or not values:
        return False
    if not all(isinstance(v, (str, int, bool)) and not isinstance(v, float) for v in values):
        return False
    return len({(type(v), v) for v in values}) == len(values)


def format_of(p: Path) -> str | None:
    """The format (``csv``, ``parquet``) a file's extension names, else ``None``."""
    name = p.name.lower()
    for ext in sorted(KNOWN_EXTENSIONS, key=len, reverse=True):
        if name.endswith(ext):
            return KNOWN_EXTENSIONS[ext]
    return None


class Context:
    """The state the section checks share; each section is a mixin of this class."""

    def __init__(self, data: dict, marks: Marks, base_dir: Path, issues: list[Issue], check_files: bool) -> None:
        self.data, self.marks, self.base_dir, self.issues = data, marks, base_dir, issues
        self.check_files = check_files
        self.warnings: list[str] = []
        self.header: list[str] | None = None  # source columns, when known

    def err(self, path: tuple, msg: str, prefer_key: bool = False) -> None:
        """Record a problem at the dotted ``path`` (its line and column from the marks)."""
        self.issues.append(self.marks.issue(path, msg, prefer_key=prefer_key))

    def missing_col(self, c: str) -> str:
        """The message for a column the source lacks, with the closest names and its columns."""
        avail = self.header or []
        shown = ", ".join(repr(a) for a in avail[:12]) + (" ..." if len(avail) > 12 else "")
        return f"column {c!r} is not in the source{did_you_mean(c, avail)} (its columns: {shown})"

    def resolve(self, p: str) -> Path:
        """An input path as written, relative to the spec's folder."""
        q = Path(p).expanduser()
        return q if q.is_absolute() else self.base_dir / q

    def resolve_glob(self, p: str, path: tuple) -> list[Path]:
        """The files an input path or glob names (reported at ``path`` when there are none)."""
        full = self.resolve(p)
        if any(ch in p for ch in "*?["):
            files = sorted(Path(f) for f in glob.glob(str(full)) if Path(f).is_file())
            if not files:
                self.err(path, f"no file matches {p!r} (looked in {full.parent}); check the pattern")
            return files
        if not full.exists():
            self.err(path, f"file {p!r} does not exist (looked for {full}); check the path "
                           "(relative paths are relative to the spec's folder)")
            return []
        if full.is_dir():
            self.err(path, f"{p!r} is a folder; give a file or a glob such as '{p.rstrip('/')}/*.csv'")
            return []
        return [full]

    def read_header(self, files: list[Path], fmt: str, path: tuple) -> list[str] | None:
        """Column names only (CSV header row / Parquet schema); every file must have the first's columns."""

        headers = []
        for f in files:
            try:
                if fmt == "parquet":
                    try:
                        import pyarrow.parquet as pq
                    except ImportError:
                        self.err(path, "reading Parquet needs pyarrow: pip install 'hierdp[parquet]'")
                        return None
                    names = list(pq.read_schema(f).names)
                else:
                    names = csv_header(f)
            except DataError as exc:  # undecodable bytes, repeated names, empty file: the reader's message
                self.err(path, str(exc))
                return None
            except Exception as exc:  # unreadable/garbled file: report, do not crash
                self.err(path, f"cannot read the header of {f.name!r} as {fmt} ({type(exc).__name__}); "
                               "check the file and its format")
                return None
            headers.append(names)
        for f, h in zip(files[1:], headers[1:]):
            if set(h) != set(headers[0]):
                self.err(path, f"{f.name!r} has other columns than {files[0].name!r}; "
                               "all files of a glob need the same columns")
                return None
        return headers[0] if headers else None

