"""Random-kill campaign of the out-of-core release through the front door (issue 50).

A spec release into a Parquet dataset (``hierdp release SPEC -o DIR/``, records counted by the
DuckDB door, the subtree tasks on 2 threads) is SIGKILLed, then continued the way its message
says (``--resume``; a run killed before its work folder held a release is started again
without it), until it completes; the dataset's values must equal those of an uninterrupted run
with the same seed, every time, with no manual clean-up. Two kinds of kill:

* **at checkpoints**: the library's crash-test hook (``HIERDP_TEST_KILL_AT_CHECKPOINT=N``)
  SIGKILLs the process at its N-th checkpoint (between two durable writes), N spread over the
  whole run, also during the resumed run;
* **at random times**: ``kill -9`` after a uniform random delay within the uninterrupted run's
  wall time (so also while counting, writing a part or renaming).

    python benchmarks/kill_campaign.py --checkpoints 40 --random 40

Prints one line per kill and a summary; exits 1 if any run ended elsewhere than in the
reference values.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
KILL_ENV = "HIERDP_TEST_KILL_AT_CHECKPOINT"

SPEC = """\
hierdp: 1
source: {{path: '{records}', format: parquet, engine: duckdb}}
hierarchy:
  paths: {{file: '{geo}'}}
  levels: [{{name: state}}, {{name: county}}, {{name: tract}}]
cells:
  - {{name: sex, domain: [f, m]}}
privacy: {{epsilon: 2.0}}
postprocess: [blue, {{name: nonneg, params: {{method: topdown}}}}, {{name: round, params: {{method: topdown}}}}]
execution:
  split: {{level: county, memory: 64MiB, task_memory: 2000}}
  workers: 2
  workdir: '{work}'
