"""Noise keyed per node: a secret release key and a private word stream per draw.

Why. A release cut into subtree tasks (measured one subtree at a time, in any order, on
any executor and thread count, a failed task rerun) must add exactly the noise the
in-memory release adds for the same key. So the random words of every noise draw are a
function of the release key and of the draw's *public* identity only:

* ``m``, the measurement: a small integer (< 2**24) naming what is measured (a plan's
  node counts, one marginal query of the ``marginals`` plan, ...), so that two
  measurements of the same node never share words;
* ``g``, the node: its index in the internal (canonical) order of the *full* tree, which
  is public (the tree is) and independent of any split;
* ``c``, the cell of the node's histogram (``0 <= c < k``, ``k`` cells per node in this
  measurement). The draw index is ``d = g·k + c``.

The construction
----------------
A :class:`NoiseKey` is a 256-bit secret. The words of draw ``d`` of measurement ``m`` are
ChaCha20 keystream (RFC 8439, OpenSSL's through :func:`hierdp.rng.chacha20_fill`) under
that key:

* its *segment*: ``W`` words (a public function of the sampler's parameters, 2 to 4) at
  word position ``d·W`` of the stream with nonce ``(kind = 1, m, hi)``, where the 64-bit
  ChaCha block index ``d·W/8`` is split into ``hi`` (the upper 64 bits, in the nonce) and
  the 32-bit block counter (the lower 32 bits), so the counter never wraps. Draws
  ``d .. d+n`` are one contiguous piece of keystream: one OpenSSL call (~3.6 ns a word
  here) serves a whole level;
* its *extension*, used only by a draw that needs more than ``W`` words (a rejection
  that restarts, a long tie with a transcendental constant; under 1e-3 of the draws for
  the parameters measured in ``benchmarks/bench_samplers.py``): the stream with nonce
  ``(kind = 2, m, d)``, block counter ``0, 1, 2, ...``, computed inside the sampling
  kernel by :func:`chacha_block` (a plain implementation of the RFC 8439 block function,
  tested word for word against OpenSSL's).

How the words are computed does not change which words a draw gets: a run of consecutive
draws (a level, a chunk of one) takes its segments from one OpenSSL context, 256 KiB at a
time, each piece sampled while it is in cache (:class:`SegmentStream`; an OpenSSL context
costs ~40 µs to set up, a word ~3 ns); scattered draws get theirs per run
(:func:`segment_words`). Both compute the same keystream positions ``d·W ..`` of the same
nonce, so the argument below covers them alike (tests/test_keyed_noise.py checks the two
word for word).

The samplers (:mod:`hierdp.mechanisms._samplers`) run each draw on its segment and, when
it runs out, continue *that draw* on its extension exactly where it stopped (their state
machines are resumable), so every draw consumes an unbounded stream of its own words.
A draw's output is a function of its own words only: which node a task holds, the order
of tasks and the threads do not enter. ``kind = 3`` streams (nonce ``(3, m, g)``) give a
third-party mechanism that only implements ``sample(values, budget, sensitivity, rng)``
an unbounded word stream per node (:class:`KeyedStream`). A rejection sampler that must
draw again from scratch (truncated Laplace) uses ``attempt`` ``a`` in the kind byte,
``kind + 4a``.

*Why this is a cryptographically secure source.* The argument of :mod:`hierdp.rng`
carries over: ChaCha20 is a pseudorandom function family from (nonce, counter) to
64-byte blocks, so under a uniformly random secret key, as long as no (key, nonce,
counter) input is used for two different purposes, the words are indistinguishable from
independent uniform bits by any feasible adversary, which is what every mechanism's proof
assumes. Distinctness: the nonce is ``kind·2**24 + m`` (32 bits) followed by 64 bits that
are ``hi`` (kind 1) or ``d``/``g`` (kinds 2, 3); kinds never collide with each other; within
kind 1 the pair (``hi``, counter) is the block index ``d·W/8``, and the segments of
different draws are disjoint word ranges; within kind 2 and 3 each draw or node has its
own nonce and the counter counts its blocks. A block shared by two draws' segments (``W``
smaller than 8) hands out disjoint words to each, which are independent uniform bits as
well. The same draw recomputed (a rerun task) gives the same words: that is
reproducibility, not reuse, since the same noise is added to the same node's same count,
and nothing new is revealed. *A key must not be used for two releases*: two releases of
different counts under one key would share noise, and their difference would reveal the
difference of the counts. :meth:`NoiseKey.fresh` (the default of every release) draws the
key from ``os.urandom``; :meth:`NoiseKey.from_seed` derives it as SHA-256 of a domain tag
and the seed, for tests and benchmarks only (not private: anyone who knows the seed knows
the noise), and such releases are marked not for publication as before.

*Key handling.* The key is never shown (``repr`` says only whether it is secure or
seeded) and an instance refuses to be pickled or copied: shipping a key to a worker that
reruns a task is explicit, through :meth:`NoiseKey.export` (a :class:`ExportedNoiseKey`
that pickles; unpickle it only where the true counts may be read, since with the key and
the noisy counts one recovers the true ones). Unlike :class:`hierdp.rng.SecureRandom`, a
key is *meant* to be the same in a forked or remote worker: determinism is the point, and
no stream position is shared between processes (every draw's words are addressed by its
identity, not taken from a running counter).
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np

from hierdp import rng as _rng
from hierdp._kernels import jit as _jit
from hierdp._kernels.jit import for_size
from hierdp._kernels.jit import numba as nb
from hierdp.rng import RandomSource, _WordSource, chacha20_fill

__all__ = ["NoiseKey", "ExportedNoiseKey", "KeyedStream", "chacha_block", "segment_words", "draw_ids", "tiebreak_seed",
           "SegmentStream", "segment_stream",
           "KIND_SEGMENT", "KIND_EXTENSION", "KIND_NODE", "MAX_MEASUREMENT", "nonce_word"]

KIND_SEGMENT, KIND_EXTENSION, KIND_NODE = 1, 2, 3
#: measurement ids are below this (24 bits of the nonce's first word)
MAX_MEASUREMENT = 1 << 24
MAX_ATTEMPT = 63
_SEED_TAG = b"hierdp noise key from seed, v1\x00"
#: a run of draws at least this long gets its keystream from OpenSSL (one call); shorter runs
#: from :func:`chacha_block` in one compiled loop (an OpenSSL call costs ~20 µs to set up)
_OPENSSL_MIN_WORDS = 512
_MASK32 = 0xFFFFFFFF


class NoiseKey:
    """The secret 256-bit key of one release's noise (see the module docstring).

    Create it with :meth:`fresh` (secure, from ``os.urandom``; the default of a release) or
    :meth:`from_seed` (reproducible, for tests only). ``secure`` and ``seed`` say which.
    The key is never shown in a repr; pickling and copying are refused (use :meth:`export`
    to ship it to a worker that reruns a task).
    """

    __slots__ = ("_key", "_words32", "secure", "seed")

    def __init__(self, key: bytes, *, secure: bool, seed: int | None = None) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise ValueError("a noise key is 32 bytes; make one with NoiseKey.fresh() or NoiseKey.from_seed(seed)")
        self._key = bytes(key)
        self._words32 = np.frombuffer(self._key, dtype="<u4").astype(np.int64)
        self.secure = bool(secure)
        self.seed = seed

    @classmethod
    def fresh(cls) -> NoiseKey:
        """A secure key: 32 bytes from ``os.urandom``."""
        return cls(os.urandom(32), secure=True)

    @classmethod
    def from_seed(cls, seed: int) -> NoiseKey:
        """The key SHA-256(tag ‖ seed as 32 little-endian bytes): reproducible, not private."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < (1 << 256):
            raise ValueError(f"seed must be a non-negative integer below 2**256, got {seed!r:.40}")
        digest = hashlib.sha256(_SEED_TAG + int(seed).to_bytes(32, "little")).digest()
        return cls(digest, secure=False, seed=int(seed))

    @classmethod
    def from_rng(cls, rng: RandomSource) -> NoiseKey:
        """A key of 4 words of ``rng``: secure from a secure source, reproducible (not private)
        from a seeded one (for a caller of a plan that gives only a random source)."""
        words = np.asarray(rng.words(4), dtype=np.uint64).astype("<u8").tobytes()
        return cls(words, secure=bool(rng.secure), seed=None if rng.secure else rng.seed)

    def export(self) -> ExportedNoiseKey:
        """The key in a form that pickles, to ship a task to a worker (see :class:`ExportedNoiseKey`)."""
        return ExportedNoiseKey(self._key, self.secure, self.seed)

    def __reduce__(self):
        raise TypeError("a NoiseKey is not pickled or copied implicitly (with the noisy counts it reveals the true "
                        "ones); ship it to a worker explicitly with key.export()")

    def __repr__(self) -> str:
        return "NoiseKey(secure)" if self.secure else f"NoiseKey(seed={self.seed})"


