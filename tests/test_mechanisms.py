"""Every registered mechanism passes the contract suite; mechanism-specific facts."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hierdp
from hierdp.errors import DataError
from hierdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace, Sensitivity, TruncatedLaplace
from hierdp.mechanisms._samplers import dlap_params
from hierdp.mechanisms.continuous import grid_step
from hierdp.mechanisms.truncated_laplace import truncation_radius
from hierdp.rng import SeededRandom
from hierdp.testing import BaseMechanismTests


@pytest.fixture(params=hierdp.registry.names("mechanism"))
def registered(request):
    return hierdp.registry.create("mechanism", request.param)


class TestRegisteredMechanisms(BaseMechanismTests):
    @pytest.fixture
    def mechanism(self, registered):
        return registered


class TestTruncatedLaplaceContract(BaseMechanismTests):
    """Truncated Laplace is not a release mechanism, but it honours the same contract."""

    @pytest.fixture
    def mechanism(self):
        return TruncatedLaplace(delta=1e-6)


def test_builtins_are_registered():
    assert {"laplace", "discrete_laplace", "gaussian", "discrete_gaussian"} <= set(
        hierdp.registry.names("mechanism"))
    units = {n: hierdp.registry.get("mechanism", n).budget_unit for n in hierdp.registry.names("mechanism")}
    assert units["laplace"] == units["discrete_laplace"] == "epsilon"
    assert units["gaussian"] == units["discrete_gaussian"] == "rho"


def test_discrete_laplace_variance_formula():
    # Var = 2q/(1-q)^2 with q = exp(-ε/Δ); ε = 1: q = e^-1 -> 2e^-1/(1-e^-1)^2 = 1.8413...
    q = math.exp(-1.0)
    assert DiscreteLaplace().variance(1.0, Sensitivity()) == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-6)
    # the scale is rounded up, never down
    assert DiscreteLaplace().scale(0.3, Sensitivity()) >= 1 / 0.3


def test_discrete_gaussian_variance_large_sigma_is_sigma2():
    # ρ = Δ²/(2σ²): ρ = 0.005 -> σ² = 100; for σ = 10 the discrete variance equals σ²
    assert DiscreteGaussian().variance(0.005, Sensitivity()) == pytest.approx(100.0, rel=1e-8)


def test_discrete_gaussian_variance_small_sigma_below_sigma2():
    # σ² = 0.25 (ρ = 2): Var = 2Σ y² e^{-2y²} / Σ e^{-2y²}, computed by hand to 1e-12
    num = 2 * sum(y * y * math.exp(-2 * y * y) for y in range(1, 40))
    den = 1 + 2 * sum(math.exp(-2 * y * y) for y in range(1, 40))
    assert DiscreteGaussian().variance(2.0, Sensitivity()) == pytest.approx(num / den, rel=1e-7)


def test_continuous_variances_match_textbook():
    # Laplace(b = Δ/ε) has variance 2b²; Gaussian σ² = Δ²/(2ρ); the exact grid and
    # rational rounding change them by less than 2e-6 relative
    assert Laplace().variance(0.5, Sensitivity()) == pytest.approx(8.0, rel=2e-6)
    assert Gaussian().variance(0.125, Sensitivity()) == pytest.approx(4.0, rel=2e-6)


def test_continuous_outputs_on_public_grid():
    """Mironov's attack needs outputs off the noise grid; ours are exact multiples of g."""
    m = Laplace()
    g = m.grid(1.0, Sensitivity())
    assert g == float(grid_step(1.0)) and g <= 2.0 ** -16
    out = m.sample(np.array([3, 5, 7] * 1000), 1.0, Sensitivity(), SeededRandom(0))
    assert np.all(out / g == np.rint(out / g))
    out = Gaussian().sample(np.array([0.3, 1e6]), 0.5, Sensitivity(), SeededRandom(0))
    g2 = Gaussian().grid(0.5, Sensitivity())
    assert np.all(out / g2 == np.rint(out / g2))


def test_integer_mechanisms_reject_fractional_counts():
    for m in (DiscreteLaplace(), DiscreteGaussian()):
        budget = 1.0 if m.budget_unit == "epsilon" else 0.5
        with pytest.raises(DataError, match="integer counts"):
            m.sample(np.array([1.5, 2.0]), budget, Sensitivity(), SeededRandom(0))
    # integral floats are accepted
    out = DiscreteLaplace().sample(np.array([1.0, 2.0]), 1.0, Sensitivity(), SeededRandom(0))
    assert out.dtype == np.int64


