"""Exact samplers for the discrete Laplace and discrete Gaussian distributions.

Implements Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential
Privacy": Algorithm 1 (Bernoulli(exp(-γ)) for rational γ), Algorithm 2 (discrete Laplace
with rational parameter) and Algorithm 3 (discrete Gaussian with rational σ², available
as ``method="cks"``). The default discrete Gaussian sampler is an exact rejection sampler
with a narrow-block proposal (see :class:`_Zig`): ~97% of its candidates are accepted
instead of ~76% with CKS's discrete Laplace proposal. Every coin
is decided exactly: by integer arithmetic on random bits, by comparison with certified
binary expansions, or (the discrete Gaussian acceptance) by a floating-point comparison
only when a proven error margin makes it right, with an exact decimal fallback otherwise.
The output distribution is exactly the target one.

This module holds the parameters, the certified tables and the drivers; the compiled
kernels they run are in :mod:`hierdp.mechanisms._sampler_kernel` (the resumable state
machine that spends a batch of random words a few bits at a time) and
:mod:`hierdp.mechanisms._keyed_kernels` (keyed draws, each on its own words). The drivers
take words from a :class:`hierdp.rng.RandomSource` (:func:`_run`) or from a
:class:`hierdp.keyed_noise.NoiseKey` (:func:`_run_keyed`), resume the kernel when it
pauses, and decide exactly what it leaves undecided.

Integers are int64. A draw whose intermediate values would exceed 2**62 raises
``OverflowError`` instead of wrapping; for the parameter ranges accepted below this
needs an event of probability below exp(-2**20).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from decimal import ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction

import numpy as np

from hierdp._kernels import jit as _jit
from hierdp._kernels.jit import for_size
from hierdp._kernels.memory import large_empty
from hierdp._kernels.threads import run_pieces
from hierdp.errors import BudgetError
from hierdp.keyed_noise import (
    KIND_EXTENSION,
    KIND_SEGMENT,
    KeyedStream,
    NoiseKey,
    SegmentStream,
    nonce_word,
    segment_stream,
    segment_words,
)
from hierdp.mechanisms import _keyed_small
from hierdp.mechanisms._keyed_kernels import _dg_bounds, _fill_keyed_common
from hierdp.mechanisms._sampler_kernel import (
    _GF,
    _LIMIT,
    _NSTATE,
    _ST_OVERFLOW,
    _ST_PRECISION,
    _ST_UNDECIDED,
    _YB,
    _ZA,
    _ZS,
    _fill,
)
from hierdp.rng import RandomSource, reserve_words

__all__ = [
    "DLapParams", "DGaussParams", "dlap_params", "dgauss_params",
    "discrete_laplace", "discrete_gaussian", "sample_discrete_laplace", "sample_discrete_gaussian",
    "discrete_laplace_variance", "discrete_gaussian_variance", "rational_scale", "PRECISION_BITS",
    "sample_discrete_laplace_keyed", "sample_discrete_gaussian_keyed",
]

#: discrete Laplace scales are rounded (towards more noise) by less than 2**-PRECISION_BITS
PRECISION_BITS = 20
_WORD_BATCH = 1 << 21  # random words requested from the source at a time
_TABLE_WORDS = 2  # initial precision (64-bit words) of tabulated Bernoulli parameters
_ACCEPT_FUZZ = 1e-12  # relative error margin (x (1 + γ)) of the float fast path of CKS Alg. 3
_FAST_PATH = True  # byte-wide digit comparisons when the batch has words to spare
_DG_METHOD = "blocks"  # default discrete Gaussian sampler: "blocks" or "cks"
_CHUNK_DRAWS = 1 << 16  # requests above this are drawn in chunks of this many draws (see _run)
_CHUNK_GROUP = 32  # chunks whose words are taken from the source together
#: keyed discrete Laplace requests of SMALL_NUMPY_MIN to SMALL_INPUT draws run as numpy passes
#: (False: the kernel); below SMALL_NUMPY_MIN the interpreted kernel is cheaper (~20 µs a draw
#: against a fixed ~1 ms of numpy calls)
SMALL_NUMPY = True
SMALL_NUMPY_MIN = 64


def _to_words(x: Decimal, err: Decimal, nwords: int) -> list[int] | None:
    """The first 64·nwords bits of x in (0, 1), or None if ``x ± err`` straddles a boundary."""
    scale = Decimal(2) ** (64 * nwords)
    lo = int(((x - err) * scale).to_integral_value(rounding=ROUND_FLOOR))
    hi = int(((x + err) * scale).to_integral_value(rounding=ROUND_FLOOR))
    if lo != hi or lo < 0:
        return None
    return [(lo >> (64 * (nwords - 1 - w))) & ((1 << 64) - 1) for w in range(nwords)]


@functools.lru_cache(maxsize=256)
def _table(s: int, t: int, jbits: int, g0: int, nwords: int) -> np.ndarray:
    """Rows: p_j = 1/(1 + e^{(s/t) 2^j}) for j < jbits, then e^{-g0}, then e^{-1};
    each as ``nwords`` 64-bit words of its binary expansion (exact: certified by an
    error bound at a precision 40 digits beyond what the bits need)."""
    digits = int(64 * nwords * 0.30103) + 40
    while True:
        with localcontext() as ctx:
            ctx.prec = digits
            err = Decimal(10) ** (-(digits - 10))
            vals = [1 / (1 + (Decimal(s) * (Decimal(2) ** j) / Decimal(t)).exp()) for j in range(jbits)]
            vals.append((-Decimal(g0)).exp() if g0 > 0 else Decimal(1) / 2)  # row unused if g0 = 0
            vals.append((-Decimal(1)).exp())
            rows = [_to_words(v, err, nwords) for v in vals]
        if all(r is not None for r in rows):
            arr = np.array(rows, dtype=np.uint64).reshape(len(rows), nwords)
            return arr.view(np.int64)
        digits *= 2


@functools.lru_cache(maxsize=256)
def _core(a_num: int, a_den: int) -> tuple[int, int, int, int, int]:
    """Split the geometric rate a = a_num/a_den: J bits, then a·2^J = gint + fnum/a_den."""
    j = 0
    while a_num * (1 << j) < 8 * a_den and j < 60:
        j += 1
    g_num = a_num << j
    gint, fnum = divmod(g_num, a_den)
    return j, min(gint, 8), gint, fnum, a_den


_NO_CODES = np.zeros(0, np.int8)
_CODE_BITS = 13  # rounds of up to this many bits are tabulated (8 KiB): discrete Laplace with J <= 1


@functools.lru_cache(maxsize=64)
def _round_codes(a_num: int, a_den: int) -> np.ndarray:
    """The outcome of :func:`~hierdp.mechanisms._keyed_kernels._dlap_common`'s round on every
    value of its ``8J + 5`` bits (a byte per digit, H's first nibble, the sign), as
    :func:`~hierdp.mechanisms._sampler_kernel._fill` reads them: the
    draw's value (-1, 0 or 1) when the round accepts, 2 when it rejects "-0" (the next
    round starts on the bits that follow), 3 when a byte or the nibble ties the table's
    first one or H >= 1 (the round reads on: not tabulated). Empty when rounds are wider
    than :data:`_CODE_BITS` (J >= 2) or H has no Bernoulli (``g0 = 0``)."""
    jbits, g0 = _core(a_num, a_den)[:2]
    need = 8 * jbits + 5
    if g0 <= 0 or need > _CODE_BITS:
        return _NO_CODES
    cb = _table(a_num, a_den, jbits, g0, _TABLE_WORDS)
    t = np.arange(1 << need, dtype=np.int64)
    y = np.zeros_like(t)
    tie = np.zeros(t.shape, dtype=bool)
    for j in range(jbits):
        c8 = (int(cb[j, 0]) >> 56) & 255
        r8 = t & 255
        t = t >> 8
        tie |= r8 == c8
        y += (r8 < c8).astype(np.int64) << j
    c4 = (int(cb[jbits, 0]) >> 60) & 15
    r4 = t & 15
    b = (t >> 4) & 1
    codes = np.where(tie | (r4 <= c4), 3, np.where((b == 1) & (y == 0), 2, (y ^ -b) + b))
    codes = codes.astype(np.int8)
    codes.flags.writeable = False
    return codes


def _decide_below(u32: int, rng: RandomSource, value) -> bool:
    """Exactly decide U < v for U uniform on [u32/2**32, (u32+1)/2**32).

    ``value(prec)`` returns ``(v, err)`` as decimals with |v_true - v| <= err at ``prec``
    digits; U's further bits come from ``rng`` 64 at a time until U's interval lies on
    one side of [v - err, v + err] (the precision grows with the bits of U).
    """
    prefix, nbits, prec = u32, 32, 50
    while True:
        with localcontext() as ctx:
            ctx.prec = prec
            ctx.Emin = -(10 ** 12)
            v, err = value(prec)
            scale = Decimal(2) ** nbits
            lo, hi = Decimal(prefix) / scale, Decimal(prefix + 1) / scale
            if hi <= v - err:
                return True
            if lo >= v + err:
                return False
        prefix = (prefix << 64) | int(rng.words(1)[0])
        nbits += 64
        prec = max(2 * prec, int(nbits * 0.302) + 40)


def _accept_exact(c: int, den: int, u32: int, rng: RandomSource) -> bool:
    """Exactly decide U < exp(-c²/den) (CKS Alg. 3 acceptance) for U on the u32 prefix."""
    gamma_f = c * c / den

    def value(prec):
        v = (-(Decimal(c * c) / Decimal(den))).exp()
        return v, v * Decimal(int(gamma_f) + 2) * Decimal(10) ** (-(prec - 5)) + Decimal(10) ** (-(10 ** 11))

    return _decide_below(u32, rng, value)


class _Zig:
    """Block proposal for the discrete Gaussian (exact rejection sampling, mode 2).

    The magnitude m = |Y| gets the proposal weight h_b = H_b/2^k (k = 20) on block
    b = [b·w, (b+1)·w) for b < B, with H_b >= 2^k·exp(-(b w)²/2σ²) (certified round-up),
    and h_T·e^{-a(m - M0)} on the tail m >= M0 = B·w, with a <= M0/σ² (so that
    exp(-m²/2σ²) <= exp(-M0²/2σ²)·e^{-a(m - M0)}) and the tail's total weight W_T/2^k >=
    h_T/(1 - e^{-a}). The component (block, tail, or a padding slot up to a power of two)
    is chosen with an integer alias table (exact), the offset in a block is uniform, the
    tail offset is the discrete Laplace core with rate a (the body spans ``span`` = 12
    standard deviations, so the tail is almost never used). The candidate is accepted with
    probability exp(-m²/2σ²)/h_b, resp. exp(-m²/2σ² + a(m - M0))/(W_T(1 - e^{-a})/2^k),
    which is <= 1 by construction; a random sign with the "-0" rejection makes it two-sided.
    Blocks are narrow (w <= 12σ/2048, at least 1), so about 97% or more of the candidates
    are accepted.
    """

    K = 20

    def __init__(self, p: DGaussParams, span: float = 12.0) -> None:
        s2 = p.sigma2
        sigma = math.sqrt(float(s2))
        self.sigma2 = s2
        self.L = max(0, math.ceil(math.log2(span * sigma / 2048))) if span * sigma > 2048 else 0
        self.w = 1 << self.L
        self.B = math.ceil(span * sigma / self.w) + 1
        self.M0 = self.B * self.w
        k = self.K
        with localcontext() as ctx:
            ctx.prec = 60
            ctx.Emin = -(10 ** 12)
            d2 = Decimal(s2.numerator) / Decimal(s2.denominator) * 2
            H = [int((-(Decimal(b * self.w) ** 2) / d2).exp() * (1 << k)) + 2 for b in range(self.B)]
            # with w = 1 the zero is output without a sign (no "-0" rejection), so its
            # proposal weight is halved: W_0 = 2^(k-1) + 1 and it is accepted w.p. 2^(k-1)/W_0
            self.zero_direct = self.w == 1
            if self.zero_direct:
                H[0] = (1 << (k - 1)) + 1
            self.a = Fraction(math.floor(Fraction(self.M0) / s2 * (1 << 60)), 1 << 60)
            if self.a <= 0:
                raise ValueError("discrete Gaussian too wide for the block sampler")
            ad = Decimal(self.a.numerator) / Decimal(self.a.denominator)
            HT = int((-(Decimal(self.M0) ** 2) / d2).exp() * (1 << k)) + 2
            one_minus = -((-ad).exp() - 1)
            self.WT = int(Decimal(HT) / one_minus) + 2
            hinv = [float((1 << k) / Decimal(h)) for h in H] + [float((1 << k) / (Decimal(self.WT) * one_minus))]
            if self.zero_direct:
                hinv[0] = float(Decimal(1 << (k - 1)) / Decimal(H[0]))
        self.H = H
        weights = [self.w * h for h in H] + [self.WT]
        total = sum(weights)
        q = total.bit_length()
        ncomp = len(weights) + 1
        pb = max(1, (ncomp - 1).bit_length())
        n = 1 << pb
        cap = 1 << (q - pb)
        mass = weights + [(1 << q) - total] + [0] * (n - ncomp)
        thr = [0] * n
        alias = list(range(n))
        small = [i for i in range(n) if mass[i] < cap]
        large = [i for i in range(n) if mass[i] >= cap]
        while small and large:
            si, li = small.pop(), large.pop()
            thr[si], alias[si] = mass[si], li
            mass[li] -= cap - mass[si]
            (small if mass[li] < cap else large).append(li)
        for i in small + large:
            thr[i] = cap
        self.zi = np.array([pb, q - pb, self.L, self.w, self.B, self.M0, int(self.zero_direct)], dtype=np.int64)
        self.zf = np.array([1.0 / (2.0 * float(s2)), float(self.a)], dtype=np.float64)
        self.thr = np.array(thr, dtype=np.int64)
        self.alias = np.array(alias, dtype=np.int64)
        self.hinv = np.array(hinv, dtype=np.float64)
        self.probs = (weights, 1 << q)  # for tests: exact component masses
        self._bounds: dict[float, tuple[np.ndarray, np.ndarray]] = {}

    def bounds(self, fuzz: float) -> tuple[np.ndarray, np.ndarray]:
        """The kernel's acceptance bounds per body magnitude (blocks one wide; cached per ``fuzz``)."""
        got = self._bounds.get(fuzz)
        if got is None:
            got = self._bounds[fuzz] = _dg_bounds(self.zi, self.hinv, float(self.zf[0]), fuzz)
        return got

    def accept_exact(self, m: int, comp: int, u32: int, rng: RandomSource) -> bool:
        """Exactly decide U < exp(-γ)/h for a candidate left undecided by the kernel."""
        s2 = self.sigma2
        k = self.K
        tail = comp == self.B
        gamma = Fraction(m * m) / (2 * s2)
        if tail:
            gamma -= self.a * (m - self.M0)

        def value(prec):
            g = Decimal(gamma.numerator) / Decimal(gamma.denominator)
            e = (-g).exp()
            if tail:
                ad = Decimal(self.a.numerator) / Decimal(self.a.denominator)
                h = Decimal(self.WT) * (-((-ad).exp() - 1)) / Decimal(1 << k)
            elif comp == 0 and self.zero_direct:
                h = Decimal(self.H[0]) / Decimal(1 << (k - 1))
            else:
                h = Decimal(self.H[comp]) / Decimal(1 << k)
            v = e / h
            return v, v * (abs(g) + 10) * Decimal(10) ** (-(prec - 5)) + Decimal(10) ** (-(10 ** 11))

        return _decide_below(u32, rng, value)


