"""Compiled kernels of keyed draws (:mod:`hierdp.keyed_noise`), on the state machine of
:mod:`hierdp.mechanisms._sampler_kernel`.

With ``seg = W > 0`` the state machine runs each draw on its own segment of ``W`` words
and starts it with no bits left over from another draw; the fast path checks the
segment's end before every word and, if it is reached, hands the digit over to the slow
path where it stopped (the random bits compared so far were all equal to the
constant's, so the digit's law is unchanged). A draw whose segment runs out pauses
(status 1) and :func:`_fill_keyed` resumes it on its own extension stream, block after
block, exactly as if its stream were infinite; its exact decisions (status 4) take their
extra bits from that stream too. So every draw is a function of its own words, which
depend on the key and the draw's identity only.

The common path. A keyed draw starts afresh on its own segment, so the state machine's
path through it is a function of the segment's words alone. For the discrete Laplace
(its fast path: digits a byte at a time, ``H = 0``, the sign and the "-0" rejection) and
the block discrete Gaussian (body blocks, the acceptance decided in floating point, its
bounds tabulated per magnitude for blocks one wide by the same floating-point
operations), :func:`_dlap_common` and :func:`_dg_common` follow that path straight
through, many draws per call, reading every bit as the state machine reads it. A draw
that leaves the path (its segment used up, a digit tied past the table's first word,
``H >= 1``, the Gaussian's tail, an undecided acceptance: about 1e-4 to 1e-3 of the
draws) is run by the state machine from its start on the same words. So every value is
the state machine's, draw for draw (tests/test_keyed_noise.py compares them); only the
machine's dispatch and state stores are saved.
"""

from __future__ import annotations

import math

import numpy as np

from hierdp._kernels.jit import numba as nb
from hierdp.keyed_noise import chacha_block
from hierdp.mechanisms._sampler_kernel import _YB, _ZA, _fill


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


# The common path (see the module's docstring): every bit is read the way :func:`_fill`
# reads it, a word's low bits first; a read that does not fit in what is left of the word
# starts the next one.
@nb.njit(cache=True, nogil=True)
def _dlap_common(out, i, words, seg, jbits, cb, codes):
    """Discrete Laplace draws (``gauss = 0``, ``g0 > 0``) ``i, i + 1, ...`` on the state
    machine's fast path into ``out``; returns the index of the first draw that leaves it
    (``out.shape[0]`` if none does). One call runs many draws: a helper called per draw
    would pay numba's reference counting of its array arguments (~50 ns a draw).

    ``codes`` (:func:`~hierdp.mechanisms._samplers._round_codes`; empty: not used): each round of up to 13 bits
    tabulated, so that the first word's rounds are looked up and the first that stops
    chosen without a branch on the bits — the rejection of "-0" is a coin flip, so a
    branch on it is mispredicted about once a draw. A draw whose first word
    does not decide it runs the rounds one by one from its start: the same reads."""
    n = out.shape[0]
    wcb8 = cb.shape[1] * 8
    c8s = np.empty(max(jbits, 1), np.int64)  # each digit's first byte, and H's first nibble
    for j in range(jbits):
        c8s[j] = (cb[j, 0] >> 56) & 255
    c4_0 = (cb[jbits, 0] >> 60) & 15
    need = 8 * jbits + 5
    # up to four rounds of the first word looked up (J = 0 has twelve: looking up all of
    # them is slower than the loop)
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
    # written as a choice, it compiles to a branch around the alias's load, mispredicted
    # on about a fifth of the candidates at sigma = 1
    npick = zthr.shape[0]
    zpick = np.empty(2 * npick, np.int64)
    for t in range(npick):
        zpick[2 * t] = t
        zpick[2 * t + 1] = zalias[t]
    # When a quarter or more of the candidates are padding (sigma near 1), a branch on the
    # padding is mispredicted so often that straight-line work pays: the first word's
    # candidates (blocks one wide, bounds tabulated, two words or more), the first that is
    # not padding chosen, its U and sign read and the draw decided without a branch on the
    # bits (with less padding the loop is faster). A draw this does not decide runs the loop below.
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
