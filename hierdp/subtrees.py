"""A release cut into subtree tasks: the partition, the memory chooser and the exact split GLS.

A tree is cut below a *split level* ``s`` (``split="county"``): the **top part** is the
nodes above it (depth ``< s``), and every node ``r`` at depth ``s`` roots one **subtree**
(``r`` and its descendants). A **task** is a block of consecutive subtrees, so that small
subtrees cost one task per block, not one per subtree. Everything here is public
structure: the partition reads the tree, never a count.

**Exact split estimation** (every linear estimator of the chain: ``blue``, ``gmc``,
weighted ``gmc``, the GLS of the ``marginals`` plan after its rotation of the cells,
invariants as exact nodes). These estimators all compute the weighted least-squares
consistent estimate (Dawson et al. 2023, Theorem 8; Cai et al. 2023, formula (39) and its
weighted form are the same projection), with per-node independent noise. Its two-pass
form (Dawson et al., Alg. 1-2) gives the split directly:

1. **Up, per task** — the subtree's pass 1 hands up, for its root ``r``, ``z_r`` (the GLS
   estimate of ``x_r`` from the subtree's measurements alone) and ``u_r`` (its variance),
   per cell: :meth:`SplitGLS.up`.
2. **Top, in memory** — the top part is solved with each ``r`` a node measured by
   ``(z_r, u_r)``: exactly the full tree's passes restricted to the top (the leaf counts
   that split an undetermined residual are the full tree's): :meth:`SplitGLS.top`.
3. **Down, per task** — the subtree is solved again with ``r`` pinned to its final value
   ``x_r`` (an exact measurement): given ``x_r`` the subtree's share of the objective is
   independent of the rest, so its pass 2 is the full tree's. The variances add
   ``g_v^2 Var(x_r)`` to the pinned run's (conditional) ones, ``g_v = d x_v / d x_r`` (one
   more pass over the variances only): the pinned part is uncorrelated with ``x_r``
   (Gauss-Markov: the regression residual on the root's BLUE): :meth:`SplitGLS.down`.

The result equals the in-memory estimate of the same measurements up to floating-point
round-off (tests: ``tests/test_split.py``, <= 1e-9 relative). Estimators that are not a
GLS run after it top-down (:class:`SplitTopDown`: ``nonneg``'s top-down method and
``round``'s, per subtree from its root's final value); the rest (``nonneg``'s global
projection, ``round``'s remainder rule, the baselines, plan ``ghazi``) are refused by a
split release; a post-processor declares that it can run by subtree through
:attr:`hierdp.postprocessors.base.PostProcessor.split_mode`.

Memory: a task holds about :data:`BYTES_PER_NODE_CELL` bytes per node-cell at its peak
(``docs/scale.md``); ``split={"memory": "4GiB"}`` picks the level and the blocks so that
the largest task (and the top part) fit. The top solve runs in blocks of cells (every cell
is its own tree problem), so it counts :data:`TOP_HELD_BYTES_PER_NODE_CELL` per cell of the
top part and the roots for what it holds whole, plus one block's working set
(:meth:`Partition.top_bytes`, :meth:`Partition.top_block`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp._kernels import tree_kernels as TK
from hierdp._kernels.columns import ColumnsOnDisk
from hierdp._kernels.jit import for_size
from hierdp._kernels.jit import numba as nb
from hierdp.accounting import Spend
from hierdp.accounting.ledger import LevelSpend
from hierdp.errors import DataError, PluginError, did_you_mean
from hierdp.plans import per_level as PL
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _totals as TT
from hierdp.postprocessors.topdown import ordering_maps, topdown_nonneg, topdown_passes, topdown_round
from hierdp.rules import delta_mechanism_problem, enforce
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.plans.base import Plan
    from hierdp.plans.marginals import Marginals, MarginalsDesign
    from hierdp.postprocessors.base import PostProcessor

__all__ = ["BYTES_PER_NODE_CELL", "DEFAULT_TASK_CELLS", "TOP_HELD_BYTES_PER_NODE_CELL", "TOP_BLOCK_BYTES",
           "SPLIT_KEYS", "Partition", "SubtreeTask", "SplitGLS",
           "partition", "parse_memory", "split_steps", "split_chain", "SplitTopDown", "per_level_allocation",
           "marginals_design", "check_marginals"]

#: peak bytes per node-cell of a release (counts, measurements, estimate and working
#: arrays; ``docs/scale.md``, "Memory per node and per cell": 50-80 B measured)
BYTES_PER_NODE_CELL = 60
#: a task given by level only holds subtrees up to about this many node-cells (2^20: ~60 MB)
DEFAULT_TASK_CELLS = 1 << 20
#: bytes per node-cell the top solve holds whole while it runs in blocks of cells: the
#: roots' ``z``/``u`` handed up and the ``x``/``v`` it hands down, for the top part and the
#: roots (four float64 ``(nodes, k)`` arrays; :meth:`Partition.top_bytes`)
TOP_HELD_BYTES_PER_NODE_CELL = 32
#: the most one block of the top solve's cells works in (bytes; :meth:`Partition.top_block`)
TOP_BLOCK_BYTES = 1 << 30
#: the keys of ``split={...}``
SPLIT_KEYS = ("level", "memory", "task_memory")
#: the share of physical memory ``split="auto"`` budgets for the largest task
AUTO_SHARE = 0.25
#: the level name of the unmeasured node a task tree puts above its subtree roots
TASK_ROOT = "(subtree task)"

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}


def parse_memory(memory: Any, what: str = "split memory") -> int:
    """Bytes from ``memory``: a positive integer, or text such as ``"4GiB"``, ``"500 MB"``
    (``KB``/``MB``/``GB``/``TB`` powers of 1000, ``KiB``/``MiB``/``GiB``/``TiB`` of 1024);
    ``what`` names it in the error."""
    if isinstance(memory, (int, np.integer)) and not isinstance(memory, bool):
        if memory > 0:
            return int(memory)
    elif isinstance(memory, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", memory)
        if m and m.group(2).lower() in _UNITS:
            value = float(m.group(1)) * _UNITS[m.group(2).lower()]
            if value >= 1 and math.isfinite(value):
                return int(value)
    raise DataError(f"{what} must be a positive number of bytes or text such as '4GiB' or '500MB', "
                    f"got {memory!r:.40}")


def _auto_memory() -> int:
    """:data:`AUTO_SHARE` of the physical memory (4 GiB where the system does not say)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = 16 * 1024**3
    return max(int(total * AUTO_SHARE), 1 << 20)


@nb.njit(cache=True, nogil=True)
def _greedy_blocks(sizes: np.ndarray, limit: int) -> np.ndarray:  # pragma: no cover - compiled
    """Task of each subtree: consecutive subtrees while their node count stays <= ``limit``
    (a subtree larger than ``limit`` is a task of its own)."""
    out = np.empty(sizes.shape[0], np.int64)
    task = 0
    filled = 0
    for i in range(sizes.shape[0]):
        if filled > 0 and filled + sizes[i] > limit:
            task += 1
            filled = 0
        out[i] = task
        filled += sizes[i]
    return out


