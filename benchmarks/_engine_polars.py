"""The Polars engine for ``benchmarks/bench_engines.py``: the whole Polars door + release from
a Parquet records folder, and Polars' own plain group-by count of the same records.

Interface (see the issue-32 briefs): ``NAME``, ``release(data_dir, *, bound, seed)``,
``floor(data_dir)``. The records folder has the columns ``unit`` (int64), ``state``,
``county``, ``leaf`` (string codes with leading zeros) and ``cell`` (int), as
``benchmarks/_engine_data.py`` writes it; the public geography (the declared domains) is
its distinct (state, county, leaf) paths, computed once per folder and kept beside it
(``<folder>.geography.parquet``), as a published geography file would be.

Run on its own (a small folder, e.g. 5e6 records)::

    PYTHONPATH=. python benchmarks/_engine_polars.py 5e6 [folder]

prints the time of each and the ratio release / floor, with and without contribution
bounding. Shared machine: the figures are noisy.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

NAME = "polars"
CELLS = 200
LEVELS = ["state", "county", "leaf"]


def _scan(data_dir: str):
    import polars as pl

    return pl.scan_parquet(os.path.join(data_dir, "**", "*.parquet"))


def _geography(data_dir: str):
    """The public paths (state, county, leaf) of the folder, as a pandas DataFrame (cached)."""
    import pandas as pd

    cache = Path(str(Path(data_dir)).rstrip("/") + ".geography.parquet")
    if not cache.exists():
        paths = _scan(data_dir).select(LEVELS).unique().collect(engine="streaming").sort(LEVELS)
        paths.write_parquet(cache)
    return pd.read_parquet(cache)


def release(data_dir: str, *, bound: bool, seed: int) -> None:
    """The Polars door on the records (a LazyFrame: streaming engine) and the release."""
    import hierdp  # noqa: F401  (the .dptree namespace)
    import hierdp.frontends.polars  # noqa: F401

    paths = _geography(data_dir)
    kw = dict(unit="unit", max_contributions=2) if bound else {}
    door = _scan(data_dir).dptree(levels=LEVELS, domains=paths, cells={"cell": list(range(CELLS))}, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        door.release(epsilon=1.0, seed=seed)


def floor(data_dir: str) -> None:
    """Polars' own plain count of the same records to (state, county, leaf, cell), collected
    (streaming): the count the door itself needs (a leaf code repeats under other counties,
    so a group-by on (leaf, cell) alone would not be that count)."""
    import polars as pl

    _scan(data_dir).group_by([*LEVELS, "cell"]).agg(pl.len()).collect(engine="streaming")


def unit_floor(data_dir: str) -> None:
    """Polars' own count of the records by ``unit``: the pass bounding needs besides the count."""
    import polars as pl

    _scan(data_dir).group_by("unit").agg(pl.len()).collect(engine="streaming")


def _make(n: int, folder: Path, parts: int = 8, seed: int = 0) -> None:
    """A folder in the _engine_data layout (used when benchmarks/_engine_data.py is absent):
    50 states x 20 counties x 100 leaves (1e5 leaves), 200 cells, units of 1-4 records."""
    import polars as pl

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-n // parts)
    for p in range(parts):
        m = min(per, n - p * per)
        leaf_id = rng.integers(0, 100_000, m)
        state = leaf_id // 2000 + 1
        county = (leaf_id // 100) % 20 + 1
        tract = leaf_id % 100 + 1
        pl.DataFrame({
            "unit": (p * per + np.arange(m)) // 3 + (rng.random(m) < 0.1),
            "state": pl.Series(state).cast(pl.String).str.zfill(2),
            "county": pl.Series(county).cast(pl.String).str.zfill(3),
            "leaf": pl.Series(tract * 100).cast(pl.String).str.zfill(6),
            "cell": rng.integers(0, CELLS, m),
        }).write_parquet(folder / f"part-{p:03d}.parquet")


def _time(fn, *args, **kwargs) -> float:
    t = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t


if __name__ == "__main__":
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 5_000_000
    folder = Path(sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser(f"~/.cache/hierdp/engines/polars-{n}"))
    try:
        import _engine_data  # type: ignore[import-not-found]  # written by the dasktasks helper

        folder = Path(_engine_data.ensure(n, str(folder)))
    except ImportError:
        if not folder.exists():
            _make(n, folder)
    release(str(folder), bound=False, seed=1)  # warm up: numba kernels, the geography cache
    for bound in (False, True):
        f = min(_time(floor, str(folder)) for _ in range(2))
        r = min(_time(release, str(folder), bound=bound, seed=1) for _ in range(2))
        print(f"polars n={n:.0e} bound={bound}: release {r:.2f} s, floor (group-by to path, cell) {f:.2f} s, "
              f"ratio {r / f:.2f}x")
