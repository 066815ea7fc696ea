"""Private working state on disk: folders only this user can open, made by hierdp.

The out-of-core path keeps state as sensitive as the data on disk (the release key, the
spilled measurements, the true counts, DuckDB's spill files). It lives only in folders
that hierdp created itself with mode ``0700`` (from the first byte: ``mkdir(path, 0o700)``,
never a ``chmod`` after the fact) or that pass the same checks as one: a real folder (not a
symbolic link), owned by this user, with no permission for the group or others, in folders
where nobody else can rename it away and put their own in its place. A folder that fails
is refused with one line that says why and what to do; it is never adopted (no ``chmod``,
no ``chown``). Files in such a folder are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``
and mode ``0600`` (:func:`create_private_file`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hierdp.errors import DataError

__all__ = ["check_private_folder", "make_private_folder", "create_private_file"]


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _check_ancestors(path: Path, what: str, error: type[DataError]) -> None:
    """Every folder above ``path`` (resolved) is owned by this user or root and, unless it is
    sticky (``/tmp``), writable by nobody else: no one else can rename ``path`` away and put
    a folder of theirs in its place."""
    me = os.geteuid()
    here = Path(os.path.realpath(path.parent))
    for folder in (here, *here.parents):
        try:
            st = os.stat(folder)
        except OSError:  # pragma: no cover - a folder above an existing one vanished
            continue
        if st.st_uid not in (me, 0):  # its owner may rename anything in it, sticky or not
            raise error(f"the {what} {str(path)!r} is inside {str(folder)!r}, which belongs to another user (uid "
                        f"{st.st_uid}), who could replace it; choose a folder under one of your own")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise error(f"the {what} {str(path)!r} is inside {str(folder)!r}, which other users may write to "
                        f"(mode {_mode(st)}, not sticky), so they could replace it; choose a folder only you can "
                        f"write to, or make that folder sticky (chmod +t)")


def check_private_folder(path: Path, what: str, error: type[DataError] = DataError) -> None:
    """Refuse ``path`` unless it is a private folder this user may keep secrets in.

    Parameters
    ----------
    path : pathlib.Path
        An existing folder.
    what : str
        What it is for, in the message (e.g. ``"work folder"``).
    error : type
        The :class:`~hierdp.errors.DataError` subclass raised.

    Raises
    ------
    DataError
        One line: a symbolic link, not a folder, owned by another user, open to the group or
        others, or inside a folder others may write to.
    """
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise error(f"the {what} {str(path)!r} is a symbolic link; hierdp keeps private state only in a real folder: "
                    "give the folder it points to, or a new path")
    if not stat.S_ISDIR(st.st_mode):
        raise error(f"the {what} {str(path)!r} is not a folder; give a new path (it is created owner-only)")
    if st.st_uid != os.geteuid():
        raise error(f"the {what} {str(path)!r} belongs to another user (uid {st.st_uid}); hierdp never keeps private "
                    "state in a folder someone else made: give a new path (it is created owner-only)")
    if st.st_mode & 0o077:
        raise error(f"the {what} {str(path)!r} is open to other users (mode {_mode(st)}); it must be owner-only: "
                    f"give a new path (hierdp creates it with mode 0700), or if only you ever wrote to it, run "
                    f"chmod 700 {str(path)!r}")
    _check_ancestors(path, what, error)


def make_private_folder(path: Path, what: str, error: type[DataError] = DataError) -> Path:
    """Create ``path`` with mode ``0700`` (its missing parents as usual), or accept an existing
    one that passes :func:`check_private_folder`.

    Parameters
    ----------
    path : pathlib.Path
        The folder.
    what : str
        What it is for, in the messages.
    error : type
        The :class:`~hierdp.errors.DataError` subclass raised.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    if not os.path.lexists(path):
        _check_ancestors(path, what, error)  # before anything is made there
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)  # owner-only from the first byte (the umask can only take bits away)
        except FileExistsError:  # made by someone else meanwhile: checked below like any existing folder
            pass
        except OSError as exc:
            raise error(f"cannot create the {what} {str(path)!r} ({exc.strerror}); choose a folder you can write "
                        "to") from None
    check_private_folder(path, what, error)
    return path


def create_private_file(path: Path) -> int:
    """A new file only this user can read and write: ``O_CREAT | O_EXCL | O_NOFOLLOW``, mode
    ``0600``. It fails (``FileExistsError``) rather than open a file that is already there.

    Parameters
    ----------
    path : pathlib.Path
        The new file's name.

    Returns
    -------
    int
        The open file descriptor (write only).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
    except BaseException:
        os.close(fd)
        raise
    return fd
