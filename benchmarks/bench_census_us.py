"""The 2020 P.L. 94 persons release, shape for shape, on a synthetic US: one state, a few, all.

Issue 31 item 7. The data come from :mod:`census_us_data` (generated once, cached on disk:
51 states, ~8.1M blocks, ~331M persons, 2,016 cells per unit); the facts from
``shared/census/pl94_persons_2020.yaml``. The release is the production one as far as
hierdp expresses it:

* ρ-zCDP, ρ = 2.56 in all, split over the six levels by the production shares (exact
  rationals, US 104/4099 ... Block 165/4099), discrete Gaussian noise;
* ``--plan marginals`` (the production strategy): per level the marginal queries of the
  yaml with their shares (``total``, ``cenrace``, ``hispanic``, ``votingage``, ``hhgq``,
  ``hispanic * cenrace``, ``votingage * cenrace``, ``votingage * hispanic``,
  ``votingage * hispanic * cenrace``, ``detailed``). **``hhinstlevels`` is left out**: it
  coarsens ``hhgq`` into 3 groups instead of summing it out, which the ``marginals`` plan
  cannot express, so each level's remaining shares are renormalised to add up to 1 (its
  share, e.g. 26/4097 at the US, goes to the others in proportion). The US and state
  totals are invariant (published exactly; ``invariants_cover="total"``, add/remove
  neighbours as the ledger states), and the output is consistent non-negative integers:
  ``postprocess=["nonneg", {"name": "round", "method": "topdown"}]``, TopDown's shape — the
  US cells under the US total, the 51 states' cells jointly under their totals and the US
  cells (:mod:`hierdp.postprocessors._totals`), then every unit below per cell under its
  parent's released cells, weighted by the GLS variances. It runs by subtree like the
  ``per_level`` chain (``--in-memory`` for one small state as a check).
* ``--plan per_level`` (the streaming machinery at full scale, today): the 2,016 cells of
  every unit measured as one histogram with the level's share, ``blue`` then ``nonneg``
  and ``round`` (method ``topdown``) by subtree; no invariants (``per_level`` can only
  hold every cell of a node exact, which publishes more than the Census does).

Two doors, both public:

* ``--door cli`` (default): what a user with the Census's inputs runs. The counts become a
  folder of Parquet parts (one per state: ``geoid``, the four codes, ``count``; links to the
  cache) and the public block list ``blocks.csv`` (one ``geoid`` per block, empty blocks
  included); the bundled ``pl94`` example spec (``hierdp.data.resolve_spec("pl94")``) is
  pointed at them (``engine: duckdb``, ``hierarchy.geoid``) with ``execution: {split:
  --split/--memory/--task-memory, workers: --workers}``, and ``hierdp release SPEC -o
  DATASET/ [--seed N]`` runs in a process of its own: its wall time, CPU and peak RSS (from
  the operating system) are printed, then the dataset is evaluated against the truth in
  DuckDB (non-private: MAE of each unit's total population and, per cell, of its
  ``votingage * hispanic * cenrace`` marginal, the Census detailed summary metrics; only
  these means are printed, never a count). ``--out`` keeps the inputs, spec and dataset.
* ``--door python``: ``hierdp.pipeline.release_by_subtree`` (``--split`` a level, tasks of
  ``--memory`` each) with ``counts_of`` reading each task's blocks from the counts Parquet of
  its state and a sink that writes each part's non-zero cells to ``OUT/part-NNNNN.parquet``
  and accumulates the same errors; ``--in-memory`` (one small state), ``--tree-only`` and
  ``--profile`` go with it. The process restarts itself with glibc's allocator set as the
  ``hierdp`` command sets it (``MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0
  MALLOC_TRIM_THRESHOLD_=2147483647``; ``--system-malloc`` to leave it).

    PYTHONPATH=. python benchmarks/bench_census_us.py --us --memory 6GiB --task-memory 256MiB --seed 1
    PYTHONPATH=. python benchmarks/bench_census_us.py --states 56 --door python --plan per_level  # WY, split
    PYTHONPATH=. python benchmarks/bench_census_us.py --states 11 --door python --plan marginals --in-memory
    PYTHONPATH=. python benchmarks/bench_census_us.py --states 56 --door python --profile

The machine is shared (2 cores, other jobs): times are indicative; RSS is steadier.

Measured 2026-11-26 on the 2-core, 24 GB VM at load 10-18 (other jobs; wall times are
3-8x the process CPU times, which are the steadier figure), noise seed 1:

* generation: the whole US in 570 s wall (load ~8), peak RSS 0.75 GB, 316 MiB on disk,
  51,970,718 non-zero (block, cell) rows; CA alone 34 s, WY and DC under 1.5 s.
* ``--states 01`` (Alabama, 152,631 units x 2,016 = 3.08e8 node-cells), per_level, split
  at Tract (18 tasks of 1 GiB): CPU tree 0.9 s, count 12.7, release 97.8 (3.1M
  node-cells per CPU second), write 2.3; wall 670 s; peak RSS 1.69 GiB; 1.25M non-zero
  output cells (5 MiB). MAE of unit totals US/State 260, County 64.4, Tract 11.2, Block
  group 11.6, Block 6.6.
* ``--states 11 --plan marginals --in-memory`` (DC): release 126 CPU s (973 s wall),
  peak RSS 7.78 GiB: the integer step (``integer_with_totals`` -> exact ``nonneg``,
  iterative BLUE solves over 21M cells) is where the time and memory go.
* ``--us --tree-only``: the tree (8,460,357 units) in ~90 s wall, 1.7 GB; split at Tract
  refused (top solve 256,437 nodes x 2,016 cells x 60 B = 31 GB), at County with 8 GiB
  refused (largest county subtree 84,845 nodes: 10.3 GB); the whole US per_level run
  would need ``--split County --memory 10GiB`` and ~55 x Alabama's CPU (~6,300 CPU s).
* Since the top solve runs in blocks of cells and tasks have their own budget:
  ``--us --plan marginals --memory 6GiB --task-memory 256MiB`` (3,986 tasks; the largest
  tract subtree, 1,703 nodes, needs 196 MiB): **55.3 min wall, peak RSS 4.59 GiB** on the
  quiet 2-core VM (5,875 user + 237 system CPU s; 44 GB spilled between the passes), with
  the top stage's arrays on disk in blocks of cells. Smaller tasks are faster and smaller:
  Wyoming took 28.5 / 21.9 / 19.8 s at 4.62 / 2.70 / 2.01 GiB with 1 GiB / 512 MiB /
  256 MiB tasks. Alabama 63.6 s (1/52 of the US), California 235 s, 1.78 GiB
  (docs/appendix/performance-log.md, "The 2020 census shape").
* 2026-11-27, the same command, quiet, the allocator set before numpy loads: **25.9 min
  (91 ns per node-cell), peak RSS 4.01 GiB** (the VM ran the same code twice as fast as the
  day before: 2,707-2,775 s of release CPU against 5,196); Wyoming 8.0-8.1 s, Alabama 28.9 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

#: glibc's allocator told to keep freed memory for reuse, as the ``hierdp`` command does first
#: thing (one arena, no mmap for large blocks, no trimming; read by glibc when a process starts)
MALLOC_KEEP = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "2147483647"}

sys.path.insert(0, str(Path(__file__).parent))

import census_us_data as cus  # noqa: E402

RHO = Fraction("2.56")
#: the production level shares (pl94_persons_2020.yaml)
LEVEL_SHARES = {"US": Fraction(104, 4099), "State": Fraction(1440, 4099), "County": Fraction(447, 4099),
                "Tract": Fraction(687, 4099), "Block_Group": Fraction(1256, 4099), "Block": Fraction(165, 4099)}
QUERIES = ("total", "cenrace", "hispanic", "votingage", "hhinstlevels", "hhgq", "hispanic * cenrace",
           "votingage * cenrace", "votingage * hispanic", "votingage * hispanic * cenrace", "detailed")
_S = {"US": [None, "52/4097", "26/4097", "26/4097", "26/4097", "26/4097", "130/4097", "130/4097", "26/4097",
             "26/241", "189/241"],
      "State": ["3773/4097", "6/4097", "6/4097", "6/4097", "6/4097", "6/4097", "12/4097", "12/4097", "6/4097",
                "2/241", "230/4097"],
      "County": ["3126/4097", "10/4097", "10/4097", "10/4097", "10/4097", "10/4097", "28/4097", "28/4097",
                 "10/4097", "101/4097", "754/4097"],
      "Tract": ["1567/4102", "4/2051", "5/4102", "5/4102", "5/4102", "5/4102", "1933/4102", "10/2051", "5/4102",
                "67/4102", "241/2051"],
      "Block_Group": ["1705/4099", "3/4099", "3/4099", "3/4099", "3/4099", "3/4099", "1055/4099", "9/4099",
                      "3/4099", "24/4099", "1288/4099"],
      "Block": ["5/4097", "9/4097", "5/4097", "5/4097", "5/4097", "5/4097", "21/4097", "21/4097", "5/4097",
                "71/4097", "3945/4097"]}
QUERY_SHARES = {lv: [None if s is None else Fraction(s) for s in v] for lv, v in _S.items()}
CELL_DIMS = {name: size for name, size in cus.DIMS}
DROPPED = ("hhinstlevels",)


def query_dims(query: str) -> tuple[str, ...]:
    """The cell dimensions a query keeps (``()`` the total, all four ``detailed``)."""
    if query == "total":
        return ()
    if query == "detailed":
        return tuple(CELL_DIMS)
    return tuple(d.strip() for d in query.split("*"))


def marginal_strategy() -> tuple[dict[str, dict[tuple[str, ...], float]], dict[str, Fraction]]:
    """Per level ``{dims: share}`` without ``hhinstlevels`` (renormalised: the level's kept
    shares divided by their exact sum), and the share each level dropped."""
    strategy: dict[str, dict[tuple[str, ...], float]] = {}
    dropped: dict[str, Fraction] = {}
    for lv, shares in QUERY_SHARES.items():
        kept = {query_dims(q): s for q, s in zip(QUERIES, shares) if s is not None and q not in DROPPED}
        total = sum(kept.values(), Fraction(0))
        dropped[lv] = sum((s for q, s in zip(QUERIES, shares) if s is not None and q in DROPPED), Fraction(0))
        strategy[lv] = {dims: float(s / total) for dims, s in kept.items()}
    return strategy, dropped


def level_budgets() -> dict[str, float]:
    """ρ per level: 2.56 x the production share, from exact rationals."""
    return {lv: float(RHO * s) for lv, s in LEVEL_SHARES.items()}


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


# -- the public geography and the tree --------------------------------------------------------------

class Geography:
    """The public tree of the chosen states: nodes numbered level by level (US, states,
    counties, tracts, block groups, blocks), siblings contiguous in GEOID order, so every
    parent precedes its children and all leaves (blocks, empty ones too) are at depth 5:
    this is the tree's internal order. Vectorised over the blocks (no loop per unit)."""

    def __init__(self, data: Path, states: list[str]) -> None:
        import pyarrow.parquet as pq

        level_parent: list[list[np.ndarray]] = [[] for _ in range(6)]  # per level, parent index within level above
        geoid: list[list[np.ndarray]] = [[] for _ in range(6)]
        geoid[0].append(np.array(["US"]))
        counts = np.zeros(6, np.int64)
        counts[0] = 1
        self.block_offset = np.zeros(len(states) + 1, np.int64)  # first global block of each state
        for s, fips in enumerate(states):
            g = pq.read_table(cus.state_dir(data, fips) / "geography.parquet", columns=["geoid"]).column(0)
            ids = np.asarray(g.to_numpy(zero_copy_only=False), dtype="U15")
            n = ids.size
            new = [np.ones(n, bool) for _ in range(6)]
            for lv, width in ((2, 5), (3, 11), (4, 12)):  # county, tract, block group: GEOID prefixes
                p = ids.astype(f"U{width}")
                new[lv] = np.r_[True, p[1:] != p[:-1]]
            new[3] |= new[2]
            new[4] |= new[3]
            # level d's unit index (within the state) of every block
            unit = {lv: np.cumsum(new[lv]) - 1 for lv in (2, 3, 4)}
            unit[5] = np.arange(n)
            level_parent[1].append(np.zeros(1, np.int64))
            geoid[1].append(np.array([fips]))
            for lv in (2, 3, 4, 5):
                first = np.flatnonzero(new[lv]) if lv < 5 else np.arange(n)
                above = np.full(first.size, s, np.int64) if lv == 2 else unit[lv - 1][first] + counts[lv - 1]
                level_parent[lv].append(above)
                geoid[lv].append(ids[first].astype(f"U{(0, 2, 5, 11, 12, 15)[lv]}"))
            for lv in (2, 3, 4, 5):
                counts[lv] += int(np.count_nonzero(new[lv])) if lv < 5 else n
            counts[1] += 1
            self.block_offset[s + 1] = counts[5]
        self.states = states
        self.level_sizes = counts
        self.offsets = np.r_[0, np.cumsum(counts)]
        parent = np.empty(int(self.offsets[-1]), np.int64)
        parent[0] = -1
        for lv in range(1, 6):
            parent[self.offsets[lv]:self.offsets[lv + 1]] = self.offsets[lv - 1] + np.concatenate(level_parent[lv])
        self.parent = parent
        self.geoids = [np.concatenate(g) for g in geoid]
        self.depth = np.repeat(np.arange(6), counts)

    @property
    def n_nodes(self) -> int:
        return int(self.offsets[-1])

    def tree(self) -> Any:
        import hierdp

        t = hierdp.Tree(self.parent, level_names=list(cus.LEVELS))
        if t.internal.perm is not None and not np.array_equal(t.internal.perm, np.arange(t.n_nodes)):
            raise RuntimeError("the geography's numbering is not the tree's internal order")  # by construction
        return t

    def write_nodes(self, out: Path) -> None:
        """The public node table: ``node, level, geoid``."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"node": pa.array(np.arange(self.n_nodes)),
                                 "level": pa.DictionaryArray.from_arrays(pa.array(self.depth.astype(np.int8)),
                                                                         pa.array(list(cus.LEVELS))),
                                 "geoid": pa.array(np.concatenate(self.geoids), pa.string())}),
                       out / "nodes.parquet")


# -- the private counts, one state at a time --------------------------------------------------------

class Counts:
    """True counts per task from the states' counts Parquet: each state's non-zero (block,
    cell) rows are held as CSR (row pointer per block) while tasks of that state run."""

    def __init__(self, data: Path, geo: Geography) -> None:
        self.data = data
        self.geo = geo
        self._state = -1
        self._ptr = self._cell = self._count = np.zeros(0, np.int64)
        self.above: np.ndarray | None = None  # the nodes above the split level, summed from the tasks' roots
        self.seconds = 0.0
        self.cpu = 0.0
        self._lock = threading.Lock()

    def _load(self, s: int) -> None:
        import pyarrow.parquet as pq

        t = pq.read_table(cus.state_dir(self.data, self.geo.states[s]) / "counts.parquet",
                          columns=["block", "hhgq", "votingage", "hispanic", "cenrace", "count"])
        col = {n: t.column(n).to_numpy() for n in t.column_names}
        n_blocks = int(self.geo.block_offset[s + 1] - self.geo.block_offset[s])
        self._ptr = np.r_[0, np.cumsum(np.bincount(col["block"], minlength=n_blocks))]
        # narrow types (2 + 4 B a row, not 16): California's rows are ~1 GB less while its tasks run
        self._cell = (((col["hhgq"].astype(np.int16) * 2 + col["votingage"]) * 2 + col["hispanic"]) * 63
                      + col["cenrace"]).astype(np.int16)
        count = col["count"]
        self._count = count.astype(np.int32) if count.size == 0 or int(count.max()) < 2**31 else count.astype(np.int64)
        del t, col
        self._state = s

    def leaves(self, blocks: np.ndarray) -> np.ndarray:
        """Dense ``(len(blocks), 2016)`` counts of global block ids (ascending)."""
        out = np.zeros((blocks.size, cus.N_CELLS), np.int64)
        state = np.searchsorted(self.geo.block_offset, blocks, side="right") - 1
        for s in np.unique(state):  # a task spans one state, rarely two
            if s != self._state:
                self._load(int(s))
            pos = np.flatnonzero(state == s)
            local = blocks[pos] - self.geo.block_offset[s]
            start, stop = self._ptr[local], self._ptr[local + 1]
            lens = stop - start
            rows = np.repeat(start - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
            out[np.repeat(pos, lens), self._cell[rows]] = self._count[rows]
        return out

    def of_task(self, task: Any) -> np.ndarray:
        """``counts_of`` of :func:`release_by_subtree`: every node of ``task`` (``(m, 2016)``);
        one call at a time (``--workers`` runs tasks on several threads; the state held and
        the sums above the split are shared). CPU is this thread's, exact with threads."""
        with self._lock:
            return self._of_task(task)

    def _of_task(self, task: Any) -> np.ndarray:
        t0, c0 = time.perf_counter(), time.thread_time()
        geo = self.geo
        if task.index < 0:  # the top part (US, states, counties): sums of the counties the tasks saw
            vals = self.top(task.nodes)
        else:
            tt = task.tree()
            leaves = tt.leaves - 1  # the task's blocks, in its node order
            blocks = task.nodes[leaves] - geo.offsets[5]
            vals = tt.to_internal(tt.aggregate(self.leaves(blocks)))[1:]
            if self.above is None:
                self.above = np.zeros((int(geo.offsets[geo.depth[task.roots[0]]]), cus.N_CELLS), np.int64)
            np.add.at(self.above, geo.parent[task.roots], vals[task.root_pos])
        self.seconds += time.perf_counter() - t0
        self.cpu += time.thread_time() - c0
        return vals

    def top(self, nodes: np.ndarray) -> np.ndarray:
        """The counts of the top part: the split level's parents got their subtrees' sums
        from the tasks; the levels above them are summed here, bottom-up (once)."""
        geo, above = self.geo, self.above
        assert above is not None, "the top part comes after the tasks"
        if not getattr(self, "_summed", False):
            deepest = int(geo.depth[above.shape[0] - 1])
            for lv in range(deepest, 0, -1):
                lo, hi = geo.offsets[lv], geo.offsets[lv + 1]
                np.add.at(above, geo.parent[lo:hi], above[lo:hi])
            self._summed = True
        return above[nodes]