@functools.lru_cache(maxsize=64)
def _zig(t: int, mm: int, bb: int) -> _Zig:
    return _Zig(DGaussParams(t, mm, bb))


_NO_ZIG = (np.zeros(7, dtype=np.int64), np.zeros(2), np.zeros(1, dtype=np.int64),
           np.zeros(1, dtype=np.int64), np.zeros(1))


class _Draws:
    """One run of the state machine over ``out`` (a whole request, or one chunk of it)."""

    __slots__ = ("out", "i", "st", "words", "nwords", "cb", "fetch", "slot")

    def __init__(self, out: np.ndarray, gauss: int, cb: np.ndarray) -> None:
        self.out, self.i, self.cb, self.nwords = out, 0, cb, _TABLE_WORDS
        self.st = np.zeros(_NSTATE, dtype=np.int64)
        self.st[0] = _ZA if gauss == 2 else _YB
        self.words = np.empty(0, dtype=np.int64)
        self.fetch: Callable[..., np.ndarray] | None = None  # words reserved, computed by the first step
        self.slot: np.ndarray | None = None  # where to compute them (a buffer re-used by later chunks)

    def need(self, words_per_draw: float) -> int:
        """Words to ask for when the batch is used up: the expected need of what is left."""
        return int(min(_WORD_BATCH, (self.out.shape[0] - self.i) * words_per_draw * 1.05 + 16))


