"""Throughput of hierdp's exact samplers against numpy's inexact ones, in the same run.

    python benchmarks/bench_samplers.py            # n = 2**24 (16.7M draws)
    python benchmarks/bench_samplers.py --quick    # n = 2**20

First the raw word rates of the three sources (PCG64, the default secure ChaCha20 source,
os.urandom). Then for each sampler: draws per second with the seeded source (PCG64
words), the default secure source (``SecureRandom()``, ChaCha20 keyed from os.urandom)
and the plain os.urandom source (``SecureRandom(method="os")``), each with the ratio
numpy_rate / hierdp_rate (lower is better; the target is <= 3 for the exact discrete
Laplace and discrete Gaussian with the default secure source). Every rate is the best of
three runs.
numpy baselines (not exact, not private): discrete Laplace as the difference of two
``Generator.geometric`` draws, discrete Gaussian as ``rint(Generator.normal)``,
Laplace as ``Generator.laplace``, Gaussian as ``Generator.normal``.

Keyed noise (issue 30 item 2, :mod:`hierdp.keyed_noise`), at census parameters
(discrete Laplace ε = 0.1 .. 4, discrete Gaussian σ = 1 .. 100, sensitivity 1), one thread
unless said: ns per draw of numpy's inexact sampler, of the stream sampler on the default
secure source ("today"), of the keyed path (every draw on its own ChaCha20 segment of ``W``
words, extension stream when it runs out) and of its keystream alone ("stream", computed
as the keyed path computes it: one OpenSSL context, 256 KiB pieces); ratios keyed/numpy
(target <= 2), keyed/today and stream/numpy (the share of the 2x budget the keystream
alone takes); the keyed path on 2 threads; and the share of draws that needed their
extension (measured on 200,000 draws). One-thread figures are the CPU time of the thread
(best of 5 interleaved rounds), the 2-thread ones wall time: the machine is shared::

    python benchmarks/bench_samplers.py --keyed-only --n 4000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hierdp
from hierdp.keyed_noise import KIND_SEGMENT, NoiseKey, nonce_word, segment_stream
from hierdp.mechanisms import _sampler_kernel as SK
from hierdp.mechanisms import _samplers as S
from hierdp.mechanisms.base import Sensitivity
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.rng import SecureRandom, SeededRandom


def _rate(fn, n: int, repeat: int = 3) -> float:
    """Draws per second, best of ``repeat`` runs (the machine is shared)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return n / best


def _extension_share(gauss: int, a_num: int, a_den: int, dg: tuple[int, int, int], seg: int, zig=None,
                     n: int = 200_000) -> float:
    """Share of ``n`` draws whose segment of ``seg`` words runs out (the kernel alone)."""
    jbits, g0, gint, fnum, fden = S._core(a_num, a_den)
    cb = S._table(a_num, a_den, jbits, g0, S._TABLE_WORDS)
    zarrs = S._NO_ZIG if zig is None else (zig.zi, zig.zf, zig.thr, zig.alias, zig.hinv)
    words = SeededRandom(5).words(n * seg).view(np.int64)
    out = np.empty(n, np.int64)
    st = np.zeros(SK._NSTATE, np.int64)
    i = ext = 0
    while i < n:
        st[:] = 0
        st[0] = SK._ZA if gauss == 2 else SK._YB
        st[16] = i * seg
        i, status = SK._fill(gauss, out, i, jbits, g0, gint, fnum, fden, dg[0], dg[1], 1.0 / dg[2], S._ACCEPT_FUZZ,
                            True, cb, words, seg, st, *zarrs)
        if status == 0:
            break
        ext += 1
        i += 1
    return ext / n


