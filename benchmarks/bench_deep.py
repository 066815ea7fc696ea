"""Deep trees: α-mRMSE of Laplace, Gaussian, Gaussian + BLUE and ``ghazi`` against depth.

Ghazi et al. (ICALP 2023): pure-DP Laplace is Θ(d/ε) (Thm. 28 lower bound Ω((1-α)²d/ε)),
Gaussian is Θ(√d) (Thm. 29 lower bound C_{ε,δ}·√d for α = 0), and their (ε, δ) estimator
is O(log d) for α > 0 (Thm. 21). This script measures, at matched (ε, δ):

* α-mRMSE (max over nodes of the per-node α-RMSE, Def. 4, estimated over ``--runs``
  releases) for α in {0.1, 0.25, 0.5} on complete binary trees of depth d = 4 ... 20
  (d = number of levels) with heavy-tailed (Pareto) leaf counts, and on a per-second time
  hierarchy day > hour > minute > second with generated (diurnal Poisson) event counts;
* the reference lines (1-α)²·d/ε (Thm. 28, constant 1) and √d (Thm. 29, constant 1:
  the paper gives no constant, the line shows the shape only);
* the time of one ``ghazi`` release of a complete binary tree with 2^20 - 1 = 1,048,575
  nodes (20 levels: depth 19 below the root).

Findings (5 runs per cell, ε = 1, δ = 1e-6, 2-core machine): no separation at feasible
depth. At d = 20 the α-mRMSE is, for α = 0.1 / 0.25 / 0.5: Laplace 133 / 132 / 131,
Gaussian 64 / 61 / 61, Gaussian + BLUE 51 / 49 / 48, ghazi 58074 / 7048 / 2558. ghazi's
worst node is an (almost) empty one, released as M_0/2 = α·τ_u, so its α-mRMSE is set by
the threshold τ_u and grows only through ln(d/η) (2415 at d = 8, 2558 at d = 20 for
α = 0.5), while the Gaussian's exact α-mRMSE at an empty node is σ ≈ 5.4·√d (the max over
nodes of a 5-run estimate reads higher). Extrapolating, ghazi beats the Gaussian from
d ≈ (2558/5.4)² ≈ 2·10⁵ levels at α = 0.5 (≈ 1.7·10⁶ at α = 0.25) and pure Laplace
(≈ 1.4·d) from d ≈ 1800. The per-second day > hour > minute > second tree (4 levels) is
far on the Laplace side. One ghazi release of 1,048,575 nodes (20 levels) takes ~3 s.

    python benchmarks/bench_deep.py            # d up to 20 (a few minutes)
    python benchmarks/bench_deep.py --quick    # d up to 12 (seconds)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import hierdp
from hierdp.plans.ghazi import ghazi_schedule

EPS, DELTA = 1.0, 1e-6
ALPHAS = (0.1, 0.25, 0.5)


def heavy_counts(tree: hierdp.Tree, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return tree.aggregate((rng.pareto(1.1, tree.n_leaves) * 20).astype(np.int64))


def seconds_day(seed: int = 0) -> tuple[hierdp.Tree, np.ndarray]:
    """day > hour > minute > second, one day of events with a diurnal rate (events per second)."""
    parent = [np.array([-1])]
    sizes = [1, 24, 24 * 60, 24 * 3600]
    offset = 0
    for k in range(1, 4):
        fan = sizes[k] // sizes[k - 1]
        parent.append(offset + np.repeat(np.arange(sizes[k - 1]), fan))
        offset += sizes[k - 1]
    tree = hierdp.Tree.from_parent(np.concatenate(parent), level_names=["day", "hour", "minute", "second"])
    t = np.arange(24 * 3600) / 3600.0
    rate = 0.3 + 2.5 * np.exp(-0.5 * ((t - 14.0) / 3.5) ** 2)
    rng = np.random.default_rng(seed)
    leaves = rng.poisson(rate)
    return tree, tree.aggregate(leaves)


METHODS = {
    "laplace": dict(plan="per_level", mechanism="discrete_laplace", postprocess=[], epsilon=EPS),
    "gauss": dict(plan="per_level", mechanism="discrete_gaussian", postprocess=[], epsilon=EPS, delta=DELTA),
    "gauss+blue": dict(plan="per_level", mechanism="discrete_gaussian", postprocess=["blue"], epsilon=EPS,
                       delta=DELTA),
}


def alpha_mrmse(true: np.ndarray, runs: list[np.ndarray], alpha: float) -> float:
    sq = np.mean([np.maximum(np.abs(e - true) - alpha * true, 0.0) ** 2 for e in runs], axis=0)
    return float(np.sqrt(sq.max()))


def evaluate(tree: hierdp.Tree, true: np.ndarray, n_runs: int) -> dict[str, dict[float, float]]:
    out: dict[str, dict[float, float]] = {}
    for name, kw in METHODS.items():
        runs = [hierdp.release(tree, true, seed=s, **kw).values for s in range(n_runs)]
        out[name] = {a: alpha_mrmse(true, runs, a) for a in ALPHAS}
    out["ghazi"] = {}
    for a in ALPHAS:
        runs = [hierdp.release(tree, true, plan={"name": "ghazi", "alpha": a}, epsilon=EPS, delta=DELTA,
                               seed=s).values for s in range(n_runs)]
        out["ghazi"][a] = alpha_mrmse(true, runs, a)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    depths = (4, 8, 12) if args.quick else (4, 8, 12, 16, 20)
    print(f"alpha-mRMSE at (eps, delta) = ({EPS}, {DELTA}); complete binary trees, Pareto leaf counts; "
          f"{args.runs} runs per cell")
    print("ghazi thresholds tau_u (provable, this implementation):",
          {a: round(ghazi_schedule(EPS, DELTA, a, 0.05, 20).threshold) for a in ALPHAS}, "at d = 20")
    hdr = f"{'tree':>14} {'alpha':>5} {'laplace':>9} {'gauss':>9} {'gauss+blue':>10} {'ghazi':>10} " \
          f"{'(1-a)^2 d/eps':>13} {'sqrt(d)':>8}"
    print(hdr)
    cases = [(f"binary d={d}", hierdp.Tree.complete(2, d)) for d in depths]
    for label, tree in cases:
        true = heavy_counts(tree)
        t0 = time.perf_counter()
        res = evaluate(tree, true, args.runs)
        d = tree.n_levels
        for a in ALPHAS:
            print(f"{label:>14} {a:>5} {res['laplace'][a]:>9.1f} {res['gauss'][a]:>9.1f} {res['gauss+blue'][a]:>10.1f} "
                  f"{res['ghazi'][a]:>10.1f} {(1 - a) ** 2 * d / EPS:>13.1f} {np.sqrt(d):>8.2f}")
        print(f"{'':>14} ({time.perf_counter() - t0:.1f} s)")
    tree, true = seconds_day()
    res = evaluate(tree, true, args.runs)
    for a in ALPHAS:
        print(f"{'day>h>m>s':>14} {a:>5} {res['laplace'][a]:>9.1f} {res['gauss'][a]:>9.1f} "
              f"{res['gauss+blue'][a]:>10.1f} {res['ghazi'][a]:>10.1f} {(1 - a) ** 2 * 4 / EPS:>13.1f} {2.0:>8.2f}")
    big = hierdp.Tree.complete(2, 20)
    true = heavy_counts(big, 1)
    t0 = time.perf_counter()
    r = hierdp.release(big, true, plan={"name": "ghazi", "alpha": 0.5}, epsilon=EPS, delta=DELTA, seed=0)
    dt = time.perf_counter() - t0
    print(f"ghazi release, complete binary tree, {big.n_nodes:,} nodes, {big.n_levels} levels: {dt:.2f} s "
          f"({r.estimate.info['ghazi']['steps']} threshold steps)")


if __name__ == "__main__":
    main()
