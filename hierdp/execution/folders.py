"""The folders of an out-of-core release: the work folder (owner-only, journaled,
locked, holding the release key until the release completes) and the dataset folder (one
release per folder, locked while written, files made atomically under tagged temporary
names). See :mod:`hierdp.outofcore` and ``docs/security.md``."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from hierdp._kernels.private import check_private_folder, make_private_folder
from hierdp.errors import DataError, MissingDependencyError
from hierdp.io import RELEASE_ID_METADATA_KEY
from hierdp.keyed_noise import NoiseKey
from hierdp.tree import Tree

if TYPE_CHECKING:
    pass


#: the marker written last: the dataset is complete
SUCCESS = "_SUCCESS"


#: the ledger beside the parts
LEDGER_NAME = "_ledger.json"


#: test hook: SIGKILL this process at the N-th checkpoint (crash-safety tests only)
KILL_ENV = "HIERDP_TEST_KILL_AT_CHECKPOINT"


FORMAT = 1


JOURNAL, KEY, RELEASE, LEDGER, SPILL = "journal", "release.key", "release.json", "ledger.json", "spill"


TMP = ".tmp-"


#: the start of the name of a sub-folder of the work folder that holds a counted dataset's
#: true counts for one run (:func:`counts_folder`)
COUNTS = "counts-"


class WorkFolderError(DataError):
    """A work folder that cannot serve this release (another release's, unfinished, ...)."""


def part_name(index: int) -> str:
    """The file name of task ``index``'s part (``-1``: the top part)."""
    return f"part-{index + 1:05d}.parquet"


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def disk_full(path: Path, where: str) -> DataError:
    return DataError(f"no space left on the device writing {path} ({where}): free some space or choose another "
                     "folder, then run the same release again with resume=True (--resume): the work folder is "
                     "resumable")


def _tmp_prefix(name: str, tag: str) -> str:
    """The hidden temporary name's prefix of ``name``: with the run's ``tag`` (a random token
    journalled in the work folder before use) no one else can make a name that clean-up takes."""
    return f".{name}{TMP}{tag}-" if tag else f".{name}{TMP}"


@contextmanager
def atomic(path: Path, where: str, mode: int = 0o600, tag: str = "") -> Iterator[Path]:
    """A hidden temporary file beside ``path``, synced and renamed onto it on success;
    removed on failure. ENOSPC becomes one line naming the file. ``tag``: the run's token,
    carried in the temporary's name (:func:`remove_temporaries`)."""
    fd, tmp_name = tempfile.mkstemp(prefix=_tmp_prefix(path.name, tag), dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, mode)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise disk_full(path, where) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, where: str, mode: int = 0o600, tag: str = "") -> None:
    with atomic(path, where, mode, tag) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _unlink_own_files(paths: Iterator[Path]) -> None:
    """Remove those of ``paths`` that are regular files owned by this user; anything else, or
    a file that cannot be removed, is left: clean-up never fails a release."""
    uid = os.getuid()
    for p in paths:
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
                p.unlink()
        except OSError:
            pass


def remove_temporaries(folder: Path, tags: list[str]) -> None:
    """Leftovers of this release's interrupted writes in ``folder``: hidden names carrying one
    of ``tags`` (the tokens its runs journalled before use), regular files owned by this
    user. Nothing else is touched, whatever its name."""
    marks = [f"{TMP}{tag}-" for tag in tags if tag]
    if marks and folder.is_dir():
        _unlink_own_files(p for p in folder.iterdir()
                          if p.name.startswith(".") and any(m in p.name for m in marks))


def remove_untagged_temporaries(work: Path) -> None:
    """The untagged temporaries an older version left in the (private, owner-only) work
    folder beside its own files: a copy of the key among them must not outlive the release."""
    if work.is_dir():
        prefixes = tuple(f".{name}{TMP}" for name in (KEY, LEDGER, RELEASE))
        _unlink_own_files(p for p in work.iterdir() if p.name.startswith(prefixes))


class Checkpoints:
    """The crash-test hook: with :data:`KILL_ENV` set to ``N``, the process SIGKILLs itself
    at its ``N``-th checkpoint (a point between two durable writes)."""

    def __init__(self) -> None:
        text = os.environ.get(KILL_ENV, "")
        self.at = int(text) if text.strip().isdigit() else 0
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        if not self.at:
            return
        with self.lock:
            self.count += 1
            if self.count == self.at:
                os.kill(os.getpid(), signal.SIGKILL)