@dataclass(frozen=True, eq=False)
class SubtreeTask:
    """One task of a :class:`Partition`: a block of subtrees rooted at the split level.

    Attributes
    ----------
    index : the task's number (0, 1, ...).
    nodes : the full tree's internal ids of the task's nodes, ascending (parents before
        children, leaves last): the global identity of each node. Counts handed to a split
        release and estimates handed to a sink are in this order.
    roots : internal ids of the task's subtree roots (at the split level), ascending.
    root_pos : position of each root in ``nodes``.
    root_of : per node of ``nodes``, the index into ``roots`` of its subtree.
    parent : the task's local parent array: the unmeasured task root first (-1), then
        ``nodes`` (the top part, ``index == -1``: local parents within ``nodes``).
    level_names : the full tree's level names from the split level down to the task's deepest.
    """

    index: int
    nodes: np.ndarray = field(repr=False)
    roots: np.ndarray = field(repr=False)
    root_pos: np.ndarray = field(repr=False)
    root_of: np.ndarray = field(repr=False)
    parent: np.ndarray = field(repr=False)  # local parents, with the task root 0 first (-1)
    level_names: tuple[str, ...] = ()
    external: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.size)

    @property
    def external_nodes(self) -> np.ndarray:
        """The nodes' external ids (as the tree's parent array numbers them), in task order."""
        return self.nodes if self.external is None else self.external

    def tree(self) -> Tree:
        """The task as a :class:`~hierdp.tree.Tree`: an unmeasured node (level
        :data:`TASK_ROOT`) above the subtree roots, then ``nodes`` in order (node ``i`` of the
        task is node ``i + 1`` here), levels named as in the full tree."""
        return Tree(self.parent, level_names=(TASK_ROOT, *self.level_names), _check=False)

    def __repr__(self) -> str:
        return f"<SubtreeTask {self.index}: {self.roots.size:,} subtrees, {self.nodes.size:,} nodes>"


