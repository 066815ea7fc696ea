"""The split release's top solve in blocks of cells (issue 31: the US on 8 GB): the GLS
top solve and the top-down steps on the top part give the same values bit for bit
whatever the block, the memory rule counts the top at its blocked working set plus the
arrays it holds whole, and the split path's kernels run interpreted or compiled by
node-cells."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hierdp
from hierdp import subtrees
from hierdp._kernels import jit
from hierdp.errors import DataError
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.nonneg import NonNegative
from hierdp.postprocessors.rounding import ControlledRounding

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

K = 37
BLOCKS = (1, 5, 6, K)  # 6: 37 = 6 x 6 + 1, a last block of one cell


def random_tree(n_target: int, levels: int, seed: int) -> hierdp.Tree:
    """An irregular tree (fan-outs drawn per node, early leaves allowed below the root)."""
    r = np.random.default_rng(seed)
    parents = [np.array([-1])]
    frontier = np.array([0])
    n = 1
    per_level = max(2.0, n_target ** (1.0 / (levels - 1)))
    for d in range(levels - 1):
        fan = r.integers(1 if d == 0 else 0, int(2 * per_level) + 1, size=frontier.size)
        if fan.sum() == 0:
            fan[0] = 1
        kids = np.repeat(frontier, fan)
        parents.append(kids)
        frontier = np.arange(n, n + kids.size)
        n += kids.size
    return hierdp.Tree.from_parent(np.concatenate(parents), level_names=[f"L{d}" for d in range(levels)])


def regular_tree(fans: tuple[int, ...]) -> hierdp.Tree:
    """Every node of depth d has ``fans[d]`` children (level sizes are the products)."""
    parents = [np.array([-1])]
    frontier = np.array([0])
    n = 1
    for f in fans:
        kids = np.repeat(frontier, f)
        parents.append(kids)
        frontier = np.arange(n, n + kids.size)
        n += kids.size
    return hierdp.Tree.from_parent(np.concatenate(parents), level_names=[f"L{d}" for d in range(len(fans) + 1)])


def _measurements(t: hierdp.Tree, per_cell: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy internal-order values (n, K) and variances (n, 1) or (n, K): a level unmeasured
    (inf), a few nodes exact (0), so the kernel's special branches all run."""
    r = np.random.default_rng(seed)
    d = t.internal.depth
    truth = t.to_internal(t.aggregate(r.integers(0, 9, size=(t.n_leaves, K)))).astype(np.float64)
    y = truth + r.normal(size=truth.shape)
    if per_cell:
        var = r.uniform(0.5, 2.0, size=(t.n_nodes, K))
        var[d == 3, ::4] = np.inf
    else:
        var = r.uniform(0.5, 2.0, size=t.n_levels)[d].reshape(-1, 1)
        var[d == 3] = np.inf
    exact = r.random(t.n_nodes) < 0.03
    exact[d > 2] = False
    y[exact] = truth[exact]
    var[exact] = 0.0
    return y, var


