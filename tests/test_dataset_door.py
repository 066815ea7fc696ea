"""The dataset door: ``hierdp.dptree("records/", ...)`` on Parquet and CSV files, counted in DuckDB.

The reference is the pandas door on the same records (the frame the files were written
from): the same counts, the same release and ledger for the same seed, the same errors
word for word (with the file named). Contribution bounding is checked against its law
(each unit over the bound keeps exactly ``c`` rows, uniformly at random) and
``counts_of(task)`` against a brute-force sum of the full tree's counts.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

import hierdp  # noqa: E402
from hierdp import subtrees  # noqa: E402
from hierdp.errors import DataError, MissingDependencyError  # noqa: E402
from hierdp.frontends.dataset import DatasetDPTree  # noqa: E402
from hierdp.rng import make_rng  # noqa: E402

LEVELS = ["state", "county"]
DOMAINS = {"state": ["01", "02", "03"], "county": {"01": ["001", "002"], "02": ["001", "003"], "03": ["009"]}}
CELLS = {"age": [0, 1, 2], "sex": ["F", "M"]}


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    rng = np.random.default_rng(31)
    n = 3000
    state = rng.choice(["01", "02"], n)
    county = np.where(state == "01", rng.choice(["001", "002"], n), rng.choice(["001", "003"], n))
    return pd.DataFrame({"state": state, "county": county, "age": rng.choice([0, 1, 2], n),
                         "sex": rng.choice(["F", "M"], n), "pid": rng.integers(0, 400, n),
                         "n": rng.integers(0, 5, n)})


def _write(df: pd.DataFrame, folder: Path, parts: int = 4, fmt: str = "parquet") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, chunk in enumerate(np.array_split(np.arange(len(df)), parts)):
        part = df.iloc[chunk]
        if fmt == "parquet":
            part.to_parquet(folder / f"part-{i}.parquet", index=False)
        else:
            part.to_csv(folder / f"part-{i}.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def folder(people, tmp_path_factory) -> Path:
    return _write(people, tmp_path_factory.mktemp("ds") / "records")


# -- where the files are: folder, glob, one file, CSV ---------------------------------------
@pytest.mark.parametrize("where", ["folder", "glob", "file", "path", "csv"])
def test_counts_equal_the_pandas_door(people, folder, tmp_path, where):
    df = people
    if where == "folder":
        source: object = str(folder)
    elif where == "glob":
        source = str(folder / "part-*.parquet")
    elif where == "path":
        source = folder  # a pathlib.Path
    elif where == "file":
        df = people.iloc[:700]
        df.to_parquet(tmp_path / "one.parquet", index=False)
        source = str(tmp_path / "one.parquet")
    else:
        source = str(_write(people, tmp_path / "csv", fmt="csv"))
    door = hierdp.dptree(source, levels=LEVELS, domains=DOMAINS, cells=CELLS)
    assert isinstance(door, DatasetDPTree)
    ref = df.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS)
    got, notes = door.node_values()
    want, _ = ref.node_values()
    assert door.tree == ref.tree
    np.testing.assert_array_equal(got, want)
    assert got[0].sum() == len(df)
    assert notes == {}


@pytest.mark.parametrize("kw", [dict(domains=DOMAINS, cells=CELLS),
                                dict(domains="observed", cells={"age": "observed", "sex": ["F", "M"]}),
                                dict(domains=DOMAINS, cells=CELLS, count="n"),
                                dict(domains={"state": DOMAINS["state"], "county": "observed"}),
                                dict(domains=DOMAINS)], ids=["declared", "observed", "count", "mixed", "no-cells"])
def test_release_is_the_pandas_release(people, tmp_path, kw):
    folder = _write(people, tmp_path / "records")  # new files: the ledgers count the releases of each
    ref = people.copy().dptree(levels=LEVELS, **kw).release(epsilon=1.0, seed=9,
                                                            postprocess=["blue", "nonneg", "round"])
    r = hierdp.dptree(str(folder), levels=LEVELS, **kw).release(epsilon=1.0, seed=9,
                                                                postprocess=["blue", "nonneg", "round"])
    assert r.tree == ref.tree
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)
    a, b = r.ledger.to_dict(include_private=True), ref.ledger.to_dict(include_private=True)
    for key in ("release_id", "created"):
        a.pop(key, None), b.pop(key, None)
    assert a == b
    again = hierdp.dptree(folder / "*.parquet", levels=LEVELS, **kw).release(epsilon=1.0)
    assert "release 2 of the same" in " ".join(again.ledger.notes)  # the same files, another door


def test_codes_with_leading_zeros_stay_text_in_csv(tmp_path):
    df = pd.DataFrame({"state": ["01", "01", "02", "10"], "county": ["007", "070", "007", "100"]})
    (tmp_path / "r.csv").write_text("state,county\n01,007\n01,070\n02,007\n10,100\n")
    doms = {"state": ["01", "02", "10"], "county": {"01": ["007", "070"], "02": ["007"], "10": ["100"]}}
    door = hierdp.dptree(str(tmp_path / "r.csv"), levels=LEVELS, domains=doms)
    np.testing.assert_array_equal(door.true_counts(), df.dptree(levels=LEVELS, domains=doms).true_counts())
    assert door.true_counts()[0] == 4
    observed = hierdp.dptree(str(tmp_path / "r.csv"), levels=LEVELS, domains="observed")
    assert list(observed.tree.level_labels(1)) == ["01", "02", "10"]


def test_empty_parts_count_nothing(people, tmp_path):
    _write(people, tmp_path / "p")
    people.iloc[:0].to_parquet(tmp_path / "p" / "part-9.parquet", index=False)
    door = hierdp.dptree(str(tmp_path / "p"), levels=LEVELS, domains=DOMAINS, cells=CELLS)
    np.testing.assert_array_equal(door.true_counts(),
                                  people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts())
    _write(people, tmp_path / "c", fmt="csv")
    (tmp_path / "c" / "part-9.csv").write_text(",".join(people.columns) + "\n")  # a header and no row
    door = hierdp.dptree(str(tmp_path / "c"), levels=LEVELS, domains=DOMAINS, cells=CELLS)
    assert door.true_counts()[0].sum() == len(people)


# -- bad input: one clear line ------------------------------------------------------------
def test_a_missing_folder_is_one_clear_line(tmp_path):
    with pytest.raises(DataError) as err:
        hierdp.dptree(str(tmp_path / "nowhere/"), levels=LEVELS, domains=DOMAINS)
    msg = str(err.value)
    assert "\n" not in msg and "does not exist" in msg and "nowhere" in msg
    with pytest.raises(DataError, match="no file matches"):
        hierdp.dptree(str(tmp_path / "nowhere" / "*.parquet"), levels=LEVELS, domains=DOMAINS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no Parquet or CSV file"):
        hierdp.dptree(str(tmp_path / "empty"), levels=LEVELS, domains=DOMAINS)


def test_a_part_with_a_missing_column_is_the_pandas_error(people, tmp_path):
    _write(people, tmp_path / "p")
    broken = people.iloc[:50].drop(columns=["county"])
    broken.to_parquet(tmp_path / "p" / "part-2.parquet", index=False)
    with pytest.raises(DataError) as pandas_err:
        broken.dptree(levels=LEVELS, domains=DOMAINS)
    with pytest.raises(DataError) as err:
        hierdp.dptree(str(tmp_path / "p"), levels=LEVELS, domains=DOMAINS)
    assert str(err.value) == f"dataset part 'part-2.parquet': {pandas_err.value}"
    assert str(pandas_err.value).startswith("missing level column 'county'")
    with pytest.raises(DataError) as err:  # a cell column, and the privacy unit
        hierdp.dptree(str(tmp_path / "p"), levels=["state"], domains="observed", cells={"county": "observed"})
    assert "part-2.parquet" in str(err.value) and "missing cell column 'county'" in str(err.value)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_out_of_domain_in_one_part_is_the_pandas_error(people, tmp_path, fmt):
    broken = people.copy()
    broken.iloc[2200, broken.columns.get_loc("sex")] = "X"  # in part 2 (rows 1500-2249)
    broken.iloc[2300, broken.columns.get_loc("county")] = "999"  # in part 3
    src = _write(broken, tmp_path / "p", fmt=fmt)
    with pytest.raises(DataError) as pandas_err:
        broken.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    with pytest.raises(DataError) as err:
        hierdp.dptree(str(src), levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    expected = str(pandas_err.value).replace("df.dptree(...)", "dataset.dptree(...)")
    assert str(err.value) == f"{expected} [found in dataset part 'part-2.{fmt}']"
    assert "values outside the declared" in str(err.value) and "X" not in str(err.value)
    assert "999" not in str(err.value) and "\n" not in str(err.value)
    dropped = hierdp.dptree(str(src), levels=LEVELS, domains=DOMAINS, cells=CELLS, unknown="drop")
    ref = broken.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unknown="drop")
    got, notes = dropped.node_values()
    want, ref_notes = ref.node_values()
    np.testing.assert_array_equal(got, want)
    assert notes == ref_notes == {"rows_dropped_out_of_domain": 2}
    report = dropped.out_of_domain()
    assert len(report) == 2 and set(report["file"].map(lambda f: Path(f).name)) == {f"part-2.{fmt}", f"part-3.{fmt}"}


def test_labels_of_another_type_than_their_domain_are_the_pandas_error(tmp_path):
    df = pd.DataFrame({"state": [1, 2, 2], "county": [5, 6, 6]})  # numbers in the file, text domains
    df.to_parquet(tmp_path / "r.parquet", index=False)
    doms = {"state": ["1", "2"], "county": {"1": ["5"], "2": ["6"]}}
    with pytest.raises(DataError) as pandas_err:
        df.dptree(levels=LEVELS, domains=doms).true_counts()
    with pytest.raises(DataError) as err:
        hierdp.dptree(str(tmp_path / "r.parquet"), levels=LEVELS, domains=doms).true_counts()
    assert str(err.value).startswith(str(pandas_err.value).replace("df.dptree", "dataset.dptree"))
    # as text (the spec's rule for label columns) they match
    door = hierdp.dptree(str(tmp_path / "r.parquet"), levels=LEVELS, domains=doms, labels_as_text=True)
    assert door.true_counts()[0] == 3


def test_count_column_checks_are_the_pandas_ones(people, tmp_path):
    bad = people.assign(n=people["n"].astype(float))
    bad.iloc[10, bad.columns.get_loc("n")] = 1.5
    bad.to_parquet(tmp_path / "f.parquet", index=False)
    with pytest.raises(DataError) as pandas_err:
        bad.dptree(levels=LEVELS, domains=DOMAINS, count="n")
    with pytest.raises(DataError) as err:
        hierdp.dptree(str(tmp_path / "f.parquet"), levels=LEVELS, domains=DOMAINS, count="n")
    assert str(err.value) == str(pandas_err.value)
    neg = people.assign(n=people["n"] - 3)
    neg.to_parquet(tmp_path / "g.parquet", index=False)
    with pytest.raises(DataError, match="has negative counts"):
        hierdp.dptree(str(tmp_path / "g.parquet"), levels=LEVELS, domains=DOMAINS, count="n")


def test_a_missing_extra_names_the_install_line(monkeypatch, folder):
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(MissingDependencyError) as err:
        hierdp.dptree(str(folder), levels=LEVELS, domains=DOMAINS)
    assert "pip install 'hierdp[dataset]'" in str(err.value) and "\n" not in str(err.value)


def test_memory_and_spill_folder_are_set(folder, tmp_path):
    door = hierdp.dptree(str(folder), levels=LEVELS, domains=DOMAINS, memory="300MiB",
                         temp_directory=tmp_path / "spill", threads=1)
    with door._connect() as con:
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        spill = con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
        threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    # the spills go to a new owner-only folder inside temp_directory (DuckDB makes its files 0644)
    assert limit.replace(" ", "") in ("300.0MiB", "314.5MB", "300MiB") and Path(spill).parent == tmp_path / "spill"
    assert int(threads) == 1
    with pytest.raises(DataError, match="memory="):
        hierdp.dptree(str(folder), levels=LEVELS, domains=DOMAINS, memory="lots")


# -- contribution bounding ----------------------------------------------------------------
def test_contribution_bounding_keeps_exactly_c_rows_per_unit(tmp_path):
    # unit u has 1 + u % 6 rows, all in its own county: a county's count is min(rows, c)
    units = np.arange(60)
    rows = 1 + units % 6
    pid = np.repeat(units, rows)
    df = pd.DataFrame({"state": "01", "county": [f"{u:03d}" for u in pid], "age": np.arange(pid.size) % 3,
                       "sex": "F", "pid": pid})
    _write(df, tmp_path / "p", parts=3)
    doms = {"state": ["01"], "county": [f"{u:03d}" for u in units]}
    door = hierdp.dptree(str(tmp_path / "p"), levels=LEVELS, domains=doms, cells=CELLS, unit="pid",
                         max_contributions=3)
    values, notes = door.node_values(make_rng(None))
    leaves = door.tree.to_internal(values)[-60:].sum(axis=1)  # the counties, in label order
    np.testing.assert_array_equal(leaves, np.minimum(rows, 3))
    assert notes["rows_dropped_by_contribution_bound"] == int(np.maximum(rows - 3, 0).sum())
    r = door.release(epsilon=1.0)
    assert r.ledger.for_publication and r.ledger.secure_randomness
    assert all(ls.sensitivity_l1 == 3 for ls in r.ledger.levels)


def test_contribution_bounding_chooses_uniformly_and_by_seed(tmp_path):
    # 3000 units with 4 rows each, one per (age, sex) cell of four: c = 1 keeps one cell per unit
    n_units = 3000
    pid = np.repeat(np.arange(n_units), 4)
    cell = np.tile(np.arange(4), n_units)
    df = pd.DataFrame({"state": "01", "county": "001", "age": cell % 2, "sex": np.where(cell < 2, "F", "M"),
                       "pid": pid})
    _write(df, tmp_path / "p", parts=2)
    doms = {"state": ["01"], "county": ["001"]}
    door = hierdp.dptree(str(tmp_path / "p"), levels=LEVELS, domains=doms, cells={"age": [0, 1], "sex": ["F", "M"]},
                         unit="pid", max_contributions=1)
    counts = door.node_values(make_rng(11))[0][0]
    assert counts.sum() == n_units
    chi2 = float(((counts - n_units / 4) ** 2 / (n_units / 4)).sum())
    assert chi2 < 21.1  # chi-square, 3 degrees of freedom: P(> 21.1) < 1e-4 under the uniform law
    again = door.node_values(make_rng(11))[0][0]
    other = door.node_values(make_rng(12))[0][0]
    np.testing.assert_array_equal(counts, again)  # a seed reproduces the choice
    assert not np.array_equal(counts, other)  # another seed chooses otherwise
    a = door.release(epsilon=1.0, seed=5).values
    np.testing.assert_array_equal(a, door.release(epsilon=1.0, seed=5).values)
    # the pandas door's choice for the same seed (it depends on the rows' content, not their order)
    ref = df.sample(frac=1.0, random_state=3).dptree(levels=LEVELS, domains=doms, cells={"age": [0, 1],
                                                    "sex": ["F", "M"]}, unit="pid", max_contributions=1)
    np.testing.assert_array_equal(a, ref.release(epsilon=1.0, seed=5).values)


def test_contribution_bounding_in_several_chunks(tmp_path, monkeypatch):
    import hierdp.frontends.dataset as ds

    monkeypatch.setattr(ds, "_CHUNK_ROWS", 50)  # many chunks of whole units
    pid = np.repeat(np.arange(100), 5)
    df = pd.DataFrame({"state": "01", "county": [f"{u % 10:03d}" for u in pid], "pid": pid})
    _write(df, tmp_path / "p", parts=3)
    doms = {"state": ["01"], "county": [f"{u:03d}" for u in range(10)]}
    door = hierdp.dptree(str(tmp_path / "p"), levels=LEVELS, domains=doms, unit="pid", max_contributions=2)
    values, notes = door.node_values(make_rng(None))
    np.testing.assert_array_equal(door.tree.to_internal(values)[-10:], np.full(10, 20))
    assert notes["rows_dropped_by_contribution_bound"] == 300


# -- the counted dataset for the out-of-core runner ----------------------------------------
def test_counts_of_task_is_the_brute_force_sum(tmp_path):
    rng = np.random.default_rng(5)
    n = 20000
    states = [f"{s:02d}" for s in range(6)]
    counties = {s: [f"{s}{c:02d}" for c in range(5)] for s in states}
    tracts = {c: [f"{c}{t}" for t in range(4)] for cs in counties.values() for c in cs}
    tract = rng.choice([t for ts in tracts.values() for t in ts], n)
    df = pd.DataFrame({"state": [t[:2] for t in tract], "county": [t[:4] for t in tract], "tract": tract,
                       "age": rng.integers(0, 3, n), "sex": rng.choice(["F", "M"], n)})
    _write(df, tmp_path / "p", parts=5)
    doms = {"state": states, "county": counties, "tract": tracts}
    for cells in (CELLS, None):
        door = hierdp.dptree(str(tmp_path / "p"), levels=["state", "county", "tract"], domains=doms, cells=cells)
        counted = door.counted(tmp_path / f"work{cells is None}")
        assert counted.tree == door.tree and counted.n_cells == door.n_cells
        full = door.tree.to_internal(door.true_counts())  # brute force: every node's count, internal order
        part = subtrees.partition(door.tree, {"level": "county", "memory": 100 * 60 * door.n_cells},
                                  n_cells=door.n_cells)
        assert part.n_tasks >= 2
        tasks = [*part.tasks()]
        from hierdp.execution.stages import top_task

        for task in [top_task(part), *tasks]:
            got = counted.counts_of(task)
            np.testing.assert_array_equal(got, full[task.nodes])
            assert got.shape == ((task.n_nodes, 6) if cells else (task.n_nodes,))


def test_counts_of_a_task_reads_only_its_row_groups(tmp_path, monkeypatch):
    # DuckDB writes the counts file itself (the whole US's 52M block-cells were 8.7 GB as
    # numpy arrays), in row groups of whole vectors (2,048 rows): two counties of 1,024 cells
    import hierdp.frontends.dataset as ds

    monkeypatch.setattr(ds, "_ROW_GROUP", 2048)
    n_counties, k = 40, 1024
    df = pd.DataFrame({"state": [f"{c // 10}" for c in range(n_counties) for _ in range(k)],
                       "county": [f"{c:03d}" for c in range(n_counties) for _ in range(k)]})
    df["age"] = np.arange(len(df)) % k
    df.to_parquet(tmp_path / "r.parquet", index=False)
    door = hierdp.dptree(str(tmp_path / "r.parquet"), levels=LEVELS, domains="observed",
                         cells={"age": list(range(k))})
    counted = door.counted(tmp_path / "w")
    assert counted.path.stat().st_mode & 0o077 == 0  # true counts on disk: owner-only
    assert not [p.name for p in (tmp_path / "w").iterdir() if p.name not in ("counts.parquet", "counts.json")]
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(counted.path).metadata
    assert meta.num_row_groups == math.ceil(len(df) / 2048)
    stats = [meta.row_group(i).column(0).statistics for i in range(meta.num_row_groups)]
    assert all(a.max <= b.min for a, b in zip(stats, stats[1:]))  # sorted by leaf: groups in order
    part = subtrees.partition(door.tree, {"level": "state", "memory": 13 * 60 * k}, n_cells=k)  # a state a task
    task = part.task(1)
    leaves = task.nodes[door.tree.internal.n_children[task.nodes] == 0]
    touched = [i for i, s in enumerate(stats) if s.max >= leaves.min() and s.min <= leaves.max()]
    assert touched == [5, 6, 7, 8, 9]  # one state: 10 counties x 1,024 cells, 5 of the 20 groups
    full = door.tree.to_internal(door.true_counts())
    np.testing.assert_array_equal(counted.counts_of(task), full[task.nodes])


# -- the spec: source: {path: folder, format: parquet, engine: duckdb} ---------------------
SPEC = """hierdp: 1
source: {{path: '{path}'{extra}}}
hierarchy:
  levels:
    - {{name: state, domain: ['01', '02', '03']}}
    - {{name: county, domain: observed}}
