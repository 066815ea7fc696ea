"""Noise keyed per node (hierdp.keyed_noise, issue 30 item 2): the keystream construction,
the key's handling, exactness of the keyed samplers (against the exact pmf, with and
without forced extensions) and invariance of every node's noise to splits, order and threads."""

from __future__ import annotations

import copy
import hashlib
import math
import pickle
import struct
import warnings

import numpy as np
import pytest

import hierdp
import hierdp.mechanisms._keyed_kernels as KK
import hierdp.mechanisms._sampler_kernel as SK
import hierdp.mechanisms._samplers as S
from hierdp import keyed_noise as K
from hierdp._kernels.jit import interpreted
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.mechanisms.discrete_gaussian import DiscreteGaussian
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.mechanisms.truncated_laplace import TruncatedLaplace
from hierdp.plans import per_level
from hierdp.rng import SeededRandom, _WordSource, chacha20_fill
from tests.test_samplers import _chi2_by_cdf, _dg_cdf, _dlap_cdf

N = 1_000_000
KEY = K.NoiseKey.from_seed(12345)


def _openssl_words(key: K.NoiseKey, nonce: bytes, counter: int, n: int) -> np.ndarray:
    return chacha20_fill(key._key, nonce, counter, np.empty(n, dtype=np.uint64))


# --------------------------------------------------------------------------------------
# the keystream
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", ["compiled", "interpreted"])
def test_chacha_block_is_rfc8439_as_openssl_computes_it(run):
    fn = K.chacha_block if run == "compiled" else interpreted(K.chacha_block)
    # RFC 8439 §2.3.2 test vector: key 00..1f, nonce 00:00:00:09:00:00:00:4a:00:00:00:00, counter 1
    key = K.NoiseKey(bytes(range(32)), secure=False)
    nonce = bytes.fromhex("000000090000004a00000000")
    n0, n1, n2 = struct.unpack("<III", nonce)
    out = np.zeros(8, dtype=np.int64)
    fn(key._words32, n0, n1, n2, 1, out, 0)
    assert out.view(np.uint64).astype("<u8").tobytes().hex().startswith("10f1e7e4d13b5915500fdd1fa32071c4")
    for counter, (a, b, c) in [(0, (1, 2, 3)), (2**32 - 1, (0xFFFFFFFF, 0, 7)), (12345, (K.nonce_word(2, 5), 77, 0))]:
        fn(KEY._words32, a, b, c, counter, out, 0)
        ref = _openssl_words(KEY, struct.pack("<III", a, b, c), counter, 8)
        np.testing.assert_array_equal(out.view(np.uint64), ref)


def test_segments_are_the_keystream_at_d_times_w_whatever_the_runs():
    n0 = K.nonce_word(K.KIND_SEGMENT, 3)
    base = _openssl_words(KEY, struct.pack("<III", n0, 0, 0), 0, 4000)
    rng = np.random.default_rng(0)
    for seg in (1, 2, 3, 4):
        draws = rng.permutation(np.r_[np.arange(0, 600), np.arange(700, 705), [999, 3]])[: 900]
        w = K.segment_words(KEY, n0, draws, seg)  # long runs by OpenSSL, short ones compiled
        ref = np.concatenate([base[d * seg:(d + 1) * seg] for d in draws])
        np.testing.assert_array_equal(w, ref)
    # across a change of the nonce's high part: block 2**32 starts the nonce (n0, 1, 0)
    d0 = (1 << 34) - 300  # seg 2: words 2**35 - 600 .. 2**35 + 600
    long_run = K.segment_words(KEY, n0, np.arange(d0, d0 + 600), 2)
    short = np.concatenate([K.segment_words(KEY, n0, np.array([d]), 2) for d in (d0, d0 + 299, d0 + 300, d0 + 599)])
    np.testing.assert_array_equal(short, long_run[[0, 1, 598, 599, 600, 601, 1198, 1199]])
    hi = _openssl_words(KEY, struct.pack("<III", n0, 1, 0), 0, 8)
    np.testing.assert_array_equal(long_run[600:608], hi)


def test_keyed_stream_takes_whole_blocks_of_its_own_nonce():
    s = K.KeyedStream(KEY, K.nonce_word(K.KIND_NODE, 2), 2**40 + 5)
    a, b = s.words(3), s.words(9)
    ref = _openssl_words(KEY, struct.pack("<IQ", K.nonce_word(K.KIND_NODE, 2), 2**40 + 5), 0, 24)
    np.testing.assert_array_equal(a, ref[:3])
    np.testing.assert_array_equal(b, ref[8:17])
    assert s.block == 3