def _up(part: subtrees.Partition, y: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    eng = subtrees.SplitGLS(part)
    zs, us = zip(*(eng.up(task, y[task.nodes], var[task.nodes]) for task in part.tasks()), strict=True)
    return np.concatenate(zs), np.concatenate(us)


@pytest.mark.parametrize("per_cell", [False, True], ids=["shared_variance", "per_cell_variance"])
def test_the_top_solve_in_blocks_of_cells_is_the_same_bit_for_bit(per_cell: bool) -> None:
    t = random_tree(4000, 6, seed=3)
    y, var = _measurements(t, per_cell, seed=4)
    part = subtrees.partition(t, "L3", n_cells=K)
    z, u = _up(part, y, var)
    eng = subtrees.SplitGLS(part)
    runs = {b: eng.top(y[part.top], var[part.top], z, u, block=b) for b in BLOCKS}
    runs[0] = eng.top(y[part.top], var[part.top], z, u)  # the partition's own block
    for b, got in runs.items():
        for g, w in zip(got, runs[K], strict=True):
            assert g.shape == w.shape
            assert np.array_equal(g, w, equal_nan=True), f"block {b} differs from one block of {K}"
    # and the blocked top is the split GLS: down from it equals BLUE on the whole tree
    xt, vt, xr, vr = runs[1]
    ref = blue(t, y, var if per_cell else var[:, 0])
    rv = np.asarray(ref.variance).reshape(t.n_nodes, -1)
    np.testing.assert_allclose(xt, ref.values[part.top], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(vt, rv[part.top], rtol=1e-9, atol=1e-12)
    first = 0
    for task in part.tasks():
        m = task.roots.size
        x, _ = eng.down(task, y[task.nodes], var[task.nodes], xr[first:first + m], vr[first:first + m])
        first += m
        np.testing.assert_allclose(x, ref.values[task.nodes], rtol=1e-9, atol=1e-9)


def test_the_top_down_steps_on_the_top_part_in_blocks_are_the_same_bit_for_bit() -> None:
    t = random_tree(4000, 6, seed=5)
    r = np.random.default_rng(6)
    leaves = r.integers(0, 4, size=(t.n_leaves, K)) * (r.random((t.n_leaves, K)) < 0.35)
    truth = t.to_internal(t.aggregate(leaves)).astype(np.float64)
    y = truth + r.normal(scale=2.0, size=truth.shape)  # negatives where counts are 0
    var = np.full((t.n_nodes, 1), 4.0)
    part = subtrees.partition(t, "L3", n_cells=K)
    z, u = _up(part, y, var)
    xt, vt, xr, vr = subtrees.SplitGLS(part).top(y[part.top], var[part.top], z, u)
    steps = subtrees.SplitTopDown(part, [NonNegative(method="topdown"), ControlledRounding(method="topdown")], None)
    runs = {b: steps.top(xt, vt, xr, vr, block=b) for b in BLOCKS}
    for b, (last, fixed) in runs.items():
        want_last, want_fixed = runs[K]
        assert last.dtype == np.int64 and np.array_equal(last, want_last), f"block {b}"
        assert len(fixed) == 2
        for g, w in zip(fixed, want_fixed, strict=True):
            assert g.dtype == w.dtype and np.array_equal(g, w), f"block {b}"
    last, fixed = runs[1]
    assert (fixed[0] >= 0).all() and (last >= 0).all()
    # the rounded top part adds up: each top node's cells equal the sum over its children
    # (top nodes, then the roots' held integers)
    par = t.internal.parent
    kids = np.concatenate((last, fixed[1]))
    idx = np.concatenate((part.top, part.roots))
    sums = np.zeros_like(last)
    np.add.at(sums, np.searchsorted(part.top, par[idx[1:]]), kids[1:])
    has_kids = np.bincount(np.searchsorted(part.top, par[idx[1:]]), minlength=part.top.size) > 0
    assert np.array_equal(sums[has_kids], last[has_kids])


def test_a_bad_block_is_refused_in_one_line() -> None:
    t = random_tree(500, 4, seed=1)
    part = subtrees.partition(t, "L2", n_cells=2)
    with pytest.raises(DataError, match="block must be a positive number of cells, got 0"):
        subtrees.SplitGLS(part).top(np.zeros((part.top.size, 2)), np.ones((part.top.size, 1)),
                                    np.zeros((part.roots.size, 2)), np.ones((part.roots.size, 1)), block=0)


# ---------------------------------------------------------------------------- the memory rule
def test_the_top_is_counted_at_its_held_arrays_plus_one_block() -> None:
    """A tree of level sizes 1, 10, 200, 2000 and 100 cells, split at L2: 11 top nodes,
    200 roots, 611 nodes in the top solve. Held: 211 x 100 x 32 B = 675,200 B; one cell's
    block: 611 x 60 B = 36,660 B; so 711,860 B (the old rule: 611 x 100 x 60 = 3,666,000)."""
    t = regular_tree((10, 20, 10))
    assert t.n_nodes == 2211
    part = subtrees.partition(t, {"level": "L2", "memory": 800_000}, n_cells=100)
    assert (part.top.size, part.roots.size, part.top_nodes) == (11, 200, 611)
    assert part.top_bytes(100) == 711_860
    assert part.top_bytes(100, block=100) == 3_666_000  # one block: the whole working set, as before
    assert part.top_bytes(100, block=3) == 675_200 + 3 * 36_660
    assert part.top_block(100) == (800_000 - 675_200) // 36_660 == 3
    with pytest.raises(DataError, match=r"the top solve .* needs 711,860 bytes, more than split memory 711,859"):
        subtrees.partition(t, {"level": "L2", "memory": 711_859}, n_cells=100)
    subtrees.partition(t, {"level": "L2", "memory": 711_860}, n_cells=100)  # exactly enough
    # the chooser: L0 and L1 hold too large a subtree (2,211 and 221 nodes x 6,000 B), L2 fits
    assert subtrees.partition(t, {"memory": 800_000}, n_cells=100).level == "L2"
    # one cell: one block is cheaper (611 x 60 B = 36,660 B, no held copies), as before blocks
    subtrees.partition(t, {"level": "L2", "memory": 36_660}, n_cells=1)
    with pytest.raises(DataError, match="needs 36,660 bytes"):
        subtrees.partition(t, {"level": "L2", "memory": 36_659}, n_cells=1)
    assert subtrees.partition(t, {"level": "L2", "memory": 4_000_000}, n_cells=100).top_block(100) == 100
    # without a budget, a block's working set stays within TOP_BLOCK_BYTES
    free = subtrees.partition(t, "L2", n_cells=100)
    assert free.top_block(100) == 100 and free.top_block(10**7) == subtrees.TOP_BLOCK_BYTES // (611 * 60)


def test_the_us_shape_splits_at_tract_in_8_gib() -> None:
    """The 2020 census shape (``benchmarks/bench_census_us.py --us --tree-only``): 1 US, 51
    states, 3,143 counties, 84,414 tracts, 239,780 block groups, 8,132,968 blocks; 2,016
    cells. At Tract the top holds (3,195 + 84,414) x 2,016 x 32 B = 5,651,831,808 B and a
    one-cell block needs 256,437 x 60 B = 15,386,220 B: 5,667,218,028 B <= 8 GiB, where the
    whole top solve at once needed 256,437 x 2,016 x 60 B = 31,018,619,520 B."""
    n_top, n_roots, k = 1 + 51 + 3143, 84_414, 2016
    assert subtrees._top_bytes(n_top, n_roots, k, 1) == 5_667_218_028 <= subtrees.parse_memory("8GiB")
    assert (n_top + 3 * n_roots) * k * subtrees.BYTES_PER_NODE_CELL == 31_018_619_520
    assert subtrees._top_bytes(n_top, n_roots, k, 1) > subtrees.parse_memory("4GiB")  # 4 GiB: still refused
    # the blocks an 8 GiB budget gives: 1 GiB of working set, 69 cells (30 blocks)
    assert (2**30) // (256_437 * 60) == 69


# ---------------------------------------------------------------------------- interpreted or compiled
def test_the_split_gls_chooses_interpreted_kernels_by_node_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Few node-cells run the BLUE kernel interpreted; a task of few nodes but more than
    ``jit.SMALL_INPUT`` node-cells runs it compiled (``jit.for_size`` counts ``n * k``)."""
    monkeypatch.setattr(jit, "SMALL_INPUT", 1 << 14)  # the library's default (the suite's conftest sets 0)
    seen: list[Any] = []
    real = jit.interpreted
    monkeypatch.setattr(jit, "interpreted", lambda kern: seen.append(kern) or real(kern))
    t = random_tree(60, 4, seed=2)
    n = t.n_nodes
    assert n < 200
    for k, want_interpreted in ((1, True), (jit.SMALL_INPUT + 1, False)):
        seen.clear()
        y = np.random.default_rng(k).normal(size=(n, k))
        part = subtrees.partition(t, "L2", n_cells=k)
        z, u = _up(part, y, np.ones((n, 1)))
        subtrees.SplitGLS(part).top(y[part.top], np.ones((part.top.size, 1)), z, u)
        assert (BK.blue_2d in seen) == want_interpreted, k


def test_a_split_release_with_a_top_in_one_cell_blocks_is_the_same_bit_for_bit(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """Through the pipeline (``SplitStages.top``): with a block budget that leaves one cell
    per block, the release (GLS, top-down nonneg and round) equals the one-block release."""
    t = random_tree(3000, 5, seed=9)
    r = np.random.default_rng(10)
    vals = t.aggregate(r.integers(0, 4, size=(t.n_leaves, 6)) * (r.random((t.n_leaves, 6)) < 0.35))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=11, split="L2",
                              postprocess=["blue", "nonneg", {"name": "round", "method": "topdown"}])
    want = hierdp.release(t, vals, **kw)
    blocks: list[int] = []
    real = subtrees.Partition.top_block
    monkeypatch.setattr(subtrees, "TOP_BLOCK_BYTES", 1)
    monkeypatch.setattr(subtrees.Partition, "top_block", lambda self, k: blocks.append(real(self, k)) or blocks[-1])
    got = hierdp.release(t, vals, **kw)
    assert blocks and set(blocks) == {1}
    assert got.estimate.values.dtype == np.int64
    assert np.array_equal(got.estimate.values, want.estimate.values)
    assert np.array_equal(got.estimate.variance, want.estimate.variance)


# ---------------------------------------------------------------------------- the roots' arrays on disk
def _on_disk(folder: Any, name: str, a: np.ndarray, width: int, pieces: int = 3) -> Any:
    """``a`` into :class:`ColumnsOnDisk` blocks of ``width`` columns, appended in uneven row pieces."""
    from hierdp._kernels.columns import ColumnsOnDisk, column_bounds

    cols = ColumnsOnDisk(folder, name, a.shape[0], column_bounds(a.shape[1], width if a.shape[1] > 1 else 1))
    edges = np.unique(np.r_[0, np.random.default_rng(1).integers(0, a.shape[0], pieces), a.shape[0]])
    for i, j in zip(edges, edges[1:]):
        cols.append(a[i:j])
    cols.finish()
    return cols


def test_columns_on_disk_give_back_blocks_rows_and_chosen_rows(tmp_path: Any) -> None:
    from hierdp._kernels.columns import ColumnsOnDisk

    a = np.random.default_rng(2).normal(size=(101, K))
    cols = _on_disk(tmp_path, "a", a, 6)
    assert cols.bounds == [0, 6, 12, 18, 24, 30, 36, 37] and cols.shape == (101, K)
    for b in range(cols.n_blocks):
        assert np.array_equal(cols.block(b), a[:, cols.bounds[b]:cols.bounds[b + 1]])
    for i, j in ((0, 101), (17, 18), (40, 99), (100, 101), (5, 5)):
        assert np.array_equal(cols[i:j], a[i:j])
    rows = np.array([99, 3, 3, 50])
    assert np.array_equal(cols.take(rows), a[rows])
    cols.save_layout()
    again = ColumnsOnDisk.open(tmp_path, "a")
    assert np.array_equal(again[0:101], a)
    with pytest.raises(ValueError, match="got 2 rows of 3"):
        short = ColumnsOnDisk(tmp_path, "s", 3, [0, 2])
        short.append(np.zeros((2, 2)))
        short.finish()
    cols.remove()
    short.remove()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("per_cell", [False, True], ids=["shared_variance", "per_cell_variance"])
def test_the_top_solve_from_disk_is_the_in_memory_one_bit_for_bit(tmp_path: Any, per_cell: bool) -> None:
    """:meth:`SplitGLS.top_on_disk` (the roots' ``z``/``u`` read a block of cells at a time,
    their results written a block at a time) gives the in-memory top's numbers."""
    from hierdp._kernels.columns import ColumnsOnDisk

    t = random_tree(4000, 6, seed=3)
    y, var = _measurements(t, per_cell, seed=4)
    part = subtrees.partition(t, "L3", n_cells=K)
    z, u = _up(part, y, var)
    eng = subtrees.SplitGLS(part)
    want = eng.top(y[part.top], var[part.top], z, u)
    zc, uc = _on_disk(tmp_path, "z", z, 5), _on_disk(tmp_path, "u", u, 5)
    xo = ColumnsOnDisk(tmp_path, "x", z.shape[0], zc.bounds)
    vo = ColumnsOnDisk(tmp_path, "v", u.shape[0], uc.bounds)
    xt, vt = eng.top_on_disk(y[part.top], var[part.top], zc, uc, xo, vo)
    n = part.roots.size
    for g, w in zip((xt, vt, xo[0:n], vo[0:n]), want, strict=True):
        assert g.shape == w.shape and np.array_equal(g, w, equal_nan=True)


@pytest.mark.parametrize("level", ["L1", "L3"])
def test_the_top_down_steps_from_disk_are_the_in_memory_ones_bit_for_bit(tmp_path: Any, level: str) -> None:
    """:meth:`SplitTopDown.top_on_disk` with the roots' values on disk equals
    :meth:`SplitTopDown.top`, with node totals pinned (split at L1: the pinned region takes
    the roots' rows from disk)."""
    t = random_tree(4000, 6, seed=5)
    r = np.random.default_rng(6)
    leaves = r.integers(0, 4, size=(t.n_leaves, K)) * (r.random((t.n_leaves, K)) < 0.35)
    truth = t.to_internal(t.aggregate(leaves)).astype(np.float64)
    y = truth + r.normal(scale=2.0, size=truth.shape)
    var = np.full((t.n_nodes, 1), 4.0)
    part = subtrees.partition(t, level, n_cells=K)
    z, u = _up(part, y, var)
    xt, vt, xr, vr = subtrees.SplitGLS(part).top(y[part.top], var[part.top], z, u)
    steps = subtrees.SplitTopDown(part, [NonNegative(method="topdown"), ControlledRounding(method="topdown")], None)
    d = t.internal.depth[np.concatenate((part.top, part.roots))]
    totals = np.where(d <= 1, truth[np.concatenate((part.top, part.roots))].sum(axis=1), np.nan)
    want_last, want_fixed = steps.top(xt, vt, xr, vr, block=5, totals=totals)
    xc, vc = _on_disk(tmp_path, "x", xr, 5), _on_disk(tmp_path, "v", vr, 5)
    made: list[Any] = []

    def out(j: int, dtype: Any) -> Any:
        from hierdp._kernels.columns import ColumnsOnDisk
        made.append(ColumnsOnDisk(tmp_path, f"fixed{j}", part.roots.size, xc.bounds, dtype))
        return made[-1]

    last, fixed = steps.top_on_disk(xt, vt, xc, vc, out, totals=totals)
    assert fixed == made and len(fixed) == 2
    assert last.dtype == want_last.dtype and np.array_equal(last, want_last)
    n = part.roots.size
    for g, w in zip(fixed, want_fixed, strict=True):
        assert g.dtype == w.dtype and np.array_equal(g[0:n], w)


@pytest.mark.parametrize("plan, cover, level", [("marginals", "total", "L1"), ("marginals", "cells", "L1"),
                                                ("marginals", "total", "L2"), ("per_level", "cells", "L2")])
def test_a_streamed_release_with_the_top_on_disk_in_one_cell_blocks_equals_in_memory(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch, plan: str, cover: str, level: str) -> None:
    """``release_by_subtree`` keeps the roots' arrays on disk in blocks of cells (here one
    cell a block) through the GLS, the rotation back and the top-down steps: the values
    equal the in-memory split release's bit for bit, invariant cells or totals exact, and
    the work folder is left empty."""
    from hierdp.pipeline import release_by_subtree

    t = random_tree(3000, 5, seed=31)
    r = np.random.default_rng(4)
    vals = t.aggregate(r.integers(0, 3, size=(t.n_leaves, 16)) * (r.random((t.n_leaves, 16)) < 0.3))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=12, invariants=["L0", "L1"], invariants_cover=cover,
                              neighbours="substitute", postprocess=["nonneg", {"name": "round", "method": "topdown"}])
    if cover == "cells" and level == "L1":  # float output: the roots' exact cells show bit for bit
        kw["postprocess"] = ["nonneg"]
    if plan == "marginals":
        kw["plan"] = {"name": "marginals", "cells": {"a": 4, "b": 2, "c": 2},
                      "strategy": {("a", "b"): 0.5, ("c",): 0.3, (): 0.2}}
    else:
        kw["postprocess"] = ["blue"] + kw["postprocess"]
    want = hierdp.release(t, vals, split=level, **kw).estimate.values
    vi = t.to_internal(vals)
    got = np.full(vi.shape, -1, want.dtype)

    def sink(task: subtrees.SubtreeTask, est: Any, meas: Any) -> None:
        got[task.nodes] = est.values

    widths: list[int] = []
    real = subtrees.Partition.top_block
    monkeypatch.setattr(subtrees, "TOP_BLOCK_BYTES", 1)
    monkeypatch.setattr(subtrees.Partition, "top_block",
                        lambda self, k, **o: widths.append(real(self, k, **o)) or widths[-1])
    release_by_subtree(t, lambda task: vi[task.nodes], sink, split=level, n_cells=16, workdir=tmp_path, **kw)
    assert widths and set(widths) == {1}
    assert np.array_equal(t.to_external(got), want)
    assert list(tmp_path.iterdir()) == []