@dataclass(frozen=True, eq=False)
class Partition:
    """A tree cut at a split level into a top part and tasks (blocks of subtrees).

    Attributes
    ----------
    tree : the full tree.
    depth, level : the split level (depth and name).
    top : internal ids of the nodes above the split level (depth < ``depth``), ascending.
    roots : internal ids of the subtree roots (depth ``depth``), ascending.
    n_tasks : the number of tasks; :meth:`task` builds one, :meth:`tasks` iterates.
    largest_task : nodes of the largest task; ``top_nodes``: nodes of the top solve.
    memory : the budget the blocks were sized for (bytes), or ``None``.
    """

    tree: Tree
    depth: int
    level: str
    top: np.ndarray = field(repr=False)
    roots: np.ndarray = field(repr=False)
    _order: np.ndarray = field(repr=False)        # nodes at depth >= split, by task then id
    _node_bounds: np.ndarray = field(repr=False)  # task t: _order[_node_bounds[t]:_node_bounds[t + 1]]
    _root_bounds: np.ndarray = field(repr=False)  # task t: roots[_root_bounds[t]:_root_bounds[t + 1]]
    _owner: np.ndarray = field(repr=False)        # per node of _order: index into roots
    memory: int | None = None

    @property
    def n_tasks(self) -> int:
        return int(self._node_bounds.size - 1)

    def root_slice(self, t: int) -> slice:
        """Task ``t``'s roots as a range of rows of :attr:`roots` (the rows its pass down reads
        from the top's arrays over every root)."""
        return slice(int(self._root_bounds[t]), int(self._root_bounds[t + 1]))

    @property
    def largest_task(self) -> int:
        return int(np.diff(self._node_bounds).max(initial=0))

    @property
    def top_nodes(self) -> int:
        """Nodes of the top solve: the top part, the roots and two stand-ins per root."""
        return int(self.top.size + 3 * self.roots.size)

    def top_bytes(self, n_cells: int, block: int = 1) -> int:
        """Bytes the top solve of ``n_cells`` cells needs in blocks of ``block`` cells: in
        one block (``block >= n_cells``) :data:`BYTES_PER_NODE_CELL` per node-cell of
        :attr:`top_nodes`; in smaller blocks, the arrays it holds whole
        (:data:`TOP_HELD_BYTES_PER_NODE_CELL` per cell of the top part and the roots) plus
        one block's working set (:data:`BYTES_PER_NODE_CELL` per cell of :attr:`top_nodes`)."""
        return _top_bytes(int(self.top.size), int(self.roots.size), int(n_cells), int(block))

    def top_block(self, n_cells: int, *, roots_on_disk: bool = False) -> int:
        """Cells per block of the top solve (:meth:`SplitGLS.top`, :meth:`SplitTopDown.top`):
        all of them when their working set fits in :data:`TOP_BLOCK_BYTES` (and ``memory``),
        else as many as keep one block within :data:`TOP_BLOCK_BYTES` and within what the
        held arrays leave of ``memory``; at least 1. Every cell is its own tree problem, so
        the block changes the memory, not the result. ``roots_on_disk``: the roots' arrays
        wait on disk between blocks (:meth:`SplitGLS.top_on_disk`), so only the top part's
        are held."""
        k = max(int(n_cells), 1)
        nt, nr = int(self.top.size), int(self.roots.size)
        budget = TOP_BLOCK_BYTES if self.memory is None else min(TOP_BLOCK_BYTES, self.memory)
        if _top_bytes(nt, nr, k, k) <= budget:
            return k
        if self.memory is not None:
            held = nt * k * TOP_HELD_BYTES_PER_NODE_CELL if roots_on_disk else _top_bytes(nt, nr, k, 0)
            budget = min(budget, self.memory - held)
        per_cell = max(self.top_nodes, 1) * BYTES_PER_NODE_CELL
        return int(min(max(budget // per_cell, 1), k))

    def task(self, t: int) -> SubtreeTask:
        """Task ``t``'s nodes and local structure (O(task size), vectorised)."""
        if not 0 <= t < self.n_tasks:
            raise DataError(f"task must be in 0..{self.n_tasks - 1}, got {t!r}")
        a, b = int(self._node_bounds[t]), int(self._node_bounds[t + 1])
        nodes = self._order[a:b]
        ra, rb = int(self._root_bounds[t]), int(self._root_bounds[t + 1])
        roots = self.roots[ra:rb]
        ti = self.tree.internal
        par = ti.parent[nodes]
        is_root = ti.depth[nodes] == self.depth
        local = np.empty(nodes.size + 1, np.int64)
        local[0] = -1
        local[1:] = np.where(is_root, 0, np.searchsorted(nodes, par) + 1)
        root_pos = np.flatnonzero(is_root)
        dmax = int(ti.depth[nodes].max())
        perm = ti.perm
        return SubtreeTask(index=t, nodes=nodes, roots=roots, root_pos=root_pos,
                           root_of=self._owner[a:b] - ra, parent=local,
                           level_names=self.tree.level_names[self.depth:dmax + 1],
                           external=None if perm is None else perm[nodes])

    def tasks(self) -> Iterator[SubtreeTask]:
        for t in range(self.n_tasks):
            yield self.task(t)

    def top_tree(self) -> Tree | None:
        """The top part (depth < split) as a :class:`~hierdp.tree.Tree` in ``top`` order,
        or ``None`` when the split is at the root level."""
        if self.top.size == 0:
            return None
        par = self.tree.internal.parent[self.top]
        local = np.where(par >= 0, np.searchsorted(self.top, par), -1)
        return Tree(local, level_names=self.tree.level_names[:self.depth], _check=False)

    def __repr__(self) -> str:
        return (f"<Partition at level {self.level!r}: {self.top.size:,} top nodes, {self.roots.size:,} subtrees "
                f"in {self.n_tasks:,} tasks (largest {self.largest_task:,} nodes)>")


def _level(tree: Tree, level: Any) -> int:
    """Depth of the split level ``level`` (name or depth); one line naming the levels."""
    names = tree.level_names
    if isinstance(level, (int, np.integer)) and not isinstance(level, bool):
        if 0 <= level < len(names):
            return int(level)
        raise DataError(f"split level depth {level} is out of range 0..{len(names) - 1} (levels: "
                        f"{', '.join(names)})")
    if isinstance(level, str):
        if level in names:
            return names.index(level)
        raise DataError(f"unknown split level {level!r}; expected a level name ({', '.join(map(repr, names))}), "
                        f"a depth, 'auto' or {{'memory': '4GiB'}}{did_you_mean(level, names)}")
    raise DataError(f"split must be a level name, a depth, 'auto' or {{'level': ..., 'memory': '4GiB'}}, "
                    f"got {level!r:.60}")


def _subtree_sizes(tree: Tree) -> np.ndarray:
    """Nodes in each internal node's subtree (itself included)."""
    sizes = tree.cache.get("subtrees.sizes")
    if sizes is None:
        sizes = tree.internal.sum_up(np.ones(tree.n_nodes, np.int64), consume=True)
        sizes.setflags(write=False)
        tree.cache["subtrees.sizes"] = sizes
    return sizes


def _top_bytes(n_top: int, n_roots: int, n_cells: int, block: int) -> int:
    """:meth:`Partition.top_bytes` from the level sizes (arithmetic only)."""
    solve = (n_top + 3 * n_roots) * BYTES_PER_NODE_CELL
    if block >= n_cells:  # one block: the whole solve's working set, outputs included
        return solve * n_cells
    return (n_top + n_roots) * n_cells * TOP_HELD_BYTES_PER_NODE_CELL + solve * block


def _top_least(n_top: int, n_roots: int, n_cells: int) -> int:
    """The least bytes the top solve needs: in one block, or in blocks of one cell."""
    return min(_top_bytes(n_top, n_roots, n_cells, n_cells), _top_bytes(n_top, n_roots, n_cells, 1))


def _choose_level(tree: Tree, memory: int, n_cells: int, task_memory: int | None = None) -> int:
    """The shallowest depth whose largest task fits in ``task_memory`` bytes (default
    ``memory``) and whose top solve (in blocks of cells, at least one cell a block) fits in
    ``memory``."""
    task_memory = memory if not task_memory else task_memory
    ti = tree.internal
    depth = ti.depth
    sizes = _subtree_sizes(tree)
    n_levels = tree.n_levels
    largest = np.zeros(n_levels, np.int64)
    np.maximum.at(largest, depth, sizes)
    per_level = np.bincount(depth, minlength=n_levels)
    above = np.concatenate(([0], np.cumsum(per_level)[:-1]))
    task_need = [int(largest[d]) * n_cells * BYTES_PER_NODE_CELL for d in range(n_levels)]
    top_need = [_top_least(int(above[d]), int(per_level[d]), n_cells) for d in range(n_levels)]
    need = [max(a, b) for a, b in zip(task_need, top_need)]  # one entry per level
    ok = [d for d in range(n_levels) if task_need[d] <= task_memory and top_need[d] <= memory]
    if not ok:
        best = int(np.argmin(need))
        raise DataError(f"no split level keeps a task within split memory {memory:,} bytes (nor the top solve) at "
                        f"{BYTES_PER_NODE_CELL} B per node-cell x {n_cells} cells; the smallest is level "
                        f"{tree.level_names[best]!r} at {need[best]:,} bytes: give more memory")
    return ok[0]


def partition(tree: Tree, split: Any, *, n_cells: int = 1) -> Partition:
    """Cut ``tree`` for a split release: ``split`` is a level name or depth, ``"auto"``, or
    ``{"level": ..., "memory": "4GiB", "task_memory": "1GiB"}`` (any of the keys).

    With ``memory`` (``"auto"``: :data:`AUTO_SHARE` of the physical memory) tasks are blocks
    of subtrees of at most ``memory / (BYTES_PER_NODE_CELL * n_cells)`` nodes, and without
    ``level`` the shallowest level whose largest subtree and top solve fit is chosen; with a
    level only, blocks of about :data:`DEFAULT_TASK_CELLS` node-cells. ``task_memory``
    (at most ``memory``) sizes the tasks instead, while ``memory`` still bounds the top
    solve: several tasks can then run at once within ``memory`` (e.g. the census' top solve
    at Tract needs 5.7 GB, a task 1 GiB). Vectorised: one ancestor pass, one sort, one
    greedy pass over the subtrees (compiled).
    """
    if isinstance(n_cells, bool) or not isinstance(n_cells, (int, np.integer)) or n_cells < 1:
        raise DataError(f"n_cells must be a positive integer, got {n_cells!r}")
    level: Any = None
    memory: int | None = None
    task_memory: int | None = None
    if isinstance(split, Mapping):
        unknown = [k for k in split if k not in SPLIT_KEYS]
        if unknown:
            raise DataError(f"split got an unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), SPLIT_KEYS)}; "
                            f"it takes {', '.join(map(repr, SPLIT_KEYS))}")
        if not split:
            raise DataError("split={} names neither a level nor a memory budget; give {'level': ...} and/or "
                            "{'memory': '4GiB'}")
        level = split.get("level")
        if "memory" in split:
            memory = _auto_memory() if split["memory"] == "auto" else parse_memory(split["memory"])
        if "task_memory" in split:
            task_memory = parse_memory(split["task_memory"], "split task_memory")
            if memory is None:
                memory = task_memory
            elif task_memory > memory:
                raise DataError(f"split task_memory {task_memory:,} bytes exceeds split memory {memory:,}: a task "
                                "must fit the whole budget; give a smaller task_memory")
    elif isinstance(split, str) and split == "auto":
        memory = _auto_memory()
    else:
        level = split
    if task_memory is None:
        task_memory = memory
    limit = None if task_memory is None else task_memory // (BYTES_PER_NODE_CELL * int(n_cells))
    if limit is not None and limit < 1:
        raise DataError(f"split memory {task_memory:,} bytes holds less than one node of {n_cells} cells; give more")
    if level is None:
        depth = _choose_level(tree, int(memory or 0), int(n_cells), int(task_memory or 0))
    else:
        depth = _level(tree, level)
    ti = tree.internal
    d = ti.depth
    n = tree.n_nodes
    sizes = _subtree_sizes(tree)
    roots = np.flatnonzero(d == depth)
    top = np.flatnonzero(d < depth)
    if limit is not None and memory is not None:
        biggest = int(sizes[roots].max())
        top_need = _top_least(int(top.size), int(roots.size), int(n_cells))
        if biggest > limit:
            what = "task_memory" if task_memory != memory else "memory"
            raise DataError(f"at split level {tree.level_names[depth]!r} a subtree of {biggest:,} nodes x {n_cells} "
                            f"cells exceeds split {what} {task_memory:,} bytes ({BYTES_PER_NODE_CELL} B per "
                            f"node-cell); choose a deeper level or give more {what}")
        if top_need > memory:
            raise DataError(f"at split level {tree.level_names[depth]!r} the top solve ({top.size:,} top nodes and "
                            f"{roots.size:,} roots x {n_cells} cells, in blocks of cells) needs {top_need:,} bytes, "
                            f"more than split memory {memory:,}; choose a shallower level or give more memory")
    block = limit if limit is not None else max(DEFAULT_TASK_CELLS // int(n_cells), 1)
    # a small tree (node-cells, as every other kernel choice) runs it interpreted: no compile
    task_of_root = for_size(_greedy_blocks, n * int(n_cells))(np.ascontiguousarray(sizes[roots]), int(block))
    below = np.flatnonzero(d >= depth)
    anc = TK.ancestor_codes_at(ti.parent, d, np.arange(n, dtype=np.int64), depth)[below]
    owner = np.searchsorted(roots, anc)
    key = task_of_root[owner]
    order = np.argsort(key, kind="stable")
    n_tasks = int(task_of_root[-1]) + 1 if roots.size else 0
    node_bounds = np.searchsorted(key[order], np.arange(n_tasks + 1))
    root_bounds = np.searchsorted(task_of_root, np.arange(n_tasks + 1))
    return Partition(tree=tree, depth=depth, level=tree.level_names[depth], top=top, roots=roots,
                     _order=below[order], _node_bounds=node_bounds, _root_bounds=root_bounds, _owner=owner[order],
                     memory=memory)


# ---------------------------------------------------------------------------- what can be split
def split_steps(steps: Sequence[PostProcessor]) -> PostProcessor | None:
    """The chain's one GLS step (``None`` for an empty chain), or a one-line
    :class:`~hierdp.errors.PluginError` for a chain a split release cannot run exactly."""
    for pp in steps:
        mode = getattr(pp, "split_mode", None)
        if mode is None:
            hint = {"nonneg": " (its top-down method does: {'name': 'nonneg', 'method': 'topdown'})",
                    "round": " (its top-down method does: {'name': 'round', 'method': 'topdown'})"}.get(pp.name, "")
            raise PluginError(f"post-processor {pp.name!r} cannot run by subtree (split=){hint}; leave split out, "
                              "or use postprocess=['blue'] or ['gmc'], then top-down 'nonneg' and 'round'")
        if mode != "gls":
            raise PluginError(f"post-processor {pp.name!r} declares split_mode={mode!r}, which the split release "
                              "does not run yet; leave split out")
    if len(steps) > 1:
        raise PluginError(f"a split release runs one least-squares step, got {[pp.name for pp in steps]}; "
                          "give one of them")
    return steps[0] if steps else None


def gls_info(step: PostProcessor, variance: np.ndarray | None) -> dict[str, Any]:
    """The ``info`` the in-memory step writes for these variances (``blue``; ``gmc``:
    uniform, weighted, or computed by BLUE when a variance is 0 or inf)."""
    if step.name == "blue":
        return {"method": "blue"}
    info: dict[str, Any] = {"method": "gmc", "formula": getattr(step, "formula", 39)}
    if variance is None:
        return info
    v = np.asarray(variance)
    finite_pos = bool(v.size == 0 or (np.isfinite(v).all() and v.min() > 0))
    if finite_pos and (v.size == 0 or np.all(v == v.flat[0])):
        return info
    if finite_pos:
        info["method"] = "gmc_weighted"
        return info
    info["method"] = "blue"
    info["note"] = "variances contain inf or 0: computed by the equivalent two-pass BLUE"
    return info


# ---------------------------------------------------------------------------- the split GLS
def _blue(parent: np.ndarray, n_children: np.ndarray, leafcount: np.ndarray, y: np.ndarray,
          var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two-pass BLUE (:func:`hierdp.postprocessors._blue_kernels.blue_2d`) on
    parent-before-child arrays whose trailing run of leaves count one leaf each; compiled
    or interpreted by node-cells (:func:`hierdp._kernels.jit.for_size`), the same numbers."""
    y = np.ascontiguousarray(y, dtype=np.float64)
    var = np.ascontiguousarray(var, dtype=np.float64)
    x = np.empty_like(y)
    xv = np.empty_like(var)
    for_size(BK.blue_2d, y.size)(parent, n_children, leafcount, y, var, x, xv)
    return x, xv


class SplitGLS:
    """The three passes of the exact split GLS (module docstring) over a :class:`Partition`.

    Arrays are per task in task order (``task.nodes``), shaped ``(m, k)`` for values and
    ``(m, kv)`` for variances (``kv`` 1 or ``k``); ``inf`` marks an unmeasured node, 0 an
    exact one. Every pass is one compiled O(m k) BLUE over the task (plus one O(m kv) over
    the variances going down).
    """

    def __init__(self, part: Partition) -> None:
        self.part = part

    def _task_arrays(self, task: SubtreeTask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_children = np.bincount(task.parent[1:], minlength=task.parent.size).astype(np.int64)
        leafcount = np.empty(task.parent.size, np.int64)
        leafcount[1:] = self.part.tree.internal.leafcount[task.nodes]
        leafcount[0] = int(leafcount[1 + task.root_pos].sum())
        return task.parent, n_children, leafcount

    @staticmethod
    def _with_root(a: np.ndarray, fill: float) -> np.ndarray:
        out = np.empty((a.shape[0] + 1, a.shape[1]))
        out[0] = fill
        out[1:] = a
        return out

    def up(self, task: SubtreeTask, y: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pass 1 per task: ``(z, u)`` of each subtree root, ``(roots, k)`` and ``(roots, kv)``."""
        par, nch, lc = self._task_arrays(task)
        x, xv = _blue(par, nch, lc, self._with_root(y, 0.0), self._with_root(var, np.inf))
        return x[1 + task.root_pos], xv[1 + task.root_pos]

    def top(self, y: np.ndarray | None, var: np.ndarray | None, z: np.ndarray,
            u: np.ndarray, *, block: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The top solve: ``y``/``var`` of the top part (``part.top`` order; ``None`` at a
        root-level split), ``z``/``u`` of every root (``part.roots`` order). Returns the top
        part's estimates and variances, then the roots'.

        Each root ``r`` enters as an unmeasured node above two stand-in leaves, ``(z_r,
        u_r)`` and ``(0, 0)`` — or ``(z_r, 1)`` and ``(0, inf)`` where ``u_r = inf`` — so
        that the kernel combines ``r`` exactly as in the full tree's pass 1 (the stand-ins
        give back ``(z_r, u_r)``, a value carried even when uninformative) and splits an
        undetermined residual by ``r``'s full-tree leaf count.

        Every cell (column) is its own tree problem (Dawson et al. 2023, Alg. 1-2 act per
        cell; variances shared by the cells or one per cell), so the solve runs ``block``
        cells at a time (default :meth:`Partition.top_block`): only the outputs are held
        whole. The result is the same bit for bit whatever the block (the kernel's one-cell
        path differs from the general one only in the stand-in leaves, which are dropped;
        ``tests/test_split_blocks.py`` holds blocks of 1, 5, 6 and all cells equal)."""
        nt = self.part.top.size
        k, kv = z.shape[1], u.shape[1]
        frame = self._top_frame()
        m = frame[3]
        yt = np.asarray(y, dtype=np.float64).reshape(nt, k) if nt else np.zeros((0, k))
        vt = np.asarray(var, dtype=np.float64).reshape(nt, kv) if nt else np.zeros((0, kv))
        kb = self.part.top_block(k) if block is None else int(block)
        if kb < 1:
            raise DataError(f"the top solve's block must be a positive number of cells, got {block!r}")
        x = np.empty((m, k))
        xv = np.empty((m, kv))
        for a in range(0, k, kb):
            cols = np.arange(a, min(a + kb, k))
            vcols = cols if kv > 1 else np.zeros(1, np.int64)
            xb, xvb = self._top_block(frame, yt[:, cols], vt[:, vcols], z[:, cols], u[:, vcols])
            w = cols.size
            x[:, a:a + w] = xb
            if kv > 1:
                xv[:, a:a + w] = xvb
            elif a == 0:  # shared variances: every block computes the same ones
                xv[:] = xvb
            del xb, xvb
        return x[:nt], xv[:nt], x[nt:], xv[nt:]

    def top_on_disk(self, y: np.ndarray | None, var: np.ndarray | None, z: ColumnsOnDisk, u: ColumnsOnDisk,
                    x_roots: ColumnsOnDisk, v_roots: ColumnsOnDisk) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`top` with the roots' arrays on disk in blocks of columns: ``z``/``u`` read
        a block at a time, the roots' values and variances written to ``x_roots`` and
        ``v_roots`` (the same layouts; ``u``/``v_roots`` one column when the variances are
        shared by the cells). Returns the top part's estimates and variances. The same
        numbers as :meth:`top` with blocks of those columns; memory holds one block of
        the roots, not all of them."""
        nt = self.part.top.size
        k, kv = z.n_cols, u.n_cols
        frame = self._top_frame()
        yt = np.asarray(y, dtype=np.float64).reshape(nt, k) if nt else np.zeros((0, k))
        vt = np.asarray(var, dtype=np.float64).reshape(nt, kv) if nt else np.zeros((0, kv))
        x_top = np.empty((nt, k))
        v_top = np.empty((nt, kv))
        shared = kv == 1 and k >= 1
        u_shared = u.block(0) if shared else None
        for b in range(z.n_blocks):
            lo, hi = z.bounds[b], z.bounds[b + 1]
            ub = u_shared if u_shared is not None else u.block(b)
            vt_b = vt if shared else vt[:, lo:hi]
            xb, xvb = self._top_block(frame, yt[:, lo:hi], vt_b, z.block(b), ub)
            x_top[:, lo:hi] = xb[:nt]
            x_roots.write_block(b, xb[nt:])
            if not shared:
                v_top[:, lo:hi] = xvb[:nt]
                v_roots.write_block(b, xvb[nt:])
            elif b == 0:
                v_top[:] = xvb[:nt]
                v_roots.write_block(0, xvb[nt:])
            del xb, xvb
        return x_top, v_top

    def _top_frame(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The top solve's tree: the top part, the roots and two stand-in leaves per root
        (:meth:`top`): parents, children counts, leaf counts and the real nodes' count."""
        part = self.part
        ti = part.tree.internal
        nt, nr = part.top.size, part.roots.size
        ids = np.concatenate((part.top, part.roots))  # parents first: every root's parent is in the top
        par_g = ti.parent[ids]
        m = ids.size
        parent = np.empty(m + 2 * nr, np.int64)
        parent[:m] = np.where(par_g >= 0, np.searchsorted(part.top, par_g), -1)
        parent[m:] = np.repeat(np.arange(nt, m), 2)
        nch = np.bincount(parent[1:], minlength=parent.size).astype(np.int64)
        lc = np.ones(parent.size, np.int64)
        lc[:m] = ti.leafcount[ids]
        return parent, nch, lc, m

    def _top_block(self, frame: tuple[np.ndarray, np.ndarray, np.ndarray, int], yt: np.ndarray, vt: np.ndarray,
                   z: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One block of cells of the top solve: the top part's ``yt``/``vt`` and the roots'
        ``z``/``u`` of those cells (``vt``/``u`` one column when shared); the estimates and
        variances of the top part and the roots, ``(nt + roots, width)``."""
        parent, nch, lc, m = frame
        nt = self.part.top.size
        yy = np.zeros((parent.size, yt.shape[1]))
        vv = np.empty((parent.size, vt.shape[1]))
        yy[:nt] = yt
        vv[:nt] = vt
        vv[nt:m] = np.inf
        uninformed = np.isinf(u)
        yy[m::2] = z
        vv[m::2] = np.where(uninformed, 1.0, u)
        vv[m + 1::2] = np.where(uninformed, np.inf, 0.0)
        del uninformed
        xb, xvb = _blue(parent, nch, lc, yy, vv)
        del yy, vv
        return xb[:m], xvb[:m]

    def down(self, task: SubtreeTask, y: np.ndarray, var: np.ndarray, x_roots: np.ndarray,
             v_roots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pass 2 per task from the roots' final values ``x_roots`` and variances
        ``v_roots`` (the task's roots, in order): the task's estimates and variances."""
        par, nch, lc = self._task_arrays(task)
        yy = self._with_root(y, 0.0)
        vv = self._with_root(var, np.inf)
        pos = 1 + task.root_pos
        yy[pos] = x_roots
        vv[pos] = 0.0
        x, xv = _blue(par, nch, lc, yy, vv)
        unit = np.zeros_like(vv)
        unit[pos] = 1.0
        g, _ = _blue(par, nch, lc, unit, vv)  # d x_v / d x_r: the same weights as the values' pass
        vr = v_roots[task.root_of]
        with np.errstate(invalid="ignore"):
            extra = np.where(g[1:] == 0.0, 0.0, g[1:] * g[1:] * vr)
        return x[1:], xv[1:] + extra


# ---------------------------------------------------------------------------- measurement per part
def per_level_allocation(plan: Plan, tree: Tree, total: float, *, sensitivity: Sensitivity, delta: float | None,
                         invariants: np.ndarray | None) -> tuple[dict[str, float], list[LevelSpend], list[Any],
                                                                  dict[str, Any]]:
    """The budget of each level, computed once on the full tree (a strategy reads the whole
    tree's shape), the ledger's per-level spends and the plan's spends and info, as
    ``per_level`` states them in memory. A strategy that reads true counts is refused."""
    mech = plan.mechanism  # type: ignore[attr-defined]
    budget = getattr(plan, "_strategy", None) or plan.budget  # type: ignore[attr-defined]
    if getattr(budget, "reads_true_counts", False):
        raise PluginError(f"budget strategy {budget.name!r} reads true counts to choose the split of the budget; "
                          "a split release measures subtree by subtree and cannot: use a strategy on the tree's "
                          "shape (e.g. 'equal') or leave split out")
    inv_levels = PL.invariant_levels(tree, invariants)
    alloc, desc, _ = PL.resolve_budget(tree, total, budget, mechanism=mech, sensitivity=sensitivity,
                                       true_values=None, invariant_levels=inv_levels)
    measured = sum(1 for b in alloc.values() if b > 0)
    enforce(delta_mechanism_problem(mech.name, mech.delta_per_use, measured, delta), DataError)
    levels = []
    for d, name in enumerate(tree.level_names):
        b = float(alloc.get(name, 0.0))
        idx = tree.internal.level_index[d]
        n_level = (idx.stop - idx.start) if isinstance(idx, slice) else int(idx.size)
        var = float(mech.variance(b, sensitivity)) if b > 0 else math.inf
        if name in inv_levels:
            var = 0.0
        levels.append(LevelSpend(level=name, depth=d, budget=b, unit=mech.budget_unit, mechanism=mech.name,
                                 n_nodes=n_level, noise_variance=var, sensitivity_l1=sensitivity.l1,
                                 sensitivity_l2=sensitivity.l2))
    unit = "epsilon" if mech.budget_unit == "epsilon" else "rho"
    spends = [Spend(ls.budget, unit, label=ls.level, delta=mech.delta_per_use) for ls in levels if ls.measured]
    return alloc, levels, spends, {"budget_strategy": desc}




def check_marginals(plan: Marginals) -> None:
    """Refuse, in one line and before any count is read, a ``marginals`` plan that needs
    the whole table at once: ``integer=True`` (a global projection; a split release runs
    ``nonneg`` and ``round`` top-down instead) or a budget strategy reading true counts."""
    if plan.integer:
        raise PluginError("plan 'marginals' with integer=True projects the whole table at once and cannot run by "
                          "subtree (split=); use integer=False with postprocess=['nonneg', {'name': 'round', "
                          "'method': 'topdown'}], or leave split out")
    budget = plan._strategy or plan.budget
    if getattr(budget, "reads_true_counts", False):
        raise PluginError(f"budget strategy {budget.name!r} reads true counts to choose the split of the budget; "
                          "a split release measures subtree by subtree and cannot: use a strategy on the tree's "
                          "shape (e.g. 'equal') or leave split out")


def marginals_design(plan: Marginals, tree: Tree, total: float, *, n_cells: int, sensitivity: Sensitivity,
                     neighbours: str, invariants: np.ndarray | None, invariants_cover: str) -> MarginalsDesign:
    """The ``marginals`` plan's design (:meth:`hierdp.plans.marginals.Marginals.design`:
    budgets, marginals, rotated variances, spends and ledger levels) computed once on the
    whole tree's shape for a split release; refuses, in one line, what needs the whole
    table at once: a budget strategy that reads true counts, and ``integer=True`` (a global
    projection; a split release runs ``nonneg`` and ``round`` top-down instead)."""
    check_marginals(plan)
    return plan.design(tree, (tree.n_nodes, int(n_cells)), total=total, sensitivity=sensitivity,
                       neighbours=neighbours, invariants=invariants, invariants_cover=invariants_cover)


# ---------------------------------------------------------------------------- top-down steps by subtree
def split_chain(steps: Sequence[PostProcessor], *, plan_gls: bool = False
                ) -> tuple[PostProcessor | None, list[PostProcessor]]:
    """The chain's GLS step (or ``None``) and the top-down steps after it (``nonneg`` with
    ``method="topdown"``, ``round``), or a one-line :class:`~hierdp.errors.PluginError`
    for a chain a split release cannot run exactly. ``plan_gls``: the plan hands on its
    own GLS estimate (``marginals``), so the chain is only top-down steps."""
    steps = list(steps)
    if plan_gls:
        for pp in steps:
            if getattr(pp, "split_mode", None) != "top_down":
                raise PluginError(f"post-processor {pp.name!r} cannot run by subtree after the plan's own GLS "
                                  "estimate (split=); use postprocess=[] or ['nonneg', {'name': 'round', "
                                  "'method': 'topdown'}], or leave split out")
        return None, steps
    cut = next((i for i, pp in enumerate(steps) if getattr(pp, "split_mode", None) == "top_down"), len(steps))
    head, tail = steps[:cut], steps[cut:]
    for pp in tail:
        if getattr(pp, "split_mode", None) != "top_down":
            raise PluginError(f"post-processor {pp.name!r} cannot run by subtree after a top-down step (split=); "
                              "leave split out, or end the chain with 'nonneg' and {'name': 'round', "
                              "'method': 'topdown'}")
    if tail and not head:
        raise PluginError(f"a split release runs {tail[0].name!r} top-down from a least-squares estimate; put "
                          "'blue' (or 'gmc') first in postprocess")
    return split_steps(head), tail


def _per_node(v: np.ndarray, n: int) -> np.ndarray:
    """Variances (n,) from (n,) or (n, 1) (the split GLS's shape), or per cell (n, k) as
    given (the ``marginals`` plan's GLS: one variance per cell, as in memory)."""
    if not n:
        return np.zeros(0)
    a = np.asarray(v, dtype=np.float64).reshape(n, -1)
    return a[:, 0] if a.shape[1] == 1 else a


class SplitTopDown:
    """The top-down steps (:func:`hierdp.postprocessors.topdown.topdown_nonneg`,
    :func:`~hierdp.postprocessors.topdown.topdown_round`) of a split release.

    Top-down, each parent's released value is fixed and its children are solved under it
    from their own GLS values and variances only, so a subtree needs only its root's final
    value: :meth:`top` runs the steps on the top part with the subtree roots as its leaves
    (their values there are the full tree's: their parents are in the top part), and
    :meth:`down` runs them on a task with its roots held at those values (variance 0 under
    the task's stand-in root, which keeps them). Equal to the in-memory chain up to the
    GLS values' round-off. Nodes known exactly below the split (invariants) would bound the
    top part from below through the subtrees, so they are refused (invariants above and at
    the split level are fine).
    """

    def __init__(self, part: Partition, tail: Sequence[PostProcessor], invariants: np.ndarray | None,
                 tiebreak: int | None = None) -> None:
        if invariants is not None and bool(np.any(invariants & (part.tree.internal.depth > part.depth))):
            raise PluginError("a split release with 'nonneg'/'round' needs its invariants at or above the split "
                              f"level {part.level!r}; split lower, or leave split out")
        self.part = part
        self.tail = list(tail)
        #: the release's tie-break seed (:func:`hierdp.keyed_noise.tiebreak_seed`), as in memory
        self.tiebreak = 0 if tiebreak is None else int(tiebreak)

    def _passes(self, pp: PostProcessor, k: int) -> bool:
        """Whether step ``pp`` runs in passes (:func:`hierdp.postprocessors.topdown.topdown_passes`):
        its cells couple through the children's totals, so it needs all cells at once."""
        return getattr(pp, "method", "topdown") == "topdown" and getattr(pp, "ordering", "cells") != "cells" and k > 1

    def _coupled(self, k: int) -> bool:
        return any(self._passes(pp, k) for pp in self.tail)

    def _run(self, tree: Tree, x: np.ndarray, v: np.ndarray, held: np.ndarray | None,
             fixed: list[np.ndarray] | None, pinned: tuple[np.ndarray, list[np.ndarray]] | None = None,
             gids: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """The steps on ``tree`` (values ``x`` (n, k), variances ``v`` (n,), in ``tree``'s
        external order); ``held`` rows take ``fixed[j]`` before step ``j`` (variance 0) and
        the root then takes their sum; ``v`` may also be per cell (n, k). ``pinned``: rows
        (the root among them) that take the given values before each step, variance 0 (the
        invariant-total nodes, solved jointly by :meth:`_pinned`). ``gids``: each row's node
        in the full tree's internal order (a stand-in root any): the steps in passes key their
        ties on it and solve in passes where the full tree's node has grandchildren, as in
        memory. Returns the last step's values and every step's."""
        y = np.asarray(x, dtype=np.float64)
        outs: list[np.ndarray] = []
        for j, pp in enumerate(self.tail):
            weighted = pp.name == "nonneg" or getattr(pp, "method", "") == "topdown"
            var = np.array(v, dtype=np.float64) if weighted else np.ones(np.shape(v))
            root = None
            if pinned is not None:
                y = y.copy()
                y[pinned[0]] = pinned[1][j]
                var[pinned[0]] = 0.0
            if held is not None and fixed is not None:
                y = y.copy()
                y[held] = fixed[j]
                var[held] = 0.0
                root = fixed[j].sum(axis=0)
            yi, vi = tree.to_internal(y), tree.to_internal(var)
            if self._passes(pp, np.shape(y)[1] if np.ndim(y) == 2 else 1):
                if gids is None:
                    raise ValueError("a split step in passes needs the rows' node ids")
                g_int = tree.to_internal(np.asarray(gids, dtype=np.int64))
                at = self.part.tree.internal.height[g_int] >= 3
                kk = int(np.shape(yi)[1])
                out = topdown_passes(tree, yi, vi, integer=pp.name != "nonneg", fixed_root=root, node_ids=g_int,
                                     passes_at=at, seed=self.tiebreak, atol=getattr(pp, "atol", 1e-7),
                                     marginals=ordering_maps(getattr(pp, "ordering", "total"), kk, pp.name))
                y = tree.to_external(out)
                outs.append(y)
                continue
            if pp.name == "nonneg":
                out = topdown_nonneg(tree, yi, vi, fixed_root=root)
            else:
                out = topdown_round(tree, yi, vi, fixed_root=None if root is None else np.rint(root))
            y = tree.to_external(out)
            outs.append(y)
        return y, outs

    def _pinned(self, t2: Tree, rows_of: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], k: int,
                totals: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]] | None:
        """The invariant-total nodes of the top tree ``t2`` (``totals``: (n2,), NaN where a
        node's total is not exact; external order) and their cells after each step, solved
        over all cells at once (they couple through the totals:
        :func:`hierdp.postprocessors._totals.solve_region`, the same call as in memory).
        ``rows_of(rows)``: those rows' values ``(n, k)`` and variances ``(n,)`` or ``(n, k)``."""
        fin = np.isfinite(totals)
        if not fin.any():
            return None
        ext_of = t2.to_internal(np.arange(t2.n_nodes))  # internal position -> external row
        reg, par_reg = TT.total_region(t2.internal.parent, fin[ext_of])
        rows = ext_of[reg]
        y, v_rows = rows_of(rows)
        var = np.broadcast_to(np.asarray(v_rows, dtype=np.float64).reshape(rows.size, -1), (rows.size, k))
        out: list[np.ndarray] = []
        for pp in self.tail:
            weighted = pp.name == "nonneg" or getattr(pp, "method", "") == "topdown"
            y = TT.solve_region(par_reg, y, var if weighted else np.ones((rows.size, k)), totals[rows],
                                integer=pp.name != "nonneg")
            out.append(y)
        return rows, out

    def top(self, x_top: np.ndarray, v_top: np.ndarray, x_roots: np.ndarray, v_roots: np.ndarray, *,
            block: int | None = None, totals: np.ndarray | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        """The top part's final values and, per step, the subtree roots' values (in
        ``part.roots`` order).

        The steps act on each cell alone (every parent's projection is per cell:
        :func:`hierdp.postprocessors._topdown_kernels.project_parents` and
        ``integer_parents``), so they run ``block`` cells at a time (default
        :meth:`Partition.top_block`) with the same values. One difference: ``nonneg``'s
        consistency check compares its residual with the block's largest root value,
        not all cells' (a residual of round-off size passes either way)."""
        part = self.part
        k = x_roots.shape[1]
        nt = part.top.size
        if self._coupled(k) and nt:
            vr_all = _per_node(v_roots, part.roots.size)
            xr_all = np.reshape(x_roots, (part.roots.size, k))
            by_rows = self._top_by_rows(np.reshape(x_top, (nt, k)), _per_node(v_top, nt),
                                        lambda pos: (xr_all[pos], vr_all[pos]), k, totals)
            if by_rows is not None:
                return by_rows
        t2 = self._top_tree()
        x2 = np.concatenate((np.reshape(x_top, (nt, k)), np.reshape(x_roots, (part.roots.size, k))))
        vr = _per_node(v_roots, part.roots.size)
        vt = _per_node(v_top, nt) if nt else np.zeros((0,) + vr.shape[1:])
        v2 = np.concatenate((vt, vr))
        # the inputs are in x2 and v2 now: a caller that handed them over (no reference of its
        # own, as the split pipeline does) gets their memory back before the steps run
        del x_top, v_top, x_roots, v_roots, vr, vt
        kb = part.top_block(k) if block is None else int(block)
        if self._coupled(k):
            kb = k  # the children's totals couple the cells
        gids = np.concatenate((part.top, part.roots))
        if kb < 1:
            raise DataError(f"the top-down steps' block must be a positive number of cells, got {block!r}")
        pin = None if totals is None else self._pinned(t2, lambda rows: (x2[rows], v2[rows]), k,
                                                       np.asarray(totals, dtype=np.float64))
        last: np.ndarray | None = None
        outs: list[np.ndarray] = []
        for a in range(0, k, kb):
            b = min(a + kb, k)
            pb = None if pin is None else (pin[0], [f[:, a:b] for f in pin[1]])
            lb, ob = self._run(t2, x2[:, a:b], v2[:, a:b] if v2.ndim == 2 else v2, None, None, pb, gids)
            if last is None:
                last = np.empty((nt, k), lb.dtype)
                outs = [np.empty((part.roots.size, k), o.dtype) for o in ob]
            last[:, a:b] = lb[:nt]
            for o, o_b in zip(outs, ob, strict=True):
                o[:, a:b] = o_b[nt:]
        if last is None:  # no cells
            lb, ob = self._run(t2, x2, v2, None, None, pin, gids)
            return lb[:nt], [o[nt:] for o in ob]
        return last, outs

    #: the steps in passes solve the roots under their parents this many root-cells at a time
    ROWS_CELLS = 1 << 22

    def _top_by_rows(self, x_top: np.ndarray, v_top: np.ndarray,
                     roots_of: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], k: int,
                     totals: np.ndarray | None, out: Callable[[int, Any], ColumnsOnDisk] | None = None
                     ) -> tuple[np.ndarray, list[Any]] | None:
        """:meth:`top` for steps in passes (they couple a node's cells, so no block of cells can
        run alone): the top part first (its own tree), then the subtree roots a few parents at
        a time (:data:`ROWS_CELLS` root-cells), each batch under its parents' final values held
        (a stand-in root above them, as :meth:`down` does) — the same per-parent solves, with
        the same inputs, as the whole top tree, so the same numbers. ``roots_of(positions)``:
        those roots' values and variances. None when node-total invariants reach the roots
        (their joint solve spans the roots: the caller runs the whole top tree). ``out(step,
        dtype)``: columns on disk each step's roots' values are appended to, batch by batch,
        when every parent's roots are consecutive (the census's are; else they are gathered in
        memory and written at the end)."""
        part = self.part
        nt, nr = part.top.size, part.roots.size
        tt = None if totals is None else np.asarray(totals, dtype=np.float64)
        if tt is not None and np.isfinite(tt[nt:]).any():
            return None
        par = part.tree.internal.parent
        t_top = Tree.from_parent(np.where(par[part.top] >= 0, np.searchsorted(part.top, par[part.top]), -1)
                                 .astype(np.int64))
        pin = None if tt is None else self._pinned(t_top, lambda rows: (x_top[rows], v_top[rows]), k, tt[:nt])
        last, outs_top = self._run(t_top, x_top, v_top, None, None, pin, part.top)
        rp = np.searchsorted(part.top, par[part.roots])  # each root's parent, a position in the top
        order = np.argsort(rp, kind="stable")
        streamed = out is not None and bool(np.all(order == np.arange(nr)))
        outs: list[Any] = ([out(j, o.dtype) for j, o in enumerate(outs_top)] if streamed and out is not None
                           else [np.empty((nr, k), o.dtype) for o in outs_top])
        starts = np.flatnonzero(np.r_[True, rp[order][1:] != rp[order][:-1]]) if nr else np.zeros(0, np.int64)
        ends = np.r_[starts[1:], nr].astype(np.int64)
        per = max(1, self.ROWS_CELLS // max(1, k))
        g = 0
        while g < starts.size:
            h = g + 1
            while h < starts.size and ends[h] - starts[g] <= per:
                h += 1
            pos = order[starts[g]:ends[h - 1]]
            ps = rp[pos]
            P = np.unique(ps)
            xr, vr = roots_of(pos)
            vr = np.asarray(vr, dtype=np.float64)
            vp = np.asarray(v_top[P], dtype=np.float64)
            tc = Tree.from_parent(np.concatenate(([-1], np.zeros(P.size, np.int64),
                                                  1 + np.searchsorted(P, ps))).astype(np.int64))
            xc = np.concatenate((np.zeros((1, k)), x_top[P], np.reshape(xr, (pos.size, k))))
            vc = np.concatenate((np.full((1,) + vp.shape[1:], np.inf), vp, vr.reshape((pos.size,) + vp.shape[1:])))
            gids = np.concatenate(([0], part.top[P], part.roots[pos]))
            _, oc = self._run(tc, xc, vc, np.arange(1, 1 + P.size), [o[P] for o in outs_top], gids=gids)
            for o, o_c in zip(outs, oc, strict=True):
                if streamed:
                    o.append(o_c[1 + P.size:])
                else:
                    o[pos] = o_c[1 + P.size:]
            del xr, vr, xc, vc, oc
            g = h
        if streamed:
            for o in outs:
                o.finish()
        elif out is not None:
            written = []
            for j, o_m in enumerate(outs):
                o = out(j, o_m.dtype)
                for b in range(o.n_blocks):
                    o.write_block(b, o_m[:, o.bounds[b]:o.bounds[b + 1]])
                written.append(o)
            outs = written
        return last, outs

    def _top_tree(self) -> Tree:
        """The top part with the subtree roots as its leaves (external order: the top part,
        then the roots)."""
        part = self.part
        par = part.tree.internal.parent
        top_par = np.where(par[part.top] >= 0, np.searchsorted(part.top, par[part.top]), -1)
        root_par = np.where(par[part.roots] >= 0, np.searchsorted(part.top, par[part.roots]), -1)
        return Tree.from_parent(np.concatenate((top_par, root_par)).astype(np.int64))

    def top_on_disk(self, x_top: np.ndarray, v_top: np.ndarray, x_roots: ColumnsOnDisk, v_roots: ColumnsOnDisk,
                    out: Callable[[int, Any], ColumnsOnDisk], *, totals: np.ndarray | None = None
                    ) -> tuple[np.ndarray, list[ColumnsOnDisk]]:
        """:meth:`top` with the roots' values and variances on disk in blocks of columns
        (``v_roots`` one column when shared by the cells), each block of cells run alone
        and each step's roots' values written to ``out(step, dtype)`` (the same layout as
        ``x_roots``). The same numbers as :meth:`top` with blocks of those columns; memory
        holds the top part and one block of the roots."""
        part = self.part
        k, nt = x_roots.n_cols, part.top.size
        if self._coupled(k):
            # the steps in passes couple the cells through the children's totals: the roots a few
            # parents at a time, all their columns (rows read across the blocks)
            vt1 = _per_node(v_top, nt) if nt else np.zeros((0,))

            def roots_of(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                v = v_roots.take(pos)
                return x_roots.take(pos), (v[:, 0] if v_roots.n_cols == 1 else v)

            got = self._top_by_rows(np.reshape(x_top, (nt, k)), vt1, roots_of, k, totals, out) if nt else None
            if got is not None:
                return got
            if got is None:  # invariant totals down to the roots, or no top: the whole top tree in memory
                xr = np.concatenate([x_roots.block(b) for b in range(x_roots.n_blocks)], axis=1)
                vr = np.concatenate([v_roots.block(b) for b in range(v_roots.n_blocks)], axis=1)
                got = self.top(x_top, v_top, xr, vr[:, 0] if vr.shape[1] == 1 else vr, totals=totals)
                del xr, vr
            last_m, outs_m = got
            written: list[ColumnsOnDisk] = []
            for j, o_m in enumerate(outs_m):
                o = out(j, o_m.dtype)
                for b in range(x_roots.n_blocks):
                    o.write_block(b, o_m[:, x_roots.bounds[b]:x_roots.bounds[b + 1]])
                written.append(o)
            return last_m, written
        t2 = self._top_tree()
        shared = v_roots.n_cols == 1  # one variance per node (as _per_node gives it to top())
        if not shared and v_roots.bounds != x_roots.bounds:
            raise ValueError("per-cell variances on disk need the values' blocks of columns")
        vt = _per_node(v_top, nt) if nt else np.zeros((0,) if shared else (0, k))
        x_top = np.reshape(x_top, (nt, k))
        v_shared = np.concatenate((vt, v_roots.block(0)[:, 0])) if shared else None

        def rows_of(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            above, below = rows < nt, rows >= nt
            xs = np.empty((rows.size, k))
            xs[above] = x_top[rows[above]]
            if below.any():
                xs[below] = x_roots.take(rows[below] - nt)
            if v_shared is not None:
                return xs, v_shared[rows]
            vs = np.empty((rows.size, k))
            vs[above] = vt[rows[above]]
            if below.any():
                vs[below] = v_roots.take(rows[below] - nt)
            return xs, vs

        pin = None if totals is None else self._pinned(t2, rows_of, k, np.asarray(totals, dtype=np.float64))
        last: np.ndarray | None = None
        outs: list[ColumnsOnDisk] = []
        for b in range(x_roots.n_blocks):
            lo, hi = x_roots.bounds[b], x_roots.bounds[b + 1]
            xb = np.concatenate((x_top[:, lo:hi], x_roots.block(b)))
            vb = v_shared if v_shared is not None else np.concatenate((vt[:, lo:hi], v_roots.block(b)))
            pb = None if pin is None else (pin[0], [f[:, lo:hi] for f in pin[1]])
            lb, ob = self._run(t2, xb, vb, None, None, pb, np.concatenate((part.top, part.roots)))
            del xb, vb
            if last is None:
                last = np.empty((nt, k), lb.dtype)
                outs = [out(j, o.dtype) for j, o in enumerate(ob)]
            last[:, lo:hi] = lb[:nt]
            for o, o_b in zip(outs, ob, strict=True):
                o.write_block(b, o_b[nt:])
            del lb, ob
        return (np.zeros((nt, k)) if last is None else last), outs

    def down(self, task: SubtreeTask, x: np.ndarray, xv: np.ndarray, fixed: list[np.ndarray]) -> np.ndarray:
        """The task's final values (``task.nodes`` order) given its roots' values per step."""
        k = x.shape[1]
        tt = task.tree()
        x2 = np.concatenate((np.zeros((1, k)), x))
        pv = _per_node(xv, x.shape[0])
        v2 = np.concatenate((np.full((1,) + pv.shape[1:], np.inf), pv))
        held = 1 + task.root_pos
        gids = np.concatenate(([0], task.nodes))
        last, _ = self._run(tt, x2, v2, held, [f.reshape(-1, k) for f in fixed], gids=gids)
        return last[1:]
