"""Every Python block of README.md and docs/**/*.md (the landing page's executed cells too)
runs on its own, in a fresh process, in an empty folder: what a reader gets when they paste
one block into a new interpreter.

A block that is only an illustrative fragment is marked on the line just before its fence::

    <!-- docs-test: skip (why it cannot run on its own) -->

A block that continues the block before it (a worked example in two steps) is marked::

    <!-- docs-test: continues (why) -->

and runs after the block before it, in the same fresh process. Both markers need a reason,
and stay rare.

A block that imports an optional extra's package (Polars, PySpark, Dask, DuckDB, matplotlib)
runs where that extra is installed, and skips saying which extra to install where it is not
(a PySpark block also needs a Java runtime): the docs' Polars and Spark examples are tested
wherever they can run, with no marker to forget.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|continues)\s*(?:\((.*)\))?\s*-->")
# ```python blocks, and the MyST-NB cells the docs build executes (```{code-cell} python, as
# on the landing page; their option lines ":key: value" are not code)
FENCE = re.compile(r"^```(?:python|\{code-cell\}(?:[ \t]+\w+)?)[ \t]*\n(?:[ \t]*:[\w-]+:.*\n)*(.*?)^```[ \t]*$",
                   flags=re.S | re.M)
MAX_MARKED = 4  # skipped or continued blocks, over all documents
TIMEOUT = 300
#: the packages of optional extras, by the top-level name a block imports: such a block runs
#: where the extra is installed and skips, naming it, where it is not
EXTRAS = {"polars": "polars", "pyspark": "spark", "dask": "dask", "distributed": "dask", "duckdb": "dataset",
          "matplotlib": "plot", "xarray": "xarray"}


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the opening fence, 1-based
    code: str
    marker: str | None  # "skip", "continues" or None
    reason: str
    before: str  # the code of the block it continues ("" unless marker == "continues")

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    out: list[Block] = []
    for doc in DOCUMENTS:
        text = doc.read_text(encoding="utf-8")
        previous = ""
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            preceding = [ln for ln in text[:m.start()].splitlines() if ln.strip()][-1:]
            mark = MARKER.search(preceding[0]) if preceding else None
            kind, reason = (mark.group(1), (mark.group(2) or "").strip()) if mark else (None, "")
            out.append(Block(doc, line, m.group(1), kind, reason, previous if kind == "continues" else ""))
            previous = (previous if kind == "continues" else "") + m.group(1)
    return out


BLOCKS = _blocks()


def _imports(code: str) -> set[str]:
    """The top-level names of the modules ``code`` imports (``hierdp.frontends.spark`` counts
    as ``pyspark``: it runs on it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            full = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            full = [node.module]
        else:
            continue
        names |= {n.split(".")[0] for n in full}
        names |= {"pyspark" for n in full if n.startswith("hierdp.frontends.spark")}
    return names


def missing(code: str, *, installed=lambda name: importlib.util.find_spec(name) is not None,
            java=lambda: shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))) -> str | None:
    """Why the block ``code`` cannot run here (an extra's package missing, or Java for Spark),
    or ``None`` when it can."""
    needs = sorted(_imports(code) & set(EXTRAS))
    for name in needs:
        if not installed(name):
            return f"needs the {EXTRAS[name]} extra: pip install 'hierdp[{EXTRAS[name]}]' ({name} is not installed)"
    if "pyspark" in needs and not java():
        return "needs a Java 17+ runtime for Spark (no java on the PATH, no JAVA_HOME)"
    return None


def test_a_block_needing_a_missing_extra_is_skipped_with_its_name():
    spark = "from hierdp.frontends.spark import local_session\nspark = local_session()"
    assert missing("import polars as pl", installed=lambda n: n != "polars") == \
        "needs the polars extra: pip install 'hierdp[polars]' (polars is not installed)"
    assert "pip install 'hierdp[spark]'" in missing(spark, installed=lambda n: n != "pyspark")
    assert "Java" in missing(spark, installed=lambda n: True, java=lambda: False)
    assert missing(spark, installed=lambda n: True, java=lambda: True) is None
    assert missing("import numpy as np\nimport hierdp", installed=lambda n: False) is None


def test_the_scale_guide_runs_a_polars_and_a_spark_example():
    """Issue 53: runnable Polars and Spark examples, executed where the extra is installed."""
    scale = [b for b in BLOCKS if b.doc.name == "scale.md" and b.marker is None]
    assert any("polars" in _imports(b.code) for b in scale), "no Polars example in docs/scale.md"
    assert any("pyspark" in _imports(b.code) for b in scale), "no Spark example in docs/scale.md"


def _run(block: Block) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    env.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter, not PATH's python3
    with tempfile.TemporaryDirectory(prefix="hierdp-docs-block-") as cwd:
        script = Path(cwd) / "block.py"
        script.write_text(block.before + block.code, encoding="utf-8")
        return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)


@pytest.fixture(scope="module")
def runs():
    """Every runnable block started at once on two workers: each in its own process, sharing nothing."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures: dict[str, Future[subprocess.CompletedProcess[str]]] = {
            b.id: pool.submit(_run, b) for b in BLOCKS if b.marker != "skip" and missing(b.before + b.code) is None}
        yield futures
        for f in futures.values():
            f.cancel()


def test_the_documents_have_blocks_and_few_are_marked():
    assert {b.doc.name for b in BLOCKS} >= {"README.md", "architecture.md", "plugins.md", "index.md"}
    marked = [b for b in BLOCKS if b.marker]
    assert len(marked) <= MAX_MARKED, [b.id for b in marked]
    for b in marked:
        assert b.reason, f"{b.id}: a docs-test marker needs a reason in parentheses"
        if b.marker == "continues":
            assert b.before, f"{b.id}: continues no block"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_the_block_runs_on_its_own(block: Block, runs):
    if block.marker == "skip":
        pytest.skip(f"marked: {block.reason}")
    why = missing(block.before + block.code)
    if why is not None:
        pytest.skip(f"{block.id} {why}")
    proc = runs[block.id].result()
    assert proc.returncode == 0, f"{block.id} fails when run on its own:\n{proc.stderr[-3000:]}"
