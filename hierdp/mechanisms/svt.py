"""The sparse vector technique: ``Sparse`` with cutoff c (Ghazi et al. 2023, Lemma 17).

Lemma 17 uses Dwork & Roth (2014), Algorithm 2 ("Sparse") with δ = 0, ε-DP by their
Theorem 3.25: with σ = 2c/ε, draw a noisy threshold T̂ = τ + Lap(σ); for each query
f_i (sensitivity 1) draw ν_i ~ Lap(2σ) and answer ⊤ if f_i(x) + ν_i >= T̂, else ⊥; after
each ⊤ draw a fresh T̂; halt after the c-th ⊤.

hierdp's queries are integer counts, so the noise is the *discrete* Laplace (exact, CKS
Alg. 2) with scales rounded up: the AboveThreshold argument shifts T̂ by 1 and ν_i by 2,
both integers, and the discrete Laplace pmf ratio for an integer shift d at scale b is
exp(d/b), exactly as in the continuous proof; the comparison f + ν - (T̂ - τ) >= ⌈τ⌉ is
between integers, so there is no floating point at all.

Answers are coded as int8: 1 = ⊤, 0 = ⊥, -1 = not answered (halted).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from hierdp.errors import BudgetError, DataError
from hierdp.mechanisms._samplers import dlap_params, sample_discrete_laplace
from hierdp.mechanisms.base import check_budget
from hierdp.rng import RandomSource

__all__ = ["Sparse", "SparseBank", "sparse", "TOP", "BOTTOM", "HALTED"]

TOP, BOTTOM, HALTED = 1, 0, -1


def _check(cutoff: int, epsilon: float) -> tuple[int, float]:
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, np.integer)) or cutoff < 1:
        raise BudgetError(f"cutoff c must be an integer >= 1, got {cutoff!r}")
    return int(cutoff), check_budget(epsilon, "epsilon", "sparse")


def _params(cutoff: int, epsilon: float):
    sigma = Fraction(2 * cutoff) / Fraction(epsilon)
    return dlap_params(sigma), dlap_params(2 * sigma)


def _setup(threshold: float, cutoff: int, epsilon: float):
    """Checked ``(cutoff, epsilon, ceil(threshold))`` and the discrete Laplace parameters of
    the threshold and the query noise, for :class:`Sparse` and :class:`SparseBank`."""
    cutoff, epsilon = _check(cutoff, epsilon)
    if not math.isfinite(threshold):
        raise BudgetError("threshold must be finite")
    return (cutoff, epsilon, math.ceil(threshold), *_params(cutoff, epsilon))


class Sparse:
    """On-the-fly Sparse(x, {f_i}; c, τ, ε) for an adaptively chosen stream of integer queries.

    >>> from hierdp.rng import make_rng
    >>> s = Sparse(threshold=10, cutoff=1, epsilon=1.0, rng=make_rng(0))
    >>> s.query(-1000), s.query(1000), s.halted
    (False, True, True)
    """

    def __init__(self, threshold: float, cutoff: int, epsilon: float, rng: RandomSource) -> None:
        self.cutoff, self.epsilon, self._tau, self._pt, self._pq = _setup(threshold, cutoff, epsilon)
        self._rng = rng
        self.count = 0
        self._noisy_t = self._draw_threshold()

    def _draw_threshold(self) -> int:
        return self._tau + int(sample_discrete_laplace(self._pt, 1, self._rng)[0])

    @property
    def halted(self) -> bool:
        return self.count >= self.cutoff

    def query(self, value: int) -> bool:
        """Answer one query (its true value, an integer of sensitivity 1): True = ⊤."""
        if self.halted:
            raise BudgetError(f"Sparse has halted after {self.cutoff} positive answers (cutoff c)")
        if value != int(value):
            raise DataError("Sparse needs integer query values")
        nu = int(sample_discrete_laplace(self._pq, 1, self._rng)[0])
        if int(value) + nu >= self._noisy_t:
            self.count += 1
            if not self.halted:
                self._noisy_t = self._draw_threshold()
            return True
        return False


class SparseBank:
    """``size`` independent on-the-fly :class:`Sparse` instances with common (τ, c, ε),
    queried a batch at a time (one draw per queried instance, vectorised).

    Instance j behaves exactly as ``Sparse(threshold, cutoff, epsilon, rng)``: a noisy
    threshold drawn at creation, fresh query noise per answer, a fresh threshold after
    each ⊤ until the c-th. Used for forests (Ghazi et al. Cor. 25: one Sparse per tree,
    parallel composition over disjoint trees).

    >>> from hierdp.rng import make_rng
    >>> b = SparseBank(threshold=10, cutoff=1, epsilon=1.0, size=2, rng=make_rng(0))
    >>> b.query(np.array([0, 1]), np.array([-1000, 1000])).tolist(), b.halted.tolist()
    ([False, True], [False, True])
    """

    def __init__(self, threshold: float, cutoff: int, epsilon: float, size: int, rng: RandomSource) -> None:
        self.cutoff, self.epsilon, self._tau, self._pt, self._pq = _setup(threshold, cutoff, epsilon)
        self._rng = rng
        self.count = np.zeros(int(size), dtype=np.int64)
        self._noisy_t = self._tau + sample_discrete_laplace(self._pt, int(size), rng)

    @property
    def halted(self) -> np.ndarray:
        """Boolean per instance: the c-th ⊤ has been given."""
        return self.count >= self.cutoff

    def query(self, instances: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Answer one query (integer, sensitivity 1) for each of the distinct, not halted
        ``instances``; returns a boolean array (True = ⊤)."""
        inst = np.asarray(instances, dtype=np.int64)
        v = np.asarray(values)
        if inst.shape != v.shape or inst.ndim != 1:
            raise DataError("instances and values must be 1-D arrays of the same length")
        if v.size and not np.issubdtype(v.dtype, np.integer):
            if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
                raise DataError("SparseBank needs integer query values")
        if np.any(self.halted[inst]):
            raise BudgetError(f"an instance of SparseBank has halted after {self.cutoff} positive answers (cutoff c)")
        if np.unique(inst).size != inst.size:
            raise DataError("each instance answers at most one query per call")
        nu = sample_discrete_laplace(self._pq, inst.size, self._rng)
        top = v.astype(np.int64) + nu >= self._noisy_t[inst]
        hit = inst[top]
        self.count[hit] += 1
        redraw = hit[~self.halted[hit]]
        if redraw.size:
            self._noisy_t[redraw] = self._tau + sample_discrete_laplace(self._pt, redraw.size, self._rng)
        return top


