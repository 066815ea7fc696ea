"""Foundation benchmark: tree construction, a full release and BLUE at census scale.

For each tree (complete binary of height 24 = 16.7M nodes; census-like ~11.8M nodes) it
prints seconds and the ratio to a plain numpy pass (``y = x * 2.0`` over n float64
values) measured in the same run, plus the peak memory of the process that ran the case.
Each case runs in a fresh process so peak memory is its own.

    python benchmarks/bench_release.py            # full sizes (a few minutes)
    python benchmarks/bench_release.py --quick    # small sizes (seconds)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _machine import best_of, in_fresh_process, numpy_floor, warm_memory  # noqa: E402


def run_case(kind: str, size: float, queue) -> None:
    import _trees

    import hierdp
    from hierdp import release

    warm = hierdp.Tree.complete(2, 4)  # compile / load the numba kernels outside the timings
    release(warm, warm.aggregate(np.arange(warm.n_leaves)), epsilon=1.0, seed=0)
    t0 = time.perf_counter()
    if kind == "binary":
        tree = _trees.complete_tree(int(size))
    else:
        tree = _trees.census_like_tree(scale=size, seed=0)
    t_build = time.perf_counter() - t0
    # derived structure used by every release (children counts, leaf counts, level index)
    t0 = time.perf_counter()
    _ = tree._n_children, tree._leafcount, tree._level_index
    t_struct = time.perf_counter() - t0
    n = tree.n_nodes
    leaves = np.random.default_rng(1).poisson(100, tree.n_leaves)
    t_agg, counts = best_of(lambda: tree.aggregate(leaves), 2)
    t_rel, res = best_of(lambda: release(tree, counts, epsilon=1.0, postprocess=[]), 1)
    noisy = res.measurements.values.astype(np.float64)
    var = res.measurements.variance
    t_blue, _ = best_of(lambda: hierdp.postprocess("blue", tree, noisy, variance=var), 3)
    floor = numpy_floor(n)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GiB (ru_maxrss is KiB)
    queue.put(dict(kind=kind, n=n, floor=floor, build=t_build, struct=t_struct, aggregate=t_agg,
                   release_measure=t_rel, blue=t_blue, peak_gib=peak))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small trees (seconds)")
    args = ap.parse_args(argv)
    cases = [("binary", 16 if args.quick else 24), ("census", 0.01 if args.quick else 1.0)]
    ctx = mp.get_context("spawn")
    # warm up in a child of its own: ru_maxrss is inherited across fork/exec
    warm = ctx.Process(target=warm_memory, args=(2 if args.quick else 8,))
    t0 = time.perf_counter()
    warm.start()
    warm.join()
    print(f"warmed guest memory in {time.perf_counter() - t0:.1f} s")
    print(f"{'tree':8} {'nodes':>12} {'floor s':>8} | {'step':16} {'seconds':>8} {'ns/node':>8} {'x floor':>8}")
    for kind, size in cases:
        r = in_fresh_process(run_case, kind, size)
        n, floor = r["n"], r["floor"]
        for step in ("build", "struct", "aggregate", "release_measure", "blue"):
            s = r[step]
            print(f"{kind:8} {n:12,d} {floor:8.4f} | {step:16} {s:8.3f} {s / n * 1e9:8.1f} {s / floor:8.1f}")
        print(f"{kind:8} peak memory {r['peak_gib']:.2f} GiB")


if __name__ == "__main__":
    main()
