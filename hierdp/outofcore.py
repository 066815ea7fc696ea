"""Out-of-core split releases to a partitioned Parquet dataset: parallel, resumable, crash-safe.

:func:`release_to_dataset` runs a split release (:mod:`hierdp.subtrees`, the stages of
:class:`hierdp.pipeline._SplitStages`, the one code path :func:`hierdp.release_by_subtree`
runs too) in three stages:

1. **up**, per task on ``workers`` threads: the task's counts (``counts_of(task)``, the only
   way data come in), their measurement and the pass up; the task's state (noisy values,
   variances, the roots' ``(z, u)``) is spilled to the work folder;
2. **top**: the levels above the split, solved from every root's ``(z, u)``, the roots'
   arrays on disk in blocks of cells (:class:`~hierdp._engine.columns.ColumnsOnDisk`:
   solved in ``top.partial/``, renamed to ``top/`` when whole); the top part is written,
   and the roots' values the pass down starts from are read back by each task's roots;
3. **down**, per task on ``workers`` threads: the pass down (and top-down ``nonneg`` /
   ``round``) from the spilled state; the task's part is written.

Memory is bounded by ``workers`` tasks (the largest) plus the top stage, which holds the
top part's arrays, the roots' true counts (once) and one block of cells of the roots'
(:meth:`hierdp.pipeline._SplitStages.top_on_disk`). With
``executor=`` a :class:`distributed.Client`, stages 1 and 3 run as Dask tasks on its
cluster instead (the workers write the spills and parts; :mod:`hierdp._dask_tasks`).

*Spill or recompute.* Stage 3 needs a task's noisy measurements again. They are spilled
(:meth:`hierdp.pipeline._SplitStages.spill`: the noisy values, or for ``marginals`` the
noisy marginals, integers in the narrowest type that holds them: 2.6 B per node-cell on the
census shape, where the rotated values and variances took 16 B and the whole US, 273 GB,
filled this machine's disk) rather than
recomputed from the keyed noise, because recomputing means calling ``counts_of`` a second
time (reading and counting the task's records again, the dearest step once the input is a
dataset on disk) and drawing every node-cell's noise again; writing and reading the spill
costs less than either (``benchmarks/bench_outofcore.py`` prints both). A spilled
measurement is noisy; the one true-count-derived array spilled is each task's subtree-root
counts, kept only so that a resumed run can still check the top part's counts add up
(``check_counts``). The work folder also holds the release key, so until the release
completes it is **as sensitive as the data** (with the key the noisy values give back the
true ones): it is created owner-only (0700 from ``mkdir``, the key file 0600), a folder of
another user, open to others, a symbolic link or inside a folder others may write to is
refused (:mod:`hierdp._engine.private`; never adopted), and the key, the spills and the
root counts are deleted when the release completes. The journal records the key's digest
when the key is made; a resume refuses another key (``docs/security.md``).

*Output.* ``out/part-00000.parquet`` is the top part, ``out/part-NNNNN.parquet`` task
``NNNNN - 1``; columns ``level``, the level names (each node's path labels, null below its
level; ``node`` for an unlabelled tree), the cell columns (``cell`` when unlabelled),
``estimate`` and ``std`` (when asked). Integer output is sparse by default (only non-zero
cells; ``dense=True`` for all). Every part carries the ledger in its Parquet key-value
metadata (``hierdp.ledger``, ``hierdp.release_id``); ``out/_ledger.json`` and then
``out/_SUCCESS`` are written last: the dataset is complete only when ``_SUCCESS`` exists.
Each file is written to a hidden temporary name in the same folder, synced, then renamed,
so a half-written part is never visible (Parquet readers skip names starting with ``.``);
the name carries a random token of the run, journalled in the work folder before use, and
clean-up removes only this release's names (its own regular files): nothing else in the
folder is ever deleted.

*One release per folder.* The dataset folder is locked for the run (``flock`` on the folder:
a second release into it while one runs is refused) and, before anything is charged, checked
to hold no part, ledger or ``_SUCCESS`` of another release (refused with one line naming
that release's id: delete the folder to replace it); a resumed run finds only its own parts.
The work folder must lie outside the dataset folder (the key and counts are never published).
:func:`check_dataset_target` makes these checks up front, before a caller counts the data.

*Resuming.* The work folder holds a journal (one fsync'd line per finished step), the
release's fingerprint (arguments, tree, ``source_id``: the input's identity), the ledger
and the key. The same call with ``resume=True`` after any interruption (SIGKILL, power
loss, a full disk) skips what the journal says is done and, the noise being keyed per node,
gives a dataset bit-identical to an uninterrupted run. The budget is charged (a
``session``) once, before any noise is drawn; a resumed run does not charge it again and
writes the same ledger. A work folder of another release is refused: one key must never
serve two releases of different data. Rerunning a finished release does nothing.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import resource
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast
from warnings import warn

import numpy as np
import pandas as pd

from hierdp import subtrees
from hierdp._dask_tasks import DaskStageRunner, is_dask_client
from hierdp._engine.columns import ColumnsOnDisk
from hierdp._engine.private import check_private_folder, make_private_folder
from hierdp.errors import DataError, MissingDependencyError, NotForPublicationWarning
from hierdp.io import LEDGER_METADATA_KEY, RELEASE_ID_METADATA_KEY
from hierdp.keyed_noise import NoiseKey
from hierdp.ledger import Ledger
from hierdp.pipeline import (
    _reserve,
    _RootCounts,
    _RowsOnDisk,
    _settle_split,
    _split_setup,
    _SplitStages,
    _top_task,
    account,
    build_ledger,
    check,
    noise_key,
    open_account,
)
from hierdp.rng import make_rng
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.measurements import Estimate
    from hierdp.session import Reservation, Session

__all__ = ["release_to_dataset", "check_dataset_target", "check_dataset_folders", "describe_unfinished",
           "WorkFolderError", "OutputFolderError", "part_name", "SUCCESS", "LEDGER_NAME", "KILL_ENV", "COUNTS",
           "counts_folder"]

#: the marker written last: the dataset is complete
SUCCESS = "_SUCCESS"
#: the ledger beside the parts
LEDGER_NAME = "_ledger.json"
#: test hook: SIGKILL this process at the N-th checkpoint (crash-safety tests only)
KILL_ENV = "HIERDP_TEST_KILL_AT_CHECKPOINT"
_FORMAT = 1
_JOURNAL, _KEY, _RELEASE, _LEDGER, _SPILL = "journal", "release.key", "release.json", "ledger.json", "spill"
_TMP = ".tmp-"
#: the start of the name of a sub-folder of the work folder that holds a counted dataset's
#: true counts for one run (:func:`counts_folder`)
COUNTS = "counts-"


class WorkFolderError(DataError):
    """A work folder that cannot serve this release (another release's, unfinished, ...)."""


def part_name(index: int) -> str:
    """The file name of task ``index``'s part (``-1``: the top part)."""
    return f"part-{index + 1:05d}.parquet"


# ---------------------------------------------------------------------------- files
def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _disk_full(path: Path, where: str) -> DataError:
    return DataError(f"no space left on the device writing {path} ({where}): free some space or choose another "
                     "folder, then run the same release again with resume=True (--resume): the work folder is "
                     "resumable")


def _tmp_prefix(name: str, tag: str) -> str:
    """The hidden temporary name's prefix of ``name``: with the run's ``tag`` (a random token
    journalled in the work folder before use) no one else can make a name that clean-up takes."""
    return f".{name}{_TMP}{tag}-" if tag else f".{name}{_TMP}"


@contextmanager
def _atomic(path: Path, where: str, mode: int = 0o600, tag: str = "") -> Iterator[Path]:
    """A hidden temporary file beside ``path``, synced and renamed onto it on success;
    removed on failure. ENOSPC becomes one line naming the file. ``tag``: the run's token,
    carried in the temporary's name (:func:`_remove_temporaries`)."""
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
        _fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise _disk_full(path, where) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_text(path: Path, text: str, where: str, mode: int = 0o600, tag: str = "") -> None:
    with _atomic(path, where, mode, tag) as tmp:
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


def _remove_temporaries(folder: Path, tags: list[str]) -> None:
    """Leftovers of this release's interrupted writes in ``folder``: hidden names carrying one
    of ``tags`` (the tokens its runs journalled before use), regular files owned by this
    user. Nothing else is touched, whatever its name."""
    marks = [f"{_TMP}{tag}-" for tag in tags if tag]
    if marks and folder.is_dir():
        _unlink_own_files(p for p in folder.iterdir()
                          if p.name.startswith(".") and any(m in p.name for m in marks))


def _remove_untagged_temporaries(work: Path) -> None:
    """The untagged temporaries an older version left in the (private, owner-only) work
    folder beside its own files: a copy of the key among them must not outlive the release."""
    if work.is_dir():
        prefixes = tuple(f".{name}{_TMP}" for name in (_KEY, _LEDGER, _RELEASE))
        _unlink_own_files(p for p in work.iterdir() if p.name.startswith(prefixes))


class _Checkpoints:
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


class _Journal:
    """Append-only lines, each written whole and fsync'd: the steps that are done."""

    def __init__(self, path: Path, checkpoint: _Checkpoints) -> None:
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
                        raise _disk_full(self.path, "the journal") from None
                    raise
            finally:
                os.close(fd)
            self.done.add(line)

    def __contains__(self, line: str) -> bool:
        return line in self.done


# ---------------------------------------------------------------------------- fingerprint and key
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


def _fingerprint(tree: Tree, settings: dict[str, Any]) -> dict[str, Any]:
    """The release's identity: a digest of the tree and the settings (only the digest is
    written: the keywords may hold private notes)."""
    body = {"format": _FORMAT, "tree": _tree_digest(tree), **_canonical(settings)}
    return {"format": _FORMAT, "id": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()}


def _key_text(key: NoiseKey) -> str:
    _, (raw, secure, seed) = key.export().__reduce__()  # the explicit, shippable form of the key
    return json.dumps({"key": bytes(raw).hex(), "secure": bool(secure), "seed": seed})


def _key_digest(key: NoiseKey) -> str:
    """SHA-256 of the key's canonical text: what the journal records to bind the release to its
    key (the key is 256 random bits: its digest tells nothing about it)."""
    return hashlib.sha256(b"hierdp release key\n" + _key_text(key).encode()).hexdigest()


def _save_key(path: Path, key: NoiseKey, tag: str = "") -> str:
    """Write the key (0600, atomically, a temporary carrying ``tag``); return its :func:`_key_digest`."""
    _write_text(path, _key_text(key), "the release key", mode=0o600, tag=tag)
    return _key_digest(key)


def _load_key(path: Path) -> NoiseKey:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, encoding="utf-8") as fh:
        d = json.loads(fh.read())
    return NoiseKey(bytes.fromhex(d["key"]), secure=bool(d["secure"]), seed=d["seed"])


