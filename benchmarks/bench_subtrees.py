"""A release by subtree against the in-memory release: time, peak memory, equality, scaling.

Issue 30, items 1 and 6. Every configuration runs in a fresh spawned process
(``_machine.in_fresh_process``) and reports its wall time and its peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``); a first run of each warms the kernel
cache so that no measured process compiles. Against floors measured in the same run:

* **floor process**: the same imports and kernels (a small release), the tree and, in
  part 1, the counts, but no release (its peak RSS is subtracted: "above floor");
* **numpy pass**: ``y = x * 2.0`` over the ``(n, k)`` float64 array (time floor).

Part 1, split vs in memory (``--fanout 10 --height 6``: 111,111 nodes x 16 cells,
discrete Laplace, BLUE): the in-memory release, ``release(split=level)`` at each level
below the root and ``release_by_subtree`` with a sink that discards, and the equality of
the split estimate with the in-memory one of the same measurements (a mechanism whose
noise depends only on the value, so both paths measure the same numbers; max relative
difference).

Part 2, scaling (streaming, sink discards): a root above ``S`` equal subtrees (complete,
fan-out 4, height ``--sub-height``) with ``--scale-cells`` cells, then ``2S``: the peak
RSS above the floor process should stay (the issue's target: < 10% change), since tasks
hold one subtree at a time; what grows is the public structure (~100 B per node).

Part 3, the same scaling for plan ``marginals`` (cells ``a x b``, ``b = 4``; a cheap
census-like strategy: the two 1-way marginals and the node total; its GLS by subtree over
the Helmert-rotated columns, :mod:`hierdp.subtrees`).

    PYTHONPATH=. python benchmarks/bench_subtrees.py            # ~2-4 min on 2 shared cores
    PYTHONPATH=. python benchmarks/bench_subtrees.py --quick    # CI-sized
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings
from typing import Any

import numpy as np

try:
    from _machine import in_fresh_process, numpy_floor
except ImportError:  # run as benchmarks/bench_subtrees.py from the repository root
    from benchmarks._machine import in_fresh_process, numpy_floor


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _tree(kind: str, a: int, b: int) -> Any:
    import hierdp

    if kind == "complete":
        return hierdp.Tree.complete(fanout=a, height=b, level_names=[f"L{d}" for d in range(b)])
    # a root above `a` complete fan-out-4 subtrees of height `b`
    sub = hierdp.Tree.complete(fanout=4, height=b)
    m = sub.n_nodes
    parent = np.empty(1 + a * m, np.int64)
    parent[0] = -1
    base = 1 + np.arange(a)[:, None] * m
    p = np.where(sub.parent >= 0, sub.parent, -1)[None, :] + base
    p[:, 0] = 0
    parent[1:] = p.reshape(-1)
    return hierdp.Tree.from_parent(parent, level_names=[f"L{d}" for d in range(b + 1)])


class _ValueNoise:
    """A stand-in mechanism for the equality check: 'noise' from the value only (no draw),
    so the split and in-memory paths measure the same numbers. Not private."""

    def __new__(cls) -> Any:
        from hierdp.mechanisms.base import Mechanism

        class ValueNoise(Mechanism):
            name = "value_noise_bench"
            integer = True

            def variance(self, budget: float, sensitivity: Any) -> float:
                return 2.0 / budget ** 2

            def sample(self, values: np.ndarray, budget: float, sensitivity: Any, rng: Any) -> np.ndarray:
                v = np.asarray(values, dtype=np.int64)
                return v + (v * 7919 + 13) % 11 - 5

        return ValueNoise()


def _marginals_plan(k: int) -> dict[str, Any]:
    """Plan ``marginals`` over ``k`` cells as ``a x b`` (``b = 4`` when 4 divides ``k``):
    the 1-way marginals and the node total."""
    b = 4 if k % 4 == 0 and k > 4 else 1
    cells = {"a": k // b, "b": b}
    return {"name": "marginals", "cells": cells, "strategy": {("a",): 0.4, ("b",): 0.4, (): 0.2}}


def _worker(config: dict[str, Any], queue: Any) -> None:
    warnings.simplefilter("ignore")
    import hierdp
    from hierdp import subtrees
    from hierdp.pipeline import release, release_by_subtree

    tree = _tree(config["kind"], config["a"], config["b"])
    k = config["k"]
    mode = config["mode"]
    rng = np.random.default_rng(1)
    counts = None
    if mode not in ("stream", "tree_floor"):
        counts = tree.aggregate(rng.poisson(2.0, size=(tree.n_leaves, k)))
    kw: dict[str, Any] = dict(epsilon=1.0, seed=5)
    if config.get("plan") == "marginals":
        kw["plan"] = _marginals_plan(k)
    out: dict[str, Any] = {"n": tree.n_nodes, "k": k}
    if True:  # every process, floors included, loads the kernels first (a small release): time the release only
        small = hierdp.Tree.complete(fanout=3, height=tree.n_levels)
        sc = small.aggregate(np.ones((small.n_leaves, k), np.int64))
        release(small, sc, **kw)
        release(small, sc, split=1, **kw)
    t0 = time.perf_counter()
    if mode in ("floor", "tree_floor"):
        pass
    elif mode == "memory":
        release(tree, counts, **kw)
    elif mode == "split":
        release(tree, counts, split=config["split"], **kw)
    elif mode == "equal":
        a = release(tree, counts, mechanism=_ValueNoise(), **kw)
        worst = 0.0
        for s in config["levels"]:
            b = release(tree, counts, mechanism=_ValueNoise(), split=s, **kw)
            x, y = np.asarray(b.estimate.values), np.asarray(a.estimate.values)
            worst = max(worst, float(np.max(np.abs(x - y) / (1.0 + np.abs(y)))))
            vx, vy = np.asarray(b.estimate.variance), np.asarray(a.estimate.variance)
            worst = max(worst, float(np.max(np.abs(vx - vy) / (1.0 + np.abs(vy)))))
        out["max_rel_diff"] = worst
    elif mode == "stream":
        internal = tree.internal
        seen = {"nodes": 0}
        root_totals: dict[int, np.ndarray] = {}

        def counts_of(task: subtrees.SubtreeTask) -> np.ndarray:
            if task.index < 0:  # the top part: the root above the subtrees
                tot = np.sum([root_totals[i] for i in sorted(root_totals)], axis=0)
                return tot.reshape(1, k)
            tt = task.tree()
            r = np.random.default_rng(task.index)
            leaves = r.poisson(2.0, size=(tt.n_leaves, k))
            vals = tt.to_internal(tt.aggregate(leaves))[1:]
            for j, root in enumerate(task.roots):
                root_totals[int(root)] = vals[task.root_pos[j]].copy()  # a view would keep the task
            return vals

        def sink(task: Any, est: Any, meas: Any) -> None:
            seen["nodes"] += task.n_nodes  # and discard

        del internal
        run = release_by_subtree(tree, counts_of, sink, split=config["split"], n_cells=k, **kw)
        out["tasks"] = run.partition.n_tasks
        out["largest"] = run.partition.largest_task
    out["seconds"] = time.perf_counter() - t0
    out["rss_mib"] = _rss_mib()
    queue.put(out)


def _run(config: dict[str, Any]) -> dict[str, Any]:
    return in_fresh_process(_worker, dict(config))


def _part3(args: Any) -> None:
    """Part 3: streaming scaling of plan ``marginals`` (S, then 2S equal subtrees)."""
    print(f"part 3: the same streaming scaling for plan 'marginals' ({_marginals_plan(args.scale_cells)['cells']}, "
          "1-way marginals and the total)")
    out = []
    # a throwaway process first: it compiles what the marginals path needs, so no measured process does
    _run({"kind": "forest", "a": 2, "b": 3, "k": args.scale_cells, "plan": "marginals", "mode": "stream",
          "split": "L1"})
    for s in (args.subtrees, 2 * args.subtrees):
        cfg = {"kind": "forest", "a": s, "b": args.sub_height, "k": args.scale_cells, "plan": "marginals"}
        fl = _run({**cfg, "mode": "tree_floor"})
        r = _run({**cfg, "mode": "stream", "split": "L1"})
        above = r["rss_mib"] - fl["rss_mib"]
        out.append((r["rss_mib"], above))
        print(f"  S = {s:3d}: {r['n']:>10,} nodes, {r['tasks']} tasks of <= {r['largest']:,} nodes: "
              f"{r['seconds']:6.2f} s ({r['seconds'] / (r['n'] * r['k']) * 1e9:.0f} ns/node-cell), peak RSS "
              f"{r['rss_mib']:.0f} MiB (floor process {fl['rss_mib']:.0f}, above it {above:.0f})")
    print(f"  doubling S changes peak RSS by {100 * (out[1][0] / out[0][0] - 1):+.1f}% (target < 10%); "
          f"above the floor process by {100 * (out[1][1] / max(out[0][1], 1e-9) - 1):+.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fanout", type=int, default=10)
    ap.add_argument("--height", type=int, default=6)
    ap.add_argument("--cells", type=int, default=16)
    ap.add_argument("--subtrees", type=int, default=4, help="S of the scaling part (then 2S)")
    ap.add_argument("--sub-height", type=int, default=9, help="height of each equal subtree (fan-out 4)")
    ap.add_argument("--scale-cells", type=int, default=64)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only-marginals", action="store_true", help="run part 3 only")
    args = ap.parse_args()
    if args.quick:
        args.fanout, args.height, args.subtrees, args.sub_height, args.scale_cells = 6, 5, 2, 6, 16
    if args.only_marginals:
        _part3(args)
        print("  (shared 2-core VM: times are noisy; RSS figures are steadier)")
        return
    k = args.cells
    base = {"kind": "complete", "a": args.fanout, "b": args.height, "k": k}
    eq = _run({**base, "mode": "equal", "levels": [f"L{lv}" for lv in range(args.height)]})  # compiles too
    floor = _run({**base, "mode": "floor"})
    n = floor["n"]
    t_np = numpy_floor(n * k)
    print(f"part 1: complete tree fan-out {args.fanout}, height {args.height}: {n:,} nodes x {k} cells "
          f"({n * k / 1e6:.1f}M node-cells); discrete Laplace + BLUE, fresh process per row")
    print(f"  floors: numpy x*2.0 over (n, k) {t_np * 1e3:.1f} ms; process with tree and counts, no release: "
          f"peak RSS {floor['rss_mib']:.0f} MiB")
    print(f"  {'configuration':34s} {'seconds':>8s} {'x numpy':>8s} {'ns/node-cell':>13s} {'peak MiB':>9s} "
          f"{'above floor':>12s}")
    rows = [("in memory", {"mode": "memory"})]
    for lv in range(1, args.height, 2):
        rows.append((f"split at L{lv}", {"mode": "split", "split": f"L{lv}"}))
    rows.append(("split auto (1/4 of RAM)", {"mode": "split", "split": "auto"}))
    mem_above = None
    for label, extra in rows:
        r = _run({**base, **extra})
        above = r["rss_mib"] - floor["rss_mib"]
        if mem_above is None:
            mem_above = above
        print(f"  {label:34s} {r['seconds']:8.2f} {r['seconds'] / t_np:8.0f} {r['seconds'] / (n * k) * 1e9:13.0f} "
              f"{r['rss_mib']:9.0f} {above:9.0f} ({above / max(mem_above, 1e-9):.2f}x)")
    print(f"  equality (same measurements, split at every level vs in memory): max relative difference "
          f"{eq['max_rel_diff']:.2e} (target <= 1e-9)")

    print(f"\npart 2: streaming (release_by_subtree, sink discards): a root above S equal subtrees "
          f"(fan-out 4, height {args.sub_height}) x {args.scale_cells} cells, split at L1")
    out = []
    for s in (args.subtrees, 2 * args.subtrees):
        cfg = {"kind": "forest", "a": s, "b": args.sub_height, "k": args.scale_cells}
        fl = _run({**cfg, "mode": "tree_floor"})
        r = _run({**cfg, "mode": "stream", "split": "L1"})
        above = r["rss_mib"] - fl["rss_mib"]
        out.append((r["rss_mib"], above))
        print(f"  S = {s:3d}: {r['n']:>10,} nodes, {r['tasks']} tasks of <= {r['largest']:,} nodes: "
              f"{r['seconds']:6.2f} s ({r['seconds'] / (r['n'] * r['k']) * 1e9:.0f} ns/node-cell), peak RSS "
              f"{r['rss_mib']:.0f} MiB (floor process {fl['rss_mib']:.0f}, above it {above:.0f})")
    print(f"  doubling S changes peak RSS by {100 * (out[1][0] / out[0][0] - 1):+.1f}% (target < 10%); "
          f"above the floor process by {100 * (out[1][1] / max(out[0][1], 1e-9) - 1):+.1f}%")
    print()
    _part3(args)
    print("  (shared 2-core VM: times are noisy; RSS figures are steadier)")


if __name__ == "__main__":
    main()