class ExportedNoiseKey:
    """A :class:`NoiseKey` explicitly made shippable (picklable); :meth:`key` gives it back.

    It is as secret as the true counts: send it only where they may be read."""

    __slots__ = ("_key", "secure", "seed")

    def __init__(self, key: bytes, secure: bool, seed: int | None) -> None:
        self._key, self.secure, self.seed = bytes(key), bool(secure), seed

    def key(self) -> NoiseKey:
        """The noise key."""
        return NoiseKey(self._key, secure=self.secure, seed=self.seed)

    def __reduce__(self):
        return (ExportedNoiseKey, (self._key, self.secure, self.seed))

    def __repr__(self) -> str:
        return "ExportedNoiseKey(secure)" if self.secure else f"ExportedNoiseKey(seed={self.seed})"


def nonce_word(kind: int, measurement: int, attempt: int = 0) -> int:
    """The nonce's first 32-bit word: ``(kind + 4·attempt)·2**24 + measurement``."""
    if isinstance(measurement, bool) or not isinstance(measurement, (int, np.integer)) \
            or not 0 <= int(measurement) < MAX_MEASUREMENT:
        raise ValueError(f"measurement id must be an integer in [0, 2**24), got {measurement!r:.40}")
    if not 0 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt must be in [0, {MAX_ATTEMPT}], got {attempt}")
    return ((kind + 4 * attempt) << 24) | int(measurement)


