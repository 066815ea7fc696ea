"""Sources of randomness.

By default hierdp draws every random bit from a cryptographically secure source,
:class:`SecureRandom`; a seeded source (:class:`SeededRandom`, numpy's PCG64) exists for
tests and benchmarks only, and releases made with it are marked "not for publication".
All samplers in :mod:`hierdp.mechanisms` consume randomness through :class:`RandomSource`,
which only hands out uniformly random 64-bit words and exact uniform integers derived
from them, so that discrete samplers can be exact.

The default secure source: ChaCha20 keyed from the operating system
-----------------------------------------------------------------------
``os.urandom`` (``getrandom(2)`` on Linux) delivers about 50M words/s here, a bottleneck
for the exact samplers. ``SecureRandom()`` therefore expands OS entropy with the ChaCha20
stream cipher (RFC 8439), the same construction that Linux's own ``getrandom`` uses to
turn its entropy pool into output, and returns the keystream as words;
``SecureRandom(method="os")`` keeps the plain ``os.urandom`` path. The cipher itself is
OpenSSL's, through the ``cryptography`` package (audited, and tuned per CPU); hierdp only
manages keys, nonces and block counters. Output word ``j`` of a call is the
little-endian reading of keystream bytes ``8j .. 8j+7``, so
``words.astype('<u8').tobytes()`` *is* the keystream on every platform.

*Why this is a cryptographically secure source.* ChaCha20 is a pseudorandom function
family: under a uniformly random secret 256-bit key, the map (nonce, counter) -> 64-byte
block is believed indistinguishable from a truly random function by any feasible
adversary (the best published attacks reach 7 of its 20 rounds; it is standardised for
TLS 1.3 and drives the random-number generators of Linux, OpenBSD and FreeBSD). As
long as no (key, nonce, counter) input repeats, the output is therefore
indistinguishable from independent uniform bits, which is the assumption every DP
mechanism's privacy proof makes of its randomness (up to a negligible distinguishing
advantage). The key stays inside the process and is never logged or shown in a repr.

*Key, nonce and counter handling.* Each instance takes a fresh 32-byte key and 12-byte
nonce from ``os.urandom`` when created, and again (a *rekey*, counter back to 0) after
2**27 blocks = 2**30 words of one key, well before the 32-bit block counter could wrap.
Keystream leaves an instance only through a *reservation* (:meth:`SecureRandom.reserve`):
the next ``ceil(size / 8)`` block counters are taken under a lock before anything is
computed, so each (key, nonce, counter) triple belongs to at most one reservation, even
with threads, and is computed for that reservation only; the unused tail of a
reservation's last block is discarded, never handed out later. A call of
:meth:`SecureRandom.words` for more than :data:`SMALL_WORDS` words is a reservation of
exactly its size, computed at once. Smaller calls (the noise of one tree level is a
few dozen words; setting up an OpenSSL context per call cost 60 µs, most of a
10⁵-level release) are served from a *buffer*: a reservation of
:data:`BUFFER_WORDS` words, computed outside the lock, whose words are then handed out
front to back under the lock. Each served word is copied out and overwritten with zero
in the buffer in the same locked step that advances the read position, so every
buffered word is served at most once, whichever threads ask. When the buffer has fewer
words left than a call needs, a fresh reservation replaces it; the words it had left
are zeroed and dropped, never served. The buffer's words are keystream of blocks that
no other reservation holds (the buffer *is* a reservation), so serving them is the
same as having reserved them call by call, and a rekey for the block budget does not
touch the buffer: its blocks were taken under the old key before the rekey. Copying or
unpickling an instance yields a new, freshly keyed source with an empty buffer rather
than a duplicate of the stream or of the buffer. Forward secrecy (erasing old keys so
that a later memory compromise cannot reveal past output) is not provided: an attacker
who can read the process's memory can read the true counts too (and the up to
:data:`BUFFER_WORDS` words the buffer still holds, which is why served ones are zeroed
there: they are the noise of a published release).

*Noise keyed per node.* The counts of ``per_level``, ``leaves`` and ``marginals``
releases get their noise from :mod:`hierdp.keyed_noise`, not from a running stream: a
256-bit release key (from ``os.urandom``, or SHA-256 of a tag and the seed for tests) and
ChaCha20 address every draw's words by its public identity (measurement, node index in
the full tree, cell), so a release measured subtree by subtree, in any order and on any
thread count, adds exactly the in-memory noise. The argument above carries over: the
nonce (kind, measurement, high block bits or draw index) and the counter are unique for
each block, so under a secret key the words are independent uniform bits. A key never
serves two releases (the release path draws a fresh one each time). The sources in this
module serve the data-dependent structures (PrivTree, suffix trees), the ``ghazi`` plan
and contribution bounding.

*Fork safety.* A child process created by ``os.fork`` starts with a copy of the parent's
memory, key, counter and buffer included, and would replay the parent's stream. Two
checks prevent this: every reservation compares ``os.getpid()`` with the process id
recorded at the last rekey and rekeys when it changed; and an ``os.register_at_fork``
hook bumps a fork generation counter in the child, which is compared the same way, and
gives every live instance a fresh lock (one held by a parent thread at the fork would
never be released in the child). The buffer belongs to an *owner*, the (process id,
fork generation) pair current when its reservation was taken; every small call checks
the owner under the lock and drops (zeroes) a buffer that another process or fork
generation filled before serving anything, and the fork hook drops it in the child as
well. A buffer being filled by another thread at the moment of a fork is a local of
that thread, which does not exist in the child. The hook covers a grandchild that
happens to reuse the process id of an exited grandparent; the pid check covers forks
made without Python's fork hooks.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

import numpy as np

from hierdp.errors import expected_one_of

__all__ = ["RandomSource", "SecureRandom", "SeededRandom", "make_rng", "reserve_words"]

_CHUNK = 1 << 20  # words per os.urandom call (8 MiB)
_BLOCKS_PER_KEY = 1 << 27  # 2**30 words (8 GiB) per ChaCha20 key, far below the 2**32-block counter
MAX_BLOCKS = 1 << 32  # the RFC 8439 block counter is one 32-bit word
_ZEROS = bytes(1 << 20)  # plaintext: the keystream is the encryption of zeros (1 MiB at a time)
_ZEROS_VIEW = memoryview(_ZEROS)  # sliced without a copy (a slice of the bytes copies up to 1 MiB a call)
#: calls of :meth:`SecureRandom.words` for at most this many words are served from the buffer
SMALL_WORDS = 256
#: words per buffer reservation (64 KiB: computing them costs about one OpenSSL context set-up)
BUFFER_WORDS = 1 << 13
_EMPTY = np.zeros(0, dtype=np.uint64)


def _cipher(key: bytes, counter_nonce: bytes):
    """An OpenSSL ChaCha20 encryptor (``cryptography`` is imported on first use, not with hierdp)."""
    global _cipher
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    def make(key: bytes, counter_nonce: bytes):
        return Cipher(algorithms.ChaCha20(key, counter_nonce), None).encryptor()

    _cipher = make
    return make(key, counter_nonce)


def chacha20_fill(key: bytes, nonce: bytes, counter: int, out: np.ndarray) -> np.ndarray:
    """Write the ChaCha20 keystream (RFC 8439) of ``key`` and ``nonce`` from block
    ``counter`` on into the uint64 array ``out`` (little-endian words); returns ``out``.

    The keystream of the last block is cut short when ``len(out)`` is not a multiple of 8.
    The counter range used must stay within the 32-bit block counter.
    """
    if len(key) != 32 or len(nonce) != 12:
        raise ValueError("ChaCha20 needs a 32-byte key and a 12-byte nonce")
    if not (isinstance(out, np.ndarray) and out.dtype == np.uint64 and out.ndim == 1
            and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be a writable contiguous 1-D uint64 array")
    nblocks = -(-out.size // 8)
    if counter < 0 or counter + nblocks > MAX_BLOCKS:
        raise ValueError(f"block counter range [{counter}, {counter + nblocks}) outside [0, 2**32)")
    if out.size == 0:
        return out
    # cryptography's 16-byte "nonce" is the 32-bit little-endian block counter, then the RFC nonce
    enc = _cipher(key, int(counter).to_bytes(4, "little") + nonce)
    dest = out.view(np.uint8)
    if np.little_endian:
        view = memoryview(dest)
        for start in range(0, dest.size, len(_ZEROS)):
            stop = min(dest.size, start + len(_ZEROS))
            enc.update_into(_ZEROS_VIEW[: stop - start], view[start:stop])
    else:  # pragma: no cover - big-endian hosts
        out[:] = np.frombuffer(enc.update(bytes(dest.size)), dtype="<u8")
    return out


class RandomSource(Protocol):
    """What a sampler needs from a source of randomness."""

    secure: bool
    seed: int | None

    def words(self, size: int) -> np.ndarray:
        """``size`` independent uniformly random uint64 words."""
        ...

    def integers(self, high: int | np.ndarray, size: int) -> np.ndarray:
        """Exact uniform integers in ``[0, high)`` (``high`` scalar or per element, < 2**62)."""
        ...

    def uniform(self, size: int) -> np.ndarray:
        """Uniform floats ``k / 2**53`` with ``k`` uniform in ``[0, 2**53)``."""
        ...


class _WordSource:
    secure: bool = False
    seed: int | None = None

    def words(self, size: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def integers(self, high: int | np.ndarray, size: int) -> np.ndarray:
        """Exact uniform integers in ``[0, high)`` by masked rejection sampling.

        Each draw masks a random word down to the bit length of ``high - 1`` and rejects
        values ``>= high`` (acceptance probability > 1/2), so the result is exactly uniform.
        """
        size = int(size)
        high_arr = np.asarray(high, dtype=np.int64)
        if np.any(high_arr <= 0):
            raise ValueError("integers(high): high must be positive")
        if np.any(high_arr > (1 << 62)):
            raise ValueError("integers(high): high must be at most 2**62")
        scalar = high_arr.ndim == 0
        if scalar:
            high_arr = np.full(size, int(high_arr), dtype=np.int64)
        elif high_arr.shape != (size,):
            raise ValueError("integers(high, size): high must be a scalar or have length size")
        # mask = 2**bitlength(high-1) - 1, computed without floating point
        m = (high_arr - 1).astype(np.uint64)
        for shift in (1, 2, 4, 8, 16, 32):
            m |= m >> np.uint64(shift)
        out = np.empty(size, dtype=np.int64)
        todo = np.arange(size)
        while todo.size:
            cand = (self.words(todo.size) & m[todo]).astype(np.int64)
            ok = cand < high_arr[todo]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return out

    def uniform(self, size: int) -> np.ndarray:
        return (self.words(size) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


class SecureRandom(_WordSource):
    """Cryptographically secure random words (the default source).

    Parameters
    ----------
    method : {"chacha20", "os"}
        ``"chacha20"`` (default): the ChaCha20 keystream (RFC 8439) under a fresh 256-bit
        key and 96-bit nonce from ``os.urandom``, rekeyed after at most 2**30 words and in
        a forked child; see the module docstring. ``"os"``: every word straight from
        ``os.urandom`` (about 5-10x slower).

    Notes
    -----
    Copying or pickling an instance gives a freshly keyed source, never a replay of the
    original's stream. Safe to share between threads (block counters are reserved under
    a lock; the keystream itself is computed without the GIL; calls of up to
    :data:`SMALL_WORDS` words are served from a buffered reservation, each word once,
    under the same lock).
    """

    secure = True
    seed = None
    methods = ("chacha20", "os")

    def __init__(self, method: str = "chacha20") -> None:
        if method not in self.methods:
            raise ValueError(expected_one_of("secure randomness method", method, self.methods))
        self.method = method
        self._lock = threading.Lock()
        self._key = b""
        self._nonce = b""
        self._counter = 0
        self._pid = -1
        self._fork_generation = -1
        # the buffer of small calls: words [_buf_pos:] of _buf are unserved, all before are zero
        self._buf = _EMPTY
        self._buf_pos = 0
        self._buf_owner: tuple[int, int] = (-1, -1)
        if method == "chacha20":
            self._rekey()
            _LIVE.add(self)

    def _rekey(self) -> None:
        """Fresh key and nonce from the OS; block counter back to 0 (caller holds the lock)."""
        material = os.urandom(44)
        self._key, self._nonce = material[:32], material[32:]
        self._counter = 0
        self._pid = os.getpid()
        self._fork_generation = _FORK_GENERATION

    def _after_fork_in_child(self) -> None:
        # Only the forking thread exists in the child, so a fresh lock cannot be held by
        # anyone (the inherited one may be, by a parent thread that does not exist here).
        # The bumped fork generation makes the next call rekey; the parent's buffered
        # words are dropped here too (the owner check would drop them on the next call).
        self._lock = threading.Lock()
        self._drop_buffer()

    def _drop_buffer(self) -> None:
        """Zero the unserved words of the buffer and forget it (caller holds the lock)."""
        self._buf[self._buf_pos:] = 0
        self._buf, self._buf_pos, self._buf_owner = _EMPTY, 0, (-1, -1)

    def _take(self, size: int) -> np.ndarray | None:
        """The next ``size`` buffered words, zeroed in the buffer, or None when the buffer
        (of this process and fork generation) has fewer left (caller holds the lock)."""
        if self._buf_owner != (os.getpid(), _FORK_GENERATION):
            self._drop_buffer()
        pos = self._buf_pos
        if self._buf.size - pos < size:
            return None
        out = self._buf[pos : pos + size].copy()
        self._buf[pos : pos + size] = 0
        self._buf_pos = pos + size
        return out

    def _small(self, size: int) -> np.ndarray:
        """``size`` (<= :data:`SMALL_WORDS`) words from the buffer, refilled by a reservation."""
        while True:
            with self._lock:
                out = self._take(size)
            if out is not None:
                return out
            owner = (os.getpid(), _FORK_GENERATION)
            fresh = self.reserve(max(BUFFER_WORDS, size))()  # takes the lock itself; computed outside it
            with self._lock:
                if owner == (os.getpid(), _FORK_GENERATION):
                    self._drop_buffer()  # what another thread's refill left: dropped, never served
                    self._buf, self._buf_pos, self._buf_owner = fresh, 0, owner
                    out = self._take(size)
                    if out is not None:
                        return out
                else:  # pragma: no cover - a fork between the reservation and here
                    fresh[:] = 0

    def words(self, size: int) -> np.ndarray:
        size = int(size)
        if size < 0:
            raise ValueError(f"words(size): size must be non-negative, got {size}")
        if self.method == "os":
            out = np.empty(size, dtype=np.uint64)
            view = out.view(np.uint8)
            for start in range(0, size, _CHUNK):
                stop = min(size, start + _CHUNK)
                view[8 * start : 8 * stop] = np.frombuffer(os.urandom(8 * (stop - start)), dtype=np.uint8)
            return out
        if 0 < size <= SMALL_WORDS:
            return self._small(size)
        return self.reserve(size)()  # the next blocks, computed at once

    def reserve(self, size: int) -> Callable[..., np.ndarray]:
        """The next ``size`` words' place in the stream, taken now; the returned function
        computes them (once, in any thread; into ``out[:size]`` when given ``out``).
        Block counters are reserved under the lock (a rekey when the pid, the fork
        generation or the key's block budget says so), so no (key, nonce, counter) is
        ever used twice; :meth:`words` is a reservation computed at once (for more than
        :data:`SMALL_WORDS` words) or served from a buffered one (up to that many)."""
        size = int(size)
        if size < 0:
            raise ValueError(f"reserve(size): size must be non-negative, got {size}")
        if self.method == "os":
            return lambda out=None: self.words(size)
        parts = []
        pos = 0
        while pos < size:
            with self._lock:
                if (self._pid != os.getpid() or self._fork_generation != _FORK_GENERATION
                        or self._counter >= _BLOCKS_PER_KEY):
                    self._rekey()
                take = min(-(-(size - pos) // 8), _BLOCKS_PER_KEY - self._counter)
                parts.append((self._key, self._nonce, self._counter, pos, min(size, pos + 8 * take)))
                self._counter += take
            pos = parts[-1][4]

        def compute(out: np.ndarray | None = None) -> np.ndarray:
            out = np.empty(size, dtype=np.uint64) if out is None else out[:size]
            for key, nonce, counter, start, stop in parts:
                chacha20_fill(key, nonce, counter, out[start:stop])
            return out

        return compute

    def __reduce__(self):
        # a copy or an unpickled instance draws its own key: it never replays this stream
        return (SecureRandom, (self.method,))

    def __repr__(self) -> str:
        return f"SecureRandom(method={self.method!r})"


def _bump_fork_generation() -> None:
    """``os.fork`` hook (child side): every existing ChaCha20 source rekeys on its next call."""
    global _FORK_GENERATION
    _FORK_GENERATION += 1
    for src in list(_LIVE):
        src._after_fork_in_child()


_LIVE: weakref.WeakSet[SecureRandom] = weakref.WeakSet()
_FORK_GENERATION = 0
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_bump_fork_generation)


class SeededRandom(_WordSource):
    """Reproducible words from numpy's PCG64; for tests and benchmarks only (not private)."""

    secure = False

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seed = int(seed)
        self._bitgen = np.random.PCG64(self.seed)

    def words(self, size: int) -> np.ndarray:
        return self._bitgen.random_raw(int(size)).astype(np.uint64, copy=False)

    def reserve(self, size: int) -> Callable[..., np.ndarray]:
        """The next ``size`` words, computed later (in any thread) by the returned function:
        the same words :meth:`words` would give now (PCG64 jumps ahead by ``size``)."""
        size = int(size)
        ahead = np.random.PCG64()
        ahead.state = self._bitgen.state
        self._bitgen.advance(size)
        return lambda out=None: ahead.random_raw(size).astype(np.uint64, copy=False)

    def __repr__(self) -> str:
        return f"SeededRandom(seed={self.seed})"


def reserve_words(rng: RandomSource, size: int) -> Callable[..., np.ndarray]:
    """``rng.words(size)`` in two steps: the words' place in the stream is taken now, in
    the caller's order, and the returned function computes them later, in any thread
    (into its argument, a uint64 buffer of at least ``size`` words, where the source
    can). Sources without a ``reserve`` method compute the words now."""
    reserve = getattr(rng, "reserve", None)
    if reserve is not None:
        return reserve(size)
    words = rng.words(size)
    return lambda out=None: words


def make_rng(seed: int | None = None) -> RandomSource:
    """The secure source (ChaCha20 keyed from ``os.urandom``) when ``seed`` is None,
    else a seeded (non-private) source."""
    if seed is None:
        return SecureRandom()
    return SeededRandom(seed)
