"""Specs with histogram cells (``cells:``) and Dask sources (``source.engine: dask``).

References: a brute-force ``groupby`` of the records for the true histograms, and the
pandas engine (the one reader, :mod:`hierdp.io.readers`) for what the Dask engine must read.
The Dask tests use the synchronous scheduler (no cluster; ``tests/test_dask.py`` runs
the front-end on a real ``LocalCluster``).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from hierdp.errors import DataError, MissingDependencyError, SpecError
from hierdp.spec import run_spec, validate
from hierdp.spec.runner import prepare

STATES = ["01", "NA"]  # a leading zero and Namibia's code: labels, never numbers or missing values
AGES = ["0", "1", "2"]

SPEC = """hierdp: 1
source: {{path: '{path}'{extra}}}
hierarchy:
  levels:
    - {{name: state, column: st, domain: ['01', NA]}}
    - {{name: county, domain: [x, y]}}
cells:
  - {{name: age, domain: [0, 1, 2]}}
  - {{name: sex, column: s, domain: {{values: [F, M]}}}}
privacy: {{epsilon: 1}}
"""


@pytest.fixture
def records() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 900
    return pd.DataFrame({"st": rng.choice(STATES, n), "county": rng.choice(["x", "y"], n),
                         "age": rng.choice(AGES, n), "s": rng.choice(["F", "M"], n),
                         "other": rng.integers(0, 9, n)})


def _write_parts(df: pd.DataFrame, folder, fmt: str = "csv", parts: int = 3) -> str:
    for i, chunk in enumerate(np.array_split(np.arange(len(df)), parts)):
        part = df.iloc[chunk]
        if fmt.startswith("csv"):
            part.to_csv(folder / f"part{i}.{fmt}", index=False)
        else:
            part.to_parquet(folder / f"part{i}.parquet", index=False)
    return f"part*.{fmt}"


def _spec(folder, path: str, extra: str = "", text: str = SPEC):
    f = folder / "s.yaml"
    f.write_text(text.format(path=path, extra=extra))
    return f


# ------------------------------------------------------------------------------ cells
def test_spec_cells_count_each_record_in_its_node_and_cell(tmp_path, records):
    spec = _spec(tmp_path, _write_parts(records, tmp_path))
    dpt = prepare(validate(spec))
    assert dpt.n_cells == 6 and list(dpt.cells) == ["age", "sex"]
    assert list(dpt.cells["age"]) == AGES  # YAML's numbers 0, 1, 2 are the labels '0', '1', '2'
    truth = dpt.true_counts()  # (n, k), external order
    # brute force: the state level's histograms from a groupby of the records
    g = records.groupby(["st", "age", "s"]).size()
    for s_i, st in enumerate(STATES):
        node = dpt.tree.level_nodes("state")[s_i]
        expect = [g.get((st, a, x), 0) for a in AGES for x in ["F", "M"]]
        np.testing.assert_array_equal(truth[node], expect)
    np.testing.assert_array_equal(truth[0], records.groupby(["age", "s"]).size().to_numpy())


def test_spec_cells_reach_the_output_table_with_their_labels(tmp_path, records):
    spec = _spec(tmp_path, _write_parts(records, tmp_path))
    out = tmp_path / "out.csv"
    r = run_spec(spec, seed=2, output=out)
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert {"age", "sex"} <= set(table.columns)
    assert set(table["state"]) == {"", "01", "NA"} and set(table["age"]) == set(AGES)
    assert len(table) == r.tree.n_nodes * 6
    assert any("histogram cells per node" in n for n in r.ledger.notes)


@pytest.mark.parametrize("line, message", [
    ("{name: age, domain: [0, 1, 2]}\n  - {name: state, domain: [a]}", "'state' is both a level"),
    ("{name: age, domain: [0, 1, 2]}\n  - {name: age, column: other, domain: [1]}", "duplicate cell name 'age'"),
    ("{name: age, domain: {file: ages.csv, column: years}}", "has no column 'years'"),
    ("{name: age, domain: {values: [0, 1], column: age}}", "`column` only applies to a domain file"),
    ("{name: level, column: age, domain: [0, 1, 2]}", "cell name 'level' is the name of an output column"),
    ("{name: age, column: county, domain: [0, 1, 2]}", "column 'county' is already used by level 1"),
])
def test_bad_cells_sections_are_spec_errors(tmp_path, records, line, message):
    (tmp_path / "ages.csv").write_text("age\n0\n1\n2\n")
    text = SPEC.replace("{{name: age, domain: [0, 1, 2]}}", line.replace("{", "{{").replace("}", "}}"))
    with pytest.raises(SpecError, match=message):
        validate(_spec(tmp_path, _write_parts(records, tmp_path), text=text))


def test_a_missing_cell_column_is_found_from_the_header(tmp_path, records):
    path = _write_parts(records.drop(columns="s"), tmp_path)
    with pytest.raises(SpecError, match=r"cells\[1\].*cell column 's' is not in the source"):
        validate(_spec(tmp_path, path))


def test_cell_domain_files_keep_labels_as_text(tmp_path, records):
    (tmp_path / "ages.txt").write_text("0\n1\n2\n")
    (tmp_path / "sexes.csv").write_text("code,label\nF,female\nM,male\n")
    text = (SPEC.replace("domain: [0, 1, 2]", "domain: {{file: ages.txt}}")
            .replace("domain: {{values: [F, M]}}", "domain: {{file: sexes.csv, column: code}}"))
    spec = validate(_spec(tmp_path, _write_parts(records, tmp_path), text=text))
    assert {p.name for p in spec.input_files()} >= {"ages.txt", "sexes.csv"}
    dpt = prepare(spec)
    assert list(dpt.cells["age"]) == AGES and list(dpt.cells["sex"]) == ["F", "M"]


def test_observed_cells_warn_and_an_out_of_domain_cell_is_the_pandas_error(tmp_path, records):
    text = SPEC.replace("domain: {{values: [F, M]}}", "domain: observed")
    spec = validate(_spec(tmp_path, _write_parts(records, tmp_path), text=text))
    assert any("cell 'sex' uses `observed`" in w for w in spec.warnings)
    bad = records.assign(age=records["age"].where(records.index != 7, "9"))
    spec = validate(_spec(tmp_path, _write_parts(bad, tmp_path)))
    with pytest.raises(DataError, match="'age' values outside the declared cell domain"):
        prepare(spec).true_counts()


# ------------------------------------------------------------------------------- dask
@pytest.fixture
def sync_dask():
    dask = pytest.importorskip("dask")
    pytest.importorskip("dask.dataframe")
    with dask.config.set(scheduler="synchronous"):
        yield


# dask's own Parquet reader calls a pandas method pandas 3.1 deprecates (not hierdp's code)
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.reset_index")
@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_engine_dask_gives_the_pandas_release(tmp_path, records, sync_dask, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    path = _write_parts(records, tmp_path, fmt)
    ref = run_spec(_spec(tmp_path, path), seed=4, write=False)
    r = run_spec(_spec(tmp_path, path, ", engine: dask"), seed=4, write=False)
    from hierdp.frontends.dask import DaskDPTree

    assert r.meta["spec"].engine == "dask"
    assert isinstance(prepare(r.meta["spec"]), DaskDPTree)
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)


def test_engine_dask_reads_by_the_readers_rules_and_filters_per_partition(tmp_path, records, sync_dask):
    # 'NA' and '01' stay labels; an empty cell is missing (the pandas error); filters run per partition
    path = _write_parts(records, tmp_path)
    text = SPEC.replace("privacy:", "privacy:").replace("'{path}'{extra}", "'{path}'{extra}, filter: "
                                                        "[{{column: other, op: '<', value: 5}}]")
    ref = run_spec(_spec(tmp_path, path, text=text), seed=1, write=False)
    r = run_spec(_spec(tmp_path, path, ", engine: dask", text=text), seed=1, write=False)
    pd.testing.assert_frame_equal(r.frame, ref.frame)
    kept = records[records["other"] < 5]
    assert r.tree.n_nodes == 7 and int(prepare(r.meta["spec"]).true_counts()[0].sum()) == len(kept)

    holes = records.astype(object)
    holes.loc[600, "st"] = None  # an empty cell in the last part
    path = _write_parts(holes, tmp_path)
    errors = []
    for extra in ("", ", engine: dask"):
        with pytest.raises(DataError) as info:
            run_spec(_spec(tmp_path, path, extra), seed=1, write=False)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "missing 'state'" in errors[0]


def test_engine_dask_validation_reads_only_headers(tmp_path, records, sync_dask, monkeypatch):
    import dask.dataframe as dd

    spec_path = _spec(tmp_path, _write_parts(records, tmp_path), ", engine: dask")
    calls = []
    real = pd.read_csv

    def spy(*args, **kwargs):
        calls.append(kwargs.get("nrows"))
        return real(*args, **kwargs)

    def forbidden(*a, **k):
        raise AssertionError("validation must not read the source's data")

    monkeypatch.setattr(pd, "read_csv", spy)
    monkeypatch.setattr(dd, "read_csv", forbidden)
    spec = validate(spec_path)
    assert set(calls) == {0} and spec.engine == "dask"


def test_engine_dask_without_dask_is_a_one_line_error_naming_the_extra(tmp_path, records, monkeypatch):
    spec_path = _spec(tmp_path, _write_parts(records, tmp_path), ", engine: dask")
    spec = validate(spec_path) if "dask.dataframe" in sys.modules or _has_dask() else None
    for name in [m for m in sys.modules if m == "dask" or m.startswith("dask.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "dask", None)  # import dask -> ImportError
    with pytest.raises(SpecError, match=r"engine: dask needs the optional package dask .*pip install "
                                        r"'hierdp\[dask\]'") as info:
        validate(spec_path)
    assert "\n" not in str(info.value)
    if spec is not None:  # validated while dask was there, run without it
        with pytest.raises(MissingDependencyError, match=r"pip install 'hierdp\[dask\]'"):
            run_spec(spec, write=False)


def _has_dask() -> bool:
    try:
        import dask.dataframe  # noqa: F401
    except ImportError:
        return False
    return True


def test_engine_dask_needs_source_files(tmp_path):
    text = ("hierdp: 1\nsource: {demo: census, engine: dask}\nhierarchy:\n  paths: {demo: census}\n"
            "  levels: [{name: state}]\nprivacy: {epsilon: 1}\n")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(SpecError, match="engine: dask reads source files"):
        validate(tmp_path / "s.yaml")


@pytest.mark.cluster
def test_engine_dask_bounds_contributions_on_a_cluster(tmp_path, records):
    """A spec with engine: dask, unit and max_contributions on a 2-process LocalCluster and 4
    CSV parts: each unit keeps min(rows, c) rows, whichever rows the workers choose."""
    dask = pytest.importorskip("dask")
    distributed = pytest.importorskip("distributed")
    people = records.assign(pid=np.random.default_rng(3).integers(0, 200, len(records)).astype(str))
    path = _write_parts(people, tmp_path, parts=4)
    text = SPEC.replace("privacy: {{epsilon: 1}}", "privacy: {{epsilon: 1, unit: pid, max_contributions: 2}}")
    per_unit = people.groupby("pid").size()
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                                     silence_logs=50) as cluster, distributed.Client(cluster):
        spec = validate(_spec(tmp_path, path, ", engine: dask", text=text))
        assert spec.engine == "dask" and spec.max_contributions == 2
        r = run_spec(spec, write=False)
        kept = prepare(spec).true_counts()
    assert int(kept[0].sum()) == int(np.minimum(per_unit, 2).sum())
    assert r.ledger.private_notes["rows_dropped_by_contribution_bound"] == int(np.maximum(per_unit - 2, 0).sum())
    assert r.ledger.for_publication  # no seed: secure randomness on the workers
    est = r.estimate.values
    states = r.tree.level_nodes("state")
    np.testing.assert_allclose(est[states].sum(axis=0), est[0], atol=1e-6)  # every cell consistent


COUNT_SPEC = """hierdp: 1
source: {{path: 'c*.csv', count: n{extra}}}
hierarchy:
  levels:
    - {{name: state, domain: [A, B]}}