@nb.njit(cache=True, nogil=True)
def _quarter_round(a, b, c, d):
    """The ChaCha20 quarter round (RFC 8439 §2.1) on 32-bit values held in int64."""
    m = 0xFFFFFFFF
    a = (a + b) & m
    d ^= a
    d = ((d << 16) | (d >> 16)) & m
    c = (c + d) & m
    b ^= c
    b = ((b << 12) | (b >> 20)) & m
    a = (a + b) & m
    d ^= a
    d = ((d << 8) | (d >> 24)) & m
    c = (c + d) & m
    b ^= c
    b = ((b << 7) | (b >> 25)) & m
    return a, b, c, d


@nb.njit(cache=True, nogil=True)
def chacha_block(keyw, n0, n1, n2, counter, out, off):
    """The ChaCha20 block (RFC 8439 §2.3) of key ``keyw`` (8 little-endian 32-bit words),
    block ``counter`` and nonce words ``n0, n1, n2``, as 8 little-endian 64-bit words
    written to ``out[off:off + 8]`` (int64 bit patterns). Integer arithmetic masked to 32
    bits in local variables (no allocation), so it runs the same compiled or interpreted."""
    m = 0xFFFFFFFF
    i0, i1, i2, i3 = 0x61707865, 0x3320646E, 0x79622D32, 0x6B206574
    i4, i5, i6, i7 = keyw[0] & m, keyw[1] & m, keyw[2] & m, keyw[3] & m
    i8, i9, i10, i11 = keyw[4] & m, keyw[5] & m, keyw[6] & m, keyw[7] & m
    i12, i13, i14, i15 = counter & m, n0 & m, n1 & m, n2 & m
    x0, x1, x2, x3, x4, x5, x6, x7 = i0, i1, i2, i3, i4, i5, i6, i7
    x8, x9, x10, x11, x12, x13, x14, x15 = i8, i9, i10, i11, i12, i13, i14, i15
    for _ in range(10):  # column rounds, then diagonal rounds
        x0, x4, x8, x12 = _quarter_round(x0, x4, x8, x12)
        x1, x5, x9, x13 = _quarter_round(x1, x5, x9, x13)
        x2, x6, x10, x14 = _quarter_round(x2, x6, x10, x14)
        x3, x7, x11, x15 = _quarter_round(x3, x7, x11, x15)
        x0, x5, x10, x15 = _quarter_round(x0, x5, x10, x15)
        x1, x6, x11, x12 = _quarter_round(x1, x6, x11, x12)
        x2, x7, x8, x13 = _quarter_round(x2, x7, x8, x13)
        x3, x4, x9, x14 = _quarter_round(x3, x4, x9, x14)
    _put(out, off, (x0 + i0) & m, (x1 + i1) & m)
    _put(out, off + 1, (x2 + i2) & m, (x3 + i3) & m)
    _put(out, off + 2, (x4 + i4) & m, (x5 + i5) & m)
    _put(out, off + 3, (x6 + i6) & m, (x7 + i7) & m)
    _put(out, off + 4, (x8 + i8) & m, (x9 + i9) & m)
    _put(out, off + 5, (x10 + i10) & m, (x11 + i11) & m)
    _put(out, off + 6, (x12 + i12) & m, (x13 + i13) & m)
    _put(out, off + 7, (x14 + i14) & m, (x15 + i15) & m)


