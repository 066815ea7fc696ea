"""Releases by subtree (``split=``, :mod:`hierdp.subtrees`): the partition, the exact split
GLS against the in-memory estimators on the same measurements, the release path, the
streaming API and the one-line refusals."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import hierdp
from hierdp import subtrees
from hierdp.errors import DataError, PluginError
from hierdp.measurements import Estimate
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.pipeline import release, release_by_subtree
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.gmc import GMC, gmc, gmc_weighted

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


# ---------------------------------------------------------------------------- trees
def random_tree(n_target: int, levels: int, seed: int) -> hierdp.Tree:
    """An irregular tree: fan-outs drawn per node (0 allowed below the root level: early
    leaves), grown level by level until about ``n_target`` nodes."""
    r = np.random.default_rng(seed)
    parents = [np.array([-1])]
    frontier = np.array([0])
    n = 1
    per_level = max(2.0, (n_target ** (1.0 / (levels - 1))))
    for d in range(levels - 1):
        hi = int(2 * per_level) + 1
        fan = r.integers(1 if d == 0 else 0, hi, size=frontier.size)
        if fan.sum() == 0:
            fan[0] = 1
        kids = np.repeat(frontier, fan)
        parents.append(kids)
        frontier = np.arange(n, n + kids.size)
        n += kids.size
    return hierdp.Tree.from_parent(np.concatenate(parents), level_names=[f"L{d}" for d in range(levels)])


@pytest.fixture(scope="module")
def big() -> hierdp.Tree:
    t = random_tree(120_000, 5, seed=7)
    assert t.n_nodes >= 100_000
    return t


def split_gls(tree: hierdp.Tree, y: np.ndarray, var: np.ndarray, split: Any) -> tuple[np.ndarray, np.ndarray]:
    """The split GLS of internal-order ``y`` (n, k) and ``var`` (n,) or (n, k), assembled."""
    n, k = y.shape
    v2 = var.reshape(n, -1)
    part = subtrees.partition(tree, split, n_cells=k)
    eng = subtrees.SplitGLS(part)
    z, u = [], []
    for task in part.tasks():
        a, b = eng.up(task, y[task.nodes], v2[task.nodes])
        z.append(a)
        u.append(b)
    xt, vt, xr, vr = eng.top(y[part.top], v2[part.top], np.concatenate(z), np.concatenate(u))
    X = np.full((n, k), np.nan)
    V = np.full(v2.shape, np.nan)
    X[part.top], V[part.top] = xt, vt
    first = 0
    for task in part.tasks():
        m = task.roots.size
        x, xv = eng.down(task, y[task.nodes], v2[task.nodes], xr[first:first + m], vr[first:first + m])
        first += m
        X[task.nodes], V[task.nodes] = x, xv
    return X, V.reshape(var.shape)


def assert_same(got: np.ndarray, want: np.ndarray, rtol: float = 1e-9) -> None:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    f = np.isfinite(want)
    err = np.abs(got[f] - want[f]) / (1.0 + np.abs(want[f]))
    assert err.max(initial=0.0) <= rtol, err.max()


# ---------------------------------------------------------------------------- the partition
def test_the_partition_covers_every_node_once_and_maps_to_the_full_tree(big: hierdp.Tree) -> None:
    ti = big.internal
    for s in range(big.n_levels):
        limit = 20_000
        try:
            part = subtrees.partition(big, {"level": s, "memory": 60 * 16 * limit}, n_cells=16)
        except DataError:  # subtrees (or the top solve) larger than the budget: blocks by the default size
            part = subtrees.partition(big, s, n_cells=16)
            limit = subtrees.DEFAULT_TASK_CELLS // 16
        seen = np.zeros(big.n_nodes, np.int64)
        seen[part.top] += 1
        for task in part.tasks():
            seen[task.nodes] += 1
            assert np.all(np.diff(task.nodes) > 0)
            # local structure is the full tree's: parent of node i is the global parent
            loc = task.parent[1:]
            inner = loc > 0
            np.testing.assert_array_equal(task.nodes[loc[inner] - 1], ti.parent[task.nodes[inner]])
            np.testing.assert_array_equal(task.nodes[task.root_pos], task.roots)
            np.testing.assert_array_equal(ti.depth[task.roots], s)
            # brute force: the root of each node's subtree, by walking up
            some = np.linspace(0, task.n_nodes - 1, 7).astype(int)
            for i in some:
                v = int(task.nodes[i])
                while ti.depth[v] > s:
                    v = int(ti.parent[v])
                assert task.roots[task.root_of[i]] == v
            assert task.n_nodes <= limit or task.roots.size == 1
        np.testing.assert_array_equal(seen, 1)
        np.testing.assert_array_equal(ti.depth[part.top] < s, True)
        assert part.top.size == int((ti.depth < s).sum())


def test_a_memory_budget_chooses_the_shallowest_level_that_fits() -> None:
    t = hierdp.Tree.complete(fanout=4, height=6)  # 1365 nodes; subtrees of 341, 85, 21, 5, 1
    k = 2
    # 100 nodes per task: level 2 (85-node subtrees; top 5 + 3 * 16 = 53) is the first that fits
    part = subtrees.partition(t, {"memory": 100 * k * subtrees.BYTES_PER_NODE_CELL}, n_cells=k)
    assert part.depth == 2 and part.largest_task <= 100 and part.top_nodes <= 100
    assert subtrees.partition(t, {"memory": 400 * k * 60}, n_cells=k).depth == 1
    part = subtrees.partition(t, "auto", n_cells=k)
    assert part.depth == 0 and part.n_tasks == 1  # the machine holds this tree whole


def test_task_memory_sizes_the_tasks_while_memory_bounds_the_top_solve() -> None:
    """``task_memory`` (the census: a top solve of 5.7 GB at Tract, tasks of 1 GiB, two at
    once): tasks no bigger than it, the top solve checked against ``memory``, and the level
    chosen so that both fit. Hand-computed on the complete 4-ary tree of height 6."""
    t = hierdp.Tree.complete(fanout=4, height=6)  # subtrees at level_3: 21 nodes; top 21 nodes, 64 roots
    k = 2
    one = 21 * k * subtrees.BYTES_PER_NODE_CELL  # one level_3 subtree: 2,520 bytes
    assert subtrees._top_least(21, 64, k) == 18_220  # the top solve at level_3 (32 B per node-cell and blocks)
    part = subtrees.partition(t, {"level": "level_3", "memory": 30_000}, n_cells=k)
    assert part.largest_task > 21 and part.n_tasks < 64  # memory alone: tasks of up to 250 nodes
    part = subtrees.partition(t, {"level": "level_3", "memory": 30_000, "task_memory": one}, n_cells=k)
    assert part.n_tasks == 64 and part.largest_task == 21
    part = subtrees.partition(t, {"memory": 30_000, "task_memory": one}, n_cells=k)  # the level that fits both
    assert part.depth == 3 and part.largest_task == 21
    assert subtrees.partition(t, {"memory": 30_000}, n_cells=k).depth == 2
    with pytest.raises(DataError, match=r"the top solve .* needs 18,220 bytes, more than split memory 2,520"):
        subtrees.partition(t, {"level": "level_3", "task_memory": one}, n_cells=k)  # alone, it is the budget


@pytest.mark.parametrize("split, match", [
    ({"memory": 3000, "task_memory": 5000},
     r"split task_memory 5,000 bytes exceeds split memory 3,000: a task must fit the whole budget"),
    ({"memory": 30_000, "task_memory": "3 parsecs"}, r"split task_memory must be a positive number of bytes"),
    ({"level": "L1", "memory": 10**9, "task_memory": 5000},
     r"a subtree of .* exceeds split task_memory 5,000 bytes .*; choose a deeper level or give more task_memory"),
    ("L22", r"unknown split level 'L22'; expected a level name .*did you mean 'L2'\?"),
    ("contry", r"unknown split level 'contry'"),
    (7, r"split level depth 7 is out of range 0\.\.4"),
    (1.5, r"split must be a level name, a depth, 'auto'"),
    ({"levle": "L1"}, r"split got an unknown key 'levle'; did you mean 'level'\?"),
    ({}, r"names neither a level nor a memory budget"),
    ({"memory": "4 parsecs"}, r"split memory must be a positive number of bytes or text such as '4GiB'"),
    ({"memory": -3}, r"split memory must be a positive number"),
    ({"memory": 100}, r"split memory 100 bytes holds less than one node of 2 cells"),
    ({"memory": 6000}, r"no split level keeps a task within split memory 6,000 bytes .* the smallest is level"),
    ({"level": "L1", "memory": 5000}, r"at split level 'L1' a subtree of .* exceeds split memory 5,000 bytes .*; choose a deeper level"),
])
def test_bad_split_values_give_one_clear_line(split: Any, match: str) -> None:
    t = random_tree(2000, 5, seed=1)
    with pytest.raises(DataError, match=match) as err:
        subtrees.partition(t, split, n_cells=2)
    assert "\n" not in str(err.value)


def test_memory_text_is_read_in_both_unit_systems() -> None:
    assert subtrees.parse_memory("4GiB") == 4 * 1024**3
    assert subtrees.parse_memory("500 MB") == 500 * 1000**2
    assert subtrees.parse_memory("1.5kib") == 1536
    assert subtrees.parse_memory(12345) == 12345


def test_many_small_subtrees_go_in_blocks(big: hierdp.Tree) -> None:
    part = subtrees.partition(big, {"level": "L3", "memory": 60 * 50_000}, n_cells=1)
    assert part.roots.size > 10_000 and part.n_tasks <= 10
    sizes = [task.n_nodes for task in part.tasks()]
    assert max(sizes) <= 50_000 and sum(sizes) + part.top.size == big.n_nodes


# ---------------------------------------------------------------------------- the estimators
@pytest.fixture(scope="module")
def big_measurements(big: hierdp.Tree) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(11)
    k = 16
    truth = big.to_internal(big.aggregate(r.poisson(3.0, size=(big.n_leaves, k)))).astype(np.float64)
    lv = np.array([4.0, 2.0, 2.0, 1.0, 0.5])
    var = lv[big.internal.depth]
    return truth + r.normal(size=truth.shape) * np.sqrt(var)[:, None], var


@pytest.mark.parametrize("level", range(5))
def test_blue_by_subtree_equals_blue_in_memory_on_a_big_tree(big: hierdp.Tree, big_measurements: Any,
                                                             level: int) -> None:
    y, var = big_measurements
    ref = blue(big, y, var)
    X, V = split_gls(big, y, var, {"level": level, "memory": 60 * 16 * 40_000} if level == 2 else level)
    assert_same(X, ref.values)
    assert_same(V, ref.variance)


def test_gmc_and_weighted_gmc_by_subtree_equal_them_in_memory(big: hierdp.Tree, big_measurements: Any) -> None:
    y, var = big_measurements
    ones = np.ones(big.n_nodes)
    X, _ = split_gls(big, y, ones, "L2")  # GMC without variances: unit weights
    assert_same(X, gmc(big, y))
    Xw, Vw = split_gls(big, y, var, "L3")
    want, want_var = gmc_weighted(big, y, var)
    assert_same(Xw, want)
    assert_same(Vw, want_var)


CASES = ["plain", "zero_budget_above", "zero_budget_below", "zero_budget_split_level", "only_leaves_measured",
         "only_top_measured", "invariants", "per_cell_variances"]


def _case(tree: hierdp.Tree, case: str, seed: int, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    n, d, L = tree.n_nodes, tree.internal.depth, tree.n_levels
    truth = tree.to_internal(tree.aggregate(r.integers(0, 9, size=(tree.n_leaves, k)))).astype(np.float64)
    lv = r.uniform(0.5, 2.0, size=L)
    if case == "zero_budget_above":
        lv[:2] = np.inf
    elif case == "zero_budget_below":
        lv[L - 2] = np.inf
    elif case == "zero_budget_split_level":
        lv[2] = np.inf
    elif case == "only_leaves_measured":
        lv[:-1] = np.inf
    elif case == "only_top_measured":
        lv[2:] = np.inf
    var: np.ndarray = lv[d]
    y = truth + r.normal(size=truth.shape)
    if case == "invariants":  # a whole level and scattered nodes exact
        exact = (d == 1) | (r.random(n) < 0.05)
        y[exact] = truth[exact]
        var = var.copy()
        var[exact] = 0.0
    if case == "per_cell_variances":
        var = r.uniform(0.5, 2.0, size=(n, k))
        var[d == 2, 1] = np.inf
    return y, var


@pytest.mark.parametrize("case", CASES)
def test_blue_by_subtree_equals_in_memory_at_every_level_and_block_size(case: str) -> None:
    for seed in range(3):
        t = random_tree(3000, 6, seed=seed)
        y, var = _case(t, case, seed)
        ref = blue(t, y, var)
        for s in range(t.n_levels):
            for memory in (None, 60 * 3 * 600):
                split = s if memory is None else {"level": s, "memory": memory}
                try:
                    X, V = split_gls(t, y, var, split)
                except DataError:
                    assert memory is not None  # a level whose subtrees exceed the small budget
                    continue
                assert_same(X, ref.values)
                assert_same(V, ref.variance)


def test_the_marginals_gls_by_subtree_equals_it_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's GLS is one BLUE over the rotated cells: replacing it by the split one on
    the same rotated measurements (same seed, so the same noise) gives the same estimate."""
    from hierdp.plans import marginals as M

    t = random_tree(20_000, 4, seed=3)
    r = np.random.default_rng(5)
    cells = {"a": 4, "b": 2, "c": 2}
    vals = t.to_internal(t.aggregate(r.integers(0, 5, size=(t.n_leaves, 16))))
    plan = M.Marginals(strategy={("a", "b"): 0.5, ("c",): 0.3, (): 0.2}, cells=cells)
    sens = Sensitivity()

    def measured() -> Any:
        return plan.measure(t, vals, total=1.0, delta=None, sensitivity=sens, rng=hierdp.rng.make_rng(9))

    ref = measured()
    calls = []

    def split_blue(tree: hierdp.Tree, z: np.ndarray, zvar: np.ndarray) -> Estimate:
        calls.append(1)
        X, V = split_gls(tree, z, zvar, "L2")
        return Estimate(X, V)

    monkeypatch.setattr(M, "blue", split_blue)
    got = measured()
    assert calls
    assert_same(got.values, ref.values)
    assert_same(got.variance, ref.variance)