def _run(gauss: int, a_num: int, a_den: int, dg: tuple[int, int, int], size: int,
         rng: RandomSource, words_per_draw: float, zig: _Zig | None = None, compiled: bool = False) -> np.ndarray:
    """``size`` draws. Up to :data:`_CHUNK_DRAWS` draws run as one stream of words; more
    run as chunks of :data:`_CHUNK_DRAWS` draws (each its own stream of fresh words, on
    up to ``hierdp.get_threads()`` threads). The words each chunk gets, and the order in
    which they are taken from ``rng``, depend on the chunks alone, never on the threads:
    the output is the same whatever the thread count."""
    size = int(size)
    out = large_empty(size, np.int64)
    if size == 0:
        return out
    jbits, g0, gint, fnum, fden = _core(a_num, a_den)
    mm, bb, den = dg
    cb = _table(a_num, a_den, jbits, g0, _TABLE_WORDS)
    zarrs = _NO_ZIG if zig is None else (zig.zi, zig.zf, zig.thr, zig.alias, zig.hinv)
    fill = _fill if compiled else for_size(_fill, size)  # the same draws either way

    def step(d: _Draws) -> tuple[int, int]:
        if d.fetch is not None:
            d.words, d.fetch = d.fetch(d.slot).view(np.int64), None
        return fill(gauss, d.out, d.i, jbits, g0, gint, fnum, fden, mm, bb, 1.0 / den, _ACCEPT_FUZZ,
                    _FAST_PATH, d.cb, d.words, 0, d.st, *zarrs)

    def settle(d: _Draws, status: int) -> bool:
        """Act on a stopped run (in chunk order: this may take words from ``rng``); True when done."""
        if status == _ST_OVERFLOW:
            raise OverflowError("an exact sampler hit an intermediate value above 2**62; "
                                "this should not happen for supported parameters (report it)")
        if status == _ST_PRECISION:  # a comparison needs more bits of a constant (p < 2**-100)
            d.nwords *= 2
            d.cb = _table(a_num, a_den, jbits, g0, d.nwords)
        elif status == _ST_UNDECIDED:
            if gauss == 2:
                ok = zig.accept_exact(int(d.st[19]), int(d.st[20]), int(d.st[17]), rng)
                d.st[0] = _ZS if ok else _ZA
            else:
                d.st[8] = int(_accept_exact(int(d.st[18]), den, int(d.st[17]), rng))
                d.st[0] = _GF
        elif d.i >= d.out.shape[0]:
            return True
        else:  # the batch of words is used up: the next one, from where the state machine stopped
            d.words = rng.words(d.need(words_per_draw)).view(np.int64)
            d.st[16] = 0
        return False

    if size <= _CHUNK_DRAWS:
        d = _Draws(out, gauss, cb)
        d.words = rng.words(d.need(words_per_draw)).view(np.int64)
        while True:
            d.i, status = step(d)
            if settle(d, status):
                return out

    # the first words of each chunk go to a slot of one buffer, re-used group after group
    # (fresh memory costs a page fault per 4 KiB, about as much as computing the words)
    slots = np.empty((_CHUNK_GROUP, _Draws(out[:_CHUNK_DRAWS], gauss, cb).need(words_per_draw)), np.uint64)
    for first in range(0, size, _CHUNK_DRAWS * _CHUNK_GROUP):  # a bounded group of chunks at a time
        group = [_Draws(out[a:min(a + _CHUNK_DRAWS, size)], gauss, cb)
                 for a in range(first, min(first + _CHUNK_DRAWS * _CHUNK_GROUP, size), _CHUNK_DRAWS)]
        for d, slot in zip(group, slots, strict=False):  # chunk c's words follow chunk c-1's in the stream
            d.fetch, d.slot = reserve_words(rng, d.need(words_per_draw)), slot
        while group:
            stops = run_pieces(step, group)
            left = []
            for d, (i, status) in zip(group, stops, strict=True):
                d.i = i
                if not settle(d, status):
                    left.append(d)
            group = left
    return out


