"""Small trees at compiled speed (issue 30 item 5): the numpy passes that replace the
interpreted kernels on inputs of up to ``hierdp._kernels.jit.SMALL_INPUT`` items.

* BLUE by height class (``postprocessors/_blue_small.py``) against the compiled kernel
  ``blue_2d`` and a dense generalised least-squares solve, on trees of many shapes, with
  k = 1 and k > 1 cells, one variance per node or per cell, unmeasured (inf) and exactly
  known (0) nodes;
* keyed discrete Laplace draws (``mechanisms/_keyed_small.py``) against the compiled
  sampler draw for draw, over rates whose magnitude split differs (J from 0 to 13 digits),
  and with segments so short that many draws leave the common path;
* whole releases through both paths.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import hierdp
from hierdp._kernels import jit
from hierdp.keyed_noise import NoiseKey
from hierdp.mechanisms import _keyed_small
from hierdp.mechanisms import _samplers as S
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _blue_small
from hierdp.postprocessors import blue as B
from tests.helpers import random_parent


@pytest.fixture(autouse=True)
def _default_small_input(monkeypatch):
    """The suite runs every kernel compiled (``tests/conftest.py``); these tests need the
    default threshold, under which small inputs take the numpy passes."""
    monkeypatch.setattr(jit, "SMALL_INPUT", 1 << 14)


# --------------------------------------------------------------------------------------
# trees
# --------------------------------------------------------------------------------------
def _italy_like(n_nodes: int, seed: int = 0) -> hierdp.Tree:
    """region > province > municipality in Italy's proportions (20, 107, the rest)."""
    rng = np.random.default_rng(seed)
    n_r = max(1, min(20, n_nodes // 40))
    n_p = max(n_r, min(107, n_nodes // 8))
    n_m = max(n_p, n_nodes - 1 - n_r - n_p)
    prov = rng.multinomial(n_p - n_r, np.ones(n_r) / n_r) + 1
    mun = rng.multinomial(n_m - n_p, np.ones(n_p) / n_p) + 1
    parent = np.concatenate([[-1], np.zeros(n_r, np.int64), 1 + np.repeat(np.arange(n_r), prov),
                             1 + n_r + np.repeat(np.arange(n_p), mun)])
    return hierdp.Tree.from_parent(parent)


def _shapes():
    rng = np.random.default_rng(3)
    yield "one node", hierdp.Tree.from_parent([-1])
    yield "root and leaf", hierdp.Tree.from_parent([-1, 0])
    yield "chain of 30", hierdp.Tree.from_parent(np.arange(-1, 29))
    yield "star of 60", hierdp.Tree.from_parent(np.r_[-1, np.zeros(59, np.int64)])
    yield "complete binary, height 7", hierdp.Tree.complete(2, 7)
    yield "complete 5-ary, height 4", hierdp.Tree.complete(5, 4)
    yield "italy-like 900", _italy_like(900)
    for i, n in enumerate((7, 40, 200, 700)):
        yield f"random {n}", hierdp.Tree.from_parent(random_parent(np.random.default_rng(10 + i), n))
    # unequal fan-out with leaves at many depths: a caterpillar with bushes
    spine = np.arange(-1, 11)
    bush = rng.integers(0, 12, 40)
    yield "caterpillar", hierdp.Tree.from_parent(np.r_[spine, bush])


SHAPES = list(_shapes())


def _variances(rng, tree, kv, kind):
    n = tree.n_nodes
    if kind == "finite":
        return rng.uniform(0.2, 5.0, (n, kv))
    var = rng.uniform(0.2, 5.0, (n, kv))
    u = rng.random((n, kv))
    var[u < 0.25] = np.inf
    if kind == "messy":
        var[(u >= 0.25) & (u < 0.4)] = 0.0
    leaves = tree.internal.n_children == 0
    if kind == "leaves unmeasured":
        var[leaves] = np.inf
    return var


def _values(rng, tree, var, k):
    """Measurements whose exact nodes (variance 0) agree: a consistent vector plus noise."""
    leaf = rng.normal(0, 20, (tree.n_leaves, k))
    true = np.stack([tree.to_internal(tree.aggregate(leaf[:, c])) for c in range(k)], axis=1)
    noise = rng.normal(0, 20, true.shape)
    return true + np.where(np.broadcast_to(var, true.shape) == 0.0, 0.0, noise)


def _kernel(tree, y, var):
    ti = tree.internal
    x, xv = np.empty_like(y), np.empty_like(var)
    BK.blue_2d(ti.parent, ti.n_children, ti.leafcount, y, var, x, xv)
    return x, xv


def _close(a, b):
    assert a.shape == b.shape
    fin = np.isfinite(b)
    assert np.array_equal(np.isfinite(a), fin) and np.array_equal(a[~fin], b[~fin])
    scale = 1.0 + np.abs(b[fin]).max(initial=0.0)
    np.testing.assert_allclose(a[fin], b[fin], rtol=1e-9, atol=1e-9 * scale)


# --------------------------------------------------------------------------------------
# BLUE
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,tree", SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("k,kv", [(1, 1), (3, 1), (3, 3)])
@pytest.mark.parametrize("kind", ["finite", "inf", "messy", "leaves unmeasured"])
def test_blue_small_equals_compiled_kernel(name, tree, k, kv, kind):
    rng = np.random.default_rng(abs(hash((name, k, kv, kind))) % 2**32)
    for _ in range(3):
        var = _variances(rng, tree, kv, kind)
        y = _values(rng, tree, var, k)
        x, xv = _blue_small.blue_small(tree, y, var)
        xk, xvk = _kernel(tree, y, var)
        _close(x, xk)
        _close(xv, xvk)


def _dense_gls(tree, y, var):
    """Brute force: minimise sum (y - A b)^2 / var over the leaf values b (A: node = sum
    of the leaves below), estimate A b, covariance A (A' W A)^-1 A'."""
    ti = tree.internal
    n, leaves = tree.n_nodes, np.flatnonzero(ti.n_children == 0)
    A = np.zeros((n, leaves.size))
    for j, leaf in enumerate(leaves):
        v = leaf
        while v >= 0:
            A[v, j] = 1.0
            v = ti.parent[v]
    W = np.diag(1.0 / var)
    M = np.linalg.inv(A.T @ W @ A)
    b = M @ A.T @ W @ y
    return A @ b, np.diag(A @ M @ A.T)


@pytest.mark.parametrize("name,tree", [s for s in SHAPES if s[1].n_nodes <= 200],
                         ids=[s[0] for s in SHAPES if s[1].n_nodes <= 200])
def test_blue_small_equals_dense_least_squares(name, tree):
    rng = np.random.default_rng(7)
    var = rng.uniform(0.2, 5.0, tree.n_nodes)
    y = rng.normal(0, 30, tree.n_nodes)
    x, xv = _blue_small.blue_small(tree, y[:, None], var[:, None])
    ref, refv = _dense_gls(tree, y, var)
    np.testing.assert_allclose(x[:, 0], ref, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(xv[:, 0], refv, rtol=1e-8, atol=1e-10)


def test_blue_small_hand_computed():
    """Root measured 10 (var 1) over two leaves 3 and 4 (var 1 each): the BLUE splits the
    residual 10 - 7 = 3 by thirds: root 10 - 1 = 9 (z = (10*2 + 7)/3 = 9), leaves 4 and 5;
    variances: root 2/3, each leaf 1 - 1/2 + 1/4 * 2/3 = 2/3."""
    tree = hierdp.Tree.from_parent([-1, 0, 0])
    x, xv = _blue_small.blue_small(tree, np.array([[10.0], [3.0], [4.0]]), np.ones((3, 1)))
    np.testing.assert_allclose(x[:, 0], [9.0, 4.0, 5.0])
    np.testing.assert_allclose(xv[:, 0], [2 / 3, 2 / 3, 2 / 3])


@pytest.mark.parametrize("name,tree", SHAPES, ids=[s[0] for s in SHAPES])
def test_blue_public_small_path_equals_kernel_path(name, tree, monkeypatch):
    """``blue()`` on a small tree takes the numpy path (spied; from ``SMALL_NUMPY_MIN``
    values) and agrees with the kernels it used before (``SMALL_NUMPY = False``), k = 1
    (blue_1d / blue_flat_1d) and k = 2."""
    rng = np.random.default_rng(11)
    calls = []
    real = _blue_small.blue_small
    monkeypatch.setattr(_blue_small, "blue_small", lambda *a: calls.append(1) or real(*a))
    for k in (1, 2):
        var = _variances(rng, tree, 1, "messy")[:, 0]
        y = _values(rng, tree, var[:, None], k)
        y = y[:, 0] if k == 1 else y
        pub_y, pub_v = y, var  # blue() works on internal-order arrays
        got = B.blue(tree, pub_y, pub_v)
        monkeypatch.setattr(B, "SMALL_NUMPY", False)
        want = B.blue(tree, pub_y, pub_v)
        monkeypatch.setattr(B, "SMALL_NUMPY", True)
        _close(np.asarray(got.values), np.asarray(want.values))
        _close(np.asarray(got.variance), np.asarray(want.variance))
    assert len(calls) == (tree.n_nodes >= B.SMALL_NUMPY_MIN) + (2 * tree.n_nodes >= B.SMALL_NUMPY_MIN)


@pytest.mark.parametrize("bad,msg", [("nan_y", "NaN or infinity"), ("neg_var", "non-negative")])
def test_blue_small_bad_input_one_line(bad, msg):
    tree = hierdp.Tree.complete(2, 6)  # 63 nodes: above blue.SMALL_NUMPY_MIN
    y, v = np.ones(tree.n_nodes), np.ones(tree.n_nodes)
    if bad == "nan_y":
        y[3] = np.nan
    else:
        v[2] = -1.0
    with pytest.raises(hierdp.errors.DataError, match=msg):
        B.blue(tree, y, v)


def test_blue_small_contradicting_exact_nodes_refused():
    tree = hierdp.Tree.from_parent(np.r_[-1, np.zeros(40, np.int64)])  # above blue.SMALL_NUMPY_MIN
    with pytest.raises(hierdp.errors.DataError, match="contradict"):
        B.blue(tree, np.r_[10.0, np.ones(40)], np.zeros(41))


def test_deep_trees_keep_the_kernel():
    assert not _blue_small.usable(hierdp.Tree.from_parent(np.arange(-1, _blue_small.MAX_CLASSES + 1)))
    assert _blue_small.usable(hierdp.Tree.from_parent(np.arange(-1, _blue_small.MAX_CLASSES - 1)))


# --------------------------------------------------------------------------------------
# keyed discrete Laplace
# --------------------------------------------------------------------------------------
SCALES = [Fraction(1, 1000), 0.05, Fraction(1, 3), 0.5, 1, 4, 10, 100, 1000, 12345.5]


def _compiled(p, key, draws, measurement, seg=None):
    seg = S.segment_length(0, p.s, p.t) if seg is None else seg
    old = jit.SMALL_INPUT
    jit.SMALL_INPUT = -1  # every kernel compiled
    try:
        return S._run_keyed(0, p.s, p.t, (0, 1, 1), draws, key, measurement, seg, numpy_path=False)
    finally:
        jit.SMALL_INPUT = old


@pytest.mark.parametrize("scale", SCALES, ids=str)
def test_keyed_laplace_numpy_equals_compiled_draw_for_draw(scale):
    key = NoiseKey.from_seed(2026)
    p = S.dlap_params(scale)
    rng = np.random.default_rng(5)
    for draws in (np.arange(3000, dtype=np.int64) + 17,               # a run (one OpenSSL call)
                  np.sort(rng.choice(10**9, 500, replace=False)),     # scattered indices
                  np.array([5], dtype=np.int64)):
        got = S.sample_discrete_laplace_keyed(p, key, draws, measurement=3)
        assert np.array_equal(got, _compiled(p, key, draws, 3))


@pytest.mark.parametrize("seg", [1, 2])
@pytest.mark.parametrize("scale", [0.5, 4, 1000], ids=str)
def test_keyed_laplace_short_segments_hand_over_to_the_kernel(seg, scale):
    """One or two words a draw: many draws use up their segment (the kernel goes on with
    the draw's extension stream); those are flagged and recomputed by the kernel."""
    key = NoiseKey.from_seed(9)
    p = S.dlap_params(scale)
    draws = np.arange(2000, dtype=np.int64)
    got = S._run_keyed(0, p.s, p.t, (0, 1, 1), draws, key, 1, seg)
    assert np.array_equal(got, _compiled(p, key, draws, 1, seg))


def test_keyed_laplace_common_path_covers_almost_every_draw():
    """The numpy passes settle all but a few draws (H >= 1 has probability e^-8 a draw);
    the rest go to the kernel, so the path is worth taking."""
    from hierdp.keyed_noise import KIND_SEGMENT, nonce_word, segment_words

    key = NoiseKey.from_seed(1)
    for scale in (1, 4, 100):
        p = S.dlap_params(scale)
        jbits, g0, *_ = S._core(p.s, p.t)
        seg = S.segment_length(0, p.s, p.t)
        n = 8000
        words = segment_words(key, nonce_word(KIND_SEGMENT, 0, 0), np.arange(n), seg)
        out, hard = _keyed_small.dlap_keyed_small(words, n, seg, jbits, g0, S._table(p.s, p.t, jbits, g0, 2))
        assert hard.sum() <= 0.002 * n


def test_keyed_laplace_small_path_is_taken(monkeypatch):
    calls = []
    real = _keyed_small.dlap_keyed_small
    monkeypatch.setattr(_keyed_small, "dlap_keyed_small", lambda *a: calls.append(1) or real(*a))
    S.sample_discrete_laplace_keyed(S.dlap_params(2), NoiseKey.from_seed(0), np.arange(100))
    assert calls
    calls.clear()
    S.sample_discrete_laplace_keyed(S.dlap_params(2), NoiseKey.from_seed(0), np.arange(S.SMALL_NUMPY_MIN - 1))
    assert not calls
    monkeypatch.setattr(jit, "SMALL_INPUT", 50)
    S.sample_discrete_laplace_keyed(S.dlap_params(2), NoiseKey.from_seed(0), np.arange(100))
    assert not calls


# --------------------------------------------------------------------------------------
# whole releases
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [10, 100, 1000])
@pytest.mark.parametrize("chain", [["blue"], ["blue", "nonneg", "round"]], ids=lambda c: "+".join(c))
def test_release_small_paths_equal_kernel_paths(n, chain, monkeypatch):
    tree = _italy_like(n)
    truth = tree.aggregate(np.random.default_rng(0).poisson(50, tree.n_leaves))
    got = hierdp.release(tree, truth, epsilon=1.0, postprocess=chain, seed=42)
    monkeypatch.setattr(S, "SMALL_NUMPY", False)
    monkeypatch.setattr(B, "SMALL_NUMPY", False)
    want = hierdp.release(tree, truth, epsilon=1.0, postprocess=chain, seed=42)
    assert np.array_equal(np.asarray(got.measurements.values), np.asarray(want.measurements.values))
    g, w = np.asarray(got.estimate.values, float), np.asarray(want.estimate.values, float)
    if chain[-1] == "round":
        assert np.array_equal(g, w) or np.abs(g - w).max() <= 1  # ties in rounding move by one at most
    else:
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)


def test_kernels_of_per_cell_work_are_sized_by_node_cells_not_nodes(monkeypatch):
    """A tree of 1,000 nodes with 32 cells is 32,000 node-cells, above ``SMALL_INPUT``: the
    remainder ``round``, GMC and the global ``nonneg`` run their compiled kernels there, as
    BLUE does (sized by nodes, they ran interpreted: ~60x slower warm)."""
    from hierdp.postprocessors.gmc import gmc
    from hierdp.postprocessors.nonneg import nonneg
    from hierdp.postprocessors.rounding import controlled_round

    rng = np.random.default_rng(2)
    tree = hierdp.Tree.from_parent(random_parent(rng, 1000))
    y = tree.to_internal(tree.aggregate(rng.poisson(3.0, (tree.n_leaves, 32)).astype(float)))
    assert tree.n_nodes <= jit.SMALL_INPUT < y.size

    real = jit.interpreted
    per_cell = {"round_top_down_2d", "gmc_39_2d", "blue_2d", "nnls_step_2d", "nnls_finish_2d"}

    def refuse(kernel):  # the tree's own structure (per node) may still run interpreted
        assert kernel.py_func.__name__ not in per_cell, f"{kernel.py_func.__name__} ran interpreted"
        return real(kernel)

    monkeypatch.setattr(jit, "interpreted", refuse)
    # consistent non-negative integer counts: every step gives them back unchanged
    assert (controlled_round(tree, y) == y).all()
    np.testing.assert_allclose(gmc(tree, y), y, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(nonneg(tree, y)[0], y, rtol=1e-9, atol=1e-7)
