"""Counting records through grouped integer codes gives exactly what placing every row gave.

The reference below is the row-by-row path hierdp used before (every row placed on the
tree with one search per level, then ``np.bincount``); the fast path groups rows into
their distinct label paths first. Random frames cover missing labels, ragged trees,
``unknown='drop'``, categorical / string / integer levels, ``count=`` weights and cells;
a hand-computed case pins the counts themselves.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import hierdp  # noqa: F401  (registers the .dptree accessor)
from hierdp.decompositions import declared
from hierdp.decompositions.declared import build_structure, group_paths
from hierdp.errors import DataError
from hierdp.frontends._cells import cell_codes, domain_error
from hierdp.frontends.counting import count_cells, count_rows, leaf_counts_to_nodes, place_cells

# -- the row-by-row reference (the algorithm before grouping) -----------------------------------

def _ref_count_rows(structure, df, *, count, unknown):
    weights = None if count is None else df[count].to_numpy(np.int64)
    node, bad, examples = structure.locate_paths(df)
    if weights is not None:
        bad &= weights != 0
    notes = {}
    if bad.any():
        if unknown == "raise":
            raise DataError("the data have " + "; ".join(examples))
        notes["rows_dropped_out_of_domain"] = int(bad.sum())
    keep = ~bad
    counts = np.zeros(structure.n_ext, np.int64)
    np.add.at(counts, node[keep], 1 if weights is None else weights[keep])
    return leaf_counts_to_nodes(structure.tree, counts), notes


def _ref_count_cells(structure, df, cells, *, count, unknown):
    k = int(np.prod([len(v) for v in cells.values()]))
    node, bad, problems = structure.locate_paths(df)
    cell, cbad, cproblems = cell_codes(cells, df)
    bad = bad | cbad
    if count is not None:  # a zero-count row counts nothing and is never out of domain
        bad &= df[count].to_numpy(np.int64) != 0
    problems = problems + [p for p in cproblems if p not in problems]
    notes = {}
    if bad.any():
        if unknown == "raise":
            raise domain_error(problems)
        notes["rows_dropped_out_of_domain"] = int(bad.sum())
    keep = ~bad
    counts = np.zeros(structure.n_ext * k, np.int64)
    np.add.at(counts, (np.maximum(node, 0) * k + cell)[keep], 1 if count is None else df[count].to_numpy(np.int64)[keep])
    return leaf_counts_to_nodes(structure.tree, counts.reshape(structure.n_ext, k)), notes


# -- random frames ----------------------------------------------------------------------------------

STATES = ["01", "02", "06"]
COUNTIES = {"01": ["001", "003"], "02": ["001"], "06": ["001", "037", "075"]}
TRACTS = ["a", "b", "c", "d"]


def _domains(ragged: bool):
    tracts = {}
    for s, cs in COUNTIES.items():
        for c in cs:
            # ragged: county 02/001 has no tracts (a leaf one level up)
            tracts[(s, c)] = [] if ragged and s == "02" else TRACTS[: 2 + (int(c) % 3)]
    return {"state": STATES, "county": COUNTIES, "tract": tracts}


def _frame(rng, n, *, kind, na, outside, ragged):
    s = rng.choice(STATES, n)
    c = np.array([rng.choice(COUNTIES[x]) for x in s], dtype=object)
    t = rng.choice(TRACTS, n).astype(object)
    if ragged:
        t[s == "02"] = None  # rows of the childless county stop there
    if outside:
        c[rng.random(n) < 0.03] = "999"
        t[rng.random(n) < 0.03] = "zz"
    if na:
        s = s.astype(object)
        s[rng.random(n) < 0.02] = None
        t[rng.random(n) < 0.05] = None
    df = pd.DataFrame({"state": s, "county": c, "tract": t, "sex": rng.choice(["F", "M"], n),
                       "w": rng.integers(0, 4, n)})
    if kind == "categorical":
        for col in ("state", "county", "tract", "sex"):
            df[col] = df[col].astype("category")
    elif kind == "string":
        for col in ("state", "county", "tract", "sex"):
            df[col] = df[col].astype("string")
    return df


def _outcome(fn, *args, **kwargs):
    try:
        return "ok", fn(*args, **kwargs)
    except DataError as exc:
        return "error", str(exc).split(" (values")[0]


@pytest.fixture(params=["default", "hashed"])
def grouping(request, monkeypatch):
    """Default thresholds, and thresholds that force a hash compaction at every level."""
    if request.param == "hashed":
        monkeypatch.setattr(declared, "_DENSE_PER_ROW", 0)
        monkeypatch.setattr(declared, "_DENSE_MIN", 0)
    return request.param


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["object", "categorical", "string"])
def test_count_rows_matches_row_by_row(seed, kind, grouping):
    rng = np.random.default_rng(seed)
    ragged, na, outside = seed % 2 == 0, seed % 3 != 0, seed >= 2
    df = _frame(rng, 3000, kind=kind, na=na, outside=outside, ragged=ragged)
    st = build_structure(None, ["state", "county", "tract"], _domains(ragged))
    for count in (None, "w"):
        for unknown in ("raise", "drop"):
            got = _outcome(count_rows, st, df, count=count, unknown=unknown)
            want = _outcome(_ref_count_rows, st, df, count=count, unknown=unknown)
            assert got[0] == want[0], (count, unknown)
            if got[0] == "error":
                assert got[1] == want[1]
            else:
                np.testing.assert_array_equal(got[1][0], want[1][0])
                assert got[1][1] == want[1][1]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["object", "categorical"])
def test_count_cells_and_place_cells_match_row_by_row(seed, kind, grouping):
    rng = np.random.default_rng(100 + seed)
    df = _frame(rng, 2000, kind=kind, na=seed % 2 == 1, outside=seed >= 2, ragged=seed % 2 == 0)
    if seed == 3:  # a cell value outside its domain, and a missing one
        df["sex"] = df["sex"].astype(object)
        df.loc[df.index[:5], "sex"] = "X"
        df.loc[df.index[5:7], "sex"] = None
    st = build_structure(None, ["state", "county", "tract"], _domains(seed % 2 == 0))
    cells = {"sex": pd.Index(["F", "M"])}
    for count in (None, "w"):
        for unknown in ("raise", "drop"):
            got = _outcome(count_cells, st, df, cells, count=count, unknown=unknown)
            want = _outcome(_ref_count_cells, st, df, cells, count=count, unknown=unknown)
            assert got[0] == want[0]
            if got[0] == "error":
                assert got[1] == want[1]
            else:
                np.testing.assert_array_equal(got[1][0], want[1][0])
                assert got[1][1] == want[1][1]
    key, bad, problems = place_cells(st, df, cells)
    node, rbad, rproblems = st.locate_paths(df)
    cell, cbad, cproblems = cell_codes(cells, df)
    np.testing.assert_array_equal(bad, rbad | cbad)
    np.testing.assert_array_equal(key, np.maximum(node, 0) * 2 + cell)
    assert problems == rproblems + [p for p in cproblems if p not in rproblems]


def test_locate_groups_many_rows_like_row_by_row(grouping):
    rng = np.random.default_rng(7)
    df = _frame(rng, declared._GROUP_ABOVE + 500, kind="object", na=True, outside=True, ragged=True)
    st = build_structure(None, ["state", "county", "tract"], _domains(True))
    got, want = st.locate(df), st.locate_paths(df)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2]


def test_group_paths_matches_tuples(grouping):
    rng = np.random.default_rng(3)
    n = 5000
    df = pd.DataFrame({"a": rng.integers(0, 50, n), "b": rng.choice(["x", "y", None], n),
                       "c": pd.Categorical(rng.choice(["p", "q", "r"], n), categories=["r", "q", "p", "unused"])})
    gid, paths = group_paths(df, ["a", "b", "c"])
    def rows(cols):
        return [tuple(None if pd.isna(v) else v for v in t) for t in zip(*(list(c) for c in cols))]
    tuples = rows([df["a"], df["b"], df["c"]])
    back = rows([paths["a"], paths["b"], paths["c"]])
    assert len(set(back)) == len(back) == len(set(tuples))  # each distinct path once
    assert [back[g] for g in gid] == tuples  # every row maps to its own path


def test_hand_computed_counts_with_drop_and_weights():
    df = pd.DataFrame({"state": ["A", "A", "B", "B", "C", None],
                       "county": ["x", "y", "z", "z", "q", "x"],
                       "n": [2, 3, 5, 0, 7, 11]})
    st = build_structure(None, ["state", "county"], {"state": ["A", "B"], "county": {"A": ["x", "y"], "B": ["z"]}})
    counts, notes = count_rows(st, df, count="n", unknown="drop")
    # root 2+3+5 = 10, A = 5, B = 5, A/x = 2, A/y = 3, B/z = 5; rows C/q (7) and None/x (11) dropped
    assert sorted(counts.tolist()) == sorted([10, 5, 5, 2, 3, 5])
    assert counts[0] == 10 and notes == {"rows_dropped_out_of_domain": 2}
    unweighted, notes = count_rows(st, df, count=None, unknown="drop")
    assert unweighted[0] == 4 and notes == {"rows_dropped_out_of_domain": 2}
    with pytest.raises(DataError, match="'state' values outside the declared domain"):
        count_rows(st, df, count=None, unknown="raise")


def test_release_frame_identical_through_the_front_end():
    rng = np.random.default_rng(11)
    df = _frame(rng, 4000, kind="categorical", na=False, outside=False, ragged=True)
    tree = df.dptree(["state", "county", "tract"], domains=_domains(True), unknown="drop")
    want, _ = _ref_count_rows(tree.structure, df, count=None, unknown="drop")
    np.testing.assert_array_equal(tree.true_counts(), want)


def _tree_arrays(st):
    t = st.tree
    return (t.parent.tolist(), [t.level_labels(d).tolist() for d in range(t.n_levels)],
            {k: pd.Series(v).astype(object).tolist() for k, v in t.label_columns().items()}, t.provenance)


@pytest.mark.parametrize("seed", range(3))
def test_tree_from_paths_frame_matches_path_by_path(seed):
    """One frame for every level (tracked row by row) builds the tree the per-level
    distinct-paths route builds (forced by giving each level its own copy of the frame)."""
    rng = np.random.default_rng(seed)
    n = 3000
    geo = pd.DataFrame({"state": rng.choice(["06", "01", "02"], n), "county": rng.choice(["001", "003", "005"], n),
                        "tract": rng.choice(["0100", "0200", "0300", "0400"], n)})
    geo["block"] = rng.integers(1000, 1040, n).astype(str)
    if seed == 1:
        geo = geo.astype("category")
    levels = ["state", "county", "tract", "block"]
    fast = build_structure(None, levels, geo)
    slow = build_structure(None, levels, {lv: geo.copy() for lv in levels})
    assert _tree_arrays(fast) == _tree_arrays(slow)
    # and every distinct path of the frame is one leaf
    assert fast.tree.n_leaves == len(geo.drop_duplicates())


# -- CSV through pyarrow's writer ------------------------------------------------------------------

def _release_frames():
    import warnings
    rng = np.random.default_rng(5)
    df = _frame(rng, 3000, kind="categorical", na=False, outside=False, ragged=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = df.dptree(["state", "county", "tract"], domains=_domains(True), unknown="drop")
        r = tree.release(epsilon=1.0, seed=3)
        cells = df.dptree(["state", "county", "tract"], domains=_domains(True), unknown="drop",
                          cells={"sex": ["F", "M"]}).release(epsilon=1.0, seed=4, postprocess=("blue", "nonneg"))
    x = np.r_[rng.normal(0, 1e3, 500), 1e-7, 3e17, -0.0, np.inf, np.nan]
    big = pd.DataFrame({"x": x, "y": np.round(x)})
    whole = pd.DataFrame({"a": [1.0, 2.0, -0.0, 1e6], "b": [3.0, np.nan, 4.0, 5.0]})  # floats that are whole numbers
    return {"frame": r.frame, "noisy": r.to_frame(noisy=True), "cells": cells.to_frame(noisy=True), "floats": big,
            "whole": whole}


@pytest.mark.parametrize("name", ["frame", "noisy", "cells", "floats", "whole"])
def test_csv_through_pyarrow_reads_back_like_pandas(name, tmp_path):
    pytest.importorskip("pyarrow")
    from hierdp import io as hio
    frame = _release_frames()[name]
    assert hio._arrow_csv_columns(frame) is not None  # these frames take the fast writer
    hio.write_table(frame, tmp_path / "a.csv")
    frame.to_csv(tmp_path / "b.csv", index=False)
    got, want = pd.read_csv(tmp_path / "a.csv"), pd.read_csv(tmp_path / "b.csv")
    pd.testing.assert_frame_equal(got, want)  # same values, same dtypes, bit for bit
    if name != "floats":  # release tables: the very same text
        assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()
    hio.write_table(frame, tmp_path / "c.csv.gz")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "c.csv.gz"), want)


def test_csv_labels_needing_quotes_go_through_pandas(tmp_path):
    pytest.importorskip("pyarrow")
    from hierdp import io as hio
    frame = pd.DataFrame({"county": pd.Categorical(["Los Angeles, CA", 'say "hi"', None]), "estimate": [1.0, 2.5, 3.0],
                          "flag": [True, False, True]})
    assert hio._arrow_csv_columns(frame) is None
    assert hio._arrow_csv_columns(frame[["estimate"]]) is None  # one column: pandas writes a lone NA as ""
    assert hio._arrow_csv_columns(frame[["estimate"]].assign(s=pd.array(["a\nb", "c", None], dtype="str"))) is None
    hio.write_table(frame, tmp_path / "q.csv")
    assert (tmp_path / "q.csv").read_text() == frame.to_csv(index=False)
