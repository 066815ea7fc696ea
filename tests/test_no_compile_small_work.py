"""Small work compiles nothing, wherever a user meets it (issue 53 item 4).

The README promises that trees of up to 16,384 node-cells need no compiled code. Each
path below once compiled kernels in a fresh process with an empty cache (15 s for the
demo's ``to_frame(confidence=0.9)``): the intervals' simulation, the report, a chain with
``nonneg``/``round`` and a split release. They run here in a fresh interpreter with an
empty kernel cache; numba's compile events and the ``hierdp.compile`` logger must stay
silent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = textwrap.dedent("""
    import json, sys, tempfile, os, warnings
    import numpy as np
    import numba.core.event as ev
    import hierdp, hierdp.subtrees
    from hierdp import data

    warnings.simplefilter("ignore")
    compiled = []

    class Seen(ev.Listener):
        def on_start(self, e):
            d = e.data if isinstance(e.data, dict) else {}
            f = getattr(d.get("dispatcher"), "py_func", None)
            compiled.append(f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', '?')}")

        def on_end(self, e):
            pass

    ev.register("numba:compile", Seen())
    out = tempfile.mkdtemp()
    people = data.load_demo("census")
    geography = data.demo_geography("census")
    tree_door = people.dptree(levels=["state", "county", "tract"], domains=geography)
    result = tree_door.release(epsilon=1.0, mechanism="discrete_laplace", budget="equal", postprocess=["blue"])
    frame = result.to_frame(confidence=0.9)
    result.report(os.path.join(out, "release.html"))
    seeded = tree_door.release(epsilon=1.0, postprocess=["blue", "nonneg", "round"], seed=5)
    seeded.to_frame(confidence=0.9)
    seeded.to_frame(confidence=0.9, nonlinear="bootstrap")
    seeded.report(os.path.join(out, "seeded.html"))
    tree_door.release(mechanism="gaussian", rho=0.5, postprocess=["blue"])  # continuous noise on its grid
    # the issue's split release: 145 nodes x 2 cells, level 2 in tasks of 3,000 bytes
    parent = [-1] + [0] * 4 + [1 + i // 5 for i in range(20)] + [5 + i // 6 for i in range(120)]
    tree = hierdp.Tree.from_parent(np.array(parent))
    counts = tree.aggregate(np.arange(tree.n_leaves * 2).reshape(-1, 2) % 5)
    split = {"level": 2, "memory": 6000, "task_memory": 3000}
    part = hierdp.subtrees.partition(tree, split, n_cells=2)
    hierdp.release(tree, counts, epsilon=1.0, postprocess=["blue"], split=split)
    hierdp.release(tree, counts, epsilon=1.0, postprocess=["blue", "nonneg"], split=split).to_frame(confidence=0.9)
    print(json.dumps({"compiled": compiled, "rows": len(frame), "nodes": tree.n_nodes, "tasks": part.n_tasks,
                      "methods": sorted(set(frame["ci_method"].astype(str)))}))
""")


def test_small_work_compiles_nothing_in_a_fresh_process_with_an_empty_cache(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env["HIERDP_CACHE_DIR"] = str(tmp_path / "cache")  # empty: any kernel used compiled would compile
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["HIERDP_THREADS"] = "1"
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["rows"] == 225 and got["nodes"] == 145 and got["tasks"] > 1  # the sizes
    assert "simulation" in got["methods"]  # the intervals really ran the simulation
    assert got["compiled"] == []
    assert "compiling kernels" not in proc.stderr
    cache = tmp_path / "cache"
    assert not any(p.suffix in (".nbi", ".nbc") for p in cache.rglob("*"))  # numba cached nothing either
