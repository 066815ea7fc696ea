"""The O(n) passes of a release on 1 thread and on every core, against numpy passes.

For each tree shape of the Generation Matrix paper (complete binary, census-like,
random fan-out; ``benchmarks/_trees.py``) it times, in ``--repeat`` reps interleaved over
the thread counts in one process (a rep takes each pass on 1 and N threads back to back,
best of :data:`INNER` runs for the short ones), and reports the best over the reps:

* the floors: numpy's ``y = x * 2.0`` into a warm buffer and allocating ``y`` (one
  thread: numpy does not thread it), and the same streaming pass in pieces on 1 and on N
  threads, into a warm buffer and into a fresh one (how far this machine's memory, and
  its page faults, let a streaming pass scale), and a read-only pass (``sum``) on 1 and
  N threads (how far the cores scale when writes do not limit);
* the passes: exact discrete Laplace noise for every node, aggregation of int64 leaf
  counts (``Tree._sum_up``: in place, as ``Tree.aggregate`` and the counting of records
  sum, and into a new array), BLUE, GMC (formula 39), weighted GMC (variances per
  level: its stage 1 cached, as in a release), ``nonneg`` and
  ``round``, each on 1 and N threads, checked bit-identical across the two;

and prints seconds, the ratio to the warm numpy floor, the speedup on N threads, and the
issue's targets (kernels: BLUE <= 5x and GMC <= 3x a numpy pass, weighted GMC <= 6x,
``nonneg`` <= 10x BLUE, ``round`` <= 1.5x BLUE; threads: >= 1.6x on 2 cores for
n >= 10^7), and for BLUE and the GMCs the bytes they must move (:func:`traffic`) against
the allocating numpy pass's, with the bandwidth each reaches; the cost of faulting in
fresh output pages on 1 and N threads; and, from each pass's least traffic timed as
streaming phases in the same run (:data:`LEAST_TRAFFIC`), the most it could gain on N
threads (:func:`best_gain`), beside GMC into a reused buffer. The gains are also taken
rep by rep against the ceiling measured right after the pass (:func:`paired_gains`):
this VM's bandwidth for a second core changes from minute to minute, and a gain and a
ceiling from different moments do not compare.

    python benchmarks/bench_threads.py                  # the full sizes (~12-17M nodes; ~4 GiB)
    python benchmarks/bench_threads.py --quick          # CI-sized (seconds)
    python benchmarks/bench_threads.py --threads 4 --shapes census
    python benchmarks/bench_threads.py --first-calls 12 --shapes binary   # a release's first calls
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _trees import census_like_tree, complete_tree, random_fanout_tree  # noqa: E402

import hierdp  # noqa: E402
from hierdp._kernels.jit import numba as nb  # noqa: E402
from hierdp._kernels.threads import _cores, run_pieces, spans  # noqa: E402
from hierdp._kernels.tree_pieces import tree_pieces  # noqa: E402
from hierdp.mechanisms._samplers import discrete_laplace  # noqa: E402
from hierdp.postprocessors.blue import blue  # noqa: E402
from hierdp.postprocessors.gmc import _bottom_with_leaves, gmc, gmc_structure, gmc_weighted  # noqa: E402
from hierdp.postprocessors.nonneg import nonneg  # noqa: E402
from hierdp.postprocessors.rounding import controlled_round  # noqa: E402
from hierdp.rng import SeededRandom  # noqa: E402

SIZES = {"full": {"binary": 24, "census": 1.0, "random": 8_000_000},
         "quick": {"binary": 18, "census": 0.02, "random": 150_000}}


@nb.njit(nogil=True, cache=True)
def _stream(a, b, lo, hi):  # y = 2x over [lo, hi), vectorised (uint64 bounds)
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        b[i] = a[i] * 2.0


@nb.njit(nogil=True, cache=True)
def _read(a, lo, hi):
    s = 0.0
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        s += a[i]
    return s


def _fresh_stream(x, chunks):
    """The streaming pass into a newly allocated array: the pages of a fresh output are
    faulted in (and zeroed by the OS) by the threads that first write them."""
    y = np.empty_like(x)
    run_pieces(lambda r: _stream(x, y, r[0], r[1]), chunks)
    return y


@nb.njit(nogil=True, cache=True, fastmath=True)
def _read_1(a, lo, hi):  # the least traffic of a pass that reads one array (fastmath: no add chain)
    s = 0.0
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        s += a[i]
    return s


@nb.njit(nogil=True, cache=True, fastmath=True)
def _read_2(a, b, lo, hi):
    s = 0.0
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        s += a[i] + b[i]
    return s


@nb.njit(nogil=True, cache=True, fastmath=True)
def _write_1(a, c, lo, hi):
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        c[i] = a[i] * 2.0


@nb.njit(nogil=True, cache=True, fastmath=True)
def _write_2(a, b, c, d, lo, hi):
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        c[i] = a[i] * 2.0
        d[i] = b[i] * 2.0


@nb.njit(nogil=True, cache=True)
def _bump(c, lo, hi):  # read and write back, in place
    for i in range(nb.uint64(lo), nb.uint64(hi)):
        c[i] += 1.0


#: the least memory traffic of each pass, as streaming phases over all n nodes: (arrays
#: read, fresh arrays written); ``SUM_IN_PLACE`` reads the leaf rows of one array and reads
#: and writes back its non-leaf rows (a warm array). Aggregation, summing the leaf counts
#: in place, does that. BLUE reads its values and
#: variances going up and again going down, where it writes its estimate and variance;
#: GMC the same with values only; weighted GMC first checks values and variances (one
#: read of each); round reads the estimate and writes the integers. Structure arrays
#: (parents, runs) and work buffers are left out, so the floor is below what any
#: implementation of these two-pass algorithms must move.
SUM_IN_PLACE = (1, -1)
#: runs a rep takes the best of, for passes of at most LONG seconds (see run_shape)
INNER, LONG = 3, 0.1
LEAST_TRAFFIC = {"aggregate (int64)": (SUM_IN_PLACE,), "BLUE": ((2, 0), (2, 2)),
                 "GMC (39)": ((1, 0), (1, 1)), "weighted GMC": ((2, 0), (1, 0), (1, 1)), "round": ((1, 1),)}


def least_traffic(phases: tuple[tuple[int, int], ...], a: np.ndarray, b: np.ndarray, chunks, n1: int,
                  warm: np.ndarray) -> None:
    """Run the streaming phases of :data:`LEAST_TRAFFIC` in pieces on the current thread
    count: the time a pass would take if it did nothing but move its unavoidable bytes
    (fresh outputs allocated here, as the pass allocates them). ``SUM_IN_PLACE`` reads
    the leaf rows ``[n1, n)`` of ``warm``, then rewrites its rows ``[0, n1)``, as
    aggregation reads the leaves before it sums the non-leaf nodes."""
    for reads, writes in phases:
        if (reads, writes) == SUM_IN_PLACE:
            leaf_chunks = [(lo + n1, hi + n1) for lo, hi in spans(len(warm) - n1, 1 << 17)]
            run_pieces(lambda r: _read_1(warm, r[0], r[1]), leaf_chunks)
            run_pieces(lambda r: _bump(warm, r[0], r[1]), spans(n1, 1 << 17))
            continue
        if writes == 0:
            f = (lambda r: _read_1(a, r[0], r[1])) if reads == 1 else (lambda r: _read_2(a, b, r[0], r[1]))
        elif writes == 1:
            c = np.empty_like(a)
            f = lambda r: _write_1(a, c, r[0], r[1])  # noqa: E731
        else:
            c, d = np.empty_like(a), np.empty_like(b)
            f = lambda r: _write_2(a, b, c, d, r[0], r[1])  # noqa: E731
        run_pieces(f, chunks)


def best_gain(t1: float, floor: tuple[float, float], threads: int) -> float:
    """The most a pass that takes ``t1`` s on 1 thread can gain on ``threads`` threads,
    Amdahl's way: its least traffic (:func:`least_traffic`, ``floor`` s on 1 and on N
    threads in the same run) moves no faster than the streaming phases do on N threads,
    and everything else in it (``t1`` minus that traffic) scales perfectly:
    ``t1 / (F_N + (t1 - F_1) / N)``."""
    f1, fn = floor
    memory = min(t1, f1)
    return t1 / (memory * fn / f1 + (t1 - memory) / threads)


def paired_gains(times: dict, name: str, threads: int, target: float = 1.6) -> dict[str, float]:
    """Rep by rep, the gain of pass ``name`` on ``threads`` threads and its ceiling
    (:func:`best_gain` from its least traffic, timed right after it in the same rep), so
    that both see the same moment of the machine's bandwidth; their medians over the
    reps, the median share of the ceiling reached, what the least traffic alone gained
    (``alone``: for a pass whose one-thread time is about that traffic's, the most it
    can gain, as no pass moves those bytes faster than plain streaming loops), and how
    many reps had a ceiling of at
    least ``target`` (``open``) and, of those, gained ``target`` (``met``)."""
    t1, tn = np.array(times[name, 1]), np.array(times[name, threads])
    lt = f"least traffic, {name}"
    c = np.array([best_gain(a, (f1, fn), threads)
                  for a, f1, fn in zip(t1, times[lt, 1], times[lt, threads], strict=True)])
    g = t1 / tn
    alone = np.array(times[lt, 1]) / np.array(times[lt, threads])
    return {"gain": float(np.median(g)), "ceiling": float(np.median(c)), "share": float(np.median(g / c)),
            "alone": float(np.median(alone)), "open": int(np.sum(c >= target)),
            "met": int(np.sum((c >= target) & (g >= target))), "reps": g.size}


def reuse_memory() -> None:
    """``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<2 GiB>`` from inside the process
    (glibc's ``mallopt``): large arrays come from the heap, and freed ones are reused
    instead of going back to the OS, so a new output is not faulted in page by page."""
    import ctypes

    m_trim_threshold, m_mmap_max = -1, -4
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        mallopt = None
    if mallopt is None or not (mallopt(m_mmap_max, 0) and mallopt(m_trim_threshold, ctypes.c_int(2**31 - 1))):
        raise SystemExit("--reuse-memory needs glibc's mallopt (Linux)")


def build(shape: str, size):
    if shape == "binary":
        return complete_tree(int(size))
    if shape == "census":
        return census_like_tree(float(size))
    return random_fanout_tree(int(size))


def traffic(tree: hierdp.Tree) -> dict[str, float]:
    """Bytes each pass must move through memory, by its arrays (float64 values, int32
    parents; each element counted once per pass that reads or writes it, a parent's
    entries once per parent, as its children come together; fresh output pages count as
    written once more, since the kernel zeroes them). L leaves, I non-leaf nodes, P the
    parents of leaves, Q the parents of non-leaf nodes, N = L + I:

    * the allocating numpy pass ``x * 2.0``: read 8, write 8, zero 8 per node;
    * BLUE: leaves up 20 L + 16 P (y, variance, parent; the parent's two sums); non-leaves
      up 52 I + 32 Q (its sums, y, variance, parent, estimate and variance out; the
      parent's sums updated); non-leaves down 68 I + 24 Q; leaves down 36 L + 24 P; two
      fresh outputs 16 N;
    * GMC (39): leaves up 12 L + 8 P; non-leaves up 36 I + 16 Q; down 44 I + 8 Q; leaves
      down 20 L + 8 P; one fresh output 8 N. Where the height-2 class B goes with its
      leaves in one pass (``gmc._bottom_with_leaves``: complete binary trees), that class
      and its leaves move 8 L + 24 B + 16 Q_B up (leaf values; the node's leaf start, value,
      1/theta', parent; its parent's sum updated) and 16 L + 32 B + 8 Q_B down (the leaves
      read again from cache), Q_B the parents of B, and the other non-leaf nodes A = I - B
      as above;
    * aggregation in place (int64, the int32 parents of ``narrow_index``): every node but
      the root read with its parent, 12 (N - 1); every parent's row read and written back
      once, 16 I (counted by arrays: by subtree blocks, ``Pieces.block_bounds``, a
      block's non-leaf rows are mostly read back from cache);
    * weighted GMC: its input check 24 N (values, variances, depth); the passes of GMC
      plus rho (8 I up, 8 I down), u (8 I down) and the leaves' variances (8 L); one fresh
      output 8 N (the variance of the estimate is cached, not written).
    """
    n = tree.n_nodes
    L = tree.n_leaves
    n1 = n - L
    par = tree.internal.parent
    P = np.unique(par[n1:]).size
    Q = np.unique(par[1:n1]).size if n1 > 1 else 0
    I = n1  # noqa: E741
    gmc39 = 12 * L + 8 * P + 36 * I + 16 * Q + 44 * I + 8 * Q + 20 * L + 8 * P + 8 * n
    pieces = tree_pieces(tree)
    if _bottom_with_leaves(gmc_structure(tree), pieces):
        c0 = pieces.above_leaf_parents
        B, A = n1 - c0, c0  # noqa: N806
        QB = np.unique(par[c0:n1]).size  # noqa: N806
        QA = np.unique(par[1:c0]).size if c0 > 1 else 0  # noqa: N806
        gmc39 = 8 * L + 24 * B + 16 * QB + 16 * L + 32 * B + 8 * QB + 36 * A + 16 * QA + 44 * A + 8 * QA + 8 * n
    return {"floor": 24.0 * n, "aggregate (int64)": 12 * (n - 1) + 16 * I,
            "BLUE": 20 * L + 16 * P + 52 * I + 32 * Q + 68 * I + 24 * Q + 36 * L + 24 * P + 16 * n,
            "GMC (39)": gmc39,
            "weighted GMC": gmc39 + 24 * n + 24 * I + 8 * L}


def run_shape(shape: str, size, threads: int, repeat: int) -> None:
    tree = build(shape, size)
    n = tree.n_nodes
    rng = np.random.default_rng(0)
    leaves = rng.poisson(20.0, tree.n_leaves).astype(np.int64)
    full = np.zeros(n, np.int64)
    full[n - tree.n_leaves:] = leaves
    true = tree._sum_up(full).astype(np.float64)
    var = np.full(n, 2.0 * (tree.height / 1.0) ** 2)
    y = true + rng.laplace(0.0, tree.height, n)
    # a budget that differs per level: stage 1 of weighted GMC is computed once and cached
    wvar = var * (1.0 + tree.internal.depth)
    x = np.ones(n)
    out = np.empty(n)
    reused = np.zeros(n)
    summed = np.empty_like(full)
    consistent = gmc(tree, y)
    nn, _ = nonneg(tree, y, var)
    chunks = spans(n, 1 << 17)
    _stream(x, out, 0, 1)
    _read(x, 0, 1)

    passes = {
        "numpy y = x * 2.0 (warm out)": lambda: np.multiply(x, 2.0, out=out),
        "numpy y = x * 2.0 (allocating)": lambda: x * 2.0,
        "stream y = 2x in pieces": lambda: run_pieces(lambda r: _stream(x, out, r[0], r[1]), chunks),
        "stream into a fresh array": lambda: _fresh_stream(x, chunks),
        "read-only sum in pieces": lambda: run_pieces(lambda r: _read(x, r[0], r[1]), chunks),
        "noise (discrete Laplace)": lambda: discrete_laplace(float(tree.height), n, SeededRandom(1)),
        "aggregate (int64)": lambda: tree._sum_up(summed, consume=True),  # in place, as releases sum
        "aggregate (int64), new output": lambda: tree._sum_up(full),
        "BLUE": lambda: blue(tree, y, var).values,
        "GMC (39)": lambda: gmc(tree, y),  # allocating its output, like the floor it is held to
        "GMC (39) into a reused buffer": lambda: gmc(tree, y, out=reused),
        "weighted GMC": lambda: gmc_weighted(tree, y, wvar)[0],
        "nonneg": lambda: nonneg(tree, y, var)[0],
        "round": lambda: controlled_round(tree, nn),
    }
    for name, phases in LEAST_TRAFFIC.items():
        passes[f"least traffic, {name}"] = functools.partial(least_traffic, phases, y, var, chunks,
                                                               n - tree.n_leaves, out)
    setup = {"aggregate (int64)": lambda: np.copyto(summed, full)}  # untimed: the leaf counts, handed over
    counts = (1, threads)
    # each pass's least traffic is timed right after the pass, so that a rep's gain and
    # ceiling see the same moment of this VM's memory bandwidth (see paired_gains())
    order = [k for k in passes if not k.startswith("least traffic")]
    for name in LEAST_TRAFFIC:
        order.insert(order.index(name) + 1, f"least traffic, {name}")
    times: dict = {(name, t): [] for name in passes for t in counts}
    # a rep times each pass best of INNER runs (once where it takes over LONG s): a
    # one-off sample of a pass of a few ms is often disturbed, and a rep's gain is a ratio
    inner = dict.fromkeys(passes, INNER)
    results: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rep in range(repeat):  # each pass on 1 and N threads back to back, in turns
            for name in order:
                f = passes[name]
                for t in (counts if rep % 2 == 0 else counts[::-1]):
                    hierdp.set_threads(t)
                    took = np.inf
                    for _ in range(inner[name]):
                        if name in setup:
                            setup[name]()
                        r = None  # the last pass's output is freed here, not inside the next pass's time
                        t0 = time.perf_counter()
                        r = f()
                        took = min(took, time.perf_counter() - t0)
                    times[name, t].append(took)
                if times[name, 1][-1] > LONG:
                    inner[name] = 1
                    if name[0].isupper() or name.startswith(("noise", "aggregate", "nonneg", "round")):
                        key = (name, t)
                        if key not in results:
                            results[key] = np.array(r, copy=True)
    hierdp.set_threads(None)
    best = {key: min(v) for key, v in times.items()}
    for name in passes:
        if (name, 1) in results:
            assert np.array_equal(results[name, 1], results[name, threads]), f"{name}: differs across threads"
    del consistent
    fl = best["numpy y = x * 2.0 (warm out)", 1]
    fa = best["numpy y = x * 2.0 (allocating)", 1]
    print(f"\n== {shape}: n = {n:,} nodes, {tree.n_leaves:,} leaves, height {tree.height}; 1 vs {threads} threads")
    print(f"{'pass':<32}{'1 thread s':>11}{'x numpy':>9}{f'{threads} thr s':>10}{'x numpy':>9}{'speedup':>9}")
    for name in passes:
        a, b = best[name, 1], best[name, threads]
        print(f"{name:<32}{a:>11.4f}{a / fl:>9.1f}{b:>10.4f}{b / fl:>9.1f}{a / b:>9.2f}")
    b1 = best["BLUE", 1]
    bt = best["BLUE", threads]
    print(f"targets (1 thread | {threads} threads; x the warm numpy pass, x the allocating one in brackets):")
    for name, target in (("BLUE", 5), ("GMC (39)", 3), ("weighted GMC", 6)):
        a, b = best[name, 1], best[name, threads]
        print(f"  {name:<14} {a / fl:5.1f} [{a / fa:4.1f}] | {b / fl:5.1f} [{b / fa:4.1f}]   target <= {target}")
    for name, cap in (("nonneg", 10.0), ("round", 1.5)):
        a, b = best[name, 1], best[name, threads]
        print(f"  {name:<14} {a / b1:5.1f} x BLUE | {b / bt:5.1f} x BLUE   target <= {cap:g}")
    print(f"  speedups on {threads} threads (target >= 1.6 for n >= 1e7): "
          + ", ".join(f"{name} {best[name, 1] / best[name, threads]:.2f}" for name in
                      ("noise (discrete Laplace)", "aggregate (int64)", "BLUE", "GMC (39)", "weighted GMC", "round",
                       "nonneg")))
    moved = traffic(tree)
    bw = moved["floor"] / fa / 1e9
    print(f"  bytes moved (see traffic()), x the allocating numpy pass's {moved['floor'] / 1e6:.0f} MB "
          f"({bw:.1f} GB/s on 1 thread): "
          + ", ".join(f"{name} {moved[name] / moved['floor']:.1f}x at {moved[name] / best[name, 1] / 1e9:.1f} | "
                      f"{moved[name] / best[name, threads] / 1e9:.1f} GB/s" for name in ("BLUE", "GMC (39)",
                                                                                     "weighted GMC")))
    agg, warm = "aggregate (int64)", "stream y = 2x in pieces"
    rates = [moved[agg] / best[agg, t] / 1e9 for t in (1, threads)]
    floors = [16.0 * n / best[warm, t] / 1e9 for t in (1, threads)]
    print(f"  aggregation in place: its arrays' {moved[agg] / 1e6:.0f} MB at {rates[0]:.1f} | {rates[1]:.1f} GB/s "
          f"({rates[0] / floors[0]:.0%} | {rates[1] / floors[1]:.0%} of the rate the warm streaming pass moves its "
          f"{16 * n / 1e6:.0f} MB at, {floors[0]:.1f} | {floors[1]:.1f} GB/s; over 100% where subtree blocks "
          "keep the non-leaf rows in cache)")
    st, rd, fr = "stream y = 2x in pieces", "read-only sum in pieces", "stream into a fresh array"
    print(f"  the machine: a streaming pass scales {best[st, 1] / best[st, threads]:.2f}x, "
          f"into a fresh array {best[fr, 1] / best[fr, threads]:.2f}x, a read-only one "
          f"{best[rd, 1] / best[rd, threads]:.2f}x")
    per_byte = tuple(max(0.0, best[fr, t] - best[st, t]) / (8.0 * n) for t in counts)
    print(f"  page faults of fresh output: {per_byte[0] * 8e9:.2f} | {per_byte[1] * 8e9:.2f} ms per million float64 "
          f"on 1 | {threads} threads")
    gains = {name: (best[name, 1] / best[name, threads],
                    best_gain(best[name, 1], (best[f"least traffic, {name}", 1],
                                              best[f"least traffic, {name}", threads]), threads))
             for name in LEAST_TRAFFIC}
    print(f"  the most each pass could gain on {threads} threads (its least traffic as fast as streaming phases "
          "move it here, the rest scaling perfectly; see best_gain()), and what it gains: "
          + ", ".join(f"{name} {b:.2f} (gains {g:.2f}, {g / b:.0%})" for name, (g, b) in gains.items()))
    print(f"  paired rep by rep, medians over {repeat} reps: the gain | the ceiling in the same rep | the share of "
          "it reached | what the least traffic alone gained; reps with a ceiling >= 1.6, and how many of them "
          "gained >= 1.6:")
    for name in LEAST_TRAFFIC:
        p = paired_gains(times, name, threads)
        print(f"    {name:<18} gains {p['gain']:.2f} | ceiling {p['ceiling']:.2f} | {p['share']:4.0%} | least traffic "
              f"{p['alone']:.2f};  ceiling >= 1.6 in {p['open']} of {p['reps']} reps, {p['met']} of them gained >= 1.6")
    g, gr = best["GMC (39)", 1] / best["GMC (39)", threads], "GMC (39) into a reused buffer"
    print(f"  GMC (39) gains {g:.2f}x allocating its output and {best[gr, 1] / best[gr, threads]:.2f}x into a "
          "reused one (out=)")


def _calls_child(shape: str, size, threads: int, calls: int, spread: bool) -> list[list[float]]:
    """In this (fresh) process: ``calls`` BLUE calls on ``threads`` threads, each as
    [ms, page faults (ru_minflt), CPU ms of the process, share of the pool threads' pieces
    that started on the CPU the calling thread was on]; the tree and its data are built
    before the first call, its lazily derived structure is not (as in a user's first release)."""
    import ctypes
    import resource
    import threading

    from hierdp._kernels import threads as T
    from hierdp.postprocessors import blue as B

    T.SPREAD = spread
    hierdp.set_threads(threads)
    tree = build(shape, size)
    n = tree.n_nodes
    y = np.random.default_rng(0).normal(0.0, 10.0, n)
    var = np.full(n, 2.0)
    try:
        cpu = ctypes.CDLL(None).sched_getcpu
    except (AttributeError, OSError):
        cpu = None
    where: list[tuple[bool, int]] = []
    plain = T.run_pieces

    def traced(fn, pieces):  # the CPU each piece starts on, and whether a pool thread runs it
        def run(piece):
            where.append((threading.current_thread().name.startswith(T._PREFIX), cpu() if cpu else -1))
            return fn(piece)
        caller = cpu() if cpu else -1
        out = plain(run, pieces)
        where.append((False, caller))
        return out

    B.run_pieces = traced
    out = []
    for _ in range(calls):
        where.clear()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        e = B.blue(tree, y, var)
        ms = (time.perf_counter() - t0) * 1e3
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        callers = {c for pool, c in where if not pool}
        pool = [c for p, c in where if p]
        shared = sum(c in callers for c in pool) / len(pool) if pool else float("nan")
        out.append([ms, r1.ru_minflt - r0.ru_minflt, (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3,
                    shared])
        del e
    return out


def first_calls(shape: str, size, threads: int, calls: int, procs: int) -> None:
    """BLUE's consecutive calls in fresh processes on 1 and ``threads`` threads (and on
    ``threads`` without ``hierdp._kernels.threads.SPREAD``): per call, the median over
    ``procs`` processes of its time, page faults and CPU time, and of the share of the pool
    threads' pieces that ran on the caller's CPU (issue 30 item 4: the gain must hold from
    the second call)."""
    import json
    import subprocess

    runs = {}
    for label, t, spread in (("1 thread", 1, True), (f"{threads} threads", threads, True),
                             (f"{threads} threads, no SPREAD", threads, False)):
        got = []
        for _ in range(procs):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child-calls", shape, str(size), str(t),
                                  str(calls), str(int(spread))], check=True, capture_output=True, text=True)
            got.append(json.loads(out.stdout.strip().splitlines()[-1]))
        runs[label] = np.median(np.array(got, dtype=float), axis=0)
    one = runs["1 thread"][:, 0]
    print(f"\n== BLUE, consecutive calls in a fresh process ({shape}, medians of {procs} processes): ms | page "
          "faults | CPU ms | share of the pool's pieces on the caller's CPU; gain = 1 thread / N threads")
    for label, r in runs.items():
        cells = "  ".join(f"{ms:7.0f}|{int(f):5d}|{c:6.0f}" + ("" if np.isnan(sh) else f"|{sh:3.0%}")
                          for ms, f, c, sh in r)
        gains = " ".join(f"{g:.2f}" for g in one / r[:, 0])
        print(f"  {label:<24} {cells}\n  {'':<24} gain per call: {gains}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", default="binary,census,random")
    ap.add_argument("--threads", type=int, default=_cores(), help="the N of '1 vs N threads' (default: cores)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--reuse-memory", action="store_true",
                    help="tell glibc's malloc to keep freed memory (no fresh pages: see docs/performance.md)")
    ap.add_argument("--first-calls", type=int, default=0, metavar="K",
                    help="only: K consecutive BLUE calls in fresh processes, 1 vs N threads")
    ap.add_argument("--procs", type=int, default=3, help="fresh processes per setting for --first-calls")
    ap.add_argument("--child-calls", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_calls:
        import json

        shape, size, t, k, spread = args.child_calls
        print(json.dumps(_calls_child(shape, size, int(t), int(k), spread == "1")))
        return
    if args.first_calls:
        mode = "quick" if args.quick else "full"
        for shape in args.shapes.split(","):
            first_calls(shape.strip(), SIZES[mode][shape.strip()], max(args.threads, 2), args.first_calls,
                        args.procs)
        return
    if args.reuse_memory:
        reuse_memory()
    mode = "quick" if args.quick else "full"
    print(f"hierdp {hierdp.__version__}, numpy {np.__version__}; {_cores()} cores available")
    for shape in args.shapes.split(","):
        run_shape(shape.strip(), SIZES[mode][shape.strip()], max(args.threads, 2), args.repeat)


if __name__ == "__main__":
    main()
