"""Top-down ``nonneg`` and ``round`` (issue 30 item 3): the per-parent projection against
scipy's constrained solver, the integer step against enumeration, consistency and
non-negativity in every cell, fixed parents and invariants kept, the pass per subtree,
and the finding itself: top-down keeps the aggregates unbiased where the global
non-negative least squares biases them."""

import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

import hierdp
from hierdp._kernels.jit import interpreted
from hierdp.errors import DataError
from hierdp.postprocessors import Estimate
from hierdp.postprocessors import _topdown_kernels as TK
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.chain import resolve_postprocessors
from hierdp.postprocessors.nonneg import NonNegative, nonneg
from hierdp.postprocessors.rounding import ControlledRounding, controlled_round
from hierdp.postprocessors.topdown import topdown_nonneg, topdown_round
from tests.helpers import random_parent

KERNELS = [pytest.param(lambda f: f, id="compiled"), pytest.param(interpreted, id="interpreted")]


def _project(kern, a, v, s):
    m = len(a)
    x, t, o = np.empty(m), np.empty(m), np.empty(m, np.int64)
    # copies: the kernel writes BIG_VAR over an infinite variance in place
    mu, res = kern(TK.project_group)(np.array(a, float), np.array(v, float), m, float(s), x, t, o)
    return x, res


def _integer(kern, a, v, S):
    m = len(a)
    z, xs, t, o = np.empty(m, np.int64), np.empty(m), np.empty(m), np.empty(m, np.int64)
    miss = kern(TK.integer_group)(np.array(a, float), np.array(v, float), m, int(S), z, xs, t, o)
    return z, miss


def _objective(x, a, v):
    v = np.asarray(v, float)
    free = v > 0
    return float(np.sum((np.asarray(x, float)[free] - np.asarray(a)[free]) ** 2 / v[free]))


def _support_enumeration(a, v, s):
    """The projection by brute force: the optimum is, on its support A, the optimum with
    equality constraints only (x_A = a_A - mu v_A, sum = s); try every support and keep
    the best primal-feasible point."""
    m = len(a)
    best, arg = np.inf, None
    for r in range(1, m + 1):
        for A in itertools.combinations(range(m), r):
            A = list(A)
            mu = (a[A].sum() - s) / v[A].sum()
            x = np.zeros(m)
            x[A] = a[A] - mu * v[A]
            if x.min() >= -1e-12 and _objective(x, a, v) < best:
                best, arg = _objective(x, a, v), x
    return best, arg


@pytest.mark.parametrize("kern", KERNELS)
def test_projection_matches_brute_force(kern):
    """The sort-based projection onto {x >= 0, sum x = s} is the constrained optimum: the
    best point over every support (enumeration), and no worse than scipy's SLSQP."""
    rng = np.random.default_rng(11)
    for _ in range(150):
        m = int(rng.integers(1, 8))
        a = rng.normal(0.5, 3.0, m)
        v = rng.uniform(0.05, 6.0, m)
        s = float(abs(rng.normal(2.0, 4.0)))
        x, res = _project(kern, a, v, s)
        best, ref = _support_enumeration(a, v, s)
        assert res == pytest.approx(0.0, abs=1e-9)
        assert x.min() >= 0 and x.sum() == pytest.approx(s, rel=1e-12, abs=1e-12)
        assert _objective(x, a, v) == pytest.approx(best, rel=1e-10, abs=1e-12)
        np.testing.assert_allclose(x, ref, atol=1e-9 * (1 + s))
        sl = minimize(lambda z, a=a, v=v: np.sum((z - a) ** 2 / v), np.full(m, s / m), method="SLSQP",
                      bounds=[(0, None)] * m, constraints=[{"type": "eq", "fun": lambda z, s=s: z.sum() - s}])
        assert _objective(x, a, v) <= sl.fun + 1e-6


