"""Reading sources and writing releases, atomically.

Every file hierdp writes goes to a temporary file in the destination folder first and is
moved into place with :func:`os.replace` (atomic on POSIX and Windows within one file
system), so an interrupted release never leaves a partial output: the destination either
keeps its previous content or gets the complete new one.

A release's table and ledger are one unit. Both are staged and synced, the previous files
are kept as hard-linked backups, a commit journal naming them is written (one per folder,
naming that folder's files), and only then are the ledger and the table moved into place;
the journals and backups go last. A failure rolls both back; a hard kill between the two
moves (a window of microseconds) leaves the journals, and the next write to that path (or
:func:`recover`) restores the previous pair. Recovery follows only journals hierdp wrote,
naming files of their own folder (``docs/security.md``). The ledger's ``release_id`` is
repeated inside the table file (Parquet key-value metadata ``hierdp.ledger`` and
``hierdp.release_id``; JSON's ``ledger`` key), so a pair can be checked
(:func:`table_release_id`).

Temporary names start with ``.hierdp-`` and carry the writing process's id; a write
removes those left by processes that no longer run. Concurrent writers to one path never
collide (every temporary name is unique); the last to finish wins, as a pair.

Destinations with a scheme (``s3://bucket/x.csv``, ``gs://...``) are written through
``fsspec`` (``pip install 'hierdp[remote]'`` plus the file system's own package, e.g.
``s3fs``), ledger first, one object at a time.
"""

from __future__ import annotations

import contextlib
import functools
import io as _io
import json
import os
import re
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from hierdp.errors import DataError, MissingDependencyError, UntrustedJournalWarning, expected_one_of, warn

if TYPE_CHECKING:  # numpy and pandas load when a table is written: `hierdp --version` stays fast
    import pandas as pd

__all__ = ["atomic_path", "atomic_write", "atomic_write_all", "write_table", "write_text", "write_release",
           "write_release_to_stream", "read_table", "ledger_path_for", "format_for", "format_of_path", "is_url",
           "recover", "table_release_id", "require_format", "TableFormat", "TABLE_FORMATS", "FORMATS",
           "LEDGER_METADATA_KEY", "neutralise_formulas"]

LEDGER_METADATA_KEY = "hierdp.ledger"
RELEASE_ID_METADATA_KEY = "hierdp.release_id"
_PREFIX = ".hierdp-"  # every temporary, backup and journal file hierdp writes starts with this
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_STALE_AFTER = 24 * 3600.0  # seconds: leftovers of another host's process (pid unknown here)
_JOURNAL_VERSION = 2  # 2: bare file names, one journal per folder; 1: paths (followed only inside the folder)
_JOURNAL_NAME = re.compile(re.escape(_PREFIX) + r".+\.(\d+)\.[0-9a-f]{12}\.journal")
_JOURNAL_MAX = 1 << 20  # bytes: a journal names a handful of files

#: ``make_writer(frame, gzip, ledger_json)``: a function writing ``frame`` to a path or a binary file object
WriterFactory = Callable[["pd.DataFrame", bool, "str | None"], Callable[[Any], None]]


class TableFormat(NamedTuple):
    """One output format of release tables: an entry of :data:`TABLE_FORMATS`.

    The command line (``--format``, its help), specs (``output.format``; the schema's enum
    is tested against this table) and :mod:`hierdp.io` all read the table, so a new format
    (Zarr, netCDF, ...) is one entry.

    Attributes
    ----------
    name : str
        The format's name (``--format NAME``, ``output.format: NAME``).
    title : str
        How prose writes it (``"Parquet"``).
    extensions : tuple of str
        Lower-case file name endings that select it; the first is the one suggested.
    make_writer : callable
        ``make_writer(frame, gzip, ledger_json)`` returns a function that writes ``frame``
        to a path or a binary file object (``gzip``: the destination's name ends in
        ``.gz``; ``ledger_json``: the ledger, written inside when ``ledger_inside``).
    ledger_inside : bool
        Whether the table file carries its ledger (then ``-o -`` needs no ledger file).
    ledger_where : str or None
        Where inside the file the ledger goes, for help texts.
    read_release_id : callable or None
        ``read_release_id(path)``: the ``release_id`` written inside a file of this format.
    requires : tuple of (str, str) or None
        ``(package, extra)``: an optional package the writer needs, and the extra installing it.
    seekable : bool
        The writer needs a seekable target: a stream gets the file built in memory first.
    """

    name: str
    title: str
    extensions: tuple[str, ...]
    make_writer: WriterFactory
    ledger_inside: bool
    ledger_where: str | None = None
    read_release_id: Callable[[Path], str | None] | None = None
    requires: tuple[str, str] | None = None
    seekable: bool = False