def _check_key(work: Path, key: NoiseKey, journal: _Journal) -> None:
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
    checked to be private and this user's first (never adopted, :mod:`hierdp._engine.private`).
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


# ---------------------------------------------------------------------------- the parts
def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the parquet extra
        raise MissingDependencyError("pyarrow", "parquet") from None
    return pa, pq


def _label_arrays(tree: Tree, nodes: np.ndarray) -> dict[str, Any]:
    """Per level below the root, the label of each node's ancestor at that level (null
    below the node's level), for ``nodes`` (internal ids); one vectorised step per level."""
    pa, _ = _pyarrow()
    ti = tree.internal
    if not tree.has_labels:
        ext = ti.perm[nodes] if ti.perm is not None else nodes
        return {"node": pa.array(np.asarray(ext, dtype=np.int64))}
    depth = ti.depth[nodes]
    codes = cast(np.ndarray, ti.codes)
    anc = nodes.copy()
    cols: dict[str, Any] = {}
    for d in range(tree.n_levels - 1, 0, -1):
        up = ti.depth[anc] > d
        while up.any():
            anc[up] = ti.parent[anc[up]]
            up = ti.depth[anc] > d
        has = depth >= d
        labels = pd.Index(tree.level_labels(d))
        typ = pa.array(labels[:1].to_numpy()).type if labels.size else pa.string()  # the same in every part
        vals = labels.take(np.where(has, codes[anc], 0)).to_numpy() if labels.size else np.zeros(0, object)
        cols[tree.level_names[d]] = pa.array(vals, type=typ, mask=~has)
    return dict(reversed(list(cols.items())))


