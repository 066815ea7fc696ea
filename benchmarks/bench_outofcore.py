"""The out-of-core dataset release (hierdp.outofcore): time per stage, cores busy, peak RSS,
node-cells/s for 1 vs 2 workers, and the spill-or-recompute choice (issue 31 item 2).

The tree: a root above ``S`` complete fan-out-4 subtrees of height ``H`` (split at the
subtrees' roots, one subtree per task), ``K`` cells per node, integer counts, discrete
Gaussian noise, ``blue -> nonneg -> round`` top-down, sparse Parquet output. Every
configuration runs in a fresh spawned process (its peak RSS is its own); a first run warms
the kernel cache. Against floors measured in the same run:

* **floor process**: the same imports, the tree and the counts, no release (peak RSS);
* **numpy pass**: ``y = x * 2.0`` over the ``(n, K)`` float64 array (time).

Spill or recompute (one task, in process): stage 3 needs the task's noisy measurements.
*Spill*: ``np.savez`` + ``np.load`` of the noisy values and variances (what the runner
does). *Recompute*: ``counts_of(task)`` again (here a slice of an in-memory array: the
cheapest possible input; from a dataset on disk it is a read and a count) and the keyed
measurement again. The ratio says which is cheaper here.

Threads or processes: the CPU seconds of the process over the wall seconds of a parallel
stage is the number of cores the worker threads kept busy (the kernels and the ChaCha20
keystream release the GIL); near 2 with 2 workers means threads suffice.

    PYTHONPATH=. python benchmarks/bench_outofcore.py           # ~1-3 min on 2 shared cores
    PYTHONPATH=. python benchmarks/bench_outofcore.py --quick   # CI-sized

Figures from a shared, noisy machine: compare ratios within one run, not across runs.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

try:
    from _machine import in_fresh_process, numpy_floor
except ImportError:  # run as benchmarks/bench_outofcore.py from the repository root
    from benchmarks._machine import in_fresh_process, numpy_floor

POST = ["blue", {"name": "nonneg", "params": {"method": "topdown"}}, {"name": "round", "params": {"method": "topdown"}}]


def _job(s: int, h: int, k: int) -> tuple[Any, np.ndarray]:
    import hierdp

    sub = hierdp.Tree.complete(fanout=4, height=h)
    m = sub.n_nodes
    parent = np.empty(1 + s * m, np.int64)
    parent[0] = -1
    base = 1 + np.arange(s)[:, None] * m
    p = np.where(sub.parent >= 0, sub.parent, -1)[None, :] + base
    p[:, 0] = 0
    parent[1:] = p.reshape(-1)
    tree = hierdp.Tree.from_parent(parent, level_names=["total"] + [f"L{d}" for d in range(1, h + 1)])
    rng = np.random.default_rng(1)
    leaf = rng.poisson(0.6, size=(tree.n_leaves, k)).astype(np.int64)
    return tree, tree.to_internal(tree.aggregate(leaf)).reshape(tree.n_nodes, k)


def _split(h: int, k: int) -> dict[str, Any]:
    """Split below the root, one subtree per task (the memory of one subtree's node-cells)."""
    return {"level": "L1", "memory": int((4 ** h // 3 + 1) * k * 60)}


def _floor(s: int, h: int, k: int, q: Any) -> None:
    import hierdp  # noqa: F401

    _job(s, h, k)
    q.put(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)


def _run(s: int, h: int, k: int, workers: int, q: Any) -> None:
    import hierdp
    from hierdp.outofcore import release_to_dataset

    tree, vals = _job(s, h, k)
    d = Path(tempfile.mkdtemp(prefix="bench-ooc-"))
    stats: dict[str, Any] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
            release_to_dataset(tree, lambda task: vals[task.nodes], d / "out", workdir=d / "work", split=_split(h, k),
                               n_cells=k, workers=workers, progress=False, seed=3, rho=1.0,
                               mechanism="discrete_gaussian", postprocess=POST, stats=stats)
        size = sum(p.stat().st_size for p in (d / "out").iterdir())
    finally:
        shutil.rmtree(d, ignore_errors=True)
    stats["out_bytes"] = size
    q.put(stats)


def _spill_or_recompute(s: int, h: int, k: int) -> tuple[float, float]:
    """Seconds per task: spill (save + load) vs recompute (counts again + measure again)."""
    import hierdp
    from hierdp.execution import stages, steps

    tree, vals = _job(s, h, k)
    r, part, step, tail = stages.split_setup(tree, k, _split(h, k), {"rho": 1.0, "mechanism": "discrete_gaussian",
                                                                  "postprocess": POST, "seed": 3})
    st = stages.SplitStages(r, part, step, tail, k, total=r.total, key=steps.noise_key(3), check_counts=True)
    task = part.task(0)
    noisy, var, _, _, _ = st.up(task, vals[task.nodes])
    d = Path(tempfile.mkdtemp(prefix="bench-ooc-"))
    try:
        def spill() -> None:
            with open(d / "t.npz", "wb") as fh:
                np.savez(fh, noisy=noisy, var=var)
            with np.load(d / "t.npz") as f:
                f["noisy"], f["var"]

        def recompute() -> None:
            st.measured(task, np.asarray(vals[task.nodes]))

        out = []
        for fn in (spill, recompute):
            fn()
            best = min(_timed(fn) for _ in range(5))
            out.append(best)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    del hierdp
    return out[0], out[1]


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subtrees", type=int, default=48)
    ap.add_argument("--height", type=int, default=7, help="height of each fan-out-4 subtree (levels)")
    ap.add_argument("--cells", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    s, h, k = (12, 5, 4) if a.quick else (a.subtrees, a.height, a.cells)
    in_fresh_process(_run, 2, 3, k, 1)  # warm the kernel cache
    tree, _ = _job(s, h, k)
    n = tree.n_nodes
    floor_t = numpy_floor(n * k)
    floor_rss = in_fresh_process(_floor, s, h, k)
    print(f"tree: {s} subtrees x {4 ** h // 3:,} nodes, {n:,} nodes x {k} cells = {n * k:,} node-cells; "
          f"numpy pass {floor_t * 1e3:.1f} ms; floor process {floor_rss:.0f} MiB")
    for workers in (1, 2):
        st = in_fresh_process(_run, s, h, k, workers)
        t = st["times"]
        stages = ", ".join(f"{name} {sec:.2f} s ({st['cpu'][name] / max(sec, 1e-9):.2f} cores)" if name in st["cpu"]
                           else f"{name} {sec:.2f} s" for name, sec in t.items() if name != "total")
        print(f"workers={workers}: total {t['total']:.2f} s = {t['total'] / floor_t:,.0f} numpy passes; {stages}; "
              f"{st['node_cells'] / t['total']:,.0f} node-cells/s; peak RSS {st['peak_rss'] / 1024**2:.0f} MiB "
              f"({st['peak_rss'] / 1024**2 - floor_rss:+.0f} over the floor); output {st['out_bytes'] / 1e6:.1f} MB")
    sp, rc = _spill_or_recompute(s, h, k)
    print(f"one task ({4 ** h // 3:,} nodes x {k} cells): spill (save + load) {sp * 1e3:.2f} ms, recompute "
          f"(counts from memory + keyed noise) {rc * 1e3:.2f} ms: recompute / spill = {rc / sp:.2f} "
          "(recompute from a dataset on disk adds the read and the count)")


if __name__ == "__main__":
    main()