def is_url(path: str | Path) -> bool:
    """True for ``scheme://...`` destinations (written through fsspec), False for local paths."""
    return isinstance(path, str) and bool(_URL.match(path))


def format_of_path(path: str | Path) -> str | None:
    """The name of the format whose extension ``path`` ends in (the longest match), or ``None``."""
    name = str(path).lower()
    best: tuple[int, str] | None = None
    for f in TABLE_FORMATS.values():
        for ext in f.extensions:
            if name.endswith(ext) and (best is None or len(ext) > best[0]):
                best = (len(ext), f.name)
    return None if best is None else best[1]


def format_for(path: str | Path, fmt: str | None = None) -> str:
    """The table format of ``path``: ``fmt`` if given, else from the extension.

    Parameters
    ----------
    path : str or Path
        The destination (only its name is read).
    fmt : str, optional
        A format name of :data:`TABLE_FORMATS`.

    Returns
    -------
    str
        The format's name.

    Raises
    ------
    DataError
        ``fmt`` is not a known format, or ``path``'s extension names none.
    """
    if fmt is not None:
        if fmt not in TABLE_FORMATS:
            raise DataError(expected_one_of("table format", fmt, TABLE_FORMATS))
        return fmt
    found = format_of_path(path)
    if found is None:
        endings = " or ".join(f.extensions[0] for f in TABLE_FORMATS.values())
        raise DataError(f"cannot tell the format of {str(path)!r}; end it in {endings}, or pass the format")
    return found


def require_format(fmt: str) -> TableFormat:
    """The :class:`TableFormat` named ``fmt``, once its optional package is known to be installed.

    Raises
    ------
    DataError
        ``fmt`` is not a known format.
    MissingDependencyError
        The format's writer needs a package that is not installed (the message names the extra).
    """
    entry = TABLE_FORMATS.get(fmt)
    if entry is None:
        raise DataError(expected_one_of("table format", fmt, TABLE_FORMATS))
    if entry.requires is not None:
        import importlib.util

        if importlib.util.find_spec(entry.requires[0]) is None:
            raise MissingDependencyError(*entry.requires)
    return entry


def _ledger_name(name: str) -> str:
    exts = sorted((e for f in TABLE_FORMATS.values() for e in f.extensions), key=len, reverse=True)
    for ext in exts:
        if name.lower().endswith(ext):
            return name[: -len(ext)] + ".ledger.json"
    return name + ".ledger.json"


def ledger_path_for(path: str | Path) -> Path:
    """Where the ledger of output ``path`` goes: ``<name without extension>.ledger.json`` beside it.

    (For a URL use :func:`ledger_url_for`: a :class:`~pathlib.Path` would mangle ``s3://``.)"""
    p = Path(path)
    return p.with_name(_ledger_name(p.name))


def ledger_url_for(url: str) -> str:
    """The ledger URL beside the table URL ``url``."""
    head, _, name = url.rpartition("/")
    return f"{head}/{_ledger_name(name)}"


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed."""
    dest = Path(path)
    with _staged(dest) as tmp_path:
        yield tmp_path
        _named(dest, _fsync, tmp_path)  # flush to disk before the rename makes it visible
        os.replace(tmp_path, dest)


def atomic_write(path: str | Path, writer: Callable[[Path], Any]) -> Path:
    """Call ``writer(tmp_path)`` and move the result to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _writer(frame: pd.DataFrame, fmt: str, gzip: bool = False,
            ledger_json: str | None = None) -> Callable[[Any], None]:
    """A function writing ``frame`` in ``fmt`` to a path or binary file object; with
    ``ledger_json``, formats whose ``ledger_inside`` is set carry the ledger inside."""
    return require_format(fmt).make_writer(frame, gzip, ledger_json)


def _parquet_writer(frame: pd.DataFrame, gzip: bool, ledger_json: str | None) -> Callable[[Any], None]:
    """Parquet through pyarrow; the ledger and its release id go in the schema's key-value metadata."""

    def write(tmp: Any) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        if ledger_json is not None:
            meta = dict(table.schema.metadata or {})
            meta[LEDGER_METADATA_KEY.encode()] = ledger_json.encode("utf-8")
            meta[RELEASE_ID_METADATA_KEY.encode()] = str(json.loads(ledger_json).get("release_id", "")).encode()
            table = table.replace_schema_metadata(meta)
        pq.write_table(table, tmp)

    return write


def _parquet_release_id(path: Path) -> str | None:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    rid = meta.get(RELEASE_ID_METADATA_KEY.encode())
    return rid.decode() if rid else None