def test_nonce_words_keep_kinds_measurements_and_attempts_apart():
    words = {K.nonce_word(kind, m, a) for kind in (1, 2, 3) for m in (0, 1, 2**24 - 1) for a in (0, 1, 63)}
    assert len(words) == 27
    with pytest.raises(ValueError, match="measurement id"):
        K.nonce_word(1, 2**24)
    with pytest.raises(ValueError, match="attempt"):
        K.nonce_word(1, 0, 64)


# --------------------------------------------------------------------------------------
# the key
# --------------------------------------------------------------------------------------
def test_key_from_seed_is_sha256_of_tag_and_seed_and_marked_not_secure():
    k = K.NoiseKey.from_seed(7)
    want = hashlib.sha256(b"hierdp noise key from seed, v1\x00" + (7).to_bytes(32, "little")).digest()
    assert k._key == want and not k.secure and k.seed == 7
    assert K.NoiseKey.from_seed(8)._key != want
    with pytest.raises(ValueError, match="seed"):
        K.NoiseKey.from_seed(-1)


def test_fresh_keys_are_secure_different_and_never_shown():
    a, b = K.NoiseKey.fresh(), K.NoiseKey.fresh()
    assert a.secure and a.seed is None and a._key != b._key
    for shown in (repr(a), str(a), repr(a.export()), repr(K.KeyedStream(a, 1, 0))):
        assert a._key.hex() not in shown and "secure" in shown


def test_keys_pickle_and_copy_only_when_exported():
    k = K.NoiseKey.fresh()
    for attempt in (lambda: pickle.dumps(k), lambda: copy.copy(k), lambda: copy.deepcopy(k),
                    lambda: pickle.dumps(K.KeyedStream(k, 1, 0))):
        with pytest.raises(TypeError, match="export|not pickled"):
            attempt()
    back = pickle.loads(pickle.dumps(k.export())).key()
    assert back._key == k._key and back.secure
    d = np.arange(50)
    p = S.dlap_params(2.0)
    np.testing.assert_array_equal(S.sample_discrete_laplace_keyed(p, back, d), S.sample_discrete_laplace_keyed(p, k, d))


def test_a_key_from_a_random_source_follows_its_security():
    k = K.NoiseKey.from_rng(SeededRandom(3))
    assert not k.secure and k.seed == 3 and k._key == K.NoiseKey.from_rng(SeededRandom(3))._key
    assert K.NoiseKey.from_rng(hierdp.rng.SecureRandom()).secure


# --------------------------------------------------------------------------------------
# exactness of keyed draws
# --------------------------------------------------------------------------------------
def _extension_rate(gauss, a_num, a_den, dg, seg, n, zig=None):
    """Share of draws that use up a segment of ``seg`` words (the kernel on its own)."""
    jbits, g0, gint, fnum, fden = S._core(a_num, a_den)
    cb = S._table(a_num, a_den, jbits, g0, S._TABLE_WORDS)
    zarrs = S._NO_ZIG if zig is None else (zig.zi, zig.zf, zig.thr, zig.alias, zig.hinv)
    words = SeededRandom(5).words(n * seg).view(np.int64)
    out = np.empty(n, np.int64)
    st = np.zeros(SK._NSTATE, np.int64)
    i = ext = 0
    while i < n:
        st[:] = 0
        st[0] = SK._ZA if gauss == 2 else SK._YB
        st[16] = i * seg
        i, status = SK._fill(gauss, out, i, jbits, g0, gint, fnum, fden, dg[0], dg[1], 1.0 / dg[2], S._ACCEPT_FUZZ,
                            True, cb, words, seg, st, *zarrs)
        if status == 0:
            break
        ext += 1
        i += 1
    return ext / n


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5, 1e4, 3e7])
def test_keyed_discrete_laplace_matches_pmf(scale):
    p = S.dlap_params(scale)
    q = math.exp(-p.s / p.t)
    x = S.sample_discrete_laplace_keyed(p, K.NoiseKey.from_seed(int(scale * 10)), np.arange(N))
    assert _chi2_by_cdf(x, _dlap_cdf(q), int(x.min()), int(x.max())) > 1e-4
    p0 = (1 - q) / (1 + q)
    assert abs(np.mean(x == 0) - p0) < 6 * math.sqrt(p0 * (1 - p0) / N)


@pytest.mark.parametrize("method", ["blocks", "cks"])
@pytest.mark.parametrize("sigma2", [0.25, 1.0, 30.25, 1024.0, 1e10])
def test_keyed_discrete_gaussian_matches_pmf(sigma2, method):
    p = S.dgauss_params(sigma2)
    s2 = float(p.sigma2)
    x = S.sample_discrete_gaussian_keyed(p, K.NoiseKey.from_seed(int(sigma2) + 5), np.arange(N), method=method)
    if sigma2 > 1e6:
        from scipy import stats

        sd = math.sqrt(s2)

        def cdf(y):
            return stats.norm.cdf((int(y) + 0.5) / sd)
    else:
        half = int(40 * math.sqrt(s2)) + 5
        cdf = _dg_cdf(s2, -half, half)
    assert _chi2_by_cdf(x, cdf, int(x.min()), int(x.max())) > 1e-4
    assert x.var() == pytest.approx(S.discrete_gaussian_variance(p), rel=6 * math.sqrt(2 / N) + 1e-3)