class Journal:
    """Append-only lines, each written whole and fsync'd: the steps that are done."""

    def __init__(self, path: Path, checkpoint: Checkpoints) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.checkpoint = checkpoint
        self.done: set[str] = set()
        if path.exists():
            text = path.read_text(encoding="utf-8")
            lines = text.split("\n")
            self.done = {ln for ln in lines[:-1] if ln}
            if lines[-1]:  # a last line without its newline was cut by a crash: drop it before appending
                os.truncate(path, len(text.encode()) - len(lines[-1].encode()))

    def add(self, line: str) -> None:
        self.note(line)
        self.checkpoint()

    def note(self, line: str) -> None:
        """``add`` without the crash-test checkpoint (a record, not a step)."""
        with self.lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                size = os.fstat(fd).st_size
                try:
                    os.write(fd, (line + "\n").encode())
                    os.fsync(fd)
                except OSError as exc:
                    os.ftruncate(fd, size)  # no half line
                    if exc.errno == errno.ENOSPC:
                        raise disk_full(self.path, "the journal") from None
                    raise
            finally:
                os.close(fd)
            self.done.add(line)

    def __contains__(self, line: str) -> bool:
        return line in self.done


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    return repr(value)


def _tree_digest(tree: Tree) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(tree.parent, dtype=np.int64).tobytes())
    h.update(json.dumps(list(tree.level_names)).encode())
    if tree.has_labels:
        for d in range(tree.n_levels):
            h.update(pd.util.hash_pandas_object(pd.Index(tree.level_labels(d)), index=False).to_numpy().tobytes())
    return h.hexdigest()


def fingerprint(tree: Tree, settings: dict[str, Any]) -> dict[str, Any]:
    """The release's identity: a digest of the tree and the settings (only the digest is
    written: the keywords may hold private notes)."""
    body = {"format": FORMAT, "tree": _tree_digest(tree), **_canonical(settings)}
    return {"format": FORMAT, "id": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()}


def _key_text(key: NoiseKey) -> str:
    _, (raw, secure, seed) = key.export().__reduce__()  # the explicit, shippable form of the key
    return json.dumps({"key": bytes(raw).hex(), "secure": bool(secure), "seed": seed})


def _key_digest(key: NoiseKey) -> str:
    """SHA-256 of the key's canonical text: what the journal records to bind the release to its
    key (the key is 256 random bits: its digest tells nothing about it)."""
    return hashlib.sha256(b"hierdp release key\n" + _key_text(key).encode()).hexdigest()


def save_key(path: Path, key: NoiseKey, tag: str = "") -> str:
    """Write the key (0600, atomically, a temporary carrying ``tag``); return its :func:`_key_digest`."""
    write_text(path, _key_text(key), "the release key", mode=0o600, tag=tag)
    return _key_digest(key)


def load_key(path: Path) -> NoiseKey:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, encoding="utf-8") as fh:
        d = json.loads(fh.read())
    return NoiseKey(bytes.fromhex(d["key"]), secure=bool(d["secure"]), seed=d["seed"])


def check_key(work: Path, key: NoiseKey, journal: Journal) -> None:
    """The key of a resumed release is the one its journal recorded when it was made (a work
    folder of an older version recorded none: nothing to compare)."""
    recorded = {line[4:] for line in journal.done if line.startswith("key ")}
    if recorded and _key_digest(key) not in recorded:
        raise WorkFolderError(f"work folder {str(work)!r}: its release key is not the one this release was made with "
                              "(release.key was replaced); resuming with it would mix two keys' noise: put the "
                              "original key back, or start the release afresh in an empty work folder")


def counts_folder(work: str | os.PathLike[str]) -> Path:
    """A new folder for one run's true counts of a counted dataset: ``counts-XXXXXXXX/``
    (``mkdtemp``: a fresh name, mode 0700) inside the work folder, which is made owner-only or
    checked to be private and this user's first (never adopted, :mod:`hierdp._kernels.private`).
    :func:`release_to_dataset` accepts a work folder that holds only such folders; the caller
    removes its own when the run ends, however it ends, and those of killed runs once the
    release is complete.

    Parameters
    ----------
    work : str or os.PathLike
        The release's work folder.

    Returns
    -------
    pathlib.Path
        The new, empty folder (for :meth:`hierdp.frontends.dataset.DatasetDPTree.counted`).
    """
    work = Path(work)
    if work.exists() and not work.is_dir():
        raise WorkFolderError(f"work folder {str(work)!r} is a file; give a folder")
    make_private_folder(work, "work folder", WorkFolderError)
    return Path(tempfile.mkdtemp(prefix=COUNTS, dir=work))


#: the work-folder locks this process holds: a child forked while one is held (e.g. a Dask
#: worker restarted by its nanny with the fork method) closes its copies, so the lock ends
#: with the run that took it, not with the child
_HELD_LOCKS: set[int] = set()