# --------------------------------------------------------------------------------------
# keyed noise: every draw on its own words (hierdp.keyed_noise)
# --------------------------------------------------------------------------------------
_EXT_WORDS = 8  # one ChaCha20 block of a draw's extension stream at a time
_ST_EXT_BLOCK, _ST_ON_EXT = 21, 22  # st slots: next extension block; 1 once the draw left its segment
_KEYED_GROUP = 8  # keyed chunks whose segments are in memory at once (8 x 2**16 draws x W words: <= 16 MiB)
#: keyed draws try their common path first (:func:`~hierdp.mechanisms._keyed_kernels._fill_keyed_common`;
#: False: the state machine only, the same values)
COMMON_PATH = True
#: words of consecutive segments computed at a time, then sampled while in cache (256 KiB)
_PIECE_WORDS = 1 << 15
_BOUNDS_MAX = 1 << 16  # body magnitudes whose acceptance bounds are tabulated (blocks one wide: sigma up to ~170)
_NO_BOUNDS = np.zeros(0, np.float64)

class _KeyedDraws:
    """One chunk of keyed draws: its outputs, global draw indices and state."""

    __slots__ = ("out", "draws", "i", "st", "cb", "nwords", "words", "slot", "ext", "stream", "ready")

    def __init__(self, out: np.ndarray, draws: np.ndarray, gauss: int, cb: np.ndarray, slot: np.ndarray) -> None:
        self.out, self.draws, self.i, self.cb, self.nwords, self.slot = out, draws, 0, cb, _TABLE_WORDS, slot
        self.st = np.zeros(_NSTATE, dtype=np.int64)
        self.st[0] = _ZA if gauss == 2 else _YB
        self.words: np.ndarray | None = None
        self.ext = np.zeros(_EXT_WORDS, dtype=np.int64)
        self.stream: SegmentStream | None = None  # consecutive draws: their segments piece by piece
        self.ready = 0  # draws whose segments are in ``words``


