"""Small releases: numpy passes against the compiled kernels (issue 30 item 5).

Inputs of up to ``hierdp._kernels.jit.SMALL_INPUT`` (2^14) items used to run the kernels
interpreted (``jit.for_size``) to spare the first release a compile or a cache load. Now
the keyed discrete Laplace sampler (``mechanisms/_keyed_small.py``) and BLUE
(``postprocessors/_blue_small.py``) take numpy passes there instead (from 64 draws and 32
values: below, the interpreted kernels are cheaper), and top-down ``nonneg`` and ``round``
(``postprocessors/_topdown_small.py``) too. From a process's second release on, a
release from the secure key takes the compiled kernels instead when numba's on-disk cache
holds them (loading them costs that release ~0.3 s once; ``hierdp._kernels.jit.ready``);
a seeded release always takes the numpy passes (its values never depend on what the
process ran before). For trees shaped like Italy's geography
(region > province > municipality: 20 regions, ~107 provinces, the rest municipalities;
8,028 nodes at full size) of 10 to 10^5 nodes it prints, per chain (``blue``;
``blue -> nonneg -> round``, the default ``round`` being the remainder rule
``_rounding_kernels.round_top_down_2d``, still interpreted on small trees; and the same
with ``round`` top-down, ``method="topdown"``), default release (``per_level``, discrete Laplace, ε = 1):

* ``compiled``: the warm release with every kernel compiled (``SMALL_INPUT = -1``): the
  floor; ``numpy passes``: the warm release on the numpy passes (what a process's first
  release and every seeded release take); ``interpreted``: the kernels interpreted
  (``SMALL_NUMPY = False`` in the sampler, BLUE and the top-down passes; the default
  ``round`` always runs so). The three are timed interleaved, call after call in one
  process (medians of ``--calls``, after one untimed call each), so a busy machine slows
  them alike; ratios to the floor in brackets;
* ``a process now``: ``--fresh`` fresh processes with hierdp's defaults, each releasing
  ``1 + --calls`` times from the secure key (no seed), as a user's loop would: the first
  release (numpy passes: nothing to compile or load), the second (it loads the kernels
  from the on-disk cache, ``hierdp._kernels.jit.ready``), and the median of the later
  ones with its ratio (target: <= 2x) to ``compiled``, the median of the later releases
  of as many fresh processes with every kernel compiled (alternating with them; a
  process that runs one mode only, where the interleaved floor above runs its kernels
  after other modes have used the caches);
* both as CPU time of the process (``time.process_time``: what the release costs, steady
  when other jobs share the CPUs) and wall time.

The kernels' on-disk cache is filled first (a compiled release of each size in a
subprocess), as on a machine that has run hierdp before. A 10^5-node tree is above
``SMALL_INPUT``: all three columns run the compiled kernels there (a measure of the noise).

    PYTHONPATH=. python benchmarks/bench_small.py            # ~3 min
    PYTHONPATH=. python benchmarks/bench_small.py --calls 15 --fresh 5 --sizes 1000,8028
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

SIZES = (10, 100, 1_000, 8_028, 10_000, 100_000)
CHAINS = {"blue": ["blue"], "blue+nonneg+round": ["blue", "nonneg", "round"],
          "blue+nonneg+round:topdown": ["blue", "nonneg", ("round", {"method": "topdown"})]}
MODES = ("compiled", "numpy", "interpreted")


def italy_like(n_nodes: int, seed: int = 0):
    """A region > province > municipality tree of about ``n_nodes`` nodes with Italy's
    proportions (20 regions, 107 provinces, 7,900 municipalities at 8,028 nodes), and
    leaf counts; at least one node per level below the root."""
    import hierdp

    rng = np.random.default_rng(seed)
    scale = n_nodes / 8028
    n_r = max(1, round(20 * min(1.0, scale ** 0.5)))
    n_p = max(n_r, round(107 * min(1.0, scale ** 0.75)) if scale < 1 else round(107 * scale ** 0.5))
    n_m = max(n_p, n_nodes - 1 - n_r - n_p)
    prov = rng.multinomial(n_p - n_r, np.ones(n_r) / n_r) + 1
    mun = rng.multinomial(n_m - n_p, np.ones(n_p) / n_p) + 1
    parent = np.concatenate([[-1], np.zeros(n_r, np.int64), 1 + np.repeat(np.arange(n_r), prov),
                             1 + n_r + np.repeat(np.arange(n_p), mun)])
    tree = hierdp.Tree.from_parent(parent, level_names=["country", "region", "province", "municipality"])
    return tree, tree.aggregate(rng.poisson(50, tree.n_leaves))


def _mode(mode: str) -> None:
    from hierdp._kernels import jit
    from hierdp.mechanisms import _samplers
    from hierdp.postprocessors import blue, topdown

    jit.SMALL_INPUT = -1 if mode == "compiled" else 1 << 14
    jit.REUSE = False  # the modes share a process: the compiled mode's kernels are loaded
    _samplers.SMALL_NUMPY = blue.SMALL_NUMPY = topdown.SMALL_NUMPY = mode != "interpreted"


def _release(tree, truth, chain, seed):
    import hierdp

    return hierdp.release(tree, truth, epsilon=1.0, postprocess=chain, seed=seed)


def as_a_user(n: int, chain: str, calls: int, mode: str = "default") -> list:
    """A fresh process releasing ``1 + calls`` times from the secure key (no seed), with
    hierdp's defaults (the first release takes the numpy passes, later ones the kernels
    from the on-disk cache) or every kernel compiled (``mode="compiled"``: the floor, in
    a process that runs nothing else). Times (CPU, wall) of each release."""
    warnings.simplefilter("ignore")
    if mode == "compiled":
        from hierdp._kernels import jit

        jit.SMALL_INPUT = -1
    tree, truth = italy_like(n)
    out = []
    for _ in range(1 + calls):
        t0, c0 = time.perf_counter(), time.process_time()
        _release(tree, truth, CHAINS[chain], None)
        out.append((time.process_time() - c0, time.perf_counter() - t0))
    return out


def in_process(n: int, chain: str, calls: int) -> dict:
    """Times of ``calls`` releases in each mode, interleaved, after one untimed each."""
    warnings.simplefilter("ignore")
    tree, truth = italy_like(n)
    out: dict = {"nodes": tree.n_nodes, **{m: [] for m in MODES}}
    for m in MODES:
        _mode(m)
        _release(tree, truth, CHAINS[chain], 1)
    skip_interp = n > 20_000 or (chain != "blue" and n > 1_000)  # minutes interpreted: fewer calls
    for i in range(calls):
        for m in MODES:
            if m == "interpreted" and skip_interp and i >= 2:
                continue
            _mode(m)
            t0, c0 = time.perf_counter(), time.process_time()
            _release(tree, truth, CHAINS[chain], None)  # the secure key, as a user's releases
            out[m].append((time.process_time() - c0, time.perf_counter() - t0))
    return out


def _child(*args: str) -> object:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=9)
    ap.add_argument("--fresh", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--chains", default=",".join(CHAINS))
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        kind, n, chain, *rest = args.child
        if kind == "fill":  # compile every kernel this size and chain need, into the cache
            warnings.simplefilter("ignore")
            _mode("compiled")
            _release(*italy_like(int(n)), CHAINS[chain], 1)
            print(json.dumps(None))
        elif kind == "user":
            print(json.dumps(as_a_user(int(n), chain, int(rest[0]), *rest[1:])))
        else:
            print(json.dumps(in_process(int(n), chain, int(rest[0]))))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    import hierdp

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"hierdp {hierdp.__version__}, numpy {np.__version__}, load average {load:.1f} on {os.cpu_count()} CPUs; "
          "ms, medians; ratios to the compiled floor of the same process in brackets; "
          "'cpu' is the process's CPU time (steadier than 'wall' on a busy machine)")
    for chain in args.chains.split(","):
        print(f"\n== {chain}")
        print(f"{'nodes':>8} {'time':<5}{'compiled':>9}{'numpy passes':>18}{'interpreted':>17}"
              f"{'a process now: 1st':>20}{'2nd':>8}{'later':>17}{'compiled':>10}")
        for n in sizes:
            _child("fill", str(n), chain)
            r = _child("run", str(n), chain, str(args.calls))
            assert isinstance(r, dict)
            med = {m: np.median(np.array(r[m]), axis=0) * 1e3 for m in MODES}  # (CPU, wall)
            fl = med["compiled"]
            users, alone = [], []
            for _ in range(args.fresh):  # alternating, so that a busy spell slows both
                users.append(np.array(_child("user", str(n), chain, str(args.calls))) * 1e3)
                alone.append(np.array(_child("user", str(n), chain, str(args.calls), "compiled")) * 1e3)
            one = np.median([u[0] for u in users], axis=0)
            two = np.median([u[1] for u in users], axis=0)
            later = np.median(np.concatenate([u[2:] for u in users]), axis=0)
            floor = np.median(np.concatenate([u[2:] for u in alone]), axis=0)
            for j, what in ((0, "cpu"), (1, "wall")):
                nm, it = med["numpy"][j], med["interpreted"][j]
                print(f"{r['nodes']:>8,} {what:<5}{fl[j]:>9.2f}{nm:>10.2f} ({nm / fl[j]:4.1f}x)"
                      f"{it:>9.1f} ({it / fl[j]:5.1f}x)"
                      f"{one[j]:>20.1f}{two[j]:>8.1f}{later[j]:>9.2f} ({later[j] / floor[j]:4.1f}x)"
                      f"{floor[j]:>10.2f}", flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average at the end {load:.1f}")


if __name__ == "__main__":
    main()
