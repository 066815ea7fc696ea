"""One reader for every table hierdp reads: private sources, domain, path and prior files.

The same rules everywhere (a label read one way in the source and another in a domain
file would silently fall outside its own domain):

* in text files the **empty cell is the only missing value**: ``NA`` (Namibia, the
  Naples province code), ``None``, ``null``, ``NaN``, ``n/a`` ... are labels like any
  other (pandas' default would read them as missing);
* label columns are read as strings, so codes keep their leading zeros (``"01"``);
* a row with more fields than the header, a repeated header name, or bytes that are not
  UTF-8 is a one-line :class:`~hierdp.errors.DataError` naming the file (and the line);
* several files (a list or a glob) must have the same columns and are concatenated.

Parquet files carry their own types and nulls; their label columns are cast to strings.
"""

from __future__ import annotations

import glob as _glob
import gzip
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from hierdp.errors import DataError, MissingDependencyError

__all__ = ["read_table", "read_text_lines", "expand_paths", "format_of", "csv_header"]

_GLOB_CHARS = "*?["


def format_of(path: str | Path) -> str:
    """``"csv"`` or ``"parquet"`` from the file name (``.csv``, ``.csv.gz``, ``.txt``, ``.parquet``, ``.pq``)."""
    name = str(path).lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    return "csv"