def _close_inherited_locks() -> None:
    for fd in list(_HELD_LOCKS):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


def lock_folder(work: Path) -> int:
    """An exclusive lock on the work folder for this run (released when the process ends,
    however it ends): two runs never write one work folder."""
    fd = os.open(work / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise WorkFolderError(f"work folder {str(work)!r} is in use by another running release; wait for it to "
                              "end, or stop it and resume") from None
    _HELD_LOCKS.add(fd)
    return fd


def unlock(fd: int) -> None:
    _HELD_LOCKS.discard(fd)
    os.close(fd)


class OutputFolderError(DataError):
    """A dataset folder that cannot take this release (it holds another release, it is in
    use, it holds the work folder or the input, ...)."""


#: the journal line recording a run's temporaries' token, before the first temporary is made
TAG_LINE = "tmp "


def _is_release_name(name: str) -> bool:
    """A name a reader of the dataset takes as part of the release: a part, the ledger, the marker."""
    return name in (SUCCESS, LEDGER_NAME) or (name.startswith("part-") and name.endswith(".parquet"))


def _within(inner: Path, outer: Path) -> bool:
    """``inner`` is ``outer`` or lies inside it (symbolic links resolved)."""
    a, b = inner.resolve(), outer.resolve()
    return a == b or b in a.parents


def check_dataset_folders(out: str | os.PathLike[str], *, workdir: str | os.PathLike[str] | None = None,
                          private: list[str | os.PathLike[str]] | tuple[()] = (),
                          inputs: list[str | os.PathLike[str]] | tuple[()] = (),
                          input_folders: list[str | os.PathLike[str]] | tuple[()] = ()) -> None:
    """Refuse folders that would publish private state or mix the input into the output.

    The work folder (the release key, spills, true counts) and every other ``private`` folder
    must lie outside the dataset folder ``out`` (not equal to it, not inside it), and ``out``
    must neither hold an input file nor be, or lie inside, an input folder (a dataset read
    whole). Checks paths only: nothing is read, created or charged.

    Parameters
    ----------
    out : str or os.PathLike
        The dataset folder.
    workdir : str or os.PathLike, optional
        The release's work folder.
    private : list of str or os.PathLike
        Other folders of private state (e.g. a folder of true counts).
    inputs : list of str or os.PathLike
        Files the release reads.
    input_folders : list of str or os.PathLike
        Folders read whole (every file inside them, at any depth).

    Raises
    ------
    OutputFolderError
        One line naming the two paths and what to change.
    """
    o = Path(out)
    for folder in ([Path(workdir)] if workdir is not None else []) + [Path(p) for p in private]:
        if _within(folder, o):
            what = "the work folder" if workdir is not None and folder == Path(workdir) else "the private folder"
            raise OutputFolderError(f"{what} {str(folder)!r} is inside the dataset folder {str(o)!r}: the release "
                                    "key, spills and true counts must never sit in the folder being published; "
                                    "choose a work folder outside it (the default is OUT.work/ beside it)")
    for f in inputs:
        if _within(Path(f), o):
            raise OutputFolderError(f"the dataset folder {str(o)!r} holds the input {str(f)!r}: the release would "
                                    "write its parts among the data it reads; choose another output folder")
    for d in input_folders:
        if _within(o, Path(d)):
            raise OutputFolderError(f"the dataset folder {str(o)!r} is (inside) the input folder {str(d)!r}: the "
                                    "release would write its parts among the data it reads; choose an output "
                                    "folder outside it")


def _release_ids(out: Path) -> tuple[set[str], list[str], bool]:
    """What ``out`` holds of a release: the release ids its parts and ledger carry, the names
    of release files that carry none (unreadable, not regular files, ``_SUCCESS`` without a
    ledger: not written by a release hierdp can name), and whether ``_SUCCESS`` is there."""
    ids: set[str] = set()
    unknown: list[str] = []
    finished = False
    if not out.is_dir():
        return ids, unknown, finished
    for p in sorted(out.iterdir()):
        name = p.name
        if not _is_release_name(name):
            continue  # a foreign file: never touched, never a reason to refuse
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            unknown.append(name)
            continue
        if name == SUCCESS:
            finished = True
            continue
        rid: Any = None
        try:
            if name == LEDGER_NAME:
                with open(p, "rb") as fh:
                    rid = json.loads(fh.read(1 << 24)).get("release_id")
            else:
                _, pq = need_pyarrow()
                meta = pq.read_schema(p).metadata or {}
                rid = meta.get(RELEASE_ID_METADATA_KEY.encode(), b"").decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - any unreadable file: of unknown origin
            rid = None
        if isinstance(rid, str) and rid:
            ids.add(rid)
        else:
            unknown.append(name)
    if finished and not (out / LEDGER_NAME).is_file():
        unknown.append(SUCCESS)
    return ids, unknown, finished


def check_dataset_holds(out: Path, own: str | None) -> None:
    """``out`` holds nothing of a release but this one's (``own``: its release id once
    charged, ``None`` before): otherwise one line saying which release is there (its id, no
    values) and how to replace it on purpose."""
    ids, unknown, finished = _release_ids(out)
    others = sorted(ids - {own}) if own is not None else sorted(ids)
    if not others and not unknown:
        return
    where = f"the dataset folder {str(out)!r} already holds"
    if others:
        state = "the finished release" if finished else "parts of the unfinished release"
        what = f"{state} {others[0]}" + (f" (and {len(others) - 1} more)" if len(others) > 1 else "")
    else:
        what = f"{len(unknown)} release file(s) hierdp cannot attribute to a release (e.g. {unknown[0]!r})"
    if own is not None:
        what += f", not only the release {own} this work folder continues"
    raise OutputFolderError(f"{where} {what}; a dataset folder holds exactly one release: to replace it, delete the "
                            f"folder (or its part-*.parquet, {LEDGER_NAME} and {SUCCESS}) first, or write to another "
                            "folder")


def work_release_id(work: Path) -> str | None:
    """The release id of the release a work folder holds once charged (its ledger), else None."""
    try:
        lines = (work / JOURNAL).read_text(encoding="utf-8").split("\n")
        if "charged" not in lines[:-1] or not (work / RELEASE).is_file():
            return None
        rid = json.loads((work / LEDGER).read_text(encoding="utf-8")).get("release_id")
    except (OSError, ValueError, AttributeError):
        return None
    return rid if isinstance(rid, str) and rid else None


def _journal_lines(work: Path) -> list[str] | None:
    """The whole lines of a work folder's journal (``[]`` when there is none; ``None`` when
    it is not a regular file)."""
    path = work / JOURNAL
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return None
    return [ln for ln in path.read_text(encoding="utf-8", errors="replace").split("\n") if ln]


def charged(work: str | os.PathLike[str]) -> bool:
    """Whether the work folder's release has charged its budget (drawn its key): from then
    on it is resumed, never started afresh."""
    lines = _journal_lines(Path(work)) if Path(work).is_dir() else None
    return bool(lines) and "charged" in cast(list[str], lines)


def kept_counts(work: str | os.PathLike[str], source: str) -> Path | None:
    """The counts folder an interrupted run of this release left in the work folder for
    its resume (:func:`counts_folder`, complete: its ``counts.json`` written last names the
    input ``source``), else ``None``. Each such folder must be this user's and private."""
    work = Path(work)
    if not work.is_dir():
        return None
    for folder in sorted(work.glob(COUNTS + "*")):
        check_private_folder(folder, "counts folder", WorkFolderError)
        try:
            meta = json.loads((folder / "counts.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # counting did not finish there
        if isinstance(meta, dict) and meta.get("source") == source:
            return folder
    return None


def abandoned_start(work: Path) -> bool:
    """A work folder killed while it was set up, before its release's fingerprint was
    written: only its lock, an empty spill folder, a journal of its temporaries' tokens and
    temporaries carrying them. Nothing was drawn or charged there: the release starts afresh."""
    if not work.is_dir() or (work / RELEASE).exists():
        return False
    lines = _journal_lines(work)
    if lines is None or not all(ln.startswith(TAG_LINE) or TAG_LINE.startswith(ln) for ln in lines):
        return False
    marks = [f"{TMP}{ln[len(TAG_LINE):]}-" for ln in lines if len(ln) > len(TAG_LINE)]
    for p in work.iterdir():
        if p.name in ("lock", JOURNAL) and not p.is_symlink():
            continue
        if p.name == SPILL and p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
            continue
        if p.name.startswith(f".{RELEASE}{TMP}") and any(m in p.name for m in marks):
            continue
        return False
    return True


def check_dataset_target(out: str | os.PathLike[str], *, workdir: str | os.PathLike[str] | None = None,
                         resume: bool = False) -> None:
    """The refusals of a dataset release that need neither the data nor the release's
    arguments, made up front (before anything is counted, drawn or charged).

    The dataset folder ``out`` must be a folder (or not exist yet, its parent a folder) that
    holds no other release (:func:`release_to_dataset`); a work folder holding an unfinished
    release is continued only with ``resume=True``. :func:`release_to_dataset` makes these
    checks again (under its locks); this lets a caller refuse before a long count.

    Parameters
    ----------
    out : str or os.PathLike
        The dataset folder.
    workdir : str or os.PathLike, optional
        The work folder (``None``: a release without one, e.g. on Spark).
    resume : bool, default False
        Whether the run continues the work folder's release.

    Raises
    ------
    OutputFolderError, WorkFolderError, DataError
        One line each.
    """
    o = Path(out)
    if o.exists() and not o.is_dir():
        raise DataError(f"output {str(o)!r} is a file; the dataset goes to a folder: give a folder path")
    if not o.exists() and not o.parent.is_dir():
        raise DataError(f"the output folder's parent {str(o.parent)!r} does not exist; create it first")
    own = None
    if workdir is not None:
        work = Path(workdir)
        check_dataset_folders(o, workdir=work)
        lines = _journal_lines(work) if work.is_dir() else []
        if (work / RELEASE).is_file() and lines is not None and "charged" in lines and "done" not in lines \
                and not resume:
            raise WorkFolderError(f"work folder {str(work)!r} holds an unfinished release: pass resume=True "
                                  "(--resume) to continue it, or choose an empty work folder")
        own = work_release_id(work)
    check_dataset_holds(o, own)


def _lock_out(out: Path) -> int:
    """An exclusive lock on the dataset folder for this run (released when the process ends,
    however it ends): two releases never write one dataset folder at once. The folder itself
    is locked (no file is added to it); where its file system cannot lock a folder, a hidden
    ``.hierdp.lock`` inside it is."""
    busy = OutputFolderError(f"the dataset folder {str(out)!r} is being written by another running release; a "
                             "dataset folder holds exactly one release: wait for it to end, or write to another "
                             "folder")
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise busy from None
        try:
            fd = os.open(out / ".hierdp.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc2:
            raise OutputFolderError(f"cannot lock the dataset folder {str(out)!r} ({exc2.strerror}); write to a "
                                    "local folder you own") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise busy from None
    _HELD_LOCKS.add(fd)
    return fd


def claim_dataset_folder(out: Path, own: str | None) -> int:
    """The dataset folder made (``check_out``), locked for this run and checked to hold no
    other release (under the lock); returns the lock (:func:`unlock`)."""
    check_out(out)
    fd = _lock_out(out)
    try:
        check_dataset_holds(out, own)
    except BaseException:
        unlock(fd)
        raise
    return fd


def describe_unfinished(out: str | os.PathLike[str], workdir: str | os.PathLike[str] | None) -> str:
    """What an interrupted dataset release left, in one line for the user (names and numbers
    of files only): the parts written so far and whether ``resume`` continues it.

    Parameters
    ----------
    out : str or os.PathLike
        The dataset folder.
    workdir : str or os.PathLike, optional
        The work folder (``None``: a release without one).

    Returns
    -------
    str
        E.g. ``"the release is unfinished: 7 parts in out/ so far, no _SUCCESS; run the same
        command with --resume to continue it (the budget is not charged again)"``.
    """
    o = Path(out)
    try:
        parts = sum(1 for p in o.iterdir() if p.name.startswith("part-") and p.name.endswith(".parquet")) \
            if o.is_dir() else 0
        done = (o / SUCCESS).exists()
    except OSError:
        parts, done = 0, False
    if done:
        return f"the dataset {o}/ is complete"
    work = Path(workdir) if workdir is not None else None
    charged = work is not None and work_release_id(work) is not None
    if charged:
        return (f"the release is unfinished: {parts} part(s) in {o}/ so far, no {SUCCESS}; run the same command "
                f"with --resume (resume=True) to continue it (the budget is not charged again)")
    if parts:
        return (f"the release is unfinished: {parts} part(s) in {o}/, no {SUCCESS}, and it cannot be resumed; "
                "delete the folder and run the release again")
    return "no output was written; run the same command again (nothing was charged)"


def check_out(out: Path) -> None:
    """The output folder exists (its parent must) and a file can be written in it."""
    if out.exists() and not out.is_dir():
        raise DataError(f"output {str(out)!r} is a file; the dataset goes to a folder: give a folder path")
    if not out.exists() and not out.parent.is_dir():
        raise DataError(f"the output folder's parent {str(out.parent)!r} does not exist; create it first")
    try:
        out.mkdir(exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".probe{TMP}", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DataError(f"the output folder {str(out)!r} is not writable ({exc.strerror}); choose a folder you can "
                        "write to") from None


def need_pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the parquet extra
        raise MissingDependencyError("pyarrow", "parquet") from None
    return pa, pq