# ---------------------------------------------------------------------------- the release path
class Deterministic(Mechanism):
    """A test mechanism whose 'noise' depends on the value only (not the draw order), so
    that a split release and an in-memory one measure the same values. Not private."""

    name = "deterministic_test"
    integer = True

    def variance(self, budget: float, sensitivity: Sensitivity) -> float:
        return 2.0 / budget**2

    def sample(self, values: np.ndarray, budget: float, sensitivity: Sensitivity, rng: Any) -> np.ndarray:
        v = np.asarray(values, dtype=np.int64)
        return v + (v * 7919 + 13) % 11 - 5


def _both(tree: hierdp.Tree, values: np.ndarray, split: Any, **kw: Any) -> tuple[Any, Any]:
    kw.setdefault("epsilon", 1.0)
    kw.setdefault("mechanism", Deterministic())
    return release(tree, values, **kw), release(tree, values, split=split, **kw)


def _ledger(led: Any) -> dict[str, Any]:
    d = led.to_dict()
    for key in ("release_id", "created"):  # per release, whatever the path
        d.pop(key)
    return d


def _same_result(a: Any, b: Any) -> None:
    assert_same(b.estimate.values, a.estimate.values)
    assert_same(b.estimate.variance, a.estimate.variance)
    np.testing.assert_array_equal(b.measurements.values, a.measurements.values)
    np.testing.assert_array_equal(b.measurements.variance, a.measurements.variance)
    assert b.estimate.info == a.estimate.info
    la, lb = _ledger(a.ledger), _ledger(b.ledger)
    note = lb["notes"].pop()
    assert note.startswith("computed by subtree (split at level")
    assert la == lb