def _part_table(tree: Tree, task: subtrees.SubtreeTask, est: Estimate, cells: dict[str, Any] | None,
                n_cells: int, dense: bool, with_std: bool) -> Any:
    pa, _ = _pyarrow()
    nodes = task.nodes
    m = nodes.size
    vals = np.asarray(est.values).reshape(m, n_cells)
    integer = np.issubdtype(vals.dtype, np.integer)
    keep = np.ones((m, n_cells), bool) if dense or not integer else vals != 0
    row_node, row_cell = np.nonzero(keep)  # row-major: node by node, cells in order
    names = tree.level_names
    cols: dict[str, Any] = {"level": pa.array(np.asarray(names, dtype=object)[tree.internal.depth[nodes[row_node]]])}
    for name, arr in _label_arrays(tree, nodes).items():
        cols[name] = arr.take(pa.array(row_node))
    if n_cells > 1:
        axes = {str(k): pd.Index(v) for k, v in (cells or {}).items()}
        if not axes or int(np.prod([len(ix) for ix in axes.values()])) != n_cells:
            cols["cell"] = pa.array(row_cell.astype(np.int64))
        else:
            sizes = [len(ix) for ix in axes.values()]
            rest = row_cell.copy()
            for i, (name, ix) in enumerate(axes.items()):
                inner = int(np.prod(sizes[i + 1:]))
                typ = pa.array(ix[:1].to_numpy()).type
                cols[name] = pa.array(ix.take(rest // inner).to_numpy(), type=typ)
                rest = rest % inner
    cols["estimate"] = pa.array(vals[row_node, row_cell])
    if with_std:
        var = np.asarray(est.variance, dtype=np.float64).reshape(m, -1) if est.variance is not None \
            else np.full((m, 1), np.nan)
        if not est.linear:
            var = np.where(var == 0, 0.0, np.nan)
        var = np.broadcast_to(var, (m, n_cells))
        cols["std"] = pa.array(np.sqrt(var[row_node, row_cell]))
    return pa.table(cols)


def _write_part(path: Path, table: Any, ledger_json: str, release_id: str, tag: str = "") -> None:
    pa, pq = _pyarrow()
    meta = {LEDGER_METADATA_KEY.encode(): ledger_json.encode(), RELEASE_ID_METADATA_KEY.encode(): release_id.encode()}
    table = table.replace_schema_metadata(meta)
    with _atomic(path, f"part {path.name}", mode=0o644, tag=tag) as tmp:
        try:
            pq.write_table(table, tmp)
        except pa.ArrowException as exc:  # pyarrow's own writer wraps the OS error
            if "No space left" in str(exc):
                raise OSError(errno.ENOSPC, "No space left on device") from None
            raise


# ---------------------------------------------------------------------------- the per-task stages
def _spill_path(spill: Path, t: int) -> Path:
    return spill / f"task-{t:05d}.npz"


def _up_work(stages: _SplitStages, task: subtrees.SubtreeTask, counts: Any, path: Path, tag: str = "") -> None:
    """Stage 1 of a task: measure and pass up, the task's state spilled to ``path``
    (atomically). Runs on a worker thread, or on a Dask worker."""
    noisy, var, roots_vals, z, u = stages.up(task, counts)
    arrays = {**stages.spill(task, noisy, var), "roots": roots_vals}
    if z is not None and u is not None:
        arrays.update(z=z, u=u)
    exact = stages.exact.pop(task.index, None)
    if exact is not None:
        arrays["exact"] = exact
    with _atomic(path, f"task {task.index}'s state", tag=tag) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **cast(Any, arrays))


def _down_work(stages: _SplitStages, task: subtrees.SubtreeTask, path: Path, x_roots: np.ndarray,
               v_roots: np.ndarray, fixed: list[np.ndarray], part_path: Path, cells: dict[str, Any] | None,
               dense: bool, std: bool, ledger_json: str, release_id: str, tag: str = "") -> None:
    """Stage 3 of a task: the pass down from its roots' values (``x_roots``... : the task's
    roots only), the top-down steps, and its part written (atomically)."""
    t = task.index
    with np.load(path, allow_pickle=False) as f:
        state = {k: f[k] for k in f.files}
    if "exact" in state:
        stages.exact[t] = state["exact"]
    noisy, var = stages.unspill(task, state)
    est, _ = stages.down(task, noisy, var, x_roots, v_roots, fixed)
    stages.exact.pop(t, None)
    _write_part(part_path, _part_table(stages.tree, task, est, cells, stages.n_cells, dense, std), ledger_json,
                release_id, tag)


class _StageContext:
    """What a Dask worker needs to run a task's stages: the resolved release, the
    partition, the release key (exported: it is as secret as the data), the work and
    output folders (on storage the workers share) and how parts are written. Pickles
    without its built :class:`~hierdp.pipeline._SplitStages`, which each worker builds
    once (the same arrays as the client's: a deterministic function of these fields)."""

    def __init__(self, r: Any, part: subtrees.Partition, step: Any, tail: list[Any], n_cells: int, total: float,
                 key: NoiseKey, check_counts: Any, spill: Path, out: Path, cells: dict[str, Any] | None,
                 dense: bool, std: bool, ledger_json: str, release_id: str, tag: str = "") -> None:
        self.r, self.part, self.step, self.tail, self.n_cells, self.total = r, part, step, tail, n_cells, total
        self.key, self.check_counts = key.export(), check_counts
        self.spill, self.out, self.cells, self.dense, self.std = spill, out, cells, dense, std
        self.ledger_json, self.release_id, self.tag = ledger_json, release_id, tag
        self._stages: _SplitStages | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_stages", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stages = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<hierdp stage context: {self.part!r}>"

    def stages(self) -> _SplitStages:
        with self._lock:
            if self._stages is None:
                self._stages = _SplitStages(self.r, self.part, self.step, self.tail, self.n_cells, total=self.total,
                                            key=self.key.key(), check_counts=self.check_counts, spills=True)
            return self._stages


def _remote_up(ctx: _StageContext, t: int, counts: Any) -> None:
    """Stage 1 of task ``t`` on a Dask worker."""
    _up_work(ctx.stages(), ctx.part.task(t), counts, _spill_path(ctx.spill, t), ctx.tag)


def _remote_down(ctx: _StageContext, t: int, x_roots: np.ndarray, v_roots: np.ndarray,
                 fixed: list[np.ndarray]) -> None:
    """Stage 3 of task ``t`` on a Dask worker."""
    _down_work(ctx.stages(), ctx.part.task(t), _spill_path(ctx.spill, t), x_roots, v_roots, fixed,
               ctx.out / part_name(t), ctx.cells, ctx.dense, ctx.std, ctx.ledger_json, ctx.release_id, ctx.tag)


# ---------------------------------------------------------------------------- the runner
def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


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


def _lock(work: Path) -> int:
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


def _unlock(fd: int) -> None:
    _HELD_LOCKS.discard(fd)
    os.close(fd)


# ---------------------------------------------------------------------------- the output folder
class OutputFolderError(DataError):
    """A dataset folder that cannot take this release (it holds another release, it is in
    use, it holds the work folder or the input, ...)."""


#: the journal line recording a run's temporaries' token, before the first temporary is made
_TAG_LINE = "tmp "


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
                _, pq = _pyarrow()
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


def _check_dataset_holds(out: Path, own: str | None) -> None:
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


def _work_release_id(work: Path) -> str | None:
    """The release id of the release a work folder holds once charged (its ledger), else None."""
    try:
        lines = (work / _JOURNAL).read_text(encoding="utf-8").split("\n")
        if "charged" not in lines[:-1] or not (work / _RELEASE).is_file():
            return None
        rid = json.loads((work / _LEDGER).read_text(encoding="utf-8")).get("release_id")
    except (OSError, ValueError, AttributeError):
        return None
    return rid if isinstance(rid, str) and rid else None


def _journal_lines(work: Path) -> list[str] | None:
    """The whole lines of a work folder's journal (``[]`` when there is none; ``None`` when
    it is not a regular file)."""
    path = work / _JOURNAL
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return None
    return [ln for ln in path.read_text(encoding="utf-8", errors="replace").split("\n") if ln]


def _abandoned_start(work: Path) -> bool:
    """A work folder killed while it was set up, before its release's fingerprint was
    written: only its lock, an empty spill folder, a journal of its temporaries' tokens and
    temporaries carrying them. Nothing was drawn or charged there: the release starts afresh."""
    if not work.is_dir() or (work / _RELEASE).exists():
        return False
    lines = _journal_lines(work)
    if lines is None or not all(ln.startswith(_TAG_LINE) or _TAG_LINE.startswith(ln) for ln in lines):
        return False
    marks = [f"{_TMP}{ln[len(_TAG_LINE):]}-" for ln in lines if len(ln) > len(_TAG_LINE)]
    for p in work.iterdir():
        if p.name in ("lock", _JOURNAL) and not p.is_symlink():
            continue
        if p.name == _SPILL and p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
            continue
        if p.name.startswith(f".{_RELEASE}{_TMP}") and any(m in p.name for m in marks):
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
        if (work / _RELEASE).is_file() and lines is not None and "charged" in lines and "done" not in lines \
                and not resume:
            raise WorkFolderError(f"work folder {str(work)!r} holds an unfinished release: pass resume=True "
                                  "(--resume) to continue it, or choose an empty work folder")
        own = _work_release_id(work)
    _check_dataset_holds(o, own)


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


def _claim_dataset_folder(out: Path, own: str | None) -> int:
    """The dataset folder made (``_check_out``), locked for this run and checked to hold no
    other release (under the lock); returns the lock (:func:`_unlock`)."""
    _check_out(out)
    fd = _lock_out(out)
    try:
        _check_dataset_holds(out, own)
    except BaseException:
        _unlock(fd)
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
    charged = work is not None and _work_release_id(work) is not None
    if charged:
        return (f"the release is unfinished: {parts} part(s) in {o}/ so far, no {SUCCESS}; run the same command "
                f"with --resume (resume=True) to continue it (the budget is not charged again)")
    if parts:
        return (f"the release is unfinished: {parts} part(s) in {o}/, no {SUCCESS}, and it cannot be resumed; "
                "delete the folder and run the release again")
    return "no output was written; run the same command again (nothing was charged)"


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return float(ru.ru_utime + ru.ru_stime)


def _check_out(out: Path) -> None:
    """The output folder exists (its parent must) and a file can be written in it."""
    if out.exists() and not out.is_dir():
        raise DataError(f"output {str(out)!r} is a file; the dataset goes to a folder: give a folder path")
    if not out.exists() and not out.parent.is_dir():
        raise DataError(f"the output folder's parent {str(out.parent)!r} does not exist; create it first")
    try:
        out.mkdir(exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".probe{_TMP}", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise DataError(f"the output folder {str(out)!r} is not writable ({exc.strerror}); choose a folder you can "
                        "write to") from None


def _bar(total: int, desc: str, enabled: bool, stream: TextIO) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="task", disable=not enabled, file=stream, leave=True,
                dynamic_ncols=True, mininterval=0.5)


def release_to_dataset(
    tree: Tree,
    counts_of: Callable[[subtrees.SubtreeTask], Any],
    out: str | os.PathLike[str],
    *,
    workdir: str | os.PathLike[str],
    split: Any,
    n_cells: int = 1,
    cells: dict[str, Any] | None = None,
    source_id: str | None = None,
    workers: int = 2,
    resume: bool = False,
    dense: bool = False,
    std: bool = False,
    progress: bool = True,
    session: Session | Reservation | None = None,
    check_counts: bool | str = True,
    stream: TextIO | None = None,
    stats: dict[str, Any] | None = None,
    executor: Any = None,
    **keywords: Any,
) -> Ledger:
    """Release ``tree``'s counts by subtree into the Parquet dataset ``out/``, out of core.

    A split release (:func:`hierdp.release_by_subtree`, exact split GLS of Dawson et al.
    2023, Alg. 1-2, then top-down ``nonneg``/``round``) run in three stages on ``workers``
    threads with its state between stages in ``workdir``, resumable after any interruption
    (module docstring). It equals :func:`hierdp.release` with ``split`` and the same key
    (``seed``) bit for bit.

    Parameters
    ----------
    tree : the public tree.
    counts_of : ``counts_of(task)`` returns the true counts of ``task.nodes`` (the full
        tree's internal ids, in that order; ``(m,)`` or ``(m, n_cells)``), as for
        :func:`hierdp.release_by_subtree`; ``task.index == -1`` is the top part. It is
        called from ``workers`` threads at once: it must be thread-safe, and give the same
        counts again on a resumed run (the input named by ``source_id``).
    out : the dataset folder (created; its parent must exist). It holds exactly one release:
        a folder with another release's parts, ledger or ``_SUCCESS`` is refused
        (:class:`OutputFolderError`, before anything is charged; delete the folder to replace
        it), as is one another release is writing.
    workdir : the work folder (created owner-only; outside ``out``). Until the release
        completes it holds the secret release key: it is as sensitive as the data.
    split, n_cells, check_counts, session : as for :func:`hierdp.release_by_subtree`.
    cells : ``{name: labels}`` of the ``n_cells`` cells (row-major), for the cell columns.
    source_id : the input's identity (e.g. its files' names, sizes and mtimes), recorded in
        the release's fingerprint; needed to resume.
    workers : tasks run at once (threads: the compiled kernels release the GIL).
    resume : continue the unfinished release in ``workdir`` (same arguments and input).
    dense : write every cell of integer output (default: only non-zero cells).
    std : add the ``std`` column (NaN after a non-linear step, as ``ReleaseResult.frame``).
    progress : progress bars per stage and a summary on ``stream``.
    stream : where the progress and the summary go (default ``sys.stderr``).
    stats : a dict filled with the run's figures: ``times`` (seconds per stage),
        ``node_cells``, ``tasks``, ``peak_rss`` (bytes, the process's), ``cpu`` (CPU seconds of
        the process per parallel stage: CPU / wall time is how many cores were busy).
    executor : where stages 1 and 3 run: ``None`` (default) on ``workers`` threads of this
        process; a :class:`distributed.Client`: as Dask tasks on its cluster (``workers`` is
        then unused). On Dask, ``counts_of`` is called in this process as tasks are
        submitted (a few at a time) and may return a ``distributed.Future`` of the counts
        (counted on the cluster); each task ships with its counts and the stage context,
        which holds the release key; the workers write the spills and the parts, so
        ``workdir`` and ``out`` must be on storage the workers share (one machine, or a
        shared file system). The journal, the top solve and the ledger stay here. A task
        whose worker dies is rerun by Dask on another worker with the same keyed noise (the
        same result); past ``distributed.scheduler.allowed-failures`` deaths the run stops
        with one line and resumes. ``stats["cpu"]`` counts this process only.
    **keywords : those of :func:`hierdp.release` (``epsilon``, ``postprocess``, ``seed``, ...).

    Returns
    -------
    Ledger
        The release's ledger (also in ``out/_ledger.json`` and in every part).
    """
    t_start = time.perf_counter()
    err = stream if stream is not None else sys.stderr
    out, work = Path(out), Path(workdir)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise DataError(f"workers must be a positive integer, got {workers!r:.40}")
    runner = None
    if executor is not None:
        if not is_dask_client(executor):
            raise DataError(f"executor must be None (threads of this process) or a dask distributed.Client, got "
                            f"{type(executor).__name__}; pass executor=distributed.Client(...) or leave it out")
        runner = DaskStageRunner(executor)
    if resume and source_id is None:
        raise WorkFolderError("resume needs source_id= (the input's identity, e.g. its files' names, sizes and "
                              "mtimes) so the work folder can show it holds this input's release")
    r, part, step, tail = _split_setup(tree, n_cells, split, keywords)
    check_dataset_folders(out, workdir=work)  # the key and the counts never inside the published folder
    _check_out(out)
    _pyarrow()
    settings = {"split": split, "n_cells": n_cells, "cells": {k: [str(x) for x in v] for k, v in (cells or {}).items()},
                "source_id": source_id, "dense": dense, "std": std, "check_counts": check_counts,
                "keywords": keywords, "partition": [part.depth, part.n_tasks]}
    fp = _fingerprint(tree, settings)
    checkpoint = _Checkpoints()
    say = (lambda text: err.write(text + "\n")) if progress else (lambda text: None)

    # ---- the work folder: new, resumed, or finished
    release_file = work / _RELEASE
    if work.exists() and not work.is_dir():
        raise WorkFolderError(f"work folder {str(work)!r} is a file; give a folder")
    if os.path.lexists(work):  # this user's and private, or nothing in it is read, let alone trusted
        check_private_folder(work, "work folder", WorkFolderError)
    afresh = False
    if release_file.exists():
        stored = json.loads(release_file.read_text(encoding="utf-8"))
        if stored.get("id") != fp["id"]:
            raise WorkFolderError(f"work folder {str(work)!r} holds another release (different arguments, tree or "
                                  "input): its key must not serve this one; choose an empty work folder")
        journal = _Journal(work / _JOURNAL, checkpoint)
        if "done" in journal:
            if not (out / SUCCESS).exists():
                raise WorkFolderError(f"work folder {str(work)!r} records a finished release but {str(out)!r} has no "
                                      f"{SUCCESS}; a finished release is not made again (its key is gone): use an "
                                      "empty work folder for a new release")
            _check_dataset_holds(out, _work_release_id(work))  # still this release's dataset
            say(f"release already complete in {out} (work folder {work}): nothing to do")
            return Ledger.from_json((out / LEDGER_NAME).read_text(encoding="utf-8"))
        if "charged" in journal and not resume:
            raise WorkFolderError(f"work folder {str(work)!r} holds this release unfinished: pass resume=True "
                                  "(--resume) to continue it, or choose an empty work folder")
        afresh = "charged" not in journal  # stopped before any noise: start afresh
    elif work.is_dir() and any(not (p.name.startswith(COUNTS) and p.is_dir()) for p in work.iterdir()):
        if not _abandoned_start(work):
            raise WorkFolderError(f"work folder {str(work)!r} is not empty and holds no hierdp release; choose an "
                                  "empty or new folder")
        afresh = True  # killed while it was set up, before any noise: start afresh, resumed or not
    elif resume and not work.is_dir():
        raise WorkFolderError(f"work folder {str(work)!r} holds no release to resume; run without resume")
    _check_dataset_holds(out, _work_release_id(work))  # before the work folder is made: refused, nothing is left
    make_private_folder(work, "work folder", WorkFolderError)  # 0700 from the first byte, never adopted
    lock = _lock(work)
    out_lock = -1
    try:
        out_lock = _claim_dataset_folder(out, _work_release_id(work))  # one release at a time, checked under the lock
        if afresh:
            for p in work.iterdir():
                if p.is_file() and p.name not in (_RELEASE, "lock"):
                    p.unlink()
        spill = work / _SPILL
        spill.mkdir(mode=0o700, exist_ok=True)
        journal = _Journal(work / _JOURNAL, checkpoint)
        tags = [ln[len(_TAG_LINE):] for ln in journal.done if ln.startswith(_TAG_LINE)]
        for folder in (work, spill, out):  # this release's leftovers only: names carrying its runs' tokens
            _remove_temporaries(folder, tags)
        _remove_untagged_temporaries(work)
        tag = secrets.token_hex(8)  # this run's temporaries carry it: journalled before the first one is made
        journal.note(_TAG_LINE + tag)
        if not release_file.exists():
            _write_text(release_file, json.dumps(fp, indent=1), "the release's fingerprint", tag=tag)
            checkpoint()

        # ---- the key and the ledger: made and charged once, before any noise
        if "charged" not in journal:
            check(r, session)
            key = noise_key(r.seed)
            journal.note(f"key {_save_key(work / _KEY, key, tag)}")  # binds the release to its key
            checkpoint()
            acc, decomposition = open_account(r, tree, None)
            stage_total = r.total - acc.total  # before the account is charged below
            stages = _SplitStages(r, part, step, tail, n_cells, total=stage_total, key=key,
                                  check_counts=check_counts, spills=True)
            ticket, sess = _reserve(session, r)
            meas = stages.summary()
            ledger = build_ledger(r, tree, meas, account(r, acc, meas), decomposition=decomposition,
                                  rng=make_rng(r.seed))
            _settle_split(r, ledger, part, check_counts, sess, ticket)
            _write_text(work / _LEDGER, ledger.to_json(), "the ledger", tag=tag)
            journal.add("charged")
        else:
            if not (work / _KEY).exists():
                raise WorkFolderError(f"work folder {str(work)!r} has lost its release key; the release cannot be "
                                      "resumed: use an empty work folder for a new release")
            key = _load_key(work / _KEY)
            _check_key(work, key, journal)
            acc, _ = open_account(r, tree, None)
            stage_total = r.total - acc.total
            stages = _SplitStages(r, part, step, tail, n_cells, total=stage_total, key=key,
                                  check_counts=check_counts, spills=True)
            ledger = Ledger.from_json((work / _LEDGER).read_text(encoding="utf-8"))
            if r.seed is not None:
                warn(f"release with seed={r.seed}: reproducible randomness is for tests and benchmarks; the "
                     "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning, stacklevel=2)
            say(f"resuming the release in {work}")
        ledger_json = ledger.to_json()
        times: dict[str, float] = {}
        cpu: dict[str, float] = {}
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hierdp-outofcore") if runner is None \
            else None
        ctx_future: Any = None

        def run(name: str, todo: list[int], job: Callable[[int], None], remote: Callable[[int], Any],
                done: Callable[[int], None]) -> None:
            t0, c0 = time.perf_counter(), _cpu_seconds()
            with _bar(len(todo), name, progress, err) as bar:
                if pool is not None:
                    for _ in pool.map(job, todo):  # results in order; the first error stops the stage
                        bar.update(1)
                else:  # Dask tasks; the client writes the journal as each one ends
                    def ended(t: int) -> None:
                        done(t)
                        bar.update(1)

                    cast(Any, runner).run(name, todo, remote, ended)
            times[name] = time.perf_counter() - t0
            cpu[name] = _cpu_seconds() - c0

        def spill_of(t: int) -> Path:
            return _spill_path(spill, t)

        # ---- stage 1: measure and pass up, per task
        def up(t: int) -> None:
            task = part.task(t)
            _up_work(stages, task, counts_of(task), spill_of(t), tag)
            checkpoint()
            journal.add(f"up {t}")

        def up_remote(t: int) -> Any:
            return cast(Any, runner).client.submit(_remote_up, ctx_future, t, counts_of(part.task(t)), pure=False)

        def finished(stage: str) -> Callable[[int], None]:
            def done(t: int) -> None:  # the client's half of a task run on Dask: as the local job's end
                checkpoint()
                journal.add(f"{stage} {t}")
            return done

        try:
            if runner is not None:
                ctx_future = runner.ship(_StageContext(r, part, step, tail, n_cells, stage_total, key,
                                                       check_counts, spill, out, cells, dense, std, ledger_json,
                                                       ledger.release_id, tag))
            run("measure + pass up", [t for t in range(part.n_tasks) if f"up {t}" not in journal], up,
                up_remote, finished("up"))

            # ---- stage 2: the top, the roots' arrays on disk in blocks of cells
            t0 = time.perf_counter()
            top = _top_task(part)
            top_file = work / "top.npz"  # the top's arrays in an older work folder (read on resume)
            top_dir = work / "top"  # the top's arrays over every root, in blocks of cells, once solved
            top_names = ["x_roots", "v_roots"] + [f"fixed{j}" for j in range(len(tail))]

            kept = top_file.exists() or (work / "top-x_roots.npy").exists() or not stages.gls or all(
                (top_dir / f"{name}.json").exists() for name in top_names)
            if "top" not in journal or not kept:  # not done, or its arrays gone since: (re)solved, the same numbers
                top_tmp = work / "top.partial"  # the same while the top is solved: renamed when done
                for d in (top_tmp, top_dir):
                    shutil.rmtree(d, ignore_errors=True)
                top_tmp.mkdir(mode=0o700)
                roots_all = _RootCounts(part.roots.size, n_cells)
                zu: list[ColumnsOnDisk] = []  # every root's (z, u), on disk in blocks of cells
                try:
                    for t in range(part.n_tasks):
                        with np.load(spill_of(t)) as f:
                            roots_all.add(f["roots"])
                            if stages.gls:
                                z, u = f["z"], f["u"]
                                if not zu:
                                    zu = [stages.roots_columns(top_tmp, "z", z.shape[1]),
                                          stages.roots_columns(top_tmp, "u", u.shape[1])]
                                zu[0].append(z)
                                zu[1].append(u)
                                del z, u
                    top_counts = counts_of(top) if top.n_nodes else None
                    if runner is not None:  # on Dask, counts_of may give a future: the top is solved here
                        top_counts = runner.value(top_counts)
                    tnoisy, tvar = stages.top_measured(top, top_counts, roots_all.value())
                    del roots_all
                    if zu:
                        zu[0].finish()
                        zu[1].finish()
                        sol = stages.top_on_disk(tnoisy, tvar, zu[0], zu[1], top_tmp)
                        for a in [sol.x_roots, sol.v_roots, *sol.fixed]:
                            a.save_layout()
                            a.fsync()
                    else:  # no GLS: nothing goes down from the top
                        sol = stages.top(tnoisy, tvar, None, None)
                    _fsync_dir(top_tmp)
                except OSError as exc:
                    if exc.errno == errno.ENOSPC or "No space left" in str(exc):
                        raise _disk_full(top_tmp, "the top's state") from None
                    raise
                finally:
                    for cols in zu:
                        cols.close()
                checkpoint()
                if top.n_nodes:
                    est, _ = stages.finish_top(top, tnoisy, tvar, sol)
                    _write_part(out / part_name(-1), _part_table(tree, top, est, cells, n_cells, dense, std),
                                ledger_json, ledger.release_id, tag)
                    checkpoint()
                del sol
                stages.exact.pop(-1, None)
                os.replace(top_tmp, top_dir)
                _fsync_dir(work)
                checkpoint()
                journal.add("top")
            x_roots: Any
            v_roots: Any
            fixed: list[Any]
            if top_file.exists():  # a work folder from before the top's arrays were kept one per file
                with np.load(top_file) as f:
                    x_roots, v_roots = f["x_roots"], f["v_roots"]
                    fixed = [f[f"fixed{j}"] for j in range(len(tail))]
            elif (work / "top-x_roots.npy").exists():  # ... or one file per array, rows in order
                x_roots, v_roots, *fixed = [_RowsOnDisk(work / f"top-{name}.npy") for name in top_names]
            elif stages.gls:
                x_roots, v_roots, *fixed = [ColumnsOnDisk.open(top_dir, name) for name in top_names]
            else:
                x_roots, v_roots, fixed = np.zeros((0, n_cells)), np.zeros((0, 1)), []
            times["top"] = time.perf_counter() - t0

            # ---- stage 3: pass down, top-down steps, the parts
            def roots_of(task: subtrees.SubtreeTask) -> slice:
                a = int(np.searchsorted(part.roots, task.roots[0])) if task.roots.size else 0
                return slice(a, a + task.roots.size)

            def down(t: int) -> None:
                task = part.task(t)
                s = roots_of(task)
                _down_work(stages, task, spill_of(t), x_roots[s], v_roots[s], [fx[s] for fx in fixed],
                           out / part_name(t), cells, dense, std, ledger_json, ledger.release_id, tag)
                checkpoint()
                journal.add(f"down {t}")

            def down_remote(t: int) -> Any:
                s = roots_of(part.task(t))
                return cast(Any, runner).client.submit(_remote_down, ctx_future, t, x_roots[s], v_roots[s],
                                                       [fx[s] for fx in fixed], pure=False)

            run("pass down + write", [t for t in range(part.n_tasks) if f"down {t}" not in journal], down,
                down_remote, finished("down"))
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

        # ---- the end: ledger, then _SUCCESS; the secrets go
        _write_text(out / LEDGER_NAME, ledger_json, "the ledger", mode=0o644, tag=tag)
        checkpoint()
        _write_text(out / SUCCESS, "", "the success marker", mode=0o644, tag=tag)
        checkpoint()
        journal.add("done")
        (work / _KEY).unlink(missing_ok=True)
        for p in spill.iterdir():
            p.unlink(missing_ok=True)
        spill.rmdir()
        top_file.unlink(missing_ok=True)
        for name in top_names:
            (work / f"top-{name}.npy").unlink(missing_ok=True)
        shutil.rmtree(top_dir, ignore_errors=True)
        _fsync_dir(work)
        cells_total = tree.n_nodes * n_cells
        total = time.perf_counter() - t_start
        if stats is not None:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            stats.update(times=dict(times, total=total), node_cells=cells_total, tasks=part.n_tasks,
                         peak_rss=_peak_rss_bytes(), cpu=dict(cpu, total=ru.ru_utime + ru.ru_stime))
        if progress:
            stage_text = ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
            say(f"released {cells_total:,} node-cells in {part.n_tasks:,} tasks + the top to {out} in {total:.2f} s "
                f"({cells_total / max(total, 1e-9):,.0f} node-cells/s; {stage_text}); peak RSS "
                f"{_peak_rss_bytes() / 1024**2:,.0f} MiB")
        return ledger
    finally:
        if out_lock >= 0:
            _unlock(out_lock)
        _unlock(lock)  # releases the lock
