"""The spec route of spatial decompositions: `decomposition:` instead of `hierarchy:`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hierdp.errors import DataError, SpecError
from hierdp.spec import run_spec, validate
from hierdp.spec.runner import load_spec

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"


def _spec(tmp_path, decomposition="name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}",
          extra="", privacy="privacy: {epsilon: 1.0}"):
    text = f"hierdp: 1\nsource: {{path: pts.csv}}\ndecomposition:\n  {decomposition}\n{privacy}\n{extra}"
    (tmp_path / "s.yaml").write_text(text)
    return tmp_path / "s.yaml"


@pytest.fixture
def pts_csv(tmp_path):
    g = np.random.default_rng(5)
    xy = np.vstack([g.normal(0.3, 0.03, (600, 2)), g.uniform(0, 1, (200, 2))]).clip(0, 1)
    pd.DataFrame({"id": np.arange(len(xy)), "x": xy[:, 0], "y": xy[:, 1]}).to_csv(tmp_path / "pts.csv", index=False)
    return tmp_path / "pts.csv"


def test_bundled_example_releases_regions_that_tile_the_box(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_spec("privtree", seed=4, output=tmp_path / "out.csv")
    table = pd.read_csv(tmp_path / "out.csv")
    ledger = json.loads((tmp_path / "out.ledger.json").read_text())
    assert len(table) == r.tree.n_nodes and {"lon_low", "lon_high", "lat_low", "lat_high", "depth", "leaf",
                                               "estimate", "std"} <= set(table.columns)
    leaves = table[table["leaf"]]
    area = (leaves.lon_high - leaves.lon_low) * (leaves.lat_high - leaves.lat_low)
    assert area.sum() == pytest.approx(1.0)  # the leaves partition the public box
    assert table["depth"].max() <= 14  # the spec's public depth cap
    # BLUE: every region is the sum of the leaves inside it (here: the root)
    assert table.estimate[0] == pytest.approx(leaves.estimate.sum())
    spends = {s["label"]: s["amount"] for s in ledger["decomposition"]["spends"]}
    assert spends["privtree structure"] == pytest.approx(0.5) and ledger["levels"][0]["budget"] == pytest.approx(0.5)
    assert ledger["spent"] == pytest.approx(1.0) and ledger["decomposition"]["private_structure"]
    assert table["status"].str.startswith("NOT FOR PUBLICATION").all()


def test_spec_release_counts_the_source_rows(tmp_path, pts_csv):
    """With a large ε the root estimate is the number of rows (800; the filter keeps all)."""
    path = _spec(tmp_path)
    text = path.read_text().replace("source: {path: pts.csv}",
                                    "source: {path: pts.csv, filter: [{column: id, op: '>=', value: -2}]}")
    path.write_text(text.replace("epsilon: 1.0", "epsilon: 200.0") + "output: {columns: [estimate, noisy]}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_spec(path, seed=1, write=False)
    from hierdp.spec.runner import release_frame

    frame = release_frame(r.meta["spec"], r)
    assert list(frame.columns[-3:]) == ["estimate", "noisy", "status"]
    assert abs(frame.estimate[0] - 800) < 10


@pytest.mark.parametrize("decomposition, extra, privacy, message", [
    ("name: privtree\n  params: {columns: [x, z], bounds: [[0, 1], [0, 1]]}", "", None,
     "column 'z' is not in the source"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [1, 0]]}", "", None, "must have low < high"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, .inf], [0, 1]]}", "", None, "finite"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1]]}", "", None, "1 bound pair(s) for 2 column(s)"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]], thta: 1}", "", None,
     "did you mean 'theta'"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]], split: rows}", "", None, "split='rows'"),
    ("name: simpletree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}", "", None, "height=h"),
    ("name: quadtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}", "", None, "privtree"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}", "budget: equal\n", None,
     "epsilon_share"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}",
     "hierarchy: {levels: [{name: x, domain: observed}]}\n", None, "not both"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}", "", "privacy: {epsilon: 1, delta: 1.0e-6}",
     "pure ε-DP"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]]}", "", "privacy: {epsilon: 1, unit: id}",
     "contributions"),
    ("name: privtree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]], epsilon_share: 1.5}", "", None,
     "epsilon_share"),
])
def test_validation_names_each_problem(tmp_path, pts_csv, decomposition, extra, privacy, message):
    path = _spec(tmp_path, decomposition, extra, privacy or "privacy: {epsilon: 1.0}")
    with pytest.raises(SpecError) as exc:
        validate(path)
    assert any(message in line for line in exc.value.errors), exc.value.errors


def test_a_spec_needs_a_hierarchy_or_a_decomposition(tmp_path, pts_csv):
    (tmp_path / "s.yaml").write_text("hierdp: 1\nsource: {path: pts.csv}\nprivacy: {epsilon: 1}\n")
    with pytest.raises(SpecError, match="add `hierarchy:`.*or `decomposition:`"):
        validate(tmp_path / "s.yaml")


def test_valid_spec_reads_only_the_header_and_normalises(tmp_path, pts_csv):
    spec = validate(_spec(tmp_path))
    assert spec.decomposition == ("privtree", {"columns": ["x", "y"], "bounds": [[0, 1], [0, 1]]})
    assert spec.levels == [] and spec.needed_columns() == ["x", "y"]


def test_points_outside_the_declared_box_are_refused_at_release(tmp_path, pts_csv):
    path = _spec(tmp_path, "name: privtree\n  params: {columns: [x, y], bounds: [[0, 0.5], [0, 1]]}")
    with pytest.raises(DataError, match="outside the declared bounds"):
        run_spec(load_spec(path), seed=1, write=False)


def test_grid_and_simpletree_routes(tmp_path, pts_csv):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = run_spec(_spec(tmp_path, "name: grid\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]], m: 4}"),
                     seed=1, write=False)
        s = run_spec(_spec(tmp_path, "name: simpletree\n  params: {columns: [x, y], bounds: [[0, 1], [0, 1]], "
                                     "height: 3}"), seed=1, write=False)
    assert g.tree.n_nodes == 1 + 16 and g.structure.private_structure is False
    assert s.tree.depth.max() <= 2


def test_cli_validate_and_release(tmp_path, capsys):
    from hierdp.cli import main

    assert main(["validate", "privtree"]) == 0
    assert "valid (privtree on lon, lat; ε = 1" in capsys.readouterr().out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["release", "privtree", "--seed", "2", "-o", str(tmp_path / "p.csv"), "-q"]) == 0
    assert (tmp_path / "p.ledger.json").is_file() and len(pd.read_csv(tmp_path / "p.csv")) > 100
