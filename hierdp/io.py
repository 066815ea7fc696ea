"""Reading sources and writing releases, atomically.

Every file hierdp writes goes to a temporary file in the destination folder first and is
moved into place with :func:`os.replace` (atomic on POSIX and Windows within one file
system), so an interrupted release never leaves a partial output: the destination either
keeps its previous content or gets the complete new one. A release writes its ledger
first and the table last, so a table on disk always has its ledger beside it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from hierdp.errors import DataError, MissingDependencyError

__all__ = ["atomic_path", "atomic_write", "atomic_write_all", "write_table", "write_text", "write_release",
           "read_table",
           "ledger_path_for", "format_for"]

FORMATS = ("csv", "parquet")


def format_for(path: str | Path, fmt: str | None = None) -> str:
    """The table format of ``path``: ``fmt`` if given, else from the extension."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise DataError(f"unknown table format {fmt!r}; expected 'csv' or 'parquet'")
        return fmt
    name = str(path).lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    raise DataError(f"cannot tell the format of {str(path)!r}; end it in .csv or .parquet, or pass the format")


def ledger_path_for(path: str | Path) -> Path:
    """Where the ledger of output ``path`` goes: ``<name without extension>.ledger.json`` beside it."""
    p = Path(path)
    name = p.name
    for ext in (".csv.gz", ".csv", ".parquet", ".pq"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
            break
    return p.with_name(name + ".ledger.json")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed."""
    dest = Path(path)
    with _staged(dest) as tmp_path:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:  # flush to disk before the rename makes it visible
            os.fsync(fh.fileno())
        os.replace(tmp_path, dest)


def atomic_write(path: str | Path, writer: Callable[[Path], Any]) -> Path:
    """Call ``writer(tmp_path)`` and move the result to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _writer(frame: pd.DataFrame, fmt: str, gzip: bool = False) -> Callable[[Path], None]:
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise MissingDependencyError("pyarrow", "parquet") from None

        def write(tmp: Path) -> None:
            frame.to_parquet(tmp, index=False)
    else:
        def write(tmp: Path) -> None:
            frame.to_csv(tmp, index=False, compression="gzip" if gzip else None)
    return write


def write_table(frame: pd.DataFrame, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``frame`` as CSV or Parquet (format from the extension unless given), atomically."""
    fmt = format_for(path, fmt)
    dest = Path(path)
    # compression follows the destination's name, not the temporary file's
    return atomic_write(dest, _writer(frame, fmt, gzip=dest.name.lower().endswith(".gz")))


def write_release(frame: pd.DataFrame, ledger_json: str, path: str | Path, fmt: str | None = None,
                  ledger_path: str | Path | None = None) -> tuple[Path, Path]:
    """Write a release table and its ledger JSON; the ledger lands first, the table last
    (see :func:`atomic_write_all`: a failure leaves both destinations as they were)."""
    dest = Path(path)
    lpath = Path(ledger_path) if ledger_path is not None else ledger_path_for(dest)
    if dest.resolve() == lpath.resolve():
        raise DataError(f"the ledger would overwrite the table {str(dest)!r}; give the ledger its own file "
                        f"(default: {ledger_path_for(dest).name})")
    fmt = format_for(dest, fmt)
    atomic_write_all([(lpath, lambda tmp: tmp.write_text(ledger_json, encoding="utf-8")),
                      (dest, _writer(frame, fmt, gzip=dest.name.lower().endswith(".gz")))])
    return dest, lpath


def atomic_write_all(items: Sequence[tuple[str | Path, Callable[[Path], Any]]]) -> list[Path]:
    """Write several files as one: every ``writer(tmp)`` runs (and is synced) before any
    destination is touched, then the files are moved into place in order. If a move fails,
    the files already moved are rolled back (their previous content restored, or removed),
    so a failure leaves every destination as it was. Only a hard kill between two renames
    can leave some files new and others old."""
    dests = [Path(p) for p, _ in items]
    if len({d.resolve() for d in dests}) != len(dests):
        raise DataError("two outputs share one path: " + ", ".join(str(d) for d in dests))
    for d in dests:
        if d.is_dir():
            raise DataError(f"cannot write {str(d)!r}: it is a directory; give a file name such as out/release.csv")
    with contextlib.ExitStack() as stack:
        staged = []
        for d, (_, writer) in zip(dests, items):
            tmp = stack.enter_context(_staged(d))
            writer(tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            staged.append(tmp)
        done: list[tuple[Path, Path | None]] = []
        try:
            for d, tmp in zip(dests, staged):
                backup = None
                if d.exists():
                    backup = d.with_name(f".{d.name}.{os.getpid()}.bak")
                    os.link(d, backup)  # the previous file stays in place until replaced
                    stack.callback(backup.unlink, missing_ok=True)
                os.replace(tmp, d)
                done.append((d, backup))
        except BaseException:
            for d, backup in reversed(done):
                if backup is not None:
                    os.replace(backup, d)
                else:
                    d.unlink(missing_ok=True)
            raise
    return dests


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    rules of :mod:`hierdp.readers` (empty cells are the only missing values; ``string_columns``
    are read as strings, so labels such as ``"01"`` or ``"NA"`` stay labels)."""
    from hierdp.readers import read_table as _read

    return _read(files, fmt, columns=columns, label_columns=string_columns)
