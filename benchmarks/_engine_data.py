"""The records folder of the engines benchmark (``benchmarks/bench_engines.py``, issue 32 item 8).

``ensure(n_records, path=None) -> path`` makes (once, cached, seeded, in chunks) a folder of
Parquet parts of about 5·10⁶ rows each, with the columns

* ``unit`` (int64): a person id; ids are drawn uniformly from ``n_records // 2`` values, so
  a unit has ~2 rows (Poisson) and about a third of the rows exceed a bound of 2 per unit;
* ``state``, ``county``, ``leaf`` (strings with leading zeros): ``"07"``, ``"07013"``,
  ``"07013000042"`` — 50 states × 20 counties × 100 leaves = 10⁵ leaves, each code
  extending its parent's;
* ``cell`` (int64): one of 200 cells, skewed (most records in a few dozen cells, as in
  a census histogram).

Leaves are drawn with a heavy-tailed weight (log-normal), so leaf populations vary over
orders of magnitude and some leaves are empty at small ``n_records``. The public
structure (declared domains) is :func:`domains`; the cells are ``range(CELLS)``.

The folder is ``~/.cache/hierdp/engines/records-<n>-v1/`` by default; it is complete when
its ``_SUCCESS`` file exists (parts are written under hidden names and renamed), so an
interrupted generation is finished on the next call.

    PYTHONPATH=. python benchmarks/_engine_data.py 5000000    # make (or find) the folder
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

N_STATES, COUNTIES, LEAVES, CELLS = 50, 20, 100, 200
N_LEAVES = N_STATES * COUNTIES * LEAVES
CHUNK = 5_000_000
SEED = 20260
LEVELS = ["state", "county", "leaf"]
_VERSION = "v1"


def codes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The state, county and leaf code of every leaf (leaf order), as numpy strings."""
    s = np.repeat(np.arange(1, N_STATES + 1), COUNTIES * LEAVES)
    c = np.tile(np.repeat(np.arange(1, COUNTIES + 1), LEAVES), N_STATES)
    leaf = np.tile(np.arange(1, LEAVES + 1), N_STATES * COUNTIES)
    state = np.char.zfill(s.astype(str), 2)
    county = np.char.add(state, np.char.zfill(c.astype(str), 3))
    return state, county, np.char.add(county, np.char.zfill(leaf.astype(str), 6))


def domains() -> dict[str, object]:
    """The declared (public) domains: states, counties per state, leaves per county."""
    state, county, leaf = codes()
    st = list(dict.fromkeys(state.tolist()))
    by_state: dict[str, list[str]] = {}
    for s_, c_ in zip(state[::LEAVES].tolist(), county[::LEAVES].tolist()):
        by_state.setdefault(s_, []).append(c_)
    lv = leaf.reshape(-1, LEAVES)
    by_county = {c_: lv[i].tolist() for i, c_ in enumerate(county[::LEAVES].tolist())}
    return {"state": st, "county": by_state, "leaf": by_county}


def default_path(n_records: int) -> Path:
    return Path.home() / ".cache" / "hierdp" / "engines" / f"records-{int(n_records)}-{_VERSION}"


def _weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([SEED, 0])
    leaf_w = rng.lognormal(0.0, 1.5, N_LEAVES)
    cell_w = 1.0 / np.arange(1, CELLS + 1) ** 1.2  # Zipf-like: most records in a few dozen cells
    cell_w = cell_w[rng.permutation(CELLS)]
    return leaf_w / leaf_w.sum(), cell_w / cell_w.sum()


def _chunk(i: int, rows: int, n_units: int, leaf_p: np.ndarray, cell_p: np.ndarray, tables: tuple) -> object:
    import pyarrow as pa

    rng = np.random.default_rng([SEED, 1, i])
    leaf = rng.choice(N_LEAVES, size=rows, p=leaf_p).astype(np.int32)
    cell = rng.choice(CELLS, size=rows, p=cell_p).astype(np.int64)
    unit = rng.integers(0, n_units, size=rows, dtype=np.int64)
    state_d, county_d, leaf_d = tables
    cols = {"unit": pa.array(unit)}
    for name, dic, idx in (("state", state_d, leaf // (COUNTIES * LEAVES)), ("county", county_d, leaf // LEAVES),
                           ("leaf", leaf_d, leaf)):
        cols[name] = pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32)), dic).cast(pa.string())
    cols["cell"] = pa.array(cell)
    return pa.table(cols)


def ensure(n_records: int, path: str | os.PathLike[str] | None = None) -> str:
    """The records folder of ``n_records`` rows (made once; seeded, so the same on every
    machine); returns its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = int(n_records)
    if n < 1:
        raise ValueError(f"n_records must be positive, got {n_records!r}")
    folder = Path(path) if path is not None else default_path(n)
    if (folder / "_SUCCESS").exists():
        return str(folder)
    folder.mkdir(parents=True, exist_ok=True)
    leaf_p, cell_p = _weights()
    state, county, leaf = codes()
    tables = (pa.array(state[::COUNTIES * LEAVES].tolist()), pa.array(county[::LEAVES].tolist()),
              pa.array(leaf.tolist()))
    n_units = max(n // 2, 1)
    n_chunks = -(-n // CHUNK)
    for i in range(n_chunks):
        name = folder / f"part-{i:05d}.parquet"
        if name.exists():
            continue
        rows = min(CHUNK, n - i * CHUNK)
        tmp = folder / f".{name.name}.tmp"
        pq.write_table(_chunk(i, rows, n_units, leaf_p, cell_p, tables), tmp)
        os.replace(tmp, name)
    (folder / "_SUCCESS").write_text(f"{n} records in {n_chunks} parts\n")
    return str(folder)


if __name__ == "__main__":
    print(ensure(int(float(sys.argv[1])) if len(sys.argv) > 1 else 50_000_000))
