"""Budget strategies: the variance-only BLUE kernel, greedy (Dawson et al. Alg. 3), the
continuous optimiser, priors and the oracle variants."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hierdp
from hierdp import Tree, registry, release
from hierdp.budgets._objective import TreeErrorObjective
from hierdp.budgets._variance import blue_variance, class_tree
from hierdp.budgets.greedy import greedy_split
from hierdp.budgets.optimize import optimal_split
from hierdp.errors import BudgetError
from hierdp.mechanisms.base import Sensitivity
from hierdp.postprocessors.blue import blue

MECH = registry.create("mechanism", "discrete_laplace")
SENS = Sensitivity()


def random_tree(rng, n, window=6):
    parent = np.array([-1] + [int(rng.integers(max(0, i - window), i)) for i in range(1, n)])
    return Tree.from_parent(parent)


def dlap_var(eps):
    """Variance 2a/(1-a)^2, a = exp(-eps), of DLap(1/eps) (no scale rounding: tests use tolerances)."""
    a = np.exp(-eps)
    return 2 * a / (1 - a) ** 2


# ---------------------------------------------------------------- variance kernel
@pytest.mark.parametrize("seed", range(8))
def test_class_tree_variances_equal_full_blue(seed):
    rng = np.random.default_rng(seed)
    t = random_tree(rng, int(rng.integers(2, 400)))
    lv = rng.uniform(0.2, 9.0, t.n_levels)
    if seed % 2:
        lv[int(rng.integers(0, t.n_levels - 1))] = np.inf  # an unmeasured level
    ref = blue(t, rng.normal(size=t.n_nodes), lv[t._depth]).variance
    got = blue_variance(t, lv)
    assert np.array_equal(np.isinf(ref), np.isinf(got))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-10, atol=1e-12)
    ct = class_tree(t)
    assert ct.n_classes <= t.n_nodes and ct.size.sum() == t.n_nodes


def test_uniform_tree_has_one_class_per_level_and_closed_form():
    # complete binary tree with 2 levels, unit variances: root BLUE var = 1*2/(1+2) = 2/3;
    # leaf: u=1, U=2, var = 1 - 1/2 + (1/4)(2/3) = 2/3 (hand computed).
    t = Tree.complete(2, 2)
    ct = class_tree(t)
    assert ct.uniform and ct.n_classes == 2
    np.testing.assert_allclose(blue_variance(t, np.ones(2)), [2 / 3, 2 / 3, 2 / 3])
    t = Tree.complete(3, 6)
    assert class_tree(t).n_classes == 6
    lv = np.array([4.0, 1.0, 2.0, 0.5, 3.0, 1.5])
    np.testing.assert_allclose(blue_variance(t, lv), blue(t, np.zeros(t.n_nodes), lv[t._depth]).variance)


def test_identical_subtrees_share_a_class():
    # root with three children: two identical 2-leaf subtrees and one 3-leaf subtree
    parent = [-1, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3]
    t = Tree.from_parent(parent)
    ct = class_tree(t)
    assert not ct.uniform
    # classes: root, {1,2}, {3}, leaves under {1,2}, leaves under {3}
    assert ct.n_classes == 5
    assert sorted(ct.size.tolist()) == [1, 1, 2, 3, 4]


# ---------------------------------------------------------------- objective
def test_objective_matches_definition_from_blue_variances():
    rng = np.random.default_rng(3)
    t = random_tree(rng, 120)
    c = t.aggregate(rng.poisson(4, t.n_leaves))
    b = rng.dirichlet(np.ones(t.n_levels)) * 2.0
    obj = TreeErrorObjective(t, c, tau=5.0, mechanism=MECH, sensitivity=SENS)
    lv = np.array([MECH.variance(x, SENS) for x in b])
    var = t.to_external(blue(t, np.zeros(t.n_nodes), lv[t._depth]).variance)  # internal in, external out
    depth = t.depth
    per_level = [np.mean(var[depth == d] / np.maximum(5.0, c[depth == d]) ** 2) for d in range(t.n_levels)]
    assert obj(b)[0] == pytest.approx(np.sqrt(np.mean(per_level)), rel=1e-10)
    raw = TreeErrorObjective(t, c, tau=5.0, mechanism=MECH, sensitivity=SENS, postprocessed=False)
    per_level_raw = [lv[d] * np.mean(1 / np.maximum(5.0, c[depth == d]) ** 2) for d in range(t.n_levels)]
    assert raw(b)[0] == pytest.approx(np.sqrt(np.mean(per_level_raw)), rel=1e-10)


def reference_greedy(tree, counts, total, tau, k, gamma):
    """Algorithm 3 literally: one full BLUE (Alg. 2) per candidate, per-node variances."""
    L = tree.n_levels
    depth = tree.depth
    b = np.full(L, gamma * total / L)
    unit = (1 - gamma) * total / k
    for _ in range(k):
        errs = []
        for i in range(L):
            cand = b.copy()
            cand[i] += unit
            var_node = np.array([dlap_var(cand[d]) for d in depth])
            xv = blue(tree, np.zeros(tree.n_nodes), tree.to_internal(var_node)).variance
            xv = tree.to_external(xv)
            lvl = [np.mean(xv[depth == d] / np.maximum(tau, counts[depth == d]) ** 2) for d in range(L)]
            errs.append(np.sqrt(np.mean(lvl)))
        errs = np.array(errs)
        b[int(np.flatnonzero(errs <= errs.min() * (1 + 1e-12))[0])] += unit  # ties: nearest the root
    return b


class ExactDLap(type(MECH)):
    """Discrete Laplace variance without scale rounding (to compare with the reference)."""

    name = "exact_dlap_for_tests"

    def variance(self, budget, sensitivity):
        return dlap_var(budget / sensitivity.l1)


@pytest.mark.parametrize("seed", range(4))
def test_greedy_equals_literal_algorithm_3(seed):
    rng = np.random.default_rng(10 + seed)
    t = random_tree(rng, 60)
    c = t.aggregate(rng.poisson(rng.choice([2, 30, 500]), t.n_leaves))
    obj = TreeErrorObjective(t, c, tau=10.0, mechanism=ExactDLap(), sensitivity=SENS)
    got = greedy_split(obj, 1.5, phases=10, gamma=1e-5)
    ref = reference_greedy(t, c, 1.5, 10.0, 10, 1e-5)
    np.testing.assert_allclose(got, ref, rtol=1e-9)
    assert obj.n_evaluations == 10 * t.n_levels and obj.n_passes == 10


def compositions(k, L):
    for cut in itertools.combinations(range(k + L - 1), L - 1):
        yield np.diff(np.r_[-1, cut, k + L - 1]) - 1


@pytest.mark.parametrize("postprocessed", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_greedy_equals_brute_force_on_small_grid(seed, postprocessed):
    rng = np.random.default_rng(seed)
    t = Tree.complete(int(rng.integers(2, 4)), 3) if seed % 2 else random_tree(rng, 40, window=4)
    if t.n_levels > 5:
        t = Tree.complete(2, 4)
    c = t.aggregate(rng.poisson(rng.choice([1, 20, 300]), t.n_leaves))
    k, gamma, total = 8, 1e-5, 1.0
    obj = TreeErrorObjective(t, c, tau=5.0, mechanism=MECH, sensitivity=SENS, postprocessed=postprocessed)
    g = greedy_split(obj, total, phases=k, gamma=gamma)
    grid = np.array(list(compositions(k, t.n_levels))) * (1 - gamma) * total / k + gamma * total / t.n_levels
    brute = obj.mean_square(grid).min()
    assert obj.mean_square(g)[0] == pytest.approx(brute, rel=1e-12)
    assert g.sum() == pytest.approx(total, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_optimiser_matches_brute_force_on_a_grid(seed):
    """Against brute force: the objective at every split of a 2%-step grid over the simplex
    (3 levels: 1,176 splits), then a 0.2%-step grid around the grid's best. The optimiser's
    split must be at least as good as the best grid point (up to the grid's resolution
    being finer than its own) and no refined grid point may beat it."""
    rng = np.random.default_rng(100 + seed)
    t = Tree.from_parent(np.array([-1] + [0] * int(rng.integers(3, 8))
                                  + [int(p) for p in rng.integers(1, 4, size=int(rng.integers(15, 40)))]))
    assert t.n_levels == 3
    c = t.aggregate(rng.poisson(rng.choice([1, 10, 100]), t.n_leaves))
    tau = float(rng.choice([5.0, 10.0]))
    total = float(rng.choice([0.5, 2.0, 8.0]))
    obj = TreeErrorObjective(t, c, tau=tau, mechanism=MECH, sensitivity=SENS)
    o = optimal_split(obj, total, phases=20)
    assert o.sum() == pytest.approx(total, rel=1e-9) and np.all(o > 0)
    f_opt = float(obj.mean_square(o)[0])

    def grid(center, half, step):
        a = np.arange(-half, half + step / 2, step)
        pts = np.array([[center[0] + x, center[1] + y] for x in a for y in a])
        pts = np.column_stack([pts, total - pts.sum(axis=1)])
        return pts[np.all(pts >= 1e-3 * total, axis=1)]

    coarse = grid(np.array([total / 2, total / 2]), total / 2, 0.02 * total)
    f_coarse = obj.mean_square(coarse)
    best = coarse[np.argmin(f_coarse)]
    assert f_opt <= float(f_coarse.min()) * (1 + 1e-9)
    fine = grid(best[:2], 0.03 * total, 0.002 * total)
    assert f_opt <= float(obj.mean_square(fine).min()) * (1 + 1e-6)


def test_optimiser_finds_the_analytic_optimum_without_post_processing():
    # Raw objective sum_d A_d / eps_d^2 (Laplace-like variance 2/eps^2) is minimised by
    # eps_d proportional to A_d^(1/3) (Lagrange condition), a closed form.
    class Lap(type(MECH)):
        name = "lap_for_tests"

        def variance(self, budget, sensitivity):
            return 2.0 / budget**2

    t = Tree.complete(3, 4)
    rng = np.random.default_rng(0)
    c = t.aggregate(rng.poisson(3, t.n_leaves))
    obj = TreeErrorObjective(t, c, tau=10.0, mechanism=Lap(), sensitivity=SENS, postprocessed=False)
    o = optimal_split(obj, 1.0, phases=20)
    A = obj.weights
    expect = A ** (1 / 3) / np.sum(A ** (1 / 3))
    np.testing.assert_allclose(o, expect, rtol=1e-4)


# ---------------------------------------------------------------- strategies via the registry/release
def test_registered_names_and_flags():
    names = registry.names("budget")
    for n in ("equal", "leaves", "greedy", "greedy_oracle", "optimal", "optimal_oracle"):
        assert n in names
    assert not registry.get("budget", "greedy").reads_true_counts
    assert not registry.get("budget", "optimal").reads_true_counts
    assert registry.get("budget", "greedy_oracle").reads_true_counts
    assert registry.get("budget", "optimal_oracle").reads_true_counts


def test_prior_based_greedy_release_is_private_and_follows_the_prior():
    t = Tree.complete(4, 4)
    rng = np.random.default_rng(1)
    truth = t.aggregate(rng.poisson(2, t.n_leaves))
    small = registry.create("budget", "greedy", prior=truth, tau=10.0)
    alloc = small.allocate(t, 1.0, mechanism=MECH, sensitivity=SENS)
    # leaves ~2 << tau, the root ~128 >> tau: relative error is cheap high up, so the
    # leaves get (almost) everything.
    assert alloc[t.level_names[-1]] == pytest.approx(1.0, rel=1e-4)
    # a prior of zeros weighs every node alike (1/tau^2) and is the same as no prior:
    # the root level then matters as much as all leaves together, the split spreads.
    zero = registry.create("budget", "greedy", prior=np.zeros(t.n_nodes), tau=10.0)
    alloc_zero = zero.allocate(t, 1.0, mechanism=MECH, sensitivity=SENS)
    alloc_none = registry.create("budget", "greedy").allocate(t, 1.0, mechanism=MECH, sensitivity=SENS)
    assert alloc_zero == alloc_none
    assert alloc_zero[t.level_names[-1]] < 0.9
    assert sum(alloc_zero.values()) == pytest.approx(1.0)
    res = release(t, truth, epsilon=1.0, budget=small, seed=3)
    assert res.ledger.non_private == []
    assert res.ledger.by_level() == pytest.approx(alloc)


def test_prior_may_be_a_noisy_release():
    t = Tree.complete(3, 4)
    rng = np.random.default_rng(2)
    truth = t.aggregate(rng.poisson(50, t.n_leaves))
    prior = release(t, truth, epsilon=1.0, seed=1)
    s = registry.create("budget", "greedy", prior=prior, tau=5.0)
    alloc = s.allocate(t, 2.0, mechanism=MECH, sensitivity=SENS)
    assert sum(alloc.values()) == pytest.approx(2.0)
    # the same prior given as an array or a Series (node order) gives the same split
    import pandas as pd

    for same in (prior.values, pd.Series(prior.values)):
        assert registry.create("budget", "greedy", prior=same, tau=5.0).allocate(
            t, 2.0, mechanism=MECH, sensitivity=SENS) == alloc
    small = Tree.complete(2, 3)
    other = release(small, small.aggregate(np.arange(4)), epsilon=1.0, seed=1)  # node counts that add up
    with pytest.raises(BudgetError, match="different tree"):
        registry.create("budget", "greedy", prior=other).allocate(t, 1.0, mechanism=MECH, sensitivity=SENS)
    with pytest.raises(BudgetError, match="one row per node"):
        registry.create("budget", "greedy", prior=truth[:-1]).allocate(t, 1.0, mechanism=MECH, sensitivity=SENS)


@pytest.mark.parametrize("name", ["greedy_oracle", "optimal_oracle"])
def test_oracle_strategies_are_flagged_non_private_in_the_ledger(name):
    t = Tree.complete(2, 5)
    truth = t.aggregate(np.arange(t.n_leaves))
    res = release(t, truth, epsilon=1.0, budget=name, seed=0)
    assert res.ledger.non_private and name in res.ledger.non_private[0]
    assert not res.ledger.for_publication
    with pytest.raises(BudgetError, match="reads the true counts"):
        registry.create("budget", name).allocate(t, 1.0, mechanism=MECH, sensitivity=SENS)


def test_parameter_errors():
    with pytest.raises(BudgetError, match="phases"):
        registry.create("budget", "greedy", phases=0)
    with pytest.raises(BudgetError, match="tau"):
        registry.create("budget", "greedy", tau=-1)
    t = Tree.complete(2, 3)
    with pytest.raises(BudgetError, match="NaN"):
        hierdp.budgets.Greedy(prior=np.full(t.n_nodes, np.nan)).allocate(t, 1.0, mechanism=MECH,
                                                                          sensitivity=SENS)


def test_greedy_ties_up_to_rounding_go_to_the_level_nearest_the_root():
    """Scores equal up to rounding (1e-12 relative) are ties: the shallowest level wins,
    whatever order rounding happens to put them in."""

    class Scores:
        def __init__(self, tree, scores):
            self.tree, self.scores = tree, np.asarray(scores, float)

        def mean_square(self, cand):
            return self.scores.copy()

    t = Tree.complete(2, 3)
    assert np.argmax(greedy_split(Scores(t, [2.0, 1.0 + 1e-15, 1.0]), 1.0, phases=1)) == 1
    assert np.argmax(greedy_split(Scores(t, [2.0, 1.0 + 1e-9, 1.0]), 1.0, phases=1)) == 2


@pytest.mark.parametrize("name", ["greedy", "greedy_oracle", "optimal", "optimal_oracle"])
def test_strategy_parameters_are_type_checked(name):
    """A YAML 'false' in quotes is a string: bool('false') is True, so it must be refused."""
    from hierdp import registry

    for bad, msg in (({"postprocessed": "false"}, "postprocessed must be true or false"),
                     ({"tau": "ten"}, "tau must be a positive number"),
                     ({"gamma": "x"}, "gamma must be a number in .0, 1.")):
        with pytest.raises(BudgetError, match=msg):
            registry.create("budget", name, **bad)
