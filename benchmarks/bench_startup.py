"""First-run cost: the demo release on a cold kernel cache against a warm one, and `import hierdp`.

    python benchmarks/bench_startup.py                 # this interpreter, a fresh HIERDP_CACHE_DIR
    python benchmarks/bench_startup.py --wheel         # build the wheel, install it into a fresh venv
    python benchmarks/bench_startup.py --hierdp /path/to/venv/bin/hierdp   # an existing install

Each run is a subprocess `hierdp release demo -o out.csv -q` in an empty folder, with
HIERDP_CACHE_DIR pointing at a new empty folder (so numba compiles everything: the state
of a fresh install), then the same command again (warm cache, best of --repeat). Prints
seconds, the ratio cold / warm and the target (cold <= 2.5 x warm), then the time of
`import hierdp` (best of --repeat) and which heavy modules it pulls in.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 2.5
HEAVY = ("numba", "scipy.optimize", "scipy.stats", "matplotlib", "pyarrow", "xarray", "cryptography", "tqdm",
         "jsonschema", "pandas", "yaml", "pluggy")


CPU: dict[str, float] = {}  # CPU seconds (user + sys) of the last run, less sensitive to a busy machine


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    c0, t0 = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    CPU["last"] = _cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return dt, proc


def _wheel_install(work: Path) -> tuple[Path, Path]:
    """Build the wheel and install it (not editable) into a fresh venv that sees this
    interpreter's packages for the dependencies; returns (python, hierdp script)."""
    dist = work / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "-o", str(dist), str(ROOT)], check=True,
                   capture_output=True)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    wheel = next(dist.glob("hierdp-*.whl"))
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True)
    return py, venv / "bin" / "hierdp"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", action="store_true", help="build and install the wheel into a fresh venv")
    ap.add_argument("--hierdp", metavar="SCRIPT", help="an installed hierdp script to measure")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs and import timings (best is kept)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hierdp-bench-startup-"))
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
        env["HIERDP_CACHE_DIR"] = str(work / "cache")
        if args.wheel:
            py, script = _wheel_install(work)
            env.pop("PYTHONPATH", None)
            cmd, python = [str(script)], str(py)
            where = f"wheel in a fresh venv ({py.parent.parent})"
        elif args.hierdp:
            cmd = [args.hierdp]
            python = str(Path(args.hierdp).with_name("python"))
            where = args.hierdp
        else:
            env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
            cmd, python = [sys.executable, "-m", "hierdp"], sys.executable
            where = f"checkout {ROOT}"
        folder = work / "run"
        folder.mkdir()
        release = [*cmd, "release", "demo", "-o", "out.csv", "-q"]
        cold, proc = _run(release, env, folder)
        cold_cpu = CPU["last"]
        warms = []
        for _ in range(args.repeat):
            warms.append((_run(release, env, folder)[0], CPU["last"]))
        warm, warm_cpu = min(warms)
        ratio = cold / warm
        print(f"hierdp release demo ({where}; cache {env['HIERDP_CACHE_DIR']})")
        print(f"  cold cache (first run of a fresh install): {cold:6.2f} s  (CPU {cold_cpu:.2f} s)")
        print(f"  warm cache (best of {args.repeat}):                  {warm:6.2f} s  (CPU {warm_cpu:.2f} s)")
        print(f"  ratio cold / warm: {ratio:.2f}, in CPU time {cold_cpu / warm_cpu:.2f}  "
              f"(target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})")
        probe = ("import sys, time; t = time.perf_counter(); import hierdp; dt = time.perf_counter() - t; "
                 f"print(dt); print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
        best, mods = float("inf"), ""
        for _ in range(args.repeat):
            _, proc = _run([python, "-c", probe], env, folder)
            t, mods = proc.stdout.splitlines()[0], (proc.stdout.splitlines() + [""])[1]
            best = min(best, float(t))
        print(f"import hierdp: {best:.2f} s (best of {args.repeat}); heavy modules loaded: {mods or 'none'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