def _json_writer(frame: pd.DataFrame, gzip: bool, ledger_json: str | None) -> Callable[[Any], None]:
    """One JSON document: ``{"ledger": {...}, "table": [rows]}``."""

    def write(tmp: Any) -> None:
        rows = json.loads(frame.to_json(orient="records", force_ascii=False))
        doc: dict[str, Any] = {}
        if ledger_json is not None:
            doc["ledger"] = json.loads(ledger_json)
        doc["table"] = rows
        data = json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8") + b"\n"
        if isinstance(tmp, (str, Path)):
            Path(tmp).write_bytes(data)
        else:
            tmp.write(data)

    return write


def _json_release_id(path: Path) -> str | None:
    rid = json.loads(Path(path).read_text(encoding="utf-8")).get("ledger", {}).get("release_id")
    return None if rid is None else str(rid)


#: a text cell starting with one of these is read as a formula by spreadsheets (OWASP "CSV injection")
_FORMULA_START = frozenset("=+-@\t\r")
#: ... unless it is a plain number (``-1``, ``+3.5``, ``-2e3``), which a spreadsheet reads as that number
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _neutral_cell(value: Any) -> Any:
    """``value`` with a single quote in front when it is text a spreadsheet would run as a formula."""
    if isinstance(value, str) and value[:1] in _FORMULA_START and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def neutralise_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell (and column name) that a spreadsheet would read as a
    formula prefixed by a single quote (``'=HYPERLINK(...)``), as OWASP advises against
    CSV injection: text starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return,
    unless it is a plain number (a label ``-1`` or ``+3.5`` stays as it is). Numeric columns
    are never changed. Every CSV table hierdp writes goes through this function; Parquet and
    JSON keep the labels as they are (read those for the raw labels).

    Parameters
    ----------
    frame : pandas.DataFrame
        A table about to be written as CSV.

    Returns
    -------
    pandas.DataFrame
        ``frame`` itself when no cell needs the quote, else a copy with those cells quoted.
    """
    import pandas as pd

    changed: dict[Any, pd.Series] = {}
    for i, (_, col) in enumerate(frame.items()):
        dt = col.dtype
        if isinstance(dt, pd.CategoricalDtype):  # the categories only: O(labels), not O(rows)
            cats = dt.categories
            if not (pd.api.types.is_object_dtype(cats.dtype) or pd.api.types.is_string_dtype(cats.dtype)):
                continue
            old = list(cats)
            new = [_neutral_cell(v) for v in old]
            if new != old:
                if len(set(new)) == len(new):
                    changed[i] = col.cat.rename_categories(new)
                else:  # '=x' and "'=x" both present: two labels that would print the same stay two cells
                    changed[i] = col.astype(object).map(_neutral_cell).astype(object)
        elif pd.api.types.is_object_dtype(dt) or pd.api.types.is_string_dtype(dt):
            uniq = pd.unique(col.dropna().to_numpy())
            swap = {v: q for v in uniq if (q := _neutral_cell(v)) is not v}
            if swap:
                changed[i] = col.replace(swap)  # exact values (regex=False), O(rows) in pandas' own code
    names = [_neutral_cell(c) for c in frame.columns]
    renamed = names != list(frame.columns)
    if not changed and not renamed:
        return frame
    out = frame.copy(deep=False)
    for i, col in changed.items():
        out.isetitem(i, cast(Any, col))  # a Series keeps its dtype (pandas-stubs lists arrays only)
    if renamed:
        out.columns = names
    return out


def _csv_writer(frame: pd.DataFrame, gzip: bool, ledger_json: str | None) -> Callable[[Any], None]:
    """CSV (gzip-compressed for a ``.gz`` path); a CSV cannot carry its ledger. Text that a
    spreadsheet would run as a formula is quoted first (:func:`neutralise_formulas`)."""
    frame = neutralise_formulas(frame)

    def write(tmp: Any) -> None:
        if _write_csv_arrow(frame, tmp, gzip):
            return
        if isinstance(tmp, (str, Path)):
            frame.to_csv(tmp, index=False, compression="gzip" if gzip else None)
        else:
            tmp.write(frame.to_csv(index=False).encode("utf-8"))

    return write


#: a CSV field holding one of these needs quotes (pandas quotes it; the fast path leaves such frames to pandas)
_STRUCTURAL = r'[",\r\n]'


def _arrow_csv_columns(frame: pd.DataFrame) -> list[Any] | None:
    """The columns of ``frame`` as pyarrow arrays whose CSV text is the text ``to_csv`` writes
    (strings unquoted, missing values empty, float64 in Python's shortest repr with ``.0`` on
    whole numbers), or ``None`` when a column cannot be written so (then pandas writes)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    def plain_text(arr: Any) -> bool:  # no value needs quoting
        return len(arr) == 0 or not pc.any(pc.match_substring_regex(arr, _STRUCTURAL)).as_py()

    def floats(values: Any) -> Any:
        text = pc.cast(pa.array(values, from_pandas=True), pa.large_string())
        whole = pc.match_substring_regex(text, r"^-?[0-9]+$")  # pyarrow writes 12.0 as 12, pandas as 12.0
        suffix, sep = pa.scalar(".0", pa.large_string()), pa.scalar("", pa.large_string())
        return pc.if_else(whole, pc.binary_join_element_wise(text, suffix, sep), text)

    if frame.shape[1] < 2:  # a lone missing value must be written "" (an empty line would be skipped)
        return None
    out = []
    for _, col in frame.items():
        dt = col.dtype
        if isinstance(dt, pd.CategoricalDtype):
            cats = dt.categories
            if pd.api.types.is_float_dtype(cats.dtype):
                values = floats(cats.to_numpy())
            elif pd.api.types.is_integer_dtype(cats.dtype):
                values = pa.array(cats.to_numpy())
            elif pd.api.types.is_string_dtype(cats.dtype) and pd.api.types.infer_dtype(cats, skipna=False) == "string":
                values = pa.array(cats.to_numpy(dtype=object), type=pa.large_string())
                if not plain_text(values):
                    return None
            else:
                return None
            codes = col.cat.codes.to_numpy()
            out.append(pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), values))
        elif dt == "float64":
            out.append(floats(col.to_numpy()))
        elif pd.api.types.is_integer_dtype(dt) and not pd.api.types.is_bool_dtype(dt):
            out.append(pa.array(col, from_pandas=True))
        elif pd.api.types.is_string_dtype(dt) and pd.api.types.infer_dtype(col, skipna=True) in ("string", "empty"):
            arr = pa.array(np.asarray(col.astype(object).where(col.notna(), None)), type=pa.large_string())
            if not plain_text(arr):
                return None
            out.append(arr)
        else:  # bools, datetimes, mixed objects: pandas' own text
            return None
    return out


