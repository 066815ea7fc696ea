"""Consistency engine benchmark (issue 3; Cai et al. Fig. 6-7, Table 3 timing side).

For each tree shape -- complete binary (SynData, h = 24: 16.7M nodes), census-like
(~11.8M nodes, 8 levels) and random fan-out 2-5 (per-second histogram) -- it reports, in
seconds, ns/node and as ratios:

- the floor: a plain numpy pass ``y = x * 2.0`` over n float64 values into a warm buffer,
  re-measured before every timed call (the smallest value of the run is used; the
  allocating ``y = x * 2.0`` is shown too, for reference);
- GMC stage 1 (Alg. 1, structure only) and stage 2 (formula 39, and 36);
- BLUE (Dawson et al. Alg. 2), ``nonneg`` (exact, with its iterations and KKT residual),
  ``round``, and Boosting;
- formula (36) evaluated with ``scipy.sparse.linalg.spsolve_triangular`` on the same
  Generation Matrix ``G_{T(1)<-T}``;
- the plain recursive PrivTrie reference timed on a ~1M-node tree of the same shape and
  extrapolated linearly to n;
- accuracy of the unconstrained estimate, clipping negatives to 0 (not consistent),
  ``nonneg`` and ``round`` (rmse against the true counts, consistency bias, formula 42);
- peak RSS of a fresh process running the whole chain (GMC, BLUE, nonneg, round) and,
  for the binary tree, of a full ``hierdp`` release.

Usage: ``python benchmarks/bench_consistency.py [--quick] [--shapes binary,census,random]``.
``--quick`` uses small trees (seconds); the full run needs ~10 GiB free and minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _machine import numpy_floor, warm_memory  # noqa: E402
from _trees import census_like_tree, complete_tree, random_fanout_tree  # noqa: E402

import hierdp  # noqa: E402
from hierdp import generation_matrix as gm  # noqa: E402
from hierdp.postprocessors.baselines import boosting, privtrie  # noqa: E402
from hierdp.postprocessors.blue import blue  # noqa: E402
from hierdp.postprocessors.gmc import gmc, gmc_structure  # noqa: E402
from hierdp.postprocessors.nonneg import nonneg  # noqa: E402
from hierdp.postprocessors.rounding import controlled_round  # noqa: E402

SIZES = {
    "full": {"binary": 24, "census": 1.0, "random": 8_000_000},
    "quick": {"binary": 16, "census": 0.01, "random": 60_000},
}
SUBTREE = {  # ~1M nodes (full) / ~30k (quick) for the recursive reference
    "full": {"binary": 20, "census": 1_000_000 / 11_776_274, "random": 690_000},
    "quick": {"binary": 15, "census": 0.0025, "random": 20_000},
}


def build(shape: str, size) -> hierdp.Tree:
    if shape == "binary":
        return complete_tree(int(size))
    if shape == "census":
        return census_like_tree(float(size))
    return random_fanout_tree(int(size))


def data(tree: hierdp.Tree, shape: str, eps: float = 1.0, seed: int = 0):
    """True counts and Laplace(h/eps) noisy counts (the paper's uniform budget), internal order."""
    rng = np.random.default_rng(seed)
    m = tree.n_leaves
    if shape == "census":  # sparse, skewed block counts
        lam = rng.lognormal(1.5, 1.5, m) * (rng.random(m) < 0.6)
        leaves = rng.poisson(lam)
    else:                  # SynData: Poisson(100)
        leaves = rng.poisson(100.0, m)
    true = tree.to_internal(tree.aggregate(leaves)).astype(np.float64)
    noisy = true + rng.laplace(0.0, tree.height / eps, tree.n_nodes)
    return true, noisy, 2.0 * (tree.height / eps) ** 2


class Floor:
    """The numpy floor ``y = x * 2.0`` (warm output buffer), re-measured before every timed
    call; ratios use the smallest value seen in the whole shape's run, so a slow moment of
    the VM cannot make the floor look slow and the ratios look good."""

    def __init__(self, n: int) -> None:
        self.x = np.ones(n)
        self.y = np.empty(n)
        self.best = numpy_floor(n)
        self.alloc = float("inf")  # the literal ``y = x * 2.0``, allocating y each time

    def sample(self) -> None:
        t0 = time.perf_counter()
        np.multiply(self.x, 2.0, out=self.y)
        self.best = min(self.best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        z = self.x * 2.0
        self.alloc = min(self.alloc, time.perf_counter() - t0)
        del z


FLOOR: Floor | None = None


def best_of(f, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        if FLOOR is not None:
            FLOOR.sample()
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def sparse_triangular_gmc(tree: hierdp.Tree, v: np.ndarray):
    """Formula (36) with scipy.sparse: v - M G^-1 (G^-T (M^T v)) by two triangular solves."""
    import scipy.sparse.linalg as sla

    M = gm.consistency_constraint_matrix(tree)
    G = gm.gmc_matrix(tree).tocsr()
    GT = G.T.tocsr()

    def run(parts=None):
        t0 = time.perf_counter()
        r = M.T @ v
        t1 = time.perf_counter()
        z = sla.spsolve_triangular(GT, r, lower=False)
        y = sla.spsolve_triangular(G, z, lower=True)
        t2 = time.perf_counter()
        out = v - M @ y
        if parts is not None:  # where scipy's time goes: products over n vs solves over n1
            parts["products"] = min(parts.get("products", np.inf), (t1 - t0) + (time.perf_counter() - t2))
            parts["solves"] = min(parts.get("solves", np.inf), t2 - t1)
        return out

    return run


def bias(tree: hierdp.Tree, x: np.ndarray) -> float:
    """Consistency bias, formula (42)."""
    s = np.zeros_like(x, dtype=np.float64)
    np.add.at(s, tree._parent[1:], x[1:])
    internal = tree._n_children > 0
    return float(np.sqrt(np.mean((x[internal] - s[internal]) ** 2)))


def rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a, float) - b) ** 2)))