def _cpu_ns(fns, n: int, repeat: int = 5) -> list[float]:
    """ns of CPU time of this thread per draw for each of ``fns`` (one thread), best of
    ``repeat`` rounds taken in turn: on a shared machine the CPU time of one thread moves far
    less with the load than the wall time (it still moves: caches and the core are shared)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for j, f in enumerate(fns):
            t0 = time.thread_time()
            f(n)
            best[j] = min(best[j], time.thread_time() - t0)
    return [1e9 * b / n for b in best]


def keyed_table(n: int) -> None:
    """Keyed draws beside today's stream sampler and numpy, per draw (see the docstring)."""
    gen = np.random.default_rng(0)
    key = NoiseKey.fresh()
    draws = np.arange(n, dtype=np.int64)
    old = hierdp.set_threads(1)
    piece = np.empty(S._PIECE_WORDS + 8, dtype=np.uint64)
    n0 = nonce_word(KIND_SEGMENT, 0)

    def keystream(m: int, seg: int) -> None:
        """The keyed path's keystream alone: W words a draw, a 256 KiB piece at a time."""
        s = segment_stream(key, n0, 0, m, seg)
        per = S._PIECE_WORDS // seg * seg
        for _ in range(0, m * seg, per):
            s.next_into(piece[:per])

    print(f"keyed noise, n = {n:,} draws, ns per draw (lower is better); one thread: CPU time of the thread, "
          "best of 5 interleaved rounds; 2T: wall time, best of 3")
    print(f"{'sampler':28s} {'W':>2s} {'numpy':>7s} {'today':>7s} {'keyed':>7s} {'stream':>7s} {'k/np':>6s} "
          f"{'k/today':>7s} {'stream/np':>9s} {'keyed 2T':>8s} {'ext share':>9s}")
    cases = []
    for eps in (0.1, 0.5, 1.0, 2.0, 4.0):
        par = S.dlap_params(1 / eps)
        q = 1 - np.exp(-eps)
        seg = S.segment_length(0, par.s, par.t)
        cases.append((f"discrete_laplace eps={eps:g}", seg,
                      lambda m, q=q: gen.geometric(q, m) - gen.geometric(q, m),
                      lambda m, par=par: S.sample_discrete_laplace(par, m, SecureRandom()),
                      lambda m, par=par: S.sample_discrete_laplace_keyed(par, key, draws[:m]),
                      lambda par=par, seg=seg: _extension_share(0, par.s, par.t, (0, 1, 1), seg)))
    for sigma in (1.0, 3.0, 10.0, 32.0, 100.0):
        gp = S.dgauss_params(sigma * sigma)
        z = S._zig(gp.t, gp.mm, gp.bb)
        seg = S._zig_segment_length(z)
        cases.append((f"discrete_gaussian sigma={sigma:g}", seg,
                      lambda m, sigma=sigma: np.rint(gen.normal(0.0, sigma, m)).astype(np.int64),
                      lambda m, gp=gp: S.sample_discrete_gaussian(gp, m, SecureRandom()),
                      lambda m, gp=gp: S.sample_discrete_gaussian_keyed(gp, key, draws[:m]),
                      lambda gp=gp, z=z, seg=seg: _extension_share(2, z.a.numerator, z.a.denominator,
                                                                   (gp.mm, gp.bb, gp.den), seg, z)))
    try:
        for label, seg, np_fn, today_fn, keyed_fn, ext_fn in cases:
            keyed_fn(1 << 17)  # compile / warm
            ns = _cpu_ns([np_fn, today_fn, keyed_fn, lambda m, seg=seg: keystream(m, seg)], n)
            hierdp.set_threads(2)
            ns2 = 1e9 / _rate(keyed_fn, n)
            hierdp.set_threads(1)
            print(f"{label:28s} {seg:2d} {ns[0]:7.1f} {ns[1]:7.1f} {ns[2]:7.1f} {ns[3]:7.1f} {ns[2] / ns[0]:6.2f} "
                  f"{ns[2] / ns[1]:7.2f} {ns[3] / ns[0]:9.2f} {ns2:8.1f} {ext_fn():9.1e}", flush=True)
    finally:
        hierdp.set_threads(old)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 2**20 instead of 2**24")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--keyed-only", action="store_true", help="only the keyed-noise table")
    args = ap.parse_args()
    n = args.n or (1 << 20 if args.quick else 1 << 24)
    if args.keyed_only:
        keyed_table(n)
        return
    gen = np.random.default_rng(0)
    # warm up the compiled kernels
    S.discrete_laplace(3.0, 1000, SeededRandom(0))
    S.discrete_gaussian(3.0, 1000, SeededRandom(0))

    SecureRandom().words(1000)
    pcg = _rate(lambda m: np.random.PCG64(0).random_raw(m), n)
    chacha = _rate(lambda m: SecureRandom().words(m), n)
    urandom = _rate(lambda m: SecureRandom(method="os").words(m), n)
    print(f"n = {n:,}; words: PCG64 {pcg / 1e6:.1f} M/s, secure chacha20 {chacha / 1e6:.1f} M/s, "
          f"secure os.urandom {urandom / 1e6:.1f} M/s")
    print(f"{'sampler':34s} {'numpy M/s':>10s} {'seeded M/s':>11s} {'ratio':>6s} {'chacha M/s':>11s} {'ratio':>6s}"
          f" {'os M/s':>11s} {'ratio':>6s}")

    def row(label: str, np_rate: float, fn) -> None:
        cols = [f"{label:34s} {np_rate / 1e6:10.1f}"]
        for make in (lambda: SeededRandom(1), SecureRandom, lambda: SecureRandom(method="os")):
            r = _rate(lambda m: fn(m, make()), n)
            cols.append(f"{r / 1e6:11.1f} {np_rate / r:6.2f}")
        print(" ".join(cols), flush=True)

    eps = 1.0
    for scale in (0.5, 10.0, 1000.0):
        p = 1 - np.exp(-1 / scale)
        par = S.dlap_params(scale)
        row("discrete_laplace scale=" + format(scale, "g"),
            _rate(lambda m: gen.geometric(p, m) - gen.geometric(p, m), n),
            lambda m, rng: S.sample_discrete_laplace(par, m, rng))
    for sigma in (0.5, 10.0, 1000.0):
        par = S.dgauss_params(sigma * sigma)
        row("discrete_gaussian sigma=" + format(sigma, "g"),
            _rate(lambda m: np.rint(gen.normal(0.0, sigma, m)).astype(np.int64), n),
            lambda m, rng: S.sample_discrete_gaussian(par, m, rng))
    zeros = np.zeros(n)
    sens = Sensitivity()
    row("laplace (grid) eps=1", _rate(lambda m: gen.laplace(0.0, 1 / eps, m), n),
        lambda m, rng: Laplace().sample(zeros[:m], eps, sens, rng))
    rho = 0.5
    row("gaussian (grid) rho=0.5", _rate(lambda m: gen.normal(0.0, 1.0, m), n),
        lambda m, rng: Gaussian().sample(zeros[:m], rho, sens, rng))
    print()
    keyed_table(min(n, 1 << 22))


if __name__ == "__main__":
    main()
