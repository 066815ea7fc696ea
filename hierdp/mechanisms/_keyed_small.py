"""Keyed discrete Laplace draws for small requests as vectorised numpy passes (issue 30 item 5).

The keyed sampler (:func:`hierdp.mechanisms._samplers._run_keyed`) runs the state machine
:func:`hierdp.mechanisms._sampler_kernel._fill` once per draw, each draw on its own segment of
``seg`` random words (:mod:`hierdp.keyed_noise`). Compiling that kernel costs a second
on first use and running it interpreted ~20 µs a draw, so requests of up to
:data:`hierdp._kernels.jit.SMALL_INPUT` draws take the numpy passes below instead.

Because every keyed draw reads only its own segment, the draws can run side by side:
:func:`dlap_keyed_small` follows the state machine's path of discrete Laplace (CKS 2020,
Alg. 2 with the magnitude split of :func:`~hierdp.mechanisms._sampler_kernel._fill`) for all
draws at once, one step per numpy pass, with a bit position per draw:

* the ``J`` binary digits of the magnitude, each a byte of fresh bits compared with the
  top byte of ``p_j = 1/(1 + e^{a 2^j})`` (a tie, probability 1/256, compares the next
  byte with the next byte of ``p_j``, as the kernel's fast path does; one tie a round
  is settled in the same pass);
* the high part's first Bernoulli(``e^{-g0}``), 4 bits at a time against ``e^{-g0}``'s
  binary expansion (first difference decides); a failure leaves ``H = 0``;
* the sign bit, and the kernel's "-0" rejection (start again from the digits, on the
  bits that follow).

Bits are taken exactly as the kernel takes them (a word's low bits first; a read of
``w`` bits that does not fit in what is left of the current word starts the next word).
A draw that leaves this common path — ``H >= 1`` (probability ``e^{-g0} <= e^{-8}``),
two ties in one round's digits, eight tied nibbles, a segment used up (it would continue
on its extension stream), more than 16 rounds — is flagged ``hard`` and its value is left for the kernel to
compute; the caller re-runs those draws through the kernel (a keyed draw's value does not
depend on the other draws), so every value is the kernel's, draw for draw.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["dlap_keyed_small", "usable"]

#: rounds of "-0" rejection followed here before a draw is left to the kernel
_MAX_ROUNDS = 16


def usable(gauss: int, g0: int) -> bool:
    """Whether :func:`dlap_keyed_small` applies: discrete Laplace (``gauss = 0``) whose
    high part starts with a tabulated Bernoulli(``e^{-g0}``), ``g0 > 0`` (true of every
    rate :func:`~hierdp.mechanisms._samplers._core` splits above 2^-60), on a
    little-endian machine (the byte view of the words)."""
    return gauss == 0 and g0 > 0 and sys.byteorder == "little"


def _positions(p: np.ndarray, width: int, count: int) -> np.ndarray:
    """Bit positions (m, count) of ``count`` consecutive reads of ``width`` bits (a divisor
    of 64) from positions ``p``: a read that does not fit in what is left of its word
    starts the next word. From ``p`` the reads fill the current word (``k0`` of them);
    from the next word on they are aligned to ``width`` and never skip again."""
    left = (-p) & 63
    k0 = np.where(left == 0, 64 // width, left // width)[:, None]
    t = np.arange(count, dtype=np.int64)
    nxt = ((p + 63) & ~np.int64(63))[:, None] + np.where(left == 0, 64, 0)[:, None]
    return np.where(t < k0, p[:, None] + t * width, nxt + (t - k0) * width)


def _bits(w2: np.ndarray, idx: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """The ``width``-bit values at bit positions ``pos`` (m, c) of draws ``idx`` (positions
    past the segment read its last word: callers mask them)."""
    word = w2[idx[:, None], np.minimum(pos >> 6, w2.shape[1] - 1)]
    return ((word >> (pos & 63).astype(np.uint64)) & np.uint64((1 << width) - 1)).astype(np.uint8)


def _round(w2, idx, bo, jbits, cbytes, cnib, out, hard):
    """One round (digits, H's first Bernoulli, sign) of draws ``idx`` from bit positions
    ``bo``, as whole-array passes over the draws whose digits tie at most once (a digit
    whose byte equals p_j's first byte is decided by the next byte against p_j's second,
    and the later digits read one byte later; two ties, probability ~(J/256)^2 a draw,
    are returned, for the kernel). Writes ``out``/``hard`` for the draws it settles.
    Returns ``(again, bo_again, tied, bo_tied)``: draws to run again after a "-0"
    rejection, and draws with two ties in their digits (from the start of this round)."""
    nbits = 64 * w2.shape[1]
    m = idx.size
    if jbits:
        c0 = cbytes[:jbits, 0].astype(np.uint8)
        c1 = cbytes[:jbits, 1].astype(np.uint8)
        pd = _positions(bo, 8, jbits + 1)  # one byte more, for a digit that ties once
        b8 = _bits(w2, idx, pd, 8)
        eq = b8[:, :jbits] == c0
        once = eq.any(axis=1)
        j0 = np.where(once, eq.argmax(axis=1), jbits)  # the digit that ties (jbits: none)
        col = np.arange(jbits)
        later = b8[:, 1:]  # the digits after a tie read one byte later
        dig = np.where(col < j0[:, None], b8[:, :jbits], later)
        cmp = np.where(col == j0[:, None], c1, c0)  # the tied digit compares p_j's second byte
        tied = once & ((later == cmp) & (col >= j0[:, None])).any(axis=1)  # a second tie: the kernel
        y = (dig < cmp).astype(np.int64) @ (np.int64(1) << col.astype(np.int64))
        end = np.where(once, pd[:, jbits], pd[:, jbits - 1]) + 8
    else:
        tied = np.zeros(m, dtype=bool)
        y = np.zeros(m, dtype=np.int64)
        end = bo
    ok = end <= nbits
    tied &= ok
    ln = min(8, cnib.shape[1])  # nibbles compared at once (all eight tie: 2**-32, left to the kernel)
    pn = _positions(end, 4, ln)
    r4 = _bits(w2, idx, pn, 4)
    c4 = cnib[jbits, :ln].astype(np.uint8)
    diff = (r4 != c4) & (pn + 4 <= nbits)
    first = diff.argmax(axis=1)
    rows = np.arange(idx.size)
    h_zero = ok & diff[rows, first] & (r4[rows, first] > c4[first])  # the first differing nibble decides
    ps = pn[rows, first] + 4  # the sign bit
    sign = (_bits(w2, idx, ps[:, None], 1)[:, 0]).astype(np.int64)
    good = h_zero & ~tied & (ps + 1 <= nbits)
    again = good & (sign == 1) & (y == 0)
    done = good & ~again
    out[idx[done]] = np.where(sign[done] == 1, -y[done], y[done])
    hard[idx[~good & ~tied]] = True  # H >= 1, a segment used up, or every compared nibble tied
    return idx[again], ps[again] + 1, idx[tied], bo[tied]


def _first_round(w2, jbits, cbytes, cnib, out, hard):
    """:func:`_round` for all draws from bit 0, by slices instead of gathers: from bit 0
    every read is of 8 or 4 bits at a multiple of its width, so nothing is skipped at
    word ends and the segment is one stream of bytes, then nibbles (a byte's low nibble
    first). Same returns as :func:`_round`; None when the first round does not fit in
    the segment (then :func:`_round` runs it)."""
    n, seg = w2.shape
    ln = min(8, cnib.shape[1])
    nb = (ln + 2) // 2  # the bytes holding the compared nibbles and the sign's
    if jbits + nb > 8 * seg:
        return None
    b8 = w2.view(np.uint8)
    c0 = cbytes[:jbits, 0].astype(np.uint8)
    digits = b8[:, :jbits]
    tied = (digits == c0).any(axis=1)
    y = (digits < c0).astype(np.int64) @ (np.int64(1) << np.arange(jbits, dtype=np.int64))
    part = b8[:, jbits:jbits + nb]
    nib = np.empty((n, 2 * nb), dtype=np.uint8)
    np.bitwise_and(part, 15, out=nib[:, 0::2])
    np.right_shift(part, 4, out=nib[:, 1::2])
    c4 = cnib[jbits, :ln].astype(np.uint8)
    r4 = nib[:, :ln]
    diff = r4 != c4
    first = diff.argmax(axis=1)
    rows = np.arange(n)
    good = diff[rows, first] & (r4[rows, first] > c4[first]) & ~tied
    sign = (nib[rows, first + 1] & 1).astype(np.int64)
    again = good & (sign == 1) & (y == 0)
    done = good & ~again
    out[done] = np.where(sign[done] == 1, -y[done], y[done])
    hard[~good & ~tied] = True  # H >= 1, or every compared nibble tied
    idx = np.flatnonzero(again)
    return idx, 4 * (2 * jbits + first[idx] + 1) + 1, np.flatnonzero(tied), np.zeros(int(tied.sum()), np.int64)


def dlap_keyed_small(words: np.ndarray, n: int, seg: int, jbits: int, g0: int,
                     cb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Discrete Laplace draws on per-draw segments, as :func:`~hierdp.mechanisms._sampler_kernel._fill`
    (``gauss = 0``, keyed: ``seg > 0``) computes them, by numpy passes over all draws.

    Parameters
    ----------
    words : uint64 or int64 array (n * seg,)
        The draws' segments, draw ``i`` on ``words[i*seg:(i+1)*seg]``.
    n, seg : int
        Number of draws and words per segment.
    jbits, g0 : int
        From :func:`~hierdp.mechanisms._samplers._core`.
    cb : int64 array (jbits + 2, wcb)
        The tabulated Bernoulli parameters (:func:`~hierdp.mechanisms._samplers._table`).

    Returns
    -------
    out : int64 array (n,)
        The draws; entries flagged in ``hard`` are undefined.
    hard : bool array (n,)
        Draws left to the kernel (see the module docstring).
    """
    w2 = np.ascontiguousarray(words).view(np.uint64).reshape(n, seg)
    ub = np.ascontiguousarray(cb).view(np.uint64)
    wcb = ub.shape[1]
    cbytes = ub.astype(">u8").view(np.uint8).reshape(ub.shape[0], wcb * 8).astype(np.int64)  # MSB first
    cnib = np.stack([cbytes >> 4, cbytes & 15], axis=2).reshape(ub.shape[0], wcb * 16)
    out = np.zeros(n, dtype=np.int64)
    hard = np.zeros(n, dtype=bool)
    idx, bo = np.arange(n), np.zeros(n, dtype=np.int64)  # draws still running, their bit positions
    for r in range(_MAX_ROUNDS):
        if idx.size == 0:
            break
        first = _first_round(w2, jbits, cbytes, cnib, out, hard) if r == 0 else None
        if first is not None:  # its tied draws start again in the next round, which handles single ties
            idx, bo, tied, bo_tied = first
            idx, bo = np.concatenate((idx, tied)), np.concatenate((bo, bo_tied))
            continue
        idx, bo, tied, _ = _round(w2, idx, bo, jbits, cbytes, cnib, out, hard)
        hard[tied] = True  # two ties in its digits (~(J/256)^2 a draw): left to the kernel
    hard[idx] = True  # more rounds than followed here: left to the kernel
    return out, hard