def sparse(values: np.ndarray, threshold: float, cutoff: int, epsilon: float,
           rng: RandomSource) -> np.ndarray:
    """Answers of Sparse on a fixed query stream, vectorised; rows of a 2-D input are
    independent runs (used by audits). Returns int8 codes of the same shape."""
    cutoff, epsilon = _check(cutoff, epsilon)
    v = np.asarray(values)
    if v.size and not np.issubdtype(v.dtype, np.integer):
        if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
            raise DataError("sparse needs integer query values")
    v = v.astype(np.int64)
    one = v.ndim == 1
    v = np.atleast_2d(v)
    r, d = v.shape
    pt, pq = _params(cutoff, epsilon)
    noisy = v + sample_discrete_laplace(pq, v.size, rng).reshape(v.shape)
    tau = math.ceil(threshold)
    out = np.full((r, d), HALTED, dtype=np.int8)
    start = np.zeros(r, dtype=np.int64)
    active = np.arange(r)
    cols = np.arange(d)
    for _ in range(cutoff):
        if not active.size:
            break
        t_hat = tau + sample_discrete_laplace(pt, active.size, rng)
        rows = noisy[active]
        hit = (rows >= t_hat[:, None]) & (cols[None, :] >= start[active][:, None])
        any_hit = hit.any(axis=1)
        first = np.where(any_hit, hit.argmax(axis=1), d)
        # ⊥ from start to first-1, ⊤ at first
        span = (cols[None, :] >= start[active][:, None]) & (cols[None, :] < first[:, None])
        sub = out[active]
        sub[span] = BOTTOM
        hit_rows = np.flatnonzero(any_hit)
        sub[hit_rows, first[hit_rows]] = TOP
        out[active] = sub
        start[active] = first + 1
        active = active[any_hit & (first + 1 < d)]
    return out[0] if one else out
