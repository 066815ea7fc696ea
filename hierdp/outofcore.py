"""Out-of-core split releases to a partitioned Parquet dataset: parallel, resumable, crash-safe.

:func:`release_to_dataset` runs a split release (:mod:`hierdp.subtrees`, the stages of
:class:`hierdp.execution.stages.SplitStages` run by the one driver of every split release,
:mod:`hierdp.execution.driver`) in three stages:

1. **up**, per task on ``workers`` threads: the task's counts (``counts_of(task)``, the only
   way data come in), their measurement and the pass up; the task's state (noisy values,
   variances, the roots' ``(z, u)``) is spilled to the work folder;
2. **top**: the levels above the split, solved from every root's ``(z, u)``, the roots'
   arrays on disk in blocks of cells (:class:`~hierdp._kernels.columns.ColumnsOnDisk`:
   solved in ``top.partial/``, renamed to ``top/`` when whole); the top part is written,
   and the roots' values the pass down starts from are read back by each task's roots;
3. **down**, per task on ``workers`` threads: the pass down (and top-down ``nonneg`` /
   ``round``) from the spilled state; the task's part is written.

Memory is bounded by ``workers`` tasks (the largest) plus the top stage, which holds the
top part's arrays, the roots' true counts (once) and one block of cells of the roots'
(:meth:`hierdp.execution.stages.SplitStages.top_on_disk`). With
``executor=`` a :class:`distributed.Client`, stages 1 and 3 run as Dask tasks on its
cluster instead (the workers write the spills and parts; :mod:`hierdp.execution.dask`).

*Spill or recompute.* Stage 3 needs a task's noisy measurements again. They are spilled
(:meth:`hierdp.execution.stages.SplitStages.spill`: the noisy values, or for ``marginals`` the
noisy marginals, integers in the narrowest type that holds them: about 2.6 B per node-cell
on the census shape instead of 16 B for the rotated values and variances) rather than
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
refused (:mod:`hierdp._kernels.private`; never adopted), and the key, the spills and the
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
import json
import os
import resource
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast
from warnings import warn

import numpy as np
import pandas as pd

from hierdp import subtrees
from hierdp._kernels.columns import ColumnsOnDisk
from hierdp._kernels.private import check_private_folder, make_private_folder
from hierdp.accounting.ledger import Ledger
from hierdp.errors import DataError, NotForPublicationWarning
from hierdp.execution.dask import DaskExecutor, is_dask_client
from hierdp.execution.driver import StageContext, run_split, settle_split
from hierdp.execution.executors import close_executor, resolve_executor
from hierdp.execution.folders import (
    COUNTS,
    JOURNAL,
    KEY,
    KILL_ENV,
    LEDGER,
    LEDGER_NAME,
    RELEASE,
    SPILL,
    SUCCESS,
    TAG_LINE,
    Checkpoints,
    Journal,
    OutputFolderError,
    WorkFolderError,
    abandoned_start,
    atomic,
    check_dataset_folders,
    check_dataset_holds,
    check_dataset_target,
    check_key,
    check_out,
    claim_dataset_folder,
    counts_folder,
    describe_unfinished,
    disk_full,
    fingerprint,
    fsync_dir,
    load_key,
    lock_folder,
    need_pyarrow,
    part_name,
    remove_temporaries,
    remove_untagged_temporaries,
    save_key,
    unlock,
    work_release_id,
    write_text,
)
from hierdp.execution.stages import RootCounts, SplitStages, TopSolution, split_setup
from hierdp.execution.steps import account, build_ledger, check, noise_key, open_account, reserve
from hierdp.execution.stores import read_roots_columns
from hierdp.io import LEDGER_METADATA_KEY, RELEASE_ID_METADATA_KEY
from hierdp.rng import make_rng
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.accounting.session import Reservation, Session
    from hierdp.measurements import Estimate

__all__ = ["release_to_dataset", "check_dataset_target", "check_dataset_folders", "describe_unfinished",
           "WorkFolderError", "OutputFolderError", "part_name", "SUCCESS", "LEDGER_NAME", "KILL_ENV", "COUNTS",
           "counts_folder"]


# ---------------------------------------------------------------------------- fingerprint and key


# ---------------------------------------------------------------------------- the parts
def _label_arrays(tree: Tree, nodes: np.ndarray) -> dict[str, Any]:
    """Per level below the root, the label of each node's ancestor at that level (null
    below the node's level), for ``nodes`` (internal ids); one vectorised step per level."""
    pa, _ = need_pyarrow()
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


