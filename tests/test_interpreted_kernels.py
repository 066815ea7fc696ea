"""Small inputs run the kernels interpreted (``hierdp._kernels.jit.for_size``): the same draws and
the same estimates as the compiled kernels, and nothing compiled on the way."""

from __future__ import annotations

import numpy as np
import pytest

import hierdp
from hierdp._kernels import jit as _jit
from hierdp._kernels.jit import numba as nb
from hierdp.mechanisms import _samplers as S
from hierdp.postprocessors import _blue_kernels as K
from hierdp.postprocessors import blue as B
from hierdp.rng import SeededRandom
from tests.helpers import random_parent


def _both(monkeypatch, run):
    """``run()`` with every kernel compiled, then with every kernel interpreted (small
    inputs of BLUE now take numpy passes instead, equal to round-off and tested in
    tests/test_small_trees.py; this file holds the interpreted kernels to their bits)."""
    monkeypatch.setattr(B, "SMALL_NUMPY", False)
    monkeypatch.setattr(_jit, "SMALL_INPUT", -1)
    compiled = run()
    monkeypatch.setattr(_jit, "SMALL_INPUT", 1 << 62)
    return compiled, run()


# scales from almost-always-0 noise to huge (s = 1), the high part H non-zero at times;
# discrete Gaussians by blocks and by CKS, tiny to large σ²
LAPLACE = [2.0**-20, 0.05, 0.37, 1.0, 3.7, 1e3, 2.0**21 + 0.5]
GAUSS = [(1e-6, "blocks"), (0.3, "blocks"), (12.0, "blocks"), (1e9, "blocks"), (0.3, "cks"), (12.0, "cks"),
         (1e6, "cks")]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("batch", [1 << 21, 5])
@pytest.mark.parametrize("scale", LAPLACE)
def test_discrete_laplace_draws_are_the_same(monkeypatch, scale, batch, fast):
    """Draw for draw, on the fast path and on the resumable one (tiny batches of words stop
    the state machine in the middle of draws)."""
    monkeypatch.setattr(S, "_WORD_BATCH", batch)
    monkeypatch.setattr(S, "_FAST_PATH", fast)
    p = S.dlap_params(scale)
    a, b = _both(monkeypatch, lambda: S.sample_discrete_laplace(p, 3000, SeededRandom(7)))
    assert scale < 0.1 or np.count_nonzero(a) > 300
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch", [1 << 21, 5])
@pytest.mark.parametrize("sigma2,method", GAUSS)
def test_discrete_gaussian_draws_are_the_same(monkeypatch, sigma2, method, batch):
    monkeypatch.setattr(S, "_WORD_BATCH", batch)
    g = S.dgauss_params(sigma2)
    a, b = _both(monkeypatch, lambda: S.sample_discrete_gaussian(g, 3000, SeededRandom(8), method=method))
    np.testing.assert_array_equal(a, b)


def test_precision_doubling_is_the_same(monkeypatch):
    """A comparison that runs out of tabulated bits makes the kernel ask for a longer
    table: forced here with a one-word table (64 bits)."""
    monkeypatch.setattr(S, "_TABLE_WORDS", 1)
    S._table.cache_clear()
    try:
        p = S.dlap_params(0.37)
        a, b = _both(monkeypatch, lambda: S.sample_discrete_laplace(p, 3000, SeededRandom(9)))
    finally:
        S._table.cache_clear()
    np.testing.assert_array_equal(a, b)


def _messy(rng, n):
    var = rng.uniform(0.1, 10.0, n)
    u = rng.random(n)
    var[u < 0.1] = np.inf
    var[(u >= 0.1) & (u < 0.15)] = 0.0
    return var