@pytest.mark.parametrize("postprocess", [["blue"], ["gmc"], []])
def test_a_split_release_equals_the_in_memory_release_of_the_same_measurements(postprocess: list[str]) -> None:
    t = random_tree(5000, 5, seed=2)
    vals = t.aggregate(np.random.default_rng(1).integers(0, 20, size=(t.n_leaves, 4)))
    for split in ("L0", "L2", "L4", {"level": "L3", "memory": 60 * 4 * 3000}):
        _same_result(*_both(t, vals, split, postprocess=postprocess, budget=[0, 0.25, 0, 0.25, 0.5]))


def test_a_split_release_keeps_invariants_and_one_histogram() -> None:
    t = random_tree(3000, 4, seed=4)
    vals = t.aggregate(np.random.default_rng(2).integers(0, 20, size=t.n_leaves))
    a, b = _both(t, vals, "L2", invariants=["L1"], neighbours="substitute", budget={"L2": 0.5, "L3": 0.5, "L0": 0,
                                                                                     "L1": 0})
    _same_result(a, b)
    ext = t.level_nodes("L1")
    np.testing.assert_array_equal(b.estimate.values[ext], vals[ext])


def test_the_door_takes_split() -> None:
    pd = pytest.importorskip("pandas")
    r = np.random.default_rng(3)
    df = pd.DataFrame({"state": r.choice(list("ABC"), 500), "county": r.choice(list("xyz"), 500),
                       "sex": r.choice(["F", "M"], 500)})
    door = df.dptree(levels=["state", "county"], domains="observed", cells={"sex": ["F", "M"]})
    kw = dict(epsilon=1.0, mechanism=Deterministic(), seed=1)
    a, b = door.release(**kw), door.release(split="county", **kw)
    assert_same(b.estimate.values, a.estimate.values)
    assert any(note.startswith("computed by subtree (split at level 'county'") for note in b.ledger.notes)


