"""Histogram cells per node from pandas: ``df.dptree(..., cells={...})``.

References are brute force: per-node crosstabs computed with plain pandas groupbys,
column-by-column post-processing of the same measurements, hand-written labels.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.errors import DataError, HierarchyError

LEVELS = ["state", "county"]
DOMAINS = {"state": ["A", "B"], "county": {"A": ["x", "y"], "B": ["z"]}}
CELLS = {"age": [0, 1, 2], "sex": ["F", "M"]}


@pytest.fixture
def people() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n = 400
    state = rng.choice(["A", "B"], n)
    county = np.where(state == "A", rng.choice(["x", "y"], n), "z")
    return pd.DataFrame({"state": state, "county": county, "age": rng.choice([0, 1, 2], n, p=[0.5, 0.5, 0.0]),
                         "sex": rng.choice(["F", "M"], n), "pid": rng.integers(0, 60, n)})


def _crosstab_reference(df: pd.DataFrame, tree: hierdp.Tree) -> np.ndarray:
    """(n, 6) counts per node by plain pandas: one groupby per level over (age, sex)."""
    cells = pd.MultiIndex.from_product([CELLS["age"], CELLS["sex"]], names=["age", "sex"])
    out = np.zeros((tree.n_nodes, len(cells)), np.int64)
    out[tree.root] = df.groupby(["age", "sex"]).size().reindex(cells, fill_value=0).to_numpy()
    for d in range(1, len(LEVELS) + 1):
        for path, g in df.groupby(LEVELS[:d]):
            out[tree.node_id(*path)] = g.groupby(["age", "sex"]).size().reindex(cells, fill_value=0).to_numpy()
    return out


def test_true_counts_are_per_node_crosstabs_row_major_over_the_cells(people):
    t = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS)
    assert t.n_cells == 6
    np.testing.assert_array_equal(t.true_counts(), _crosstab_reference(people, t.tree))


def test_labels_survive_into_frame_and_xarray(people):
    r = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=4)
    f = r.to_frame(noisy=True)
    assert list(f.columns) == ["level", "state", "county", "age", "sex", "estimate", "std", "noisy"]
    assert len(f) == r.tree.n_nodes * 6
    # the first node's six rows, row-major: age varies slowest
    assert f["age"].iloc[:6].tolist() == [0, 0, 1, 1, 2, 2]
    assert f["sex"].iloc[:6].tolist() == ["F", "M", "F", "M", "F", "M"]
    ds = r.to_xarray(noisy=True)
    assert ds["estimate"].dims == ("node", "age", "sex")
    assert ds["age"].values.tolist() == [0, 1, 2] and ds["sex"].values.tolist() == ["F", "M"]
    assert ds["std"].dims == ("node",)
    assert ds["noisy"].dims == ("node", "age", "sex")
    # the frame and the Dataset hold the same numbers, cell by cell
    row = f[(f["county"] == "y") & (f["age"] == 1) & (f["sex"] == "M")]
    node = int(np.flatnonzero(ds["county"].values == "y")[0])
    assert float(row["estimate"].iloc[0]) == float(ds["estimate"].isel(node=node).sel(age=1, sex="M"))
    assert float(row["noisy"].iloc[0]) == float(ds["noisy"].isel(node=node).sel(age=1, sex="M"))
    led = json.loads(ds.attrs["ledger"])
    assert any("L1 = L2 = 1" in n for n in led["notes"])


def test_without_labels_the_array_api_keeps_one_cell_dimension():
    tree = hierdp.Tree.complete(2, 3)
    x = tree.aggregate(np.arange(tree.n_leaves * 3).reshape(-1, 3))
    r = hierdp.release(tree, x, epsilon=1.0, seed=0)
    assert r.frame["cell"].tolist()[:4] == [0, 1, 2, 0]
    ds = r.to_xarray()
    assert ds["estimate"].dims == ("node", "cell") and ds["cell"].values.tolist() == [0, 1, 2]


def test_pre_aggregated_counts_give_the_records_release(people):
    recs = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=11)
    agg = people.groupby(LEVELS + ["age", "sex"]).size().rename("n").reset_index()
    pre = agg.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, count="n").release(epsilon=1.0, seed=11)
    np.testing.assert_array_equal(pre.values, recs.values)
    series = people.groupby(LEVELS + ["age", "sex"]).size()
    ser = series.dptree(domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=11)
    np.testing.assert_array_equal(ser.values, recs.values)
    assert "counted in column 'n'" in " ".join(pre.ledger.notes)


def test_a_cell_value_outside_its_domain_is_the_level_error(people):
    bad = people.copy()
    bad.loc[5, "sex"] = "X"
    with pytest.raises(DataError, match=r"the data have 'sex' values outside the declared cell domain \(values not "
                                        r"shown.*drop such rows \(unknown='drop'"):
        bad.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=0)
    bad.loc[6, "age"] = np.nan
    with pytest.raises(DataError, match="missing 'age' values"):
        bad.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    t = bad.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unknown="drop")
    assert len(t.out_of_domain()) == 2
    np.testing.assert_array_equal(t.true_counts(), _crosstab_reference(bad.drop(index=[5, 6]), t.tree))
    r = t.release(epsilon=1.0, seed=0)
    assert r.ledger.private_notes["rows_dropped_out_of_domain"] == 2
    assert "rows_dropped" not in r.ledger.to_json()  # the number stays private


@pytest.mark.parametrize("cells, error, match", [
    ({"age": [0, 1], "sex": ["F"], "agex": [1]}, DataError, "missing cell column 'agex'"),
    ({"state": ["A"]}, HierarchyError, "both as a level and as a cell"),
    ({"estimate": [1]}, HierarchyError, "name of an output column"),
    ({"age": []}, HierarchyError, "is empty"),
    ({"age": [1, 1]}, HierarchyError, "more than once"),
    ({"age": "all"}, HierarchyError, "list of values or 'observed'"),
    (["age"], HierarchyError, "cells must be a dict"),
])
def test_bad_cell_declarations_are_one_line_errors(people, cells, error, match):
    with pytest.raises(error, match=match):
        people.dptree(levels=LEVELS, domains=DOMAINS, cells=cells)


def test_observed_cells_are_the_sorted_values_seen(people):
    t = people.dptree(levels=LEVELS, domains=DOMAINS, cells={"age": "observed", "sex": ["F", "M"]})
    assert t.cells["age"].tolist() == [0, 1]  # age 2 never occurs in the fixture
    assert "observed" not in t.cells


def test_post_processing_is_per_cell_consistent_non_negative_and_integer(people):
    r = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(
        epsilon=0.3, seed=2, postprocess=["blue", {"name": "nonneg", "method": "global"},
                                          {"name": "round", "method": "remainder"}])
    vals = r.values
    assert vals.shape == (r.tree.n_nodes, 6) and np.issubdtype(vals.dtype, np.integer)
    assert (vals >= 0).all()
    for c in range(6):
        assert r.tree.is_consistent(vals[:, c])
    # the (n, k) chain is the chain run on each cell's column of the same measurements (the
    # remainder rule is per cell; the default top-down round holds each unit's total across cells)
    noisy, var = r.measurements.values, r.measurements.variance
    for c in range(6):
        est = hierdp.postprocess("blue", r.tree, noisy[:, c].astype(float), variance=var)
        est = hierdp.postprocess("nonneg", r.tree, est.values, variance=var, method="global")
        col = hierdp.postprocess("round", r.tree, est.values, method="remainder")
        np.testing.assert_array_equal(col.values, vals[:, c])


def test_ledger_states_the_sensitivity_of_one_row_in_one_cell(people):
    r = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=0)
    assert all(ls.sensitivity_l1 == 1 and ls.sensitivity_l2 == 1 for ls in r.ledger.levels)
    assert "age (3) x sex (2) = 6 cells" in r.ledger.notes[0]
    b = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=2)
    rb = b.release(epsilon=1.0, seed=0)
    assert all(ls.sensitivity_l1 == 2 and ls.sensitivity_l2 == 2 for ls in rb.ledger.levels)
    assert any("Sensitivity.bounded(2)" in n and "each row in one cell" in n for n in rb.ledger.notes)


def test_contribution_bound_counts_rows_across_cells(people):
    t = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=2)
    values, notes = t._node_values(hierdp.rng.make_rng(5))
    per_unit = people.groupby("pid").size()
    assert values[0].sum() == np.minimum(per_unit, 2).sum()
    assert notes["rows_dropped_by_contribution_bound"] == (per_unit - 2).clip(lower=0).sum()