@pytest.mark.parametrize("m", [20, 33, 300])
def test_projection_large_groups_satisfy_kkt(m):
    """Groups past the insertion sort (argsort path) and below it: the KKT conditions, which
    certify the optimum of this convex problem — x_j = a_j - mu v_j where x_j > 0,
    a_j - mu v_j <= 0 where x_j = 0, sum x = s — with mu recovered from the positive x."""
    rng = np.random.default_rng(m)
    for _ in range(20):
        a = rng.normal(0.0, 3.0, m)
        v = rng.uniform(0.1, 4.0, m)
        s = float(abs(rng.normal(5.0, 10.0)))
        x, res = _project(lambda f: f, a, v, s)
        pos = x > 0
        assert pos.any() and res == pytest.approx(0.0, abs=1e-9) and x.sum() == pytest.approx(s, rel=1e-12)
        mus = (a[pos] - x[pos]) / v[pos]
        np.testing.assert_allclose(mus, mus[0], rtol=1e-9, atol=1e-9)
        assert np.all(a[~pos] - mus[0] * v[~pos] <= 1e-9)


def test_projection_known_and_unidentified_children():
    """Variance 0: the child keeps its (clipped) value; infinite variance (the BIG_VAR
    limit): such children take the whole adjustment, the others keep max(a, 0) when the
    mass allows; a hand-computed case each."""
    x, res = _project(lambda f: f, [3.0, 1.0, -2.0], [0.0, 1.0, 1.0], 10.0)  # 3 held, 7 for the others
    np.testing.assert_allclose(x, [3.0, 5.0, 2.0])  # 1 - mu + (-2 - mu) = 7: mu = -4
    assert res == pytest.approx(0.0)
    x, _ = _project(lambda f: f, [2.0, -1.0, 4.0], [1.0, 1.0, np.inf], 10.0)
    np.testing.assert_allclose(x, [2.0, 0.0, 8.0], atol=1e-9)
    x, _ = _project(lambda f: f, [2.0, 3.0, 4.0], [1.0, 1.0, np.inf], 3.0)  # too little mass: inf child 0
    np.testing.assert_allclose(x, [1.0, 2.0, 0.0], atol=1e-9)
    _, res = _project(lambda f: f, [5.0, 1.0], [0.0, 1.0], 3.0)  # the known value exceeds the parent
    assert res == pytest.approx(-2.0)


@pytest.mark.parametrize("kern", KERNELS)
def test_integer_step_matches_enumeration(kern):
    """The greedy on unit costs gives the closest non-negative integers with the given sum
    in the weighted norm: its objective equals the minimum over every composition of S."""
    rng = np.random.default_rng(12)
    moved_more_than_one = 0
    for _ in range(250):
        m = int(rng.integers(1, 5))
        a = rng.normal(0.8, 1.7, m)
        v = rng.choice([0.01, 0.3, 1.0, 1.0, 5.0, 80.0], m)
        S = int(rng.integers(0, 7))
        z, miss = _integer(kern, a, v, S)
        best = min(_objective(c, a, v) for c in itertools.product(range(S + 1), repeat=m) if sum(c) == S)
        assert miss == 0 and z.sum() == S and z.min() >= 0
        assert _objective(z, a, v) == pytest.approx(best, rel=1e-12, abs=1e-12)
        moved_more_than_one += bool(np.any(np.abs(z - a) > 1 + 1e-9) and a.min() >= 0 and abs(a.sum() - S) < 0.5)
    z, _ = _integer(kern, [0.9, 0.4, 0.4, 0.3], [1000.0, 1.0, 1.0, 1.0], 2)  # by hand: the cheap child takes 2
    assert z.tolist() == [2, 0, 0, 0]


def test_integer_step_scan_gives_the_heap_units():
    """Groups of at most ``SCAN_MAX`` children pick their units by a scan
    (``_units_by_scan``), larger ones by the heap: both must give the same integers, ties
    included (half-integers with equal variances: the heap breaks ties by the lowest child
    index). The reference is ``integer_group``'s own source run with ``SCAN_MAX = 0`` (the
    heap for every group, the code before the scan existed), the scan path compiled."""
    import types

    f = TK.integer_group.py_func
    heap_only = types.FunctionType(f.__code__, dict(f.__globals__, SCAN_MAX=0), "heap_only")
    rng = np.random.default_rng(5)
    moved = 0
    for i in range(3000):
        m = int(rng.integers(1, TK.SCAN_MAX + 1))
        if i % 2:  # ties everywhere: half-integers, equal variances
            a = rng.integers(-2, 8, m) + 0.5
            v = np.ones(m)
        else:
            a = rng.normal(1.0, 2.0, m)
            v = rng.choice([0.0, 0.3, 1.0, 1.0, 5.0, np.inf], m)
        S = int(rng.integers(0, 3 * m + 2))
        out = []
        for kern in (TK.integer_group, heap_only):
            z, xs, t, o = np.empty(m, np.int64), np.empty(m), np.empty(m), np.empty(m, np.int64)
            miss = kern(a.copy(), v.copy(), m, S, z, xs, t, o)
            out.append((z.tolist(), miss))
        assert out[0] == out[1], (a, v, S)
        moved += S - int(np.floor(np.maximum(a, 0) + 0.5).sum()) != 0
    assert moved > 1000  # most groups needed units added or removed after the rounding