def test_a_split_release_with_real_noise_is_consistent_and_unbiased_in_shape() -> None:
    t = random_tree(4000, 4, seed=6)
    vals = t.aggregate(np.random.default_rng(2).integers(0, 20, size=(t.n_leaves, 2)))
    res = release(t, vals, epsilon=1.0, seed=3, split="L2")
    assert t.is_consistent(res.estimate.values[:, 0]) and t.is_consistent(res.estimate.values[:, 1])
    assert res.ledger.guarantee == "pure" and not res.ledger.for_publication


@pytest.mark.parametrize("kw, match", [
    ({"postprocess": ["blue", {"name": "nonneg", "method": "global"}]},
     r"post-processor 'nonneg' cannot run by subtree \(split=\) \(its top-down method does"),
    ({"postprocess": ["blue", "nonneg", {"name": "round", "method": "remainder"}]},
     r"post-processor 'round' cannot run by subtree after a top-down"),
    ({"postprocess": ["nonneg"]}, r"put 'blue' \(or 'gmc'\) first"),
    ({"postprocess": ["blue", "nonneg"], "invariants": ["L3"], "neighbours": "substitute"},
     r"invariants at or above the split level"),
    ({"postprocess": ["blue", {"name": "round", "method": "remainder"}]}, r"post-processor 'round' cannot run by subtree"),
    ({"plan": {"name": "ghazi", "alpha": 0.5}, "delta": 1e-6}, r"plan 'ghazi' cannot run by subtree"),
    ({"budget": "optimal_oracle"}, r"reads true counts"),
])
def test_what_cannot_be_split_is_refused_in_one_line(kw: dict[str, Any], match: str) -> None:
    t = random_tree(500, 4, seed=1)
    vals = t.aggregate(np.ones(t.n_leaves, np.int64))
    with pytest.raises((PluginError, DataError), match=match) as err:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            release(t, vals, epsilon=1.0, split="L1", **kw)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------- streaming
