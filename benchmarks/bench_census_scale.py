"""Records to a released table at census scale, against what a user writes without privacy.

Builds a synthetic census-shaped frame (state > county > tract > block; ~30% of the blocks
empty; labels are census-style code strings, held as categoricals or as plain strings —
what a CSV gives) and prints, per label kind:

* the four ``df.groupby(levels[:k]).size()`` a user writes vs
  ``df.dptree(levels, domains=geo).release(epsilon=1).frame`` (median of 3 interleaved
  runs in one process), and the share of the release spent counting records;
* the peak memory of each (a fresh process each; the frame is built in it first);
* building the public tree from the geography (``build_structure``) vs a pandas groupby
  of the same paths;
* writing the release frame as CSV: pyarrow's writer (``hierdp.io.write_table``) vs
  ``DataFrame.to_csv``;
* the CLI release of a CSV spec vs a plain pandas read + four groupbys + CSV write.

    python benchmarks/bench_census_scale.py --quick          # CI-sized (seconds)
    python benchmarks/bench_census_scale.py --rows 8e6       # the headline size
    python benchmarks/bench_census_scale.py --rows 8e6 --skip-memory --skip-cli
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from _machine import in_fresh_process, warm_memory  # noqa: E402

LEVELS = ["state", "county", "tract", "block"]


# -- the synthetic geography and persons -----------------------------------------------------------

def _rank_within(parent: np.ndarray) -> np.ndarray:
    """Rank (0, 1, ...) of each item among the items with the same parent, in item order."""
    order = np.argsort(parent, kind="stable")
    sp = parent[order]
    start = np.r_[0, np.flatnonzero(sp[1:] != sp[:-1]) + 1]
    rank_sorted = np.arange(sp.size) - np.repeat(start, np.diff(np.r_[start, sp.size]))
    out = np.empty_like(rank_sorted)
    out[order] = rank_sorted
    return out


def make_geography(n_blocks: int, seed: int = 0) -> pd.DataFrame:
    """Public block paths (strings like census codes): 52 states, ~25 tracts per county,
    ~20 blocks per tract. Block codes repeat under every tract, as in the census."""
    rng = np.random.default_rng(seed)
    n_tracts = max(n_blocks // 20, 1)
    n_counties = max(n_tracts // 25, 52)
    county_state = np.r_[np.arange(52), rng.integers(0, 52, n_counties - 52)]
    tract_county = np.r_[np.arange(min(n_counties, n_tracts)),
                         rng.integers(0, n_counties, max(n_tracts - n_counties, 0))]
    block_tract = np.r_[np.arange(n_tracts), rng.integers(0, n_tracts, n_blocks - n_tracts)]
    block_tract.sort()
    county_code = 2 * _rank_within(county_state) + 1
    tract_code = 100 * (_rank_within(tract_county) + 1)
    block_code = 1000 + _rank_within(block_tract)
    tc = tract_county[block_tract]
    cs = county_state[tc]

    def text(fmt_width: int, codes: np.ndarray) -> np.ndarray:
        return np.char.zfill(codes.astype(str), fmt_width).astype(object)

    return pd.DataFrame({"state": text(2, cs + 1), "county": text(3, county_code[tc]),
                         "tract": text(6, tract_code[block_tract]), "block": text(4, block_code)}).astype("str")


def make_persons(geo: pd.DataFrame, n_rows: int, kind: str, seed: int = 1) -> pd.DataFrame:
    """``n_rows`` persons in 70% of the blocks (the others empty); ``kind`` is
    ``"categorical"`` or ``"string"`` level columns."""
    rng = np.random.default_rng(seed)
    nonempty = np.flatnonzero(rng.random(len(geo)) < 0.7)
    block = np.sort(nonempty[rng.integers(0, nonempty.size, n_rows)])
    cols = {}
    for lv in LEVELS:
        codes, uniques = pd.factorize(geo[lv])
        cat = pd.Categorical.from_codes(codes[block], categories=pd.Index(uniques))
        cols[lv] = cat if kind == "categorical" else pd.Series(cat).astype("str").to_numpy()
    df = pd.DataFrame(cols)
    df["age"] = rng.integers(0, 100, n_rows).astype(np.int16)
    return df


# -- the timed operations ------------------------------------------------------------------------

def groupbys(df: pd.DataFrame) -> list[pd.Series]:
    """The four group-by counts a user writes without privacy."""
    return [df.groupby(LEVELS[:k], observed=True).size() for k in range(1, len(LEVELS) + 1)]


def release_frame(df: pd.DataFrame, geo: pd.DataFrame) -> pd.DataFrame:
    import hierdp  # noqa: F401  (the accessor)
    return df.dptree(LEVELS, domains=geo).release(epsilon=1.0).frame


def counting_only(df: pd.DataFrame, structure) -> np.ndarray:
    from hierdp.frontends.counting import count_rows
    return count_rows(structure, df, count=None, unknown="raise")[0]


def _median_interleaved(fns: dict, runs: int = 3) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_release(n_rows: int, n_blocks: int, runs: int) -> None:
    from hierdp.decompositions.declared import build_structure
    geo = make_geography(n_blocks)
    print(f"\n== records -> counts: {n_rows:,} persons, {len(geo):,} blocks (~30% empty), median of {runs} "
          "interleaved runs ==")
    release_frame(make_persons(geo.iloc[:2000], 5000, "categorical"), geo.iloc[:2000])  # load kernels
    structure = build_structure(None, LEVELS, geo)
    for kind in ("categorical", "string"):
        df = make_persons(geo, n_rows, kind)
        t = _median_interleaved({"groupby": lambda: groupbys(df), "release": lambda: release_frame(df, geo),
                                 "count": lambda: counting_only(df, structure)}, runs)
        print(f"{kind:>12}: four groupbys {t['groupby']:7.2f} s | release(...).frame {t['release']:7.2f} s "
              f"({t['release'] / t['groupby']:.2f}x; target <= {0.5 if kind == 'categorical' else 1.0}x) | "
              f"of which counting records {t['count']:.2f} s")


def _hwm_gib() -> float:
    """Peak resident memory of this process (VmHWM: per address space, so a spawned child
    does not inherit its parent's peak the way ``ru_maxrss`` does across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _peak_case(kind: str, what: str, n_rows: int, n_blocks: int, queue) -> None:
    geo = make_geography(n_blocks)
    df = make_persons(geo, n_rows, kind)
    import hierdp  # noqa: F401
    if what == "release":  # load the kernels on a tiny frame first: their memory is not the data's
        release_frame(make_persons(geo.iloc[:2000], 5000, kind), geo.iloc[:2000])
    else:
        groupbys(df.iloc[:5000])
    try:  # reset the peak to the current size: building the frame is not the operation's
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    base = _hwm_gib()
    frame_bytes = df.memory_usage(deep=True).sum() / 2**30
    groupbys(df) if what == "groupby" else release_frame(df, geo)
    peak = _hwm_gib()
    queue.put((peak, base, frame_bytes))


def bench_memory(n_rows: int, n_blocks: int) -> None:
    print(f"\n== peak memory (fresh process each; GiB; {n_rows:,} persons) ==")
    for kind in ("categorical", "string"):
        res = {w: in_fresh_process(_peak_case, kind, w, n_rows, n_blocks) for w in ("groupby", "release")}
        (pg, bg, fb), (pr, br, _) = res["groupby"], res["release"]
        print(f"{kind:>12}: frame {fb:.2f} GiB | process peak: four groupbys {pg:.2f}, release {pr:.2f} "
              f"({pr / pg:.2f}x; target <= 1.5x) | above the frame's process: groupbys {pg - bg:.2f}, "
              f"release {pr - br:.2f}")


def bench_tree(n_blocks: int, runs: int) -> None:
    from hierdp.decompositions.declared import build_structure
    geo = make_geography(n_blocks)
    t = _median_interleaved({"groupby": lambda: geo.groupby(LEVELS, observed=True, sort=False).size(),
                             "build": lambda: build_structure(None, LEVELS, geo)}, runs)
    print(f"\n== tree from the geography ({len(geo):,} block paths) ==\n"
          f"build_structure {t['build']:.2f} s | pandas groupby of the same paths {t['groupby']:.2f} s "
          f"({t['build'] / t['groupby']:.2f}x)")


def bench_csv(n_blocks: int) -> None:
    from hierdp import io
    geo = make_geography(n_blocks)
    df = make_persons(geo, 4 * n_blocks, "categorical")
    frame = release_frame(df, geo)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        io.write_table(frame, Path(d) / "a.csv")
        t_lib = time.perf_counter() - t0
        t0 = time.perf_counter()
        frame.to_csv(Path(d) / "b.csv", index=False)
        t_pd = time.perf_counter() - t0
        size = (Path(d) / "a.csv").stat().st_size / 2**20
    print(f"\n== CSV of the release frame ({len(frame):,} rows, {size:.0f} MiB) ==\n"
          f"hierdp.io.write_table {t_lib:.2f} s | DataFrame.to_csv {t_pd:.2f} s "
          f"({t_pd / max(t_lib, 1e-9):.1f}x slower)")


def _plain_pandas(csv: Path, out: Path) -> None:
    df = pd.read_csv(csv, dtype={lv: "str" for lv in LEVELS})
    tables = groupbys(df)
    pd.concat([t.reset_index() for t in tables]).to_csv(out, index=False)


def bench_cli(n_rows: int, n_blocks: int) -> None:
    geo = make_geography(n_blocks)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        make_persons(geo, n_rows, "string").to_csv(d / "persons.csv", index=False)
        geo.to_csv(d / "geo.csv", index=False)
        spec = d / "spec.yaml"
        spec.write_text(textwrap.dedent(f"""\
            hierdp: 1
            source:
              path: {d / 'persons.csv'}
            hierarchy:
              levels: [{', '.join('{name: ' + lv + '}' for lv in LEVELS)}]
              paths: {{file: {d / 'geo.csv'}}}
            privacy:
              epsilon: 1.0
            output:
              path: {d / 'release.csv'}
            """))
        cmd = [sys.executable, "-m", "hierdp", "release", str(spec)]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        t_cli = time.perf_counter() - t0
        if proc.returncode != 0:
            print("CLI failed:", proc.stderr.strip().splitlines()[-1:] if proc.stderr else proc.stdout)
            return
        plain = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                 f"import bench_census_scale as b, pathlib; "
                 f"b._plain_pandas(pathlib.Path({str(d / 'persons.csv')!r}), pathlib.Path({str(d / 'plain.csv')!r}))")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", plain], check=True, env=env)
        t_plain = time.perf_counter() - t0
    print(f"\n== CLI ({n_rows:,} rows of CSV, whole processes) ==\n"
          f"hierdp release spec.yaml {t_cli:.2f} s | pandas read + four groupbys + write {t_plain:.2f} s "
          f"({t_cli / t_plain:.2f}x; target <= 1.5x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=float, default=8e6, help="persons (default 8e6)")
    ap.add_argument("--blocks", type=float, default=None, help="blocks (default rows / 20 * 1.4)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="CI-sized: 200k persons")
    for part in ("release", "memory", "tree", "csv", "cli"):
        ap.add_argument(f"--skip-{part}", action="store_true")
    a = ap.parse_args()
    n_rows = int(2e5 if a.quick else a.rows)
    n_blocks = int(a.blocks if a.blocks else n_rows / 20 * 1.4)
    warnings.simplefilter("ignore")
    warm_memory(1.0 if a.quick else 6.0)
    print(f"machine: {os.cpu_count()} cores, numpy {np.__version__}, pandas {pd.__version__}")
    if not a.skip_release:
        bench_release(n_rows, n_blocks, a.runs)
    if not a.skip_memory:
        bench_memory(n_rows, n_blocks)
    if not a.skip_tree:
        bench_tree(n_blocks if not a.quick else n_blocks, a.runs)
    if not a.skip_csv:
        bench_csv(n_blocks)
    if not a.skip_cli:
        bench_cli(n_rows, n_blocks)


if __name__ == "__main__":
    main()