def test_segments_run_out_for_a_sizeable_share_with_one_word():
    """What the next test relies on: one word per segment sends many draws to their extension."""
    p = S.dlap_params(1 / 0.5)
    assert _extension_rate(0, p.s, p.t, (0, 1, 1), 1, 20_000) > 0.05
    g = S.dgauss_params(1.0)
    z = S._zig(g.t, g.mm, g.bb)
    assert _extension_rate(2, z.a.numerator, z.a.denominator, (g.mm, g.bb, g.den), 1, 20_000, z) > 0.05


@pytest.mark.parametrize("fast", [True, False])
def test_draws_continued_on_their_extension_still_match_pmf(monkeypatch, fast):
    """Segments of one word: a large share of the draws resume on their extension stream
    (fast path handed over to the slow one mid-digit included): still the exact law."""
    monkeypatch.setattr(S, "_SEG_WORDS", 1)
    monkeypatch.setattr(S, "_FAST_PATH", fast)
    for scale in (2.0, 25.0):
        p = S.dlap_params(scale)
        q = math.exp(-p.s / p.t)
        x = S.sample_discrete_laplace_keyed(p, KEY, np.arange(400_000))
        assert _chi2_by_cdf(x, _dlap_cdf(q), int(x.min()), int(x.max())) > 1e-4
    for sigma2 in (1.0, 1024.0):
        g = S.dgauss_params(sigma2)
        x = S.sample_discrete_gaussian_keyed(g, KEY, np.arange(400_000))
        half = int(40 * math.sqrt(float(g.sigma2))) + 5
        assert _chi2_by_cdf(x, _dg_cdf(float(g.sigma2), -half, half), int(x.min()), int(x.max())) > 1e-4


@pytest.mark.parametrize("method", ["blocks", "cks"])
def test_keyed_exact_acceptance_path_matches_pmf(monkeypatch, method):
    """Most candidates decided by the exact path, its extra bits from the draw's own
    extension stream: the exact law, and the same values whatever the split."""
    monkeypatch.setattr(S, "_ACCEPT_FUZZ", 0.3)
    monkeypatch.setattr(S, "_SEG_WORDS", 2)
    p = S.dgauss_params(2.25)
    d = np.arange(6000)
    x = S.sample_discrete_gaussian_keyed(p, KEY, d, method=method)
    assert _chi2_by_cdf(x, _dg_cdf(float(p.sigma2), -30, 30), int(x.min()), int(x.max()), n_bins=12) > 1e-4
    part = S.sample_discrete_gaussian_keyed(p, KEY, d[::-7].copy(), method=method)
    np.testing.assert_array_equal(part, x[::-7])


# --------------------------------------------------------------------------------------
# a draw's value depends on its identity only
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seg", [None, 1])
def test_each_draw_is_the_same_whatever_the_other_draws_order_chunks_and_threads(monkeypatch, seg):
    monkeypatch.setattr(S, "_SEG_WORDS", seg)
    monkeypatch.setattr(S, "_CHUNK_DRAWS", 5000)
    p = S.dlap_params(3.0)
    g = S.dgauss_params(40.0)
    rng = np.random.default_rng(1)
    d = np.arange(10**9, 10**9 + 60_000)  # compiled, 12 chunks
    old = hierdp.set_threads(1)
    try:
        ref_l = S.sample_discrete_laplace_keyed(p, KEY, d)
        ref_g = S.sample_discrete_gaussian_keyed(g, KEY, d)
        for threads in (1, 2):
            hierdp.set_threads(threads)
            perm = rng.permutation(d.size)
            np.testing.assert_array_equal(S.sample_discrete_laplace_keyed(p, KEY, d[perm]), ref_l[perm])
            np.testing.assert_array_equal(S.sample_discrete_gaussian_keyed(g, KEY, d[perm]), ref_g[perm])
            sub = np.sort(rng.choice(d.size, 700, replace=False))  # interpreted (small input)
            np.testing.assert_array_equal(S.sample_discrete_laplace_keyed(p, KEY, d[sub]), ref_l[sub])
            np.testing.assert_array_equal(S.sample_discrete_gaussian_keyed(g, KEY, d[sub]), ref_g[sub])
    finally:
        hierdp.set_threads(old)
    # another key, measurement or attempt: other noise
    assert not np.array_equal(S.sample_discrete_laplace_keyed(p, K.NoiseKey.from_seed(1), d[:500]), ref_l[:500])
    assert not np.array_equal(S.sample_discrete_laplace_keyed(p, KEY, d[:500], measurement=1), ref_l[:500])
    assert not np.array_equal(S.sample_discrete_laplace_keyed(p, KEY, d[:500], attempt=1), ref_l[:500])