@nb.njit(cache=True, nogil=True)
def _put(out, j, lo, hi):
    """``out[j]`` = the 64-bit word ``hi·2**32 + lo`` as an int64 bit pattern."""
    if hi >= 0x80000000:
        hi -= 0x100000000
    out[j] = (hi << 32) | lo


@nb.njit(cache=True, nogil=True)
def _stream_runs(keyw, n0, word_starts, lengths, out):
    """Words ``[word_starts[r], + lengths[r])`` of the kind-1 stream ``n0``, run after run,
    into ``out`` (int64), one :func:`chacha_block` per block touched."""
    blk = np.empty(8, dtype=np.int64)
    o = 0
    for r in range(word_starts.shape[0]):
        w = word_starts[r]
        end = w + lengths[r]
        while w < end:
            b = w >> 3
            chacha_block(keyw, n0, b >> 32, 0, b & 0xFFFFFFFF, blk, 0)  # b < 2**59: hi fits n1
            j = w & 7
            while j < 8 and w < end:
                out[o] = blk[j]
                o += 1
                j += 1
                w += 1


def _keystream_into(key: bytes, nonce: bytes, counter: int, skip: int, out: np.ndarray) -> None:
    """The ChaCha20 keystream of ``key``/``nonce`` from word ``skip`` (< 8) of block
    ``counter`` on, written straight into ``out`` (contiguous uint64; no temporary: a fresh
    buffer and a copy cost about as much as the keystream itself). The caller keeps the
    block range inside the 32-bit counter."""
    if not np.little_endian:  # pragma: no cover - big-endian hosts
        buf = np.empty(skip + out.size, dtype=np.uint64)
        chacha20_fill(key, nonce, counter, buf)
        out[:] = buf[skip:]
        return
    enc = _rng._cipher(key, int(counter).to_bytes(4, "little") + nonce)
    if skip:  # the words of the first block before ours: computed and dropped
        enc.update_into(_rng._ZEROS_VIEW[: 8 * skip], bytearray(8 * skip))
    view = out.view(np.uint8).data
    step = len(_rng._ZEROS_VIEW)
    for start in range(0, 8 * out.size, step):
        stop = min(8 * out.size, start + step)
        enc.update_into(_rng._ZEROS_VIEW[: stop - start], view[start:stop])


def _openssl_run(key: NoiseKey, n0: int, word_start: int, out: np.ndarray) -> None:
    """Words ``[word_start, word_start + len(out))`` of the kind-1 stream ``n0`` by OpenSSL,
    split where the block index crosses a multiple of 2**32 (the nonce's ``hi`` changes)."""
    pos, o = word_start, 0
    end = word_start + out.size
    while pos < end:
        block = pos >> 3
        hi, ctr = block >> 32, block & _MASK32
        stop = min(end, ((hi + 1) << 35))  # the last word of this 2**32-block span
        nonce = struct.pack("<III", n0, hi & _MASK32, hi >> 32)
        nb_words = stop - pos
        _keystream_into(key._key, nonce, ctr, pos & 7, out[o:o + nb_words])
        o += nb_words
        pos = stop