def run_shape(shape: str, mode: str, repeat: int) -> dict:
    t0 = time.perf_counter()
    tree = build(shape, SIZES[mode][shape])
    t_build = time.perf_counter() - t0
    n = tree.n_nodes
    true, noisy, var = data(tree, shape)
    variance = np.full(n, var)
    global FLOOR
    FLOOR = Floor(n)
    res = {"shape": shape, "n": n, "leaves": tree.n_leaves, "height": tree.height, "build_s": t_build}

    def stage1():
        tree.cache.pop("gmc.structure", None)
        gmc_structure(tree)

    stage1()  # compile
    res["gmc_stage1_s"] = best_of(stage1, repeat)
    # an output buffer offset from the input modulo 4 KiB, as gmc() allocates its own (a
    # buffer aliasing the input's address modulo 4096 runs up to 2x slower: 4K aliasing)
    from hierdp.postprocessors.gmc import _aligned_empty

    out = _aligned_empty(noisy.shape, 11)
    gmc(tree, noisy, out=out)
    res["gmc_stage2_s"] = best_of(lambda: gmc(tree, noisy, out=out), repeat)
    gmc(tree, noisy, formula=36)
    res["gmc36_stage2_s"] = best_of(lambda: gmc(tree, noisy, formula=36), repeat)
    b = blue(tree, noisy, variance)
    res["blue_s"] = best_of(lambda: blue(tree, noisy, variance), repeat)
    # the compiled kernel blue() picks, alone, outputs pre-allocated (as GMC stage 2 is timed)
    from hierdp._kernels.kernel_common import aligned_empty
    from hierdp.postprocessors import _blue_kernels as K
    from hierdp.postprocessors.blue import _structure

    bst = _structure(tree)
    y1 = np.ascontiguousarray(noisy, dtype=np.float64).reshape(n)
    v1 = np.ascontiguousarray(variance, dtype=np.float64).reshape(n)
    xo, xv = aligned_empty((n,), 3), aligned_empty((n,), 7)
    if bst.flat_parent is not None:
        work = bst.scratch()
        res["blue_kernel"] = "flat"
        res["blue_kernel_s"] = best_of(lambda: K.blue_flat_1d(bst.flat_parent, bst.n1, y1, v1, xo, xv, work), repeat)
    else:
        res["blue_kernel"] = "per-parent"
        res["blue_kernel_s"] = best_of(
            lambda: K.blue_1d(bst.first, bst.cidx, tree._leafcount, bst.n1, y1, v1, xo, xv), repeat)
    from hierdp.postprocessors.gmc import gmc_structure as _gs

    res["gmc_kernel"] = "one by one" if _gs(tree).leaf_parent is not None else "run by run"
    res["gmc_alloc_s"] = best_of(lambda: gmc(tree, noisy), repeat)
    np.testing.assert_allclose(b.values, out, rtol=1e-9, atol=1e-6 * (1 + np.abs(out).max()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        boosting(tree, noisy)
        res["boosting_s"] = best_of(lambda: boosting(tree, noisy), max(1, repeat // 2))
        bo = boosting(tree, noisy)
    x_nn, info = nonneg(tree, noisy, variance)
    res["nonneg_s"] = best_of(lambda: nonneg(tree, noisy, variance), 2)
    res["nonneg_iterations"] = info["iterations"]
    res["nonneg_kkt_residual"] = info["kkt_residual"]
    res["nonneg_converged"] = info["converged"]
    controlled_round(tree, x_nn)
    res["round_s"] = best_of(lambda: controlled_round(tree, x_nn), repeat)
    x_r = controlled_round(tree, x_nn)
    # scipy.sparse triangular solves on the same Generation Matrix
    f = sparse_triangular_gmc(tree, noisy)
    ref = f()
    parts: dict = {}
    res["scipy_triangular_s"] = best_of(lambda: f(parts), 2)
    res["scipy_products_s"], res["scipy_solves_s"] = parts["products"], parts["solves"]
    np.testing.assert_allclose(ref, out, rtol=1e-9, atol=1e-6 * (1 + np.abs(out).max()))
    # plain recursive PrivTrie on a ~1M-node tree of the same shape, extrapolated
    sub = build(shape, SUBTREE[mode][shape])
    _, sub_noisy, _ = data(sub, shape, seed=1)
    p = privtrie(sub, sub_noisy)
    t_sub = best_of(lambda: privtrie(sub, sub_noisy), 2)
    np.testing.assert_allclose(p, gmc(sub, sub_noisy), rtol=1e-9, atol=1e-6)
    res["privtrie_subtree_n"] = sub.n_nodes
    res["privtrie_subtree_s"] = t_sub
    res["privtrie_extrapolated_s"] = t_sub * n / sub.n_nodes
    res["numpy_s"] = FLOOR.best
    res["numpy_alloc_s"] = FLOOR.alloc
    # accuracy: unconstrained vs clipped vs nonneg vs round (Table 3 style + non-negativity)
    clipped = np.maximum(out, 0.0)
    res["accuracy"] = {
        "processless": {"rmse": rmse(noisy, true), "bias": bias(tree, noisy)},
        "boosting": {"rmse": rmse(bo, true), "bias": bias(tree, bo)},
        "gmc": {"rmse": rmse(out, true), "bias": bias(tree, out), "negative_frac": float(np.mean(out < 0))},
        "gmc_clipped": {"rmse": rmse(clipped, true), "bias": bias(tree, clipped)},
        "nonneg": {"rmse": rmse(x_nn, true), "bias": bias(tree, x_nn)},
        "round": {"rmse": rmse(x_r, true), "bias": bias(tree, x_r.astype(float)),
                  "max_abs_change": float(np.abs(x_r - x_nn).max())},
    }
    return res


def peak_child(shape: str, mode: str, with_release: bool) -> dict:
    """Run in a fresh process: the whole chain, then report peak RSS (GiB)."""
    tree = build(shape, SIZES[mode][shape])
    true, noisy, var = data(tree, shape)
    variance = np.full(tree.n_nodes, var)
    out = {"shape": shape, "n": tree.n_nodes}
    est = hierdp.registry.create("postprocessor", "gmc").apply(tree, hierdp.Estimate(noisy, variance))
    est = hierdp.registry.create("postprocessor", "nonneg").apply(tree, est)
    est = hierdp.registry.create("postprocessor", "round").apply(tree, est)
    blue(tree, noisy, variance)
    out["chain_peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if with_release:
        from hierdp import release

        ext_true = tree.to_external(true).astype(np.int64)
        del noisy, variance, est
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = release(tree, ext_true, epsilon=1.0, postprocess=["blue", "nonneg", "round"], seed=0)
        out["release_s"] = time.perf_counter() - t
        out["release_consistent"] = bool(tree.is_consistent(r.estimate.values))
        out["release_peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def report(res: dict) -> None:
    n, fl = res["n"], res["numpy_s"]
    print(f"\n== {res['shape']}: n = {n:,} nodes, {res['leaves']:,} leaves, height {res['height']} "
          f"(built in {res['build_s']:.1f} s)")
    print(f"{'step':<28}{'seconds':>10}{'ns/node':>10}{'x numpy':>10}")
    rows = [("numpy pass y = x * 2.0", fl), ("  same, allocating y", res["numpy_alloc_s"]),
            ("GMC stage 1 (Alg. 1)", res["gmc_stage1_s"]),
            (f"GMC st. 2 (39, {res['gmc_kernel']})", res["gmc_stage2_s"]),
            ("GMC stage 2 (formula 36)", res["gmc36_stage2_s"]),
            ("GMC stage 2, allocating", res["gmc_alloc_s"]),
            ("BLUE (Alg. 2), blue()", res["blue_s"]), (f"BLUE kernel ({res['blue_kernel']})", res["blue_kernel_s"]),
            ("nonneg (exact)", res["nonneg_s"]), ("round", res["round_s"]),
            ("Boosting", res["boosting_s"]), ("scipy triangular solves", res["scipy_triangular_s"]),
            ("PrivTrie (extrapolated)", res["privtrie_extrapolated_s"])]
    for name, s in rows:
        print(f"{name:<28}{s:>10.4f}{s / n * 1e9:>10.2f}{s / fl:>10.1f}")
    g2, ga, bl, bk = res["gmc_stage2_s"], res["gmc_alloc_s"], res["blue_s"], res["blue_kernel_s"]
    fa = res["numpy_alloc_s"]
    print("ratios, like for like (output pre-allocated vs the warm floor | allocating call vs the "
          "allocating floor):")
    print(f"        GMC stage 2 / numpy = {g2 / fl:.1f} | {ga / fa:.1f} (target <= 5)")
    print(f"        BLUE / numpy = {bk / fl:.1f} | {bl / fa:.1f} (target <= 8; blue() against the warm "
          f"floor: {bl / fl:.1f})")
    print("        against other methods, all allocating their output:")
    print(f"        scipy / GMC = {res['scipy_triangular_s'] / ga:.0f}x, scipy / BLUE = "
          f"{res['scipy_triangular_s'] / bl:.0f}x (target >= 20; scipy's time: the two triangular "
          f"solves over the {res['n'] - res['leaves']:,} non-leaf nodes {res['scipy_solves_s']:.3f} s, the "
          f"products with M over all n {res['scipy_products_s']:.3f} s = {res['scipy_products_s'] / fl:.1f} "
          f"numpy passes)")
    print(f"        PrivTrie / GMC = {res['privtrie_extrapolated_s'] / ga:.0f}x, PrivTrie / BLUE = "
          f"{res['privtrie_extrapolated_s'] / bl:.0f}x (target >= 300; PrivTrie timed on "
          f"{res['privtrie_subtree_n']:,} nodes: {res['privtrie_subtree_s']:.2f} s)")
    print(f"        round / BLUE = {res['round_s'] / bl:.2f} (target <= 3), nonneg / BLUE = {res['nonneg_s'] / bl:.1f} "
          f"(target <= 20; {res['nonneg_iterations']} iterations, KKT residual {res['nonneg_kkt_residual']:.1e})")
    print(f"{'estimate':<14}{'rmse':>10}{'bias':>10}")
    for name, a in res["accuracy"].items():
        print(f"{name:<14}{a['rmse']:>10.2f}{a['bias']:>10.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small trees (for CI / a smoke test)")
    ap.add_argument("--shapes", default="binary,census,random")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", help="override sizes, e.g. binary=21,census=0.2,random=1000000")
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--no-peak", action="store_true", help="skip the fresh-process peak-memory runs")
    ap.add_argument("--peak-child", help=argparse.SUPPRESS)
    ap.add_argument("--with-release", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    mode = "quick" if args.quick else "full"
    if args.sizes:
        for item in args.sizes.split(","):
            key, val = item.split("=")
            SIZES[mode][key.strip()] = float(val) if key.strip() == "census" else int(val)
    if args.peak_child:
        print(json.dumps(peak_child(args.peak_child, mode, args.with_release)))
        return 0
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    peaks = []
    if not args.no_peak:  # fresh processes first, before this one grows
        for shape in shapes:
            cmd = ([sys.executable, os.path.abspath(__file__), "--peak-child", shape]
                   + (["--quick"] if args.quick else []))
            if args.sizes:
                cmd += ["--sizes", args.sizes]
            if shape == "binary":
                cmd.append("--with-release")
            r = subprocess.run(cmd, capture_output=True, text=True, check=True)
            peaks.append(json.loads(r.stdout.strip().splitlines()[-1]))
    warmed = warm_memory(0.25 if args.quick else 6.0)
    print(f"hierdp consistency benchmark ({mode}); memory warm-up {warmed:.1f} s")
    results = []
    for shape in shapes:
        res = run_shape(shape, mode, args.repeat)
        report(res)
        results.append(res)
    for p in peaks:
        line = (f"\npeak RSS ({p['shape']}, n = {p['n']:,}): gmc+nonneg+round+blue chain "
                f"{p['chain_peak_rss_gib']:.2f} GiB")
        if "release_peak_rss_gib" in p:
            line += (f"; full release (discrete Laplace, blue+nonneg+round) {p['release_peak_rss_gib']:.2f} GiB "
                     f"in {p['release_s']:.1f} s, consistent: {p['release_consistent']}")
        print(line)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"mode": mode, "results": results, "peaks": peaks}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