# --------------------------------------------------------------------------------------
# mechanisms
# --------------------------------------------------------------------------------------
SENS = Sensitivity()


@pytest.mark.parametrize("mech,budget", [(DiscreteLaplace(), 0.7), (DiscreteGaussian(), 0.2), (Laplace(), 0.7),
                                         (Gaussian(), 0.2), (TruncatedLaplace(delta=1e-3), 0.7)])
def test_mechanisms_key_noise_per_node_and_cell(mech, budget):
    ids = np.arange(3000, 3000 + 800) * 3
    vals = np.zeros((800, 4), dtype=np.int64)
    out = mech.sample_keyed(vals, budget, SENS, KEY, ids)
    assert out.shape == vals.shape
    perm = np.random.default_rng(2).permutation(800)[:300]
    np.testing.assert_array_equal(mech.sample_keyed(vals[perm], budget, SENS, KEY, ids[perm]), out[perm])
    # one column: node g's cell 0 is draw g, not draw 4g
    one = mech.sample_keyed(vals[:, 0], budget, SENS, KEY, ids)
    assert one.shape == (800,) and not np.array_equal(one, out[:, 0])
    noise = out.astype(np.float64).ravel()
    assert noise.var() == pytest.approx(mech.variance(budget, SENS), rel=0.15)
    if isinstance(mech, TruncatedLaplace):
        assert np.abs(out).max() <= mech.bound(budget, SENS)


def test_truncated_laplace_redraws_a_rejected_draw_from_its_own_next_attempt():
    mech = TruncatedLaplace(delta=0.2)  # N small: many rejections
    n = mech.bound(0.3, SENS)
    ids = np.arange(20_000)
    out = mech.sample_keyed(np.zeros(ids.size, dtype=np.int64), 0.3, SENS, KEY, ids)
    assert np.abs(out).max() <= n
    p = mech.params(0.3, SENS)[0]
    first = S.sample_discrete_laplace_keyed(p, KEY, ids)
    kept = np.abs(first) <= n
    assert 0.01 < 1 - kept.mean()
    np.testing.assert_array_equal(out[kept], first[kept])
    second = S.sample_discrete_laplace_keyed(p, KEY, ids[~kept], attempt=1)
    ok2 = np.abs(second) <= n
    np.testing.assert_array_equal(out[~kept][ok2], second[ok2])
    q = math.exp(-p.s / p.t)  # the conditional law on [-n, n]: P(y) ∝ q^|y|
    ys = np.arange(-n, n + 1)
    w = q ** np.abs(ys)
    expected = w / w.sum() * ids.size
    obs = np.array([(out == y).sum() for y in ys])
    from scipy import stats

    assert stats.chisquare(obs, expected).pvalue > 1e-4


class _Plugin(Mechanism):
    """A third-party mechanism with only ``sample``: uniform noise in {0, ..., 9} per value."""

    name = "plugin_uniform"

    def variance(self, budget, sensitivity):
        return 8.25

    def sample(self, values, budget, sensitivity, rng):
        v = np.asarray(values)
        return v + rng.integers(10, v.size).reshape(v.shape)


def test_a_plugin_mechanism_is_sampled_node_by_node_on_the_nodes_own_stream():
    mech = _Plugin()
    ids = np.array([5, 9, 2, 1000])
    vals = np.zeros((4, 3), dtype=np.int64)
    out = mech.sample_keyed(vals, 1.0, SENS, KEY, ids, measurement=4)
    for r, g in enumerate(ids):
        own = K.KeyedStream(KEY, K.nonce_word(K.KIND_NODE, 4), int(g))
        np.testing.assert_array_equal(out[r], own.integers(10, 3))
    np.testing.assert_array_equal(mech.sample_keyed(vals[[3, 1]], 1.0, SENS, KEY, ids[[3, 1]], measurement=4),
                                  out[[3, 1]])


def test_keyed_sampling_refuses_mismatched_ids():
    with pytest.raises(ValueError, match="one integer node identity per row"):
        DiscreteLaplace().sample_keyed(np.zeros(3, dtype=np.int64), 1.0, SENS, KEY, np.arange(4))
    with pytest.raises(ValueError, match="non-negative"):
        DiscreteLaplace().sample_keyed(np.zeros(2, dtype=np.int64), 1.0, SENS, KEY, np.array([0, -1]))


