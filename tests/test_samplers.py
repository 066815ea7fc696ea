"""The exact samplers against their exact distributions (chi-square, KS) and the kernel's
arithmetic against brute force."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from hierdp.mechanisms import _samplers as S
from hierdp.mechanisms.base import Sensitivity
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.rng import SecureRandom, SeededRandom, make_rng

N = 1_000_000


def _chi2_by_cdf(x: np.ndarray, cdf, support_lo: int, support_hi: int, n_bins: int = 60) -> float:
    """Chi-square p-value of integer draws against an exact CDF, bins of >= 5 expected."""
    qs = np.unique(np.quantile(x, np.linspace(0, 1, n_bins + 1)[1:-1], method="nearest"))
    edges = np.r_[support_lo - 1, qs, support_hi]  # bins (e_i, e_{i+1}]
    probs = np.diff([cdf(e) for e in edges])
    obs = np.histogram(x, bins=np.r_[edges[:-1] + 0.5, edges[-1] + 0.5])[0]
    keep = probs * x.size >= 5
    # merge small bins into their neighbour
    p2, o2 = [], []
    acc_p = acc_o = 0.0
    for p, o, _k in zip(probs, obs, keep):
        acc_p += p
        acc_o += o
        if acc_p * x.size >= 5:
            p2.append(acc_p)
            o2.append(acc_o)
            acc_p = acc_o = 0.0
    if acc_p and p2:
        p2[-1] += acc_p
        o2[-1] += acc_o
    p2 = np.array(p2)
    o2 = np.array(o2)
    assert o2.sum() == x.size
    return stats.chisquare(o2, p2 / p2.sum() * x.size).pvalue


def _dlap_cdf(q: float):
    # P(Y = y) = (1-q)/(1+q) q^|y|;  P(Y <= y) = q^{-y}/(1+q) for y < 0, 1 - q^{y+1}/(1+q) for y >= 0
    def cdf(y):
        y = int(y)
        return q ** (-y) / (1 + q) if y < 0 else 1 - q ** (y + 1) / (1 + q)
    return cdf


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5, 1e4, 3e7])
def test_discrete_laplace_matches_pmf(scale):
    p = S.dlap_params(scale)
    q = math.exp(-p.s / p.t)
    x = S.sample_discrete_laplace(p, N, SeededRandom(int(scale * 10)))
    pv = _chi2_by_cdf(x, _dlap_cdf(q), int(x.min()), int(x.max()))
    assert pv > 1e-4, pv
    # exact point masses where they are large: P(0) = (1-q)/(1+q)
    p0 = (1 - q) / (1 + q)
    assert abs(np.mean(x == 0) - p0) < 6 * math.sqrt(p0 * (1 - p0) / N)


def test_discrete_laplace_tiny_scale_point_masses():
    # scale 0.05: P(±1) = (1-q)/(1+q)·q with q = e^-20; 2e6 draws must be (almost) all 0,
    # and P(Y = 0) = (1-q)/(1+q) = 1 - 4e-9
    x = S.discrete_laplace(0.05, 2 * N, SeededRandom(3))
    assert np.count_nonzero(x) <= 2


def _dg_cdf(sigma2: float, lo: int, hi: int):
    ys = np.arange(lo, hi + 1)
    w = np.exp(-(ys.astype(np.float64) ** 2) / (2 * sigma2))
    c = np.cumsum(w)
    total = c[-1]

    def cdf(y):
        y = int(y)
        if y < lo:
            return 0.0
        if y >= hi:
            return 1.0
        return c[y - lo] / total
    return cdf


@pytest.mark.parametrize("sigma2", [0.25, 1.0, 30.25, 1e10])
def test_discrete_gaussian_matches_pmf(sigma2):
    p = S.dgauss_params(sigma2)
    s2 = float(p.sigma2)
    x = S.sample_discrete_gaussian(p, N, SeededRandom(int(sigma2) + 5))
    if sigma2 > 1e6:
        # N_Z(0, σ²) for huge σ: exact CDF = normal CDF at half-integers to ~1e-300
        sd = math.sqrt(s2)

        def cdf(y):
            return stats.norm.cdf((int(y) + 0.5) / sd)
    else:
        half = int(40 * math.sqrt(s2)) + 5
        cdf = _dg_cdf(s2, -half, half)
    pv = _chi2_by_cdf(x, cdf, int(x.min()), int(x.max()))
    assert pv > 1e-4, pv
    assert x.var() == pytest.approx(S.discrete_gaussian_variance(p), rel=6 * math.sqrt(2 / N) + 1e-3)


def test_discrete_gaussian_tiny_sigma_point_masses():
    # σ = 0.2: P(±1) = e^{-12.5}/Z ≈ 3.73e-6 each side; Z = 1 + 2e^{-12.5} + ...
    x = S.discrete_gaussian(0.04, 2 * N, SeededRandom(9))
    p1 = math.exp(-12.5) / (1 + 2 * math.exp(-12.5))
    k = int(np.count_nonzero(x == 1) + np.count_nonzero(x == -1))
    lam = 2 * N * 2 * p1  # ~14.9
    assert stats.poisson.cdf(k, lam) > 1e-4 and stats.poisson.sf(k - 1, lam) > 1e-4
    assert np.all(np.abs(x) <= 1)


def test_resuming_on_new_words_is_exact(monkeypatch):
    """The kernel stops when a batch of words is used up and resumes on the next batch:
    on the resumable path the output is the same function of the word stream whatever
    the batch size."""
    monkeypatch.setattr(S, "_FAST_PATH", False)
    p = S.dlap_params(3.7)
    g = S.dgauss_params(12.0)
    ref_l = S.sample_discrete_laplace(p, 5000, SeededRandom(1))
    ref_g = S.sample_discrete_gaussian(g, 5000, SeededRandom(2))
    monkeypatch.setattr(S, "_WORD_BATCH", 3)
    np.testing.assert_array_equal(S.sample_discrete_laplace(p, 5000, SeededRandom(1)), ref_l)
    np.testing.assert_array_equal(S.sample_discrete_gaussian(g, 5000, SeededRandom(2)), ref_g)


@pytest.mark.parametrize("fast", [False, True])
def test_mixed_fast_and_resumable_paths_match_pmf(monkeypatch, fast):
    """Small batches interleave the fast path and resumptions: still the exact PMF."""
    monkeypatch.setattr(S, "_FAST_PATH", fast)
    monkeypatch.setattr(S, "_WORD_BATCH", 37)
    p = S.dlap_params(6.0)
    q = math.exp(-p.s / p.t)
    x = S.sample_discrete_laplace(p, 200_000, SeededRandom(21))
    assert _chi2_by_cdf(x, _dlap_cdf(q), int(x.min()), int(x.max())) > 1e-4


def test_parameters_round_towards_more_noise():
    for scale in (1e-3, 0.3, 1.0, 2.0 / 3.0, 10.0, 12345.678, 2.0**21 + 0.5):
        p = S.dlap_params(scale)
        assert p.scale >= Fraction(scale)
        assert float(p.scale) <= scale * (1 + 2.0**-19)
    for s2 in (1e-6, 0.04, 1.0, 2.0, 1e5 / 3, 1e12):
        g = S.dgauss_params(s2)
        assert g.sigma2 >= Fraction(s2)
        # relative rounding below 2^-28, or 1/mm for tiny σ (where σ²/t = mm/bb)
        assert float(g.sigma2) <= s2 * (1 + max(2.0**-28, 1.0 / g.mm))
        assert g.mm >= 2**18
        assert g.den < 2**62
    with pytest.raises(ValueError, match="outside"):
        S.dlap_params(2.0**50)
    with pytest.raises(ValueError, match="positive"):
        S.dlap_params(-1.0)


def test_secure_source_is_default_and_samples():
    rng = make_rng(None)
    assert isinstance(rng, SecureRandom) and rng.secure and rng.seed is None
    x = S.discrete_laplace(2.0, 200_000, rng)
    p = S.dlap_params(2.0)
    assert x.var() == pytest.approx(S.discrete_laplace_variance(p), rel=0.05)


@pytest.mark.parametrize("scale", [0.5, 40.0])
def test_laplace_mechanism_ks(scale):
    eps = 1.0 / scale
    z = Laplace().sample(np.zeros(N), eps, Sensitivity(), SeededRandom(6))
    res = stats.kstest(z, stats.laplace(scale=scale).cdf)
    assert res.pvalue > 1e-4, res


@pytest.mark.parametrize("sigma", [0.3, 25.0])
def test_gaussian_mechanism_ks(sigma):
    rho = 1.0 / (2 * sigma * sigma)
    z = Gaussian().sample(np.zeros(N), rho, Sensitivity(), SeededRandom(8))
    res = stats.kstest(z, stats.norm(scale=sigma).cdf)
    assert res.pvalue > 1e-4, res


class _StreamSource:
    """A fixed stream of words (for exactness tests of the kernel's control flow)."""

    secure = False
    seed = None

    def __init__(self, words: np.ndarray) -> None:
        self._w = words.astype(np.uint64)
        self._pos = 0

    def words(self, size: int) -> np.ndarray:
        out = self._w[self._pos:self._pos + size]
        if out.size < size:
            raise RuntimeError("stream exhausted")
        self._pos += size
        return out


@pytest.mark.parametrize("fast", [False, True])
def test_precision_extension_is_exact(monkeypatch, fast):
    """Force a comparison to exhaust a 64-bit table: the first random word mirrors the
    expansion of p_0 chunk by chunk (4-bit chunks on the resumable path, bytes on the fast
    path). The kernel must pause and continue with a 128-bit table; on the resumable path
    it gives exactly the draws it gives with the 128-bit table from the start."""
    monkeypatch.setattr(S, "_FAST_PATH", fast)
    p = S.dlap_params(10.0)
    jbits, g0, *_ = S._core(p.s, p.t)
    c0 = int(S._table(p.s, p.t, jbits, g0, 1)[0, 0].view(np.uint64))
    crafted, w = 0, (8 if fast else 4)
    for i in range(64 // w):  # the kernel reads chunk i from bits w·i .. w·i + w - 1
        crafted |= ((c0 >> (64 - w - w * i)) & ((1 << w) - 1)) << (w * i)
    stream = np.r_[np.uint64(crafted), np.random.PCG64(5).random_raw(200_000)]
    ref = S.sample_discrete_laplace(p, 1000, _StreamSource(stream))
    monkeypatch.setattr(S, "_TABLE_WORDS", 1)
    calls = []
    orig = S._table

    def spy(*args):
        calls.append(args[-1])
        return orig(*args)

    monkeypatch.setattr(S, "_table", spy)
    got = S.sample_discrete_laplace(p, 1000, _StreamSource(stream))
    assert calls == [1, 2]
    if not fast:
        np.testing.assert_array_equal(got, ref)
    else:  # the byte path hands the digit to the 4-bit path: same law, other bit use
        assert abs(got.mean()) < 6 * math.sqrt(200 / 1000) and 100 < got.var() < 300


def test_tabulated_constants_are_exact_bits():
    # e^-1 to 128 bits from the alternating series Σ (-1)^k / k! (error < 1/60!)
    e_inv = sum(Fraction((-1) ** k, math.factorial(k)) for k in range(60))
    bits = math.floor(e_inv * 2**128)
    tab = S._table(1, 3, 5, 8, 2).view(np.uint64)
    assert (int(tab[-1, 0]) << 64) | int(tab[-1, 1]) == bits
    e8 = sum(Fraction((-8) ** k, math.factorial(k)) for k in range(120))
    assert (int(tab[-2, 0]) << 64) | int(tab[-2, 1]) == math.floor(e8 * 2**128)
    # p_0 = 1/(1 + e^{1/3}): check against a float to 50 bits
    assert int(tab[0, 0]) / 2.0**64 == pytest.approx(1 / (1 + math.exp(1 / 3)), rel=1e-15)


@pytest.mark.parametrize("method", ["blocks", "cks"])
@pytest.mark.parametrize("sigma2", [0.16, 6.25, 4e6])
def test_discrete_gaussian_methods_match_pmf(method, sigma2):
    p = S.dgauss_params(sigma2)
    s2 = float(p.sigma2)
    x = S.sample_discrete_gaussian(p, N, SeededRandom(int(sigma2 * 7) + 1), method=method)
    half = int(40 * math.sqrt(s2)) + 5
    pv = _chi2_by_cdf(x, _dg_cdf(s2, -half, half), int(x.min()), int(x.max()))
    assert pv > 1e-4, pv


@pytest.mark.parametrize("sigma2", [0.25, 100.0, 1e7])
def test_block_alias_table_is_exact(sigma2):
    """Reconstruct each component's probability from the alias table: exactly its weight."""
    z = S._zig(*(lambda p: (p.t, p.mm, p.bb))(S.dgauss_params(sigma2)))
    weights, total = z.probs
    pb, tb = int(z.zi[0]), int(z.zi[1])
    n, cap = 1 << pb, 1 << tb
    mass = np.zeros(n + 1, dtype=object)
    for i in range(n):
        mass[i] += int(z.thr[i])
        mass[int(z.alias[i])] += cap - int(z.thr[i])
    assert [int(m) for m in mass[:len(weights)]] == weights
    assert int(mass[len(weights)]) == total - sum(weights)  # the padding slot
    assert sum(int(m) for m in mass) == total == n * cap
    # every block weight bounds the target from above: H_b / 2^k >= exp(-(b w)^2 / 2σ^2)
    s2 = float(z.sigma2)
    start = 1 if z.zero_direct else 0
    for b in range(start, min(z.B, 200)):
        assert z.H[b] / 2**z.K >= math.exp(-((b * z.w) ** 2) / (2 * s2))
    assert z.a <= Fraction(z.M0) / z.sigma2


@pytest.mark.parametrize("method", ["blocks", "cks"])
def test_exact_acceptance_path_matches_pmf(monkeypatch, method):
    """Widen the float fast path's error margin so that most candidates are decided by the
    exact path (rational γ, decimal exp, more random bits): the output must still follow
    the discrete Gaussian exactly."""
    monkeypatch.setattr(S, "_ACCEPT_FUZZ", 0.3)
    calls = []
    if method == "cks":
        orig = S._accept_exact

        def spy(*args):
            calls.append(1)
            return orig(*args)

        monkeypatch.setattr(S, "_accept_exact", spy)
    else:
        orig_m = S._Zig.accept_exact

        def spy_m(self, *args):
            calls.append(1)
            return orig_m(self, *args)

        monkeypatch.setattr(S._Zig, "accept_exact", spy_m)
    p = S.dgauss_params(2.25)
    x = S.sample_discrete_gaussian(p, 6000, SeededRandom(12), method=method)
    assert len(calls) > 1000
    pv = _chi2_by_cdf(x, _dg_cdf(float(p.sigma2), -30, 30), int(x.min()), int(x.max()), n_bins=12)
    assert pv > 1e-4, pv


def test_accept_exact_decides_against_exp():
    # γ = c²/den = 1/4: p = e^{-1/4}; u32 prefixes far from p decide at once
    rng = SeededRandom(0)
    assert S._accept_exact(1, 4, int(0.5 * 2**32), rng) is True
    assert S._accept_exact(1, 4, int(0.9 * 2**32), rng) is False
    # the prefix containing p needs more bits; U < p then has probability equal to the
    # position of p inside that prefix interval
    u = int(math.exp(-0.25) * 2**32)
    frac = math.exp(-0.25) * 2**32 - u
    hits = sum(S._accept_exact(1, 4, u, SeededRandom(k)) for k in range(2000))
    assert abs(hits / 2000 - frac) < 5 * math.sqrt(frac * (1 - frac) / 2000) + 1e-3


@pytest.mark.parametrize("sigma2,span", [(9.0, 1.2), (4e6, 0.8)])
def test_block_sampler_tail_is_exact(sigma2, span):
    """Shrink the body to ~1 standard deviation so that the geometric tail (discrete
    Laplace core, its own acceptance) produces a large share of the draws."""
    p = S.dgauss_params(sigma2)
    z = S._Zig(p, span=span)
    wpd = 2.0
    x = S._run(2, z.a.numerator, z.a.denominator, (p.mm, p.bb, p.den), 400_000, SeededRandom(4), wpd, z)
    s2 = float(p.sigma2)
    assert np.mean(np.abs(x) >= z.M0) > 0.1
    half = int(40 * math.sqrt(s2)) + 5
    if sigma2 > 1e5:
        sd = math.sqrt(s2)

        def cdf(y):
            return stats.norm.cdf((int(y) + 0.5) / sd)
    else:
        cdf = _dg_cdf(s2, -half, half)
    assert _chi2_by_cdf(x, cdf, int(x.min()), int(x.max())) > 1e-4
