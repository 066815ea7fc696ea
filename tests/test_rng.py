"""The random sources: ChaCha20 (OpenSSL's, through ``cryptography``) against RFC 8439, the secure source's key/counter/fork
handling, uniformity of the words and exactness of ``integers``."""

from __future__ import annotations

import copy
import os
import pickle
import sys
import threading
import warnings

import numpy as np
import pytest
from scipy import stats

from hierdp import rng as R
from hierdp.rng import SecureRandom, SeededRandom, make_rng

# ---------------------------------------------------------------------------------------
# A direct transcription of RFC 8439 sections 2.1-2.4 in plain Python integers: the
# reference the keystream path (hierdp.rng.chacha20_fill) is checked against.
M32 = 0xFFFFFFFF


def _rotl(v: int, n: int) -> int:
    return ((v << n) & M32) | (v >> (32 - n))


def _qr(s: list[int], a: int, b: int, c: int, d: int) -> None:
    for x, y, z, r in ((a, b, d, 16), (c, d, b, 12), (a, b, d, 8), (c, d, b, 7)):
        s[x] = (s[x] + s[y]) & M32  # x += y; z ^= x; z <<<= r
        s[z] = _rotl(s[z] ^ s[x], r)


def ref_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    def le(b: bytes) -> list[int]:
        return [int.from_bytes(b[i:i + 4], "little") for i in range(0, len(b), 4)]

    init = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574] + le(key) + [counter] + le(nonce)
    s = list(init)
    for _ in range(10):
        for q in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                  (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
            _qr(s, *q)
    return b"".join(((x + y) & M32).to_bytes(4, "little") for x, y in zip(s, init))


def ref_stream(key: bytes, nonce: bytes, counter: int, nblocks: int) -> bytes:
    return b"".join(ref_block(key, counter + j, nonce) for j in range(nblocks))


def as_bytes(words: np.ndarray) -> bytes:
    return np.asarray(words, dtype=np.uint64).astype("<u8").tobytes()


RFC_KEY = bytes(range(32))


# ------------------------------------------------------------------- RFC 8439 vectors --
def test_reference_quarter_round_rfc8439_2_1_1():
    s = [0] * 16
    s[0], s[1], s[2], s[3] = 0x11111111, 0x01020304, 0x9B8D6F43, 0x01234567
    _qr(s, 0, 1, 2, 3)
    assert s[:4] == [0xEA2A92F4, 0xCB1CF8CE, 0x4581472E, 0x5881C4BB]


RFC_2_3_2_BLOCK = bytes.fromhex(
    "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
    "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")


def test_block_function_rfc8439_2_3_2():
    nonce = bytes.fromhex("000000090000004a00000000")
    assert as_bytes(R.chacha20_fill(RFC_KEY, nonce, 1, np.empty(8, dtype=np.uint64))) == RFC_2_3_2_BLOCK
    assert ref_block(RFC_KEY, 1, nonce) == RFC_2_3_2_BLOCK


RFC_2_4_2_PLAIN = (b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip "
                   b"for the future, sunscreen would be it.")
RFC_2_4_2_CIPHER = bytes.fromhex(
    "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
    "f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8"
    "07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736"
    "5af90bbf74a35be6b40b8eedf2785e42874d")
RFC_2_4_2_NONCE = bytes.fromhex("000000000000004a00000000")


def test_keystream_rfc8439_2_4_2():
    assert len(RFC_2_4_2_PLAIN) == len(RFC_2_4_2_CIPHER) == 114
    ks = as_bytes(R.chacha20_fill(RFC_KEY, RFC_2_4_2_NONCE, 1, np.empty(15, dtype=np.uint64)))[:114]
    assert bytes(p ^ k for p, k in zip(RFC_2_4_2_PLAIN, ks)) == RFC_2_4_2_CIPHER


@pytest.mark.parametrize("counter, nwords", [(0, 1), (3, 7), (5, 8), (17, 129), (1000, 16 * 8 * 3 + 5),
                                             (2**32 - 40, 40 * 8)])
def test_kernel_matches_spec_transcription(counter, nwords):
    """Random keys and nonces, cut-short last blocks, several lane groups, counters up to 2**32 - 1."""
    g = np.random.default_rng(counter + nwords)
    key, nonce = g.bytes(32), g.bytes(12)
    out = R.chacha20_fill(key, nonce, counter, np.empty(nwords, dtype=np.uint64))
    assert as_bytes(out) == ref_stream(key, nonce, counter, -(-nwords // 8))[: 8 * nwords]


def test_fill_crosses_the_one_mib_chunks_seamlessly():
    """Calls longer than the 1 MiB plaintext chunk continue one stream (no restart per chunk)."""
    key, nonce = bytes(range(1, 33)), bytes(range(12))
    n = (1 << 17) + 13  # one chunk of 2**17 words plus a cut-short block
    out = R.chacha20_fill(key, nonce, 7, np.empty(n, dtype=np.uint64))
    tail_block = (7 + (1 << 17) // 8)
    assert as_bytes(out[(1 << 17):]) == ref_stream(key, nonce, tail_block, 2)[: 8 * 13]
    assert as_bytes(out[:16]) == ref_stream(key, nonce, 7, 2)


def test_fill_refuses_counter_wrap_and_bad_input():
    k, n = bytes(32), bytes(12)
    with pytest.raises(ValueError, match=r"counter range .* outside \[0, 2\*\*32\)"):
        R.chacha20_fill(k, n, 2**32 - 1, np.empty(9, dtype=np.uint64))  # needs blocks 2**32 - 1 and 2**32
    with pytest.raises(ValueError, match="contiguous 1-D uint64"):
        R.chacha20_fill(k, n, 0, np.empty(8, dtype=np.int64))
    with pytest.raises(ValueError, match="32-byte key and a 12-byte nonce"):
        R.chacha20_fill(bytes(16), n, 0, np.empty(8, dtype=np.uint64))


# ----------------------------------------------- SecureRandom: keys, counters, rekeying --
class FakeEntropy:
    """Stands in for os.urandom: hands out predetermined key material and records calls."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = list(chunks)
        self.calls: list[int] = []
        self.real = os.urandom

    def __call__(self, n: int) -> bytes:
        self.calls.append(n)
        if n == 44 and self.chunks:
            return self.chunks.pop(0)
        return self.real(n)


def _material(i: int) -> bytes:
    return bytes((7 * i + j) % 256 for j in range(44))


def test_secure_words_are_the_rfc_keystream_of_the_os_key(monkeypatch):
    fake = FakeEntropy([RFC_KEY + RFC_2_4_2_NONCE])
    monkeypatch.setattr(os, "urandom", fake)
    r = SecureRandom()
    w = r.words(8 + 14)  # block 0, then blocks 1 and 2 (the RFC example starts at counter 1)
    ks = bytes(p ^ c for p, c in zip(RFC_2_4_2_PLAIN, RFC_2_4_2_CIPHER))
    assert as_bytes(w[8:]) == ks[:112]
    assert fake.calls == [44]


def test_each_call_uses_new_blocks_and_rekeys_before_the_limit(monkeypatch):
    """The unbuffered layout (every call its own reservation); the buffer of small calls
    is tested below."""
    fake = FakeEntropy([_material(1), _material(2), _material(3)])
    monkeypatch.setattr(os, "urandom", fake)
    monkeypatch.setattr(R, "_BLOCKS_PER_KEY", 3)
    monkeypatch.setattr(R, "SMALL_WORDS", 0)
    r = SecureRandom()
    a = r.words(5)  # block 0 of key 1 (its last 3 words are discarded)
    b = r.words(20)  # blocks 1, 2 of key 1, then block 0 of key 2
    c = r.words(8)  # block 1 of key 2
    k1, k2 = _material(1), _material(2)
    s1 = ref_stream(k1[:32], k1[32:], 0, 3)
    s2 = ref_stream(k2[:32], k2[32:], 0, 2)
    assert as_bytes(a) == s1[:40]
    assert as_bytes(b) == s1[64:192] + s2[:32]
    assert as_bytes(c) == s2[64:128]
    assert fake.calls == [44, 44]


def test_reserved_words_take_their_blocks_in_reservation_order(monkeypatch):
    """reserve() takes the blocks at once and computes them later (here in reverse
    order, one into a buffer): the same keystream words() would have given, across a
    rekey, and no block twice."""
    fake = FakeEntropy([_material(1), _material(2)])
    monkeypatch.setattr(os, "urandom", fake)
    monkeypatch.setattr(R, "_BLOCKS_PER_KEY", 3)
    monkeypatch.setattr(R, "SMALL_WORDS", 0)  # words(3) below is a reservation of its own
    r = SecureRandom()
    f1 = r.reserve(10)  # blocks 0, 1 of key 1 (the last 6 words discarded)
    f2 = r.reserve(12)  # block 2 of key 1, block 0 of key 2
    c = r.words(3)  # block 1 of key 2
    buf = np.zeros(16, dtype=np.uint64)
    b = f2(buf)
    a = f1()
    k1, k2 = _material(1), _material(2)
    s1 = ref_stream(k1[:32], k1[32:], 0, 3)
    s2 = ref_stream(k2[:32], k2[32:], 0, 2)
    assert as_bytes(a) == s1[:80]
    assert as_bytes(b) == s1[128:192] + s2[:32] and np.shares_memory(b, buf)
    assert as_bytes(c) == s2[64:88]


def test_seeded_reserve_gives_the_words_in_stream_order():
    r, ref = SeededRandom(4), SeededRandom(4).words(30)
    f1, f2 = r.reserve(10), r.reserve(15)
    tail = r.words(5)
    np.testing.assert_array_equal(np.r_[f1(), f2(), tail], ref)
    np.testing.assert_array_equal(R.reserve_words(r, 3)(), SeededRandom(4).words(33)[30:])


def test_default_rekey_limit_is_within_the_counter_range():
    assert R._BLOCKS_PER_KEY * 8 <= 2**30 and R._BLOCKS_PER_KEY <= R.MAX_BLOCKS


def test_threads_never_share_a_block(monkeypatch):
    monkeypatch.setattr(os, "urandom", FakeEntropy([_material(5)]))
    monkeypatch.setattr(R, "SMALL_WORDS", 0)  # one reservation per call (the buffer: below)
    r = SecureRandom()
    got: list[bytes] = []
    lock = threading.Lock()

    def work():
        for _ in range(50):
            blk = as_bytes(r.words(8))
            with lock:
                got.append(blk)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    k = _material(5)
    expected = {ref_block(k[:32], j, k[32:]) for j in range(200)}
    assert len(got) == 200 and set(got) == expected


# ------------------------------------------------ SecureRandom: the buffer of small calls --
def test_small_calls_are_served_from_buffered_reservations(monkeypatch):
    """Calls of up to SMALL_WORDS words are served front to back from a reservation of
    BUFFER_WORDS words: the exact RFC 8439 keystream of its blocks; a buffer with too few
    words left is replaced (its rest zeroed, never served); served words are zeroed in
    the buffer; large calls keep their own reservations in between."""
    fake = FakeEntropy([_material(40)])
    monkeypatch.setattr(os, "urandom", fake)
    monkeypatch.setattr(R, "BUFFER_WORDS", 16)  # two blocks per buffer
    monkeypatch.setattr(R, "SMALL_WORDS", 8)
    r = SecureRandom()
    a = r.words(5)  # buffer 1 = blocks 0, 1: its words 0-4
    b = r.words(8)  # its words 5-12
    first = r._buf
    c = r.words(6)  # 3 left < 6: buffer 2 = blocks 2, 3 (words 16-31); words 13-15 dropped
    assert first.size == 16 and not first.any()  # served and dropped words are zero in the old buffer
    d = r.words(20)  # a large call: its own reservation, blocks 4-6 (words 32-51; 52-55 discarded)
    e = r.words(8)  # buffer 2 goes on: words 22-29
    f = r.words(3)  # 2 left < 3: buffer 3 = blocks 7, 8: words 56-58
    k = _material(40)
    ks = ref_stream(k[:32], k[32:], 0, 9)

    def w(i: int, j: int) -> bytes:  # words i .. j-1 of the key's keystream
        return ks[8 * i : 8 * j]

    assert [as_bytes(x) for x in (a, b, c, d, e, f)] == [w(0, 5), w(5, 13), w(16, 22), w(32, 52), w(22, 30),
                                                         w(56, 59)]
    assert not r._buf[:3].any() and as_bytes(r._buf[3:]) == w(59, 72)  # the rest: unserved, intact
    assert fake.calls == [44]


def test_a_buffer_may_span_a_rekey(monkeypatch):
    """A buffer reservation that reaches the key's block budget takes the old key's last
    blocks and the new key's first ones, like any reservation; both are served once."""
    fake = FakeEntropy([_material(42), _material(43)])
    monkeypatch.setattr(os, "urandom", fake)
    monkeypatch.setattr(R, "_BLOCKS_PER_KEY", 3)
    monkeypatch.setattr(R, "BUFFER_WORDS", 16)
    r = SecureRandom()
    got = b"".join(as_bytes(r.words(8)) for _ in range(6))
    k1, k2 = _material(42), _material(43)
    # buffers: key 1 blocks 0-1 | key 1 block 2 + key 2 block 0 | key 2 blocks 1-2
    assert got == ref_stream(k1[:32], k1[32:], 0, 3) + ref_stream(k2[:32], k2[32:], 0, 3)
    assert fake.calls == [44, 44]


def test_threads_never_get_the_same_word(monkeypatch):
    """Threads hammering small (and some large) draws and reservations: with a keystream
    whose every word names its key, block and place, no word is served twice, none is a
    zeroed (already served or dropped) one, and every word asked for is served."""
    ids: dict[bytes, int] = {}
    ids_lock = threading.Lock()

    def labelled_fill(key: bytes, nonce: bytes, counter: int, out: np.ndarray) -> np.ndarray:
        with ids_lock:
            kid = ids.setdefault(key, len(ids) + 1)  # from 1: no real word is 0
        out[:] = (np.uint64(kid) << np.uint64(40)) | (np.uint64(8 * counter) + np.arange(out.size, dtype=np.uint64))
        return out

    monkeypatch.setattr(R, "chacha20_fill", labelled_fill)
    monkeypatch.setattr(R, "BUFFER_WORDS", 64)  # many refills, raced by the threads
    monkeypatch.setattr(R, "_BLOCKS_PER_KEY", 200)  # and rekeys
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    r = SecureRandom()
    outs: list[list[np.ndarray]] = [[] for _ in range(4)]
    asked = [0] * 4

    def work(t: int) -> None:
        g = np.random.default_rng(t)
        for i in range(1500):
            n = int(g.integers(1, R.SMALL_WORDS + 1)) if i % 50 else 300
            outs[t].append(r.reserve(n)() if i % 97 == 0 else r.words(n))
            asked[t] += n

    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(switch)
    allw = np.concatenate([x for o in outs for x in o])
    assert allw.size == sum(asked)
    assert np.unique(allw).size == allw.size, "a word was served twice"
    assert np.all(allw != 0), "a zeroed buffer word was served"
    assert len(ids) > 2  # the run did cross rekeys


def test_two_instances_and_two_calls_differ():
    a, b = SecureRandom(), SecureRandom()
    wa, wb = a.words(4), b.words(4)
    assert not np.array_equal(wa, wb)
    assert not np.array_equal(wa, a.words(4))
    assert not np.array_equal(SecureRandom("os").words(4), SecureRandom("os").words(4))


def test_copies_and_pickles_are_freshly_keyed(monkeypatch):
    fake = FakeEntropy([_material(i) for i in range(10, 14)])
    monkeypatch.setattr(os, "urandom", fake)
    r = SecureRandom()
    first = r.words(8)  # the buffer now holds words r has not served yet
    left = r._buf[r._buf_pos:].copy()
    blob = pickle.dumps(r)
    clones = [copy.copy(r), copy.deepcopy(r), pickle.loads(blob)]
    firsts = {as_bytes(x.words(8)) for x in clones} | {as_bytes(first)}
    assert len(firsts) == 4 and fake.calls == [44] * 4
    assert all(isinstance(c, SecureRandom) and c.method == "chacha20" for c in clones)
    assert all(np.intersect1d(c.words(512), left).size == 0 for c in clones)  # no clone serves r's buffer
    assert as_bytes(left[:2]) not in blob and _material(10)[:8] not in blob  # neither buffer nor key pickled
    np.testing.assert_array_equal(r.words(64), left[:64])  # r itself goes on with its buffer


def test_changed_pid_rekeys(monkeypatch):
    """A fork without Python's hooks: the pid check rekeys and drops the parent's buffer."""
    fake = FakeEntropy([_material(20), _material(21)])
    monkeypatch.setattr(os, "urandom", fake)
    r = SecureRandom()
    r.words(8)  # the buffer holds the parent's next words
    buf = r._buf
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)  # as seen by a forked child
    w = r.words(8)
    k = _material(21)
    assert as_bytes(w) == ref_block(k[:32], 0, k[32:])  # new key, counter back at 0
    assert fake.calls == [44, 44] and not buf.any()  # the old buffer zeroed, not served


def test_fork_hook_rekeys_every_live_source(monkeypatch):
    fake = FakeEntropy([_material(30), _material(31)])
    monkeypatch.setattr(os, "urandom", fake)
    r = SecureRandom()
    r.words(8)
    buf, old_lock = r._buf, r._lock
    R._bump_fork_generation()  # what os.fork runs in the child
    assert r._lock is not old_lock and not buf.any()  # the parent's buffered words are dropped
    k = _material(31)
    assert as_bytes(r.words(8)) == ref_block(k[:32], 0, k[32:])


def _fork_and_draw(src: SecureRandom, n: int) -> tuple[np.ndarray, np.ndarray]:
    """First ``n`` words drawn in a forked child and, after it, in the parent."""
    rfd, wfd = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded fork" on 3.12+
        pid = os.fork()
    if pid == 0:  # child: draw, report, leave without running any pytest machinery
        try:
            os.write(wfd, src.words(n).tobytes())
        finally:
            os._exit(0)
    os.close(wfd)
    data = b""
    while len(data) < 8 * n:
        chunk = os.read(rfd, 8 * n - len(data))
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    os.waitpid(pid, 0)
    assert len(data) == 8 * n, "the child did not report its words"
    return np.frombuffer(data, dtype=np.uint64), src.words(n)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="platform without os.fork")
@pytest.mark.parametrize("used_before_fork", [True, False])
def test_forked_child_does_not_replay_the_parent(used_before_fork):
    src = SecureRandom()
    if used_before_fork:
        src.words(100)
    child, parent = _fork_and_draw(src, 64)
    assert not np.array_equal(child, parent)
    assert np.intersect1d(child, parent).size == 0  # not even a shifted copy of a block


@pytest.mark.skipif(not hasattr(os, "fork"), reason="platform without os.fork")
def test_forked_child_never_serves_the_parents_buffered_words():
    src = SecureRandom()
    src.words(8)  # the buffer now holds the parent's next BUFFER_WORDS - 8 words
    left = src._buf[src._buf_pos:].copy()
    child, parent = _fork_and_draw(src, 64)
    np.testing.assert_array_equal(parent, left[:64])  # the parent goes on with its buffer
    assert np.intersect1d(child, left).size == 0


def test_method_choice_and_errors():
    assert make_rng(None).method == "chacha20" and make_rng(None).secure and make_rng(None).seed is None
    assert repr(SecureRandom("os")) == "SecureRandom(method='os')"
    with pytest.raises(ValueError, match=r"unknown secure randomness method 'chacha'.*did you mean 'chacha20'"):
        SecureRandom("chacha")
    with pytest.raises(ValueError, match="size must be non-negative"):
        SecureRandom().words(-1)
    assert SecureRandom().words(0).shape == (0,) and SecureRandom("os").words(0).shape == (0,)


# --------------------------------------------------------------------- uniformity --
SOURCES = [lambda: SecureRandom(), lambda: SecureRandom("os"), lambda: SeededRandom(2024)]
SOURCE_IDS = ["chacha20", "os", "seeded"]
P_MIN = 1e-6  # fresh secure randomness: a false alarm once in a million runs


@pytest.mark.parametrize("make", SOURCES, ids=SOURCE_IDS)
def test_words_bytes_and_bits_are_uniform(make):
    w = make().words(1 << 20)
    assert w.dtype == np.uint64
    by = w.view(np.uint8)
    counts = np.bincount(by, minlength=256)
    assert stats.chisquare(counts).pvalue > P_MIN
    pairs = np.bincount(by[0::2].astype(np.int64) * 256 + by[1::2], minlength=65536)
    assert stats.chisquare(pairs).pvalue > P_MIN
    bits = ((w[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)).sum(axis=0)
    z = (bits - w.size / 2) / np.sqrt(w.size / 4)
    assert np.abs(z).max() < 5.5  # Bonferroni over 64 positions: p < 3e-6


@pytest.mark.parametrize("make", SOURCES, ids=SOURCE_IDS)
def test_integers_and_uniform_are_uniform(make):
    src = make()
    x = src.integers(6, 600_000)
    assert x.min() >= 0 and x.max() <= 5
    assert stats.chisquare(np.bincount(x, minlength=6)).pvalue > P_MIN
    high = np.repeat(np.array([1, 3, 1000, 2**62], dtype=np.int64), 50_000)
    y = src.integers(high, high.size)
    assert np.all((y >= 0) & (y < high))
    assert np.all(y[:50_000] == 0)
    assert stats.chisquare(np.bincount(y[50_000:100_000], minlength=3)).pvalue > P_MIN
    assert stats.chisquare(np.bincount(y[100_000:150_000] // 100, minlength=10)).pvalue > P_MIN
    assert stats.kstest(y[150_000:] / 2.0**62, "uniform").pvalue > P_MIN
    u = src.uniform(200_000)
    assert np.all((u >= 0) & (u < 1)) and np.all(u * 2.0**53 == np.floor(u * 2.0**53))
    assert stats.kstest(u, "uniform").pvalue > P_MIN


class _CountingWords(R._WordSource):
    """Words OFFSET + 0, 1, 2, ...: the low bits cycle through every pattern in turn, the
    high bits are set (so the mask must remove them)."""

    OFFSET = 0xA5A5_0000_0000_0000

    def __init__(self) -> None:
        self.next = 0

    def words(self, size: int) -> np.ndarray:
        out = np.arange(self.next, self.next + size, dtype=np.uint64) + np.uint64(self.OFFSET)
        self.next += size
        return out


@pytest.mark.parametrize("high", [1, 2, 3, 5, 6, 7, 12, 1000])
def test_integers_masked_rejection_is_exactly_uniform(high):
    """Masked rejection consumes a prefix of the word stream and keeps exactly the masked
    values < high. With b = bit length of high - 1 and low bits cycling with period 2**b,
    K * high draws must return each value exactly K times and use K periods minus the
    2**b - high rejected words at the end of the last one."""
    b = int(high - 1).bit_length()
    reps = 3
    src = _CountingWords()
    x = src.integers(high, reps * high)
    np.testing.assert_array_equal(np.bincount(x, minlength=high), np.full(high, reps))
    assert src.next == reps * 2**b - (2**b - high)
