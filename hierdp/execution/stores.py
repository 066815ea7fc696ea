"""Where a split release keeps each task's measurements between its pass up and its pass
down: in memory, spilled to a temporary folder, or (out of core) in a journaled work folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import subtrees
from hierdp._engine.columns import ColumnsOnDisk
from hierdp.execution.stages import RootCounts, SplitStages, TopSolution

if TYPE_CHECKING:
    pass


class RowsOnDisk:
    """A ``(rows, ...)`` array kept in a ``.npy`` file and read back by row ranges
    (``a[i:j]``) with plain reads, not a mapping: memory holds only the rows read. An
    out-of-core work folder of the previous version kept the top stage's arrays over every
    subtree root this way (one file each); a resume still reads them. The top stage now
    keeps them in blocks of cells (:class:`~hierdp._engine.columns.ColumnsOnDisk`)."""

    def __init__(self, path: Path) -> None:
        """The ``.npy`` file at ``path`` (written by :meth:`write`), not read yet."""
        head = np.load(path, mmap_mode="r", allow_pickle=False)  # the header only: mapped, no page read
        self.path, self.shape, self.dtype = Path(path), tuple(head.shape), head.dtype
        self._offset = int(head.offset)
        del head
        self._row = int(np.prod(self.shape[1:], dtype=np.int64))

    @staticmethod
    def write(path: Path, a: np.ndarray) -> None:
        """``a`` into a ``.npy`` file at ``path``."""
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, np.ascontiguousarray(a), allow_pickle=False)

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, s: slice) -> np.ndarray:
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("rows on disk are read by a range of rows (a[i:j])")
        i, j, _ = s.indices(self.shape[0])
        n = max(j - i, 0)
        out = np.fromfile(self.path, dtype=self.dtype, count=n * self._row,
                          offset=self._offset + i * self._row * self.dtype.itemsize)
        return out.reshape((n,) + tuple(self.shape[1:]))


class MemoryStore:
    """Every task's measurements in full arrays over the tree (the in-memory result), and
    each task's pass-up output kept in memory until the top gathers it. For executors that
    share this process's memory (:attr:`hierdp.execution.Executor.local`)."""

    #: the tasks' spilled form is not used: the measurements stay as measured
    spills = False
    #: the top's arrays over every root stay in memory
    top_folder: Path | None = None

    def __init__(self, part: subtrees.Partition, n_cells: int, dtype: Any, per_cell: bool = False) -> None:
        self.part = part
        n = part.tree.n_nodes
        self.noisy = np.zeros((n, n_cells), dtype=dtype)
        # per_level: one variance per node; marginals: one per rotated column
        self.var = np.full((n, n_cells) if per_cell else n, np.inf)
        self._roots = RootCounts(part.roots.size, n_cells)
        self._zu: list[np.ndarray] = []  # every root's (z, u), filled in place as tasks finish
        self._at = 0
        self._tracked: list[Any] = []
        self._top: tuple[Any, Any, list[Any]] = (None, None, [])

    def todo(self, stage: str) -> list[int]:
        """The tasks ``stage`` (``"up"`` or ``"down"``) still has to run: all of them."""
        return list(range(self.part.n_tasks))

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> Any:
        """Stage 1's output of ``task`` (on the worker): its rows written, its pass-up output
        returned to the driver (:meth:`done`)."""
        if noisy.dtype != self.noisy.dtype:
            self.noisy = self.noisy.astype(np.result_type(self.noisy.dtype, noisy.dtype))
        self.noisy[task.nodes] = noisy
        self.var[task.nodes] = var
        return up

    def put_top(self, top: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        """The top part's measurements (in the driver), kept with the tasks'."""
        self.put(cast(Any, None), top, noisy, var, cast(Any, None))

    def done(self, stage: str, t: int, kept: Any = None) -> None:
        """The driver's half of a task's ``stage``, in task order: after the pass up, its
        roots' counts and ``(z, u)`` copied into the arrays over every root (one copy)."""
        if stage != "up":
            return
        roots, z, u = kept
        self._roots.add(roots)
        if z is not None and u is not None:
            if not self._zu:
                n = self.part.roots.size
                self._zu = [np.empty((n,) + z.shape[1:], z.dtype), np.empty((n,) + u.shape[1:], u.dtype)]
            self._zu[0][self._at:self._at + z.shape[0]] = z
            self._zu[1][self._at:self._at + u.shape[0]] = u
            self._at += z.shape[0]

    def root_counts(self) -> np.ndarray:
        """Every subtree root's true counts, ``part.roots`` order (after stage 1)."""
        return self._roots.value()

    def gather(self, st: SplitStages, folder: Path | None) -> tuple[np.ndarray, Any, Any]:
        """Stage 2's inputs: every root's counts and ``(z, u)`` (``None`` without a GLS),
        handed over (the store keeps no reference: the solve drops them once solved)."""
        zu, self._zu = self._zu, []
        return self.root_counts(), *(zu if zu else (None, None))

    def get(self, st: SplitStages, task: subtrees.SubtreeTask) -> tuple[np.ndarray, np.ndarray]:
        """``task``'s measurements for its pass down."""
        return self.noisy[task.nodes], self.var[task.nodes]

    def top_solved(self) -> bool:
        """Whether the top is solved already (a resumed release): never, in memory."""
        return False

    @contextmanager
    def top_space(self) -> Iterator[Path | None]:
        """Where the top's arrays over every root go while it is solved (``None``: memory)."""
        yield self.top_folder

    def track(self, a: Any) -> Any:
        """``a`` (arrays on disk) removed at :meth:`close`."""
        self._tracked.append(a)
        return a

    def keep_top(self, sol: TopSolution) -> None:
        """The top's solution, for the pass down (:meth:`top_solution`)."""
        self._top = (sol.x_roots, sol.v_roots, list(sol.fixed))
        for a in self._top[:2] + tuple(self._top[2]):
            if isinstance(a, ColumnsOnDisk):
                self.track(a)

    def top_solution(self) -> tuple[Any, Any, list[Any]]:
        """The roots' values, variances and per-step held values (read by row ranges)."""
        return self._top

    def close(self) -> None:
        """Let go of what the store holds; remove what it wrote."""
        self._zu, self._roots = [], RootCounts(0, 1)
        self._top = (None, None, [])
        for a in self._tracked:
            a.remove()
        self._tracked.clear()


class SpillStore(MemoryStore):
    """A task's measurements spilled to ``workdir`` (a temporary folder by default) between
    its pass up and its pass down: memory then holds one task at a time, and the top's
    arrays over every subtree root are kept on disk in blocks of cells. What is written is
    noisy (released anyway as the measurements); the roots' true counts stay in memory."""

    spills = True

    def __init__(self, part: subtrees.Partition, n_cells: int, workdir: str | os.PathLike[str] | None) -> None:
        self.part = part
        self._tmp = tempfile.TemporaryDirectory(prefix="hierdp-split-") if workdir is None else None
        self.dir = Path(self._tmp.name if self._tmp is not None else os.fspath(cast(Any, workdir)))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.top_folder = self.dir
        self._roots, self._zu, self._at = RootCounts(part.roots.size, n_cells), [], 0
        self._tracked, self._top = [], (None, None, [])
        self._written: list[Path] = []

    def _path(self, t: int) -> Path:
        return self.dir / f"task{t}.npz"

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> Any:
        roots, z, u = up
        arrays = st.spill(task, noisy, var)
        if z is not None and u is not None:
            arrays.update(z=z, u=u)
        with open(self._path(task.index), "wb") as fh:
            np.savez(fh, **cast(Any, arrays))
        return roots

    def put_top(self, top: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        """The top part's measurements: not kept (a streamed release holds only tasks)."""

    def done(self, stage: str, t: int, kept: Any = None) -> None:
        if stage == "up":
            self._written.append(self._path(t))
            self._roots.add(kept)

    def gather(self, st: SplitStages, folder: Path | None) -> tuple[np.ndarray, Any, Any]:
        """Every root's counts (in memory) and ``(z, u)`` read back from the tasks' files into
        blocks of cells on disk (:func:`roots_columns`)."""
        z, u = roots_columns(st, cast(Path, folder), self.part.n_tasks, self._path, self.track)
        return self.root_counts(), z, u

    def get(self, st: SplitStages, task: subtrees.SubtreeTask) -> tuple[np.ndarray, np.ndarray]:
        path = self._path(task.index)
        with np.load(path, allow_pickle=False) as f:
            state = {k: f[k] for k in f.files if k not in ("z", "u")}
        path.unlink()  # read once: free the disk as the pass down goes
        return st.unspill(task, state)

    def close(self) -> None:
        """Remove what was written (the temporary folder with it)."""
        super().close()
        for path in self._written:
            path.unlink(missing_ok=True)
        if self._tmp is not None:
            self._tmp.cleanup()


class CarriedStore(MemoryStore):
    """The state carried by the executor's own data between the stages (Spark: a column of
    the tasks' DataFrame): :meth:`put` returns a task's spilled measurements, its roots'
    counts and ``(z, u)`` as arrays for the executor to carry; the driver hands the pass-up
    output back (:meth:`done`), and a task's state before its pass down (:attr:`carried`)."""

    spills = True

    def __init__(self, part: subtrees.Partition, n_cells: int) -> None:
        self.part = part
        self._roots, self._zu, self._at = RootCounts(part.roots.size, n_cells), [], 0
        self._tracked, self._top = [], (None, None, [])
        #: a task's carried arrays before its pass down (set by the executor's task)
        self.carried: dict[int, dict[str, np.ndarray]] = {}

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> Any:
        roots, z, u = up
        state = dict(st.spill(task, noisy, var))
        exact = st.exact.pop(task.index, None)
        if exact is not None:
            state["exact"] = exact
        return {"roots": roots, "z": z, "u": u}, state

    def put_top(self, top: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        """Not kept: the top part's output is written once solved."""

    def get(self, st: SplitStages, task: subtrees.SubtreeTask) -> tuple[np.ndarray, np.ndarray]:
        state = dict(self.carried.pop(task.index))
        if "exact" in state:
            st.exact[task.index] = state.pop("exact")
        return st.unspill(task, state)


def roots_columns(st: SplitStages, folder: Path, n_tasks: int, path: Callable[[int], Path],
                  track: Callable[[Any], Any], roots: RootCounts | None = None) -> tuple[Any, Any]:
    """Every root's ``(z, u)`` read back task by task from ``path(t)`` (``.npz``) into blocks
    of cells on disk in ``folder`` (:meth:`SplitStages.roots_columns`), finished; the roots'
    counts into ``roots`` on the way when given. ``(None, None)`` without a GLS."""
    zu: list[Any] = []
    for t in range(n_tasks):
        with np.load(path(t), allow_pickle=False) as f:
            if roots is not None:
                roots.add(f["roots"])
            if "z" not in f.files:
                continue
            z, u = f["z"], f["u"]
        if not zu:
            zu = [track(st.roots_columns(folder, "z", z.shape[1])), track(st.roots_columns(folder, "u", u.shape[1]))]
        zu[0].append(z)
        zu[1].append(u)
        del z, u
    for cols in zu:
        cols.finish()
    return (zu[0], zu[1]) if zu else (None, None)
