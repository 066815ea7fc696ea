"""GMC (Cai et al. Alg. 1-2, formulas 36/39), its weighted form for per-level budgets, and
agreement of every optimally consistent estimator with a dense weighted least-squares
solve (formula 8 / Lee et al.) on random ragged trees."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hierdp
from hierdp import generation_matrix as gm
from hierdp.errors import DataError
from hierdp.postprocessors import Estimate
from hierdp.postprocessors.baselines import privtrie
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.gmc import GMC, gmc, gmc_structure, gmc_weighted
from tests.helpers import random_parent


def _tree(n, seed):
    return hierdp.Tree.from_parent(random_parent(np.random.default_rng(seed), n))


def dense_projection(tree, y, d):
    """Formula (8) weighted: y - D M (M^T D M)^-1 M^T y, dense (internal order)."""
    M = gm.consistency_constraint_matrix(tree).toarray()
    if M.shape[1] == 0:
        return y.copy()
    D = np.diag(d)
    return y - D @ M @ np.linalg.solve(M.T @ D @ M, M.T @ y)


def _close(a, b):
    scale = 1.0 + np.abs(b).max()
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-8 * scale)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 45), seed=st.integers(0, 2**32 - 1), k=st.sampled_from([None, 1, 3]))
def test_uniform_noise_all_estimators_agree(n, seed, k):
    rng = np.random.default_rng(seed)
    tree = _tree(n, seed)
    shape = (n,) if k is None else (n, k)
    y = rng.normal(0, 30, size=shape)
    ones = np.ones(n)
    ref = np.column_stack([dense_projection(tree, c, ones) for c in y.reshape(n, -1).T]).reshape(shape)
    _close(gmc(tree, y), ref)                                  # formula (39)
    _close(gmc(tree, y, formula=36), ref)                      # formula (36)
    _close(blue(tree, y, ones).values, ref)                    # Dawson et al. Alg. 2
    _close(privtrie(tree, y), ref)                             # recursive reference
    _close(hierdp.postprocess("dense", tree, tree.to_external(y)).values, tree.to_external(ref))
    _close(hierdp.postprocess("gmc", tree, tree.to_external(y), variance=2.5).values, tree.to_external(ref))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 45), seed=st.integers(0, 2**32 - 1), k=st.sampled_from([None, 3]),
       per_cell=st.booleans())
def test_weighted_gmc_equals_blue_and_dense(n, seed, k, per_cell):
    """Non-uniform variances (per-level budgets or per node): weighted GMC = BLUE = WLS."""
    rng = np.random.default_rng(seed)
    tree = _tree(n, seed)
    shape = (n,) if k is None else (n, k)
    y = rng.normal(0, 30, size=shape)
    d = rng.uniform(0.2, 8.0, size=shape if per_cell else (n,))
    d2 = np.broadcast_to(d.reshape(n, -1), (n, y.reshape(n, -1).shape[1]))
    ref = np.column_stack([dense_projection(tree, y.reshape(n, -1)[:, c], d2[:, c])
                           for c in range(d2.shape[1])]).reshape(shape)
    out, var = gmc_weighted(tree, y, d)
    _close(out, ref)
    b = blue(tree, y, d)
    _close(b.values, ref)
    np.testing.assert_allclose(var, b.variance, rtol=1e-10, atol=1e-12)
    if not per_cell:
        _close(privtrie(tree, y, d), ref)
        dense = hierdp.postprocess("dense", tree, tree.to_external(y), variance=tree.to_external(d))
        _close(tree.to_internal(dense.values), ref)


def test_per_level_budgets_weighted_gmc_and_stage1_cache():
    tree = hierdp.Tree.complete(3, 5)
    rng = np.random.default_rng(1)
    eps = np.array([0.1, 0.2, 0.3, 0.1, 0.3])                  # per-level budgets
    d = (2.0 / eps**2)[tree._depth]                           # Laplace variance 2/eps^2
    y = rng.normal(0, 50, tree.n_nodes)
    est = GMC().apply(tree, Estimate(y, d))
    assert est.info["method"] == "gmc_weighted"
    _close(est.values, dense_projection(tree, y, d))
    _close(est.values, blue(tree, y, d).values)
    cache = tree.cache["gmc.weighted"]
    assert len(cache) == 1                                     # keyed by the per-level variances
    (key,) = cache
    assert key == tuple(2.0 / eps**2)
    GMC().apply(tree, Estimate(rng.normal(size=tree.n_nodes), d))
    assert len(cache) == 1                                     # reused, not recomputed


def test_unmeasured_levels_use_the_equivalent_blue():
    tree = hierdp.Tree.complete(2, 6)
    rng = np.random.default_rng(2)
    d = np.where(tree._depth < 3, np.inf, 1.0)                 # budget only on the lower levels
    y = np.where(np.isfinite(d), rng.normal(0, 10, tree.n_nodes), 1e9)
    est = GMC().apply(tree, Estimate(y, d))
    assert est.info["method"] == "blue" and "inf" in est.info["note"]
    ref = blue(tree, y, d)
    np.testing.assert_array_equal(est.values, ref.values)
    assert tree.is_consistent(tree.to_external(est.values))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), seed=st.integers(0, 2**32 - 1))
def test_theorem_5_trace_identity(n, seed):
    """Theorem 5 in closed form: the output variances sum to sigma^2 * m (m leaves)."""
    tree = _tree(n, seed)
    sigma2 = 3.0
    est = GMC().apply(tree, Estimate(np.zeros(n), np.full(n, sigma2)))
    assert est.variance.sum() == pytest.approx(sigma2 * tree.n_leaves, rel=1e-9)
    M = gm.consistency_constraint_matrix(tree).toarray()
    if M.shape[1]:
        P = np.eye(n) - M @ np.linalg.solve(M.T @ M, M.T)
        np.testing.assert_allclose(est.variance, sigma2 * np.diag(P), rtol=1e-9, atol=1e-12)


def test_theorem_5_monte_carlo_syndata():
    """Laplace(h/eps) noise on a complete binary tree: total MSE 2nh^2/eps^2 before and
    2mh^2/eps^2 after GMC, within 5 standard errors (4000 replicates in one 2-D pass)."""
    h, eps, reps = 6, 1.0, 4000
    tree = hierdp.Tree.complete(2, h)
    rng = np.random.default_rng(7)
    true = tree.to_internal(tree.aggregate(rng.poisson(100, tree.n_leaves))).astype(float)
    noise = rng.laplace(0.0, h / eps, size=(tree.n_nodes, reps))
    noisy = true[:, None] + noise
    out = gmc(tree, noisy)
    before = ((noisy - true[:, None]) ** 2).sum(axis=0)
    after = ((out - true[:, None]) ** 2).sum(axis=0)
    n, m = tree.n_nodes, tree.n_leaves
    for sample, expected in ((before, 2 * n * h**2 / eps**2), (after, 2 * m * h**2 / eps**2)):
        se = sample.std(ddof=1) / np.sqrt(reps)
        assert abs(sample.mean() - expected) < 5 * se, (sample.mean(), expected, se)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 2**32 - 1))
def test_stage2_leaf_kernels_agree(n, seed):
    """Formula (39) leaves run by run and one by one (both 1-D kernels, whichever the
    dispatch picks) give the same projection as the dense solve."""
    from hierdp.postprocessors import _gmc_kernels as GK

    rng = np.random.default_rng(seed)
    tree = _tree(n, seed)
    y = rng.normal(0, 30, n)
    ref = dense_projection(tree, y, np.ones(n))
    st_ = gmc_structure(tree)
    runs = GK.gmc_39_1d(st_.parent1, st_.n1, st_.inv_theta, st_.leaf_starts, st_.leaf_parents, y,
                        np.empty(n), np.empty(st_.n1))
    _close(runs, ref)
    if st_.leaf_parent is not None:
        flat = GK.gmc_39_1d_flat(st_.parent1, st_.n1, st_.inv_theta, st_.leaf_parent, y, np.empty(n),
                                 np.empty(st_.n1))
        _close(flat, ref)


def test_stage2_kernel_choice_follows_sibling_run_length():
    from hierdp.postprocessors import gmc as G

    assert gmc_structure(hierdp.Tree.complete(2, 8)).leaf_parent is not None        # runs of 2
    wide = hierdp.Tree.from_parent([-1] + [0] * 3 + [1] * 20 + [2] * 20 + [3] * 20)  # runs of 20
    assert wide.n_leaves / len(gmc_structure(wide).leaf_parents) >= G.SHORT_RUNS
    assert gmc_structure(wide).leaf_parent is None
    y = np.random.default_rng(0).normal(0, 5, wide.n_nodes)
    _close(gmc(wide, y), dense_projection(wide, y, np.ones(wide.n_nodes)))
    split = hierdp.Tree([-1, 0, 0, 1, 2, 1])  # leaves 3 and 5 share parent 1 but are apart
    assert gmc_structure(split).leaf_parent is None
    y = np.array([10.0, 4.0, 5.0, 1.0, 2.0, 3.0])
    _close(gmc(split, y), dense_projection(split, y, np.ones(6)))


def test_stage1_is_cached_and_structure_only():
    tree = hierdp.Tree.complete(2, 4)
    st1 = gmc_structure(tree)
    assert gmc_structure(tree) is st1
    assert tree.cache["gmc.structure"] is st1
    assert st1.n1 == 7 and st1.theta.shape == (7,)
    # Alg. 1 on a complete binary tree: theta' = 1 + 2 - 2/theta'_child
    th = [3.0]
    for _ in range(2):
        th.append(3.0 - 2.0 / th[-1])
    np.testing.assert_allclose(st1.theta[[6, 2, 0]], th)


def test_errors():
    tree = hierdp.Tree.complete(2, 3)
    with pytest.raises(DataError, match="formula must be 36 or 39"):
        GMC(formula=8)
    with pytest.raises(DataError, match="NaN or infinity"):
        gmc(tree, np.array([1, 2, np.nan, 4, 5, 6, 7.0]))
    with pytest.raises(DataError, match="shape"):
        gmc(tree, np.ones(5))
    with pytest.raises(DataError, match="finite, positive"):
        gmc_weighted(tree, np.ones(7), np.r_[np.inf, np.ones(6)])
    with pytest.raises(DataError, match="non-negative"):
        GMC().apply(tree, Estimate(np.ones(7), -np.ones(7)))
    # weighted GMC's one-pass check of values and variances gives the same errors
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(DataError, match="NaN or infinity"):
            gmc_weighted(tree, np.r_[1.0, 2, 3, bad, 5, 6, 7], np.full(7, 2.0))
    with pytest.raises(DataError, match="finite, positive"):
        gmc_weighted(tree, np.ones(7), np.r_[2.0, 2, 2, 2, 0, 2, 2])
    with pytest.raises(DataError, match="non-negative"):
        gmc_weighted(tree, np.ones(7), np.r_[2.0, 2, 2, 2, np.nan, 2, 2])


def test_weighted_gmc_cache_key_needs_every_node_of_a_level():
    """Variances that agree with a per-level budget on each level's first node but not
    elsewhere must not be served the per-level factors (nor the reverse); the estimate's
    variance is BLUE's, read-only."""
    tree = hierdp.Tree.complete(2, 4)
    y = np.random.default_rng(2).normal(0, 5, tree.n_nodes)
    level = np.array([1.0, 2.0, 3.0, 4.0])[tree.internal.depth]
    bent = level.copy()
    bent[-1] = 9.0  # the last leaf only
    for d in (level, bent, level, bent):
        out, var = gmc_weighted(tree, y, d)
        _close(out, dense_projection(tree, y, d))
        np.testing.assert_allclose(var, blue(tree, y, d).variance, rtol=1e-10)
        assert not var.flags.writeable


