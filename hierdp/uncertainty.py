"""Confidence intervals for released values, from the public law of the noise.

Post-processing only (no privacy cost): the noise a ``per_level`` release added is public
in law — the mechanism, each level's budget and sensitivity are in the ledger — and the
post-processing chain is public, so the law of the error of every released value is
public too. The methods, chosen per node:

``exact``
    The released value is one measurement (no post-processing, or a node BLUE/GMC leaves
    equal to its measurement, e.g. the leaves when all budget is on the leaves): the
    error is one draw of the mechanism's noise, and the interval is the smallest
    symmetric one with probability >= c under its exact law (discrete Laplace:
    P(|Z| <= k) = 1 - 2q^(k+1)/(1+q), q = exp(-1/scale); discrete Gaussian: its
    normalised pmf summed exactly). Coverage c (randomized, below) or >= c.
``simulation``
    A linear, unbiased chain (BLUE, GMC, ...): the error is ``A z``, a fixed linear map of
    the independent noises z, whatever the true counts. R noise vectors are drawn with
    the mechanism's own exact sampler and pushed through the same chain as one
    ``(n, R)`` pass; with the order statistics E_(1) <= ... <= E_(R) of a node's
    simulated errors, ``[x - E_(R+1-j), x - E_(j)]`` covers the truth with probability
    exactly ``1 - 2j/(R+1)`` for a continuous error law (the released error is an
    (R+1)-th exchangeable draw) and at least that with ties; ``j = floor((1-c)(R+1)/2)``.
``bound`` (default after ``nonneg``/``round``)
    After a non-linear step the error depends on the unknown counts. The truth is covered
    with probability c by the interval of the linear (BLUE) estimate of the *same*
    measurements (post-processing, computed as above); intersecting it with [0, inf)
    (the chain asserts non-negative counts) and widening it to hold the released value
    keep coverage >= c. No std is reported (the released value's error has no closed
    form); the coverage is measured in ``benchmarks/bench_coverage.py``.
``bootstrap`` (``nonlinear="bootstrap"``)
    Parametric bootstrap through the chain (Efron & Tibshirani 1993, §6.5; the basic
    interval of Davison & Hinkley 1997, eq. 5.6): plug in the released values x̂, draw
    y* = x̂ + z, rerun the chain, D = chain(y*) - x̂; the interval is
    ``[x̂ - D_(R+1-j), x̂ - D_(j)]`` ∩ [0, inf) and the std is the bootstrap RMSE (bias
    included). Coverage is not guaranteed and is poor where counts sit at 0 (the
    released zeros make the bootstrap too narrow: 0.47 at a nominal 0.9 on Poisson(3)
    leaves, see the benchmark).

With integer noise the intervals are randomized at the lattice (``randomize=True``,
Stevens 1950): a public U(-1/2, 1/2) is added to the estimate and to every simulated
error, so that coverage is exactly c rather than c plus up to a lattice step.

Where hierdp cannot rebuild the noise law (another plan, a mechanism with parameters
it cannot recreate), the interval falls back to ``x ± z·std`` and says so (``normal``).
With integer counts (an integer mechanism) the endpoints are rounded inwards to integers
(the truth is an integer, so coverage is unchanged).

Cost: O(R·n·k) sampler draws plus R/B chain passes over ``(n, B)`` arrays (B chosen so
one batch stays near 256 MB); memory O(n·j) for the running order statistics. For a
linear chain the result depends only on the public structure, budgets and chain, and
is cached in ``tree.cache``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp import registry
from hierdp._kernels import jit as _jit
from hierdp.errors import DataError, HierDPError
from hierdp.keyed_noise import NoiseKey
from hierdp.measurements import Estimate, Measurements
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.mechanisms.discrete_gaussian import DiscreteGaussian
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.postprocessors.blue import BLUE, blue
from hierdp.postprocessors.chain import ledger_chain, resolve_postprocessors, run_chain, run_chain_replicates
from hierdp.rng import make_rng

if TYPE_CHECKING:
    from hierdp.accounting.ledger import Ledger
    from hierdp.tree import Tree

__all__ = ["Intervals", "release_intervals", "exact_halfwidth", "order_index", "DEFAULT_DRAWS"]

#: Default number of simulated noise vectors: with R = 999, j = (1-c)(R+1)/2 is an
#: integer for c = 0.9 and 0.95, so the simulated intervals have coverage exactly c.
DEFAULT_DRAWS = 999
_BATCH_BYTES = 1 << 28
_CACHE_KEY = "uncertainty.linear"
_NONNEG_STEPS = ("nonneg", "round")


@dataclass
class Intervals:
    """Intervals for every node (external order, the shape of the released values).

    ``low[c]``/``high[c]`` per confidence ``c``; ``std`` the reported standard error
    (exact for a linear chain, the bootstrap RMSE after a non-linear step); ``method``
    per node (``exact``, ``simulation``, ``bootstrap``, ``normal`` or ``none`` for a
    node without an estimate); ``summary`` a public description for the output.
    """

    low: dict[float, np.ndarray]
    high: dict[float, np.ndarray]
    std: np.ndarray
    method: np.ndarray
    draws: int
    summary: dict[str, Any] = field(default_factory=dict)


def order_index(confidence: float, draws: int) -> int:
    """``j = floor((1-c)(R+1)/2)``: the order statistic whose two-sided interval has
    coverage ``1 - 2j/(R+1) >= c``; :class:`DataError` when R is too small for c."""
    j = int(math.floor((1.0 - confidence) * (draws + 1) / 2.0 + 1e-9))
    if j < 1:
        need = math.ceil(2.0 / (1.0 - confidence)) - 1
        raise DataError(f"draws={draws} is too few for a {confidence:g} interval; use draws >= {need}")
    return j


def _check_confidence(confidence: Any) -> tuple[float, ...]:
    cs = (confidence,) if np.isscalar(confidence) else tuple(confidence)
    out = []
    for c in cs:
        if isinstance(c, bool) or not isinstance(c, (int, float, np.floating)) or not 0.0 < float(c) < 1.0:
            raise DataError(f"confidence must be a number strictly between 0 and 1 (e.g. 0.9), got {c!r}")
        out.append(float(c))
    return tuple(out)


# -- exact quantiles of one measurement ------------------------------------------------
def _abs_cdf(mechanism: Mechanism, budget: float, sensitivity: Sensitivity):
    """``m -> P(|Z| <= m)`` (m >= -1 an integer) for the exact noise law, or ``None``."""
    if isinstance(mechanism, DiscreteLaplace):
        scale = float(mechanism.scale(budget, sensitivity))
        q = math.exp(-1.0 / scale)
        return lambda m: 0.0 if m < 0 else 1.0 - 2.0 * q ** (m + 1) / (1.0 + q)
    if isinstance(mechanism, DiscreteGaussian):
        s2 = float(mechanism.params(budget, sensitivity).sigma2)
        sigma = math.sqrt(s2)
        if sigma > 2.0**18:
            from scipy.stats import norm

            return lambda m: 0.0 if m < 0 else float(2.0 * norm.cdf((m + 0.5) / sigma) - 1.0)
        kmax = int(math.ceil(12.0 * sigma)) + 2
        y = np.arange(kmax + 1, dtype=np.float64)
        w = np.exp(-(y * y) / (2.0 * s2))
        cum = np.cumsum(w) * 2.0 - w[0]          # P(|Z| <= m) * normaliser
        p = cum / cum[-1]
        return lambda m: 0.0 if m < 0 else float(p[min(m, kmax)])
    return None


def exact_halfwidth(mechanism: Mechanism, budget: float, sensitivity: Sensitivity, confidence: float,
                    randomized: bool = False) -> float | None:
    """Half-width h of the interval for one measurement under the exact noise law, or
    ``None`` when hierdp has no closed form for this mechanism.

    Deterministic: the smallest integer k with P(|Z| <= k) >= c (coverage >= c, above c by
    up to one lattice step). Randomized: h with P(|Z + U| <= h) = c exactly, U uniform on
    (-1/2, 1/2) added to the estimate (the randomized interval for a lattice law, Stevens
    1950): h = k - 1/2 + (c - P(|Z| <= k-1)) / P(|Z| = k).

    Discrete Laplace with P(z) ∝ q^|z|, q = exp(-1/scale) (Dawson et al. 2023, §2):
    P(|Z| <= k) = 1 - 2q^(k+1)/(1+q). Discrete Gaussian N_Z(0, σ²) (Canonne, Kamath &
    Steinke 2020, Def. 1): its pmf summed exactly over |y| <= 12σ (the tail beyond is
    below 1e-30); σ > 2^18 uses the normal law with a continuity correction.
    """
    cdf = _abs_cdf(mechanism, budget, sensitivity)
    if cdf is None:
        return None
    c = float(confidence)
    lo, hi = -1, 1
    while cdf(hi) < c:          # bracket, then bisect: O(log k) evaluations
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cdf(mid) < c else (lo, mid)
    k = hi                      # smallest k with cdf(k) >= c
    if not randomized:
        return float(k)
    below = cdf(k - 1)
    return k - 0.5 + (c - below) / (cdf(k) - below)


# -- the public noise law of a release -------------------------------------------------
@dataclass
class _Level:
    depth: int
    index: Any
    mechanism: Mechanism
    budget: float
    sensitivity: Sensitivity


def _noise_law(ledger: Ledger) -> tuple[list[_Level] | None, str]:
    """The measured levels' noise laws from the ledger, or ``(None, reason)``."""
    if ledger.plan != "per_level":
        return None, f"plan {ledger.plan!r} does not describe its noise per level"
    out = []
    mechs: dict[str, Mechanism] = {}
    for ls in ledger.levels:
        if not ls.measured:
            continue
        try:
            mech = mechs.get(ls.mechanism) or registry.create("mechanism", ls.mechanism)
        except (HierDPError, TypeError) as exc:
            return None, f"cannot recreate mechanism {ls.mechanism!r} ({exc})"
        mechs[ls.mechanism] = mech
        sens = Sensitivity(l1=ls.sensitivity_l1, l2=ls.sensitivity_l2, linf=min(ls.sensitivity_l1, ls.sensitivity_l2))
        v = float(mech.variance(ls.budget, sens))
        if not math.isclose(v, ls.noise_variance, rel_tol=1e-9):
            return None, f"mechanism {ls.mechanism!r} with default parameters does not reproduce level " \
                         f"{ls.level!r}'s noise variance"
        out.append(_Level(ls.depth, None, mech, ls.budget, sens))
    if not out:
        return None, "no level was measured"
    return out, ""


