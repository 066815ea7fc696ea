"""Engine overhead: a release read from a records folder on each engine, against the same
engine's own plain group-by count of the same records (issue 32 item 8).

The records: ``benchmarks/_engine_data.py`` (5·10⁷ by default; 10⁵ leaves under 50 states and
1,000 counties, 200 cells, string geography codes with leading zeros, a person id ``unit``;
Parquet parts of ~5·10⁶ rows; made once, seeded, cached). For each engine, with and without
contribution bounding (``unit``, ``max_contributions=2``):

* **release**: the whole door and release on that engine from the folder — read, domain
  checks, (bounding,) the count to (leaf, cell), then hierdp's release (ε = 1, discrete
  Laplace, BLUE; seeded) — ``hierdp.dptree(...).release(...)``;
* **floor**: the engine's own plain group-by count of the same records to their (state,
  county, leaf, cell) — the count the release itself needs (a leaf code repeats under
  other counties, so a group-by on (leaf, cell) alone would not be that count) —
  collected and written nowhere;
* **unit floor**: the engine's own group-by count of the same records by ``unit``: the
  second pass over every record that bounding needs (each unit's rows must meet), so a
  bounded release cannot beat floor + unit floor (printed as ``floor+unit``);
* **tree alone** (once, in pandas): hierdp's release of the same tree and cells from no
  records (the public structure, the noise on every node-cell, BLUE): the work every door
  adds after the count, whatever the engine.

Each run is a fresh subprocess: its wall time (imports and, for Dask, the cluster's start
excluded: both sides pay them) and the **driver's** peak RSS (for Dask the client process;
the two worker processes' peaks are printed beside it). The ratio release / floor is the
engine overhead; the targets (issue 32): Spark and Dask ≤ 1.5×, Polars ≤ 1.0×. A release
cannot cost less than floor + tree alone on one core (the count and the tree's work are
both needed); the last column prints that bound.

Engines: ``pandas`` and ``dask`` (a 2-process LocalCluster, one thread each) here;
``polars`` and ``spark`` through ``benchmarks/_engine_polars.py`` / ``_engine_spark.py``
when those modules and their packages are importable (each exposes ``NAME``,
``release(data_dir, *, bound, seed)`` and ``floor(data_dir)``).

    PYTHONPATH=. python benchmarks/bench_engines.py                       # 5e7 records (long)
    PYTHONPATH=. python benchmarks/bench_engines.py --records 5e6         # ~10 min on 2 shared cores
    PYTHONPATH=. python benchmarks/bench_engines.py --records 1e5 --engines pandas   # a smoke run

Figures from a shared, noisy machine: compare ratios within one run, not across runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import _engine_data as data  # noqa: E402

BOUND = 2  # rows kept per unit when bounding
EPSILON = 1.0


def _door_args(bound: bool) -> dict[str, Any]:
    args: dict[str, Any] = dict(levels=data.LEVELS, domains=data.domains(), cells={"cell": list(range(data.CELLS))})
    if bound:
        args.update(unit="unit", max_contributions=BOUND)
    return args


def _release(door: Any, seed: int) -> Any:
    import hierdp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return door.release(epsilon=EPSILON, seed=seed)


# ---------------------------------------------------------------------------- the engines here
class _Pandas:
    NAME = "pandas"

    @staticmethod
    def release(data_dir: str, *, bound: bool, seed: int) -> None:
        import pandas as pd

        import hierdp

        cols = ["state", "county", "leaf", "cell"] + (["unit"] if bound else [])
        df = pd.read_parquet(data_dir, columns=cols)
        _release(hierdp.dptree(df, **_door_args(bound)), seed)

    @staticmethod
    def floor(data_dir: str) -> None:
        import pandas as pd

        df = pd.read_parquet(data_dir, columns=["state", "county", "leaf", "cell"])
        df.groupby(["state", "county", "leaf", "cell"], sort=False, observed=True).size()

    @staticmethod
    def unit_floor(data_dir: str) -> None:
        import pandas as pd

        pd.read_parquet(data_dir, columns=["unit"]).groupby("unit", sort=False).size()

    @staticmethod
    def tree(seed: int) -> None:
        import pandas as pd

        import hierdp

        empty = pd.DataFrame({"state": pd.Series(dtype=object), "county": pd.Series(dtype=object),
                              "leaf": pd.Series(dtype=object), "cell": pd.Series(dtype=np.int64)})
        _release(hierdp.dptree(empty, **_door_args(False)), seed)


class _Dask:
    NAME = "dask"

    @staticmethod
    def setup() -> Any:
        import dask
        import distributed

        dask.config.set({"distributed.worker.multiprocessing-method": "fork"})
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=50)
        return cluster, distributed.Client(cluster)

    @staticmethod
    def release(data_dir: str, *, bound: bool, seed: int) -> None:
        import dask.dataframe as dd

        import hierdp

        cols = ["state", "county", "leaf", "cell"] + (["unit"] if bound else [])
        _release(hierdp.dptree(dd.read_parquet(data_dir, columns=cols), **_door_args(bound)), seed)

    @staticmethod
    def floor(data_dir: str) -> None:
        import dask.dataframe as dd

        dd.read_parquet(data_dir, columns=["state", "county", "leaf", "cell"]) \
            .groupby(["state", "county", "leaf", "cell"]).size().compute()

    @staticmethod
    def unit_floor(data_dir: str) -> None:
        import dask.dataframe as dd

        dd.read_parquet(data_dir, columns=["unit"]).groupby("unit").size().count().compute()  # not collected


def _engine(name: str) -> Any:
    if name == "pandas":
        return _Pandas
    if name == "dask":
        return _Dask
    return importlib.import_module(f"_engine_{name}")


def available(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The engines that can run here, and why the others cannot."""
    ok, why = [], {}
    for name in names:
        try:
            if name == "dask":
                import dask.dataframe  # noqa: F401
                import distributed  # noqa: F401
            elif name != "pandas":
                _engine(name)
            ok.append(name)
        except ImportError as exc:
            why[name] = f"{type(exc).__name__}: {exc}"
    return ok, why