def _write_csv_arrow(frame: pd.DataFrame, dest: Any, gzip: bool) -> bool:
    """Write ``frame`` as CSV with pyarrow's writer (tens of times faster than ``to_csv`` on
    millions of rows), the same text ``to_csv(index=False)`` writes for a release table
    except floats below 1e-4 or at least 1e16 in magnitude, which may be written in the
    other of the two notations (the same number: each reads back bit for bit). ``False``
    when pyarrow is absent or a column needs pandas (quoted labels, bools, other types)."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        return False
    cols = _arrow_csv_columns(frame)
    if cols is None:
        return False
    table = pa.Table.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])
    options = pacsv.WriteOptions(include_header=False, quoting_style="none")
    # pandas writes its own header line (the empty frame), pyarrow appends the rows
    if isinstance(dest, (str, Path)):
        frame.iloc[:0].to_csv(dest, index=False, compression="gzip" if gzip else None)
        with pa.OSFile(str(dest), "ab") as raw:  # a gzip file takes a second gzip member
            with (pa.CompressedOutputStream(raw, "gzip") if gzip else raw) as sink:
                pacsv.write_csv(table, sink, options)
    else:
        dest.write(frame.iloc[:0].to_csv(None, index=False).encode("utf-8"))
        pacsv.write_csv(table, dest, options)
    return True


def table_release_id(path: str | Path) -> str | None:
    """The ``release_id`` written inside a release table whose format carries it (Parquet,
    JSON); ``None`` for formats that cannot (CSV)."""
    reader = TABLE_FORMATS[format_for(path)].read_release_id
    return None if reader is None else reader(Path(path))


def write_table(frame: pd.DataFrame, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``frame`` in a format of :data:`TABLE_FORMATS` (from the extension unless given), atomically."""
    fmt = format_for(path, fmt)
    dest = Path(path)
    # compression follows the destination's name, not the temporary file's
    return atomic_write(dest, _writer(frame, fmt, gzip=dest.name.lower().endswith(".gz")))