def part_table(tree: Tree, task: subtrees.SubtreeTask, est: Estimate, cells: dict[str, Any] | None,
                n_cells: int, dense: bool, with_std: bool) -> Any:
    pa, _ = need_pyarrow()
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


def write_part(path: Path, table: Any, ledger_json: str, release_id: str, tag: str = "") -> None:
    pa, pq = need_pyarrow()
    meta = {LEDGER_METADATA_KEY.encode(): ledger_json.encode(), RELEASE_ID_METADATA_KEY.encode(): release_id.encode()}
    table = table.replace_schema_metadata(meta)
    with atomic(path, f"part {path.name}", mode=0o644, tag=tag) as tmp:
        try:
            pq.write_table(table, tmp)
        except pa.ArrowException as exc:  # pyarrow's own writer wraps the OS error
            if "No space left" in str(exc):
                raise OSError(errno.ENOSPC, "No space left on device") from None
            raise


# ---------------------------------------------------------------------------- the store and the sink
class WorkFolderStore:
    """The state store of a resumable release (:mod:`hierdp.execution.driver`): each task's
    state spilled to ``work/spill/`` (atomically, under this run's ``tag``), each finished
    task journalled, the top's arrays over every root solved in ``work/top.partial/`` and
    renamed to ``work/top/`` when whole. Pickles without its journal (the driver's half:
    a remote task only writes its own spill file)."""

    spills = True
    #: a task in another process reads and writes the folder itself (shared storage)
    shared = True

    def __init__(self, work: Path, journal: Journal, checkpoint: Checkpoints, tag: str, n_tasks: int, n_fixed: int,
                 gls: bool) -> None:
        self.work, self.spill, self.tag = work, work / SPILL, tag
        self.journal: Journal | None = journal
        self.checkpoint: Checkpoints | None = checkpoint
        self.n_tasks, self.n_fixed, self.gls = n_tasks, n_fixed, gls
        self.names = ["x_roots", "v_roots"] + [f"fixed{j}" for j in range(n_fixed)]
        self._open: list[ColumnsOnDisk] = []

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("journal", "checkpoint", "_open")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.journal = self.checkpoint = None
        self._open = []

    def path(self, t: int) -> Path:
        """Task ``t``'s spill file."""
        return self.spill / f"task-{t:05d}.npz"

    def todo(self, stage: str) -> list[int]:
        journal = cast(Journal, self.journal)
        return [t for t in range(self.n_tasks) if f"{stage} {t}" not in journal]

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> None:
        """On the worker: the task's spilled measurements, its roots' counts (to check the top
        part's on a resumed run), ``(z, u)`` and its invariant rows' exact values, atomically."""
        roots, z, u = up
        arrays = {**st.spill(task, noisy, var), "roots": roots}
        if z is not None and u is not None:
            arrays.update(z=z, u=u)
        exact = st.exact.pop(task.index, None)
        if exact is not None:
            arrays["exact"] = exact
        with atomic(self.path(task.index), f"task {task.index}'s state", tag=self.tag) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **cast(Any, arrays))

    def done(self, stage: str, t: int, kept: Any = None) -> None:
        cast(Checkpoints, self.checkpoint)()
        cast(Journal, self.journal).add(f"{stage} {t}")

    def gather(self, st: SplitStages, folder: Path | None) -> tuple[np.ndarray, Any, Any]:
        """Every root's counts and ``(z, u)`` read back from the spill files (a resumed run's
        too), ``(z, u)`` into blocks of cells on disk in ``folder``."""
        roots = RootCounts(st.part.roots.size, st.n_cells)
        z, u = read_roots_columns(st, cast(Path, folder), self.n_tasks, self.path, self.track, roots)
        return roots.value(), z, u

    def load(self, t: int) -> dict[str, np.ndarray]:
        """Task ``t``'s spilled state (read where the task runs: the folder is shared)."""
        with np.load(self.path(t), allow_pickle=False) as f:
            return {k: f[k] for k in f.files if k not in ("roots", "z", "u")}

    def get(self, st: SplitStages, task: subtrees.SubtreeTask, state: dict[str, np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
        state = dict(state)
        if "exact" in state:
            st.exact[task.index] = state.pop("exact")
        return st.unspill(task, state)

    def put_top(self, top: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        """The top part's measurements are not kept: its part is written once solved."""

    def top_solved(self) -> bool:
        journal = cast(Journal, self.journal)
        kept = not self.gls or all((self.work / "top" / f"{name}.json").exists() for name in self.names)
        return "top" in journal and kept  # not done, or its arrays gone since: (re)solved, the same numbers

    def track(self, cols: ColumnsOnDisk) -> ColumnsOnDisk:
        self._open.append(cols)
        return cols

    @contextmanager
    def top_space(self) -> Iterator[Path]:
        """``work/top.partial/`` while the top is solved, renamed to ``work/top/`` and
        journalled once it is whole (and its part written)."""
        tmp, final = self.work / "top.partial", self.work / "top"
        for d in (tmp, final):
            shutil.rmtree(d, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        try:
            yield tmp
        except OSError as exc:
            if exc.errno == errno.ENOSPC or "No space left" in str(exc):
                raise disk_full(tmp, "the top's state") from None
            raise
        finally:
            for cols in self._open:
                cols.close()
            self._open.clear()
        os.replace(tmp, final)
        fsync_dir(self.work)
        cast(Checkpoints, self.checkpoint)()
        cast(Journal, self.journal).add("top")

    def keep_top(self, sol: TopSolution) -> None:
        """The top's arrays over every root made durable before its part is written."""
        for a in [sol.x_roots, sol.v_roots, *sol.fixed]:
            if isinstance(a, ColumnsOnDisk):
                a.save_layout()
                a.fsync()
        fsync_dir(self.work / "top.partial")
        cast(Checkpoints, self.checkpoint)()

    def top_solution(self) -> tuple[Any, Any, list[Any]]:
        """The roots' arrays, read by row ranges. (A work folder of an older version kept
        them otherwise: its top is solved again from the spills, the same numbers.)"""
        if self.gls:
            x, v, *fixed = [ColumnsOnDisk.open(self.work / "top", name) for name in self.names]
            return x, v, fixed
        return np.zeros((0, 1)), np.zeros((0, 1)), []

    def finish(self) -> None:
        """The release is complete: the key, the spills and the top's arrays go."""
        (self.work / KEY).unlink(missing_ok=True)
        if self.spill.is_dir():
            for p in self.spill.iterdir():
                p.unlink(missing_ok=True)
            self.spill.rmdir()
        (self.work / "top.npz").unlink(missing_ok=True)
        for name in self.names:
            (self.work / f"top-{name}.npy").unlink(missing_ok=True)
        shutil.rmtree(self.work / "top", ignore_errors=True)
        fsync_dir(self.work)


class DatasetSink:
    """Each part written by its task (on the worker) as ``out/part-NNNNN.parquet``, the
    ledger in its metadata (:mod:`hierdp.execution.driver`'s sink)."""

    def __init__(self, out: Path, tree: Tree, n_cells: int, cells: dict[str, Any] | None, dense: bool, std: bool,
                 ledger_json: str, release_id: str, tag: str) -> None:
        self.out, self.tree, self.n_cells, self.cells, self.dense, self.std = out, tree, n_cells, cells, dense, std
        self.ledger_json, self.release_id, self.tag = ledger_json, release_id, tag

    def part(self, task: subtrees.SubtreeTask, est: Estimate, meas: Any = None) -> int:
        """Write ``task``'s part; returns its number of rows."""
        table = part_table(self.tree, task, est, self.cells, self.n_cells, self.dense, self.std)
        write_part(self.out / part_name(task.index), table, self.ledger_json, self.release_id, self.tag)
        return int(table.num_rows)

    def collect(self, task: subtrees.SubtreeTask, got: Any) -> None:
        """Nothing to do in the driver: the task wrote its part."""

    def top(self, task: subtrees.SubtreeTask, est: Estimate, meas: Any = None) -> None:
        self.part(task, est, meas)

    def finish(self, checkpoint: Callable[[], None] = lambda: None) -> None:
        """The ledger, then ``_SUCCESS``: the dataset is complete."""
        write_text(self.out / LEDGER_NAME, self.ledger_json, "the ledger", mode=0o644, tag=self.tag)
        checkpoint()
        write_text(self.out / SUCCESS, "", "the success marker", mode=0o644, tag=self.tag)
        checkpoint()


# ---------------------------------------------------------------------------- the runner
def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return float(ru.ru_utime + ru.ru_stime)


#: seconds between redraws of a terminal's bar while no task finishes (its clock keeps running)
_TICK = 1.0


@contextmanager
def _bar(total: int, desc: str, enabled: bool, stream: TextIO) -> Iterator[Any]:
    """A stage's progress bar: redrawn twice a second on a terminal, once a minute into a log
    file (where every redraw is kept: thousands of tasks made megabytes of bars). On a
    terminal its elapsed time also moves between tasks (every :data:`_TICK` s): a stage of one
    long task (a split whose subtrees all fit one task) showed ``0/1`` frozen for minutes."""
    import threading

    from tqdm import tqdm

    try:
        terminal = bool(stream.isatty())
    except (AttributeError, ValueError):
        terminal = False
    bar = tqdm(total=total, desc=desc, unit="task", disable=not enabled, file=stream, leave=True,
               dynamic_ncols=True, mininterval=0.5 if terminal else 60.0)
    stop = threading.Event()
    ticker = None
    if enabled and terminal:
        def tick() -> None:
            while not stop.wait(_TICK):
                bar.refresh()

        ticker = threading.Thread(target=tick, name="hierdp-progress", daemon=True)
        ticker.start()
    try:
        with bar:
            yield bar
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()


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
    executor : where stages 1 and 3 run (:mod:`hierdp.execution`): ``None`` (default) on
        ``workers`` threads of this process; a registered executor's name (``"inline"``,
        ``"threads"``, ``"dask"``, a plugin's; built with ``workers``) or an executor object;
        a :class:`distributed.Client`: as Dask tasks on its cluster. An executor in other
        processes (``dask``) gets each task's counts from ``counts_of`` called in this process
        as tasks are handed out (a ``distributed.Future`` of the counts, counted on the
        cluster, is fine) and ships them with the task and the stage context, which holds the
        release key; its workers write the spills and the parts, so ``workdir`` and ``out``
        must be on storage the workers share (one machine, or a shared file system). The
        journal, the top solve and the ledger stay here. A task whose worker dies is rerun by
        Dask with the same keyed noise (the same result); past
        ``distributed.scheduler.allowed-failures`` deaths the run stops with one line and
        resumes. ``stats["cpu"]`` counts this process only.
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
    ex = DaskExecutor(executor) if is_dask_client(executor) else resolve_executor(executor, workers)
    if resume and source_id is None:
        raise WorkFolderError("resume needs source_id= (the input's identity, e.g. its files' names, sizes and "
                              "mtimes) so the work folder can show it holds this input's release")
    r, part, step, tail = split_setup(tree, n_cells, split, keywords)
    check_dataset_folders(out, workdir=work)  # the key and the counts never inside the published folder
    check_out(out)
    need_pyarrow()
    settings = {"split": split, "n_cells": n_cells, "cells": {k: [str(x) for x in v] for k, v in (cells or {}).items()},
                "source_id": source_id, "dense": dense, "std": std, "check_counts": check_counts,
                "keywords": keywords, "partition": [part.depth, part.n_tasks]}
    fp = fingerprint(tree, settings)
    checkpoint = Checkpoints()
    say = (lambda text: err.write(text + "\n")) if progress else (lambda text: None)
    if part.n_tasks < workers and part.roots.size > part.n_tasks:
        say(f"the {part.roots.size:,} subtrees at level {part.level!r} fit {part.n_tasks} task"
            f"{'s' if part.n_tasks > 1 else ''} for {workers} workers: a smaller split task_memory cuts more tasks "
            "(the same release, more of it at once)")

    # ---- the work folder: new, resumed, or finished
    release_file = work / RELEASE
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
        journal = Journal(work / JOURNAL, checkpoint)
        if "done" in journal:
            if not (out / SUCCESS).exists():
                raise WorkFolderError(f"work folder {str(work)!r} records a finished release but {str(out)!r} has no "
                                      f"{SUCCESS}; a finished release is not made again (its key is gone): use an "
                                      "empty work folder for a new release")
            check_dataset_holds(out, work_release_id(work))  # still this release's dataset
            say(f"release already complete in {out} (work folder {work}): nothing to do")
            return Ledger.from_json((out / LEDGER_NAME).read_text(encoding="utf-8"))
        if "charged" in journal and not resume:
            raise WorkFolderError(f"work folder {str(work)!r} holds this release unfinished: pass resume=True "
                                  "(--resume) to continue it, or choose an empty work folder")
        afresh = "charged" not in journal  # stopped before any noise: start afresh
    elif work.is_dir() and any(not (p.name.startswith(COUNTS) and p.is_dir()) for p in work.iterdir()):
        if not abandoned_start(work):
            raise WorkFolderError(f"work folder {str(work)!r} is not empty and holds no hierdp release; choose an "
                                  "empty or new folder")
        afresh = True  # killed while it was set up, before any noise: start afresh, resumed or not
    elif resume and not work.is_dir():
        raise WorkFolderError(f"work folder {str(work)!r} holds no release to resume; run without resume")
    check_dataset_holds(out, work_release_id(work))  # before the work folder is made: refused, nothing is left
    make_private_folder(work, "work folder", WorkFolderError)  # 0700 from the first byte, never adopted
    lock = lock_folder(work)
    out_lock = -1
    try:
        out_lock = claim_dataset_folder(out, work_release_id(work))  # one release at a time, checked under the lock
        if afresh:
            for p in work.iterdir():
                if p.is_file() and p.name not in (RELEASE, "lock"):
                    p.unlink()
        spill = work / SPILL
        spill.mkdir(mode=0o700, exist_ok=True)
        journal = Journal(work / JOURNAL, checkpoint)
        tags = [ln[len(TAG_LINE):] for ln in journal.done if ln.startswith(TAG_LINE)]
        for folder in (work, spill, out):  # this release's leftovers only: names carrying its runs' tokens
            remove_temporaries(folder, tags)
        remove_untagged_temporaries(work)
        tag = secrets.token_hex(8)  # this run's temporaries carry it: journalled before the first one is made
        journal.note(TAG_LINE + tag)
        if not release_file.exists():
            write_text(release_file, json.dumps(fp, indent=1), "the release's fingerprint", tag=tag)
            checkpoint()

        # ---- the key and the ledger: made and charged once, before any noise
        if "charged" not in journal:
            check(r, session)
            key = noise_key(r.seed)
            journal.note(f"key {save_key(work / KEY, key, tag)}")  # binds the release to its key
            checkpoint()
            acc, decomposition = open_account(r, tree, None)
            stage_total = r.total - acc.total  # before the account is charged below
            stages = SplitStages(r, part, step, tail, n_cells, total=stage_total, key=key,
                                 check_counts=check_counts, spills=True)
            ticket, sess = reserve(session, r)
            meas = stages.summary()
            ledger = build_ledger(r, tree, meas, account(r, acc, meas), decomposition=decomposition,
                                  rng=make_rng(r.seed))
            settle_split(r, ledger, part, check_counts, sess, ticket)
            write_text(work / LEDGER, ledger.to_json(), "the ledger", tag=tag)
            journal.add("charged")
        else:
            if not (work / KEY).exists():
                raise WorkFolderError(f"work folder {str(work)!r} has lost its release key; the release cannot be "
                                      "resumed: use an empty work folder for a new release")
            key = load_key(work / KEY)
            check_key(work, key, journal)
            acc, _ = open_account(r, tree, None)
            stage_total = r.total - acc.total
            stages = SplitStages(r, part, step, tail, n_cells, total=stage_total, key=key,
                                 check_counts=check_counts, spills=True)
            ledger = Ledger.from_json((work / LEDGER).read_text(encoding="utf-8"))
            if r.seed is not None:
                warn(f"release with seed={r.seed}: reproducible randomness is for tests and benchmarks; the "
                     "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning, stacklevel=2)
            say(f"resuming the release in {work}")
        ledger_json = ledger.to_json()
        times: dict[str, float] = {}
        cpu: dict[str, float] = {}

        @contextmanager
        def stage(name: str, n: int) -> Iterator[Callable[[], None]]:
            t0, c0 = time.perf_counter(), _cpu_seconds()
            if name == "top":
                yield lambda: None
            else:
                with _bar(n, name, progress, err) as bar:
                    yield lambda: bar.update(1)
                cpu[name] = _cpu_seconds() - c0
            times[name] = time.perf_counter() - t0

        store = WorkFolderStore(work, journal, checkpoint, tag, part.n_tasks, len(tail), stages.gls)
        sink = DatasetSink(out, tree, n_cells, cells, dense, std, ledger_json, ledger.release_id, tag)
        ctx = StageContext(r, part, step, tail, n_cells, total=stage_total, key=key, check_counts=check_counts,
                           store=store, sink=sink, counts_of=counts_of, stages=stages)
        try:
            run_split(ctx, ex, stage=stage)
        finally:
            if ex is not executor:  # made here (from workers or a name): closed here
                close_executor(ex)

        # ---- the end: ledger, then _SUCCESS; the secrets go
        sink.finish(checkpoint)
        journal.add("done")
        store.finish()
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
            unlock(out_lock)
        unlock(lock)  # releases the lock