# -- the sink: write, and the non-private evaluation -------------------------------------------------

class Sink:
    """Writes each part's non-zero cells and accumulates the errors per level."""

    def __init__(self, out: Path | None, geo: Geography, truth: Callable[[Any], np.ndarray]) -> None:
        self.out = out
        self.geo = geo
        self.truth = truth
        self.abs_total = np.zeros(6)
        self.abs_vhc = np.zeros(6)
        self.units = np.zeros(6, np.int64)
        self.bytes = 0
        self.parts = 0
        self.nonzero = 0
        self.t_write = 0.0
        self.t_eval = 0.0
        self.c_write = 0.0
        self.c_eval = 0.0

    def __call__(self, task: Any, est: Any, meas: Any) -> None:
        self.take(task.index, task.nodes, np.asarray(est.values), lambda: self.truth(task))

    def take(self, index: int, nodes: np.ndarray, x: np.ndarray, truth: Callable[[], np.ndarray]) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        if self.out is not None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            r, c = np.nonzero(x)
            path = self.out / f"part-{index + 1:05d}.parquet"  # the top part is part 0
            pq.write_table(pa.table({"node": pa.array(nodes[r]), "cell": pa.array(c.astype(np.int16)),
                                     "value": pa.array(x[r, c].astype(np.int64))}), path)
            self.bytes += path.stat().st_size
            self.parts += 1
            self.nonzero += r.size
        t1, c1 = time.perf_counter(), time.thread_time()
        true = truth()  # non-private: the error against the true counts, accumulated, never printed as counts
        depth = self.geo.depth[nodes]
        err = x - true
        tot = np.abs(err.sum(axis=1))
        vhc = np.abs(err.reshape(-1, 8, 252).sum(axis=1)).mean(axis=1)
        self.abs_total += np.bincount(depth, tot, minlength=6)
        self.abs_vhc += np.bincount(depth, vhc, minlength=6)
        self.units += np.bincount(depth, minlength=6)
        self.t_write += t1 - t0
        self.t_eval += time.perf_counter() - t1
        self.c_write += c1 - c0
        self.c_eval += time.thread_time() - c1

    def report(self) -> list[str]:
        rows = [f"  {'level':12s} {'units':>10s} {'MAE total':>10s} {'MAE vhc cell':>13s}"]
        for d, lv in enumerate(cus.LEVELS):
            if self.units[d]:
                rows.append(f"  {lv:12s} {self.units[d]:10,d} {self.abs_total[d] / self.units[d]:10.2f} "
                            f"{self.abs_vhc[d] / self.units[d]:13.3f}")
        return rows


