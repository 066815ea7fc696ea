"""Every Python block of README.md and docs/**/*.md (the landing page's executed cells too)
runs on its own, in a fresh process, in an empty folder: what a reader gets when they paste
one block into a new interpreter.

A block that is only an illustrative fragment is marked on the line just before its fence::

    <!-- docs-test: skip (why it cannot run on its own) -->

A block that continues the block before it (a worked example in two steps) is marked::

    <!-- docs-test: continues (why) -->

and runs after the block before it, in the same fresh process. Both markers need a reason,
and stay rare.
"""

from __future__ import annotations

import os
import re
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


def _run(block: Block) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
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
            b.id: pool.submit(_run, b) for b in BLOCKS if b.marker != "skip"}
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
    proc = runs[block.id].result()
    assert proc.returncode == 0, f"{block.id} fails when run on its own:\n{proc.stderr[-3000:]}"
