"""The ChaCha20 block function (RFC 8439, section 2.3) as a compiled keystream generator.

ChaCha20 maps a 256-bit key, a 32-bit block counter and a 96-bit nonce to a 64-byte
block: the 4x4 matrix of 32-bit words ``constants | key | counter | nonce`` goes through
20 rounds (10 "double rounds": four column quarter rounds, then four diagonal ones; RFC
8439 section 2.1 defines the quarter round as add, xor, rotate by 16, 12, 8, 7), the
input matrix is added word-wise modulo 2**32, and the 16 words are serialised
little-endian. The keystream for (key, nonce) is the concatenation of the blocks for
counters 0, 1, 2, ...

:func:`fill` writes that keystream straight into an array of uint64 words: output word
``j`` is the little-endian reading of keystream bytes ``8j .. 8j+7`` (block word ``2i``
in the low half, ``2i+1`` in the high half), so ``words.astype('<u8').tobytes()`` *is*
the keystream on every platform. The kernel runs 16 blocks side by side, one per lane,
so that each quarter-round step is a loop over lanes that the compiler turns into SIMD
instructions (several hundred million words per second on one AVX2/AVX-512 core).

This module is the primitive only; key, nonce and counter management (never reusing a
(key, nonce, counter) triple, rekeying, fork safety) live in :mod:`hierdp.rng`.
"""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["SIGMA", "MAX_BLOCKS", "initial_state", "fill", "block", "keystream"]

#: "expand 32-byte k" as four little-endian 32-bit words (RFC 8439, section 2.3).
SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)
#: The block counter is one 32-bit word: a (key, nonce) pair yields at most 2**32 blocks.
MAX_BLOCKS = 1 << 32
_LANES = 16  # blocks computed side by side


@nb.njit(inline="always")
def _quarter_rounds(x, a, b, c, d):
    """RFC 8439 section 2.1 quarter round on rows a, b, c, d of ``x``, in every lane."""
    for lane in range(_LANES):
        xa = x[a, lane]
        xb = x[b, lane]
        xc = x[c, lane]
        xd = x[d, lane]
        xa = np.uint32(xa + xb)
        xd ^= xa
        xd = np.uint32((xd << np.uint32(16)) | (xd >> np.uint32(16)))
        xc = np.uint32(xc + xd)
        xb ^= xc
        xb = np.uint32((xb << np.uint32(12)) | (xb >> np.uint32(20)))
        xa = np.uint32(xa + xb)
        xd ^= xa
        xd = np.uint32((xd << np.uint32(8)) | (xd >> np.uint32(24)))
        xc = np.uint32(xc + xd)
        xb ^= xc
        xb = np.uint32((xb << np.uint32(7)) | (xb >> np.uint32(25)))
        x[a, lane] = xa
        x[b, lane] = xb
        x[c, lane] = xc
        x[d, lane] = xd


@nb.njit(inline="always")
def _out_word(x, state, first, lane, i):
    """Output word ``i`` of a lane's block: feed-forward (add the input matrix, whose
    counter word is ``first + lane``) and little-endian packing of words 2i and 2i+1."""
    w0 = 2 * i
    add0 = np.uint32(first + lane) if w0 == 12 else state[w0]
    lo = np.uint64(np.uint32(x[w0, lane] + add0))
    hi = np.uint64(np.uint32(x[w0 + 1, lane] + state[w0 + 1]))
    return lo | (hi << np.uint64(32))


@nb.njit(nogil=True, cache=True)
def _fill(state, counter0, out):
    """Keystream of ``state`` (counter word ignored) from block ``counter0`` into ``out``.

    Block ``counter0 + k`` fills ``out[8k : 8k + 8]``; the last block may be cut short.
    The caller guarantees ``counter0 + ceil(len(out) / 8) <= 2**32``.
    """
    n = out.shape[0]
    nblocks = (n + 7) // 8
    x = np.empty((16, _LANES), dtype=np.uint32)
    done = 0
    while done < nblocks:
        for lane in range(_LANES):
            for i in range(16):
                x[i, lane] = state[i]
            x[12, lane] = np.uint32(counter0 + done + lane)  # lanes past the end: discarded
        for _ in range(10):  # 10 double rounds = 20 rounds
            _quarter_rounds(x, 0, 4, 8, 12)  # columns
            _quarter_rounds(x, 1, 5, 9, 13)
            _quarter_rounds(x, 2, 6, 10, 14)
            _quarter_rounds(x, 3, 7, 11, 15)
            _quarter_rounds(x, 0, 5, 10, 15)  # diagonals
            _quarter_rounds(x, 1, 6, 11, 12)
            _quarter_rounds(x, 2, 7, 8, 13)
            _quarter_rounds(x, 3, 4, 9, 14)
        m = min(_LANES, nblocks - done)
        for lane in range(m):
            base = 8 * (done + lane)
            k = min(8, n - base)
            if k == 8:  # whole block (fixed trip count: unrolled)
                for i in range(8):
                    out[base + i] = _out_word(x, state, counter0 + done, lane, i)
            else:
                for i in range(k):
                    out[base + i] = _out_word(x, state, counter0 + done, lane, i)
        done += m


def initial_state(key: bytes, nonce: bytes) -> np.ndarray:
    """The 16-word input matrix for ``key`` (32 bytes) and ``nonce`` (12 bytes), counter 0."""
    if len(key) != 32 or len(nonce) != 12:
        raise ValueError(f"ChaCha20 needs a 32-byte key and a 12-byte nonce, got {len(key)} and {len(nonce)} bytes")
    state = np.zeros(16, dtype=np.uint32)
    state[0:4] = SIGMA
    state[4:12] = np.frombuffer(key, dtype="<u4")
    state[13:16] = np.frombuffer(nonce, dtype="<u4")
    return state


def fill(state: np.ndarray, counter: int, out: np.ndarray) -> np.ndarray:
    """Write the keystream of ``state`` from block ``counter`` into uint64 array ``out``.

    Uses ``ceil(len(out) / 8)`` blocks: ``counter`` up to (excluding)
    ``counter + ceil(len(out) / 8)``, which must not pass the 2**32 limit of the counter.
    """
    counter = int(counter)
    nblocks = -(-out.shape[0] // 8)
    if counter < 0 or counter + nblocks > MAX_BLOCKS:
        raise ValueError(f"ChaCha20 block counter range [{counter}, {counter + nblocks}) is outside [0, 2**32)")
    if out.dtype != np.uint64 or out.ndim != 1 or not out.flags.c_contiguous:
        raise ValueError("fill(out): out must be a contiguous 1-D uint64 array")
    if out.shape[0]:
        _fill(state, np.int64(counter), out)
    return out


def keystream(key: bytes, nonce: bytes, counter: int, nbytes: int) -> bytes:
    """``nbytes`` of ChaCha20 keystream starting at block ``counter`` (RFC 8439, section 2.4)."""
    words = fill(initial_state(key, nonce), counter, np.empty(-(-int(nbytes) // 8), dtype=np.uint64))
    return words.astype("<u8").tobytes()[: int(nbytes)]


def block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """The serialised 64-byte ChaCha20 block (RFC 8439, section 2.3, argument order as there)."""
    return keystream(key, nonce, counter, 64)
