"""Coverage of hierdp's confidence intervals (hierdp.uncertainty) over many releases.

Acceptance (issue "uncertainty"): the coverage of 90% and 95% intervals over >= 500
releases lies within [c - 0.005, c + 0.025] at every level with >= 25 nodes, for
all-budget-on-leaves and for an equal split with BLUE, with discrete Laplace and discrete
Gaussian. Also shown: the former intervals estimate ± z·std ("normal", with the std the
release reports), and after blue -> nonneg -> round the default conservative bound and
the parametric bootstrap (not part of the acceptance).

Trees: the bundled census example (state 6, county 44, tract 174 nodes) and a complete
4-ary tree of height 5 (1, 4, 16, 64, 256 nodes; Poisson(3) leaves: sparse, so nonneg
binds). The simulated intervals of a linear chain depend only on the public structure,
budgets and chain; each release here uses one of 5 simulation seeds (R = 999), so the
table mixes 5 independent simulations, as separate users would.

Run:  PYTHONPATH=. python benchmarks/bench_coverage.py [--releases 500] [--quick]
Reads true counts (to evaluate): a benchmark, never a release.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hierdp  # noqa: E402
from hierdp.spec.runner import load_spec, prepare  # noqa: E402

LEVELS = (0.9, 0.95)
SIM_SEEDS = 5


def census():
    spec = load_spec(Path(hierdp.__file__).parent / "examples" / "census.yaml")
    dpt = prepare(spec)
    return "census", dpt.tree, dpt.true_counts()


def complete():
    tree = hierdp.Tree.complete(fanout=4, height=5)
    leaves = np.random.default_rng(7).poisson(3, tree.n_leaves)
    return "4-ary h5 (Poisson 3)", tree, tree.aggregate(leaves)


def configs(tree):
    for mech, key, total in (("discrete_laplace", "epsilon", 1.0), ("discrete_gaussian", "rho", 0.5)):
        leaves_only = {n: 0.0 for n in tree.level_names}
        leaves_only[tree.level_names[-1]] = total
        yield mech, "all on leaves", {key: total}, leaves_only, ("blue",)
        yield mech, "equal + BLUE", {key: total}, "equal", ("blue",)


def run(tree, truth, mech, budget_kw, budget, chain, releases, draws, nonlinear="bound"):
    depth = tree.depth
    names = tree.level_names
    hits = {c: np.zeros(tree.n_nodes) for c in LEVELS}
    normal_hits = {c: np.zeros(tree.n_nodes) for c in LEVELS}
    widths = {c: np.zeros(tree.n_nodes) for c in LEVELS}
    methods: dict[str, int] = {}
    t0 = time.perf_counter()
    for i in range(releases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
            res = hierdp.release(tree, truth, mechanism=mech, budget=budget, postprocess=list(chain),
                                 seed=10_000 + i, **budget_kw)
        iv = res.intervals(LEVELS, draws=draws, seed=i % SIM_SEEDS, nonlinear=nonlinear)
        for c in LEVELS:
            hits[c] += (iv.low[c] <= truth) & (truth <= iv.high[c])
            widths[c] += iv.high[c] - iv.low[c]
            if res.std is not None:
                z = norm.ppf(0.5 + c / 2)
                normal_hits[c] += np.abs(res.values - truth) <= z * res.std
        if i == 0:
            for m in iv.method:
                methods[m] = methods.get(m, 0) + 1
    secs = time.perf_counter() - t0
    rows = []
    for d, name in enumerate(names):
        sel = depth == d
        rows.append((name, int(sel.sum()), {c: hits[c][sel].mean() / releases for c in LEVELS},
                     {c: normal_hits[c][sel].mean() / releases for c in LEVELS},
                     {c: widths[c][sel].mean() / releases for c in LEVELS}))
    return rows, methods, secs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--releases", type=int, default=500)
    ap.add_argument("--draws", type=int, default=999)
    ap.add_argument("--bootstrap-releases", type=int, default=200)
    args = ap.parse_args()
    ok = True
    print(f"releases per row: {args.releases}; simulation draws R = {args.draws}; acceptance band "
          "[c-0.005, c+0.025] at levels with >= 25 nodes")
    print(f"{'tree':22s} {'mechanism':18s} {'budget':14s} {'level':8s} {'nodes':>5s} "
          f"{'cov90':>6s} {'cov95':>6s} {'normal90':>8s} {'normal95':>8s} {'width95':>8s}  ok")
    for tname, tree, truth in (census(), complete()):
        for mech, bname, kw, budget, chain in configs(tree):
            rows, methods, secs = run(tree, truth, mech, kw, budget, chain, args.releases, args.draws)
            for name, size, cov, ncov, wid in rows:
                judged = size >= 25
                good = all(c - 0.005 <= cov[c] <= c + 0.025 for c in LEVELS)
                ok &= good or not judged
                flag = ("yes" if good else "NO") if judged else "-"
                print(f"{tname:22s} {mech:18s} {bname:14s} {name:8s} {size:5d} {cov[0.9]:6.3f} {cov[0.95]:6.3f} "
                      f"{ncov[0.9]:8.3f} {ncov[0.95]:8.3f} {wid[0.95]:8.2f}  {flag}")
            print(f"{'':22s} methods {methods}; {secs:.1f} s")
    print("\nafter blue -> nonneg -> round, equal split (not part of the acceptance): the default conservative "
          "bound (BLUE's interval ∩ [0, inf)) and the parametric bootstrap")
    for tname, tree, truth in (census(), complete()):
        for mech, kw in (("discrete_laplace", {"epsilon": 1.0}), ("discrete_gaussian", {"rho": 0.5})):
            for how, reps, draws in (("bound", args.releases, args.draws), ("bootstrap", args.bootstrap_releases, 199)):
                rows, methods, secs = run(tree, truth, mech, kw, "equal", ("blue", "nonneg", "round"), reps, draws,
                                          nonlinear=how)
                for name, size, cov, ncov, wid in rows:
                    print(f"{tname:22s} {mech:18s} {how:14s} {name:8s} {size:5d} {cov[0.9]:6.3f} "
                          f"{cov[0.95]:6.3f} {ncov[0.9]:8.3f} {ncov[0.95]:8.3f} {wid[0.95]:8.2f}")
                print(f"{'':22s} {reps} releases, R = {draws}; {secs:.1f} s")
    print("\nacceptance:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