@pytest.mark.parametrize("postprocess, budget", [(["blue"], [0.25, 0, 0.25, 0.25, 0.25]), (["gmc"], "equal"),
                                                  (["gmc"], [0.1, 0.1, 0.2, 0.3, 0.3]), ([], "equal")])
@pytest.mark.parametrize("workers", [1, 3])
def test_streaming_hands_every_part_to_the_sink_once_with_the_in_memory_estimate(tmp_path: Any, postprocess: Any,
                                                                                  budget: Any, workers: int) -> None:
    """Every part reaches the sink once, in task order and in the calling thread, with the
    in-memory estimate; with ``workers`` > 1 the tasks' counts are asked for on other
    threads and nothing else changes."""
    import threading

    t = random_tree(8000, 5, seed=8)
    k = 3
    vals = t.to_internal(t.aggregate(np.random.default_rng(4).integers(0, 9, size=(t.n_leaves, k))))
    kw = dict(epsilon=1.0, mechanism=Deterministic(), budget=budget, postprocess=postprocess)
    ref = release(t, t.to_external(vals), **kw)
    want = t.to_internal(ref.estimate.values)
    got = np.full((t.n_nodes, k), np.nan)
    asked: list[int] = []
    sunk: list[int] = []

    asked_on: set[str] = set()
    main = threading.current_thread()

    def counts_of(task: subtrees.SubtreeTask) -> np.ndarray:
        asked.append(task.index)
        if task.index >= 0:
            asked_on.add(threading.current_thread().name)
        return vals[task.nodes]

    def sink(task: subtrees.SubtreeTask, est: Estimate, meas: Any) -> None:
        assert threading.current_thread() is main
        sunk.append(task.index)
        assert est.info == ref.estimate.info
        assert np.all(np.isnan(got[task.nodes]))
        got[task.nodes] = est.values

    run = release_by_subtree(t, counts_of, sink, split={"level": "L2", "memory": 60 * k * 900}, n_cells=k,
                             workdir=tmp_path, workers=workers, **kw)
    assert run.partition.n_tasks > 2
    assert not list(tmp_path.iterdir())  # the measurements that waited between the passes are removed
    assert sorted(asked) == list(range(-1, run.partition.n_tasks))
    assert sunk == list(range(-1, run.partition.n_tasks))  # the top, then the tasks in order
    assert (asked_on == {main.name}) == (workers == 1), asked_on
    assert_same(got, want)
    la = _ledger(ref.ledger)
    lb = _ledger(run.ledger)
    lb["notes"].pop()
    assert la == lb


