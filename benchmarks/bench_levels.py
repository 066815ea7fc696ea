"""Deep trees (issue 35 item 8): a path of 10⁴ / 10⁵ levels, one node each.

Times ``hierdp.release(hierdp.Tree.from_parent(parent), values, epsilon=1.0)`` (plan
``per_level``, budget ``equal``) with post-processing ``blue``, ``blue -> nonneg -> round``
and ``gmc``, the tree's construction apart, with ``seed=1`` and with the default secure
source (ChaCha20; the acceptance criterion is for this one), and prints each against a floor measured in
the same run: a Python loop of one numpy call per level over the same n (``x[i] += 1.0``;
a release needs at least one noise draw per level, so this is what "no heavier than a
Python loop per level" means) and the plain numpy pass ``y = x * 2.0`` over n values. Also
the size of the ledger as text and as JSON. The kernels are loaded before timing.

Measured (2 cores shared with a CI run, load 2.1-2.6, after c8530d1): 10⁵ levels, release
3.3-4.9 s for each post-processing with ``seed=1`` = 10-15x the loop floor (was 205-273 s: a
quadratic accountant and an interpreted sampler per level); 10⁴ levels 0.5-0.6 s (was 24
s). The default secure source then took 10-11 s for 10⁵ levels: one OpenSSL ChaCha20
context (~60 µs) per level's few dozen words. With small draws served from a buffered
reservation (``hierdp.rng``, issue 35 item 8): 10⁵ levels with ``blue``, ``seed=1`` 3.98 s,
secure 4.20 s (load 1.5, same process); a full run of this script at load 14 (other jobs
on the 2 cores; the loop floor 1.37 s instead of 0.19 s) gave 14.5-15.3x the floor with
``seed=1`` and 15.2-17.6x with the secure source (2.9-3.3 s at the quiet floor of 0.19 s): the
secure source now costs about what the seeded one does. Ledger of 10⁵ levels: 520
characters as text (one line for the run of levels; was 6 MB), 2.5 MB as JSON (complete:
every level's name). Run from the worktree root with ``PYTHONPATH=.``:
without it the script imports whichever hierdp is installed.

    PYTHONPATH=. python benchmarks/bench_levels.py            # 10⁴ and 10⁵ levels (about a minute)
    PYTHONPATH=. python benchmarks/bench_levels.py --quick    # 10⁴ levels (this checkout, not an installed hierdp)
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _machine import numpy_floor  # noqa: E402

import hierdp  # noqa: E402

POSTPROCESS = {"blue": ["blue"], "blue+nonneg+round": ["blue", "nonneg", "round"], "gmc": ["gmc"]}


def loop_floor(n: int) -> float:
    """Seconds of one numpy call per level: ``x[i] += 1.0`` for i < n."""
    x = np.zeros(n)
    t0 = time.perf_counter()
    for i in range(n):
        x[i : i + 1] += 1.0
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    warm = hierdp.Tree.from_parent(np.arange(-1, 299))
    for pp in POSTPROCESS.values():  # load the compiled kernels outside the timings
        hierdp.release(warm, warm.aggregate(np.ones(warm.n_leaves, dtype=np.int64)), epsilon=1.0, seed=0,
                       postprocess=pp)
    for n in (10_000,) if args.quick else (10_000, 100_000):
        parent = np.arange(-1, n - 1)
        t0 = time.perf_counter()
        tree = hierdp.Tree.from_parent(parent)
        values = tree.aggregate(np.random.default_rng(0).integers(0, 20, tree.n_leaves))
        t_tree = time.perf_counter() - t0
        floor, numpy_pass = loop_floor(n), numpy_floor(n)
        print(f"{n} levels: tree {t_tree:.2f} s; floor (a numpy call per level) {floor:.3f} s, "
              f"numpy pass {numpy_pass * 1e3:.3f} ms")
        for source, seed in (("seed=1", 1), ("secure", None)):
            for name, pp in POSTPROCESS.items():
                t0 = time.perf_counter()
                r = hierdp.release(tree, values, epsilon=1.0, seed=seed, postprocess=pp)
                t = time.perf_counter() - t0
                print(f"  {source:7s} {name:18s} {t:6.2f} s  = {t / floor:5.1f} x floor")
        print(f"  ledger: text {len(str(r.ledger)):,} chars, JSON {len(r.ledger.to_json()):,} chars")


if __name__ == "__main__":
    main()