def test_truncated_laplace_bound_follows_lemma_16():
    # R = (1/ε) ln(1 + (e^ε - 1)/(2δ)); ε = 1, δ = 1e-6: ln(1 + 1.71828/2e-6) = 13.6636
    assert truncation_radius(1.0, 1e-6) == pytest.approx(math.log(1 + (math.e - 1) / 2e-6), rel=1e-12)
    assert TruncatedLaplace(delta=1e-6).bound(1.0, Sensitivity()) == 15  # ceil(13.66...) + 1
    # a large δ makes N small, so that the truncation and the law inside it can be checked:
    # ε = 1, δ = 0.05: R = ln(1 + 1.71828/0.1) = 2.9004, N = ceil(R) + 1 = 4
    t = TruncatedLaplace(delta=0.05)
    n = t.bound(1.0, Sensitivity())
    assert n == 4
    # Lemma 16's δ: the mass one neighbour's output set lacks, P(z = -N), is at most δ
    zs = np.arange(-n, n + 1)
    pmf = np.exp(-np.abs(zs) * float(dlap_params(1.0).s) / dlap_params(1.0).t)
    pmf /= pmf.sum()
    assert pmf[0] <= 0.05
    draws = 200_000
    z = t.sample(np.zeros(draws, dtype=np.int64), 1.0, Sensitivity(), SeededRandom(4))
    assert np.abs(z).max() == n  # truncated at N, and the edge is reached (P(|z| = 4) = 0.028)
    freq = np.array([(z == v).sum() for v in zs]) / draws
    se = np.sqrt(pmf * (1 - pmf) / draws)
    assert np.all(np.abs(freq - pmf) <= 5 * se), (freq, pmf)
    assert t.variance(1.0, Sensitivity()) == pytest.approx(float(np.dot(zs * zs, pmf)), rel=1e-12)


def test_truncated_laplace_delta_validation():
    with pytest.raises(hierdp.BudgetError, match="delta"):
        TruncatedLaplace(delta=0.0)
    with pytest.raises(hierdp.BudgetError, match="delta"):
        TruncatedLaplace(delta=1.5)


def test_continuous_mechanisms_reject_non_finite_values():
    for m, b in ((Laplace(), 1.0), (Gaussian(), 0.5)):
        with pytest.raises(DataError, match="finite"):
            m.sample(np.array([1.0, np.nan]), b, Sensitivity(), SeededRandom(0))


def test_continuous_noise_grid_and_rounding_of_real_inputs():
    # real inputs are rounded to the public grid before noise: x̃ = g·rint(x/g)
    m = Laplace()
    g = m.grid(1.0, Sensitivity())
    x = np.array([0.1, 1 / 3, 2.5e6 + 0.123456789])
    out = m.sample(np.tile(x, (200_000, 1)), 1.0, Sensitivity(), SeededRandom(1))
    np.testing.assert_allclose(out.mean(axis=0), np.rint(x / g) * g, atol=6 * math.sqrt(2 / 200_000))


# -- sparse vector technique (Ghazi et al. Lemma 17) -------------------------------------
def test_sparse_accuracy_of_lemma_17():
    """With Δ = 8c/ε·ln(2d/η), with probability >= 1 - η every answer before the c-th ⊤
    is right about queries more than Δ away from τ."""
    from hierdp.mechanisms.svt import BOTTOM, HALTED, TOP, sparse

    d, c, eps, eta, tau = 40, 3, 1.0, 0.05, 1000
    delta = 8 * c / eps * math.log(2 * d / eta)
    high, low = tau + int(delta) + 1, tau - int(delta) - 1
    rng = np.random.default_rng(0)
    runs = 4000
    vals = np.where(rng.random((runs, d)) < 0.05, high, low).astype(np.int64)
    ans = sparse(vals, tau, c, eps, SeededRandom(3))
    wrong = ((ans == TOP) & (vals == low)) | ((ans == BOTTOM) & (vals == high))
    assert wrong.any(axis=1).mean() <= eta
    # at most c ⊤ per run, then halted
    assert ((ans == TOP).sum(axis=1) <= c).all()
    after = np.cumsum(ans == TOP, axis=1) >= c
    shifted = np.zeros_like(after)
    shifted[:, 1:] = after[:, :-1]
    assert (ans[shifted] == HALTED).all()


