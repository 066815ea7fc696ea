"""Throughput of hierdp's exact samplers against numpy's inexact ones, in the same run.

    python benchmarks/bench_samplers.py            # n = 2**24 (16.7M draws)
    python benchmarks/bench_samplers.py --quick    # n = 2**20

For each sampler: draws per second with the seeded source (PCG64 words) and with the
default secure source (os.urandom), and the ratio numpy_rate / hierdp_rate (lower is
better; the target is <= 3 for the exact discrete Laplace and discrete Gaussian). Every
rate is the best of three runs.
numpy baselines (not exact, not private): discrete Laplace as the difference of two
``Generator.geometric`` draws, discrete Gaussian as ``rint(Generator.normal)``,
Laplace as ``Generator.laplace``, Gaussian as ``Generator.normal``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from hierdp.mechanisms import _samplers as S
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.mechanisms.base import Sensitivity
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

    t0 = time.perf_counter()
    os.urandom(8 * n)
    urandom_words = n / (time.perf_counter() - t0)
    print(f"n = {n:,}; os.urandom: {urandom_words / 1e6:.1f} M words/s; "
          f"PCG64 raw: {_rate(lambda m: np.random.PCG64(0).random_raw(m), n) / 1e6:.1f} M words/s")
    print(f"{'sampler':34s} {'numpy M/s':>10s} {'seeded M/s':>11s} {'ratio':>6s} {'secure M/s':>11s} {'ratio':>6s}")
    eps = 1.0
    for scale in (0.5, 10.0, 1000.0):
        p = 1 - np.exp(-1 / scale)
        np_rate = _rate(lambda m: gen.geometric(p, m) - gen.geometric(p, m), n)
        par = S.dlap_params(scale)
        seeded = _rate(lambda m: S.sample_discrete_laplace(par, m, SeededRandom(1)), n)
        secure = _rate(lambda m: S.sample_discrete_laplace(par, m, SecureRandom()), n)
        print(f"{'discrete_laplace scale=' + format(scale, 'g'):34s} {np_rate / 1e6:10.1f} {seeded / 1e6:11.1f} "
              f"{np_rate / seeded:6.2f} {secure / 1e6:11.1f} {np_rate / secure:6.2f}")
    for sigma in (0.5, 10.0, 1000.0):
        np_rate = _rate(lambda m: np.rint(gen.normal(0.0, sigma, m)).astype(np.int64), n)
        par = S.dgauss_params(sigma * sigma)
        seeded = _rate(lambda m: S.sample_discrete_gaussian(par, m, SeededRandom(1)), n)
        secure = _rate(lambda m: S.sample_discrete_gaussian(par, m, SecureRandom()), n)
        print(f"{'discrete_gaussian sigma=' + format(sigma, 'g'):34s} {np_rate / 1e6:10.1f} {seeded / 1e6:11.1f} "
              f"{np_rate / seeded:6.2f} {secure / 1e6:11.1f} {np_rate / secure:6.2f}")
    zeros = np.zeros(n)
    sens = Sensitivity()
    np_rate = _rate(lambda m: gen.laplace(0.0, 1 / eps, m), n)
    seeded = _rate(lambda m: Laplace().sample(zeros[:m], eps, sens, SeededRandom(1)), n)
    secure = _rate(lambda m: Laplace().sample(zeros[:m], eps, sens, SecureRandom()), n)
    print(f"{'laplace (grid) eps=1':34s} {np_rate / 1e6:10.1f} {seeded / 1e6:11.1f} {np_rate / seeded:6.2f} "
          f"{secure / 1e6:11.1f} {np_rate / secure:6.2f}")
    rho = 0.5
    np_rate = _rate(lambda m: gen.normal(0.0, 1.0, m), n)
    seeded = _rate(lambda m: Gaussian().sample(zeros[:m], rho, sens, SeededRandom(1)), n)
    secure = _rate(lambda m: Gaussian().sample(zeros[:m], rho, sens, SecureRandom()), n)
    print(f"{'gaussian (grid) rho=0.5':34s} {np_rate / 1e6:10.1f} {seeded / 1e6:11.1f} {np_rate / seeded:6.2f} "
          f"{secure / 1e6:11.1f} {np_rate / secure:6.2f}")


if __name__ == "__main__":
    main()
