"""The guide pages' figures are drawn by code (docs/_figures/, issue 53): every figure a page
includes has a module that draws it, every module's figure is on its page, the drawings
are small SVG files, the same bytes on every run, and they draw from the code and the
pages they describe (the bias plot from the comparison page's own tables, the spec flow
from the spec's JSON Schema, the split from a real partition). No browser, no docs build:
tests/test_docs_browser.py looks at them on the built pages.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def figures():
    sys.path.insert(0, str(DOCS))
    try:
        yield importlib.import_module("_figures")
    finally:
        sys.path.remove(str(DOCS))


@pytest.fixture(scope="module")
def drawn(figures, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("figures")
    figures.build(folder)
    return folder


def test_every_included_figure_is_drawn_and_every_drawing_included(figures):
    included = {(m.group(1), page.name) for page in DOCS.glob("*.md")
                for m in re.finditer(r"^```\{figure\} _generated/(\S+)$", page.read_text(encoding="utf-8"), re.M)}
    drawn = {(name, page) for name, (_, page) in figures.FIGURES.items()}
    assert included == drawn


def test_the_drawings_are_small_reproducible_svg(figures, drawn, tmp_path):
    figures.build(tmp_path)
    for name in figures.FIGURES:
        data = (drawn / name).read_bytes()
        assert data.startswith(b"<?xml") and b"<svg" in data[:600], name
        assert 5_000 < len(data) < 250_000, (name, len(data))
        assert (tmp_path / name).read_bytes() == data, f"{name} differs between two runs"
        assert b"/root/" not in data and b"/home/" not in data and b"/tmp/" not in data


def test_each_module_runs_alone_as_a_script(tmp_path):
    import subprocess

    out = tmp_path / "split.svg"
    run = subprocess.run([sys.executable, str(DOCS / "_figures" / "split_tasks.py"), str(out)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert out.stat().st_size > 5_000


def test_the_bias_plot_reads_the_comparison_pages_tables(figures, tmp_path):
    bias = figures.bias_levels
    z = bias.read_tables()
    assert z["airports"]["global nonneg → round"]["total"] == pytest.approx(168.8)
    assert set(z["synthetic census"]["top-down nonneg → round"]) == {"total", "state", "county", "tract"}
    text = bias.PAGE.read_text(encoding="utf-8")
    changed = tmp_path / "comparison.md"
    changed.write_text(text.replace("| **+168.8** |", "| **+99.9** |", 1), encoding="utf-8")
    assert bias.read_tables(changed)["airports"]["global nonneg → round"]["total"] == pytest.approx(99.9)
    changed.write_text(text.replace("### Rerun with the integer steps of issue 47", "### Rerun"), encoding="utf-8")
    with pytest.raises(ValueError, match="no section"):
        bias.read_tables(changed)


def test_the_spec_flow_draws_exactly_the_schemas_sections(figures, monkeypatch):
    flow = figures.spec_flow
    flow.check_against_schema()
    steps = [(s, [x for x in secs if x != "split"], n, c) for s, secs, n, c in flow.STEPS]
    monkeypatch.setattr(flow, "STEPS", steps)
    with pytest.raises(ValueError, match="omits \\['split'\\]"):
        flow.check_against_schema()


def test_the_split_is_the_partition_hierdp_makes(figures):
    tree, part = figures.split_tasks.geography()
    assert part.level == "county" and part.n_tasks > 1
    assert tree.n_nodes == 1 + len(figures.split_tasks.TRACTS) + sum(map(len, figures.split_tasks.TRACTS)) + \
        sum(map(sum, figures.split_tasks.TRACTS))
    limit = figures.split_tasks.SPLIT["task_memory"] // 60
    assert max(t.n_nodes for t in part.tasks()) <= limit


def test_the_census_budget_is_the_specs(figures):
    rho, levels = figures.census_budget.budget()
    assert sum(sum(v.values()) for v in levels.values()) == pytest.approx(rho)
    assert list(levels) == ["US", "State", "County", "Tract", "Block_Group", "Block"]