"""


def make_inputs(folder: Path, n_rows: int) -> Path:
    """Records with codes that keep their leading zeros, in three Parquet parts, and the public
    list of (state, county, tract), some tracts empty."""
    rng = np.random.default_rng(50)
    geo = pd.DataFrame([(f"{s:02d}", f"{s:02d}{c:03d}", f"{s:02d}{c:03d}{t:04d}") for s in range(1, 4)
                        for c in range(1, 9) for t in range(1, 7)], columns=["state", "county", "tract"])
    geo.to_csv(folder / "geo.csv", index=False)
    pick = rng.integers(0, len(geo) - 10, n_rows)  # the last tracts stay empty
    rec = geo.iloc[pick].reset_index(drop=True)
    rec["sex"] = rng.choice(["f", "m"], n_rows)
    (folder / "records").mkdir()
    for i, rows in enumerate(np.array_split(np.arange(n_rows), 3)):
        rec.iloc[rows].to_parquet(folder / "records" / f"part-{i}.parquet", index=False)
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.format(records=folder / "records", geo=folder / "geo.csv", work=folder / "work"),
                    encoding="utf-8")
    return spec


def _cmd(spec: Path, out: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "hierdp", "release", str(spec), "-o", f"{out}/", "--seed", "7", "-q",
            *(["--resume"] if resume else [])]


def _env(kill_at: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != KILL_ENV}
    env["PYTHONPATH"] = str(ROOT)
    if kill_at is not None:
        env[KILL_ENV] = str(kill_at)
    return env


def values(out: Path) -> pd.DataFrame:
    """The dataset's rows, sorted: what a reader gets (the parts' order and metadata aside)."""
    if not (out / "_SUCCESS").exists():
        raise AssertionError(f"{out} has no _SUCCESS")
    frame = pd.read_parquet(out)
    keys = [c for c in frame.columns if c != "estimate"]
    return frame.sort_values(keys, na_position="first").reset_index(drop=True)


def finish(spec: Path, out: Path, kill_at: int | None = None) -> tuple[int, list[str]]:
    """Continue as the messages say until the release completes: ``--resume``, or, when the work
    folder holds no release yet, the same command without it. Returns runs and what they said."""
    said: list[str] = []
    for attempt in range(6):
        for resume in (True, False):
            proc = subprocess.run(_cmd(spec, out, resume), env=_env(kill_at if attempt == 0 else None),
                                  capture_output=True, text=True, timeout=600)
            said.append(f"rc={proc.returncode} {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
            if proc.returncode == 0:
                return attempt + 1, said
            if proc.returncode == -signal.SIGKILL:
                break  # killed again (the resumed run's checkpoint): once more
            if "run without resume" not in proc.stderr and "no release to resume" not in proc.stderr:
                raise AssertionError(f"the resume failed: {proc.stderr.strip()}")
    raise AssertionError("did not complete: " + " | ".join(said))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", type=int, default=40, help="kills at checkpoints (default 40)")
    ap.add_argument("--random", type=int, default=40, help="kills at random times (default 40)")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="hierdp-kill-"))
    try:
        spec = make_inputs(base, args.rows)
        t0 = time.perf_counter()
        ref_out = base / "ref"
        proc = subprocess.run(_cmd(spec, ref_out, False), env=_env(None), capture_output=True, text=True,
                              timeout=600)
        if proc.returncode:
            raise SystemExit(f"the uninterrupted run failed: {proc.stderr}")
        wall = time.perf_counter() - t0
        ref = values(ref_out)
        shutil.rmtree(ref_out)
        shutil.rmtree(base / "work", ignore_errors=True)
        # how many checkpoints an uninterrupted run passes: kill far beyond the end and count none
        n_points = 0
        for n in (400, 200, 100, 60):
            proc = subprocess.run(_cmd(spec, base / "probe", False), env=_env(n), capture_output=True, text=True,
                                  timeout=600)
            shutil.rmtree(base / "probe", ignore_errors=True)
            shutil.rmtree(base / "work", ignore_errors=True)
            if proc.returncode == -signal.SIGKILL:
                n_points = n
                break
        top = max(n_points, 60) if n_points else 60
        print(f"reference: {len(ref):,} rows in {wall:.1f} s; checkpoints probed up to {top}", flush=True)
        bad = 0
        kills = {"checkpoint": 0, "random": 0}
        want = {"checkpoint": args.checkpoints, "random": args.random}
        i = 0
        # until each kind has its count of runs that were really killed (a random delay past the
        # run's end kills nothing: that case is checked all the same but not counted)
        while any(kills[k] < want[k] for k in kills) and i < 4 * (args.checkpoints + args.random):
            kind = "checkpoint" if kills["checkpoint"] < want["checkpoint"] else "random"
            at: float = rnd.randint(1, top) if kind == "checkpoint" else rnd.uniform(0.05, 0.9 * wall)
            out = base / f"out{i}"
            if kind == "checkpoint":
                proc = subprocess.run(_cmd(spec, out, False), env=_env(int(at)), capture_output=True, text=True,
                                      timeout=600)
                killed = proc.returncode == -signal.SIGKILL
            else:
                p = subprocess.Popen(_cmd(spec, out, False), env=_env(None), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
                time.sleep(at)
                killed = p.poll() is None
                if killed:
                    p.send_signal(signal.SIGKILL)
                p.wait()
            kills[kind] += killed
            # a second kill during the resume, at a checkpoint, for every third case
            runs, said = finish(spec, out, kill_at=rnd.randint(1, 30) if i % 3 == 0 else None)
            try:
                got = values(out)
                same = got.equals(ref)
            except AssertionError as exc:
                same, got = False, str(exc)
            bad += not same
            print(f"{i + 1:3d} {kind:10s} at {at:8.2f} killed={killed!s:5s} runs to finish={runs} "
                  f"{'same values' if same else 'DIFFERENT: ' + ' | '.join(said)}", flush=True)
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(base / "work", ignore_errors=True)
            i += 1
        print(f"{i - bad} of {i} releases ended in the uninterrupted values; killed: {kills['checkpoint']} at "
              f"checkpoints, {kills['random']} at random times (the rest finished before their kill)")
        bad += sum(kills[k] < want[k] for k in kills)
        return 1 if bad else 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
