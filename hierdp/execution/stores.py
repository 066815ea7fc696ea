"""Where a split release keeps each task's measurements between its pass up and its pass
down: in memory, spilled to a temporary folder, or (out of core) in a journaled work folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np

from hierdp import subtrees
from hierdp._kernels.columns import ColumnsOnDisk
from hierdp.execution.stages import RootCounts, SplitStages, TopSolution, roots_columns


class MemoryStore:
    """Every task's measurements in full arrays over the tree (the in-memory result).

    The store's two halves: :meth:`put` and :meth:`get` run with the task (on a worker,
    perhaps in another process) and only compute; :meth:`done` and :meth:`load` run in the
    driver, in task order, and keep the state. So the store serves any executor: the driver
    ships :meth:`load`'s state with a task that runs elsewhere (:attr:`shared` is false).
    """

    #: the tasks' spilled form is not used: the measurements stay as measured
    spills = False
    #: whether a task in another process reaches the state itself (a folder on shared storage)
    shared = False
    #: the top's arrays over every root stay in memory
    top_folder: Path | None = None

    def __init__(self, part: subtrees.Partition, n_cells: int, dtype: Any, per_cell: bool = False) -> None:
        self.part = part
        n = part.tree.n_nodes
        self.noisy = np.zeros((n, n_cells), dtype=dtype)
        # per_level: one variance per node; marginals: one per rotated column
        self.var = np.full((n, n_cells) if per_cell else n, np.inf)
        self._begin(n_cells)

    def _begin(self, n_cells: int) -> None:
        self._roots = RootCounts(self.part.roots.size, n_cells)
        self._zu: list[Any] = []  # every root's (z, u), filled in place (or on disk) as tasks finish
        self._at = 0
        self._exact: dict[int, np.ndarray] = {}  # the invariant rows' published values, per task
        self._tracked: list[Any] = []
        self._top: tuple[Any, Any, list[Any]] = (None, None, [])

    def todo(self, stage: str) -> list[int]:
        """The tasks ``stage`` (``"up"`` or ``"down"``) still has to run: all of them."""
        return list(range(self.part.n_tasks))

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> Any:
        """With the task, after its pass up: what the driver keeps (:meth:`done`)."""
        return noisy, var, st.exact.pop(task.index, None), up

    def done(self, stage: str, t: int, kept: Any = None) -> None:
        """In the driver, in task order: after a pass up, the task's rows written and its
        roots' counts and ``(z, u)`` copied into the arrays over every root (one copy)."""
        if stage != "up":
            return
        noisy, var, exact, up = kept
        self._keep(t, noisy, var)
        self._keep_up(t, exact, up)

    def _keep(self, t: int, noisy: np.ndarray, var: np.ndarray) -> None:
        nodes = self.part.task(t).nodes if t >= 0 else self.part.top
        if noisy.dtype != self.noisy.dtype:
            self.noisy = self.noisy.astype(np.result_type(self.noisy.dtype, noisy.dtype))
        self.noisy[nodes] = noisy
        self.var[nodes] = var

    def _keep_up(self, t: int, exact: np.ndarray | None, up: tuple[np.ndarray, Any, Any]) -> None:
        roots, z, u = up
        if exact is not None:
            self._exact[t] = exact
        self._roots.add(roots)
        if z is not None and u is not None:
            if not self._zu:
                n = self.part.roots.size
                self._zu = [np.empty((n,) + z.shape[1:], z.dtype), np.empty((n,) + u.shape[1:], u.dtype)]
            self._zu[0][self._at:self._at + z.shape[0]] = z
            self._zu[1][self._at:self._at + u.shape[0]] = u
            self._at += z.shape[0]

    def load(self, t: int) -> Any:
        """Task ``t``'s state for its pass down (where the task reads it, or the driver ships it)."""
        nodes = self.part.task(t).nodes
        return self.noisy[nodes], self.var[nodes], self._exact.get(t)

    def get(self, st: SplitStages, task: subtrees.SubtreeTask, state: Any) -> tuple[np.ndarray, np.ndarray]:
        """With the task: its measurements from :meth:`load`'s state."""
        noisy, var, exact = state
        if exact is not None:
            st.exact[task.index] = exact
        return noisy, var

    def put_top(self, top: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        """The top part's measurements (in the driver), kept with the tasks'."""
        self._keep(-1, noisy, var)

    def root_counts(self) -> np.ndarray:
        """Every subtree root's true counts, ``part.roots`` order (after stage 1)."""
        return self._roots.value()

    def gather(self, st: SplitStages, folder: Path | None) -> tuple[np.ndarray, Any, Any]:
        """Stage 2's inputs: every root's counts and ``(z, u)`` (``None`` without a GLS),
        handed over (the store keeps no reference: the solve drops them once solved)."""
        zu, self._zu = self._zu, []
        return self._hand_roots(), *(zu if zu else (None, None))

    def _hand_roots(self) -> np.ndarray:
        """Every root's counts, handed over: the store lets go of them, so the top solve
        frees them once it has checked and measured the top part."""
        roots, self._roots = self._roots.value(), RootCounts(0, 1)
        return roots

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
        self._zu, self._roots, self._exact = [], RootCounts(0, 1), {}
        self._top = (None, None, [])
        for a in self._tracked:
            a.remove()
        self._tracked.clear()


class SpillStore(MemoryStore):
    """A task's measurements spilled to ``workdir`` (a temporary folder by default) between
    its pass up and its pass down: memory then holds one task at a time, and the top's
    arrays over every subtree root are kept on disk in blocks of cells. What is written is
    noisy (released anyway as the measurements); the roots' true counts and the invariant
    rows' values stay in memory."""

    spills = True

    def __init__(self, part: subtrees.Partition, n_cells: int, workdir: str | os.PathLike[str] | None) -> None:
        self.part = part
        self._tmp = tempfile.TemporaryDirectory(prefix="hierdp-split-") if workdir is None else None
        self.dir = Path(self._tmp.name if self._tmp is not None else os.fspath(cast(Any, workdir)))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.top_folder = self.dir
        self._written: list[Path] = []
        self._n_cells = n_cells
        self._begin(n_cells)

    def _path(self, t: int) -> Path:
        return self.dir / f"task{t}.npz"

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> Any:
        return st.spill(task, noisy, var), st.exact.pop(task.index, None), up

    def done(self, stage: str, t: int, kept: Any = None) -> None:
        """In the driver, in task order: the task's spilled measurements written, its roots'
        ``(z, u)`` appended to the arrays over every root on disk, in blocks of cells."""
        if stage != "up":
            return
        arrays, exact, (roots, z, u) = kept
        with open(self._path(t), "wb") as fh:
            np.savez(fh, **cast(Any, arrays))
        self._written.append(self._path(t))
        self._keep_up(t, exact, (roots, None, None))
        if z is not None and u is not None:
            if not self._zu:
                self._zu = [self.track(roots_columns(self.part, self._n_cells, self.dir, name, a.shape[1]))
                            for name, a in (("z", z), ("u", u))]
            self._zu[0].append(z)
            self._zu[1].append(u)

    def gather(self, st: SplitStages, folder: Path | None) -> tuple[np.ndarray, Any, Any]:
        """Every root's counts (in memory) and ``(z, u)`` on disk, in blocks of cells."""
        zu, self._zu = self._zu, []
        for cols in zu:
            cols.finish()
        return self._hand_roots(), *(zu if zu else (None, None))

    def load(self, t: int) -> Any:
        path = self._path(t)
        with np.load(path, allow_pickle=False) as f:
            state = {k: f[k] for k in f.files}
        path.unlink()  # read once: free the disk as the pass down goes
        return state, self._exact.get(t)

    def get(self, st: SplitStages, task: subtrees.SubtreeTask, state: Any) -> tuple[np.ndarray, np.ndarray]:
        arrays, exact = state
        if exact is not None:
            st.exact[task.index] = exact
        return st.unspill(task, arrays)

    def put_top(self, top: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        """The top part's measurements: not kept (a streamed release holds only tasks)."""

    def close(self) -> None:
        """Remove what was written (the temporary folder with it)."""
        super().close()
        for path in self._written:
            path.unlink(missing_ok=True)
        if self._tmp is not None:
            self._tmp.cleanup()


class CarriedStore(SpillStore):
    """The state carried by the executor's own data between the stages (Spark: a column of
    the tasks' DataFrame): :meth:`put` gives a task's spilled measurements and its pass-up
    output for the executor to carry; the driver hands the pass-up output back
    (:meth:`done`), and each task gets its state back with it for its pass down."""

    def __init__(self, part: subtrees.Partition, n_cells: int) -> None:
        self.part = part
        self._begin(n_cells)

    def put(self, st: SplitStages, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray,
            up: tuple[np.ndarray, Any, Any]) -> Any:
        state = dict(st.spill(task, noisy, var))
        exact = st.exact.pop(task.index, None)
        if exact is not None:
            state["exact"] = exact
        return up, state

    def done(self, stage: str, t: int, kept: Any = None) -> None:
        if stage == "up":
            self._keep_up(t, None, kept)

    def gather(self, st: SplitStages, folder: Path | None) -> tuple[np.ndarray, Any, Any]:
        return MemoryStore.gather(self, st, folder)

    def get(self, st: SplitStages, task: subtrees.SubtreeTask, state: Any) -> tuple[np.ndarray, np.ndarray]:
        state = dict(state)
        exact = state.pop("exact", None)
        return super().get(st, task, (state, exact))

    def close(self) -> None:
        MemoryStore.close(self)


def read_roots_columns(st: SplitStages, folder: Path, n_tasks: int, path: Callable[[int], Path],
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