cells:
  - {{name: sex, domain: [F, M]}}
privacy: {{epsilon: 1}}
"""


@pytest.mark.parametrize("bad, message", [("1.5", "has non-integer counts"), ("", "has missing values"),
                                          ("-2", "has negative counts"), ("9007199254740993", r"exceeds 2\*\*53"),
                                          ("many", "must hold non-negative integers")])
def test_engine_dask_checks_a_count_column_as_pandas_does(tmp_path, sync_dask, bad, message):
    # the first part is clean (Dask would infer int64 from it); the bad value is in the last one
    (tmp_path / "c0.csv").write_text("state,sex,n\nA,F,3\nB,M,4\n")
    (tmp_path / "c1.csv").write_text(f"state,sex,n\nA,M,2\nB,F,{bad}\n")
    errors = []
    for extra in ("", ", engine: dask"):
        (tmp_path / "s.yaml").write_text(COUNT_SPEC.format(extra=extra))
        with pytest.raises(DataError, match=message) as info:
            run_spec(tmp_path / "s.yaml", seed=1, write=False)
        errors.append(str(info.value))
    # text in the count column: its dtype depends on how the parts were joined (object, str, string)
    assert errors[0].split("got dtype")[0] == errors[1].split("got dtype")[0]


def test_engine_dask_pre_aggregated_counts_are_the_pandas_release(tmp_path, sync_dask):
    (tmp_path / "c0.csv").write_text("state,sex,n\nA,F,3\nB,M,4\n")
    (tmp_path / "c1.csv").write_text("state,sex,n\nA,M,2\nB,F,5\nA,F,1\n")
    results = []
    for extra in ("", ", engine: dask"):
        (tmp_path / "s.yaml").write_text(COUNT_SPEC.format(extra=extra))
        results.append(run_spec(tmp_path / "s.yaml", seed=6, write=False))
    assert prepare(results[1].meta["spec"]).true_counts()[0].tolist() == [4 + 5, 2 + 4]  # F, M over both files
    pd.testing.assert_frame_equal(results[1].frame, results[0].frame)


def test_engine_dask_infers_a_filter_column_per_file_as_pandas_does(tmp_path, sync_dask):
    # numbers in the first file, text in the second: pandas infers per file; Dask alone would
    # guess int64 from the first rows and fail at 'x'
    (tmp_path / "c0.csv").write_text("state,sex,o\nA,F,1\nA,M,2\nB,F,3\n")
    (tmp_path / "c1.csv").write_text("state,sex,o\nB,M,x\nA,F,y\n")
    spec = COUNT_SPEC.replace("count: n{extra}", "filter: [{{column: o, op: '!=', value: 2}}]{extra}")
    counts = []
    for extra in ("", ", engine: dask"):
        (tmp_path / "s.yaml").write_text(spec.format(extra=extra))
        counts.append(prepare(validate(tmp_path / "s.yaml")).true_counts())
    np.testing.assert_array_equal(counts[1], counts[0])
    assert counts[0][0].tolist() == [3, 1]  # kept: (A, F, 1), (B, F, 3), (B, M, x), (A, F, y)


def test_hierdp_validate_states_the_cells_and_the_engine(tmp_path, records, capsys, sync_dask):
    from hierdp.cli import main

    spec = _spec(tmp_path, _write_parts(records, tmp_path), ", engine: dask")
    assert main(["validate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "(total > state > county with cells age x sex = 6 cells; engine dask; ε = 1;" in out


def test_a_histogram_release_is_a_prior_of_node_totals(tmp_path, records):
    from hierdp.spec.runner import load_prior

    path = _write_parts(records, tmp_path)
    first = run_spec(_spec(tmp_path, path), seed=2, output=tmp_path / "first.csv")
    text = SPEC + "budget: {{strategy: optimal, params: {{prior: {{file: first.csv}}}}}}\n"
    spec = validate(_spec(tmp_path, path, text=text))
    prior = load_prior(spec, first.tree, {"file": "first.csv"})
    # each node's prior is its released histogram's total (6 rows of the table per node)
    np.testing.assert_allclose(prior, first.estimate.values.sum(axis=1))
    r = run_spec(spec, seed=2, write=False)
    assert r.values.shape == (7, 6)
