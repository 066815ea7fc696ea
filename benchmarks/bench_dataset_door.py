"""Benchmark: counting a Parquet dataset of records to (leaf, cell) out of core.

Generates once (cached, seeded) a synthetic folder of ``--rows`` person records (default
5·10⁷) on a 3-level geography (50 states > 2,000 counties > 100,000 tracts, codes as text
with leading zeros) with a 200-cell histogram (age 0..99 x sex F/M), then times:

* ``duckdb plain`` — DuckDB's own ``GROUP BY`` count of the same files (the floor);
* ``polars plain`` — Polars' streaming ``group_by`` count of the same files;
* ``door`` — :func:`hierdp.dptree` on the folder: domain checks and the count to
  ``(leaf, cell)`` (``door.node_values()``), declared domains.

Each run is a fresh subprocess; peak RSS is its ``ru_maxrss``. Ratios are against the
DuckDB floor measured in the same run. The machine is shared and noisy: read the
figures as indications.

Run: ``PYTHONPATH=. python benchmarks/bench_dataset_door.py [--rows 5e7] [--memory 2GiB]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

N_STATES, N_COUNTIES, N_TRACTS = 50, 2_000, 100_000

GEN = """
import duckdb, sys
out, rows, parts = sys.argv[1], int(float(sys.argv[2])), int(sys.argv[3])
con = duckdb.connect()
con.execute("SET threads=2")
con.execute("SET enable_progress_bar=false")
per = rows // parts
for p in range(parts):
    con.execute(f'''
    COPY (SELECT lpad(CAST(t // 2000 AS VARCHAR), 2, '0') AS state,
                 lpad(CAST(t // 50 AS VARCHAR), 5, '0') AS county,
                 lpad(CAST(t AS VARCHAR), 6, '0') AS tract,
                 CAST(a AS SMALLINT) AS age, CASE WHEN s = 0 THEN 'F' ELSE 'M' END AS sex,
                 i AS person
          FROM (SELECT i, CAST(hash(i) % 100000 AS BIGINT) AS t,
                       CAST(hash(i + 1000000000000) % 100 AS BIGINT) AS a,
                       CAST(hash(i + 2000000000000) % 2 AS BIGINT) AS s
                FROM range({p} * {per}, {p + 1} * {per}) r(i)))
    TO '{out}/part-{p:03d}.parquet' (FORMAT parquet)''')
"""

PLAIN_DUCKDB = """
import duckdb, sys, time, resource
files, memory, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter()
con = duckdb.connect()
con.execute(f"SET memory_limit='{memory}'"); con.execute(f"SET temp_directory='{tmp}'"); con.execute("SET threads=2")
con.execute("SET preserve_insertion_order=false"); con.execute("SET enable_progress_bar=false")
n = con.execute(f"SELECT count(*) FROM (SELECT state, county, tract, age, sex, count(*) AS w "
                f"FROM read_parquet('{files}') GROUP BY ALL)").fetchone()[0]
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, n)
"""

PLAIN_POLARS = """
import polars as pl, sys, time, resource
files = sys.argv[1]
t = time.perf_counter()
out = (pl.scan_parquet(files).group_by(["state", "county", "tract", "age", "sex"]).agg(pl.len().alias("w"))
       .collect(engine="streaming"))
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, out.height)
"""

DOOR = """
import sys, time, resource
t0 = time.perf_counter()
import hierdp
folder, memory = sys.argv[1], sys.argv[2]
states = [f"{s:02d}" for s in range(50)]
counties = {f"{s:02d}": [f"{c:05d}" for c in range(s * 40, s * 40 + 40)] for s in range(50)}
tracts = {f"{c:05d}": [f"{t:06d}" for t in range(c * 50, c * 50 + 50)] for c in range(2000)}
t = time.perf_counter()
door = hierdp.dptree(folder, levels=["state", "county", "tract"],
                     domains={"state": states, "county": counties, "tract": tracts},
                     cells={"age": list(range(100)), "sex": ["F", "M"]}, memory=memory)
t_open = time.perf_counter() - t
values, _ = door.node_values()
t_count = time.perf_counter() - t
cells = int((door.tree.to_internal(values)[-door.tree.n_leaves:] > 0).sum())
assert values.shape == (door.tree.n_nodes, 200), values.shape
print(t_count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, t_open, cells)
"""


def _run(code: str, *args: str, parse: bool = True) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        raise SystemExit(f"benchmark step failed:\n{out.stderr[-3000:]}")
    return [float(x) for x in out.stdout.split()] if parse else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=5e7)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--memory", default="2GiB")
    ap.add_argument("--data", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "hierdp-bench-dataset"))
    ap.add_argument("--only", default="duckdb,polars,door")
    a = ap.parse_args()
    folder = Path(a.data) / f"v2-rows{int(a.rows)}"
    if not (folder / "done").exists():
        folder.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        _run(GEN, str(folder), str(a.rows), str(a.parts), parse=False)
        (folder / "done").write_text("ok")
        print(f"generated {int(a.rows):,} records in {a.parts} parts in {time.perf_counter() - t:.0f} s")
    tmp = Path(a.data) / "spill"
    tmp.mkdir(exist_ok=True)
    files = str(folder / "*.parquet")
    size = sum(p.stat().st_size for p in folder.glob("*.parquet"))
    print(f"{int(a.rows):,} records, {N_TRACTS:,} leaves x 200 cells, {size / 1e9:.2f} GB of Parquet; "
          f"memory limit {a.memory}; machine: {os.cpu_count()} cores (shared: figures are indicative)")
    res: dict[str, list[float]] = {}
    only = a.only.split(",")
    if "duckdb" in only:
        res["duckdb plain GROUP BY"] = _run(PLAIN_DUCKDB, files, a.memory, str(tmp))
    if "polars" in only:
        res["polars streaming group_by"] = _run(PLAIN_POLARS, files)
    if "door" in only:
        res["hierdp.dptree(folder).node_values()"] = _run(DOOR, str(folder), a.memory)
    floor = res.get("duckdb plain GROUP BY")
    for name, (secs, rss, *rest) in res.items():
        ratio = f"  time x{secs / floor[0]:.2f}, RSS x{rss / floor[1]:.2f} vs DuckDB" if floor else ""
        print(f"{name:40s} {secs:7.1f} s  peak RSS {rss / 2**30:5.2f} GiB{ratio}  ({int(rest[-1]):,} non-zero "
              "leaf-cells)")
    if "hierdp.dptree(folder).node_values()" in res:
        print(f"  (of which opening the door, building the 102,051-node tree from declared domains: "
              f"{res['hierdp.dptree(folder).node_values()'][2]:.1f} s)")
    print(json.dumps({k: v[:2] for k, v in res.items()}))


if __name__ == "__main__":
    main()
