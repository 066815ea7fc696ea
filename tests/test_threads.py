"""The thread setting, and results that do not depend on it (issue: census scale, scope 3)."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest

import hierdp
from hierdp._kernels import memory as _memory
from hierdp._kernels import threads as _threads
from hierdp._kernels import tree_kernels as TK
from hierdp._kernels import tree_pieces as TP
from hierdp.mechanisms import _samplers as S
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _gmc_kernels as GK
from hierdp.postprocessors import _rounding_kernels as RK
from hierdp.postprocessors import blue as B
from hierdp.postprocessors import gmc as G
from hierdp.postprocessors.rounding import controlled_round
from hierdp.rng import SeededRandom
from tests.helpers import random_parent


def test_setting_precedence(monkeypatch, restore_threads):
    hierdp.set_threads(None)
    monkeypatch.delenv("HIERDP_THREADS", raising=False)
    assert hierdp.get_threads() == _threads._cores() >= 1
    monkeypatch.setenv("HIERDP_THREADS", "3")
    assert hierdp.get_threads() == 3
    assert hierdp.set_threads(2) is None
    assert hierdp.get_threads() == 2  # the call wins over the environment
    assert hierdp.set_threads(None) == 2
    assert hierdp.get_threads() == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, "two", "", True, "2.0"])
def test_bad_settings_are_one_line_errors(monkeypatch, restore_threads, bad):
    with pytest.raises(ValueError, match="whole number of threads >= 1") as e:
        hierdp.set_threads(bad)
    assert "\n" not in str(e.value)
    if isinstance(bad, str) and bad:
        hierdp.set_threads(None)
        monkeypatch.setenv("HIERDP_THREADS", bad)
        with pytest.raises(ValueError, match="HIERDP_THREADS"):
            hierdp.get_threads()


def test_pieces_keep_their_order_and_errors_surface(restore_threads):
    hierdp.set_threads(3)
    assert _threads.run_pieces(lambda x: x * x, list(range(50))) == [x * x for x in range(50)]

    def boom(x):
        if x == 7:
            raise KeyError("piece 7")
        return x

    with pytest.raises(KeyError, match="piece 7"):
        _threads.run_pieces(boom, list(range(20)))


def test_pieces_inside_pieces_run_inline(restore_threads):
    """A piece that itself cuts work into pieces (or a caller on one of hierdp's pool
    threads) runs them in its own thread instead of waiting on the pool it occupies."""
    import threading

    hierdp.set_threads(2)
    out: list = []
    worker = threading.Thread(target=lambda: out.extend(_threads.run_pieces(
        lambda i: sum(_threads.run_pieces(lambda j: i * j, list(range(5)))), list(range(8)))), daemon=True)
    worker.start()
    worker.join(timeout=60)  # a deadlock fails the test instead of hanging the suite
    assert not worker.is_alive(), "pieces inside pieces deadlocked on hierdp's pool"
    assert out == [10 * i for i in range(8)]


SIZE = 3 * S._CHUNK_DRAWS + 17  # three whole chunks and a short one


@pytest.mark.parametrize("draw", [
    lambda rng: S.discrete_laplace(2.5, SIZE, rng),
    lambda rng: S.discrete_gaussian(40.0, SIZE, rng),
    lambda rng: S.sample_discrete_gaussian(S.dgauss_params(7.0), SIZE, rng, method="cks"),
], ids=["laplace", "gaussian", "gaussian-cks"])
def test_draws_are_the_same_whatever_the_thread_count(monkeypatch, restore_threads, draw):
    """Each chunk has its own stream of words, taken from the source in chunk order; small
    batches of words make chunks stop and ask for more in the middle of draws."""
    monkeypatch.setattr(S, "_CHUNK_GROUP", 3)  # groups of chunks too
    runs = []
    for threads, batch in ((1, 1 << 21), (2, 1 << 21), (4, 1 << 21), (2, 64), (3, 64)):
        hierdp.set_threads(threads)
        monkeypatch.setattr(S, "_WORD_BATCH", batch)
        runs.append(draw(SeededRandom(11)))
    for r in runs[1:3]:
        np.testing.assert_array_equal(r, runs[0])
    np.testing.assert_array_equal(runs[4], runs[3])  # small batches: another stream use, same across threads
    assert np.count_nonzero(runs[0]) > SIZE // 2


def test_chunked_draws_have_the_exact_distribution(restore_threads):
    """Chunks (each on fresh words, the tail of a chunk's words unused) keep the discrete
    Laplace law: P(0) and the two tails against (1-q)/(1+q) and q^k/(1+q), q = e^{-1/b}."""
    hierdp.set_threads(2)
    b = 3.0
    x = S.discrete_laplace(b, 40 * S._CHUNK_DRAWS, SeededRandom(5))
    p = S.dlap_params(b)
    q = math.exp(-p.s / p.t)
    n = x.size
    for k, prob in ((0, (1 - q) / (1 + q)), (1, (1 - q) / (1 + q) * q), (-3, (1 - q) / (1 + q) * q**3)):
        got = np.count_nonzero(x == k)
        assert abs(got - n * prob) < 5 * math.sqrt(n * prob * (1 - prob))
    first = x[: S._CHUNK_DRAWS]
    second = x[S._CHUNK_DRAWS: 2 * S._CHUNK_DRAWS]
    assert not np.array_equal(first, second)
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.02


# -- tree passes in pieces ---------------------------------------------------------------------

@pytest.fixture
def small_pieces(monkeypatch, restore_threads):
    """Cut trees of a few thousand nodes into pieces of 16 nodes (the passes of census-size
    trees, at test size)."""
    monkeypatch.setattr(TP, "PARALLEL_MIN", 64)
    monkeypatch.setattr(TP, "PIECE", 16)
    from hierdp.postprocessors import nonneg, rounding

    for mod in (B, G, nonneg, rounding):
        monkeypatch.setattr(mod, "PARALLEL_MIN", 64)
    monkeypatch.setattr(G, "PIECE", 16)  # weighted GMC's input scan
    monkeypatch.setattr(_threads, "PREFAULT_MIN", 0)  # touch the pages of every output that would be


def _trees():
    """Ragged random trees (hierdp's own order), a complete binary tree and quadtree, a
    tree with every leaf at one depth and fan-outs 2-5, a tree whose fan-out changes at
    every node, and a caterpillar (one class per node)."""
    rng = np.random.default_rng(0)
    out = [hierdp.Tree.from_parent(random_parent(rng, int(m))) for m in (300, 2000, 5000)]
    out.append(hierdp.Tree.complete(2, 11))
    out.append(hierdp.Tree.complete(4, 6))  # a quadtree: runs of 4 leaves, the height-2 class in one pass
    out.append(_level_tree(rng, 3000))  # all leaves at one depth, fan-outs 2-5: subtree blocks
    fan = rng.integers(1, 6, 700)
    parent = np.repeat(np.arange(700), fan)
    out.append(hierdp.Tree.from_parent(np.r_[-1, parent[: 2999]]))
    out.append(hierdp.Tree.from_parent(np.r_[-1, np.repeat(np.arange(0, 200, 2), 2)[:199]]))
    out.append(hierdp.Tree.complete(24, 3))  # long runs of sibling leaves (BLUE's run-by-run leaf passes)
    out.append(hierdp.Tree.from_parent(np.r_[-1, np.zeros(400, np.int64)]))  # a star: one class of leaves
    return out


def _level_tree(rng, n_leaves):
    """Nodes grouped bottom-up into parents of 2-5 children, level by level, until one root
    is left (the benchmarks' random fan-out tree): every leaf at the same depth."""
    levels, count = [], n_leaves
    while count > 1:
        fan = rng.integers(2, 6, count)
        g = int(np.searchsorted(np.cumsum(fan), count)) + 1
        levels.append(np.repeat(np.arange(g), fan[:g])[:count])
        count = g
    parent, above, start = [-1], 0, 1
    for groups in levels[::-1]:  # numbered level by level from the root
        parent.extend((above + groups).tolist())
        above, start = start, start + groups.size
    return hierdp.Tree.from_parent(np.array(parent))


def test_pieces_cut_classes_at_parent_boundaries(small_pieces):
    for tree in _trees():
        tree.cache.clear()
        p = TP.tree_pieces(tree)
        par = tree.internal.parent
        assert p.leaves[0][0] == p.n1 and p.leaves[-1][1] == tree.n_nodes
        ranges = [p.leaves, *p.classes]
        assert sum(b - a for cls in ranges for a, b in cls) == tree.n_nodes
        for h, cls in enumerate(ranges, start=1):
            sl = tree.internal.height_slice(h)
            assert cls[0][0] == sl.start and cls[-1][1] == sl.stop
            for (_, b), (a, _) in zip(cls[:-1], cls[1:], strict=True):
                assert b == a and par[a] != par[a - 1]  # never inside a parent's run of children
            owners = [set(par[a:b].tolist()) for a, b in cls]
            for i in range(len(owners)):
                for j in range(i + 1, len(owners)):
                    assert not owners[i] & owners[j]  # no parent fed by two pieces


def test_bottom_runs_marks_trees_whose_leaves_hang_from_height_2_only(small_pieces):
    """``Pieces.bottom_runs`` and ``equal_runs``, against their definitions: the parents of
    the leaves, in leaf order with repeats dropped, are the height-2 nodes in order, and the
    root is above them; every run of sibling leaves has one length."""
    seen = {True: 0, False: 0}
    for tree in _trees():
        tree.cache.clear()
        p = TP.tree_pieces(tree)
        par = tree.internal.parent
        lp = par[p.n1:].tolist()
        runs = [q for k, q in enumerate(lp) if k == 0 or q != lp[k - 1]]
        sl = tree.internal.height_slice(2)
        want = tree.height > 2 and runs == list(range(sl.start, sl.stop))
        assert p.bottom_runs == want
        seen[want] += 1
        lengths = {sum(1 for _ in g) for _, g in itertools.groupby(lp)}
        assert p.equal_runs == (len(lengths) <= 1)
    assert seen[True] >= 2 and seen[False] >= 2  # complete trees on one side, ragged ones on the other


@pytest.mark.parametrize("blocks", [8, 256])
def test_blocks_hold_whole_subtrees_and_sum_like_one_loop(small_pieces, monkeypatch, blocks):
    """``Pieces.block_bounds`` against its definition: block b holds, at each height below
    ``block_height``, exactly the descendants of its nodes of that height, in one range,
    and the blocks cover those heights once; only trees whose leaves are all at one depth
    get blocks. Sums over groups of blocks are the one-loop kernel's, bit for bit, in
    place and into a new array, on 1-3 threads, and so are GMC (39), weighted GMC and
    BLUE by blocks."""
    monkeypatch.setattr(TP, "BLOCKS", blocks)
    rng = np.random.default_rng(5)
    blocked = gmc_blocks = blue_blocks = 0
    for tree in _trees():
        tree.cache.clear()
        p = TP.tree_pieces(tree)
        par, depth, n1 = tree.internal.parent, tree.internal.depth, p.n1
        level = bool(n1) and bool(np.all(depth[n1:] == tree.height - 1)) and p.children_in_order
        big = [h for h in range(2, tree.height + 1) if _class_size(tree, h) >= blocks]
        assert (p.block_bounds is not None) == (level and bool(big))
        if p.block_bounds is None:
            continue
        blocked += 1
        hb = p.block_height
        assert hb == max(big) and p.block_bounds.shape == (hb - 1, blocks + 1)
        owner = np.full(tree.n_nodes, -1)  # the block of each node below the block height
        for h in range(1, hb):
            sl = tree.internal.height_slice(h)
            b = p.block_bounds[h - 1]
            assert b[0] == sl.start and b[-1] == sl.stop and np.all(np.diff(b) >= 0)
            for blk in range(blocks):
                owner[b[blk]:b[blk + 1]] = blk
        assert np.all(owner[tree.internal.height_slice(hb - 1).start:] >= 0)  # every node below, once
        for h in range(1, hb - 1):  # a node's parent is in its block, below the block height
            sl = tree.internal.height_slice(h)
            nodes = np.arange(sl.start, sl.stop)
            np.testing.assert_array_equal(owner[par[nodes]], owner[nodes])
        below = tree.internal.height_slice(hb - 1)  # children of one top node share a block
        kids = np.arange(below.start, below.stop)
        for q in np.unique(par[kids]):
            assert np.unique(owner[kids[par[kids] == q]]).size == 1
        every = rng.integers(-3, 9, tree.n_nodes)
        want = TK.sum_up_1d(par, every, np.empty_like(every))
        fl = every / 3.0
        want_f = TK.sum_up_1d(par, fl, np.empty(tree.n_nodes))
        gs = G.gmc_structure(tree)
        y = rng.normal(0.0, 3.0, tree.n_nodes)
        g1 = GK.gmc_39_1d(gs.parent1, gs.n1, gs.inv_theta, gs.leaf_starts, gs.leaf_parents, y,
                          np.empty(tree.n_nodes), np.empty(gs.n1))
        gmc_blocks += gs.leaf_parent is not None and not G._bottom_with_leaves(gs, p)
        var = rng.uniform(0.5, 3.0, tree.n_nodes)
        with pytest.MonkeyPatch.context() as mp:  # weighted GMC in one loop
            mp.setattr(G, "PARALLEL_MIN", 1 << 40)
            gw1, gwv1 = G.gmc_weighted(tree, y, var)
        bst = B._structure(tree)
        blue_blocks += bst.flat_parent is not None and not p.long_runs
        if bst.flat_parent is not None:  # the flat BLUE kernel in one loop
            x1, xv1 = np.empty(tree.n_nodes), np.empty(tree.n_nodes)
            assert BK.blue_flat_1d(bst.flat_parent, bst.n1, y, var, x1, xv1, np.empty((bst.n1, 2))) == 0
        for threads in (1, 2, 3):
            hierdp.set_threads(threads)
            np.testing.assert_array_equal(tree._sum_up(every), want)
            np.testing.assert_array_equal(tree._sum_up(fl), want_f)
            np.testing.assert_array_equal(tree._sum_up(fl.copy(), consume=True), want_f)
            np.testing.assert_array_equal(G.gmc(tree, y), g1)  # GMC (39) by blocks where it goes by them
            gw, gwv = G.gmc_weighted(tree, y, var)  # and weighted GMC
            np.testing.assert_array_equal(gw, gw1)
            np.testing.assert_array_equal(gwv, gwv1)
            if bst.flat_parent is not None and not p.long_runs:  # and BLUE, leaves one by one
                e = B.blue(tree, y, var)
                np.testing.assert_array_equal(e.values, x1)
                np.testing.assert_array_equal(e.variance, xv1)
    assert blocked >= 3  # the complete binary tree, the quadtree, the tree of fan-outs 2-5
    assert gmc_blocks >= 1 and blue_blocks >= 3


def _class_size(tree, h):
    sl = tree.internal.height_slice(h)
    return sl.stop - sl.start


def test_a_class_whose_parents_come_back_is_one_piece(monkeypatch):
    """Pieces are cut only where no parent has children on both sides; when a parent's
    children are not one run, the range is not cut at all."""
    monkeypatch.setattr(TP, "PIECE", 4)
    grouped = np.repeat(np.arange(10), 3)
    # the first parent boundary at or after every 4th node: 4 -> 6, 8 -> 9, 12, 16 -> 18, 20 -> 21, 24, 28 -> 30
    assert TP._cuts(grouped, 0, 30) == [(0, 6), (6, 9), (9, 12), (12, 18), (18, 21), (21, 24), (24, 30)]
    back = np.r_[grouped[:15], grouped[:15]]  # parents 0-4 twice
    assert TP._cuts(back, 0, 30) == [(0, 30)]


def _agree_over_threads(run):
    results = []
    for threads in (1, 2, 3):
        hierdp.set_threads(threads)
        results.append(run())
    for r in results[1:]:
        for a, b in zip(results[0], r, strict=True):
            np.testing.assert_array_equal(a, b)
    return results[0]


def test_tree_passes_are_the_same_whatever_the_thread_count(small_pieces):
    """Aggregation, BLUE, GMC and round in pieces: identical over 1-3 threads and equal,
    bit for bit, to the one-loop kernels."""
    rng = np.random.default_rng(1)
    fused = 0
    for tree in _trees():
        tree.cache.clear()
        n = tree.n_nodes
        leaves = rng.poisson(4.0, tree.n_leaves)
        full = np.zeros(n, np.int64)
        full[tree.n_nodes - tree.n_leaves:] = leaves
        y = tree.to_internal(tree.aggregate(leaves)).astype(float) + rng.normal(0, 2, n)
        var = rng.uniform(0.5, 3.0, n)
        fl = tree.to_internal(tree.aggregate(rng.uniform(0, 4, tree.n_leaves)))

        every = rng.integers(-3, 9, n)  # a value at every node, not only the leaves

        def run(tree=tree, full=full, y=y, var=var, fl=fl, every=every):
            tree.cache.clear()
            e = B.blue(tree, y, var)
            return [tree._sum_up(full), tree._sum_up(np.c_[full, 2 * full]), tree._sum_up(every),
                    tree._sum_up(every / 3.0), e.values, e.variance, G.gmc(tree, y), controlled_round(tree, fl),
                    *G.gmc_weighted(tree, y, var), tree._sum_up(full.copy(), consume=True),
                    tree._sum_up(np.c_[full, 2 * full], consume=True), tree._sum_up(every / 3.0, consume=True)]

        agg, agg2, agg_every, agg_float, x, xv, g, r, gw, gwv, *summed_in_place = _agree_over_threads(run)
        for a, b in zip(summed_in_place, (agg, agg2, agg_float), strict=True):  # bit for bit, sums in place
            np.testing.assert_array_equal(a, b)
        # float sums: the same bits as the one loop (each parent adds its children in its order)
        np.testing.assert_array_equal(agg_float, TK.sum_up_1d(tree.internal.parent, every / 3.0, np.empty(n)))
        np.testing.assert_array_equal(agg, TK.sum_up_1d(tree.internal.parent, full, np.empty_like(full)))
        np.testing.assert_array_equal(agg2[:, 1], 2 * agg)
        np.testing.assert_array_equal(agg_every, TK.sum_up_1d(tree.internal.parent, every, np.empty_like(every)))
        st = B._structure(tree)
        if st.flat_parent is not None:  # the flat BLUE kernel in one loop
            x1, xv1 = np.empty(n), np.empty(n)
            assert BK.blue_flat_1d(st.flat_parent, st.n1, y, var, x1, xv1, np.empty((st.n1, 2))) == 0
            if TP.tree_pieces(tree).long_runs:  # sums of a run's leaves in another order
                np.testing.assert_allclose(x, x1, rtol=1e-12, atol=1e-9)
                np.testing.assert_allclose(xv, xv1, rtol=1e-12)
            else:
                np.testing.assert_array_equal(x, x1)
                np.testing.assert_array_equal(xv, xv1)
        gs = G.gmc_structure(tree)
        fused += G._bottom_with_leaves(gs, TP.tree_pieces(tree))
        g1 = np.empty(n)
        GK.gmc_39_1d(gs.parent1, gs.n1, gs.inv_theta, gs.leaf_starts, gs.leaf_parents, y, g1, np.empty(gs.n1))
        np.testing.assert_allclose(g, g1, rtol=0, atol=0)
        with pytest.MonkeyPatch.context() as mp:  # weighted GMC in one loop
            mp.setattr(G, "PARALLEL_MIN", 1 << 40)
            tree.cache.clear()
            gw1, gwv1 = G.gmc_weighted(tree, y, var)
        np.testing.assert_array_equal(gw, gw1)
        np.testing.assert_array_equal(gwv, gwv1)
        r1 = np.empty((n, 1), np.int64)
        RK.round_top_down_2d(tree.internal.child_ptr, tree.internal.child_idx, fl.reshape(n, 1), r1, 1e-7)
        np.testing.assert_array_equal(r, r1[:, 0])
        assert tree.is_consistent(tree.to_external(x)) and tree.is_consistent(tree.to_external(g))
    assert fused  # the height-2 class and its leaves in one pass (the complete binary tree) was checked too


def test_sum_up_consumes_only_what_it_is_handed(small_pieces):
    """``consume=True`` sums a large C-contiguous writeable array in place and returns it
    (the leaves' rows keep their values); without it, or on a read-only or
    non-contiguous array, the input is left as it was."""
    rng = np.random.default_rng(5)
    for tree in _trees():
        n, n1 = tree.n_nodes, tree.n_nodes - tree.n_leaves
        full = np.zeros(n, np.int64)
        full[n1:] = rng.poisson(3.0, tree.n_leaves)
        want = TK.sum_up_1d(tree.internal.parent, full, np.empty_like(full))
        kept = full.copy()
        assert not np.shares_memory(tree._sum_up(full), full)
        np.testing.assert_array_equal(full, kept)
        given = full.copy()
        got = tree.internal.sum_up(given, consume=True)
        assert got is given
        np.testing.assert_array_equal(got, want)
        frozen = full.copy()
        frozen.flags.writeable = False
        np.testing.assert_array_equal(tree._sum_up(frozen, consume=True), want)
        np.testing.assert_array_equal(frozen, kept)
        wide = np.stack([full, 2 * full], axis=1)
        column = wide[:, 1]  # not contiguous: summed in a copy
        np.testing.assert_array_equal(tree._sum_up(column, consume=True), 2 * want)
        np.testing.assert_array_equal(wide[:, 1], 2 * kept)


def test_blue_in_pieces_refuses_and_hands_over_like_the_one_loop_kernels(small_pieces, monkeypatch):
    """BLUE's passes in pieces flag the same inputs as the one-loop kernels: NaN or
    infinite values and NaN or negative variances (on a leaf or a non-leaf node) are
    refused with the same error; exact (0) and unmeasured (inf) nodes go to the
    per-parent kernel and give its estimate."""
    rng = np.random.default_rng(12)
    for tree in _trees():
        n = tree.n_nodes
        leaf, inner = n - 1, (n - tree.n_leaves) // 2
        y = rng.normal(5.0, 2.0, n)
        var = rng.uniform(0.5, 3.0, n)
        cases = []
        for at in (leaf, inner):
            for bad_y in (np.nan, np.inf):
                cases.append(("y", at, bad_y))
            for bad_v in (np.nan, -0.25, 0.0, np.inf):  # -0.25: the parent's sum stays > 0
                cases.append(("var", at, bad_v))
        for what, at, value in cases:
            yy, vv = y.copy(), var.copy()
            (yy if what == "y" else vv)[at] = value

            def run(yy=yy, vv=vv, tree=tree):
                tree.cache.clear()
                try:
                    e = B.blue(tree, yy, vv)
                    return e.values, e.variance
                except hierdp.DataError as err:
                    return str(err)

            got = run()
            monkeypatch.setattr(B, "PARALLEL_MIN", 1 << 40)
            want = run()
            monkeypatch.setattr(B, "PARALLEL_MIN", 64)
            if isinstance(want, str):
                assert got == want, (what, at, value)
            else:
                assert not isinstance(got, str), (what, at, value, got)
                np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-9)
                np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12)


def _in_pieces_and_one_loop(monkeypatch, mod, tree, run):
    """``[run() in pieces, run() in one loop]`` (``mod``'s size floor moved), each its
    result or its DataError's message."""
    out = []
    for floor in (64, 1 << 40):
        monkeypatch.setattr(mod, "PARALLEL_MIN", floor)
        tree.cache.clear()
        try:
            out.append(run())
        except hierdp.DataError as err:
            out.append(str(err))
    return out


def test_nonneg_checks_its_input_in_pieces_like_one_loop(small_pieces, monkeypatch):
    """nonneg's input checks in pieces: the same errors for NaN/inf values and NaN or
    negative variances, and exact (0) variances still go to the exact solver."""
    from hierdp.postprocessors import nonneg as NN

    tree = _trees()[1]
    n = tree.n_nodes
    rng = np.random.default_rng(13)
    y = rng.normal(1.0, 2.0, n)
    var = rng.uniform(0.5, 3.0, n)
    for what, at, value in (("y", n - 1, np.nan), ("y", 3, -np.inf), ("var", n - 1, np.nan),
                            ("var", 3, -0.5), ("var", n - 1, 0.0)):
        yy, vv = y.copy(), var.copy()
        (yy if what == "y" else vv)[at] = value
        def run(yy=yy, vv=vv):
            x, info = NN.nonneg(tree, yy, vv)
            return x, info["method"], info["converged"]

        out = _in_pieces_and_one_loop(monkeypatch, NN, tree, run)
        if isinstance(out[1], str):
            assert out[0] == out[1], (what, at, value)
        else:
            np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-9, atol=1e-9)
            assert out[0][1:] == out[1][1:]