# --------------------------------------------------------------------------------------
# plans and releases
# --------------------------------------------------------------------------------------
def _random_tree(n_leaves: int, seed: int) -> hierdp.Tree:
    rng = np.random.default_rng(seed)
    parent = [-1]
    frontier = [0]
    while len(parent) < n_leaves * 1.6:
        p = frontier.pop(0) if frontier else int(rng.integers(len(parent)))
        for _ in range(int(rng.integers(1, 6))):
            parent.append(p)
            frontier.append(len(parent) - 1)
    return hierdp.Tree.from_parent(np.array(parent))


@pytest.mark.parametrize("mechanism,budget_unit", [("discrete_laplace", "epsilon"), ("gaussian", "rho")])
def test_measuring_a_partition_part_by_part_gives_the_whole_measurement(mechanism, budget_unit):
    tree = _random_tree(1300, 0)
    assert tree.n_nodes >= 2000
    rng = np.random.default_rng(3)
    leaf = rng.integers(0, 20, size=(tree.n_leaves, 16))
    vals = tree.to_internal(tree.aggregate(leaf))
    mech = per_level.resolve_mechanism(mechanism)
    budgets = {name: 0.1 * (d + 1) for d, name in enumerate(tree.level_names)}
    budgets[tree.level_names[1]] = 0.0  # an unmeasured level
    old = hierdp.set_threads(1)
    try:
        whole, var, _ = per_level.measure(tree, vals, budgets, mech, SENS, KEY)
        parts = rng.integers(0, 7, size=tree.n_nodes)
        for threads in (1, 2):
            hierdp.set_threads(threads)
            got = np.full(whole.shape, -999, dtype=whole.dtype)
            got_var = np.full(tree.n_nodes, -1.0)
            for part in rng.permutation(7):
                ids = rng.permutation(np.flatnonzero(parts == part))
                got[ids], got_var[ids] = per_level.measure_nodes(tree, vals[ids], ids, budgets, mech, SENS, KEY)
            np.testing.assert_array_equal(got, whole)
            np.testing.assert_array_equal(got_var, var)
    finally:
        hierdp.set_threads(old)
    noise = (whole - vals)[np.isfinite(var)]
    assert not np.array_equal(noise, np.zeros_like(noise))


def test_a_subtree_measured_with_its_node_ids_gets_the_whole_trees_noise():
    tree = hierdp.Tree.complete(fanout=3, height=5)
    vals = tree.to_internal(tree.aggregate(np.arange(tree.n_leaves) % 7))
    mech = DiscreteLaplace()
    budgets = dict.fromkeys(tree.level_names, 0.5)
    whole, _, _ = per_level.measure(tree, vals, budgets, mech, SENS, KEY)
    # the subtree under the root's second child, as its own tree (internal order of its own)
    par = tree.internal.parent
    root_child = np.flatnonzero(par == 0)[1]
    members = [root_child]
    for u in range(tree.n_nodes):
        if u != root_child and par[u] >= 0 and par[u] in set(members):
            members.append(u)
    members = np.array(sorted(set(members)))
    # members are in the whole tree's internal order, parents before children
    pos = {int(u): i for i, u in enumerate(members)}
    sub_parent = np.array([-1 if u == root_child else pos[int(par[u])] for u in members])
    sub = hierdp.Tree.from_parent(sub_parent, level_names=tree.level_names[1:])
    node_ids = members[sub.to_internal(np.arange(sub.n_nodes))]  # whole-tree id of each subtree node, internal order
    assert sorted(node_ids) == list(members)
    got, _, _ = per_level.measure(sub, vals[node_ids], budgets, mech, SENS, KEY, node_ids=node_ids)
    np.testing.assert_array_equal(got, whole[node_ids])