def test_sparse_streaming_matches_batch_distribution():
    from hierdp.mechanisms.svt import TOP, Sparse, sparse

    vals = np.array([0, 3, 5, 8, 10, 12, 15], dtype=np.int64)
    runs = 4000
    batch = sparse(np.tile(vals, (runs, 1)), 9, 1, 0.5, SeededRandom(1))
    first_b = np.where((batch == TOP).any(axis=1), (batch == TOP).argmax(axis=1), vals.size)
    rng = SeededRandom(2)
    first_s = []
    for _ in range(runs):
        s = Sparse(9, 1, 0.5, rng)
        pos = vals.size
        for i, v in enumerate(vals):
            if s.query(int(v)):
                pos = i
                break
        first_s.append(pos)
    from scipy import stats

    tab = np.array([np.bincount(first_b, minlength=vals.size + 1), np.bincount(first_s, minlength=vals.size + 1)])
    tab = tab[:, tab.sum(axis=0) > 0]
    assert stats.chi2_contingency(tab).pvalue > 1e-4


def test_sparse_errors():
    from hierdp.mechanisms.svt import Sparse, sparse

    s = Sparse(0, 1, 1.0, SeededRandom(0))
    s.query(10_000)
    with pytest.raises(hierdp.BudgetError, match="halted"):
        s.query(0)
    with pytest.raises(hierdp.BudgetError, match="cutoff"):
        sparse(np.zeros(3, dtype=np.int64), 0, 0, 1.0, SeededRandom(0))
    with pytest.raises(hierdp.BudgetError, match="budget"):
        sparse(np.zeros(3, dtype=np.int64), 0, 1, -1.0, SeededRandom(0))
    with pytest.raises(DataError, match="integer"):
        sparse(np.array([0.5]), 0, 1, 1.0, SeededRandom(0))


def test_truncated_laplace_matches_pmf():
    from scipy import stats

    t = TruncatedLaplace(delta=1e-4)
    p, n = t.params(0.7, Sensitivity())
    q = math.exp(-p.s / p.t)
    z = t.sample(np.zeros(1_000_000, dtype=np.int64), 0.7, Sensitivity(), SeededRandom(8))
    ks = np.arange(-n, n + 1)
    pmf = q ** np.abs(ks)
    pmf /= pmf.sum()
    obs = np.bincount(z + n, minlength=2 * n + 1)
    assert obs.sum() == z.size
    keep = pmf * z.size >= 5
    exp = pmf * z.size
    o, e = obs[keep], exp[keep]
    if (~keep).any():
        o, e = np.r_[o, obs[~keep].sum()], np.r_[e, exp[~keep].sum()]
    stat = stats.chisquare(o, e)
    assert stat.pvalue > 1e-4


def test_keyed_sample_adds_into_its_own_noise_only():
    """The keyed sample adds the counts into the noise array hierdp's sampler just made
    (no third array), never into the caller's counts; a subclass's sampler that returns an
    array of its own (here one cached array it returns every time) gets a new array each
    time, its array untouched."""
    from hierdp.keyed_noise import NoiseKey
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.mechanisms.discrete_laplace import DiscreteLaplace

    key = NoiseKey.from_seed(4)
    vals = np.arange(12, dtype=np.int64).reshape(4, 3)
    keep = vals.copy()
    ids = np.array([3, 0, 7, 1])
    mech = DiscreteLaplace()
    a = mech.sample_keyed(vals, 1.0, Sensitivity(1, 1), key, ids)
    np.testing.assert_array_equal(vals, keep)
    assert not np.shares_memory(a, vals)

    cached = np.full(12, 5, np.int64)

    class Fixed(DiscreteLaplace):
        name = "fixed_noise_test"

        @staticmethod
        def _noise_keyed(params, key, draws, measurement):
            return cached

    for _ in range(2):
        np.testing.assert_array_equal(Fixed().sample_keyed(vals, 1.0, Sensitivity(1, 1), key, ids), keep + 5)
    np.testing.assert_array_equal(cached, 5)