def test_weighted_gmc_scans_its_input_in_pieces_like_one_loop(small_pieces, monkeypatch):
    """Weighted GMC's one-pass check in pieces: the same errors for bad values or
    variances in the first or the last piece, and the per-level cache key still looks
    at every node (a variance off its level's value in the last piece is not cached)."""
    tree = _trees()[1]
    n = tree.n_nodes
    y = np.random.default_rng(5).normal(3.0, 2.0, n)
    level = 1.0 + 0.5 * tree.internal.depth  # a per-level budget
    depth = tree.internal.depth
    firsts = {int(np.flatnonzero(depth == d)[0]) for d in np.unique(depth)}
    late = max(i for i in range(n) if i not in firsts)  # not the first of its level (the key's sample)
    assert late > n - 50
    cases = [("y", n - 1, np.nan), ("y", 2, np.inf), ("var", n - 1, 0.0), ("var", 1, np.inf), ("var", n - 1, -1.0),
             ("var", late, 99.0)]
    for what, at, value in cases:
        yy, vv = y.copy(), level.copy()
        (yy if what == "y" else vv)[at] = value
        def run(yy=yy, vv=vv):
            return G.gmc_weighted(tree, yy, vv)[0], len(tree.cache.get(G._WCACHE_KEY, {}))

        out = _in_pieces_and_one_loop(monkeypatch, G, tree, run)
        if isinstance(out[1], str):
            assert out[0] == out[1], (what, at, value)
        else:
            np.testing.assert_array_equal(out[0][0], out[1][0])
            assert out[0][1] == out[1][1] == 0  # bent in the last piece: never the per-level cache
    monkeypatch.setattr(G, "PARALLEL_MIN", 64)
    tree.cache.clear()
    G.gmc_weighted(tree, y, level)
    assert len(tree.cache[G._WCACHE_KEY]) == 1  # constant per level: cached