def expand_paths(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """Files named by ``paths`` (a path, a glob, or a list of them), globs sorted; DataError if none."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    out: list[Path] = []
    for p in items:
        s = str(p)
        if any(ch in s for ch in _GLOB_CHARS) and not Path(s).exists():
            hits = sorted(Path(f) for f in _glob.glob(s) if Path(f).is_file())
            if not hits:
                raise DataError(f"no file matches {s!r}; check the pattern")
            out.extend(hits)
        else:
            out.append(Path(s))
    if not out:
        raise DataError("no input files to read")
    return out


def _raw_bytes(path: Path) -> bytes:
    if str(path).lower().endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return fh.read()
    return path.read_bytes()


def _decode_error(path: Path, exc: UnicodeDecodeError | None = None) -> DataError:
    """A one-line error naming the file and the line of the first byte that is not UTF-8."""
    try:
        raw = _raw_bytes(path)
        try:
            raw.decode("utf-8")
            start = exc.start if exc is not None else 0
        except UnicodeDecodeError as e:
            start = e.start
        line = raw.count(b"\n", 0, start) + 1
        byte = f"0x{raw[start]:02x}" if start < len(raw) else "?"
    except OSError:
        line, byte = None, "?"
    where = f"{path}" + (f", line {line}" if line is not None else "")
    return DataError(f"{where}: byte {byte} is not UTF-8 text; save the file as UTF-8 "
                     "(e.g. in a spreadsheet: 'CSV UTF-8')")


def _open_error(path: Path, exc: OSError) -> DataError:
    if isinstance(exc, FileNotFoundError):
        return DataError(f"file {str(path)!r} does not exist; check the path")
    if isinstance(exc, IsADirectoryError):
        return DataError(f"{str(path)!r} is a folder; give a file or a glob such as '{path}/*.csv'")
    return DataError(f"cannot read {str(path)!r} ({exc.strerror or type(exc).__name__}); check its permissions")


def csv_header(path: str | Path) -> list[str]:
    """The header row of a CSV file (column names, exactly as written); DataError on a
    repeated or empty name, undecodable bytes or an empty file."""
    p = Path(path)
    try:
        names = [str(c) for c in pd.read_csv(p, nrows=0, encoding="utf-8-sig").columns]
        if any(re.fullmatch(r"(.*)\.\d+", n) and re.fullmatch(r"(.*)\.\d+", n).group(1) in names for n in names):
            # pandas renames a repeated name 'a' to 'a.1': read the header row as written
            first = pd.read_csv(p, nrows=1, header=None, dtype=str, keep_default_na=False, encoding="utf-8-sig")
            names = [str(v) for v in first.iloc[0].tolist()]
    except UnicodeDecodeError as exc:
        raise _decode_error(p, exc) from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{p}: the file is empty; a table needs a header row") from None
    except pd.errors.ParserError as exc:
        raise DataError(f"{p}: not a readable CSV ({_parser_detail(exc)}); check the file and its format") from None
    except OSError as exc:
        raise _open_error(p, exc) from None
    names = ["" if n.startswith("Unnamed: ") else n for n in names]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DataError(f"{p}: the header names column {dup[0]!r} more than once; give every column its own name")
    if any(n == "" for n in names):
        raise DataError(f"{p}: the header has an empty column name (column {names.index('') + 1}); name every column")
    return names


def _parser_detail(exc: Exception) -> str:
    msg = " ".join(str(exc).split())
    msg = msg.replace("Error tokenizing data. C error: ", "")
    return msg


def _read_csv(path: Path, columns: list[str] | None, label_columns: Sequence[str]) -> pd.DataFrame:
    names = csv_header(path)
    if columns is not None:
        missing = [c for c in columns if c not in names]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r} (its columns: {', '.join(names[:12])}"
                            f"{' ...' if len(names) > 12 else ''}); fix the column name")
    dtype = {c: "string" for c in label_columns if c in names}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # index_col=False: a row with more fields than the header is never taken as an index
            df = pd.read_csv(path, dtype=dtype, keep_default_na=False, na_values=[""], index_col=False,
                             encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty; a table needs a header row") from None
    except pd.errors.ParserError as exc:
        detail = _parser_detail(exc)
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", detail)
        if m:
            raise DataError(f"{path}, line {m.group(2)}: {m.group(3)} fields but the header has {m.group(1)}; "
                            "remove the extra fields or quote values that contain commas") from None
        raise DataError(f"{path}: not a readable CSV ({detail}); check the file and its format") from None
    except OSError as exc:
        raise _open_error(path, exc) from None
    if any("Length of header" in str(w.message) for w in caught):
        raise DataError(f"{path}: the data rows have more fields than the header ({len(names)} columns); "
                        "remove the extra fields or name them in the header")
    return df if columns is None else df[columns]


def _read_parquet(path: Path, columns: list[str] | None) -> pd.DataFrame:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError("pyarrow", "parquet") from None
    try:
        names = list(pq.read_schema(path).names)
    except OSError as exc:
        raise _open_error(path, exc) from None
    except Exception as exc:  # pyarrow's own errors (not a Parquet file, truncated file)
        raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__}); check the file and its "
                        "format") from None
    if columns is not None:
        missing = [c for c in columns if c not in names]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r} (its columns: {', '.join(names[:12])}); "
                            "fix the column name")
    try:
        return pd.read_parquet(path, columns=columns)
    except Exception as exc:
        raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__}); check the file") from None


def read_table(paths: str | Path | Sequence[str | Path], fmt: str | None = None, *,
               columns: Sequence[str] | None = None, label_columns: Sequence[str] = ()) -> pd.DataFrame:
    """Read and concatenate the CSV/Parquet files ``paths`` under the rules of this module.

    Parameters
    ----------
    paths : a file, a glob, or a list of them (all of one format, with the same columns).
    fmt : ``"csv"`` or ``"parquet"``; by default from each file's extension.
    columns : only these columns (in this order); a missing one is a DataError.
    label_columns : read as strings (pandas ``string`` dtype), keeping ``"01"`` and ``"NA"``.
    """
    files = expand_paths(paths)
    cols = list(columns) if columns is not None else None
    frames = []
    first_cols: list[str] | None = None
    for f in files:
        kind = fmt or format_of(f)
        if kind not in ("csv", "parquet"):
            raise DataError(f"unknown table format {kind!r}; expected 'csv' or 'parquet'")
        df = _read_parquet(f, cols) if kind == "parquet" else _read_csv(f, cols, label_columns)
        if first_cols is None:
            first_cols = list(df.columns)
        elif set(df.columns) != set(first_cols):
            raise DataError(f"{f.name!r} has other columns than {files[0].name!r}; all files need the same columns")
        for c in label_columns:
            if c in df.columns and not isinstance(df[c].dtype, pd.StringDtype):
                df[c] = df[c].astype("string")
        frames.append(df)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def read_text_lines(path: str | Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped (one label a line)."""
    p = Path(path)
    try:
        raw = _raw_bytes(p)
    except OSError as exc:
        raise _open_error(p, exc) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _decode_error(p, exc) from None
    return [s for s in (ln.strip() for ln in text.splitlines()) if s]