# -- the runs ---------------------------------------------------------------------------------------

def integer_chain(ordering: str) -> list[Any]:
    """The integer steps with the query ordering (``none``: no post-processing, the GLS estimate)."""
    if ordering == "none":
        return []
    return [{"name": "nonneg", "ordering": ordering}, {"name": "round", "method": "topdown", "ordering": ordering}]


def release_keywords(plan: str, seed: int | None, ordering: str = "total") -> dict[str, Any]:
    budgets = level_budgets()
    if plan == "marginals":
        strategy, _ = marginal_strategy()
        return dict(rho=float(RHO), seed=seed, invariants=["US", "State"], invariants_cover="total",
                    allow_invariants_with_add_remove=True,
                    postprocess=integer_chain(ordering),
                    plan={"name": "marginals", "strategy": strategy, "cells": CELL_DIMS,
                          "mechanism": "discrete_gaussian", "budget": budgets})
    return dict(rho=float(RHO), seed=seed, mechanism="discrete_gaussian", budget=budgets,
                postprocess=["blue", *integer_chain(ordering)])


def run(args: argparse.Namespace) -> None:
    import hierdp
    from hierdp.pipeline import release_by_subtree

    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    states = cus.parse_states(args.states, args.us)
    t0 = time.perf_counter()
    gen = cus.ensure_states(args.data, states, args.seed_data, verbose=True)
    t_gen = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    geo = Geography(args.data, states)
    tree = geo.tree()
    t_tree, c_tree = time.perf_counter() - t0, time.process_time() - c0
    n, k = tree.n_nodes, cus.N_CELLS
    sizes = ", ".join(f"{lv} {c:,}" for lv, c in zip(cus.LEVELS, geo.level_sizes))
    print(f"states {','.join(states)}: {n:,} units ({sizes}) x {k:,} cells = {n * k / 1e9:.2f}e9 node-cells")
    print(f"plan {args.plan}: rho {RHO} (zCDP), discrete Gaussian, level shares "
          + ", ".join(f"{lv} {s}" for lv, s in LEVEL_SHARES.items()))
    if args.plan == "marginals":
        _, dropped = marginal_strategy()
        print("  hhinstlevels is not a marginal (it coarsens hhgq into 3 groups): left out, each level's other "
              "query shares renormalised (dropped: " + ", ".join(f"{lv} {s}" for lv, s in dropped.items()) + ")")
        print("  US and state totals invariant; nonneg then round top-down (the states jointly under their totals "
              "and the US cells)")
    else:
        print("  per_level: the 2,016 cells of each unit as one histogram; blue, nonneg, round (topdown); "
              "no invariants (per_level holds only every cell exact)")
    if args.tree_only:
        from hierdp import subtrees

        t0 = time.perf_counter()
        try:
            part = subtrees.partition(tree, split_of(args), n_cells=k)
        except hierdp.errors.DataError as e:
            raise SystemExit(f"tree only: read geography + tree {t_tree:.1f} s, peak RSS {_rss_gib():.2f} GiB; "
                             f"partition refused: {e}") from None
        print(f"tree only: read geography + tree {t_tree:.1f} s; partition {split_of(args)} "
              f"{time.perf_counter() - t0:.1f} s: {part.n_tasks:,} tasks of <= {part.largest_task:,} nodes, top part "
              f"{part.top.size:,} nodes; peak RSS {_rss_gib():.2f} GiB")
        return
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="census-out-"))
    if out.exists() and any(out.iterdir()):
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    geo.write_nodes(out)
    counts = Counts(args.data, geo)
    kw = release_keywords(args.plan, args.seed, args.ordering)
    t0, c0 = time.perf_counter(), time.process_time()
    if args.in_memory:
        if n * k * 8 > 4 * 2**30:
            raise SystemExit(f"--in-memory holds {n:,} x {k} cells ({n * k * 8 / 2**30:.0f} GiB per array): too big; "
                             "run by subtree (without --in-memory) or pick a smaller state (DC is 11)")
        leaf = counts.leaves(np.arange(int(geo.level_sizes[5])))
        vals = tree.aggregate(leaf)
        del leaf
        t_count, c_count = time.perf_counter() - t0, time.process_time() - c0
        sink = Sink(out, geo, lambda task: vals)
        t0, c0 = time.perf_counter(), time.process_time()
        res = hierdp.release(tree, vals, **kw)
        t_rel, c_rel = time.perf_counter() - t0, time.process_time() - c0
        x = np.asarray(res.estimate.values)
        sink.take(-1, np.arange(n), x, lambda: vals)
        n_tasks = 1
    else:
        truth_counts = Counts(args.data, geo)  # the evaluation re-reads the counts (a second cursor)

        def truth(task: Any) -> np.ndarray:
            if task.index < 0:
                return counts.top(task.nodes)
            return truth_counts.of_task(task)

        sink = Sink(out, geo, truth)
        split = split_of(args)
        try:
            res = release_by_subtree(tree, counts.of_task, sink, split=split, n_cells=k, workers=args.workers, **kw)
        except hierdp.errors.PluginError as e:
            raise SystemExit(f"plan {args.plan} by subtree: {e}") from None
        except hierdp.errors.DataError as e:  # e.g. a split that does not fit --memory
            raise SystemExit(f"split release refused: {e}") from None
        total, c_total = time.perf_counter() - t0, time.process_time() - c0
        t_count, c_count = counts.seconds, counts.cpu
        t_rel = total - t_count - sink.t_write - sink.t_eval
        c_rel = c_total - c_count - sink.c_write - sink.c_eval
        n_tasks = res.partition.n_tasks
    size = sum(f.stat().st_size for f in out.iterdir())
    overlap = not args.in_memory and args.workers > 1
    if overlap:  # tasks on threads: counting, writing and evaluating overlap the release in wall time
        t_all = t_tree + total
        t_rel = total
        print(f"\nstages (s, wall): generate {t_gen:.1f} ({len(gen)} states generated now) | read geography + tree "
              f"{t_tree:.1f} | count + release + write + evaluate (non-private) {total:.1f} on {args.workers} task "
              f"threads (inside it, wall in: count {t_count:.1f}, write {sink.t_write:.1f}, evaluate "
              f"{sink.t_eval:.1f})")
    else:
        t_all = t_tree + t_count + t_rel + sink.t_write
        print(f"\nstages (s): generate {t_gen:.1f} ({len(gen)} states generated now) | read geography + tree "
              f"{t_tree:.1f} | count {t_count:.1f} | release {t_rel:.1f} | write {sink.t_write:.1f} | "
              f"evaluate (non-private) {sink.t_eval:.1f}")
    print(f"CPU (s, all threads; count, write and evaluate per thread; steadier than wall on a shared machine): "
          f"tree {c_tree:.1f} | count {c_count:.1f} | release {c_rel:.1f} | write {sink.c_write:.1f} "
          f"| evaluate {sink.c_eval:.1f}; release "
          f"{n * k / max(c_rel, 1e-9) / 1e6:.1f}M node-cells per CPU second")
    if overlap:
        print(f"tasks {n_tasks:,}; tree + count + release + write + evaluate {t_all:.1f} s wall = "
              f"{n * k / t_all / 1e6:.1f}M node-cells/s")
    else:
        print(f"tasks {n_tasks:,}; release {n * k / max(t_rel, 1e-9) / 1e6:.1f}M node-cells/s; read + count + "
              f"release + write {t_all:.1f} s = {n * k / t_all / 1e6:.1f}M node-cells/s")
    print(f"peak RSS {_rss_gib():.2f} GiB; output {size / 2**20:.0f} MiB in {out} ({sink.nonzero:,} non-zero "
          f"cells{'' if args.out else ', temporary: removed'})")
    print("error per level (non-private evaluation, means over units; vhc = votingage x hispanic x cenrace, "
          "per cell):")
    print("\n".join(sink.report()))
    print("(shared 2-core VM: times are noisy)")
    if not args.out:
        shutil.rmtree(out)