def test_streaming_checks_the_counts_it_is_given() -> None:
    t = random_tree(2000, 4, seed=9)
    vals = t.to_internal(t.aggregate(np.ones(t.n_leaves, np.int64)))
    bad = vals.copy()
    bad[t.internal.depth == 1] += 1  # the top no longer adds up to the subtree roots below it

    with pytest.raises(DataError, match="not the sum of their leaves"):
        release_by_subtree(t, lambda task: bad[task.nodes], lambda *a: None, split="L2", epsilon=1.0, seed=1)
    with pytest.raises(DataError, match=r"counts_of\(task 0\) must return shape"):
        release_by_subtree(t, lambda task: vals[task.nodes][:-1], lambda *a: None, split="L2", epsilon=1.0,
                           seed=1)


def test_gmc_keeps_its_formula_in_the_info() -> None:
    t = random_tree(1000, 4, seed=5)
    vals = t.aggregate(np.ones(t.n_leaves, np.int64))
    a, b = _both(t, vals, "L1", postprocess=[GMC(formula=36)])
    assert b.estimate.info == a.estimate.info == {"method": "gmc", "formula": 36}


# ---------------------------------------------------------------------------- specs
def _demo_spec(**extra: Any) -> dict[str, Any]:
    from importlib import resources

    import yaml

    data = yaml.safe_load(resources.files("hierdp.examples").joinpath("demo.yaml").read_text())
    data.pop("output", None)
    data.update(extra)
    return data


def test_a_spec_takes_split_and_releases_what_memory_releases() -> None:
    from hierdp.spec.runner import run_spec

    a = run_spec(_demo_spec(), seed=3, write=False)
    b = run_spec(_demo_spec(split="county", postprocess=[]), seed=3, write=False)
    c = run_spec(_demo_spec(split={"level": "state", "memory": "1GiB"}), seed=3, write=False)
    for r in (b, c):
        assert any(n.startswith("computed by subtree") for n in r.ledger.notes)
    assert a.tree == c.tree and c.tree.is_consistent(c.estimate.values)


@pytest.mark.parametrize("split, match", [
    ("contry", r"unknown split level 'contry'; expected one of total, state, county, tract; did you mean 'county'"),
    ({"level": "state", "memory": "lots"}, r"split memory must be a positive number of bytes"),
    ({"levle": "state"}, r"split"),
])
def test_a_spec_with_a_bad_split_is_refused_by_validation(split: Any, match: str) -> None:
    from hierdp.errors import SpecError
    from hierdp.spec.validate import validate

    with pytest.raises(SpecError, match=match):
        validate(_demo_spec(split=split), check_files=False)


# ---------------------------------------------------------------------------- noise keyed per node
@pytest.mark.parametrize("mechanism", ["discrete_laplace", "discrete_gaussian"])
def test_a_split_release_draws_the_in_memory_noise_bit_for_bit(mechanism: str) -> None:
    """Real (exact, keyed) noise: every split level, task blocking and thread count gives
    the noisy measurements of the in-memory release with the same seed, bit for bit, and
    its BLUE estimate (issue 30 item 2)."""
    t = random_tree(6000, 5, seed=12)
    vals = t.aggregate(np.random.default_rng(5).integers(0, 30, size=(t.n_leaves, 16)))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=11, mechanism=mechanism, budget=[0.1, 0.2, 0.2, 0.2, 0.3])
    if mechanism == "discrete_gaussian":
        kw = dict(kw, epsilon=None, rho=1.0)
    ref = release(t, vals, **kw)
    for threads in (1, 2):
        hierdp.set_threads(threads)
        try:
            for split in ("L0", "L1", "L3", "L4", {"level": "L2", "memory": 60 * 16 * 400}):
                got = release(t, vals, split=split, **kw)
                np.testing.assert_array_equal(got.measurements.values, ref.measurements.values)
                assert_same(got.estimate.values, ref.estimate.values)
        finally:
            hierdp.set_threads(None)