def test_prefault_touches_large_arrays_only(monkeypatch):
    big = np.full(1 << 20, 7.0)  # 8 MiB
    assert _threads.prefault(big) is big
    assert (big[::512] == 0).all() and (big[1::512] == 7).all()
    small = np.full(1000, 7.0)
    assert (_threads.prefault(small) == 7).all()


def _buffer_of(a):
    """The object at the bottom of an array's chain of bases (a memoryview's object)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def test_large_empty_is_an_ordinary_writeable_array():
    """``large_empty``: the shape, dtype and 64-byte offset past a 4 KiB boundary asked
    for, C-contiguous and writeable, from the small (numpy) and the large (own mapping)
    path alike; a large one is backed by its own mapping and pickles like any array."""
    import mmap
    import pickle

    cases = [((10,), np.float64, 0), ((1000,), np.int64, 64 * 3), (((1 << 20) + 5,), np.float64, 0),
             (((1 << 19) + 3, 2), np.float64, 64 * 11), ((1 << 21,), np.int64, 64)]
    for shape, dtype, offset in cases:
        a = _memory.large_empty(shape, dtype, offset)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        large = a.nbytes >= _memory.LARGE_MIN and hasattr(mmap, "MADV_HUGEPAGE")
        if offset or large:
            assert a.__array_interface__["data"][0] % 4096 == offset
        a[...] = np.arange(a.size, dtype=dtype).reshape(shape)
        assert a.reshape(-1)[-1] == a.size - 1
        assert isinstance(_buffer_of(a), mmap.mmap) == large, (shape, offset)
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(a)), a)
    assert _memory.large_empty(7, np.uint8).shape == (7,)
    assert _memory.large_empty(0).shape == (0,)


def test_narrow_index_halves_an_index_that_fits_and_staggers_it():
    """``narrow_index``: the same indices as int32, read-only, ``offset_lines`` cache lines
    past a 4 KiB boundary (small and large alike); an index that needs 64 bits comes back
    as it was."""
    for n, lines in ((1000, 37), ((1 << 21) + 3, 37), (50, 5)):
        a = np.arange(-1, n - 1, dtype=np.int64)
        b = _memory.narrow_index(a, lines)
        assert b.dtype == np.int32 and not b.flags.writeable
        assert b.__array_interface__["data"][0] % 4096 == 64 * lines
        np.testing.assert_array_equal(b, a)
    for big in (np.array([-1, 0, 2**31]), np.array([-(2**31) - 1, 0])):
        assert _memory.narrow_index(big, 37) is big
    assert _memory.narrow_index(np.array([-1, 0, 2**31 - 1]), 1).dtype == np.int32
    assert _memory.narrow_index(np.empty(0, np.int64), 3).size == 0


def test_parent_index_is_one_int32_copy_of_the_parents_shared_by_the_passes(small_pieces):
    """``tree.internal.parent_index``: the parents' values as int32, read-only, one cached
    copy, the one BLUE's and GMC's structures read (no copies of their own)."""
    tree = hierdp.Tree.complete(2, 11)
    pi = tree.internal.parent_index
    assert pi.dtype == np.int32 and not pi.flags.writeable and tree.internal.parent_index is pi
    np.testing.assert_array_equal(pi, tree.internal.parent)
    gs = G.gmc_structure(tree)
    assert np.shares_memory(gs.parent1, pi) and np.shares_memory(gs.leaf_parent, pi)
    assert B._structure(tree).flat_parent is pi


def test_large_empty_falls_back_to_numpy_when_no_mapping_is_had(monkeypatch):
    """A mapping the OS refuses (``OSError``) gives numpy's array instead, with the offset
    asked for; a kernel that refuses the huge-page advice still gives the mapping."""
    import mmap
    import types

    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(_memory, "mmap", types.SimpleNamespace(mmap=refuse, MAP_PRIVATE=mmap.MAP_PRIVATE,
                                                               MAP_ANONYMOUS=mmap.MAP_ANONYMOUS))
    monkeypatch.setattr(_memory, "_MADV_HUGEPAGE", 14)
    a = _memory.large_empty((1 << 20) + 1, np.float64, 64 * 5)
    assert a.shape == ((1 << 20) + 1,) and a.__array_interface__["data"][0] % 4096 == 64 * 5
    assert not isinstance(_buffer_of(a), mmap.mmap)

    class NoAdvice(mmap.mmap):
        def madvise(self, *args):
            raise OSError(22, "Invalid argument")

    monkeypatch.setattr(_memory, "mmap", types.SimpleNamespace(mmap=NoAdvice, MAP_PRIVATE=mmap.MAP_PRIVATE,
                                                               MAP_ANONYMOUS=mmap.MAP_ANONYMOUS))
    b = _memory.large_empty(1 << 20)
    b[:] = 1.0
    assert isinstance(_buffer_of(b), NoAdvice) and b.sum() == 1 << 20


def test_zero_in_pieces_zeroes_the_leading_rows_only(restore_threads):
    hierdp.set_threads(2)
    a, b, c = np.ones(1000), np.ones((1000, 2)), np.ones(1000, np.int64)
    _threads.zero_in_pieces((a, b, c), 777, step=64)
    for arr in (a, b, c):
        assert not arr[:777].any() and (arr[777:] == 1).all()
    _threads.zero_in_pieces((np.ones((0, 2)),), 0)  # no rows: nothing to do
    with pytest.raises(ValueError, match="C-contiguous"):
        _threads.zero_in_pieces((np.ones((10, 2))[:, 0],), 5)


def test_round_in_pieces_equals_the_general_kernel_on_hard_input(small_pieces, monkeypatch):
    """round's one-histogram kernel (fan-outs 2-5 straight-line, buckets, whole boundary
    buckets, ranked ones) gives the general kernel's integers on ties, integral values,
    inconsistent and negative input; unfit values are refused in pieces too."""
    from hierdp.postprocessors import rounding as R

    rng = np.random.default_rng(9)
    in_order = 0
    for tree in _trees():
        n = tree.n_nodes
        leaves = rng.integers(0, 5, tree.n_leaves) + rng.choice([0.0, 0.25, 0.5, 0.75], tree.n_leaves)
        cases = [tree.to_internal(tree.aggregate(leaves)),                     # ties
                 tree.to_internal(tree.aggregate(np.floor(leaves))),           # integral
                 rng.normal(2.0, 3.0, n),                                      # inconsistent, negative
                 rng.normal(2.0, 3.0, n) + np.arange(n) % 7 * 40.0]            # surpluses and deficits
        for x in cases:
            tree.cache.clear()
            in_order += TP.tree_pieces(tree).children_in_order
            r = _agree_over_threads(lambda x=x, tree=tree: [controlled_round(tree, x)])[0]
            monkeypatch.setattr(R, "PARALLEL_MIN", 1 << 40)
            np.testing.assert_array_equal(r, controlled_round(tree, x))
            monkeypatch.setattr(R, "PARALLEL_MIN", 64)
            internal = tree.internal.n_children > 0
            s = np.zeros_like(r)
            np.add.at(s, tree.internal.parent[1:], r[1:])
            assert r.min() >= 0 and np.array_equal(r[internal], s[internal])
        # a zero leaf of the integral case: read as 0 the rest stays consistent, so only the
        # check of each value (not an inconsistency it causes) can refuse it
        zero = int(np.flatnonzero(cases[1][tree.n_nodes - tree.n_leaves:] == 0)[-1]) + tree.n_nodes - tree.n_leaves
        for bad, msg in ((np.nan, "NaN or infinity"), (np.inf, "NaN or infinity"), (2.0**60, "below 2")):
            for x0, at in ((cases[0], n - 1), (cases[1], zero)):
                x = x0.copy()
                x[at] = bad
                with pytest.raises(hierdp.DataError, match=msg):
                    controlled_round(tree, x)
    assert in_order >= 4 * 4  # the one-histogram kernel ran on 4+ trees (hierdp's own order)


def test_nonneg_in_pieces_is_the_same_whatever_the_thread_count(small_pieces, monkeypatch):
    """nonneg's active-set steps in pieces: identical over 1-3 threads, the same leaves
    held at 0 and the same estimate (to round-off: its first BLUE is the one-histogram
    kernel) as the one-loop steps, and a KKT point."""
    from hierdp.postprocessors import nonneg as NN

    rng = np.random.default_rng(4)
    for tree in _trees():
        n = tree.n_nodes
        true = tree.to_internal(tree.aggregate(rng.poisson(0.7, tree.n_leaves))).astype(float)
        y = true + rng.normal(0, 1.5, n)  # many negative leaves: several active-set steps
        var = rng.uniform(0.5, 3.0, n)
        var[rng.random(n) < 0.05] = np.inf

        def run(tree=tree, y=y, var=var):
            tree.cache.clear()
            x, info = NN.nonneg(tree, y, var)
            return [x, np.array([info["iterations"], info["objective"], info["kkt_residual"]])]

        x, info = _agree_over_threads(run)
        monkeypatch.setattr(NN, "PARALLEL_MIN", 1 << 40)
        tree.cache.clear()
        x1, info1 = NN.nonneg(tree, y, var)
        monkeypatch.setattr(NN, "PARALLEL_MIN", 64)
        np.testing.assert_allclose(x, x1, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(x[tree.n_nodes - tree.n_leaves:] == 0, x1[tree.n_nodes - tree.n_leaves:] == 0)
        assert info[2] < 1e-8 and np.all(x >= 0) and tree.is_consistent(tree.to_external(x))


def test_a_release_is_the_same_whatever_the_thread_count(small_pieces, monkeypatch):
    """Noise in chunks and every post-processing pass in pieces: a seeded release gives
    the same table on 1, 2 and 3 threads."""
    monkeypatch.setattr(S, "_CHUNK_DRAWS", 256)
    tree = hierdp.Tree.complete(3, 8)  # 3,280 nodes
    counts = np.random.default_rng(2).poisson(5, tree.n_leaves)
    true = tree.aggregate(counts)

    def run():
        with pytest.warns(hierdp.NotForPublicationWarning):
            r = hierdp.release(tree, true, epsilon=1.0, postprocess=["blue", "nonneg", "round"], seed=3)
        return [r.estimate.values, r.measurements.values]

    est, noisy = _agree_over_threads(run)
    assert np.all(est >= 0) and tree.is_consistent(est) and not np.array_equal(noisy, true)


def test_cli_threads_option_and_environment(tmp_path, monkeypatch, capsys, restore_threads):
    """--threads N sets the count for one command (and is put back); a bad value, or a bad
    HIERDP_THREADS, is a one-line user error before any work; the table is the same."""
    from hierdp.cli import EXIT_OK, EXIT_USER, main

    monkeypatch.chdir(tmp_path)
    hierdp.set_threads(None)
    monkeypatch.delenv("HIERDP_THREADS", raising=False)
    tables = []
    for threads in ("1", "2"):
        out = tmp_path / f"t{threads}.csv"
        assert main(["release", "demo", "--seed", "5", "-q", "--threads", threads, "-o", str(out)]) == EXIT_OK
        tables.append(out.read_text())
    assert tables[0] == tables[1]
    assert hierdp.set_threads(None) is None  # main() put the setting back
    assert main(["release", "demo", "-q", "--threads", "0", "-o", "x.csv"]) == EXIT_USER
    assert "whole number of threads" in capsys.readouterr().err
    monkeypatch.setenv("HIERDP_THREADS", "lots")
    assert main(["release", "demo", "-q", "-o", "y.csv"]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HIERDP_THREADS" in err
    assert not (tmp_path / "x.csv").exists() and not (tmp_path / "y.csv").exists()


def test_a_source_without_reserve_still_gives_thread_independent_draws(restore_threads):
    """A RandomSource with ``words`` only: the chunks take their words up front, in chunk
    order (hierdp.rng.reserve_words), so the draws still do not depend on the threads."""

    class WordsOnly:
        secure = False
        seed = 0

        def __init__(self) -> None:
            self._inner = SeededRandom(21)

        def words(self, size: int) -> np.ndarray:
            return self._inner.words(size)

    runs = []
    for threads in (1, 3):
        hierdp.set_threads(threads)
        runs.append(S.discrete_laplace(1.5, 2 * S._CHUNK_DRAWS + 5, WordsOnly()))
    np.testing.assert_array_equal(runs[0], runs[1])
    # and the same words in the same order as a source that reserves
    np.testing.assert_array_equal(runs[0], S.discrete_laplace(1.5, 2 * S._CHUNK_DRAWS + 5, SeededRandom(21)))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2 or _threads._cpu() < 0,
                    reason="needs Linux, glibc's sched_getcpu and two CPUs")
def test_a_pool_thread_on_the_callers_cpu_moves_off_it_and_is_not_left_pinned():
    """_Away: a pool thread that finds itself on the caller's CPU runs its pieces on another
    CPU, allowed only the others meanwhile, and gets its own CPUs back afterwards."""
    import threading

    seen: list = []

    def probe() -> None:
        mask = os.sched_getaffinity(0)
        for _ in range(20):  # pin to one CPU, then widen: the thread stays there when run() starts
            c = sorted(mask)[0]
            os.sched_setaffinity(0, {c})
            os.sched_setaffinity(0, mask)
            inside: list = []
            _threads._Away(c).run(lambda into=inside: into.append((_threads._cpu(), os.sched_getaffinity(0))))
            if inside[0][1] != mask:  # it was still on c: the move happened
                seen.append((c, mask, inside[0], os.sched_getaffinity(0)))
                return

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen, "the thread never ran on the CPU it was pinned to a moment before"
    c, mask, (cpu, during), after = seen[0]
    assert during == mask - {c} and cpu != c and cpu in mask
    assert after == mask


@pytest.mark.parametrize("threads", [1, 2])
def test_a_small_tree_of_many_cells_runs_its_top_down_passes_in_pieces_like_one_call(restore_threads, monkeypatch,
                                                                                      threads):
    """A tree below PARALLEL_MIN nodes whose node-cells reach it cuts each height class
    by child-cells (issue 30 item 4: the second core on the census chain's wide tasks);
    the values are those of one call over every parent, bit for bit."""
    from hierdp.postprocessors import topdown as TD

    rng = np.random.default_rng(5)
    parent = random_parent(rng, 700)
    tree = hierdp.Tree.from_parent(parent)
    k = (TP.PARALLEL_MIN // tree.n_nodes) + 3
    y = tree.aggregate(rng.poisson(2.0, (tree.n_leaves, k)).astype(float)) + rng.normal(0, 3, (tree.n_nodes, k))
    var = rng.uniform(0.5, 3.0, (tree.n_nodes, k))
    yi = tree.to_internal(y)
    vi = tree.to_internal(var)
    assert TD.wide(tree, k) and len(sum(TD.cuts_by_children(tree, TP.tree_pieces(tree), k), [])) > 4
    hierdp.set_threads(threads)
    calls = []
    real = TD._by_class
    monkeypatch.setattr(TD, "_by_class", lambda *a: calls.append(1) or real(*a))
    x = TD.topdown_nonneg(tree, yi, vi)
    z = TD.topdown_round(tree, x, vi)
    r = controlled_round(tree, x)
    monkeypatch.setattr(TD, "wide", lambda tree, cells: False)
    monkeypatch.setattr("hierdp.postprocessors.rounding.wide", lambda tree, cells: False)
    np.testing.assert_array_equal(x, TD.topdown_nonneg(tree, yi, vi))
    np.testing.assert_array_equal(z, TD.topdown_round(tree, x, vi))
    np.testing.assert_array_equal(r, controlled_round(tree, x))
    assert len(calls) == 4
    assert np.all(z >= 0)
    ptr, idx = tree.internal.child_ptr, tree.internal.child_idx
    for p in range(tree.n_nodes - tree.n_leaves):
        np.testing.assert_array_equal(z[idx[ptr[p]:ptr[p + 1]]].sum(axis=0), z[p])