# -- the front door: the bundled pl94 spec through the hierdp command ------------------------------

GEOID_LENGTHS = {"State": 2, "County": 5, "Tract": 11, "Block_Group": 12, "Block": 15}


def write_cli_inputs(data: Path, states: list[str], work: Path) -> tuple[Path, Path]:
    """What a user with the Census's inputs has: the counts as a folder of Parquet parts (one
    per state, links to the cache's ``counts.parquet``: ``geoid``, the four codes, ``count``)
    and the public block list (``blocks.csv``: one ``geoid`` per block, empty blocks
    included)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    counts = work / "counts"
    counts.mkdir(parents=True, exist_ok=True)
    blocks = work / "blocks.csv"
    with pacsv.CSVWriter(blocks, pa.schema([("geoid", pa.string())])) as w:
        for fips in states:
            link = counts / f"{fips}.parquet"
            if not link.exists():
                link.symlink_to(cus.state_dir(data, fips).resolve() / "counts.parquet")
            geo = pq.read_table(cus.state_dir(data, fips) / "geography.parquet", columns=["geoid"])
            w.write_table(geo.cast(pa.schema([("geoid", pa.string())])))
    return counts, blocks


def write_cli_spec(work: Path, counts: Path, blocks: Path, args: argparse.Namespace) -> Path:
    """The bundled ``pl94`` example spec pointed at the inputs, run by subtree as ``--split``,
    ``--memory``, ``--task-memory`` and ``--workers`` say; the ordering of ``--ordering``."""
    import yaml

    from hierdp.data import resolve_spec

    spec = yaml.safe_load(Path(resolve_spec("pl94")).read_text())
    spec["source"] = {"path": str(counts), "count": "count", "engine": "duckdb"}
    spec["hierarchy"]["geoid"].update(file=str(blocks), column="geoid")
    spec["execution"] = {"split": split_of(args), "workers": args.workers, "workdir": str(work / "dataset.work")}
    if args.ordering != "total":
        spec["postprocess"] = [{"name": step.pop("name"), "params": step} for step in integer_chain(args.ordering)]
    spec["output"] = {"path": f"{work / 'dataset'}/"}
    path = work / "pl94-bench.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def evaluate_dataset(dataset: Path, data: Path, states: list[str]) -> dict[str, tuple[int, float, float]]:
    """Non-private evaluation of the released dataset against the true counts, in DuckDB: per
    level ``(units, MAE of unit totals, MAE of votingage x hispanic x cenrace cells)``, means
    over every unit of the public list, empty ones included (only means are printed)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET memory_limit='6GB'")
    con.execute("SET preserve_insertion_order=false")
    files = lambda name: "[" + ", ".join(f"'{cus.state_dir(data, s) / name}'" for s in states) + "]"  # noqa: E731
    con.execute(f"CREATE VIEW truth AS SELECT * FROM read_parquet({files('counts.parquet')})")
    con.execute(f"CREATE VIEW geo AS SELECT geoid FROM read_parquet({files('geography.parquet')})")
    con.execute(f"CREATE VIEW out AS SELECT * FROM read_parquet('{dataset}/part-*.parquet')")
    vhc = "votingage, hispanic, cenrace"
    cast = ", ".join(f"CAST({c} AS INTEGER) AS {c}" for c in vhc.split(", "))
    errors = {}
    for lv, n in {"US": 0, **GEOID_LENGTHS}.items():
        unit_out = "'US'" if lv == "US" else f'"{lv}"'
        unit_true = "'US'" if lv == "US" else f"substr(geoid, 1, {n})"
        units = 1 if lv == "US" else con.execute(f"SELECT count(DISTINCT substr(geoid, 1, {n})) FROM geo").fetchone()[0]
        tot = con.execute(f"""
            WITH o AS (SELECT {unit_out} AS u, sum(estimate) AS e FROM out WHERE level = '{lv}' GROUP BY 1),
                 t AS (SELECT {unit_true} AS u, sum(count) AS c FROM truth GROUP BY 1)
            SELECT sum(abs(coalesce(e, 0) - coalesce(c, 0))) FROM o FULL JOIN t USING (u)""").fetchone()[0]
        cell = con.execute(f"""
            WITH o AS (SELECT {unit_out} AS u, {cast}, sum(estimate) AS e FROM out WHERE level = '{lv}'
                       GROUP BY ALL),
                 t AS (SELECT {unit_true} AS u, {cast}, sum(count) AS c FROM truth GROUP BY ALL)
            SELECT sum(abs(coalesce(e, 0) - coalesce(c, 0))) FROM o FULL JOIN t USING (u, {vhc})""").fetchone()[0]
        errors[lv] = (int(units), float(tot or 0) / units, float(cell or 0) / (units * 252))
    return errors