def write_release(frame: pd.DataFrame, ledger_json: str, path: str | Path, fmt: str | None = None,
                  ledger_path: str | Path | None = None) -> tuple[Any, Any]:
    """Write a release table and its ledger JSON as one unit: the ledger lands first, the
    table last, and a failure or kill leaves the previous pair (see the module docstring).
    Formats with ``ledger_inside`` (Parquet, JSON) also carry it inside. ``path`` may be a URL
    (``s3://...``, through fsspec); returns the two destinations."""
    if is_url(path) or is_url(ledger_path or ""):
        return _write_release_remote(frame, ledger_json, str(path), fmt, ledger_path)
    dest = Path(path)
    lpath = Path(ledger_path) if ledger_path is not None else ledger_path_for(dest)
    if dest.resolve() == lpath.resolve():
        raise DataError(f"the ledger would overwrite the table {str(dest)!r}; give the ledger its own file "
                        f"(default: {ledger_path_for(dest).name})")
    fmt = format_for(dest, fmt)
    atomic_write_all([(lpath, lambda tmp: tmp.write_text(ledger_json, encoding="utf-8")),
                      (dest, _writer(frame, fmt, gzip=dest.name.lower().endswith(".gz"), ledger_json=ledger_json))])
    return dest, lpath


def write_release_to_stream(frame: pd.DataFrame, ledger_json: str, stream: Any, fmt: str) -> None:
    """Write a release table to a binary ``stream`` (e.g. ``sys.stdout.buffer``); Parquet and
    JSON carry the ledger inside, CSV does not (write the ledger to a file of its own)."""
    entry = require_format(format_for("-", fmt))
    write = entry.make_writer(frame, False, ledger_json)
    if entry.seekable:  # e.g. pyarrow needs a seekable target for Parquet's footer: build it in memory
        buf = _io.BytesIO()
        write(buf)
        stream.write(buf.getvalue())
    else:
        write(stream)
    stream.flush()


def _fsspec():
    try:
        import fsspec
    except ImportError:
        raise MissingDependencyError("fsspec", "remote") from None
    return fsspec


def check_url(url: str) -> None:
    """Raise a one-line error now when ``url`` cannot be written (fsspec or the protocol's
    package missing), before a release spends its budget."""
    fsspec = _fsspec()
    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        raise DataError(f"cannot write {url!r}: {str(exc).splitlines()[0]}") from None
    except ValueError:
        raise DataError(f"cannot write {url!r}: unknown protocol {protocol!r}; use a local path or "
                        "a URL fsspec knows (s3://, gs://, az://, ...)") from None


def _write_release_remote(frame: pd.DataFrame, ledger_json: str, url: str, fmt: str | None,
                          ledger_path: str | Path | None) -> tuple[str, str]:
    if not is_url(url):
        raise DataError(f"the table {url!r} is local but its ledger {str(ledger_path)!r} is a URL; "
                        "write both to the same kind of place")
    check_url(url)
    fsspec = _fsspec()
    lurl = str(ledger_path) if ledger_path is not None else ledger_url_for(url)
    if lurl == url:
        raise DataError(f"the ledger would overwrite the table {url!r}; give the ledger its own name")
    fmt = format_for(url, fmt)
    write = _writer(frame, fmt, ledger_json=ledger_json)  # a missing optional package fails before any PUT
    # object stores make each PUT atomic; ledger first, so a table never lacks its ledger
    with fsspec.open(lurl, "wb") as fh:
        fh.write(ledger_json.encode("utf-8"))
    data = _io.BytesIO()
    write(data)
    body = data.getvalue()
    if url.lower().endswith(".gz") and fmt == "csv":  # the CSV writer compresses paths only
        import gzip as _gzip

        body = _gzip.compress(body)
    with fsspec.open(url, "wb") as fh:
        fh.write(body)
    return url, lurl


#: Every output format of release tables, by name (order: how help texts list them).
TABLE_FORMATS: dict[str, TableFormat] = {f.name: f for f in (
    TableFormat("csv", "CSV", (".csv", ".csv.gz"), _csv_writer, ledger_inside=False),
    TableFormat("parquet", "Parquet", (".parquet", ".pq"), _parquet_writer, ledger_inside=True,
                ledger_where=f"Parquet metadata {LEDGER_METADATA_KEY!r}", read_release_id=_parquet_release_id,
                requires=("pyarrow", "parquet"), seekable=True),
    TableFormat("json", "JSON", (".json",), _json_writer, ledger_inside=True, ledger_where="JSON key 'ledger'",
                read_release_id=_json_release_id),
)}
#: the format names (kept for callers of the former tuple)
FORMATS = tuple(TABLE_FORMATS)