class SegmentStream:
    """The segments of the consecutive draws ``d0, d0 + 1, ...`` (``seg`` words each), piece
    after piece, from one OpenSSL context (set up once: ~40 µs). :meth:`next_into` writes
    the next ``len(out)`` words: a run is computed a cache-sized piece at a time, each
    piece sampled while it is in cache, instead of all at once (the same words as
    :func:`segment_words`: keystream words ``d0·seg ..`` of the kind-1 nonce, RFC 8439).
    Make one with :func:`segment_stream`.

    Parameters
    ----------
    key : NoiseKey
        The release's noise key.
    n0 : int
        The nonce's first word (:func:`nonce_word` of kind 1).
    d0 : int
        The first draw's global index.
    seg : int
        Words per segment.
    """

    __slots__ = ("_enc",)

    def __init__(self, key: NoiseKey, n0: int, d0: int, seg: int) -> None:
        w = d0 * seg
        block = w >> 3
        hi = block >> 32
        nonce = struct.pack("<III", n0, hi & _MASK32, hi >> 32)
        self._enc = _rng._cipher(key._key, int(block & _MASK32).to_bytes(4, "little") + nonce)
        if w & 7:  # the words of the first block before d0's segment: computed and dropped
            self._enc.update_into(_rng._ZEROS_VIEW[: 8 * (w & 7)], bytearray(8 * (w & 7)))

    def next_into(self, out: np.ndarray) -> None:
        """The next ``len(out)`` words of the run into ``out``.

        Parameters
        ----------
        out : numpy.ndarray
            Contiguous uint64, written in place.
        """
        view = out.view(np.uint8).data
        step = len(_rng._ZEROS_VIEW)
        for start in range(0, view.nbytes, step):
            stop = min(view.nbytes, start + step)
            self._enc.update_into(_rng._ZEROS_VIEW[: stop - start], view[start:stop])


def segment_stream(key: NoiseKey, n0: int, d0: int, n: int, seg: int) -> SegmentStream | None:
    """A :class:`SegmentStream` for the draws ``d0 .. d0 + n - 1``, or None when one OpenSSL
    context cannot serve them (a big-endian host; a run that crosses block 2**32·h, where the
    nonce's high part changes; a run too short to pay for the context): then use
    :func:`segment_words`.

    Parameters
    ----------
    key : NoiseKey
        The release's noise key.
    n0 : int
        The nonce's first word (:func:`nonce_word` of kind 1).
    d0, n : int
        The first draw's global index and the number of consecutive draws.
    seg : int
        Words per segment.

    Returns
    -------
    SegmentStream or None
    """
    if not np.little_endian or n * seg < _OPENSSL_MIN_WORDS or d0 < 0 or (d0 + n) * seg >= (1 << 62):
        return None
    if (d0 * seg) >> 35 != ((d0 + n) * seg - 1) >> 35:
        return None
    return SegmentStream(key, n0, d0, seg)