def test_a_streamed_release_draws_the_in_memory_noise_in_any_task_order() -> None:
    t = random_tree(4000, 4, seed=13)
    vals = t.to_internal(t.aggregate(np.random.default_rng(6).integers(0, 9, size=(t.n_leaves, 16))))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=4, postprocess=[])
    ref = t.to_internal(release(t, t.to_external(vals), **kw).measurements.values)
    for block in (60 * 16 * 1600, 60 * 16 * 3000):
        got = np.full(ref.shape, -10**9, dtype=np.int64)

        def sink(task: subtrees.SubtreeTask, est: Estimate, meas: Any, got: np.ndarray = got) -> None:
            got[task.nodes] = meas.values

        release_by_subtree(t, lambda task: vals[task.nodes], sink, split={"level": "L2", "memory": block},
                           n_cells=16, **kw)
        np.testing.assert_array_equal(got, ref)



# ---------------------------------------------------------------------------- top-down steps by subtree
def _sparse_values(t: hierdp.Tree, k: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    return t.aggregate(r.integers(0, 4, size=(t.n_leaves, k)) * (r.random((t.n_leaves, k)) < 0.35))


@pytest.mark.parametrize("gls", ["blue", "gmc"])
def test_a_split_release_runs_top_down_nonneg_as_in_memory(gls: str) -> None:
    """Top-down nonneg needs only each subtree root's final value: split at every level
    (and in blocks), the values equal the in-memory release's to round-off (issue 30 item 3)."""
    t = random_tree(6000, 5, seed=21)
    vals = _sparse_values(t, 4, 1)
    kw: dict[str, Any] = dict(epsilon=1.0, seed=5, postprocess=[gls, "nonneg"], invariants=["L0", "L1"],
                              neighbours="substitute", invariants_cover="cells")
    ref = release(t, vals, **kw)
    for split in ("L1", "L2", "L4", {"level": "L3", "memory": 60 * 4 * 3500}):  # invariants at or above
        got = release(t, vals, split=split, **kw)
        assert_same(got.estimate.values, ref.estimate.values)
        assert_same(got.estimate.variance, ref.estimate.variance)
        assert got.estimate.info == ref.estimate.info
        assert (got.estimate.values >= -1e-9).all()
    kw.pop("invariants")
    for split in ("L0", "L2"):  # without invariants, from the root level too
        assert_same(release(t, vals, split=split, **kw).estimate.values, release(t, vals, **kw).estimate.values)


def test_a_split_release_rounds_top_down_to_consistent_non_negative_integers() -> None:
    """Top-down rounding per subtree: consistent non-negative integers in every cell,
    within 1 of the in-memory release's (they differ only where round-off in the GLS
    values breaks a tie between siblings differently)."""
    t = random_tree(6000, 5, seed=22)
    vals = _sparse_values(t, 4, 2)
    kw: dict[str, Any] = dict(epsilon=1.0, seed=6, postprocess=["blue", "nonneg", {"name": "round",
                                                                                 "method": "topdown"}])
    ref = release(t, vals, **kw)
    for split in ("L0", "L2", "L4"):
        got = release(t, vals, split=split, **kw)
        x = got.estimate.values
        assert x.dtype == np.int64 and (x >= 0).all()
        assert all(t.is_consistent(x[:, c]) for c in range(4))
        assert np.abs(x - ref.estimate.values).max() <= 1
        assert got.estimate.info == ref.estimate.info and got.estimate.linear == ref.estimate.linear


def test_streaming_runs_the_top_down_steps_per_task() -> None:
    t = random_tree(4000, 4, seed=23)
    vals = t.to_internal(_sparse_values(t, 3, 3))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=7, postprocess=["blue", "nonneg"])
    want = t.to_internal(release(t, t.to_external(vals), **kw).estimate.values)
    got = np.full(want.shape, np.nan)

    def sink(task: subtrees.SubtreeTask, est: Estimate, meas: Any) -> None:
        got[task.nodes] = est.values

    release_by_subtree(t, lambda task: vals[task.nodes], sink, split={"level": "L2", "memory": 60 * 3 * 2500},
                       n_cells=3, **kw)
    assert_same(got, want)