def _run_keyed(gauss: int, a_num: int, a_den: int, dg: tuple[int, int, int], draws: np.ndarray, key: NoiseKey,
               measurement: int, seg: int, zig: _Zig | None = None, attempt: int = 0,
               numpy_path: bool = True, words: np.ndarray | None = None) -> np.ndarray:
    """One draw per global draw index in ``draws``, each on its own keyed words (see
    :mod:`hierdp.keyed_noise`): the output for an index is the same whatever the other
    indices, their order, the chunking and the threads. Chunks of :data:`_CHUNK_DRAWS`
    draws run on up to ``hierdp.get_threads()`` threads. Discrete Laplace requests of up
    to :data:`hierdp._kernels.jit.SMALL_INPUT` draws run as numpy passes
    (:mod:`hierdp.mechanisms._keyed_small`; :data:`SMALL_NUMPY`), the same draws.
    ``words``: the draws' segments when the caller has them already (one chunk only)."""
    if not isinstance(key, NoiseKey):
        raise TypeError(f"keyed noise needs a NoiseKey, got {type(key).__name__}")
    draws = np.ascontiguousarray(draws, dtype=np.int64)
    size = int(draws.size)
    out = large_empty(size, np.int64)
    if size == 0:
        return out
    if words is not None and size > _CHUNK_DRAWS:
        words = None
    n0 = nonce_word(KIND_SEGMENT, measurement, attempt)
    n0x = nonce_word(KIND_EXTENSION, measurement, attempt)
    jbits, g0, gint, fnum, fden = _core(a_num, a_den)
    mm, bb, den = dg
    cb = _table(a_num, a_den, jbits, g0, _TABLE_WORDS)
    if (numpy_path and SMALL_NUMPY and SMALL_NUMPY_MIN <= size <= _jit.SMALL_INPUT and _keyed_small.usable(gauss, g0)
            and not _jit.prefer_compiled(_fill_keyed_common)):
        # numpy passes over all draws; the few that leave the common path go through the
        # kernel (a keyed draw's value does not depend on the others): the same draws
        seg_words = segment_words(key, n0, draws, seg)
        out, hard = _keyed_small.dlap_keyed_small(seg_words, size, seg, jbits, g0, cb)
        if hard.any():  # their segments are in hand: the kernel does not compute them again
            out[hard] = _run_keyed(gauss, a_num, a_den, dg, draws[hard], key, measurement, seg, zig, attempt,
                                   numpy_path=False, words=seg_words.reshape(size, seg)[hard].reshape(-1))
        return out
    zarrs = _NO_ZIG if zig is None else (zig.zi, zig.zf, zig.thr, zig.alias, zig.hinv)
    fill = for_size(_fill_keyed_common, size)
    keyw = key._words32
    # the common path (straight-line, the same values): discrete Laplace on the fast path's
    # reads, the block discrete Gaussian; its acceptance bounds tabulated for blocks one wide
    common = COMMON_PATH and ((gauss == 0 and g0 > 0 and _FAST_PATH) or gauss == 2)
    zlo = zhi = _NO_BOUNDS
    codes = _round_codes(a_num, a_den) if common and gauss == 0 else _NO_CODES
    if (common and gauss == 2 and zig is not None and int(zig.zi[3]) == 1 and int(zig.zi[5]) <= _BOUNDS_MAX
            and size > _jit.SMALL_INPUT):  # (a small request runs interpreted: no table to compile)
        zlo, zhi = zig.bounds(_ACCEPT_FUZZ)

    def step(d: _KeyedDraws) -> tuple[int, int]:
        n = d.out.shape[0]
        if d.words is None:
            dd = d.draws
            if words is None and n > 1 and int(dd[-1]) - int(dd[0]) == n - 1 and bool((np.diff(dd) == 1).all()):
                d.stream = segment_stream(key, n0, int(dd[0]), n, seg)
            if d.stream is None:
                d.words = (segment_words(key, n0, dd, seg, out=d.slot) if words is None
                           else words[: n * seg]).view(np.int64)
                d.ready = n
            else:
                d.words = d.slot[: n * seg].view(np.int64)
        while True:
            if d.ready == d.i < n:  # the next piece of consecutive segments, sampled while in cache
                stop = min(n, d.ready + max(1, _PIECE_WORDS // seg))
                d.stream.next_into(d.slot[d.ready * seg: stop * seg])
                d.ready = stop
            i, status = fill(gauss, common, d.out[: d.ready], d.i, jbits, g0, gint, fnum, fden, mm, bb, 1.0 / den,
                             _ACCEPT_FUZZ, _FAST_PATH, d.cb, d.words, seg, d.st, *zarrs, keyw, n0x, d.draws, d.ext,
                             zlo, zhi, codes)
            d.i = i
            if status != 0 or i >= n:
                return i, status

    def settle(d: _KeyedDraws, status: int) -> bool:
        st = d.st
        if status == _ST_OVERFLOW:
            raise OverflowError("an exact sampler hit an intermediate value above 2**62; "
                                "this should not happen for supported parameters (report it)")
        if status == _ST_PRECISION:
            d.nwords *= 2
            d.cb = _table(a_num, a_den, jbits, g0, d.nwords)
            return False
        if status == _ST_UNDECIDED:  # more bits of U, from the draw's own extension stream
            if st[_ST_ON_EXT] == 0:
                st[_ST_ON_EXT], st[_ST_EXT_BLOCK] = 1, 0
            src = KeyedStream(key, n0x, int(d.draws[d.i]), block=int(st[_ST_EXT_BLOCK]))
            if gauss == 2:
                ok = zig.accept_exact(int(st[19]), int(st[20]), int(st[17]), src)
                st[0] = _ZS if ok else _ZA
            else:
                st[8] = int(_accept_exact(int(st[18]), den, int(st[17]), src))
                st[0] = _GF
            st[_ST_EXT_BLOCK] = src.block
            st[16] = _EXT_WORDS  # the extension block in hand is not reused: the next one comes
            return False
        return d.i >= d.out.shape[0]

    # chunks in hand at a time: their segments (W words a draw) are computed into re-used slots
    group_size = 1 if size <= _CHUNK_DRAWS else _KEYED_GROUP
    slots = np.empty((group_size, min(size, _CHUNK_DRAWS) * seg), np.uint64)
    for first in range(0, size, _CHUNK_DRAWS * group_size):
        group = [_KeyedDraws(out[a:min(a + _CHUNK_DRAWS, size)], draws[a:min(a + _CHUNK_DRAWS, size)], gauss, cb,
                             slot)
                 for a, slot in zip(range(first, min(first + _CHUNK_DRAWS * group_size, size), _CHUNK_DRAWS), slots,
                                    strict=False)]
        while group:
            stops = run_pieces(step, group) if len(group) > 1 else [step(group[0])]
            left = []
            for d, (i, status) in zip(group, stops, strict=True):
                d.i = i
                if not settle(d, status):
                    left.append(d)
            group = left
    return out


# --------------------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------------------
def _as_fraction(x: float | int | Fraction, name: str) -> Fraction:
    if isinstance(x, Fraction):
        f = x
    else:
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) \
                or not math.isfinite(float(x)):
            raise ValueError(f"{name} must be a finite number, got {x!r}")
        f = Fraction(float(x)) if isinstance(x, (float, np.floating)) else Fraction(int(x))
    if f <= 0:
        raise ValueError(f"{name} must be positive, got {x!r}")
    return f


class DLapParams:
    """Discrete Laplace with P(y) ∝ exp(-|y|·s/t): the rational ``1/scale = s/t``."""

    __slots__ = ("s", "t")

    def __init__(self, s: int, t: int) -> None:
        if not (0 < s < _LIMIT and 0 < t < _LIMIT):
            raise ValueError("discrete Laplace parameters out of range")
        self.s, self.t = int(s), int(t)

    @property
    def scale(self) -> Fraction:
        return Fraction(self.t, self.s)

    def __repr__(self) -> str:
        return f"DLapParams(scale={self.t}/{self.s}≈{self.t / self.s:.6g})"


def dlap_params(scale: float | Fraction) -> DLapParams:
    """Exact parameters for the discrete Laplace with scale at least ``scale``.

    For ``scale <= 2**20``, ``1/scale`` is rounded *down* to ``s / 2**m`` with
    ``s >= 2**20``; above, ``scale`` is rounded *up* to an integer ``t`` (``s = 1``). Either
    way the noise is never smaller than asked and the relative rounding is below 2**-20.
    Scales from 2**-30 to 2**40 are supported.
    """
    sc = _as_fraction(scale, "scale")
    if not (Fraction(1, 1 << 30) <= sc <= (1 << 40)):
        raise BudgetError(f"discrete Laplace scale {float(scale):g} (sensitivity / per-level epsilon) is outside the "
                          "supported [2**-30, 2**40]: choose a per-level epsilon between about 1e-12 and 1e9 "
                          "times the sensitivity")
    if sc > (1 << PRECISION_BITS):
        return DLapParams(1, math.ceil(sc))
    inv = 1 / sc
    m = max(0, PRECISION_BITS + 1 - math.floor(math.log2(inv)))
    t = 1 << m
    return DLapParams(math.floor(inv * t), t)


def rational_scale(scale: float) -> Fraction:
    """The exact rational scale the discrete Laplace sampler uses for ``scale`` (>= scale)."""
    return dlap_params(scale).scale


class DGaussParams:
    """Discrete Gaussian with σ² = t·mm/bb (t = ⌊σ⌋ + 1) as used by CKS Algorithm 3."""

    __slots__ = ("t", "mm", "bb")

    def __init__(self, t: int, mm: int, bb: int) -> None:
        self.t, self.mm, self.bb = int(t), int(mm), int(bb)
        if not (0 < self.t and 0 < self.mm and 0 < self.bb and self.den < _LIMIT):
            raise ValueError("discrete Gaussian parameters out of range")

    @property
    def den(self) -> int:
        return 2 * self.t * self.mm * self.bb

    @property
    def sigma2(self) -> Fraction:
        return Fraction(self.t * self.mm, self.bb)

    def __repr__(self) -> str:
        return f"DGaussParams(sigma2≈{float(self.sigma2):.6g})"


def dgauss_params(sigma2: float | Fraction) -> DGaussParams:
    """Exact parameters with σ²_used >= ``sigma2``; relative rounding below 2**-28 for
    σ >= 1 (below 1/mm, about 2**-30/σ, for smaller σ, where the noise is almost all 0).

    σ² is written as t·mm/bb with t = ⌊σ⌋ + 1 and bb a power of two, so that σ²/t = mm/bb
    and the acceptance exponent of CKS Alg. 3 is ``(|Y|·bb - mm)² / (2·t·mm·bb)``.
    Supported: 2**-40 <= σ² <= 2**58.
    """
    s2 = _as_fraction(sigma2, "sigma2")
    if not (Fraction(1, 1 << 40) <= s2 <= (1 << 58)):
        raise BudgetError(f"discrete Gaussian variance {float(sigma2):g} (sensitivity² / (2·per-level rho)) is outside "
                          "the supported [2**-40, 2**58]: choose a per-level rho between about 2e-18 and 5e11 "
                          "times the squared sensitivity")
    t = math.isqrt(math.floor(s2)) + 1
    sigma = math.sqrt(float(s2))
    j = max(0, 29 - math.floor(math.log2(sigma)))
    while True:
        bb = 1 << j
        mm = math.ceil(s2 * bb / t)
        if 2 * t * mm * bb < _LIMIT or j == 0:
            return DGaussParams(t, mm, bb)
        j -= 1


# --------------------------------------------------------------------------------------
# public samplers
# --------------------------------------------------------------------------------------
def _words_per_draw(a_num: int, a_den: int) -> float:
    jbits = _core(a_num, a_den)[0]
    tries = 2.0 if a_num > a_den else 1.2
    return ((jbits + 2) * 4.5 + 2) * tries / 64


def sample_discrete_laplace(params: DLapParams, size: int, rng: RandomSource, compiled: bool = False) -> np.ndarray:
    """``size`` exact draws from the discrete Laplace ``params`` (int64); ``compiled``: run
    the compiled kernel even for a few draws (the same draws; see :func:`_run`)."""
    return _run(0, params.s, params.t, (0, 1, 1), size, rng, _words_per_draw(params.s, params.t), compiled=compiled)


def sample_discrete_gaussian(params: DGaussParams, size: int, rng: RandomSource,
                             method: str | None = None, compiled: bool = False) -> np.ndarray:
    """``size`` exact draws from the discrete Gaussian ``params`` (int64).

    ``method``: ``"blocks"`` (default; the block proposal of :class:`_Zig`, ~97% accepted)
    or ``"cks"`` (CKS Alg. 3 with a discrete Laplace proposal, ~76% accepted).
    """
    method = method or _DG_METHOD
    if method == "cks":
        wpd = 2.0 * _words_per_draw(1, params.t) + 0.2
        return _run(1, 1, params.t, (params.mm, params.bb, params.den), size, rng, wpd, compiled=compiled)
    if method != "blocks":
        raise ValueError(f"unknown discrete Gaussian method {method!r}; expected 'blocks' or 'cks'")
    z = _zig(params.t, params.mm, params.bb)
    wpd = (int(z.zi[0] + z.zi[1]) + int(z.zi[2]) + 33) * 1.1 / 64 + 0.05
    return _run(2, z.a.numerator, z.a.denominator, (params.mm, params.bb, params.den), size, rng, wpd, z,
                compiled=compiled)


#: segment words per keyed draw (None: :func:`segment_length` decides; tests set 1 to force extensions)
_SEG_WORDS: int | None = None


def segment_length(gauss: int, a_num: int, a_den: int) -> int:
    """``W``, the words of a keyed draw's segment (:mod:`hierdp.keyed_noise`), a public
    function of the sampler and its parameters: enough that under 1e-3 of the draws need
    their extension stream (measured: benchmarks/bench_samplers.py), few enough that the
    keystream costs little next to the sampler."""
    if _SEG_WORDS is not None:
        return _SEG_WORDS
    if gauss == 2:
        return 4  # not reached: see _zig_segment_length
    # discrete Laplace (and CKS): by the number J of binary digits (measured extension
    # rates at eps = 0.1, 0.5, 1, 2, 4: 3.8e-4, 1.1e-4, 1.3e-4, 3.5e-5, 8.5e-5)
    jbits = _core(a_num, a_den)[0]
    return 3 if (jbits >= 6 or jbits <= 1) else 4


def _zig_segment_length(z: _Zig) -> int:
    """``W`` for the block sampler, by the share of its alias table's padding slot (a
    retry that costs a word): measured extension rates 0 to 1.1e-3 for σ from 1 to 100."""
    if _SEG_WORDS is not None:
        return _SEG_WORDS
    weights, total = z.probs
    pad = 1.0 - sum(weights) / total
    return 2 if pad < 0.1 else (3 if pad < 0.3 else 4)


def sample_discrete_laplace_keyed(params: DLapParams, key: NoiseKey, draws: np.ndarray, measurement: int = 0,
                                  attempt: int = 0) -> np.ndarray:
    """Exact discrete Laplace draws, one per global draw index in ``draws``, on keyed words
    (:mod:`hierdp.keyed_noise`): draw ``d``'s value depends only on ``key``,
    ``measurement``, ``attempt`` and ``d``."""
    return _run_keyed(0, params.s, params.t, (0, 1, 1), draws, key, measurement,
                      segment_length(0, params.s, params.t), attempt=attempt)


def sample_discrete_gaussian_keyed(params: DGaussParams, key: NoiseKey, draws: np.ndarray, measurement: int = 0,
                                   method: str | None = None) -> np.ndarray:
    """Exact discrete Gaussian draws on keyed words, one per global draw index in ``draws``
    (see :func:`sample_discrete_laplace_keyed`; ``method`` as for :func:`sample_discrete_gaussian`)."""
    method = method or _DG_METHOD
    if method == "cks":
        return _run_keyed(1, 1, params.t, (params.mm, params.bb, params.den), draws, key, measurement,
                          segment_length(1, 1, params.t))
    if method != "blocks":
        raise ValueError(f"unknown discrete Gaussian method {method!r}; expected 'blocks' or 'cks'")
    z = _zig(params.t, params.mm, params.bb)
    return _run_keyed(2, z.a.numerator, z.a.denominator, (params.mm, params.bb, params.den), draws, key, measurement,
                      _zig_segment_length(z), z)


def discrete_laplace(scale: float | Fraction, size: int, rng: RandomSource) -> np.ndarray:
    """Exact draws with P(Y = y) ∝ exp(-|y|/b), b = ``scale`` rounded up (see :func:`dlap_params`)."""
    return sample_discrete_laplace(dlap_params(scale), size, rng)


def discrete_gaussian(sigma2: float | Fraction, size: int, rng: RandomSource) -> np.ndarray:
    """Exact draws with P(Y = y) ∝ exp(-y²/(2σ²)), σ² = ``sigma2`` rounded up (see :func:`dgauss_params`)."""
    return sample_discrete_gaussian(dgauss_params(sigma2), size, rng)


def discrete_laplace_variance(scale: Fraction | float | DLapParams) -> float:
    """Variance 2q/(1-q)² of the discrete Laplace with q = exp(-1/scale)."""
    b = float(scale.scale if isinstance(scale, DLapParams) else scale)
    a = 1.0 / b
    q = math.exp(-a)
    one_minus_q = -math.expm1(-a)
    return 2.0 * q / (one_minus_q * one_minus_q)


def discrete_gaussian_variance(sigma2: Fraction | float | DGaussParams) -> float:
    """Variance of the discrete Gaussian N_Z(0, σ²): Σ y² e^{-y²/2σ²} / Σ e^{-y²/2σ²}.

    Summed exactly (in float) for σ < 64; above that it equals σ² to far below double
    precision (Poisson summation: the relative difference is about 4π²σ² e^{-2π²σ²}).
    The sums are :func:`math.fsum` (correctly rounded): ``np.dot`` went through BLAS, whose
    kernel (chosen per CPU by OpenBLAS) changed the last bit, and with it the weights of
    every later estimate and a rounding tie of a seeded release, from machine to machine.
    """
    s2 = float(sigma2.sigma2 if isinstance(sigma2, DGaussParams) else sigma2)
    if s2 >= 64.0**2:
        return s2
    ymax = int(math.ceil(math.sqrt(s2) * 40)) + 2
    y = np.arange(-ymax, ymax + 1, dtype=np.float64)
    w = np.exp(-(y * y) / (2.0 * s2))
    return math.fsum((y * y * w).tolist()) / math.fsum(w.tolist())