def atomic_write_all(items: Sequence[tuple[str | Path, Callable[[Path], Any]]]) -> list[Path]:
    """Write several files as one: every ``writer(tmp)`` runs (and is synced) before any
    destination is touched, then the files are moved into place in order. If a move fails,
    the files already moved are rolled back (their previous content restored, or removed),
    so a failure leaves every destination as it was. A hard kill between two moves leaves
    a commit journal; the next write to these paths (or :func:`recover`) rolls it back."""
    dests = [Path(p) for p, _ in items]
    if len({d.resolve() for d in dests}) != len(dests):
        raise DataError("two outputs share one path: " + ", ".join(str(d) for d in dests))
    for d in dests:
        if d.is_dir():
            raise DataError(f"cannot write {str(d)!r}: it is a directory; give a file name such as out/release.csv")
    for folder in {d.parent for d in dests}:
        if folder.is_dir():
            recover(folder)
    with contextlib.ExitStack() as stack:
        staged = []
        for d, (_, writer) in zip(dests, items):
            tmp = stack.enter_context(_staged(d))
            _named(d, writer, tmp)
            _named(d, _fsync, tmp)
            staged.append(tmp)
        # one commit at a time per folder (threads and processes): two writers' moves must not
        # interleave, or the last ledger and the last table could come from different releases
        stack.enter_context(_commit_lock({d.parent for d in dests}))
        backups: list[Path | None] = []
        for d in dests:
            backup = _named(d, _link_backup, d)  # the previous file stays in place until replaced
            if backup is not None:
                stack.callback(backup.unlink, missing_ok=True)
            backups.append(backup)
        journals: list[Path] = []
        if len(dests) > 1:  # one journal per folder, naming only that folder's files (see recover)
            for folder in dict.fromkeys(d.parent for d in dests):
                here = [(d, b, t) for d, b, t in zip(dests, backups, staged) if d.parent == folder]
                journal = _unique(here[-1][0], ".journal")
                record = {"version": _JOURNAL_VERSION, "pid": os.getpid(),
                          "files": [{"name": d.name, "backup": b.name if b else None, "inode": t.stat().st_ino}
                                    for d, b, t in here]}
                _named(here[-1][0], functools.partial(_write_journal, text=json.dumps(record)), journal)
                stack.callback(journal.unlink, missing_ok=True)
                journals.append(journal)
        done: list[tuple[Path, Path | None]] = []
        try:
            for d, tmp, backup in zip(dests, staged, backups):
                os.replace(tmp, d)
                done.append((d, backup))
            _fsync_dirs({d.parent for d in dests})  # the moves are durable before the journal goes
        except BaseException:
            for d, backup in reversed(done):
                if backup is not None:
                    os.replace(backup, d)
                else:
                    d.unlink(missing_ok=True)
            raise
        for journal in journals:  # committed: from here on a kill leaves the new files
            journal.unlink(missing_ok=True)
    return dests


_COMMIT_THREADS = threading.Lock()


@contextlib.contextmanager
def _commit_lock(folders: set[Path]) -> Iterator[None]:
    """Exclusive commit section: a process-wide lock for threads, and ``flock`` on each
    destination folder for other processes (POSIX; no lock file is left behind)."""
    with _COMMIT_THREADS, contextlib.ExitStack() as stack:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: threads only
            fcntl = None  # type: ignore[assignment]
        if fcntl is not None:
            for folder in sorted(folders):
                try:
                    fd = os.open(folder, os.O_RDONLY)
                except OSError:
                    continue  # the moves below report an unusable folder
                stack.callback(os.close, fd)
                fcntl.flock(fd, fcntl.LOCK_EX)
                stack.callback(fcntl.flock, fd, fcntl.LOCK_UN)
        yield


def _link_backup(dest: Path) -> Path | None:
    """Hard-link the current ``dest`` to a fresh backup name; None when there is no ``dest``.

    Linux's link(2) fails with ENOENT when another writer renames over ``dest`` at that
    instant (the old inode has no name left): then the new file is linked instead."""
    for _ in range(100):
        if not dest.exists():
            return None
        backup = _unique(dest, ".bak")
        try:
            os.link(dest, backup)
            return backup
        except FileNotFoundError:
            continue
    raise OSError(f"{dest} keeps being replaced by other writers; try again")


def _named(dest: Path, fn: Callable[[Path], Any], arg: Path) -> Any:
    """Run ``fn(arg)``; an OSError without a file name (disk full, quota) names ``dest``."""
    try:
        return fn(arg)
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc) or type(exc).__name__, str(dest)) from exc
        raise


