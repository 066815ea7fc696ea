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
"""

from __future__ import annotations

import argparse
import time

import numpy as np

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 2**20 instead of 2**24")
    ap.add_argument("--n", type=int, default=None)
    args = ap.parse_args()
    n = args.n or (1 << 20 if args.quick else 1 << 24)
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


if __name__ == "__main__":
    main()
