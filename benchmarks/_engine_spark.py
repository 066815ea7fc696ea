"""The Spark engine for ``benchmarks/bench_engines.py``: the whole Spark door + release from a
Parquet records folder, and Spark's own plain group-by count of the same records.

Interface (see the issue-32 briefs): ``NAME``, ``release(data_dir, *, bound, seed)``,
``floor(data_dir)``. The records folder has the columns ``unit`` (int64), ``state``,
``county``, ``leaf`` (string codes with leading zeros) and ``cell`` (int), as
``benchmarks/_engine_data.py`` writes it. The public structure is its declared domains
(``_engine_data.domains()``) when that module is present, else the folder's distinct
paths (computed once and kept beside it, as a published geography file would be).
Both run a local[2] session bound to 127.0.0.1 (its start-up is part of both timings).

Run on its own (a small folder in the same layout, made if missing)::

    PYTHONPATH=. python benchmarks/_engine_spark.py 2e6 [folder]

prints the time of each and the ratio release / floor, with and without contribution
bounding. The machine is shared: the figures are noisy.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

NAME = "spark"
CELLS = 200
LEVELS = ["state", "county", "leaf"]


def _session() -> Any:
    from hierdp.frontends.spark import local_session

    return local_session("local[2]", shuffle_partitions=8,
                         conf={"spark.driver.memory": "2g", "spark.sql.execution.arrow.maxRecordsPerBatch": "100000"})


def _domains(data_dir: str, spark: Any) -> Any:
    try:
        sys.path.insert(0, str(Path(__file__).parent))
        import _engine_data  # type: ignore[import-not-found]

        return _engine_data.domains()
    except ImportError:
        import pandas as pd

        cache = Path(str(Path(data_dir)).rstrip("/") + ".geography.parquet")
        if not cache.exists():
            spark.read.parquet(data_dir).select(*LEVELS).distinct().toPandas().sort_values(LEVELS).to_parquet(cache)
        return pd.read_parquet(cache)


def release(data_dir: str, *, bound: bool, seed: int) -> None:
    """The Spark door on the records (checks, bounding and counting on the executors) and
    the release on the driver."""
    import hierdp

    spark = _session()
    kw = dict(unit="unit", max_contributions=2) if bound else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        door = hierdp.dptree(spark.read.parquet(data_dir), levels=LEVELS, domains=_domains(data_dir, spark),
                             cells={"cell": list(range(CELLS))}, **kw)
        door.release(epsilon=1.0, seed=seed)


def floor(data_dir: str) -> None:
    """Spark's own plain count of the same records to (state, county, leaf, cell), collected:
    the count the door itself needs."""
    spark = _session()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spark.read.parquet(data_dir).groupBy(*LEVELS, "cell").count().toPandas()


def unit_floor(data_dir: str) -> None:
    """Spark's own count of the records by ``unit`` (run to a no-op sink, not collected): the
    pass bounding needs besides the count."""
    spark = _session()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spark.read.parquet(data_dir).groupBy("unit").count().write.format("noop").mode("overwrite").save()


def _make(n: int, folder: Path, parts: int = 8, seed: int = 0) -> None:
    """A folder in the _engine_data layout: 50 states x 20 counties x 100 leaves (1e5
    leaves), 200 cells (Zipf-like), units of ~2 records."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-n // parts)
    cell_p = 1.0 / np.arange(1, CELLS + 1) ** 1.2
    for p in range(parts):
        m = min(per, n - p * per)
        s = rng.integers(1, 51, m)
        c = rng.integers(1, 21, m)
        lf = rng.integers(1, 101, m)
        state = pd.Series(s).astype(str).str.zfill(2)
        county = state + pd.Series(c).astype(str).str.zfill(3)
        leaf = county + pd.Series(lf).astype(str).str.zfill(6)
        pd.DataFrame({"unit": rng.integers(0, max(n // 2, 1), m), "state": state, "county": county, "leaf": leaf,
                      "cell": rng.choice(CELLS, m, p=cell_p / cell_p.sum())}).to_parquet(
            folder / f"part-{p:05d}.parquet", index=False)
    (folder / "_SUCCESS").write_text("")


def _timed(fn: Any, *args: Any, **kw: Any) -> float:
    t = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t


if __name__ == "__main__":  # one process: the session is started once, by the first timing
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 2_000_000
    folder = Path(sys.argv[2]) if len(sys.argv) > 2 else Path.home() / ".cache" / "hierdp" / "engines" / f"spark-{n}"
    if not (folder / "_SUCCESS").exists():
        _make(n, folder)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _timed(floor, str(folder))  # warm-up: the session, the JVM's first queries, the Python workers
    base = _timed(floor, str(folder))
    plain = _timed(release, str(folder), bound=False, seed=1)
    bounded = _timed(release, str(folder), bound=True, seed=1)
    print(f"{n:,} records, {folder}\n  Spark groupBy(leaf, cell).count(): {base:.1f} s\n"
          f"  release without bounding: {plain:.1f} s ({plain / base:.2f}x)\n"
          f"  release with bounding (c=2): {bounded:.1f} s ({bounded / base:.2f}x)\n"
          "  (shared machine: noisy figures)")