def _fsync(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def _fsync_dirs(folders: set[Path]) -> None:
    for folder in folders:
        try:
            fd = os.open(folder, os.O_RDONLY)
        except OSError:  # pragma: no cover - platforms without directory handles
            continue
        try:
            os.fsync(fd)
        except OSError:  # pragma: no cover
            pass
        finally:
            os.close(fd)


def _unique(dest: Path, suffix: str) -> Path:
    """A fresh hidden name beside ``dest`` for a backup or journal (never an existing file)."""
    return dest.with_name(f"{_PREFIX}{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}{suffix}")


def _owner_gone(name: str, mtime: float) -> bool:
    """Whether the process that made hierdp temporary ``name`` has ended (or it is very old)."""
    m = re.search(r"\.(\d+)\.[0-9a-z_]+\.(?:tmp|bak|journal)$", name)
    if time.time() - mtime > _STALE_AFTER:
        return True
    if m is None:
        return False
    pid = int(m.group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return False


def _write_journal(path: Path, text: str) -> None:
    """Create the commit journal ``path`` (never an existing name, never through a symlink),
    readable and writable by this user only, and sync it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fd)
    finally:
        os.close(fd)


class _Untrusted(Exception):
    """A journal that hierdp did not write (or cannot vouch for); the message says why."""


def _ours(st: os.stat_result) -> bool:
    """A regular file (not a symlink: ``st`` comes from ``lstat``) owned by this user."""
    return stat.S_ISREG(st.st_mode) and (not hasattr(os, "geteuid") or st.st_uid == os.geteuid())


def _entry_name(folder: Path, folder_id: tuple[int, int], recorded: Any, what: str) -> str:
    """The bare name of a file a journal names, which must sit in the journal's own folder.

    Journals of this version record bare names; older ones recorded paths, accepted only
    when their folder is the journal's folder (the same directory, not just the same text)."""
    if not isinstance(recorded, str) or not recorded or "\x00" in recorded:
        raise _Untrusted(f"its {what} is not a file name")
    p = Path(recorded)
    name = p.name
    if name in ("", ".", ".."):
        raise _Untrusted(f"its {what} {recorded!r} is not a file name")
    if str(p.parent) not in ("", "."):
        try:
            st = os.stat(p.parent)
        except OSError:
            raise _Untrusted(f"its {what} {recorded!r} is outside this folder") from None
        if (st.st_dev, st.st_ino) != folder_id:
            raise _Untrusted(f"its {what} {recorded!r} is outside this folder")
    return name


def _journal_plan(folder: Path, journal: Path, jst: os.stat_result, folder_id: tuple[int, int],
                  pid: int) -> list[tuple[str, str | None, int]]:
    """The ``(destination, backup, inode)`` names a journal names, after checking that hierdp
    wrote it: a regular file owned by this user, writable by nobody else, with one link; a
    JSON record of this writer's pid; every file in the journal's folder; every backup named
    as hierdp names the backups of that destination for that pid. Raises :class:`_Untrusted`."""
    if not _ours(jst):
        raise _Untrusted("it is not a regular file owned by this user")
    if hasattr(os, "geteuid") and jst.st_mode & (stat.S_IWGRP | stat.S_IWOTH):  # POSIX modes (not Windows')
        raise _Untrusted("others may write to it")
    if jst.st_nlink != 1:
        raise _Untrusted("it has other names (hard links)")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(journal, flags)
    try:
        if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) != (jst.st_dev, jst.st_ino):
            raise _Untrusted("it changed while it was read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(_JOURNAL_MAX + 1)
    finally:
        os.close(fd)
    if len(raw) > _JOURNAL_MAX:
        raise _Untrusted("it is too large to be a hierdp journal")
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _Untrusted("it is not a journal record") from None
    if not isinstance(record, dict) or record.get("pid") != pid or not isinstance(record.get("files"), list):
        raise _Untrusted("its record does not match its name")
    plan: list[tuple[str, str | None, int]] = []
    for f in record["files"]:
        if not isinstance(f, dict):
            raise _Untrusted("its record is malformed")
        dest = _entry_name(folder, folder_id, f.get("name", f.get("dest")), "destination")
        if dest.startswith(_PREFIX):
            raise _Untrusted(f"its destination {dest!r} is a hierdp temporary name")
        backup = f.get("backup")
        if backup is not None:
            backup = _entry_name(folder, folder_id, backup, "backup")
            if not re.fullmatch(re.escape(f"{_PREFIX}{dest}.{pid}.") + r"[0-9a-f]{12}\.bak", backup):
                raise _Untrusted(f"its backup {backup!r} is not a hierdp backup of {dest!r}")
        inode = f.get("inode")
        if isinstance(inode, bool) or not isinstance(inode, int):
            raise _Untrusted("its record is malformed")
        plan.append((dest, backup, inode))
    return plan


def _roll_back(folder: Path, dev: int, plan: list[tuple[str, str | None, int]]) -> list[Path]:
    """Undo one interrupted commit: a destination still holding the file the killed writer
    moved in (same inode and device, ours, one link) gets its backup back (a regular file
    of ours, on that device, with one link), or is removed when it had no previous file.
    Nothing here follows a symlink; anything else is left as it is."""
    restored: list[Path] = []
    for dest, backup, inode in plan:
        d = folder / dest
        try:
            dst = os.lstat(d)
            moved_in = _ours(dst) and (dst.st_ino, dst.st_dev) == (inode, dev) and dst.st_nlink == 1
        except OSError:
            moved_in = False
        b = folder / backup if backup else None
        try:
            bst = os.lstat(b) if b is not None else None
        except OSError:
            bst = None
        backup_ok = bst is not None and _ours(bst) and bst.st_dev == dev and bst.st_nlink in (1, 2)
        if moved_in and b is not None and backup_ok and bst is not None and bst.st_nlink == 1:
            os.replace(b, d)
            restored.append(d)
        elif moved_in and backup is None:
            d.unlink(missing_ok=True)
            restored.append(d)
        if b is not None and backup_ok and b.exists():
            b.unlink(missing_ok=True)
    return restored


def recover(folder: str | Path) -> list[Path]:
    """Finish what killed hierdp writers left in ``folder``: roll back every interrupted
    commit (its journal names the backups of the previous files) and remove their
    temporaries and backups. Files of writers still running are left alone. Returns the
    destinations restored to their previous content.

    Only journals hierdp wrote are followed (see ``docs/security.md``): a regular file,
    owned by this user, writable by nobody else, whose record names files of ``folder``
    only, each backup named as hierdp names it. Anything else named like a journal is
    reported with a :class:`~hierdp.errors.UntrustedJournalWarning` naming it, and left
    alone; so are temporaries not owned by this user. No symlink is followed."""
    folder = Path(folder)
    restored: list[Path] = []
    try:
        entries = [p for p in folder.iterdir() if p.name.startswith(_PREFIX)]
        fst = os.stat(folder)
    except OSError:
        return restored
    folder_id = (fst.st_dev, fst.st_ino)
    for j in (p for p in entries if p.name.endswith(".journal")):
        try:
            jst = os.lstat(j)
        except OSError:
            continue
        m = _JOURNAL_NAME.fullmatch(j.name)
        try:
            if m is None:
                raise _Untrusted("its name is not one hierdp gives a journal")
            if not _owner_gone(j.name, jst.st_mtime):
                continue
            plan = _journal_plan(folder, j, jst, folder_id, int(m.group(1)))
        except _Untrusted as why:
            warn(f"left alone {str(j)!r}: it is named like a hierdp commit journal but hierdp did not "
                 f"write it ({why}); a journal is followed only when hierdp wrote it. Remove the file "
                 "once you know where it came from", UntrustedJournalWarning)
            continue
        except OSError:
            continue
        restored.extend(_roll_back(folder, jst.st_dev, plan))
        j.unlink(missing_ok=True)
    for p in entries:
        if p.name.endswith((".tmp", ".bak")):
            try:
                st = os.lstat(p)
                if _ours(st) and _owner_gone(p.name, st.st_mtime):
                    p.unlink(missing_ok=True)
            except OSError:
                pass
    return restored


def _new_file_mode(path: Path) -> int:
    """Permissions for a file written to ``path``: those of the file it replaces, else what
    ``open()`` would give a new file (0o666 less the umask), not mkstemp's private 0o600."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        pass
    try:  # Linux: read the umask without changing it
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def _staged(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` (with the permissions ``path`` will have), removed
    on exit unless it was moved into place."""
    if path.is_dir():
        raise DataError(f"cannot write {str(path)!r}: it is a directory; give a file name")
    _named(path, lambda p: p.mkdir(parents=True, exist_ok=True), path.parent)
    fd, tmp = _named(path, lambda p: tempfile.mkstemp(prefix=f"{_PREFIX}{path.name}.{os.getpid()}.", suffix=".tmp",
                                                      dir=p), path.parent)
    try:
        os.chmod(tmp, _new_file_mode(path))
    finally:
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
    finally:
        tmp_path.unlink(missing_ok=True)


def read_table(files: Sequence[str | Path], fmt: str, columns: Sequence[str] | None = None,
               string_columns: Sequence[str] = ()) -> pd.DataFrame:
    """Read and concatenate CSV/Parquet ``files`` (only ``columns`` when given) with the
    rules of :mod:`hierdp.io.readers` (empty cells are the only missing values; ``string_columns``
    are read as strings, so labels such as ``"01"`` or ``"NA"`` stay labels)."""
    from hierdp.io.readers import read_table as _read

    return _read(files, fmt, columns=columns, label_columns=string_columns)
