"""The one driver of a split release (:mod:`hierdp.subtrees`; exact split GLS of Dawson
et al. 2023, Alg. 1-2, then the top-down ``nonneg``/``round``).

Every split release is this driver under one configuration of three parts:

* an **executor** (:mod:`hierdp.execution.executors`) runs the tasks of stages 1 and 3,
  ``map(function, tasks)`` with results in task order;
* a **state store** keeps each task's measurements between its pass up and its pass down
  and the top's solution (:mod:`hierdp.execution.stores`: in memory, spilled to a
  temporary folder; :class:`hierdp.outofcore.WorkFolderStore`: a journaled, resumable
  work folder);
* a **sink** receives each part's estimate (:class:`CallbackSink`: in this thread, in task
  order; :class:`hierdp.outofcore.DatasetSink`: a Parquet part written by the task).

:func:`hierdp.release` with ``split=``, :func:`hierdp.release_by_subtree`,
:func:`hierdp.outofcore.release_to_dataset` (threads or Dask) and the Spark runner are
configurations of it. The stage functions (:func:`measure_task`, :func:`pass_down_task`)
are module-level and take a picklable :class:`StageContext`, so an executor may run them
in another process; they write only their own task's rows or files. The noise is keyed per
node (release key, node, cell), so the numbers do not depend on the executor, the task
order or the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, cast

from hierdp import subtrees
from hierdp._kernels import jit
from hierdp.errors import DataError, NotForPublicationWarning, warn
from hierdp.execution.executors import WorkersDied
from hierdp.execution.stages import SplitStages, top_task
from hierdp.keyed_noise import ExportedNoiseKey, NoiseKey
from hierdp.measurements import Estimate, Measurements

if TYPE_CHECKING:
    from hierdp.accounting.ledger import Ledger
    from hierdp.accounting.session import Session
    from hierdp.execution.executors import Executor
    from hierdp.execution.steps import Resolved
    from hierdp.postprocessors.base import PostProcessor

__all__ = ["StageContext", "CallbackSink", "measure_task", "pass_down_task", "run_split", "solve_top",
           "settle_split", "split_note"]


class StageContext:
    """What a task's stage needs wherever it runs: the resolved release, the partition, the
    release key, the store and the sink.

    It pickles (for an executor in another process) without its built
    :class:`~hierdp.execution.stages.SplitStages`, which each process builds once (the same
    arrays: a deterministic function of these fields), without ``counts_of`` (a remote
    executor's tasks get their counts shipped) and without the top's solution (shipped per
    task likewise). The key pickles as its explicit export: a context is as secret as the data.
    """

    def __init__(self, r: Resolved, part: subtrees.Partition, step: PostProcessor | None,
                 tail: list[PostProcessor], n_cells: int, *, total: float, key: NoiseKey, check_counts: Any,
                 store: Any, sink: Any, counts_of: Callable[[subtrees.SubtreeTask], Any] | None = None,
                 stages: SplitStages | None = None) -> None:
        self.r, self.part, self.step, self.tail, self.n_cells = r, part, step, tail, n_cells
        self.total, self.check_counts, self.store, self.sink = total, check_counts, store, sink
        self.counts_of = counts_of
        #: a release of many node-cells: every kernel runs compiled however small a call (the same values)
        self.large = part.tree.n_nodes * int(n_cells) >= jit.LARGE_JOB
        self._key: NoiseKey | ExportedNoiseKey = key
        self.solution: tuple[Any, Any, list[Any]] | None = None
        self._stages: SplitStages | None = stages  # built already by the caller (the same arrays)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_stages", "_lock", "counts_of", "solution")}
        if isinstance(self._key, NoiseKey):
            state["_key"] = self._key.export()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stages, self._lock, self.counts_of, self.solution = None, threading.Lock(), None, None

    def __repr__(self) -> str:
        return f"<hierdp stage context: {self.part!r}>"

    def stages(self) -> SplitStages:
        """The release's stages, built once in this process."""
        with self._lock, jit.large_job(self.large):  # its probe of the chain runs as the tasks do
            if self._stages is None:
                key = self._key if isinstance(self._key, NoiseKey) else self._key.key()
                self._stages = SplitStages(self.r, self.part, self.step, self.tail, self.n_cells, total=self.total,
                                           key=key, check_counts=self.check_counts,
                                           spills=bool(getattr(self.store, "spills", False)))
            return self._stages


def measure_task(item: tuple[StageContext, int, Any]) -> Any:
    """Stage 1 of task ``t`` (``item = (context, t, counts)``): its counts checked and
    measured, its pass up, its measurements handed to the store. ``counts`` is ``None`` when
    the task runs in this process: they are then read here, on the worker, by the context's
    ``counts_of``. Returns what the store's driver half keeps (:meth:`done`)."""
    ctx, t, counts = item
    task = ctx.part.task(t)
    with jit.large_job(ctx.large):  # this thread's context: a task's thread does not inherit the driver's
        if counts is None:
            counts = cast(Callable[[subtrees.SubtreeTask], Any], ctx.counts_of)(task)
        st = ctx.stages()
        noisy, var, roots, z, u = st.up(task, counts)
        return ctx.store.put(st, task, noisy, var, (roots, z, u))


def pass_down_task(item: tuple[StageContext, int, Any, Any]) -> Any:
    """Stage 3 of task ``t`` (``item = (context, t, solution, state)``): the pass down from
    its roots' values, the top-down steps, the part's estimate handed to the sink.
    ``solution`` (the task's rows of the top's arrays) and ``state`` (its measurements, from
    the store) are ``None`` when the task reads them itself (in this process, or from a
    store on shared storage)."""
    ctx, t, sol, state = item
    task = ctx.part.task(t)
    if sol is None:
        s = ctx.part.root_slice(t)
        x, v, fixed = cast(tuple[Any, Any, list[Any]], ctx.solution)
        sol = (x[s], v[s], [f[s] for f in fixed])
    with jit.large_job(ctx.large):
        st = ctx.stages()
        noisy, var = ctx.store.get(st, task, ctx.store.load(t) if state is None else state)
        est, meas = st.down(task, noisy, var, *sol)
        st.exact.pop(t, None)
        return ctx.sink.part(task, est, meas)


class CallbackSink:
    """Each part's estimate and measurements handed to ``callback(task, estimate,
    measurements)`` in the driver's thread, in task order (the top part first)."""

    def __init__(self, callback: Callable[[subtrees.SubtreeTask, Estimate, Measurements], None]) -> None:
        self.callback = callback

    def part(self, task: subtrees.SubtreeTask, est: Estimate, meas: Measurements) -> Any:
        """On the worker: the part, returned to the driver."""
        return est, meas

    def collect(self, task: subtrees.SubtreeTask, got: Any) -> None:
        """In the driver, in task order."""
        self.callback(task, *got)

    def top(self, task: subtrees.SubtreeTask, est: Estimate, meas: Measurements) -> None:
        """The top part, in the driver."""
        self.callback(task, est, meas)


@contextmanager
def _naming(todo: list[int], what: str) -> Iterator[None]:
    """An executor's :class:`~hierdp.execution.executors.WorkersDied` as one line naming the task."""
    try:
        yield
    except WorkersDied as exc:
        raise DataError(f"{what}: the workers running task {todo[exc.position]} died repeatedly (more than the "
                        "cluster allows, e.g. distributed.scheduler.allowed-failures; see the worker logs, e.g. "
                        "memory); an out-of-core release is resumable: fix the cause and run again with "
                        "resume=True") from None


@contextmanager
def _quiet_stage(name: str, n: int) -> Iterator[Callable[[], None]]:
    yield lambda: None


def run_split(ctx: StageContext, executor: Executor, *,
              stage: Callable[[str, int], AbstractContextManager[Callable[[], None]]] | None = None) -> Measurements:
    """Run a split release's three stages: stage 1 and 3 by ``executor``, the top here.

    Parameters
    ----------
    ctx
        The release (its store, its sink and, for an executor in this process, ``counts_of``).
    executor
        Runs the tasks; ``executor.local`` (default ``True``): it shares this process's
        memory, so each task reads its own counts and top rows; otherwise they are read here
        as tasks are handed out and shipped with them.
    stage
        ``stage(name, n_tasks)``: a context manager around each stage yielding a function
        called once per finished task (progress bars, timings); ``"top"`` has no tasks.

    Returns
    -------
    Measurements
        The plan's spends, levels and info, without values.
    """
    stage = stage or _quiet_stage
    store, sink, part = ctx.store, ctx.sink, ctx.part
    counts_of = cast(Callable[[subtrees.SubtreeTask], Any], ctx.counts_of)
    local = bool(getattr(executor, "local", True))
    share = getattr(executor, "share", None)
    shared = share(ctx) if callable(share) else ctx  # a cluster's executor ships the context once
    fetch = getattr(executor, "fetch", None) or (lambda obj: obj)
    st = ctx.stages()

    todo = store.todo("up")
    with stage("measure + pass up", len(todo)) as tick, _naming(todo, "measure + pass up"):
        items = ((shared, t, None if local else counts_of(part.task(t))) for t in todo)
        for t, kept in zip(todo, executor.map(measure_task, items), strict=True):
            store.done("up", t, kept)
            tick()

    with stage("top", 0), jit.large_job(ctx.large):
        if not store.top_solved():
            solve_top(ctx, st, fetch)
    ctx.solution = store.top_solution()

    todo = store.todo("down")
    with stage("pass down + write", len(todo)) as tick, _naming(todo, "pass down + write"):
        x, v, fixed = ctx.solution

        def rows(t: int) -> Any:
            if local:
                return None
            s = part.root_slice(t)
            return x[s], v[s], [f[s] for f in fixed]

        ship = not local and not getattr(store, "shared", False)
        down = ((shared, t, rows(t), store.load(t) if ship else None) for t in todo)
        for t, got in zip(todo, executor.map(pass_down_task, down), strict=True):
            sink.collect(part.task(t), got)
            store.done("down", t)
            tick()
    ctx.solution = None
    return st.summary()


def solve_top(ctx: StageContext, st: SplitStages, fetch: Callable[[Any], Any]) -> None:
    """Stage 2: every root's counts and ``(z, u)`` gathered in task order, the top part
    measured and solved (the roots' arrays in the store's folder, in blocks of cells, or in
    memory), its part handed to the sink; the solution kept by the store."""
    store, sink, part = ctx.store, ctx.sink, ctx.part
    counts_of = cast(Callable[[subtrees.SubtreeTask], Any], ctx.counts_of)
    top = top_task(part)
    with store.top_space() as folder:
        roots, z, u = store.gather(st, folder)
        top_counts = fetch(counts_of(top)) if top.n_nodes else None  # a cluster's future: its value
        tnoisy, tvar = st.top_measured(top, top_counts, roots)
        del roots
        handed = [z, u]  # handed over: the solve drops (z, u) once solved
        del z, u
        if folder is not None and handed[0] is not None:
            sol = st.top_on_disk(tnoisy, tvar, handed[0], handed[1], folder)
        else:
            sol = st.top(tnoisy, tvar, handed.pop(0), handed.pop(0))
        store.keep_top(sol)
        if top.n_nodes:
            store.put_top(top, tnoisy, tvar)
            sink.top(top, *st.finish_top(top, tnoisy, tvar, sol))
        del sol
        st.exact.pop(-1, None)


def split_note(part: subtrees.Partition) -> str:
    """The ledger's note of a split release."""
    return (f"computed by subtree (split at level {part.level!r}: {part.roots.size:,} subtrees in {part.n_tasks:,} "
            f"tasks, the {part.top.size:,} nodes above solved in memory); the estimate equals the in-memory one of "
            "the same measurements")


def settle_split(r: Resolved, ledger: Ledger, part: subtrees.Partition, check_counts: Any,
                 session: Session | None, ticket: int | None) -> None:
    """The end of a split release's accounting: the ledger's notes, the session's charge and
    the seeded-release warning."""
    if check_counts is False:
        ledger.notes.append("node values released as given (check_counts=False): they were not checked to be "
                            "non-negative counts that add up from the leaves")
    ledger.notes.append(split_note(part))
    if session is not None:
        session.settle(cast(int, ticket), ledger)
    if r.seed is not None:
        warn(f"release with seed={r.seed}: reproducible randomness is for tests and benchmarks; the "
             "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning)
