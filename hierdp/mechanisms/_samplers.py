"""Exact, compiled samplers for the discrete Laplace and discrete Gaussian distributions.

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

Speed. The samplers are numba kernels that run over a batch of random 64-bit words taken
from a :class:`hierdp.rng.RandomSource` and spend them a few bits at a time:

* the magnitude of a discrete Laplace variable with P(y) ∝ e^{-a|y|} is written in
  binary, Y = Σ_{j<J} b_j 2^j + 2^J·H: the bits b_j are *independent* Bernoulli
  1/(1 + e^{a 2^j}) and H is geometric with ratio e^{-a 2^J} (J is the first power with
  a 2^J >= 8, so H is almost always 0). This replaces the rejection loop over a uniform
  U of CKS Alg. 2 by J + 1 coin flips;
* a Bernoulli(p) with a transcendental p (the 1/(1 + e^{a 2^j}), e^{-1}, e^{-8}) compares
  4-bit chunks of fresh random bits with the binary expansion of p and stops at the first
  difference. The expansions are computed with ``decimal`` to a certified precision
  (128 bits); in the event (probability below 2**-100) that a comparison needs more, the
  kernel pauses and resumes with a table twice as long, so the result stays exact;
* a Bernoulli(p) with rational ``p = num/den`` (the fractional part of the exponent,
  CKS Alg. 1) compares the binary expansion of ``p`` (long division) bit by bit;
* the discrete Gaussian acceptance U < exp(-γ) (CKS Alg. 3) compares 32 random bits with
  ``exp(-γ)`` computed in floating point, whose relative error is below 1e-15·(1 + γ); a
  margin of 1e-12·(1 + γ) is kept, and the rare straddling case (about 2**-31 of the
  candidates) is decided exactly in Python (rational γ, ``decimal`` exp, more random bits).

The kernel is a resumable state machine: when a batch of words runs out in the middle
of a draw it stores its state and the caller resumes it on fresh words, exactly as if
the stream were infinite (nothing is discarded, so nothing is biased). While the batch
has enough words left for the worst case of a draw's binary digits, the digits are
compared a byte at a time without any resumption point (the fast path); which path a
draw takes depends only on how many words earlier draws used, never on its own bits.

Keyed draws (:mod:`hierdp.keyed_noise`, what releases use): the same state machine with
``seg = W > 0`` runs each draw on its own segment of ``W`` words and starts it with no
bits left over from another draw; the fast path checks the segment's end before every
word and, if it is reached, hands the digit over to the slow path where it stopped (the
random bits compared so far were all equal to the constant's, so the digit's law is
unchanged). A draw whose segment runs out pauses (status 1) and :func:`_fill_keyed`
resumes it on its own extension stream, block after block, exactly as if its stream
were infinite; its exact decisions (status 4) take their extra bits from that stream
too. So every draw is a function of its own words, which depend on the key and the
draw's identity only. ``W`` (:func:`segment_length`) is a public function of the
parameters, chosen from measured word use so that under about 1e-3 of the draws need an
extension.

The common path (issue 30 item 4). A keyed draw starts afresh on its own segment, so
the state machine's path through it is a function of the segment's words alone. For the
discrete Laplace (its fast path: digits a byte at a time, ``H = 0``, the sign and the
"-0" rejection) and the block discrete Gaussian (body blocks, the acceptance decided in
floating point, its bounds tabulated per magnitude for blocks one wide by the same
floating-point operations), :func:`_dlap_common` and :func:`_dg_common` follow that path
straight through, many draws per call, reading every bit as the state machine reads it.
A draw that leaves the path (its segment used up, a digit tied past the table's first
word, ``H >= 1``, the Gaussian's tail, an undecided acceptance: about 1e-4 to 1e-3 of the
draws) is run by the state machine from its start on the same words. So every value is
the state machine's, draw for draw (tests/test_keyed_noise.py compares them, and the
pinned release digests did not move); only the dispatch and state stores of the machine
are saved: 1.5-3x less CPU per draw.

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

from hierdp._engine import jit as _jit
from hierdp._engine.jit import for_size
from hierdp._engine.jit import numba as nb
from hierdp._engine.memory import large_empty
from hierdp._engine.threads import run_pieces
from hierdp.errors import BudgetError
from hierdp.keyed_noise import (
    KIND_EXTENSION,
    KIND_SEGMENT,
    KeyedStream,
    NoiseKey,
    SegmentStream,
    chacha_block,
    nonce_word,
    segment_stream,
    segment_words,
)
from hierdp.mechanisms import _keyed_small
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
_LIMIT = 1 << 62
_CHUNK_DRAWS = 1 << 16  # requests above this are drawn in chunks of this many draws (see _run)
_CHUNK_GROUP = 32  # chunks whose words are taken from the source together
#: keyed discrete Laplace requests of SMALL_NUMPY_MIN to SMALL_INPUT draws run as numpy passes
#: (False: the kernel); below SMALL_NUMPY_MIN the interpreted kernel is cheaper (~20 µs a draw
#: against ~1 ms of numpy calls, measured: 10 draws 1.8 ms interpreted, 2.7 ms numpy a release)
SMALL_NUMPY = True
SMALL_NUMPY_MIN = 64



# --------------------------------------------------------------------------------------
# The compiled kernel: one resumable state machine (no helper calls, so no per-call
# reference counting of arrays). Each step either moves without randomness or takes a
# few bits; when the batch of words is used up it stores its state and returns, and the
# caller resumes it with fresh words (nothing is discarded or replayed).
#
# Phases. E0/EF: Bernoulli(exp(-gnum/gden)), 0 <= gnum <= gden, by CKS Alg. 1, result in
#   res, then go to phase ret. YB: the J binary digits of the discrete Laplace magnitude.
#   YH/YH1/YH2: its high part H (geometric). LS: sign and the "-0" rejection.
#   GC: discrete Gaussian acceptance (CKS Alg. 3) of the candidate. GF: output or retry.
# --------------------------------------------------------------------------------------
_E0, _EF, _YB, _YH, _YH1, _YH2, _LS, _GC, _GF, _ZA, _ZO, _ZT, _ZC, _ZS = range(14)
_NSTATE = 24  # st[16] = next word index, st[17:19] = pending exact acceptance
_ST_OK, _ST_WORDS, _ST_OVERFLOW, _ST_PRECISION, _ST_UNDECIDED = 0, 1, 2, 3, 4


@nb.njit(cache=True, nogil=True)
def _fill(gauss, out, start, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb, words, seg, st,
          zi, zf, zthr, zalias, zhinv):
    """Fill out[start:] with draws; returns (next index, status). State lives in ``st``.

    ``seg = 0``: one stream of words for all draws. ``seg > 0`` (keyed noise): draw ``i``
    has its own segment ``words[i·seg:(i+1)·seg]``; it starts with no bits left over and
    returns status 1 (state in ``st``) when its segment is used up, to be continued on its
    own extension words (:func:`_fill_keyed`).

    Magnitude of the discrete Laplace core: Y = Σ_{j<J} b_j 2^j + 2^J·H with independent
    b_j ~ Bernoulli(1/(1 + e^{a 2^j})) (rows 0..J-1 of ``cb``) and H geometric with
    P(H >= h) = e^{-a 2^J h}; a 2^J = gint + fnum/fden is tested as
    Bernoulli(e^{-g0}) (row J), gint - g0 Bernoulli(e^{-1}) (row J+1) and CKS Alg. 1 for
    the fraction. Each Bernoulli(p) with a tabulated p compares 4-bit chunks of fresh
    random bits with the binary expansion of p (first difference decides).
    """
    n = out.shape[0]
    nw = words.shape[0]
    if seg > 0:
        nw = (start + 1) * seg  # the end of the current draw's segment
    wcb = cb.shape[1]
    row_g0 = jbits
    row_e1 = jbits + 1
    pos = st[16]
    i = start
    phase = st[0]
    nbits = st[1]
    cur = st[2]
    k = st[3]
    rr = st[4]
    gnum = st[5]
    gden = st[6]
    ret = st[7]
    res = st[8]
    jj = st[9]
    ci = st[10]
    y = st[11]
    cnt = st[12]
    rfrac = st[13]
    h = st[14]
    sub = st[15]
    hmax = (_LIMIT >> jbits) - 1
    reserve = jbits * wcb + 2  # words the fast path may need for one draw's digits
    zpb = zi[0]
    ztb = zi[1]
    zl = zi[2]
    zw = zi[3]
    zb = zi[4]
    zm0 = zi[5]
    zdirect = zi[6]
    inv2s2 = zf[0]
    za = zf[1]
    zm = st[19]
    zc = st[20]
    ymax = _LIMIT // bb - mm
    status = 0
    while i < n:
        if phase == _YB:
            if fast and jj == 0 and ci == 0 and (seg > 0 or pos + reserve <= nw):
                # fast path (enough words reserved for the worst case of every digit):
                # each digit compares 8 random bits with the top byte of p_j, branch-free;
                # a tie (probability 1/256) continues that digit byte by byte. On a
                # segment (seg > 0) that runs out, the slow path takes over at the same
                # digit and byte (ho): the bits compared so far were all equal to p_j's.
                j = 0
                ho = False
                while j < jbits:
                    if nbits < 8:
                        if pos >= nw:
                            ho = True
                            ci = 0
                            break
                        cur = words[pos]
                        pos += 1
                        nbits = 64
                    r8 = cur & 255
                    cur >>= 8
                    nbits -= 8
                    c8 = (cb[j, 0] >> 56) & 255
                    if r8 == c8:
                        ci8 = 1
                        while r8 == c8:
                            if ci8 >= wcb * 8:
                                break
                            if nbits < 8:
                                if pos >= nw:
                                    ho = True
                                    break
                                cur = words[pos]
                                pos += 1
                                nbits = 64
                            r8 = cur & 255
                            cur >>= 8
                            nbits -= 8
                            c8 = (cb[j, ci8 >> 3] >> (56 - ((ci8 & 7) << 3))) & 255
                            ci8 += 1
                        if ho:
                            ci = 2 * ci8
                            break
                        if r8 == c8:  # table exhausted: hand over to the slow path
                            jj = j
                            ci = 2 * ci8
                            status = 3
                            break
                    y += np.int64(r8 < c8) << j
                    j += 1
                if status != 0:
                    break
                if not ho:
                    h = 0
                    phase = _YH
                    sub = 0
                    ci = 0
                    continue
                jj = j  # segment used up: on to the slow path at digit j
            # slow path (resumable anywhere): 4-bit chunks, one tabulated Bernoulli per bit
            while jj < jbits:
                if ci >= wcb * 16:
                    status = 3
                    break
                if nbits < 4:
                    if pos >= nw:
                        status = 1
                        break
                    cur = words[pos]
                    pos += 1
                    nbits = 64
                r4 = cur & 15
                cur >>= 4
                nbits -= 4
                c4 = (cb[jj, ci >> 4] >> (60 - ((ci & 15) << 2))) & 15
                if r4 == c4:
                    ci += 1
                    continue
                y += np.int64(r4 < c4) << jj  # branch-free: the digit is a fair-ish coin
                jj += 1
                ci = 0
            if status != 0:
                break
            h = 0
            phase = _YH
            sub = 0
            ci = 0
        elif phase == _YH or phase == _YH1:
            # sub = 0: Bernoulli(e^{-g0}); then cnt x Bernoulli(e^{-1})
            if phase == _YH and sub == 0:
                if g0 == 0:
                    sub = 1
                    cnt = gint
                    ci = 0
                    continue
                row = row_g0
            else:
                if cnt == 0:
                    # integer part survived: the fraction by CKS Alg. 1
                    if fnum == 0:
                        res = 1
                        phase = _YH2
                    else:
                        gnum = fnum
                        gden = fden
                        ret = _YH2
                        phase = _E0
                    continue
                row = row_e1
            if ci >= wcb * 16:
                status = 3
                break
            if nbits < 4:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            r4 = cur & 15
            cur >>= 4
            nbits -= 4
            c4 = (cb[row, ci >> 4] >> (60 - ((ci & 15) << 2))) & 15
            if r4 == c4:
                ci += 1
                continue
            ci = 0
            if r4 > c4:  # failure: H is complete
                y += h << jbits
                phase = _ZT if gauss == 2 else _LS
            elif sub == 0:
                sub = 1
                cnt = gint - g0
                phase = _YH1
            else:
                cnt -= 1
        elif phase == _LS:
            if nbits < 1:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            b = cur & 1
            cur >>= 1
            nbits -= 1
            if b == 1 and y == 0:
                phase = _YB
                jj = 0
                ci = 0
                continue
            y = (y ^ -b) + b  # branch-free sign: -y when b = 1
            if gauss:
                phase = _GC
            else:
                out[i] = y
                i += 1
                if seg > 0:  # the next draw starts on its own segment
                    pos = i * seg
                    nw = pos + seg
                    nbits = 0
                phase = _YB
                jj = 0
                ci = 0
                y = 0
        elif phase == _GC:
            # accept Y with probability exp(-γ), γ = (|Y|·bb - mm)² / den (CKS Alg. 3):
            # compare 32 fresh bits U with p = exp(-γ) evaluated in floating point with a
            # certified error margin; if U's interval straddles [p(1-e), p(1+e)] (probability
            # about 2**-31) pause with status 4: the caller decides exactly (rational γ,
            # decimal exp, more random bits) and resumes at _GF.
            ay = -y if y < 0 else y
            if ay > ymax:
                status = 2
                break
            c = ay * bb - mm
            if c < 0:
                c = -c
            cf = float(c)
            gf = cf * cf * inv_den
            if gf > 700.0:
                plo = 0.0
                phi = 1e-300
            else:
                pf = math.exp(-gf)
                epsr = fuzz * (1.0 + gf)
                plo = pf * (1.0 - epsr)
                phi = pf * (1.0 + epsr) + 1e-300
            if nbits < 32:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            u = cur & 0xFFFFFFFF
            cur >>= 32
            nbits -= 32
            ulo = u * 2.3283064365386963e-10  # exact: u / 2**32
            uhi = (u + 1) * 2.3283064365386963e-10
            if uhi <= plo:
                res = 1
                phase = _GF
            elif ulo >= phi:
                res = 0
                phase = _GF
            else:
                st[17] = u
                st[18] = c
                status = 4
                break
        elif phase == _ZA:
            # discrete Gaussian by blocks (mode 2): pick a component with the exact
            # integer alias table: body block b (|Y| uniform in [b·w, (b+1)·w)), the
            # geometric tail (|Y| = M0 + Geom), or the padding slot (start again)
            nz = zpb + ztb
            if nbits < nz:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            r = cur & ((np.int64(1) << nz) - 1)
            cur >>= nz
            nbits -= nz
            binv = r >> ztb
            thr = r & ((np.int64(1) << ztb) - 1)
            zc = binv if thr < zthr[binv] else zalias[binv]
            if zc > zb:
                continue
            if zc == zb:
                jj = 0
                ci = 0
                y = 0
                phase = _YB
            else:
                zm = zc * zw
                phase = _ZO if zl > 0 else _ZC
        elif phase == _ZO:
            if nbits < zl:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            zm += cur & ((np.int64(1) << zl) - 1)
            cur >>= zl
            nbits -= zl
            phase = _ZC
        elif phase == _ZT:
            if y > _LIMIT - zm0:
                status = 2
                break
            zm = zm0 + y
            y = 0
            phase = _ZC
        elif phase == _ZC:
            # accept with probability exp(-γ)/h: float with a certified margin, else exact
            mf = float(zm)
            g1 = mf * mf * inv2s2
            if zc == zb:
                g2 = za * (mf - float(zm0))
                gf = g1 - g2
                epsr = fuzz * (1.0 + g1 + g2)
            else:
                gf = g1
                epsr = fuzz * (1.0 + g1)
            hv = zhinv[zc]
            if gf > 700.0:
                plo = 0.0
                phi = 1e-300 * hv + 1e-300
            else:
                pf = math.exp(-gf) * hv
                plo = pf * (1.0 - epsr)
                phi = pf * (1.0 + epsr) + 1e-300
            if nbits < 32:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            u = cur & 0xFFFFFFFF
            cur >>= 32
            nbits -= 32
            ulo = u * 2.3283064365386963e-10
            uhi = (u + 1) * 2.3283064365386963e-10
            if uhi <= plo:
                phase = _ZS
            elif ulo >= phi:
                phase = _ZA
            else:
                st[17] = u
                status = 4
                break
        elif phase == _ZS:
            if nbits < 1:
                if pos >= nw:
                    status = 1
                    break
                cur = words[pos]
                pos += 1
                nbits = 64
            b = cur & 1
            cur >>= 1
            nbits -= 1
            if zm == 0 and zdirect:  # w = 1: the zero block has its own (halved) weight
                out[i] = 0
                i += 1
                if seg > 0:
                    pos = i * seg
                    nw = pos + seg
                    nbits = 0
                phase = _ZA
                continue
            if b == 1 and zm == 0:
                phase = _ZA
                continue
            out[i] = (zm ^ -b) + b
            i += 1
            if seg > 0:
                pos = i * seg
                nw = pos + seg
                nbits = 0
            phase = _ZA
        elif phase == _YH2:
            if res == 1:
                h += 1
                if h > hmax:
                    status = 2
                    break
                phase = _YH
                sub = 0
                ci = 0
            else:
                y += h << jbits
                phase = _ZT if gauss == 2 else _LS
        elif phase == _EF:
            # CKS Alg. 1 for γ = gnum/gden in [0, 1]: A_k = Bernoulli(1/k)·Bernoulli(γ) for
            # k = 1, 2, ... until the first failure at K; result K odd. sub = 0: next is
            # the Bernoulli(1/k) factor (none for k = 1); sub = 1: comparing the bits of γ.
            while True:
                if sub == 0:
                    if k > 1:
                        kb = 0
                        x = k - 1
                        while x > 0:
                            x >>= 1
                            kb += 1
                        if nbits < kb:
                            if pos >= nw:
                                status = 1
                                break
                            cur = words[pos]
                            pos += 1
                            nbits = 64
                        r = cur & ((1 << kb) - 1)
                        cur >>= kb
                        nbits -= kb
                        if r >= k:
                            continue
                        if r != 0:
                            res = k & 1
                            break
                    if gnum >= gden:
                        k += 1
                        continue
                    if gnum == 0:
                        res = k & 1
                        break
                    rr = gnum
                    sub = 1
                if nbits < 1:
                    if pos >= nw:
                        status = 1
                        break
                    cur = words[pos]
                    pos += 1
                    nbits = 64
                ub = cur & 1
                cur >>= 1
                nbits -= 1
                rr <<= 1
                pb = 0
                if rr >= gden:
                    pb = 1
                    rr -= gden
                if ub != pb:
                    if ub < pb:
                        k += 1
                        sub = 0
                        continue
                    res = k & 1
                    break
                if rr == 0:
                    res = k & 1
                    break
            if status != 0:
                break
            phase = ret
        elif phase == _E0:
            k = 1
            sub = 0
            phase = _EF
        else:  # _GF
            if res == 1:
                out[i] = y
                i += 1
                if seg > 0:
                    pos = i * seg
                    nw = pos + seg
                    nbits = 0
            phase = _YB
            jj = 0
            ci = 0
            y = 0
    st[0] = phase
    st[1] = nbits
    st[2] = cur
    st[3] = k
    st[4] = rr
    st[5] = gnum
    st[6] = gden
    st[7] = ret
    st[8] = res
    st[9] = jj
    st[10] = ci
    st[11] = y
    st[12] = cnt
    st[13] = rfrac
    st[14] = h
    st[15] = sub
    st[16] = pos
    st[19] = zm
    st[20] = zc
    return i, status


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
    """The outcome of :func:`_dlap_common`'s round on every value of its ``8J + 5`` bits
    (a byte per digit, H's first nibble, the sign), as :func:`_fill` reads them: the
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
#: keyed draws try their common path first (:func:`_fill_keyed_common`; False: the state machine only, the same values)
COMMON_PATH = True
#: words of consecutive segments computed at a time, then sampled while in cache (256 KiB)
_PIECE_WORDS = 1 << 15
_BOUNDS_MAX = 1 << 16  # body magnitudes whose acceptance bounds are tabulated (blocks one wide: sigma up to ~170)
_NO_BOUNDS = np.zeros(0, np.float64)


@nb.njit(cache=True, nogil=True)
def _fill_keyed(gauss, out, start, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb, words, seg, st,
                zi, zf, zthr, zalias, zhinv, keyw, n0x, draws, ext):
    """Fill out[start:] with draw ``i`` on its segment ``words[i·seg:(i+1)·seg]`` and, if
    that runs out, on its extension stream (ChaCha20 nonce ``(n0x, draws[i])``, blocks 0,
    1, ... computed here into ``ext``), resuming its state machine exactly where it
    stopped. Returns (index, status) like :func:`_fill`: status 0 when done, 2/3/4 for
    the caller to act on (state in ``st``; call again from the returned index)."""
    n = out.shape[0]
    i = start
    while i < n:
        if st[22] == 0:
            i, status = _fill(gauss, out, i, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb, words,
                              seg, st, zi, zf, zthr, zalias, zhinv)
            if status != 1:
                return i, status
            st[22] = 1  # the segment of draw i is used up: on to its extension
            st[21] = 0
            st[16] = ext.shape[0]
        if st[16] >= ext.shape[0]:
            if st[21] >= 4294967295:
                return i, 2
            dd = draws[i]
            chacha_block(keyw, n0x, dd & 0xFFFFFFFF, dd >> 32, st[21], ext, 0)
            st[21] += 1
            st[16] = 0
        j, status = _fill(gauss, out[i:i + 1], 0, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb, ext,
                          0, st, zi, zf, zthr, zalias, zhinv)
        if status == 1:
            continue
        if status != 0:
            return i, status
        for t in range(st.shape[0]):  # draw i is done: the next starts afresh on its segment
            st[t] = 0
        st[0] = _ZA if gauss == 2 else _YB
        i += 1
        st[16] = i * seg
    return i, 0


# The common path of a keyed draw, straight-line (issue 30 item 4). A keyed draw starts
# afresh on its own segment, so the state machine's path through it is fixed by the
# segment's words alone: :func:`_dlap_common` and :func:`_dg_common` follow that path for
# the draws that stay on it (every bit read the way :func:`_fill` reads it: a word's low
# bits first, a read that does not fit in what is left of the word starts the next one),
# without the state machine's dispatch and state stores. A draw that leaves it (its
# segment used up, a digit tied past the table's first word, H >= 1, the discrete
# Gaussian's tail or an undecided acceptance) is run by the state machine from its
# start (:func:`_fill_keyed_common`), which reads the same words: every value is the
# state machine's, draw for draw (tests/test_keyed_noise.py compares them).
@nb.njit(cache=True, nogil=True)
def _dlap_common(out, i, words, seg, jbits, cb, codes):
    """Discrete Laplace draws (``gauss = 0``, ``g0 > 0``) ``i, i + 1, ...`` on the state
    machine's fast path into ``out``; returns the index of the first draw that leaves it
    (``out.shape[0]`` if none does). One call runs many draws: a helper called per draw
    would pay numba's reference counting of its array arguments (~50 ns a draw).

    ``codes`` (:func:`_round_codes`; empty: not used): each round of up to 13 bits
    tabulated, so that the first word's rounds are looked up and the first that stops
    chosen without a branch on the bits — the rejection of "-0" is a coin flip, and a
    branch on it missed about once a draw (measured 13.3 against 5.9 ns a draw on the
    same words seen twice, where the predictor had learnt them). A draw whose first word
    does not decide it runs the rounds one by one from its start: the same reads."""
    n = out.shape[0]
    wcb8 = cb.shape[1] * 8
    c8s = np.empty(max(jbits, 1), np.int64)  # each digit's first byte, and H's first nibble
    for j in range(jbits):
        c8s[j] = (cb[j, 0] >> 56) & 255
    c4_0 = (cb[jbits, 0] >> 60) & 15
    need = 8 * jbits + 5
    # up to four rounds of the first word looked up (J = 0 has twelve: all twelve measured
    # slower than the loop, 13.4 against 12.5 ns a draw; four, 10-11 ns)
    rounds = min(64 // need, 4) if codes.shape[0] == (1 << need) else 0
    mask = (np.int64(1) << need) - 1
    while i < n:
        if rounds > 0:
            w0 = words[i * seg]
            r = np.int64(2)
            for k in range(rounds - 1, -1, -1):  # the first round that stops wins
                c = np.int64(codes[(w0 >> (k * need)) & mask])
                r = c if c != 2 else r
            if r < 2:
                out[i] = r
                i += 1
                continue
        pos = i * seg
        nw = pos + seg
        nbits = 0
        cur = np.int64(0)
        while True:  # rounds: the "-0" rejection starts again on the bits that follow
            if nbits == 0:  # the first read below would load this word: load it here
                if pos >= nw:
                    return i
                cur = words[pos]
                pos += 1
                nbits = 64
            if nbits >= need:
                # the round below when all its bits are in the word in hand and none ties
                # (the same reads: a byte per digit, a nibble, a bit), without its checks
                t = cur
                y = np.int64(0)
                tie = False
                for j in range(jbits):
                    r8 = t & 255
                    t >>= 8
                    tie |= r8 == c8s[j]
                    y += np.int64(r8 < c8s[j]) << j
                r4 = t & 15
                if not tie and r4 != c4_0:
                    if r4 < c4_0:
                        return i
                    b = (t >> 4) & 1
                    cur = t >> 5
                    nbits -= need
                    if b == 1 and y == 0:
                        continue
                    break
            y = np.int64(0)
            for j in range(jbits):
                if nbits < 8:
                    if pos >= nw:
                        return i
                    cur = words[pos]
                    pos += 1
                    nbits = 64
                r8 = cur & 255
                cur >>= 8
                nbits -= 8
                c8 = (cb[j, 0] >> 56) & 255
                if r8 == c8:
                    ci8 = 1
                    while r8 == c8:
                        if ci8 >= wcb8:
                            return i
                        if nbits < 8:
                            if pos >= nw:
                                return i
                            cur = words[pos]
                            pos += 1
                            nbits = 64
                        r8 = cur & 255
                        cur >>= 8
                        nbits -= 8
                        c8 = (cb[j, ci8 >> 3] >> (56 - ((ci8 & 7) << 3))) & 255
                        ci8 += 1
                y += np.int64(r8 < c8) << j
            # H's first Bernoulli(e^{-g0}) (row jbits): a failure leaves H = 0
            ci = 0
            while True:
                if ci >= wcb8 * 2:
                    return i
                if nbits < 4:
                    if pos >= nw:
                        return i
                    cur = words[pos]
                    pos += 1
                    nbits = 64
                r4 = cur & 15
                cur >>= 4
                nbits -= 4
                c4 = (cb[jbits, ci >> 4] >> (60 - ((ci & 15) << 2))) & 15
                if r4 != c4:
                    break
                ci += 1
            if r4 < c4:  # success: H >= 1 (probability e^{-g0} <= e^{-8})
                return i
            if nbits < 1:
                if pos >= nw:
                    return i
                cur = words[pos]
                pos += 1
                nbits = 64
            b = cur & 1
            cur >>= 1
            nbits -= 1
            if b == 1 and y == 0:
                continue
            break
        out[i] = (y ^ -b) + b
        i += 1
    return i


@nb.njit(cache=True, nogil=True)
def _dg_common(out, i, words, seg, zi, zthr, zalias, zhinv, inv2s2, fuzz, zlo, zhi):
    """Block discrete Gaussian draws (``gauss = 2``) ``i, i + 1, ...`` on the common path
    (body blocks, acceptance decided in floating point) into ``out``; returns the index of
    the first draw that leaves it. ``zlo``/``zhi``: the acceptance bounds ``plo``/``phi``
    of :func:`_fill` per body magnitude when blocks are one wide (computed by
    :func:`_dg_bounds` with the same operations), else empty (computed here as there)."""
    n = out.shape[0]
    zpb = zi[0]
    ztb = zi[1]
    zl = zi[2]
    zw = zi[3]
    zb = zi[4]
    zdirect = zi[6]
    nz = zpb + ztb
    mz = (np.int64(1) << nz) - 1
    mt = (np.int64(1) << ztb) - 1
    ml = (np.int64(1) << zl) - 1
    tab = zlo.shape[0] > 0
    # the alias step as one indexed load, slot or its alias by the threshold's comparison:
    # written as a choice, it compiled to a branch around the alias's load, missed on
    # about a fifth of the candidates at sigma = 1 (-3 to -4 ns a draw measured)
    npick = zthr.shape[0]
    zpick = np.empty(2 * npick, np.int64)
    for t in range(npick):
        zpick[2 * t] = t
        zpick[2 * t + 1] = zalias[t]
    # When a quarter or more of the candidates are padding (sigma near 1), a branch on the
    # padding is missed so often (~10 ns a draw at sigma = 1) that straight-line work pays:
    # the first word's candidates (blocks one wide, bounds tabulated, two words or more),
    # the first that is not padding chosen, its U and sign read and the draw decided
    # without a branch on the bits (sigma = 1: 16 -> 12 ns a draw; at sigma = 3 or 10 it
    # cost 1.5-3 ns more than the loop). A draw this does not decide runs the loop below.
    pad = 0
    for t in range(npick):
        pad += (((np.int64(1) << ztb) - zthr[t]) if zalias[t] > zb else 0) + (zthr[t] if t > zb else 0)
    first = 4 * pad >= npick << ztb
    kmax = min(64 // nz, 3) if (first and tab and zl == 0 and zw == 1 and seg >= 2) else 0
    while i < n:
        if kmax > 0:
            p0 = i * seg
            w0 = words[p0]
            sel = np.int64(kmax)
            zs = zb
            for k in range(kmax - 1, -1, -1):
                r = (w0 >> (k * nz)) & mz
                binv = r >> ztb
                zc = zpick[2 * binv + np.int64((r & mt) >= zthr[binv])]
                keep = -np.int64(zc > zb)  # padding: an earlier candidate, if any, wins
                sel = k ^ ((sel ^ k) & keep)
                zs = zc ^ ((zs ^ zc) & keep)
            end = min((sel + 1) * nz, 63)
            in0 = np.int64(64 - end >= 32)  # U in the first word after the candidate, else at the second's start
            u = (words[p0 + 1 - in0] >> (end * in0)) & 0xFFFFFFFF
            lt = in0 & np.int64(end + 32 < 64)  # the sign bit in the first word, else in the second
            bw = words[p0 + 1 - lt]
            b = (bw >> (lt * (end + 32) + (1 - in0) * 32)) & 1
            zq = min(zs, zb - 1)
            b &= np.int64(zq != 0) | np.int64(zdirect == 0)
            ok = (np.int64(sel < kmax) & np.int64(zs < zb) & np.int64((u + 1) * 2.3283064365386963e-10 <= zlo[zq])
                  & (1 - (b & np.int64(zq == 0))))
            if ok != 0:
                out[i] = (zq ^ -b) + b
                i += 1
                continue
        pos = i * seg
        nw = pos + seg
        nbits = 0
        cur = np.int64(0)
        while True:  # candidates
            if nbits < nz:
                if pos >= nw:
                    return i
                cur = words[pos]
                pos += 1
                nbits = 64
            r = cur & mz
            cur >>= nz
            nbits -= nz
            binv = r >> ztb
            thr = r & mt
            zc = zpick[2 * binv + np.int64(thr >= zthr[binv])]
            if zc > zb:  # the padding slot: start again
                continue
            if zc == zb:  # the tail (the state machine's discrete Laplace core)
                return i
            zm = zc * zw
            if zl > 0:
                if nbits < zl:
                    if pos >= nw:
                        return i
                    cur = words[pos]
                    pos += 1
                    nbits = 64
                zm += cur & ml
                cur >>= zl
                nbits -= zl
            if tab:
                plo = zlo[zm]
                phi = zhi[zm]
            else:
                mf = float(zm)
                g1 = mf * mf * inv2s2
                gf = g1
                epsr = fuzz * (1.0 + g1)
                hv = zhinv[zc]
                if gf > 700.0:
                    plo = 0.0
                    phi = 1e-300 * hv + 1e-300
                else:
                    pf = math.exp(-gf) * hv
                    plo = pf * (1.0 - epsr)
                    phi = pf * (1.0 + epsr) + 1e-300
            if nbits < 32:
                if pos >= nw:
                    return i
                cur = words[pos]
                pos += 1
                nbits = 64
            u = cur & 0xFFFFFFFF
            cur >>= 32
            nbits -= 32
            ulo = u * 2.3283064365386963e-10
            uhi = (u + 1) * 2.3283064365386963e-10
            if uhi <= plo:
                pass
            elif ulo >= phi:
                continue
            else:  # undecided in floating point: the exact decision
                return i
            if nbits < 1:
                if pos >= nw:
                    return i
                cur = words[pos]
                pos += 1
                nbits = 64
            b = cur & 1
            cur >>= 1
            nbits -= 1
            # zero with its own weight takes no sign; else a "-0" starts again (one branch,
            # on what is rare: two, on the coin first, missed every other zero)
            b &= np.int64(zm != 0) | np.int64(zdirect == 0)
            if (b & np.int64(zm == 0)) != 0:
                continue
            break
        out[i] = (zm ^ -b) + b
        i += 1
    return i


@nb.njit(cache=True, nogil=True)
def _dg_bounds(zi, zhinv, inv2s2, fuzz):
    """``plo``, ``phi`` of :func:`_fill`'s acceptance test for every body magnitude ``m <
    M0`` of blocks one wide (``zc = m``), by the same floating-point operations."""
    m0 = zi[5]
    lo = np.empty(m0, np.float64)
    hi = np.empty(m0, np.float64)
    for zm in range(m0):
        mf = float(zm)
        g1 = mf * mf * inv2s2
        gf = g1
        epsr = fuzz * (1.0 + g1)
        hv = zhinv[zm]
        if gf > 700.0:
            lo[zm] = 0.0
            hi[zm] = 1e-300 * hv + 1e-300
        else:
            pf = math.exp(-gf) * hv
            lo[zm] = pf * (1.0 - epsr)
            hi[zm] = pf * (1.0 + epsr) + 1e-300
    return lo, hi


@nb.njit(cache=True, nogil=True)
def _fill_keyed_common(gauss, common, out, start, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb, words,
                       seg, st, zi, zf, zthr, zalias, zhinv, keyw, n0x, draws, ext, zlo, zhi, codes):
    """:func:`_fill_keyed` with each draw first tried on its common path (``common``:
    :func:`_dlap_common` for ``gauss = 0``, :func:`_dg_common` for ``gauss = 2``); a draw
    that leaves it runs through :func:`_fill_keyed` from its start (``st[23] = 1`` while
    it does, so that a call after a status 2/3/4 resumes it there). The same values.
    Without a common path, :func:`_fill_keyed` over all the draws at once."""
    if not common:
        return _fill_keyed(gauss, out, start, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb, words, seg,
                           st, zi, zf, zthr, zalias, zhinv, keyw, n0x, draws, ext)
    n = out.shape[0]
    i = start
    while i < n:
        if st[23] == 0:
            if gauss == 0:
                i = _dlap_common(out, i, words, seg, jbits, cb, codes)
            else:
                i = _dg_common(out, i, words, seg, zi, zthr, zalias, zhinv, zf[0], fuzz, zlo, zhi)
            if i >= n:
                break
            for t in range(st.shape[0]):
                st[t] = 0
            st[0] = _ZA if gauss == 2 else _YB
            st[16] = i * seg
            st[23] = 1
        j, status = _fill_keyed(gauss, out[:i + 1], i, jbits, g0, gint, fnum, fden, mm, bb, inv_den, fuzz, fast, cb,
                                words, seg, st, zi, zf, zthr, zalias, zhinv, keyw, n0x, draws, ext)
        if status != 0:
            return i, status
        st[23] = 0
        i = j
    return i, 0


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
    to :data:`hierdp._engine.jit.SMALL_INPUT` draws run as numpy passes
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