def segment_words(key: NoiseKey, n0: int, draws: np.ndarray, seg: int, out: np.ndarray | None = None) -> np.ndarray:
    """The segments (``seg`` words each) of the draws with global indices ``draws``
    (int64, any order), concatenated: ``out[i·seg:(i+1)·seg]`` is draw ``draws[i]``'s.
    Consecutive indices form runs; a long run is one OpenSSL call, short ones are computed
    together by :func:`chacha_block`."""
    draws = np.asarray(draws, dtype=np.int64)
    n = draws.size
    if out is None:
        out = np.empty(n * seg, dtype=np.uint64)
    else:
        out = out[: n * seg]
    if n == 0:
        return out
    if int(draws.min()) < 0 or int(draws.max()) >= (1 << 62) // seg:
        raise ValueError("draw index out of range: node identities and cells per node give a draw index "
                         "beyond 2**62 / segment length")
    breaks = np.flatnonzero(np.diff(draws) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [n]))
    # runs of at least _OPENSSL_MIN_WORDS words from OpenSSL; so is every run of a small request
    # (at most SMALL_INPUT draws, whatever the segment length: sized like every other small input,
    # so that it never compiles), whose short runs would run chacha_block interpreted (~0.4 ms a
    # block against ~20 µs a call)
    long_runs = (stops - starts) * seg >= (1 if n <= _jit.SMALL_INPUT else _OPENSSL_MIN_WORDS)
    ow = out.view(np.int64)
    for a, b in zip(starts[long_runs], stops[long_runs], strict=True):
        _openssl_run(key, n0, int(draws[a]) * seg, out[a * seg: b * seg])
    short = ~long_runs
    if short.any():
        s_starts, s_stops = starts[short], stops[short]
        lengths = (s_stops - s_starts) * seg
        tmp = np.empty(int(lengths.sum()), dtype=np.int64)
        # interpreted for a small input (compiling costs more than it saves; the same words either way)
        for_size(_stream_runs, tmp.size)(key._words32, n0, draws[s_starts] * seg, lengths, tmp)
        o = 0
        for a, ln in zip(s_starts, lengths, strict=True):
            ow[a * seg: a * seg + ln] = tmp[o:o + ln]
            o += ln
    return out


#: the measurement id of the post-processing tie-break seed (:func:`tiebreak_seed`): the last one,
#: no plan measures with it
TIEBREAK_MEASUREMENT = MAX_MEASUREMENT - 1


def tiebreak_seed(key: NoiseKey) -> int:
    """The release's 64-bit tie-break seed: word 0 of the kind-1 stream of measurement
    :data:`TIEBREAK_MEASUREMENT` under ``key``. The integer steps break ties among equal
    weighted distances by uniforms keyed on it and on public node identities
    (:mod:`hierdp.postprocessors._passes_kernels`), so every subtree task, executor and thread
    count breaks them alike. A keystream position no noise draw reads (no plan uses that
    measurement id), so publishing the ties reveals nothing of the noise (ChaCha20 is a PRF)."""
    return int(segment_words(key, nonce_word(KIND_SEGMENT, TIEBREAK_MEASUREMENT), np.zeros(1, np.int64), 1)[0])


def draw_ids(ids: np.ndarray, k: int) -> np.ndarray:
    """Global draw indices ``g·k + c`` of rows ``ids`` (node identities) with ``k`` cells, row-major."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= (1 << 62) // max(k, 1)):
        raise ValueError("node identities must be non-negative and below 2**62 / cells per node")
    return (ids[:, None] * k + np.arange(k, dtype=np.int64)[None, :]).reshape(-1)


class KeyedStream(_WordSource):
    """An unbounded word stream of its own for one index (a node or a draw): the ChaCha20
    keystream of nonce ``(n0, index)`` from block ``block`` on; each :meth:`words` call
    takes the next whole blocks (an unused tail of its last block is discarded).

    A :class:`hierdp.rng.RandomSource`, for a third-party mechanism sampled node by node
    (``kind = 3``) and for the rare exact decisions of a draw on its extension (``kind = 2``).
    """

    def __init__(self, key: NoiseKey, n0: int, index: int, block: int = 0) -> None:
        self._key = key
        self._nonce = struct.pack("<IQ", n0, int(index))
        self.block = int(block)
        self.secure = key.secure
        self.seed = key.seed

    def words(self, size: int) -> np.ndarray:
        size = int(size)
        if size < 0:
            raise ValueError(f"words(size): size must be non-negative, got {size}")
        out = np.empty(size, dtype=np.uint64)
        nblocks = -(-size // 8)
        if self.block + nblocks > (1 << 32):
            raise OverflowError("a keyed stream of one draw ran past 2**35 words (this should not happen)")
        chacha20_fill(self._key._key, self._nonce, self.block, out)
        self.block += nblocks
        return out

    def __reduce__(self):
        raise TypeError("a keyed stream holds its noise key and is not pickled")

    def __repr__(self) -> str:
        return f"KeyedStream({self._key!r})"
