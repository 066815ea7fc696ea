"""The stages of a split release (:mod:`hierdp.subtrees`): per task measure and pass up,
the top part solved once, per task pass down; every driver and executor runs these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import rules, subtrees
from hierdp._kernels.columns import ColumnsOnDisk, column_bounds
from hierdp.errors import (
    DataError,
    PluginError,
)
from hierdp.execution.counts import part_count_problem, task_counts
from hierdp.execution.steps import Resolved, check_invariants_kept, exact_totals, resolve, unmeasured_missing
from hierdp.keyed_noise import NoiseKey, tiebreak_seed
from hierdp.measurements import Estimate, Measurements
from hierdp.plans import per_level as PL
from hierdp.plans.marginals import Marginals, MarginalsDesign
from hierdp.plans.per_level import PerLevel
from hierdp.postprocessors.base import PostProcessor
from hierdp.postprocessors.chain import run_chain
from hierdp.tree import Tree

if TYPE_CHECKING:
    pass


def split_setup(tree: Tree, n_cells: int, split: Any, keywords: dict[str, Any]
                 ) -> tuple[Resolved, subtrees.Partition, PostProcessor | None, list[PostProcessor]]:
    """Resolve a split release (plan ``per_level``: a chain of one GLS step or none, then
    top-down ``nonneg``/``round``; plan ``marginals``: its own GLS, then those top-down
    steps) and cut the tree; refusals before any count is read or noise drawn."""
    r = resolve(tree, n_cells=n_cells, **keywords)
    if not r.plan.runs_by_subtree:
        raise PluginError(f"plan {r.plan.name!r} cannot run by subtree (split=): only plans 'per_level' and "
                          "'marginals' measure node by node with a budget fixed on the whole tree; leave split out")
    if isinstance(r.plan, Marginals):
        subtrees.check_marginals(r.plan)
    step, tail = subtrees.split_chain(r.postprocessors, plan_gls=isinstance(r.plan, Marginals))
    part = subtrees.partition(tree, split, n_cells=n_cells)
    if tail:  # refuses invariants below the split before anything is read
        subtrees.SplitTopDown(part, tail, r.invariants if r.invariant_names else None)
    return r, part, step, tail


def chain_result(r: Resolved, step: PostProcessor | None, tail: list[PostProcessor], variances: np.ndarray,
                  info: Mapping[str, Any] | None = None) -> Estimate:
    """The in-memory chain run on one node measured with each of ``variances``' distinct
    values: its ``info``, flags and dtype are what the whole chain returns (they depend
    on the steps and the kinds of variance, not on the values). ``info``: the plan's
    measurement info (its ``consistent``/``linear`` flags, e.g. ``marginals``' estimate)."""
    steps = ([step] if step is not None else []) + tail
    v = np.asarray(variances, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    one = Tree.from_parent(np.full(1, -1))
    return run_chain(one, Measurements(np.zeros(1), np.full(1, float(v[0]) if v.size else 1.0),
                                       info=dict(info or {})), steps)


def narrowest(a: np.ndarray) -> np.ndarray:
    """``a`` as the narrowest signed integer type holding all its values (an integer
    array), else ``a`` itself: lossless, and the same values back by ``astype``."""
    if a.dtype.kind not in "iu" or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a


def roots_columns(part: subtrees.Partition, n_cells: int, folder: Path, name: str, n_cols: int) -> ColumnsOnDisk:
    """An array over every subtree root of ``part`` on disk in the top solve's blocks of
    cells (:meth:`SplitStages.top_on_disk`; one column: variances shared by the cells)."""
    width = part.top_block(n_cells, roots_on_disk=True) if n_cols > 1 else 1
    return ColumnsOnDisk(folder, name, int(part.roots.size), column_bounds(n_cols, width))


class RootCounts:
    """The subtree roots' true counts, ``(roots, n_cells)`` in ``part.roots`` order, filled
    in place task by task: one copy. Never written out of memory."""

    def __init__(self, n_roots: int, n_cells: int) -> None:
        self.n_roots, self.n_cells = int(n_roots), int(n_cells)
        self._a: np.ndarray | None = None
        self._at = 0

    def add(self, rows: np.ndarray) -> None:
        """The next task's roots' counts (its roots, in order)."""
        rows = np.asarray(rows).reshape(len(rows), -1)
        if self._a is None:
            self._a = np.empty((self.n_roots, rows.shape[1]), rows.dtype)
        elif not np.can_cast(rows.dtype, self._a.dtype, "safe"):  # a wider type from a later task
            self._a = self._a.astype(np.result_type(self._a.dtype, rows.dtype))
        self._a[self._at:self._at + rows.shape[0]] = rows
        self._at += rows.shape[0]

    def value(self) -> np.ndarray:
        """Every root's counts (all tasks added)."""
        if self._a is None:
            return np.zeros((0, self.n_cells), np.int64)
        return self._a[:self._at]


#: the most the rotation back of the roots' values to cells works in at once (bytes;
#: :meth:`SplitStages.top_on_disk`)
_ROTATE_BYTES = 256 << 20


def top_task(part: subtrees.Partition) -> subtrees.SubtreeTask:
    """The top part as a task (index -1): the nodes above the split level."""
    ti = part.tree.internal
    par = ti.parent[part.top]
    perm = ti.perm
    return subtrees.SubtreeTask(index=-1, nodes=part.top, roots=part.roots[:0], root_pos=np.zeros(0, np.int64),
                                root_of=np.zeros(part.top.size, np.int64),
                                parent=np.where(par >= 0, np.searchsorted(part.top, par), -1),
                                level_names=part.tree.level_names[:part.depth],
                                external=None if perm is None else perm[part.top])


class SplitStages:
    """The stages of a split release (:mod:`hierdp.subtrees`) as separate steps, so that the
    in-memory and streamed releases (:func:`hierdp.execution.driver.run_split`) and the out-of-core runner
    (:mod:`hierdp.outofcore`, tasks on workers, state spilled between stages) run one code
    path: :meth:`up` per task (measure, pass up), :meth:`top_measured` and :meth:`top` once
    (the levels above the split, in memory), :meth:`down` per task (pass down, top-down
    steps, the part's estimate). Thread-safe once built: the methods only read the shared
    state (``exact`` is written per task index; ``top_measured``/``top`` run once).

    Every node's noise is keyed by ``key``, its id in the full tree and its cell
    (:func:`hierdp.plans.per_level.measure_nodes`; for ``marginals`` the marginal and its
    cell, :meth:`hierdp.plans.marginals.Marginals.measure_rotated`), so it is the noise the
    in-memory release with the same key draws, whatever the split, the task order or the
    thread count. ``marginals`` runs its GLS as the split GLS over the rotated columns
    (each node's cells rotated by the Helmert basis: ``k`` independent tree problems, one
    two-pass BLUE over ``(n, k)``), then rotates each part back."""

    def __init__(self, r: Resolved, part: subtrees.Partition, step: PostProcessor | None,
                 tail: list[PostProcessor], n_cells: int, *, total: float, key: NoiseKey, check_counts: Any,
                 spills: bool = False) -> None:
        self.r, self.part, self.step, self.tail, self.n_cells = r, part, step, tail, n_cells
        self.key, self.check_counts = key, check_counts
        #: whether tasks' measurements are spilled between the passes (:meth:`spill`): then
        #: ``marginals`` keeps each task's noisy marginals, their compact form, until spilled
        self.spills = spills
        self._draws: dict[int, dict[tuple[int, int], np.ndarray]] = {}
        self.tree = tree = part.tree
        self.inv = inv = r.invariants if r.invariant_names else None
        self.marg = marg = isinstance(r.plan, Marginals)
        self.des: MarginalsDesign | None = None
        if marg:
            self.mplan = mplan = cast(Marginals, r.plan)
            self.des = des = subtrees.marginals_design(mplan, tree, total, n_cells=n_cells, sensitivity=r.sensitivity,
                                                       neighbours=r.neighbours, invariants=inv,
                                                       invariants_cover=r.cover)
            self.levels, self.spends, self.info = list(des.levels), list(des.spends), dict(des.info)
            self.alloc: dict[str, float] = {}
            level_var = np.array([ls.noise_variance for ls in self.levels if ls.n_nodes and ls.measured] + [1.0])
            self.tail_est = chain_result(r, None, tail, level_var, self.info) if tail else None
            self.step_info: dict[str, Any] = {}
        else:
            plan = cast(PerLevel, r.plan)
            self.alloc, self.levels, self.spends, self.info = subtrees.per_level_allocation(
                plan, tree, total, sensitivity=r.sensitivity, delta=r.loss.delta, invariants=inv)
            self.mech, self.sens = plan.mechanism, r.sensitivity
            # what the in-memory step says of these variances: the levels' and 0 for invariant nodes
            level_var = np.array([ls.noise_variance for ls in self.levels if ls.n_nodes]
                                 + ([0.0] if inv is not None else []))
            self.step_info = subtrees.gls_info(step, level_var) if step is not None else {}
            self.tail_est = chain_result(r, step, tail, level_var) if tail else None
        #: whether a GLS runs (the plan's own for ``marginals``, else the chain's first step)
        self.gls = marg or step is not None
        #: ``marginals`` with invariants on every cell: those cells are exact after the rotation back
        self.exact_cells = marg and inv is not None and not cast(MarginalsDesign, self.des).totals_only
        self.engine = subtrees.SplitGLS(part)
        self.down_steps = subtrees.SplitTopDown(part, tail, inv, tiebreak_seed(key)) if tail else None
        self.exact: dict[int, np.ndarray] = {}  # invariant values per task (published exactly)
        self._root_exact: tuple[np.ndarray, np.ndarray] | None = None
        self._totals2: np.ndarray | None = None  # node-total invariants of the top part and the roots

    def summary(self) -> Measurements:
        """The plan's spends, levels and info as :class:`~hierdp.measurements.Measurements`
        without values (known before any noise is drawn)."""
        return Measurements(values=np.zeros((0, self.n_cells)), variance=None, spends=self.spends,
                            levels=self.levels, info=self.info)

    def measured(self, task: subtrees.SubtreeTask, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The task's measurements as the GLS takes them: (m, k) values and (m,) or (m, k)
        variances (the rotated columns for ``marginals``)."""
        tree, key, inv = self.tree, self.key, self.inv
        inv_rows = None if inv is None else inv[task.nodes]
        some = inv_rows is not None and bool(inv_rows.any())
        if self.des is not None:  # measure_rotated's two steps, the draws kept when they are spilled
            depth = tree.internal.depth[task.nodes]
            draws = self.mplan.draw_marginals(self.des, depth, vals, task.nodes, key)
            exact = vals.reshape(task.n_nodes, -1)[cast(np.ndarray, inv_rows)] if some else None
            noisy, var = self.mplan.rotated_from_draws(self.des, depth, draws, inv_rows if some else None, exact)
            if self.spills and task.index >= 0:
                self._draws[task.index] = draws
        else:
            noisy, var = PL.measure_nodes(tree, vals, task.nodes, self.alloc, self.mech, self.sens, key)
            if some:
                noisy, var = PL.apply_invariants(vals, noisy, var, cast(np.ndarray, inv_rows))
        if some:
            self.exact[task.index] = vals[cast(np.ndarray, inv_rows)]
        return noisy, var

    def spill(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> dict[str, np.ndarray]:
        """The task's measurements (:meth:`up`'s ``noisy``, ``var``) in the smallest form
        that gives them back bit for bit (:meth:`unspill`), to wait on disk between the
        passes: for ``marginals`` the noisy marginals themselves (about 1.3 values per
        node-cell on the census strategy instead of the rotated values and variances, 16 B
        per node-cell), integers stored in the narrowest type that holds them (1-2 B for
        a block's noisy counts); for ``per_level`` the noisy values narrowed likewise. All
        of it is noisy; the invariant rows' exact counts travel separately (``exact``)."""
        draws = self._draws.pop(task.index, None)
        if self.marg and draws is not None:
            out = {f"draw_{d}_{j}": narrowest(a) for (d, j), a in draws.items()}
            out["spill_form"] = np.array("draws")
            return out
        return {"spill_form": np.array("values"), "noisy": narrowest(noisy), "noisy_dtype": np.array(noisy.dtype.str),
                "var": var}

    def unspill(self, task: subtrees.SubtreeTask, state: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`spill`'s arrays back to the task's ``noisy`` and ``var``, bit for bit
        (invariant rows: from ``exact[task.index]``, set before this is called)."""
        form = str(state["spill_form"]) if "spill_form" in state else "values"
        if form == "draws":
            draws = {}
            for name, a in state.items():
                if name.startswith("draw_"):
                    _, d, j = name.split("_")
                    draws[(int(d), int(j))] = a
            inv_rows = None if self.inv is None else self.inv[task.nodes]
            some = inv_rows is not None and bool(inv_rows.any())
            return self.mplan.rotated_from_draws(cast(MarginalsDesign, self.des), self.tree.internal.depth[task.nodes],
                                                 draws, inv_rows if some else None,
                                                 self.exact.get(task.index) if some else None)
        noisy = state["noisy"]
        if "noisy_dtype" in state:
            noisy = noisy.astype(np.dtype(str(state["noisy_dtype"])), copy=False)
        return noisy, state["var"]

    def up(self, task: subtrees.SubtreeTask, counts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                   np.ndarray | None, np.ndarray | None]:
        """Stage 1 of a task: its counts checked and measured, then its pass up. Returns the
        noisy values and variances (``task.nodes`` order), the roots' true counts (for the
        top part's check and the invariant roots' exact cells; never written out of the
        work folder) and ``(z, u)`` of each root (``None`` without a GLS)."""
        vals = task_counts(task, counts, self.n_cells)
        rules.enforce(part_count_problem(task.parent[1:] - 1, vals, self.check_counts), DataError)
        noisy, var = self.measured(task, vals)
        z = u = None
        if self.gls:
            z, u = self.engine.up(task, noisy.astype(np.float64), var.reshape(task.n_nodes, -1))
        return noisy, var, vals[task.root_pos], z, u

    def top_measured(self, top: subtrees.SubtreeTask, counts: Any, roots_vals: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2, measuring: the top part's counts checked (with the roots' counts of every
        task, ``part.roots`` order) and measured."""
        part, tree, inv = self.part, self.tree, self.inv
        if inv is not None and self.exact_cells and self.tail:  # invariant roots: their exact cells, top-down
            root_inv = inv[part.roots]
            self._root_exact = (root_inv, roots_vals[root_inv])
        tvals = task_counts(top, counts, self.n_cells) if top.n_nodes else np.zeros((0, self.n_cells), np.int64)
        if inv is not None and self.r.cover == "total" and not self.exact_cells and self.tail:
            # node-total invariants: the top-down steps solve those nodes' cells jointly (as in memory)
            mask2 = np.concatenate((inv[part.top], inv[part.roots]))
            self._totals2 = exact_totals(mask2, np.concatenate((tvals[inv[part.top]], roots_vals[inv[part.roots]])))
        if not top.n_nodes:
            return np.zeros((0, self.n_cells)), (np.zeros((0, self.n_cells)) if self.marg else np.zeros(0))
        # the top part's counts checked with its children among the roots, the roots' rows not
        # copied (each task checked its own)
        roots_parent = np.searchsorted(part.top, tree.internal.parent[part.roots])
        rules.enforce(part_count_problem(top.parent, tvals, self.check_counts, roots_parent, roots_vals), DataError)
        return self.measured(top, tvals)

    def _cells(self, task_index: int, mask: np.ndarray | None, x: np.ndarray, xv: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """``marginals``: rotated GLS values back to cells, invariant cells exact (as in memory)."""
        xc, vc = Marginals.rotate_back(cast(MarginalsDesign, self.des), x, xv)
        if self.exact_cells and mask is not None and task_index in self.exact:
            xc[mask] = self.exact[task_index]
            vc[mask] = 0.0
        return xc, vc

    def top(self, tnoisy: np.ndarray, tvar: np.ndarray, z: np.ndarray | None, u: np.ndarray | None
            ) -> TopSolution:
        """Stage 2, solving, in memory: the top part's GLS values and variances (cells) and
        its final values after the top-down steps (``None`` without a GLS), the roots'
        values and variances as the pass down takes them (``part.roots`` order; rotated
        columns for ``marginals``) and, per top-down step, the roots' values each task is
        held to.

        The roots' arrays are the bulk of it (``(roots, k)`` each); ``z`` and ``u`` are
        dropped once solved. A caller that hands them over without keeping references of
        its own (as :func:`hierdp.execution.driver.run_split` does) then holds at most
        :data:`~hierdp.subtrees.TOP_HELD_BYTES_PER_NODE_CELL` per cell of the top part and
        the roots at any moment, plus one block of cells, the figure the split's memory
        budget counts. A streamed release keeps the roots' arrays on disk instead
        (:meth:`top_on_disk`)."""
        n_top = int(self.part.top.size)
        if not self.gls:
            return TopSolution(None, None, None, np.zeros((0, self.n_cells)), np.zeros((0, 1)), [])
        tv = tvar.reshape(n_top, -1) if n_top else tvar
        x_top, v_top, x_roots, v_roots = self.engine.top(tnoisy.astype(np.float64), tv, cast(np.ndarray, z),
                                                         cast(np.ndarray, u))
        del z, u  # solved: only the outputs from here on
        inv = self.inv
        if self.marg:
            x_top, v_top = self._cells(-1, None if inv is None else inv[self.part.top], x_top, v_top)
        fixed: list[Any] = []
        final = x_top
        if self.down_steps is not None:  # the top-down steps: the top part first, then each task under its roots
            if self.marg:
                xr, vr = Marginals.rotate_back(cast(MarginalsDesign, self.des), x_roots, v_roots)
                if self._root_exact is not None and self._root_exact[0].any():
                    xr[self._root_exact[0]] = self._root_exact[1]
                    vr[self._root_exact[0]] = 0.0
            else:
                xr, vr = x_roots, v_roots
            handed = [xr, vr]  # handed over: down_steps.top drops them once it has its own copies
            del xr, vr
            final, fixed = self.down_steps.top(x_top, v_top, handed.pop(0), handed.pop(0), totals=self._totals2)
        return TopSolution(x_top, v_top, final, x_roots, v_roots, fixed)

    def roots_columns(self, folder: Path, name: str, n_cols: int) -> ColumnsOnDisk:
        """:func:`roots_columns` of this release."""
        return roots_columns(self.part, self.n_cells, folder, name, n_cols)

    def top_on_disk(self, tnoisy: np.ndarray, tvar: np.ndarray, z: ColumnsOnDisk, u: ColumnsOnDisk,
                    folder: Path) -> TopSolution:
        """:meth:`top` with the roots' arrays on disk in ``folder``, in blocks of cells
        (:class:`~hierdp._kernels.columns.ColumnsOnDisk`, made by :meth:`roots_columns`):
        ``z``/``u`` come in there (and are removed once solved), the roots' values,
        variances and per-step values go out there for the pass down to read by task.
        Memory holds the top part's arrays and one block of the roots'. The same numbers
        as :meth:`top`: every cell is its own problem, in the solve and in the top-down
        steps, and the rotation back to cells is one row at a time."""
        made: list[ColumnsOnDisk] = []  # removed again if anything fails on the way
        nr = int(self.part.roots.size)

        def columns(name: str, bounds: list[int], dtype: Any = np.float64) -> ColumnsOnDisk:
            made.append(ColumnsOnDisk(folder, name, nr, bounds, dtype))
            return made[-1]

        try:
            return self._top_on_disk(tnoisy, tvar, z, u, columns)
        except BaseException:
            for cols in made:
                cols.remove()
            raise

    def _top_on_disk(self, tnoisy: np.ndarray, tvar: np.ndarray, z: ColumnsOnDisk, u: ColumnsOnDisk,
                     columns: Callable[..., ColumnsOnDisk]) -> TopSolution:
        nr = int(self.part.roots.size)
        n_top = int(self.part.top.size)
        tv = tvar.reshape(n_top, -1) if n_top else tvar
        x_roots = columns("x_roots", z.bounds)
        v_roots = columns("v_roots", u.bounds)
        x_top, v_top = self.engine.top_on_disk(tnoisy.astype(np.float64), tv, z, u, x_roots, v_roots)
        z.remove()
        u.remove()
        inv = self.inv
        if self.marg:
            x_top, v_top = self._cells(-1, None if inv is None else inv[self.part.top], x_top, v_top)
        fixed: list[Any] = []
        final = x_top
        if self.down_steps is not None:
            xr, vr = x_roots, v_roots
            if self.marg:  # rotated back to cells a range of roots at a time, into the same blocks
                des = cast(MarginalsDesign, self.des)
                xr = columns("x_cells", z.bounds)
                vr = columns("v_cells", z.bounds)
                exact_at = exact_rows = None
                if self._root_exact is not None and self._root_exact[0].any():
                    exact_at, exact_rows = np.flatnonzero(self._root_exact[0]), self._root_exact[1]
                step = max(1, _ROTATE_BYTES // max(8 * 8 * self.n_cells, 1))  # ~8 float64 arrays of a range
                for i in range(0, nr, step):
                    j = min(i + step, nr)
                    xc, vc = Marginals.rotate_back(des, x_roots[i:j], v_roots[i:j])
                    if exact_at is not None:
                        a, b = np.searchsorted(exact_at, [i, j])
                        xc[exact_at[a:b] - i] = cast(np.ndarray, exact_rows)[a:b]
                        vc[exact_at[a:b] - i] = 0.0
                    xr.append(xc)
                    vr.append(vc)
                    del xc, vc
                xr.finish()
                vr.finish()
            final, fixed = self.down_steps.top_on_disk(
                x_top, v_top, xr, vr, lambda j, dtype: columns(f"fixed{j}", z.bounds, dtype),
                totals=self._totals2)
            if self.marg:
                xr.remove()
                vr.remove()
        return TopSolution(x_top, v_top, final, x_roots, v_roots, fixed)

    def finish_top(self, top: subtrees.SubtreeTask, tnoisy: np.ndarray, tvar: np.ndarray, sol: TopSolution
                   ) -> tuple[Estimate, Measurements]:
        """The top part's estimate and measurements (after :meth:`top`)."""
        return self.finish(top, tnoisy, tvar, sol.x_top, sol.v_top, sol.final_top)

    def down(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, x_roots: np.ndarray,
             v_roots: np.ndarray, fixed: list[np.ndarray]) -> tuple[Estimate, Measurements]:
        """Stage 3 of a task: its pass down from its roots' values (the task's roots, in
        order; ``fixed``: per top-down step), then the top-down steps; the part's estimate."""
        if not self.gls:
            return self.finish(task, noisy, var, None, None)
        x, xv = self.engine.down(task, noisy.astype(np.float64), var.reshape(task.n_nodes, -1), x_roots, v_roots)
        if self.marg:
            x, xv = self._cells(task.index, None if self.inv is None else self.inv[task.nodes], x, xv)
        final = self.down_steps.down(task, x, xv, fixed) if self.down_steps is not None else None
        return self.finish(task, noisy, var, x, xv, final)

    def finish(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, x: np.ndarray | None,
               xv: np.ndarray | None, final: np.ndarray | None = None) -> tuple[Estimate, Measurements]:
        """The part's estimate and measurements: ``x``/``xv`` the GLS estimate (cells),
        ``final`` the top-down steps' values when the chain has them."""
        step, tail_est, info, step_info, exact, inv, r = (self.step, self.tail_est, self.info, self.step_info,
                                                          self.exact, self.inv, self.r)
        if self.marg:  # the plan's measurements are its GLS estimate (as in memory)
            x_c, v_c = cast(np.ndarray, x), cast(np.ndarray, xv)
            meas = Measurements(x_c, v_c, info=dict(info))
            if tail_est is not None:
                est = Estimate(np.asarray(final, dtype=tail_est.values.dtype), v_c, dict(tail_est.info), v_c,
                               tail_est.linear, True)
            else:
                est = Estimate(x_c, v_c, dict(info), v_c, True, True)
        else:
            meas = Measurements(noisy, var, info=dict(info))
            if step is None:  # postprocess=[]: the measurements are the estimate
                est = unmeasured_missing(Estimate(noisy, var, dict(info), var, True, False), [])
            elif tail_est is not None:
                est = Estimate(np.asarray(final, dtype=tail_est.values.dtype), cast(np.ndarray, xv)[:, 0],
                               dict(tail_est.info), var, tail_est.linear, True)
            else:
                est = Estimate(cast(np.ndarray, x), cast(np.ndarray, xv)[:, 0], dict(step_info), var, True, True)
        if task.index in exact:
            est = check_invariants_kept(est, exact[task.index], inv[task.nodes],  # type: ignore[index]
                                         r.postprocessors, r.cover)
        return est, meas


@dataclass(frozen=True, eq=False)  # holds arrays
class TopSolution:
    """What :meth:`SplitStages.top` solves: the top part's GLS values and variances (cells)
    and final values (after the top-down steps), the roots' values and variances for the
    pass down (``part.roots`` order) and, per top-down step, the roots' held values."""

    x_top: np.ndarray | None
    v_top: np.ndarray | None
    final_top: np.ndarray | None
    x_roots: Any  # an array, or ColumnsOnDisk (read by row ranges)
    v_roots: Any
    fixed: list[Any]
