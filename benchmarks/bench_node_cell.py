"""Time per node-cell of a whole release, end to end, against numpy floors (issue 30 item 4).

A complete tree (fan-out 10: 111,111 nodes at height 6, 11,111 at height 5) with sparse
Poisson leaf counts in ``k`` cells; one release each of

* ``noise+blue``: discrete Gaussian noise (keyed per node and cell, as every release draws
  it) and ``blue``;
* ``chain``: the same, then top-down ``nonneg`` and ``round`` (the census chain; their
  default ordering, each unit's total first then its cells with both margins held);
* ``chain cells``: the same steps cell by cell (``ordering="cells"``, before issue 47);

warm (the kernels compiled, one release run before), best of ``--repeat``, on 1 and 2
threads. Printed: ns per node-cell and two floors measured in the same run on the same
number of values — numpy's inexact sampler of the same law (``rint(normal)``, one
thread) and a numpy streaming pass ``x * 2.0`` — with the ratios. The issue's target is
<= 100 ns per node-cell for the chain on 2 threads.

    PYTHONPATH=. python benchmarks/bench_node_cell.py                 # 111k x 256 and 11k x 1,024
    PYTHONPATH=. python benchmarks/bench_node_cell.py --quick         # 11k x 256
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def best(fn, repeat: int) -> float:
    out = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import hierdp

    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    cases = [(5, 256)] if args.quick else [(6, 256), (5, 1024)]
    rng = np.random.default_rng(0)
    print(f"{'nodes':>8s} {'cells':>6s} {'threads':>7s} {'step':>11s} {'s':>7s} {'ns/node-cell':>12s} "
          f"{'x sampler':>9s} {'x stream':>8s}")
    for height, k in cases:
        t = hierdp.Tree.complete(fanout=10, height=height)
        leaves = rng.poisson(0.3, size=(t.n_leaves, k))
        vals = t.aggregate(leaves)
        nk = t.n_nodes * k
        sigma = 3.0
        floor_s = best(lambda: np.rint(np.random.default_rng(1).normal(0.0, sigma, nk)), args.repeat)
        ones = np.ones(nk)
        floor_x = best(lambda: ones * 2.0, args.repeat)
        print(f"{t.n_nodes:8,d} {k:6d} {'':>7s} {'floors':>11s} sampler {floor_s * 1e9 / nk:.1f} ns, "
              f"stream {floor_x * 1e9 / nk:.1f} ns per value")
        rho = 0.5 / sigma**2 * (height + 1)  # about sigma per level with the equal split
        chains = {"noise+blue": ["blue"],
                  "chain": ["blue", "nonneg", "round"],  # the default: totals first (issue 47)
                  "chain cells": ["blue", {"name": "nonneg", "ordering": "cells"},
                                  {"name": "round", "method": "topdown", "ordering": "cells"}]}
        for threads in (1, 2):
            old = hierdp.set_threads(threads)
            try:
                for name, chain in chains.items():
                    def run(chain=chain) -> None:
                        hierdp.release(t, vals, rho=rho, mechanism="discrete_gaussian", postprocess=chain, seed=3)
                    run()  # warm: kernels compiled, pools started
                    s = best(run, args.repeat)
                    print(f"{t.n_nodes:8,d} {k:6d} {threads:7d} {name:>11s} {s:7.2f} {s * 1e9 / nk:12.1f} "
                          f"{s / floor_s:9.2f} {s / floor_x:8.1f}")
            finally:
                hierdp.set_threads(old)
    print("(shared 2-core VM: compare ratios, not seconds)")


if __name__ == "__main__":
    main()