def test_unit_scan_against_heapq():
    """``_units_by_scan`` from any start (not only the rounded projection's, where a child
    rarely moves twice): the units Python's heapq picks by the key ``(cost, j)``, one at a
    time, the moved child's key recomputed, many units per child."""
    import heapq

    rng = np.random.default_rng(8)
    for _ in range(2000):
        m = int(rng.integers(1, TK.SCAN_MAX + 1))
        a = rng.integers(-2, 5, m) + rng.choice([0.0, 0.5, 0.25], m)
        v = rng.choice([0.0, 0.5, 1.0, 1.0, 4.0], m)
        z0 = rng.integers(0, 4, m)
        free = v > 0
        if not free.any():
            continue
        units = int(z0[free].sum())
        D = int(rng.integers(1, 2 * m + 2)) if units == 0 or rng.random() < 0.5 else -int(rng.integers(1, units + 1))
        z = z0.copy()
        TK._units_by_scan(a, v, m, z, D, np.empty(m))
        ref = z0.copy()
        if D > 0:
            h = [((2.0 * (ref[j] - a[j]) + 1.0) / v[j], j) for j in range(m) if free[j]]
            heapq.heapify(h)
            for _ in range(D):
                _, j = heapq.heappop(h)
                ref[j] += 1
                heapq.heappush(h, ((2.0 * (ref[j] - a[j]) + 1.0) / v[j], j))
        else:
            h = [(-(2.0 * (ref[j] - a[j]) - 1.0) / v[j], j) for j in range(m) if free[j] and ref[j] > 0]
            heapq.heapify(h)
            for _ in range(-D):
                _, j = heapq.heappop(h)
                ref[j] -= 1
                if ref[j] > 0:
                    heapq.heappush(h, (-(2.0 * (ref[j] - a[j]) - 1.0) / v[j], j))
        assert z.tolist() == ref.tolist(), (a, v, z0, D)


def test_integer_step_equal_weights_is_largest_remainder():
    """Equal variances and a consistent non-negative input: the same integers as round's
    largest-remainder rule (both break ties towards the first child)."""
    rng = np.random.default_rng(13)
    for _ in range(20):
        tree = hierdp.Tree.from_parent(random_parent(rng, int(rng.integers(2, 80))))
        leaves = rng.gamma(0.7, 3.0, (tree.n_leaves, 2))
        x = tree.to_internal(tree.aggregate(leaves))
        np.testing.assert_array_equal(topdown_round(tree, x, np.ones(tree.n_nodes)), controlled_round(tree, x))


def _sum_children(tree, x):
    n1 = tree.n_nodes - tree.n_leaves
    s = np.zeros_like(x)
    np.add.at(s, tree.internal.parent[1:], x[1:])
    return s[:n1], x[:n1]