@pytest.mark.parametrize("kernel", ["flat", "per-parent"])
@pytest.mark.parametrize("seed", range(6))
def test_blue_estimates_are_the_same(monkeypatch, kernel, seed):
    """BLUE on random ragged trees, with unmeasured (inf) and exact (0) nodes: bit for bit."""
    monkeypatch.setattr(B, "FLAT_IRREGULARITY", -1.0 if kernel == "flat" else np.inf)
    rng = np.random.default_rng(seed)
    tree = hierdp.Tree.from_parent(random_parent(rng, int(rng.integers(2, 400))))
    var = _messy(rng, tree.n_nodes) if seed % 2 else np.full(tree.n_nodes, 2.0)
    y = tree.to_internal(tree.aggregate(rng.normal(0, 20, tree.n_leaves))) + np.where(
        var == 0.0, 0.0, rng.normal(0, 3, tree.n_nodes))

    def run():
        tree.cache.pop(B._STRUCT_KEY, None)
        e = B.blue(tree, y, var)
        return e.values.copy(), e.variance.copy()

    (x1, v1), (x2, v2) = _both(monkeypatch, run)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(v1, v2)


def test_blue_several_histograms_are_the_same(monkeypatch):
    rng = np.random.default_rng(3)
    tree = hierdp.Tree.from_parent(random_parent(rng, 300))
    y = rng.normal(0, 10, (tree.n_nodes, 3))
    var = rng.uniform(0.5, 4.0, (tree.n_nodes, 3))

    def run():
        e = B.blue(tree, y, var)
        return e.values.copy(), e.variance.copy()

    (x1, v1), (x2, v2) = _both(monkeypatch, run)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(v1, v2)


def test_interpreting_compiles_nothing():
    """A kernel and the kernel it calls stay uncompiled when run interpreted."""

    @nb.njit
    def inner(a, i):
        return a[i] * 2.0

    @nb.njit
    def outer(a):
        s = 0.0
        for i in range(a.shape[0]):
            s += inner(a, i)
        return s

    f = _jit.interpreted(outer)
    assert f(np.arange(4.0)) == 12.0
    assert outer.signatures == [] and inner.signatures == []
    assert _jit.interpreted(outer) is f  # made once
    assert outer(np.arange(4.0)) == 12.0 and outer.signatures


def test_the_demo_release_compiles_nothing(tmp_path):
    """The bundled demo (a few hundred nodes) runs with an empty kernel cache and leaves it
    empty: a pip user's first release does not wait for numba."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, HIERDP_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    out = tmp_path / "demo.csv"
    subprocess.run([sys.executable, "-m", "hierdp", "release", "demo", "-o", str(out), "-q"], env=env,
                   cwd=tmp_path, check=True, capture_output=True)
    assert out.exists()
    compiled = [p.name for p in (tmp_path / "cache").rglob("*.nbi")]
    assert compiled == []
    assert K.blue_flat_1d is not None  # the module imports fine without compiling


@pytest.mark.parametrize("seed", range(4))
def test_consistency_chain_is_the_same(monkeypatch, seed):
    """GMC (formulas 39 and 36, one and several histograms, weighted), nonneg and round on
    random ragged trees and on a tree whose leaves hang in runs (GMC's flat kernel)."""
    from hierdp.postprocessors import gmc as G
    from hierdp.postprocessors.nonneg import nonneg
    from hierdp.postprocessors.rounding import controlled_round

    rng = np.random.default_rng(seed)
    parent = random_parent(rng, int(rng.integers(5, 400))) if seed < 3 else hierdp.Tree.complete(3, 5).internal.parent
    tree = hierdp.Tree.from_parent(parent)
    n = tree.n_nodes
    true = tree.to_internal(tree.aggregate(rng.poisson(3.0, tree.n_leaves).astype(float)))
    y = true + rng.normal(0, 2, n)
    y3 = np.stack([y, y[::-1], 2 * y], axis=1)
    var = rng.uniform(0.5, 4.0, n)

    def run():
        tree.cache.clear()
        x_nn, _ = nonneg(tree, y, var)
        return [G.gmc(tree, y), G.gmc(tree, y, formula=36), G.gmc(tree, y3), *G.gmc_weighted(tree, y, var),
                x_nn, controlled_round(tree, x_nn)]

    for a, b in zip(*_both(monkeypatch, run), strict=True):
        np.testing.assert_array_equal(a, b)
