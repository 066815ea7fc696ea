"""Histogram releases: ~10⁵ leaves x 200 cells from a synthetic population.

A region (10) > district (100 each) > area (100 each) tree: 101,011 nodes, 100,000
leaves; cells age (100) x sex (2) = 200. Records are drawn with skewed area sizes. For
each route it prints seconds and the tracemalloc peak (MiB above the step's start) per
step, against the user's own ``df.groupby(levels + cells).size()`` of the same records:

* pandas — ``df.dptree(..., cells=...)``: build, count (``true_counts``), full release
  (count + noise + BLUE);
* xarray — ``da.dptree(...)`` on ``counts.to_xarray()`` of that groupby (one dimension
  per level): build, full release;
* Dask (``--dask N``) — N records generated in partitions on a 2-worker LocalCluster,
  ``unit=``/``max_contributions=`` (a shuffle by unit), full release; seconds only (the
  memory is on the workers).

    python benchmarks/bench_cells.py                   # 10⁷ records, pandas + xarray
    python benchmarks/bench_cells.py --records 2e6     # quicker
    python benchmarks/bench_cells.py --dask 5e7 --no-local
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from _machine import warm_memory  # noqa: E402

LEVELS = ["region", "district", "area"]
DOMAINS = {"region": list(range(10)), "district": list(range(100)), "area": list(range(100))}
CELLS = {"age": list(range(100)), "sex": ["F", "M"]}
MiB = 1 << 20


def population(n: int, seed: int = 0, unit_size: int = 3) -> pd.DataFrame:
    """n people: skewed area sizes, ages 0-99, two sexes, a household id per ~unit_size rows."""
    rng = np.random.default_rng(seed)
    w = rng.gamma(0.7, size=100_000)
    leaf = rng.choice(100_000, size=n, p=w / w.sum()).astype(np.int32)
    return pd.DataFrame({
        "region": (leaf // 10_000).astype(np.int16), "district": (leaf // 100 % 100).astype(np.int16),
        "area": (leaf % 100).astype(np.int16),
        "age": np.minimum(rng.exponential(38, size=n), 99).astype(np.int16),
        "sex": pd.Categorical.from_codes(rng.integers(0, 2, size=n, dtype=np.int8), categories=["F", "M"]),
        "hh": (np.arange(n) // unit_size).astype(np.int64)})


def step(label: str, fn, rows: list) -> object:
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rows.append((label, dt, peak / MiB))
    print(f"  {label:<48s} {dt:8.2f} s  {peak / MiB:9.0f} MiB", flush=True)
    return out


def local(n: int) -> None:

    df = population(n)
    input_mib = df.memory_usage(deep=True).sum() / MiB
    print(f"{n:,} records ({input_mib:.0f} MiB in memory); tree 101,011 nodes x 200 cells "
          f"(the int64 count array: {101_011 * 200 * 8 / MiB:.0f} MiB)")
    rows: list = []
    counts = step("pandas groupby(levels + cells).size()  [baseline]",
                  lambda: df.groupby(LEVELS + list(CELLS), observed=True).size(), rows)
    base = rows[-1][1]
    t = step("pandas: df.dptree(..., cells=...)", lambda: df.dptree(LEVELS, DOMAINS, cells=CELLS), rows)
    step("pandas: true counts (n, k)", t.true_counts, rows)
    r = step("pandas: release (count + noise + BLUE)", lambda: t.release(epsilon=1.0, seed=1), rows)
    rel = rows[-1][1]
    da = step("xarray: counts.to_xarray()  [user's step]", lambda: counts.to_xarray(), rows)
    ta = step("xarray: da.dptree(..., cells=...)", lambda: da.dptree(DOMAINS, cells=CELLS), rows)
    ra = step("xarray: release (count + noise + BLUE)", lambda: ta.release(epsilon=1.0, seed=1), rows)
    rel_x = rows[-1][1]
    assert np.array_equal(r.values, ra.values), "the xarray release differs from the pandas one"
    frame = step("result.frame (20.2M rows)", lambda: r.frame, rows)
    del frame
    step("result.to_xarray()", r.to_xarray, rows)
    print(f"  ratio pandas release / groupby: {rel / base:.2f}x; xarray release / groupby: {rel_x / base:.2f}x "
          "(target <= 3x); the pandas and xarray releases are identical")
    peak = max(p for label, _, p in rows if "pandas:" in label)
    print(f"  peak of the pandas steps {peak:.0f} MiB = {peak / (101_011 * 200 * 8 / MiB + input_mib):.2f}x "
          "(count array + input)")


def on_dask(n: int, partitions: int) -> None:
    import dask
    import dask.dataframe as dd
    import distributed

    import hierdp  # noqa: F401

    per = -(-n // partitions)
    ddf = dd.from_map(lambda i: population(min(per, n - i * per), seed=100 + i).assign(
        hh=lambda d, i=i: d["hh"] + i * per), list(range(partitions)))
    print(f"Dask: {n:,} records in {partitions} partitions, generated on the workers; "
          "unit='hh', max_contributions=2")
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                     memory_limit="8GiB", silence_logs=50) as cluster, distributed.Client(cluster):
        rows: list = []
        step("dask groupby(levels + cells).size().compute()  [baseline]",
             lambda: ddf.groupby(LEVELS + list(CELLS), observed=True).size().compute(), rows)
        base = rows[-1][1]
        t = step("dask: ddf.dptree(..., unit, max_contributions)",
                 lambda: ddf.dptree(LEVELS, DOMAINS, cells=CELLS, unit="hh", max_contributions=2), rows)
        r = step("dask: release (shuffle + bound + count + noise + BLUE)", lambda: t.release(epsilon=1.0), rows)
        t2 = step("dask: ddf.dptree(...) without bounding", lambda: ddf.dptree(LEVELS, DOMAINS, cells=CELLS), rows)
        step("dask: release without bounding (count + noise + BLUE)", lambda: t2.release(epsilon=1.0), rows)
        print(f"  ratio bounded release / groupby: {rows[2][1] / base:.2f}x; unbounded: {rows[4][1] / base:.2f}x; "
              f"rows dropped by the bound: {r.ledger.private_notes['rows_dropped_by_contribution_bound']:,} "
              "(private; printed here for the benchmark only)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=float, default=1e7)
    ap.add_argument("--dask", type=float, default=0)
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--no-local", action="store_true")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    warm_memory(2.0)
    if not a.no_local:
        local(int(a.records))
    if a.dask:
        n = int(a.dask)
        on_dask(n, a.partitions or max(4, n // 1_000_000))


if __name__ == "__main__":
    main()