@pytest.mark.parametrize("k", [1, 3])
def test_consistent_nonnegative_integers_in_every_cell(k):
    """Random trees (mixed leaf depths, many empty leaves), cells, per-cell and per-node
    variances, some unmeasured nodes: the top-down chain gives non-negative values whose
    parents equal the sum of their children in every cell (so each node's total over its
    cells equals its children's totals), then non-negative integers with the same property."""
    rng = np.random.default_rng(20 + k)
    for trial in range(25):
        tree = hierdp.Tree.from_parent(random_parent(rng, int(rng.integers(2, 120))))
        n = tree.n_nodes
        leaves = (rng.random((tree.n_leaves, k)) < 0.35) * rng.poisson(5, (tree.n_leaves, k))
        true = tree.to_internal(tree.aggregate(leaves)).astype(float)
        var = rng.choice([1.0, 4.0, np.inf], (n, k) if trial % 2 else n, p=[0.5, 0.4, 0.1])
        sd = np.sqrt(np.where(np.isinf(var), 0.0, var))
        y = true + rng.normal(0.0, 1.0, true.shape) * (sd if sd.ndim == 2 else sd[:, None])
        est = blue(tree, y, var)
        x = topdown_nonneg(tree, est.values, est.variance)
        assert x.shape == (n, k) and x.min() >= 0
        sums, parents = _sum_children(tree, x)
        np.testing.assert_allclose(sums, parents, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(sums.sum(axis=1), parents.sum(axis=1), rtol=1e-12, atol=1e-9)
        assert np.array_equal(x[0], np.maximum(est.values[0], 0.0))  # the root: BLUE's, clipped
        for inp in (x, est.values):  # after nonneg, or straight from BLUE
            z = topdown_round(tree, inp, est.variance)
            assert z.dtype == np.int64 and z.min() >= 0
            sums, parents = _sum_children(tree, z)
            assert np.array_equal(sums, parents)
            assert np.array_equal(z[0], np.floor(np.maximum(inp[0], 0.0) + 0.5).astype(np.int64))


def test_chain_through_release_and_parameters():
    """The methods as chain steps (dicts, as in specs), their declared parameters, the
    default, and one clear error for an unknown method."""
    steps = resolve_postprocessors(["blue", {"name": "nonneg", "method": "topdown"},
                                    {"name": "round", "method": "topdown"}])
    assert [getattr(s, "method", None) for s in steps] == [None, "topdown", "topdown"]
    assert NonNegative().method == "topdown" and ControlledRounding().method == "topdown"
    assert NonNegative().ordering == "total" and ControlledRounding().ordering == "total"
    with pytest.raises(DataError, match="unknown ordering 'first'.*'total', 'pl94', 'cells'"):
        ControlledRounding(ordering="first")
    with pytest.raises(DataError, match="unknown ordering"):
        NonNegative(ordering="first")
    assert NonNegative.splittable and ControlledRounding.splittable
    with pytest.raises(DataError, match="unknown method 'bottomup'.*'topdown', 'global'"):
        NonNegative(method="bottomup")
    with pytest.raises(DataError, match="unknown method"):
        ControlledRounding(method="nearest")
    from hierdp.plugins.params import problems
    assert [p.message for p in problems("postprocessor", "nonneg", NonNegative, {"method": "topdown"})] == []
    assert problems("postprocessor", "nonneg", NonNegative, {"methd": "topdown"})
    tree = hierdp.Tree.complete(fanout=3, height=4)
    values = np.zeros(tree.n_nodes, np.int64)
    values[tree.leaves[:4]] = [5, 0, 12, 1]
    res = hierdp.release(tree, tree.aggregate(values[tree.leaves]), epsilon=1.0, seed=3,
                         postprocess=["blue", "nonneg", {"name": "round", "method": "topdown"}])
    out = np.asarray(res.values)
    assert out.min() >= 0 and np.issubdtype(out.dtype, np.integer)
    assert np.array_equal(tree.aggregate(out[tree.leaves]), out)


def test_invariants_and_lower_bounds_kept():
    """Nodes known exactly (variance 0) keep their value — also below a parent that is not
    known, which then never gets less than the known mass under it."""
    rng = np.random.default_rng(31)
    tree = hierdp.Tree.complete(fanout=3, height=4)  # 1 + 3 + 9 + 27 nodes
    for _ in range(30):
        leaves = (rng.random(tree.n_leaves) < 0.4) * rng.poisson(6, tree.n_leaves)
        true = tree.to_internal(tree.aggregate(leaves)).astype(float)
        var = np.full(tree.n_nodes, 4.0)
        exact = np.zeros(tree.n_nodes, bool)
        exact[[0, 1, 2, 3]] = True  # total and states, exact (census invariants)
        exact[rng.choice(np.arange(4, 13), 2, replace=False)] = True  # two counties
        exact[rng.choice(np.arange(13, 40), 3, replace=False)] = True  # a few leaves under unknown counties
        var[exact] = 0.0
        y = np.where(exact, true, true + rng.normal(0, 2.0, tree.n_nodes))
        est = blue(tree, y, var)
        x = topdown_nonneg(tree, est.values, est.variance)
        z = topdown_round(tree, x, est.variance)
        np.testing.assert_allclose(x[exact], true[exact], atol=1e-7)
        assert np.array_equal(z[exact], true[exact].astype(np.int64))
        assert x.min() >= 0 and z.min() >= 0
        sums, parents = _sum_children(tree, z)
        assert np.array_equal(sums, parents)


def test_per_subtree_with_fixed_root_equals_the_whole_tree():
    """The pass below a node needs only that node's value: running it on a subtree with
    ``fixed_root`` = the whole-tree pass's value there gives the whole-tree pass's values."""
    rng = np.random.default_rng(41)
    parent = random_parent(rng, 300, shuffle=False)
    tree = hierdp.Tree.from_parent(parent)
    leaves = (rng.random((tree.n_leaves, 2)) < 0.3) * rng.poisson(4, (tree.n_leaves, 2))
    true = tree.aggregate(leaves).astype(float)
    y = true + rng.normal(0, 2.0, true.shape)
    est = blue(tree, tree.to_internal(y), np.full(tree.n_nodes, 4.0))
    x = tree.to_external(topdown_nonneg(tree, est.values, est.variance))
    z = tree.to_external(topdown_round(tree, tree.to_internal(x), est.variance))
    bvals, bvar = tree.to_external(est.values), tree.to_external(est.variance)
    kids = np.bincount(parent[1:], minlength=len(parent))
    v = int(np.flatnonzero((parent > 0) & (kids[np.arange(len(parent))] > 1))[0])  # an internal node below the root
    sub = [v]
    for u in range(len(parent)):  # random_parent(shuffle=False): parents precede children
        if parent[u] >= 0 and parent[u] in set(sub):
            sub.append(u)
    sub = np.array(sorted(set(sub)))
    pos = {int(u): i for i, u in enumerate(sub)}
    sp = np.array([-1 if u == v else pos[int(parent[u])] for u in sub])
    st = hierdp.Tree.from_parent(sp)
    xs = st.to_external(topdown_nonneg(st, st.to_internal(bvals[sub]), st.to_internal(bvar[sub]), fixed_root=x[v]))
    np.testing.assert_allclose(xs, x[sub], rtol=1e-12, atol=1e-9)
    zs = st.to_external(topdown_round(st, st.to_internal(x[sub]), st.to_internal(bvar[sub]), fixed_root=z[v]))
    assert np.array_equal(zs, z[sub])
    with pytest.raises(DataError, match="fixed_root must be one non-negative number or one per cell"):
        topdown_nonneg(st, st.to_internal(bvals[sub]), None, fixed_root=[-1.0, 2.0])
    with pytest.raises(DataError, match="fixed_root must be integers"):
        topdown_round(st, st.to_internal(x[sub]), None, fixed_root=[1.5, 2.0])


def _sparse_example():
    """A small sparse hierarchy: 1 > 4 > 16 > 96 nodes (3.6 leaves in 10 populated, skewed)."""
    rng = np.random.default_rng(5)
    tree = hierdp.Tree.complete(fanout=4, height=3)  # 1 + 4 + 16
    parent = np.concatenate([tree.parent, np.repeat(np.arange(5, 21), 6)])
    big = hierdp.Tree.from_parent(parent)
    leaves = np.zeros(big.n_leaves, np.int64)
    full = rng.choice(big.n_leaves, 10, replace=False)
    leaves[full] = np.floor(rng.lognormal(3.0, 1.0, 10)).astype(np.int64)
    return big, big.to_internal(big.aggregate(leaves)).astype(float)


def test_topdown_aggregates_unbiased_where_global_is_not():
    """The finding of issue 30 in miniature: 300 seeded releases (unit-variance noise on
    every node) of a sparse tree where 90% of the leaves are empty. Top-down: the total
    and the middle level are unbiased within 4 standard errors; the global non-negative
    least squares biases the total upwards by more than 4 standard errors."""
    tree, true = _sparse_example()
    rng = np.random.default_rng(2030)
    var = np.full(tree.n_nodes, 1.0)
    mid = tree.internal.level_index[2]
    errs = {"topdown": [], "global": []}
    for _ in range(300):
        y = true + rng.normal(0.0, 1.0, tree.n_nodes)
        est = blue(tree, y, var)
        td = topdown_round(tree, topdown_nonneg(tree, est.values, est.variance), est.variance)
        gl = controlled_round(tree, nonneg(tree, y, var)[0])
        for key, x in (("topdown", td), ("global", gl)):
            errs[key].append([x[0] - true[0], np.mean(x[mid] - true[mid])])
    for key in errs:
        errs[key] = np.asarray(errs[key])
    for col in (0, 1):
        e = errs["topdown"][:, col]
        assert abs(e.mean()) < 4 * e.std(ddof=1) / np.sqrt(len(e))
    g = errs["global"][:, 0]
    assert g.mean() > 4 * g.std(ddof=1) / np.sqrt(len(g))


def test_topdown_after_measurements_runs_blue_first():
    """``nonneg`` top-down on raw measurements (no ``blue`` before it) starts from BLUE's
    values and variances: the same result as after an explicit ``blue``."""
    rng = np.random.default_rng(7)
    tree = hierdp.Tree.from_parent(random_parent(rng, 60))
    y = rng.normal(1.0, 3.0, tree.n_nodes)
    var = rng.uniform(1.0, 3.0, tree.n_nodes)
    direct = NonNegative().apply(tree, Estimate(y, var, measurement_variance=var))
    b = blue(tree, y, var)
    after = NonNegative().apply(tree, Estimate(b.values, b.variance, measurement_variance=var, linear=True,
                                               consistent=True))
    np.testing.assert_allclose(direct.values, after.values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(direct.variance, b.variance)


def test_global_method_keeps_the_original_bits():
    """The global exact NNLS stays available unchanged: with ``method: global`` the seeded
    ``invariants`` release gives the digest pinned before top-down became the default (with
    the noise keyed per node: 4adc9e9b… with the earlier stream noise)."""
    import warnings

    from tests.test_pipeline_pinned import _digest, _tree_and_values

    t, v = _tree_and_values()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        r = hierdp.release(t, v, epsilon=0.7, seed=7, neighbours="substitute", invariants=["total", "level_1"],
                           postprocess=["blue", {"name": "nonneg", "method": "global"}])
    assert _digest(r) == "5bee075720f3d225fcbfd7129d98bb72abdcf16dd2f9f1a89791167f800ae4b4"


def test_interpreted_and_compiled_passes_agree(monkeypatch):
    """Small trees run the kernels interpreted (``for_size``); compiled, the same numbers."""
    from hierdp._kernels import jit

    rng = np.random.default_rng(51)
    tree = hierdp.Tree.from_parent(random_parent(rng, 400))
    leaves = (rng.random((tree.n_leaves, 2)) < 0.3) * rng.poisson(4, (tree.n_leaves, 2))
    y = tree.to_internal(tree.aggregate(leaves)).astype(float) + rng.normal(0, 2.0, (tree.n_nodes, 2))
    est = blue(tree, y, rng.uniform(1.0, 5.0, tree.n_nodes))
    small = topdown_nonneg(tree, est.values, est.variance), topdown_round(tree, est.values, est.variance)
    monkeypatch.setattr(jit, "SMALL_INPUT", 0)
    big = topdown_nonneg(tree, est.values, est.variance), topdown_round(tree, est.values, est.variance)
    np.testing.assert_allclose(small[0], big[0], rtol=1e-13, atol=1e-12)
    assert np.array_equal(small[1], big[1])


@pytest.mark.parametrize("compiled", [True, False])
def test_round_keeps_the_known_mass_under_a_node_that_moves_far(monkeypatch, compiled):
    """A child with a large variance moves more than 1 when its parent's integer is fixed
    below its siblings' sum; a node known exactly below it (5) bounds it from below.
    Root 8 over A = 5.2 (variance 100) and B = 3.8 (variance 0.01): without the bound the
    closest split is (4, 4), which leaves A under its known child; with it, (5, 3).
    Both the compiled pass and the numpy one (small trees)."""
    from hierdp._kernels import jit

    monkeypatch.setattr(jit, "SMALL_INPUT", -1 if compiled else 1 << 14)
    tree = hierdp.Tree.from_parent([-1, 0, 0, 1, 1])  # root > A, B; A > A1 (known), A2
    y = np.array([9.0, 5.2, 3.8, 5.0, 0.2])
    var = np.array([1.0, 100.0, 0.01, 0.0, 1.0])
    z = topdown_round(tree, tree.to_internal(y), tree.to_internal(var), fixed_root=8)
    z = tree.to_external(z)
    assert z.tolist() == [8, 5, 3, 5, 0]