def _small(n: int, k: int) -> bool:
    """Whether a tree of ``n`` nodes with ``k`` cells is a small input (at most
    :data:`hierdp._kernels.jit.SMALL_INPUT` node-cells): its simulation then runs in batches
    that are small inputs too, so the sampler and the chain take their numpy passes and
    compile nothing (issue 53 item 4)."""
    return n * k <= _jit.SMALL_INPUT


def _batch(n: int, k: int, draws: int) -> int:
    if _small(n, k):  # each chain pass and each noise request at most SMALL_INPUT values
        return int(max(1, min(256, draws, _jit.SMALL_INPUT // max(1, n * k))))
    return int(max(8, min(256, draws, _BATCH_BYTES // max(1, 8 * n * k))))


def _keyed(mechanism: Mechanism) -> bool:
    """Whether ``mechanism`` draws keyed noise in one vectorised call (hierdp's own do; the
    default :meth:`Mechanism.sample_keyed` calls ``sample`` once per node)."""
    return type(mechanism).sample_keyed is not Mechanism.sample_keyed


def _sources(n: int, k: int, sim_seed: int | None) -> tuple[Any, NoiseKey | None]:
    """The simulation's random source and, for a small tree, a noise key of its own words
    (never the release's key: :meth:`NoiseKey.from_rng`): keyed draws of up to
    :data:`hierdp._kernels.jit.SMALL_INPUT` run as numpy passes, the same law, and each draw
    is indexed by node, cell and simulated vector, so its value does not depend on the batches."""
    rng = make_rng(sim_seed)
    return rng, (NoiseKey.from_rng(rng) if _small(n, k) else None)


def _noise(tree: Tree, levels: list[_Level], shape: tuple[int, ...], rng: Any, key: NoiseKey | None = None,
           first: int = 0, draws: int = 0) -> np.ndarray:
    """One noise array (internal order) of shape ``(n,) + shape``; 0 on unmeasured levels.
    With ``key``, the last axis holds simulated vectors ``first, first + 1, ...`` of ``draws``,
    each value keyed by its node, cell and vector (mechanisms with a vectorised keyed sampler)."""
    z = np.zeros((tree.n_nodes,) + shape, dtype=np.float64)
    for lv in levels:
        idx = tree.internal.level_index[lv.depth]
        size = tree.internal.depth[idx].size
        zeros = np.zeros((size,) + shape, dtype=np.int64 if lv.mechanism.integer else np.float64)
        if key is not None and _keyed(lv.mechanism):
            m = shape[-1]
            cells = int(np.prod(shape[:-1], dtype=np.int64))
            nodes = np.arange(tree.n_nodes, dtype=np.int64)[idx]
            rows = (nodes[:, None] * cells + np.arange(cells, dtype=np.int64)[None, :]).reshape(-1)
            ids = (rows[:, None] * draws + (first + np.arange(m, dtype=np.int64))[None, :]).reshape(-1)
            noise = lv.mechanism.sample_keyed(zeros.reshape(-1), lv.budget, lv.sensitivity, key, ids)
            z[idx] = np.asarray(noise).reshape(zeros.shape)
        else:
            z[idx] = lv.mechanism.sample(zeros, lv.budget, lv.sensitivity, rng)
    return z


class _Extremes:
    """Running j smallest and j largest values per row (order statistics of a stream)."""

    def __init__(self, rows: tuple[int, ...], j: int, moments: bool = False) -> None:
        self.j = j
        self.moments = moments
        # float32 halves the O(n·j) memory; errors keep 7 significant digits
        self.lo = np.full(rows + (j,), np.inf, dtype=np.float32)
        self.hi = np.full(rows + (j,), -np.inf, dtype=np.float32)
        self.sum = np.zeros(rows)
        self.sumsq = np.zeros(rows)
        self.count = 0

    def add(self, e: np.ndarray, raw: np.ndarray | None = None) -> None:
        """Add draws ``e`` (last axis); the moments are taken of ``raw`` (default ``e``)."""
        j = self.j
        e32 = e.astype(np.float32)
        cat = np.concatenate([self.lo, e32], axis=-1)
        self.lo = np.partition(cat, j - 1, axis=-1)[..., :j]
        cat = np.concatenate([self.hi, e32], axis=-1)
        self.hi = np.partition(cat, cat.shape[-1] - j, axis=-1)[..., -j:]
        if self.moments:
            r = e if raw is None else raw
            self.sum += r.sum(axis=-1)
            self.sumsq += np.einsum("...r,...r->...", r, r)
        self.count += e.shape[-1]

    def order_stats(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """The j-th smallest and j-th largest (j <= self.j)."""
        lo = np.sort(self.lo, axis=-1)[..., j - 1]
        hi = -np.sort(-self.hi, axis=-1)[..., j - 1]
        return lo.astype(np.float64), hi.astype(np.float64)


def _run(tree: Tree, steps: list, values: np.ndarray, variance: np.ndarray, k: int = 1) -> np.ndarray:
    """The chain on replicates stacked as columns (``(n, k * m)``; see :func:`run_chain_replicates`)."""
    return run_chain_replicates(tree, values, variance, steps, k)


def _is_unbiased(tree: Tree, steps: list, variance: np.ndarray, consistent: bool, rng_seed: int = 12345) -> bool:
    """A linear chain maps a consistent noise-free input to itself (checked on a random
    consistent vector; unmeasured nodes hold the placeholder 0 as in a release)."""
    gen = np.random.default_rng(rng_seed)
    leaves = gen.integers(0, 1000, tree.n_leaves).astype(np.float64)
    x = tree.to_internal(tree.aggregate(leaves))
    unmeasured = np.isinf(variance)
    y = np.where(unmeasured, 0.0, x)
    est = run_chain(tree, Measurements(y[:, None], variance), steps)
    out = np.asarray(est.values, np.float64)[:, 0]
    check = np.ones(tree.n_nodes, bool) if consistent else ~unmeasured
    if est.variance is not None:  # nodes the data leave undetermined (variance inf) get no interval
        check &= np.isfinite(np.asarray(est.variance, np.float64).reshape(tree.n_nodes, -1)[:, 0])
    return bool(np.allclose(out[check], x[check], rtol=1e-9, atol=1e-6))


def _simulate_linear(tree: Tree, levels: list[_Level], steps: list, variance: np.ndarray, draws: int, jmax: int,
                     sim_seed: int | None, jitter: np.random.Generator | None) -> tuple[_Extremes, np.ndarray]:
    """Order statistics of the simulated errors A z of a linear chain (internal order,
    shape (n,)), and which nodes' errors equal their own measurement's noise."""
    n = tree.n_nodes
    ext = _Extremes((n,), jmax)
    same = np.ones(n, bool)
    b = _batch(n, 1, draws)
    rng, key = _sources(n, 1, sim_seed)
    done = 0
    while done < draws:
        m = min(b, draws - done)
        z = _noise(tree, levels, (m,), rng, key, done, draws)
        e = _run(tree, steps, z, variance) if steps else z
        rows = np.flatnonzero(same)  # after the first batch, few rows are left to check
        same[rows] = np.all(np.abs(e[rows] - z[rows]) <= 1e-9 * (1.0 + np.abs(z[rows])), axis=1)
        if jitter is not None:
            e += jitter.uniform(-0.5, 0.5, e.shape)
        ext.add(e)
        done += m
    return ext, same


def _simulate_bootstrap(tree: Tree, levels: list[_Level], steps: list, variance: np.ndarray, plug: np.ndarray,
                        draws: int, jmax: int, sim_seed: int | None, jitter: np.random.Generator | None) -> _Extremes:
    """Order statistics of D = chain(x̂ + z) - x̂ (internal order, shape (n, k))."""
    n = tree.n_nodes
    p2 = plug.reshape(n, -1)
    k = p2.shape[1]
    ext = _Extremes((n, k), jmax, moments=True)
    unmeasured = np.isinf(variance)
    base = np.where(unmeasured[:, None] | ~np.isfinite(p2), 0.0, p2)
    b = _batch(n, k, draws)
    rng, key = _sources(n, k, sim_seed)
    done = 0
    while done < draws:
        m = min(b, draws - done)
        z = _noise(tree, levels, (k, m), rng, key, done, draws)       # (n, k, m)
        y = (base[:, :, None] + z).reshape(n, k * m)
        out = _run(tree, steps, y, variance, k).reshape(n, k, m)
        d = out - p2[:, :, None]
        ext.add(d if jitter is None else d + jitter.uniform(-0.5, 0.5, d.shape), raw=d)
        done += m
    return ext


def _coverage_text(cs: tuple[float, ...], js: dict[float, int], draws: int, randomized: bool) -> dict[float, str]:
    if randomized:
        return {c: f"exact quantiles: {c:g}; simulation: {1 - 2 * js[c] / (draws + 1):g} in expectation "
                   "(order statistics; randomized at the integer lattice)" for c in cs}
    return {c: f"exact quantiles: >= {c:g}; simulation: {1 - 2 * js[c] / (draws + 1):g} in expectation "
               "(order statistics; >= with ties)" for c in cs}


def _linear_intervals(tree: Tree, levels: list[_Level], steps: list, mvar: np.ndarray, x2: np.ndarray,
                      cs: tuple[float, ...], js: dict[float, int], draws: int, sim_seed: int | None,
                      jitter: np.random.Generator | None, ledger: Ledger, key_chain: tuple | None = None):
    """Intervals ``x2 - error quantiles`` of a linear unbiased chain: order statistics of the
    simulated errors, exact quantiles where a node's estimate is its own measurement."""
    n = tree.n_nodes
    jmax = max(js.values())
    jset = tuple(sorted(set(js.values())))
    key = (_CACHE_KEY, ledger.mechanism, tuple((lv.depth, lv.budget, lv.sensitivity) for lv in levels),
           key_chain or (tuple(ledger.postprocess), repr(ledger.postprocess_params)), draws, jset, sim_seed,
           jitter is not None)
    cached = tree.cache.get(key)
    if cached is None:  # keep only the order statistics asked for: O(n) per j
        ext, same = _simulate_linear(tree, levels, steps, mvar, draws, jmax, sim_seed, jitter)
        cached = ({j: ext.order_stats(j) for j in jset}, same)
        tree.cache[key] = cached
    stats, same = cached
    method = np.full(n, "simulation", dtype=object)
    low, high = {}, {}
    for c, j in js.items():
        elo, ehi = stats[j]
        lo_off, hi_off = elo.copy(), ehi.copy()       # error quantiles (n,)
        for lv in levels:
            hw = exact_halfwidth(lv.mechanism, lv.budget, lv.sensitivity, c, randomized=jitter is not None)
            if hw is None:
                continue
            sel = np.zeros(n, bool)
            sel[lv.index] = True
            sel &= same
            lo_off[sel], hi_off[sel] = -hw, hw
            method[sel] = "exact"
        low[c] = x2 - hi_off[:, None]
        high[c] = x2 - lo_off[:, None]
    return low, high, method


def release_intervals(tree: Tree, estimate: Estimate, measurements: Estimate, ledger: Ledger, *,
                      confidence: float | Sequence[float] = 0.9, draws: int = DEFAULT_DRAWS,
                      seed: int | None = None, randomize: bool = True, nonlinear: str = "bound") -> Intervals:
    """Intervals with nominal coverage for the released values (see the module docstring).

    Parameters
    ----------
    tree, estimate, measurements, ledger : the parts of a :class:`hierdp.ReleaseResult`
        (``estimate`` and ``measurements`` in external order).
    confidence : one level c or several, each in (0, 1).
    draws : R, the number of simulated noise vectors (cost O(R·n)); needs
        ``R >= 2/(1-c) - 1``. Ignored where every node is exact.
    seed : seed of the simulation's randomness (public noise only, no privacy role);
        ``None`` uses the secure source, or the release's seed for a seeded release so
        that its tables are reproducible.
    randomize : with integer noise, add a public uniform U(-1/2, 1/2) to the estimate
        and to every simulated error (a randomized interval for a lattice law, Stevens
        1950): coverage exactly c instead of >= c with a lattice step of slack. With
        ``False`` the intervals are deterministic and conservative.
    nonlinear : after ``nonneg``/``round``: ``"bound"`` (default; the linear (BLUE)
        estimate's interval of the same measurements, ∩ [0, inf), holding the released
        value: coverage >= c, no std) or ``"bootstrap"`` (parametric bootstrap through
        the chain: std = bootstrap RMSE; coverage not guaranteed, poor where counts sit
        at 0 — see benchmarks/bench_coverage.py).
    """
    cs = _check_confidence(confidence)
    if nonlinear not in ("bound", "bootstrap"):
        raise DataError(f"nonlinear must be 'bound' or 'bootstrap', got {nonlinear!r}")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise DataError(f"draws must be a positive integer (e.g. 999), got {draws!r}")
    draws = int(draws)
    x = np.asarray(tree.to_internal(estimate.values), dtype=np.float64)
    n = tree.n_nodes
    shape = x.shape
    x2 = x.reshape(n, -1)
    k = x2.shape[1]
    mvar = None if measurements.variance is None else np.asarray(tree.to_internal(measurements.variance), float)
    levels, reason = _noise_law(ledger)
    if levels is not None and (mvar is None or mvar.ndim != 1):
        levels, reason = None, "the measurements carry no per-node variances"
    steps = resolve_postprocessors(ledger_chain(ledger.postprocess, ledger.postprocess_params))
    consistent_chain = any(s.consistent for s in steps)
    integer = levels is not None and all(lv.mechanism.integer for lv in levels)
    nonneg_chain = any(s.name in _NONNEG_STEPS for s in steps)
    method = np.full(n, "normal", dtype=object)
    low: dict[float, np.ndarray] = {}
    high: dict[float, np.ndarray] = {}
    summary: dict[str, Any] = {"confidence": cs if len(cs) > 1 else cs[0]}
    evar = None if estimate.variance is None else np.asarray(tree.to_internal(estimate.variance), float)
    std2 = np.full((n, k), np.nan) if evar is None else np.sqrt(np.broadcast_to(evar.reshape(n, -1), (n, k))).copy()

    linear = levels is not None and estimate.linear and _is_unbiased(tree, steps, mvar, consistent_chain)
    if levels is not None:
        for lv in levels:
            lv.index = tree.internal.level_index[lv.depth]
        js = {c: order_index(c, draws) for c in cs}
        jmax = max(js.values())
        sim_seed = seed if seed is not None else ledger.seed
        jitter = None
        if randomize and integer:
            jitter = np.random.default_rng(None if sim_seed is None else [sim_seed, 1])
            x2 = x2 + jitter.uniform(-0.5, 0.5, x2.shape)   # NaN stays NaN
        if linear:
            low, high, method = _linear_intervals(tree, levels, steps, mvar, x2, cs, js, draws, sim_seed, jitter,
                                                  ledger)
            summary["method"] = "exact quantiles of one measurement where the estimate is one; elsewhere " \
                                f"simulation of the public noise law through the chain (R={draws})"
            summary["coverage"] = _coverage_text(cs, js, draws, jitter is not None)
            summary["randomized"] = jitter is not None
        elif nonlinear == "bound":
            # the truth is covered by the BLUE reference's interval (exact coverage, post-processing of
            # the same measurements), intersected with [0, inf) and widened to hold the released value
            ref = blue(tree, np.asarray(tree.to_internal(measurements.values), np.float64), mvar)
            xr2 = np.asarray(ref.values, np.float64).reshape(n, -1)
            if jitter is not None:
                xr2 = xr2 + jitter.uniform(-0.5, 0.5, xr2.shape)
            rlow, rhigh, method = _linear_intervals(tree, levels, [BLUE()], mvar, xr2, cs, js, draws, sim_seed,
                                                    jitter, ledger, key_chain=("blue",))
            method = np.where(method == "exact", "bound", "bound").astype(object)
            undetermined_ref = np.isinf(np.asarray(ref.variance, float)).reshape(n, -1)
            for c in cs:
                lo, hi = rlow[c], rhigh[c]
                if integer:
                    lo, hi = np.ceil(lo - 1e-9), np.floor(hi + 1e-9)
                if nonneg_chain:
                    lo = np.maximum(lo, 0.0)
                lo = np.where(undetermined_ref, -np.inf, lo)
                hi = np.where(undetermined_ref, np.inf, hi)
                low[c] = np.minimum(lo, x2)
                high[c] = np.maximum(hi, x2)
            std2 = np.full((n, k), np.nan)
            summary["method"] = "conservative bound after a non-linear step: the interval of the linear " \
                                "(BLUE) estimate of the same measurements, intersected with [0, inf) when the " \
                                f"chain asserts non-negative counts, widened to hold the released value (R={draws})"
            summary["coverage"] = {c: f">= {c:g} (that of the linear estimate's interval)" for c in cs}
            summary["std"] = "not reported: after a non-linear step the error of the released value has no " \
                             "closed form (nonlinear='bootstrap' gives a bootstrap RMSE, coverage not guaranteed)"
        else:
            ext = _simulate_bootstrap(tree, levels, steps, mvar, x, draws, jmax, sim_seed, jitter)
            method[:] = "bootstrap"
            for c, j in js.items():
                dlo, dhi = ext.order_stats(j)
                low[c] = x2 - dhi
                high[c] = x2 - dlo
            std2 = np.sqrt(ext.sumsq / ext.count)
            summary["method"] = f"parametric bootstrap through the chain (plug-in: the released values, R={draws})"
            summary["coverage"] = {c: "not guaranteed after a non-linear step; measured in "
                                      "benchmarks/bench_coverage.py" for c in cs}
            summary["std"] = "bootstrap root mean squared error (bias included), not the linear estimate's std"
        summary["draws"] = draws
    else:
        from scipy.stats import norm

        for c in cs:
            z = float(norm.ppf(0.5 + c / 2))
            low[c] = x2 - z * std2
            high[c] = x2 + z * std2
        summary["method"] = f"normal approximation estimate ± z·std ({reason}); coverage not guaranteed"
        summary["coverage"] = {c: "unknown" for c in cs}
        if not estimate.linear:
            summary["std"] = "std of the linear estimate before the non-linear steps (not the error of the " \
                             "released values)"
    # nodes without an estimate (unmeasured, no consistent step) or undetermined (variance inf)
    missing = ~np.isfinite(x2)
    undetermined = np.isinf(std2) & ~missing if linear or levels is None else np.zeros_like(missing)
    for c in cs:
        lo, hi = low[c], high[c]
        if integer:
            lo, hi = np.ceil(lo - 1e-9), np.floor(hi + 1e-9)
        if nonneg_chain:
            lo = np.maximum(lo, 0.0)
        if nonneg_chain or integer:  # the released value stays inside its interval
            xr = x.reshape(n, -1)
            lo, hi = np.minimum(lo, xr), np.maximum(hi, xr)
        lo = np.where(undetermined, -np.inf, np.where(missing, np.nan, lo))
        hi = np.where(undetermined, np.inf, np.where(missing, np.nan, hi))
        low[c] = tree.to_external(lo.reshape(shape))
        high[c] = tree.to_external(hi.reshape(shape))
    method = np.where(missing.all(axis=1), "none", method)
    return Intervals(low=low, high=high, std=tree.to_external(std2.reshape(shape)), method=tree.to_external(method),
                     draws=draws if levels is not None else 0, summary=summary)