cells:
  - {{name: age, domain: [0, 1, 2]}}
  - {{name: sex, domain: {{values: [F, M]}}}}
privacy: {{epsilon: 1}}
"""


def _spec(folder: Path, path: str, extra: str = "", text: str = SPEC) -> Path:
    f = folder / "s.yaml"
    f.write_text(text.format(path=path, extra=extra))
    return f


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_spec_engine_duckdb_gives_the_pandas_release(people, tmp_path, fmt):
    from hierdp.spec import run_spec
    from hierdp.spec.runner import prepare

    _write(people, tmp_path / "records", fmt=fmt)
    ref = run_spec(_spec(tmp_path, f"records/*.{fmt}"), seed=4, write=False)
    r = run_spec(_spec(tmp_path, "records/", f", format: {fmt}, engine: duckdb"), seed=4, write=False)
    assert r.meta["spec"].engine == "duckdb" and len(r.meta["spec"].source_files) == 4
    assert isinstance(prepare(r.meta["spec"]), DatasetDPTree)
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)


def test_spec_engine_duckdb_bad_inputs_are_one_line_each(people, tmp_path):
    from hierdp.errors import SpecError
    from hierdp.spec import run_spec, validate

    with pytest.raises(SpecError) as err:
        validate(_spec(tmp_path, "nowhere/", ", engine: duckdb"))
    assert "does not exist" in str(err.value) and "nowhere" in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="holds no Parquet or CSV file"):
        validate(_spec(tmp_path, "empty/", ", engine: duckdb"))
    with pytest.raises(SpecError, match="engine: duckdb reads each level and cell column under its own name"):
        _write(people.rename(columns={"state": "st"}), tmp_path / "r")
        validate(_spec(tmp_path, "r/", ", engine: duckdb",
                       text=SPEC.replace("{{name: state, domain", "{{name: state, column: st, domain")))
    _write(people, tmp_path / "ok")
    with pytest.raises(SpecError, match="source.filter is not supported"):
        validate(_spec(tmp_path, "ok/", ", engine: duckdb, filter: [{column: age, op: '<', value: 2}]"))
    broken = people.iloc[:10].copy()
    broken.iloc[3, broken.columns.get_loc("state")] = "77"
    broken.to_parquet(tmp_path / "ok" / "part-7.parquet", index=False)
    with pytest.raises(DataError) as err:
        run_spec(_spec(tmp_path, "ok/", ", engine: duckdb"), seed=1, write=False)
    assert "'state' values outside the declared domain" in str(err.value) and "part-7.parquet" in str(err.value)
    assert "77" not in str(err.value)


def test_zero_count_rows_are_not_observations(people, tmp_path):
    # as the pandas door: a row with count 0 (e.g. from groupby(observed=False)) observes nothing
    extra = pd.DataFrame({"state": ["03", "03"], "county": ["009", "009"], "age": [0, 1], "sex": ["F", "X"],
                          "pid": [0, 1], "n": [0, 0]})
    df = pd.concat([people, extra], ignore_index=True)
    _write(df, tmp_path / "p")
    kw = dict(levels=LEVELS, domains="observed", cells={"age": [0, 1, 2], "sex": "observed"}, count="n")
    door = hierdp.dptree(str(tmp_path / "p"), **kw)
    ref = df.dptree(**kw)
    assert door.tree == ref.tree and "03" not in list(door.tree.level_labels(1))
    assert list(door.cells["sex"]) == ["F", "M"]  # 'X' only on a zero-count row: neither observed nor an error
    np.testing.assert_array_equal(door.true_counts(), ref.true_counts())


def test_a_bad_value_in_a_row_the_bound_drops_still_raises_whatever_the_key(tmp_path):
    from tests.test_contributions import BAD_KW, _one_bad_row_in_a_big_unit

    _write(_one_bad_row_in_a_big_unit(), tmp_path / "p", parts=2)
    for seed in range(6):
        with pytest.raises(DataError, match="'sex' values outside the declared cell domain"):
            hierdp.dptree(str(tmp_path / "p"), **BAD_KW).node_values(make_rng(seed))


def test_counts_file_written_by_duckdb_equals_the_keys_placed_in_numpy(tmp_path):
    # the counts file DuckDB sorts and writes itself holds what the numpy path (kept for
    # records that join no leaf) makes of the same keys: internal leaf ids, cells, counts
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    n = 40
    df = pd.DataFrame({"state": rng.choice(["02", "01", "10"], n), "county": rng.choice(["b", "a", "c", "007"], n),
                       "age": rng.integers(0, 3, n), "w": rng.integers(1, 4, n)})
    df.to_parquet(tmp_path / "r.parquet", index=False)
    door = hierdp.dptree(str(tmp_path / "r.parquet"), levels=LEVELS, domains="observed", count="w",
                         cells={"age": [0, 1, 2]})
    keys, w, _ = door._leaf_keys()
    assert door.tree.internal.inverse_perm is None  # a level-complete tree: leaf ids as they are
    got = pq.read_table(door.counted(tmp_path / "w").path).to_pandas()
    for inv in (None, rng.permutation(door.tree.n_nodes)):  # and an internal order of another tree
        if inv is not None:
            from types import SimpleNamespace

            stub = SimpleNamespace(internal=SimpleNamespace(inverse_perm=inv))
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(type(door), "tree", property(lambda self, stub=stub: stub))
                assert door._leaf_keys(into=tmp_path / "w" / "again.parquet") is None
            got = pq.read_table(tmp_path / "w" / "again.parquet").to_pandas()
        leaf = keys // 3 if inv is None else inv[keys // 3]
        want = pd.DataFrame({"leaf": leaf, "cell": keys % 3, "count": w})
        want = want[want["count"] != 0].sort_values(["leaf", "cell"]).reset_index(drop=True)
        assert list(got.dtypes) == [np.int64, np.int32, np.int64]
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