def error_lines(errors: dict[str, tuple[int, float, float]]) -> list[str]:
    """The table of :func:`evaluate_dataset`."""
    return [f"  {'level':<12}{'units':>11}{'MAE total':>12}{'MAE vhc cell':>14}"] + [
        f"  {lv:<12}{n:>11,}{tot:>12.2f}{cell:>14.3f}" for lv, (n, tot, cell) in errors.items()]


def run_cli(args: argparse.Namespace) -> None:
    """The release as a user runs it: ``hierdp release pl94-bench.yaml -o DATASET/`` in a process
    of its own (the command sets its allocator itself), timed whole, its peak RSS from the
    operating system; then the dataset evaluated against the truth."""
    import subprocess

    states = cus.parse_states(args.states, args.us)
    t0 = time.perf_counter()
    gen = cus.ensure_states(args.data, states, args.seed_data, verbose=True)
    t_gen = time.perf_counter() - t0
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="census-cli-"))
    if (work / "dataset").exists():
        shutil.rmtree(work / "dataset")
    shutil.rmtree(work / "dataset.work", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    counts, blocks = write_cli_inputs(args.data, states, work)
    spec = write_cli_spec(work, counts, blocks, args)
    t_inputs = time.perf_counter() - t0
    cmd = [sys.executable, "-m", "hierdp", "release", str(spec), "-o", f"{work / 'dataset'}/"]
    if args.seed is not None:
        cmd += ["--seed", str(args.seed)]
    print(f"states {','.join(states)}: inputs written in {t_inputs:.1f} s ({len(gen)} states generated now, "
          f"{t_gen:.1f} s); running\n  {' '.join(cmd)}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.call(cmd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        raise SystemExit(f"hierdp release exited {rc}")
    cpu_user, cpu_sys = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    size = sum(f.stat().st_size for f in (work / "dataset").iterdir())
    print(f"\nhierdp release: {wall:.1f} s wall ({wall / 60:.1f} min), CPU {cpu_user:.0f} user + {cpu_sys:.0f} "
          f"system s; peak RSS {after.ru_maxrss / 2**20:.2f} GiB (the command's process); dataset "
          f"{size / 2**20:.0f} MiB")
    t0 = time.perf_counter()
    lines = error_lines(evaluate_dataset(work / "dataset", args.data, states))
    print(f"error per level (non-private evaluation in DuckDB, {time.perf_counter() - t0:.0f} s; means over units; "
          "vhc = votingage x hispanic x cenrace, per cell):")
    print("\n".join(lines))
    print("(shared 2-core VM: times are noisy)")
    if not args.out:
        shutil.rmtree(work)


def split_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``split=`` of the run: the level, the memory budget and, when given, a task's."""
    split: dict[str, Any] = {"level": args.split, "memory": args.memory}
    if args.task_memory:
        split["task_memory"] = args.task_memory
    return split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=cus.default_data_dir(), help="data cache (default %(default)s)")
    ap.add_argument("--states", help="FIPS or postal codes, comma-separated, e.g. 56 or 10,11,56")
    ap.add_argument("--us", action="store_true", help="the 50 states and DC")
    ap.add_argument("--plan", choices=("per_level", "marginals"), default="marginals")
    ap.add_argument("--ordering", choices=("total", "pl94", "cells", "none"), default="total",
                    help="the integer steps' query ordering: total (the default: each unit's total first), pl94 (the "
                         "production rounder's passes: total, hhgq, hhgq x hispanic, hhgq x hispanic x cenrace), cells "
                         "(cell by cell, before issue 47), none (no integer steps: the GLS estimate, BLUE)")
    ap.add_argument("--in-memory", action="store_true", help="one release in memory (small states only)")
    ap.add_argument("--split", default="Tract", help="split level (default %(default)s)")
    ap.add_argument("--memory", default="1GiB", help="memory per task (default %(default)s)")
    ap.add_argument("--task-memory", default=None,
                    help="memory per task when --memory is the whole budget (e.g. --memory 6GiB --task-memory 1GiB: "
                         "the US top solve at Tract needs 5.7 GB, a task far less)")
    ap.add_argument("--workers", type=int, default=2,
                    help="tasks at once, on threads (default %(default)s; 1: one task at a time, each using every "
                         "thread in its kernels)")
    ap.add_argument("--seed", type=int, default=None, help="noise seed (default: secure randomness)")
    ap.add_argument("--seed-data", type=int, default=cus.DEFAULT_SEED, help="generator seed")
    ap.add_argument("--out", help="output folder (default: a temporary one, removed)")
    ap.add_argument("--tree-only", action="store_true", help="build the tree and the partition, no release")
    ap.add_argument("--profile", action="store_true", help="cProfile the run; top 25 by cumulative time")
    ap.add_argument("--door", choices=("cli", "python"), default="cli",
                    help="cli (default): the bundled pl94 spec through `hierdp release` on the counts as a Parquet "
                         "folder and the block list, as a user runs it; python: hierdp.pipeline.release_by_subtree "
                         "with this file's counts reader (--in-memory, --tree-only, --profile)")
    ap.add_argument("--system-malloc", action="store_true",
                    help="--door python: leave glibc's allocator as it is (by default the process restarts with "
                         "MALLOC_ARENA_MAX=1 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647, what the "
                         "hierdp command sets)")
    args = ap.parse_args()
    if args.door == "python" and not args.system_malloc and os.environ.get("MALLOC_ARENA_MAX") != "1":
        # glibc reads these when the process starts: restart with them (the documented equivalent of
        # what `hierdp` does before numpy loads; docs/scale.md)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_KEEP})
    if args.door == "python" and not args.system_malloc:
        print("allocator: freed memory kept for reuse (MALLOC_ARENA_MAX=1 ...; --system-malloc to leave it)")
    if args.door == "cli" and (args.in_memory or args.tree_only or args.profile or args.plan != "marginals"):
        ap.error("--in-memory, --tree-only, --profile and --plan per_level go with --door python")
    if args.states is None and not args.us:
        ap.error("give --states (e.g. 56) or --us")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    if args.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.runcall(run, args)
        pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
        pstats.Stats(pr).sort_stats("tottime").print_stats(15)
    elif args.door == "cli":
        run_cli(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