def _release(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return hierdp.release(**kw)


def test_a_seeded_release_measures_with_the_key_of_its_seed():
    tree = hierdp.Tree.complete(fanout=4, height=4)
    x = tree.aggregate(np.arange(tree.n_leaves) % 5)
    r = _release(tree=tree, values=x, epsilon=1.0, seed=11, postprocess=[])
    alloc = {name: 0.25 for name in tree.level_names}
    noisy, _, _ = per_level.measure(tree, tree.to_internal(x), alloc, DiscreteLaplace(), SENS,
                                    K.NoiseKey.from_seed(11))
    np.testing.assert_array_equal(r.measurements.values, tree.to_external(noisy))
    assert not np.array_equal(r.measurements.values,
                              _release(tree=tree, values=x, epsilon=1.0, seed=12, postprocess=[]).measurements.values)


def test_the_default_release_key_is_fresh_and_secure(monkeypatch):
    made = []
    orig = K.NoiseKey.fresh.__func__

    def spy(cls):
        made.append(orig(cls))
        return made[-1]

    monkeypatch.setattr(K.NoiseKey, "fresh", classmethod(spy))
    tree = hierdp.Tree.complete(fanout=2, height=3)
    x = tree.aggregate(np.arange(4))
    a = hierdp.release(tree, x, epsilon=1.0)
    b = hierdp.release(tree, x, epsilon=1.0)
    assert len(made) == 2 and all(k.secure for k in made) and made[0]._key != made[1]._key
    assert a.ledger.secure_randomness and a.ledger.for_publication
    assert not np.array_equal(a.measurements.values, b.measurements.values)


def test_marginals_key_each_marginal_separately():
    tree = hierdp.Tree.complete(fanout=2, height=3)
    leaf = np.zeros((tree.n_leaves, 4), dtype=np.int64)
    x = tree.aggregate(leaf)
    plan = {"name": "marginals", "cells": {"a": 2, "b": 2}, "strategy": {("a",): 0.5, ("b",): 0.5}}
    r1 = _release(tree=tree, values=x, epsilon=1.0, seed=3, plan=plan)
    r2 = _release(tree=tree, values=x, epsilon=1.0, seed=3, plan=plan)
    np.testing.assert_array_equal(r1.values, r2.values)
    # the two marginals' noise differs (measurement ids 16 and 17 on the same nodes)
    mech = DiscreteLaplace()
    ids = np.arange(tree.n_nodes)
    a = mech.sample_keyed(np.zeros((tree.n_nodes, 2), dtype=np.int64), 0.5, SENS, KEY, ids, 16)
    b = mech.sample_keyed(np.zeros((tree.n_nodes, 2), dtype=np.int64), 0.5, SENS, KEY, ids, 17)
    assert not np.array_equal(a, b)


class _Concatenated(_WordSource):
    """A word stream: ``head`` first, then ``tail`` (served in order, nothing skipped)."""

    def __init__(self, head: np.ndarray, tail: np.ndarray) -> None:
        self._words = np.concatenate((head, tail)).astype(np.uint64)
        self._pos = 0

    def words(self, size: int) -> np.ndarray:
        out = self._words[self._pos:self._pos + size]
        assert out.size == size, "the reference stream ran out"
        self._pos += size
        return out.copy()


@pytest.mark.parametrize("seg, scale", [(1, 1e5), (2, 1e9)])
def test_a_draw_continues_on_its_extension_exactly_where_its_segment_stopped(monkeypatch, seg, scale):
    """Brute-force reference: a keyed draw is the plain stream sampler run on the draw's
    segment words followed by its extension stream (kind 2), so a draw that runs out of
    its segment resumes mid-draw instead of starting again (a restart would be a biased
    rejection of long draws, too rare for the pmf tests to see)."""
    monkeypatch.setattr(S, "_SEG_WORDS", seg)
    monkeypatch.setattr(S, "_FAST_PATH", False)
    p = S.dlap_params(scale)  # ~J + 1 coins of ~4.3 bits each (J = 20, 30): the segment runs out
    draws = np.arange(400, dtype=np.int64)
    got = S.sample_discrete_laplace_keyed(p, KEY, draws)
    w = S.segment_length(0, p.s, p.t)
    extended = 0
    for d in draws:
        head = K.segment_words(KEY, K.nonce_word(K.KIND_SEGMENT, 0), np.array([d]), w)
        tail = K.KeyedStream(KEY, K.nonce_word(K.KIND_EXTENSION, 0), int(d)).words(1 << 12)
        want = S.sample_discrete_laplace(p, 1, _Concatenated(head, tail))[0]
        assert got[d] == want, f"draw {d}"
        # a draw reached its extension iff another tail changes its value (up to coincidence)
        extended += S.sample_discrete_laplace(p, 1, _Concatenated(head, tail[::-1].copy()))[0] != want
    assert extended > 20  # the comparison covered many draws that went on to their extension


# --------------------------------------------------------------------------------------
# the common path and the streamed segments (issue 30 item 4: speed, the same values)
# --------------------------------------------------------------------------------------
def _machine_values(gauss, p, z, words, seg, n):
    """Reference: every draw run by the state machine :func:`SK._fill` alone from its start on
    its segment (``None`` where it leaves its segment: those need the extension)."""
    if gauss == 0:
        jbits, g0, gint, fnum, fden = S._core(p.s, p.t)
        cb, dg, zarrs = S._table(p.s, p.t, jbits, g0, S._TABLE_WORDS), (0, 1, 1), S._NO_ZIG
    else:
        jbits, g0, gint, fnum, fden = S._core(z.a.numerator, z.a.denominator)
        cb = S._table(z.a.numerator, z.a.denominator, jbits, g0, S._TABLE_WORDS)
        dg, zarrs = (p.mm, p.bb, p.den), (z.zi, z.zf, z.thr, z.alias, z.hinv)
    out = np.zeros(n, np.int64)
    got: list[int | None] = []
    for i in range(n):
        st = np.zeros(SK._NSTATE, np.int64)
        st[0] = SK._ZA if gauss == 2 else SK._YB
        st[16] = i * seg
        j, status = SK._fill(gauss, out, i, jbits, g0, gint, fnum, fden, dg[0], dg[1], 1.0 / dg[2], S._ACCEPT_FUZZ,
                            True, cb, words, seg, st, *zarrs)
        got.append(int(out[i]) if j > i and status in (0, 1) else None)
    return got


@pytest.mark.parametrize("gauss,param", [(0, 0.05), (0, 1.0), (0, 4.0), (0, 9.0), (2, 1.0), (2, 10.0), (2, 300.0)])
def test_common_path_kernels_give_the_state_machines_values_draw_for_draw(gauss, param):
    """The straight-line kernels (:func:`KK._dlap_common`, :func:`KK._dg_common`) against the
    state machine run draw by draw on the same segments: they stop exactly at draws the
    machine does not finish the common way, and give its value for every draw before;
    restarted after each stop, they cover ~all draws (so the comparison is not vacuous)."""
    n = 1500
    if gauss == 0:
        p, z = S.dlap_params(1 / param), None
        seg = S.segment_length(0, p.s, p.t)
        jbits = S._core(p.s, p.t)[0]
        cb = S._table(p.s, p.t, jbits, S._core(p.s, p.t)[1], S._TABLE_WORDS)
    else:
        p = S.dgauss_params(param * param)
        z = S._zig(p.t, p.mm, p.bb)
        seg = S._zig_segment_length(z)
    words = K.segment_words(KEY, K.nonce_word(K.KIND_SEGMENT, 9), np.arange(n), seg).view(np.int64)
    ref = _machine_values(gauss, p, z, words, seg, n)
    tables = [(S._NO_BOUNDS, S._NO_BOUNDS)]
    if z is not None and z.zi[3] == 1:
        tables.append(z.bounds(S._ACCEPT_FUZZ))
    if gauss == 0:  # without and (J <= 1) with the rounds' outcomes tabulated
        codes = S._round_codes(p.s, p.t)
        assert (codes.size > 0) == (param >= 4.0)
        tables = [S._NO_CODES] + ([codes] if codes.size else [])
    for run in (lambda f: f, interpreted):
        for lo, hi in tables if gauss else [(c, None) for c in tables]:
            out = np.full(n, -(1 << 62), np.int64)
            i = done = 0
            while i < n:
                if gauss == 0:
                    j = run(KK._dlap_common)(out, i, words, seg, jbits, cb, lo)
                else:
                    j = run(KK._dg_common)(out, i, words, seg, z.zi, z.thr, z.alias, z.hinv, float(z.zf[0]),
                                          S._ACCEPT_FUZZ, lo, hi)
                assert [int(v) for v in out[i:j]] == ref[i:j]
                done += j - i
                i = j + 1  # a draw the common path leaves: left to the state machine
            assert done >= 0.99 * n


@pytest.mark.parametrize("seg", [None, 1])
def test_keyed_draws_are_the_same_with_and_without_the_common_path(monkeypatch, seg):
    """The whole keyed sampler (compiled, and interpreted for a small request) with the
    common path against the state machine only (``COMMON_PATH = False``), at census
    parameters and with one-word segments (most draws leave the common path)."""
    monkeypatch.setattr(S, "_SEG_WORDS", seg)
    d = np.arange(3 * 10**9, 3 * 10**9 + 40_000)
    for sub in (d, d[::37].copy()):
        for eps in (0.1, 1.0, 4.0):
            p = S.dlap_params(1 / eps)
            monkeypatch.setattr(S, "COMMON_PATH", True)
            a = S.sample_discrete_laplace_keyed(p, KEY, sub)
            monkeypatch.setattr(S, "COMMON_PATH", False)
            np.testing.assert_array_equal(a, S.sample_discrete_laplace_keyed(p, KEY, sub))
        for sigma in (1.0, 32.0, 300.0):
            g = S.dgauss_params(sigma * sigma)
            monkeypatch.setattr(S, "COMMON_PATH", True)
            a = S.sample_discrete_gaussian_keyed(g, KEY, sub)
            monkeypatch.setattr(S, "COMMON_PATH", False)
            np.testing.assert_array_equal(a, S.sample_discrete_gaussian_keyed(g, KEY, sub))


def test_streamed_segments_are_the_segment_words_piece_by_piece():
    n0 = K.nonce_word(K.KIND_SEGMENT, 5)
    for seg, d0 in ((3, 7), (4, 0), (2, 12_345), (1, 3)):
        n = 3000
        ref = K.segment_words(KEY, n0, np.arange(d0, d0 + n), seg)
        s = K.segment_stream(KEY, n0, d0, n, seg)
        got = np.empty(n * seg, np.uint64)
        cuts = [0, 1, 17, 600, 601, n * seg]
        for a, b in zip(cuts[:-1], cuts[1:]):
            s.next_into(got[a:b])
        np.testing.assert_array_equal(got, ref)
    # no single context across a change of the nonce's high part, nor for a short run
    assert K.segment_stream(KEY, n0, (1 << 34) - 300, 600, 2) is None
    assert K.segment_stream(KEY, n0, 0, 10, 2) is None


def test_streamed_pieces_resume_a_stopped_draw_where_it_stopped(monkeypatch):
    """Consecutive draws, segments streamed in tiny pieces, most candidates stopping for the
    exact acceptance (status 4) and resumed: the same values as the same draws in another
    order (their segments computed per run by :func:`K.segment_words`)."""
    monkeypatch.setattr(S, "_PIECE_WORDS", 40)
    monkeypatch.setattr(S, "_ACCEPT_FUZZ", 0.3)
    monkeypatch.setattr(S, "_CHUNK_DRAWS", 2500)
    p = S.dgauss_params(2.25)
    d = np.arange(5 * 10**8, 5 * 10**8 + 6000)
    x = S.sample_discrete_gaussian_keyed(p, KEY, d)
    perm = np.random.default_rng(3).permutation(d.size)
    np.testing.assert_array_equal(S.sample_discrete_gaussian_keyed(p, KEY, d[perm]), x[perm])
    for eps in (0.5, 4.0):
        q = S.dlap_params(1 / eps)
        y = S.sample_discrete_laplace_keyed(q, KEY, d)
        np.testing.assert_array_equal(S.sample_discrete_laplace_keyed(q, KEY, d[perm]), y[perm])


def _chi2_counts(counts: np.ndarray, lo: int, pmf) -> float:
    """Chi-square p-value of a histogram of integer draws (``counts[y - lo]``) against ``pmf``,
    bins merged until each expects >= 50."""
    from scipy import stats

    n = counts.sum()
    ys = np.arange(lo, lo + counts.size)
    probs = np.array([pmf(int(y)) for y in ys])
    probs = probs / probs.sum()  # the range covers all but a tail below 1e-17 (the caller checks no draw is in it)
    obs, exp, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(counts, probs * n):
        acc_o += o
        acc_e += e
        if acc_e >= 50:
            obs.append(acc_o)
            exp.append(acc_e)
            acc_o = acc_e = 0.0
    obs[-1] += acc_o
    exp[-1] += acc_e
    obs, exp = np.array(obs), np.array(exp)
    return float(stats.chi2.sf(((obs - exp) ** 2 / exp).sum(), obs.size - 1))


@pytest.mark.slow
@pytest.mark.parametrize("kind,param", [("dlap", 4.0), ("dgauss", 1.0)])
def test_keyed_samplers_match_the_exact_pmf_at_1e8_draws(kind, param):
    """10^8 keyed draws (the common path and the state machine, as releases draw them) at
    census parameters against the exact pmf: a bias of a few 1e-4 in any bin would show.
    The two parameters where the common path does most (eps = 4: half the rounds end in
    the "-0" rejection; sigma = 1: the padding slot, the zero drawn without a sign)."""
    n, step = 10**8, 1 << 22
    key = K.NoiseKey.from_seed(777)
    if kind == "dlap":
        p = S.dlap_params(1 / param)
        q = math.exp(-p.s / p.t)
        half = int(40 / (p.s / p.t)) + 5

        def pmf(y):
            return (1 - q) / (1 + q) * q ** abs(y)
    else:
        p = S.dgauss_params(param * param)
        s2 = float(p.sigma2)
        half = int(12 * math.sqrt(s2)) + 5
        norm = sum(math.exp(-y * y / (2 * s2)) for y in range(-half, half + 1))

        def pmf(y):
            return math.exp(-y * y / (2 * s2)) / norm
    counts = np.zeros(2 * half + 1, np.int64)
    for a in range(0, n, step):
        d = np.arange(a, min(n, a + step), dtype=np.int64)
        x = (S.sample_discrete_laplace_keyed(p, key, d) if kind == "dlap" else S.sample_discrete_gaussian_keyed(p, key, d))
        assert np.abs(x).max() <= half  # the table's tail beyond is below 1e-17
        counts += np.bincount(x + half, minlength=2 * half + 1)
    assert counts.sum() == n
    assert _chi2_counts(counts, -half, pmf) > 1e-4