# ---------------------------------------------------------------------------- one run, in a child
def _child(engine: str, what: str, data_dir: str, seed: int) -> dict[str, Any]:
    eng = _engine(engine)
    setup = getattr(eng, "setup", None)
    held = setup() if setup is not None else None
    import hierdp  # noqa: F401  (imports outside the timing: both sides pay them)

    t0 = time.perf_counter()
    if what == "floor":
        eng.floor(data_dir)
    elif what == "unit_floor":
        eng.unit_floor(data_dir)
    elif what == "tree":
        eng.tree(seed)
    else:
        eng.release(data_dir, bound=what == "bound", seed=seed)
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {"seconds": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if held is not None:
        cluster, client = held
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        out["workers_rss"] = sorted(peaks.values())
        client.close()
        cluster.close()
    return out


def run_child(engine: str, what: str, data_dir: str, seed: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine, what, data_dir, "--seed", str(seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _warm_kernels() -> None:
    """One small release of the same shape, so no timed run compiles a kernel."""
    import numpy as np

    import hierdp

    t = hierdp.Tree.complete(fanout=4, height=3)
    vals = t.aggregate(np.ones((t.n_leaves, data.CELLS), np.int64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        hierdp.release(t, vals, epsilon=1.0, seed=0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=float, default=5e7, help="records in the folder (default 5e7)")
    ap.add_argument("--engines", default="pandas,dask,polars,spark", help="comma-separated")
    ap.add_argument("--data", default=None, help="the records folder (default: the cache)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "WHAT", "DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        engine, what, data_dir = a.child
        print(json.dumps(_child(engine, what, data_dir, a.seed)))
        return
    n = int(a.records)
    t0 = time.perf_counter()
    folder = data.ensure(n, a.data)
    print(f"records: {n:,} in {folder} ({time.perf_counter() - t0:.1f} s to find or make); "
          f"{data.N_LEAVES:,} leaves x {data.CELLS} cells; bound = {BOUND} rows per unit")
    _warm_kernels()
    names, missing = available([s.strip() for s in a.engines.split(",") if s.strip()])
    for name, why in missing.items():
        print(f"  {name}: skipped ({why})")
    print("machine: shared and noisy (2 cores); each figure is one fresh process: compare ratios within a run\n")
    tree = run_child("pandas", "tree", folder, a.seed, a.timeout)
    tree_s = tree.get("seconds", float("nan"))
    print(f"tree alone (hierdp's release of the same tree and cells, no records): {tree_s:.2f} s, "
          f"{tree.get('rss', 0) / 2**20:,.0f} MiB peak\n")
    print(f"{'engine':8} {'run':16} {'seconds':>9} {'driver MiB':>11} {'x floor (time)':>15} {'x floor (RSS)':>14}"
          f" {'bound':>11}  workers MiB")
    for name in names:
        floor = run_child(name, "floor", folder, a.seed, a.timeout)
        unit = run_child(name, "unit_floor", folder, a.seed, a.timeout)
        rows = [("floor (group-by)", floor), ("unit floor", unit)]
        for what, label in (("plain", "release"), ("bound", f"release, c={BOUND}")):
            rows.append((label, run_child(name, what, folder, a.seed, a.timeout)))
        for label, r in rows:
            if "error" in r:
                print(f"{name:8} {label:16} failed: {r['error']}")
                continue
            ok = "error" not in floor
            rt = f"{r['seconds'] / floor['seconds']:.2f}x" if ok else "-"
            rr = f"{r['rss'] / floor['rss']:.2f}x" if ok else "-"
            bound = ""
            if ok and label.startswith("release"):
                extra = unit.get("seconds", float("nan")) if "c=" in label else tree_s
                bound = f"{(floor['seconds'] + extra) / floor['seconds']:.2f}x"
            workers = " / ".join(f"{w / 2**20:,.0f}" for w in r.get("workers_rss", []))
            print(f"{name:8} {label:16} {r['seconds']:9.2f} {r['rss'] / 2**20:11,.0f} {rt:>15} {rr:>14} {bound:>11}"
                  f"  {workers}")
        sys.stdout.flush()
    print("\nbound: what the release cannot beat on one core: floor + tree alone; with c, floor + unit floor")
    print("targets (issue 32): release <= 1.5x the floor on Spark and Dask, <= 1.0x on Polars")


if __name__ == "__main__":
    main()
