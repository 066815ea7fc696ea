"""hierdp vs InfTDA (``pip install inf-tda``) with the exact national total as an invariant.

InfTDA (Boninsegna & Silvestri 2024) releases a MultiIndex count table top-down under
*bounded* (substitution) neighbours: the total ``n`` is taken as exact, every level below
gets the discrete Gaussian with L2 sensitivity sqrt(2) at rho / T, and each parent's
children are made integer, non-negative and summing to the parent by its Chebyshev step.

Matched privacy: the same (ε, δ) → ρ (InfTDA's own conversion, ``get_rho_from_budget``),
substitution neighbours, ρ split equally over the levels below the total, the total exact.
hierdp: ``neighbours="substitute", invariants=["total"]``, ``discrete_gaussian``, ``equal``,
then ``blue`` (linear) and ``blue -> nonneg -> round`` (consistent non-negative integers).
Printed: RMSE per level over ``--reps`` repetitions (non-private evaluation, benchmark only).

Tables: the bundled census demo (6 states, 44 counties, 174 tracts, ~60k people) and a
larger synthetic one (10 states x 20 counties x 30 tracts, Zipf-like tract sizes).

InfTDA 0.1 calls opendp's ``make_gaussian`` on an ``atom_domain(T=int)`` vector, which
opendp 0.16 maps to int32 while pandas hands it int64: an adapter casts the counts to
int32 (they fit) and changes nothing else.

    python benchmarks/bench_inftda.py --reps 20
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent.parent))

import hierdp  # noqa: E402


def _inftda():
    try:
        import InfTDA.mechanism as M
        from InfTDA.differential_privacy import get_rho_from_budget
    except ImportError:
        sys.exit("InfTDA is not installed: pip install inf-tda")
    orig = M.make_gaussian_noise

    def patched(d_in, rho):
        m = orig(d_in, rho)
        return lambda v: np.asarray(m(np.asarray(v, dtype=np.int32)), dtype=np.int64)

    M.make_gaussian_noise = patched
    return M.inf_tda, get_rho_from_budget


def demo_table():
    from hierdp.spec import validate
    from hierdp.spec.runner import prepare

    spec = validate(str(Path(hierdp.__file__).parent / "examples" / "census.yaml"))
    dpt = prepare(spec)
    return dpt.tree, dpt.true_counts()


def synthetic_table(seed=0):
    rng = np.random.default_rng(seed)
    n_s, n_c, n_t = 10, 20, 30
    parent = np.concatenate([[-1], np.zeros(n_s, np.int64), 1 + np.repeat(np.arange(n_s), n_c),
                             1 + n_s + np.repeat(np.arange(n_s * n_c), n_t)])
    labels = ["total"] + [f"S{i}" for i in range(n_s)] + [f"C{i}" for i in range(n_s * n_c)] + \
        [f"T{i}" for i in range(n_s * n_c * n_t)]
    tree = hierdp.Tree.from_parent(parent, labels=labels, level_names=["total", "state", "county", "tract"])
    sizes = np.floor(2000.0 / rng.zipf(1.6, tree.n_leaves).clip(1, 2000)).astype(np.int64)
    sizes[rng.random(tree.n_leaves) < 0.1] = 0
    return tree, tree.aggregate(sizes)


def run(name, tree, truth, eps, delta, reps, inf_tda, get_rho):
    rho = float(get_rho((eps, delta)))
    leaves = tree.leaves
    paths = [tree.path(int(v)) for v in leaves]
    series = pd.Series(truth[leaves].astype(np.int64), index=pd.MultiIndex.from_tuples(paths))
    depth = tree.depth
    errs = {k: [] for k in ("InfTDA", "hierdp blue", "hierdp blue+nonneg+round")}
    secs = {k: 0.0 for k in errs}
    for r in range(reps):
        t0 = time.perf_counter()
        out = inf_tda(series, (float(eps), float(delta)), 1, privacy_type="bounded")
        secs["InfTDA"] += time.perf_counter() - t0
        leaf_vals = out.reindex(series.index, fill_value=0).to_numpy()
        est = {"InfTDA": tree.aggregate(leaf_vals)}
        for key, chain in (("hierdp blue", ["blue"]), ("hierdp blue+nonneg+round", ["blue", "nonneg", "round"])):
            t0 = time.perf_counter()
            res = hierdp.release(tree, truth, rho=rho, mechanism="discrete_gaussian", neighbours="substitute",
                                 invariants=["total"], postprocess=chain, seed=1000 + r)
            secs[key] += time.perf_counter() - t0
            est[key] = np.asarray(res.estimate.values, dtype=float)
        for k, v in est.items():
            errs[k].append([(v[depth == d] - truth[depth == d]) ** 2 for d in range(tree.n_levels)])
    print(f"\n{name}: {tree.n_nodes} nodes, n = {int(truth[tree.root]):,}; (ε, δ) = ({eps}, {delta}) -> ρ = {rho:.4f}, "
          f"substitution neighbours, total exact; {reps} repetitions")
    head = "".join(f"{lv:>10s}" for lv in tree.level_names)
    print(f"{'RMSE per node':28s}{head}{'sec/run':>10s}")
    for k, e in errs.items():
        rm = [np.sqrt(np.mean(np.concatenate([rep[d] for rep in e]))) for d in range(tree.n_levels)]
        print(f"{k:28s}" + "".join(f"{x:10.2f}" for x in rm) + f"{secs[k] / reps:10.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-6)
    args = ap.parse_args()
    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    inf_tda, get_rho = _inftda()
    for name, (tree, truth) in (("census demo", demo_table()), ("synthetic 10x20x30", synthetic_table())):
        run(name, tree, truth, args.epsilon, args.delta, args.reps, inf_tda, get_rho)


if __name__ == "__main__":
    main()
