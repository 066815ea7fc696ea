"""Marginal-query strategies vs measuring the full histogram: ~10⁵ leaves x 200 cells.

A region (10) > district (100 each) > area (100 each) tree (101,011 nodes, 100,000
leaves); cells age (20) x sex (2) x race (5) = 200 (``--age 100 --race 1`` for the
100 x 2 layout of bench_cells.py). Node counts are Poisson leaf cells aggregated (no
records: this measures the plan, not counting). Routes, each a full ``hierdp.release``
(noise + estimate), seconds (best of ``--repeat``) and the tracemalloc peak:

* full — ``per_level`` with discrete Laplace on every cell, then BLUE (the baseline);
* marginals-same — plan ``marginals``, every level the same 3-marginal strategy
  ``{(age, sex, race): 0.5, (age,): 0.3, (): 0.2}``;
* marginals-mixed — a different 3-marginal strategy per level (TopDown-like: totals
  and one-way marginals high up, the detailed histogram at the bottom).

It also prints the RMSE per cell of each route at the leaves and at the districts, and the
plan's own GLS time apart from the noise (``--split``).

    python benchmarks/bench_marginals.py
    python benchmarks/bench_marginals.py --age 100 --race 1
    python benchmarks/bench_marginals.py --integer   # + invariant totals and integer output
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent.parent))

import hierdp  # noqa: E402
from hierdp.mechanisms.base import Sensitivity  # noqa: E402
from hierdp.plans.marginals import Marginals  # noqa: E402
from hierdp.rng import make_rng  # noqa: E402

MiB = 1 << 20


def tree_3level() -> hierdp.Tree:
    n_r, n_d, n_a = 10, 100, 100
    parent = np.concatenate([[-1], np.zeros(n_r, np.int64), 1 + np.repeat(np.arange(n_r), n_d),
                             1 + n_r + np.repeat(np.arange(n_r * n_d), n_a)])
    return hierdp.Tree.from_parent(parent)


def timed(fn, repeat):
    best, peak, out = np.inf, 0, None
    for _ in range(repeat):
        tracemalloc.start()
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        best = min(best, dt)
    return best, peak / MiB, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--age", type=int, default=20)
    ap.add_argument("--race", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=3.0)
    ap.add_argument("--integer", action="store_true",
                    help="also: marginals-same with invariant totals (total, regions) and integer=True")
    args = ap.parse_args()
    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    t = tree_3level()
    cells = {"age": args.age, "sex": 2, "race": args.race}
    cells = {k: v for k, v in cells.items() if v > 1}
    k = int(np.prod(list(cells.values())))
    rng = np.random.default_rng(0)
    leaves = rng.poisson(rng.gamma(0.5, 2.0, (t.n_leaves, 1)), (t.n_leaves, k)).astype(np.int64)
    vals = t.aggregate(leaves)
    names = list(cells)
    same = {tuple(names): 0.5, (names[0],): 0.3, (): 0.2}
    mixed = {"total": {(): 0.4, (names[0],): 0.3, tuple(names[1:]) or (): 0.3} if len(names) > 1 else {(): 1.0},
             "level_1": {(): 0.2, (names[0],): 0.4, tuple(names[1:]): 0.4},
             "level_2": {tuple(names[:2]): 0.5, (names[-1],): 0.2, (): 0.3},
             "level_3": {tuple(names): 0.6, (names[0],): 0.2, (): 0.2}}
    if len(names) < 3:
        mixed = {lv: {tuple(names): 0.5, (names[0],): 0.3, (): 0.2} if lv != "level_1" else
                 {(names[0],): 0.5, (): 0.5} for lv in t.level_names}
    print(f"tree: {t.n_nodes:,} nodes, {t.n_leaves:,} leaves; cells {cells} = {k}; "
          f"(n, k) float64 array = {t.n_nodes * k * 8 / MiB:.0f} MiB")

    def full():
        return hierdp.release(t, vals, epsilon=args.epsilon, seed=1)

    def marg(strategy):
        return lambda: hierdp.release(t, vals, epsilon=args.epsilon, seed=1,
                                      plan={"name": "marginals", "strategy": strategy, "cells": cells})

    rows = []
    for name, fn in (("full + blue", full), ("marginals-same", marg(same)), ("marginals-mixed", marg(mixed))):
        sec, peak, r = timed(fn, args.repeat)
        err = r.estimate.values - vals
        depth = t.depth
        rm = {d: float(np.sqrt(np.mean(err[depth == d] ** 2))) for d in (1, 2, 3)}
        rows.append((name, sec, peak, rm))
        print(f"{name:18s} {sec:7.2f} s  peak {peak:7.0f} MiB  RMSE/cell region {rm[1]:7.2f} "
              f"district {rm[2]:6.2f} area {rm[3]:5.2f}", flush=True)
    if args.integer:
        def integer():
            return hierdp.release(t, vals, epsilon=args.epsilon, seed=1, neighbours="substitute",
                                  invariants=["total", "level_1"],
                                  plan={"name": "marginals", "strategy": same, "cells": cells, "integer": True})
        sec, peak, r = timed(integer, 1)
        err = r.estimate.values - vals
        rm = {d: float(np.sqrt(np.mean(err[t.depth == d] ** 2))) for d in (1, 2, 3)}
        rows.append(("integer + totals", sec, peak, rm))
        print(f"{'integer + totals':18s} {sec:7.2f} s  peak {peak:7.0f} MiB  RMSE/cell region {rm[1]:7.2f} "
              f"district {rm[2]:6.2f} area {rm[3]:5.2f}", flush=True)
    base = rows[0][1]
    for name, sec, _, _ in rows[1:]:
        print(f"{name}: {sec / base:.2f}x the full-histogram release")
    # the GLS alone (no noise): the plan's structure cost
    plan = Marginals(strategy=same, cells=cells, mechanism="laplace", budget="equal")
    vi = t.to_internal(vals)
    t0 = time.perf_counter()
    plan.measure(t, vi, total=args.epsilon, delta=None, sensitivity=Sensitivity(), rng=make_rng(2))
    t_plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    hierdp.postprocess("blue", t, vals.astype(float), variance=np.ones(t.n_nodes))
    t_blue = time.perf_counter() - t0
    print(f"continuous Laplace: marginals plan (noise + GLS) {t_plan:.2f} s; BLUE alone on (n, k) {t_blue:.2f} s")


if __name__ == "__main__":
    main()
