"""The resumable state machine behind the exact samplers of :mod:`hierdp.mechanisms._samplers`.

:func:`_fill` draws discrete Laplace and discrete Gaussian variables (Canonne, Kamath &
Steinke 2020, Algorithms 1-3, and the block proposal of :class:`~hierdp.mechanisms._samplers._Zig`)
from a batch of random 64-bit words, spending them a few bits at a time:

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

When a batch of words runs out in the middle of a draw the kernel stores its state and
the caller resumes it on fresh words, exactly as if the stream were infinite (nothing is
discarded, so nothing is biased). While the batch has enough words left for the worst
case of a draw's binary digits, the digits are compared a byte at a time without any
resumption point (the fast path); which path a draw takes depends only on how many words
earlier draws used, never on its own bits. With ``seg = W > 0`` (keyed noise) each draw
runs on its own segment of ``W`` words (:mod:`hierdp.mechanisms._keyed_kernels`).

numba's disk cache keys a kernel on its own file only, and the keyed kernels inline
:func:`_fill`: :func:`hierdp._kernels.jit.shared_kernels_tag` keys hierdp's cache folder by
this file's source too (with ``NUMBA_CACHE_DIR`` set by hand, clear that folder after editing it).
"""

from __future__ import annotations

import math

import numpy as np

from hierdp._kernels.jit import numba as nb

_LIMIT = 1 << 62  # intermediate values above this stop a draw with status 2 (overflow)


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
    own extension words (:func:`~hierdp.mechanisms._keyed_kernels._fill_keyed`).

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