def test_weighted_factor_cache_keeps_its_own_copy_and_is_thread_safe():
    """The per-level factor cache must not keep a view of the caller's variance array (a
    caller reusing its buffer changed later results), and threads share it safely."""
    from concurrent.futures import ThreadPoolExecutor

    t = hierdp.Tree.complete(2, 3)
    y = np.array([3.0, 1.0, 2.5, 0.2, 1.1, 1.3, 0.9])
    var = np.array([1.0, 2, 2, 4, 4, 4, 4])
    first = hierdp.postprocess("gmc", t, y, variance=var).values
    var[:] = [9.0, 1, 1, 3, 3, 3, 3]  # the caller reuses its buffer
    again = hierdp.postprocess("gmc", t, y, variance=np.array([1.0, 2, 2, 4, 4, 4, 4])).values
    _close(again, first)
    _close(first, dense_projection(t, y, np.array([1.0, 2, 2, 4, 4, 4, 4])))
    big = hierdp.Tree.complete(3, 6)
    yb = np.random.default_rng(0).normal(0, 5, big.n_nodes)
    levels = [np.array([a, b, c, d, e, f], float)[big.depth] for a, b, c, d, e, f in
              np.random.default_rng(1).integers(1, 9, (24, 6))]
    expect = [gmc_weighted(big, yb, lv)[0] for lv in levels]
    big.cache.clear()
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda lv: hierdp.postprocess("gmc", big, yb, variance=lv).values, levels * 3))
    for j, g in enumerate(got):
        _close(g, expect[j % len(levels)])
