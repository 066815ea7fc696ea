"""The Polars door (``.dptree`` on polars DataFrames and LazyFrames, ``hierdp.dptree(pl_df)``).

The reference is the pandas door on the same records (``frame.to_pandas()``): for the same
seed the same release, bit for bit, contribution bounding included (the choice is checked
also against an independent reference of its law, tests/_bounding_reference.py), and its
errors word for word. LazyFrames are counted by Polars' streaming engine without collecting the records.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

pl = pytest.importorskip("polars", reason="the Polars door needs pip install 'hierdp[polars]'")

import hierdp  # noqa: E402
from hierdp.errors import DataError, MissingDependencyError  # noqa: E402
from hierdp.frontends import polars as door  # noqa: E402
from hierdp.frontends.base import door_rng  # noqa: E402

pytestmark = pytest.mark.polars

LEVELS = ["state", "county"]
# codes with leading zeros; state "03" is a leaf (no counties): its rows have a null county
DOMAINS = {"state": ["01", "02", "03"], "county": {"01": ["001", "002"], "02": ["001", "010"], "03": []}}
CELLS = {"age": [0, 1, 2], "sex": ["F", "M"]}
POST = ["blue", "nonneg", "round"]


@pytest.fixture(scope="module")
def people() -> pl.DataFrame:
    rng = np.random.default_rng(7)
    n = 3000
    state = rng.choice(["01", "02", "03"], n, p=[0.5, 0.4, 0.1])
    county = np.where(state == "01", rng.choice(["001", "002"], n), rng.choice(["001", "010"], n))
    return pl.DataFrame({"state": state, "county": pl.Series(np.where(state == "03", None, county), dtype=pl.String),
                         "age": rng.choice([0, 1, 2], n), "sex": rng.choice(["F", "M"], n),
                         "pid": rng.integers(0, 700, n), "n": rng.integers(0, 4, n)})


CASES = {
    "plain": dict(domains=DOMAINS),
    "cells": dict(domains=DOMAINS, cells=CELLS),
    "observed": dict(domains="observed", cells={"age": "observed", "sex": ["F", "M"]}),
    "bound-1": dict(domains=DOMAINS, unit="pid", max_contributions=1),
    "bound-3-cells": dict(domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=3),
    "weights": dict(domains=DOMAINS, cells=CELLS, count="n"),
    # float ages against integer labels: no exact join, the pandas placement places every path
    "float-cells": dict(domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=2, float_age=True),
}


@pytest.mark.parametrize("lazy", [False, True], ids=["DataFrame", "LazyFrame"])
@pytest.mark.parametrize("name", list(CASES))
def test_release_is_the_pandas_release(people, name, lazy):
    kw = dict(CASES[name])
    if kw.pop("float_age", False):
        people = people.with_columns(pl.col("age").cast(pl.Float64))
    ref_door = people.to_pandas().dptree(levels=LEVELS, **kw)
    ref = ref_door.release(epsilon=1.0, seed=11, postprocess=POST)
    data = people.lazy() if lazy else people.clone()  # a fresh object: no earlier releases of it
    got_door = data.dptree(levels=LEVELS, **kw)
    assert isinstance(got_door, door.PolarsDPTree)
    assert (got_door._key_tables is None) == (name == "float-cells")  # the join places rows (or cannot)
    r = got_door.release(epsilon=1.0, seed=11, postprocess=POST)
    assert r.tree == ref.tree
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)
    assert r.ledger.private_notes == ref.ledger.private_notes
    assert r.ledger.notes == ref.ledger.notes
    got, got_notes = got_door.node_values(door_rng(11, 97))  # the release's own draw for seed=11
    want, want_notes = ref_door.node_values(door_rng(11, 97))
    np.testing.assert_array_equal(got, want)
    assert got_notes == want_notes
    if "unit" in kw:  # units over the bound exist: the bound dropped rows
        assert r.ledger.private_notes["rows_dropped_by_contribution_bound"] > 0


def test_functional_form_and_namespace_agree(people):
    a = hierdp.dptree(people, levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=2)
    b = hierdp.dptree(people.lazy(), levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=2)
    c = people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=2)
    pd.testing.assert_frame_equal(a.frame, c.frame)
    pd.testing.assert_frame_equal(b.frame, c.frame)
    with pytest.raises(DataError, match=r"needs levels=\[\.\.\.\]"):
        hierdp.dptree(people, domains=DOMAINS)


@pytest.mark.parametrize("c", [1, 2])
def test_bounded_counts_are_the_hand_computed_choice(people, c):
    from hierdp.frontends._contributions import bounding_key
    from tests._bounding_reference import kept_rows

    frame = people.to_pandas()
    keep = kept_rows(frame, "pid", c, bounding_key(door_rng(5, 97)), content=LEVELS + list(CELLS))
    kept = people.filter(pl.Series(keep))
    want = kept.to_pandas().dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    d = people.lazy().dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=c)
    got, notes = d.node_values(door_rng(5, 97))
    np.testing.assert_array_equal(got, want)
    assert notes["rows_dropped_by_contribution_bound"] == int((~keep).sum())
    # the rows' order does not enter: a shuffled frame keeps the same counts
    shuffled = people.sample(fraction=1.0, shuffle=True, seed=3)
    d2 = shuffled.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=c)
    np.testing.assert_array_equal(d2.node_values(door_rng(5, 97))[0], want)


def test_lazyframe_is_counted_by_the_streaming_engine_without_collecting_records(people, monkeypatch):
    engines, heights = [], []
    collect = pl.LazyFrame.collect

    def spy(self, *args, **kwargs):
        engines.append(kwargs.get("engine"))
        out = collect(self, *args, **kwargs)
        heights.append(out.height)
        return out

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    big = pl.concat([people] * 4)
    d = big.lazy().dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS)
    d.release(epsilon=1.0, seed=1)
    assert engines and set(engines) == {"streaming"}
    assert max(heights) <= 8 * 3 * 2  # (path, cell) groups at most, never the 12000 records


def test_parquet_folder_with_an_empty_part(people, tmp_path):
    parts = [people.slice(0, 1000), people.slice(1000, 0), people.slice(1000, 2000)]
    for i, part in enumerate(parts):
        part.write_parquet(tmp_path / f"part-{i}.parquet")
    lf = pl.scan_parquet(str(tmp_path / "*.parquet"))
    kw = dict(domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=2)
    ref = people.to_pandas().dptree(levels=LEVELS, **kw).release(epsilon=1.0, seed=4)
    r = lf.dptree(levels=LEVELS, **kw).release(epsilon=1.0, seed=4)
    pd.testing.assert_frame_equal(r.frame, ref.frame)
    empty = people.slice(0, 0)
    for data in (empty, empty.lazy()):
        d = data.dptree(levels=LEVELS, domains=DOMAINS, unit="pid", max_contributions=1)
        np.testing.assert_array_equal(d.true_counts(), np.zeros(1 + 3 + 4, np.int64))


def _message(fn, name: str = "") -> str:
    try:
        fn()
    except DataError as exc:
        return str(exc)
    raise AssertionError(f"{name}: no DataError")


def _bad_frames(people: pl.DataFrame) -> dict[str, tuple[pl.DataFrame, dict]]:
    out_of_domain = people.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(pl.lit("099"))
                                        .otherwise(pl.col("county")).alias("county"))
    row7 = pl.int_range(pl.len()) == 7  # a county-level row of state "01" with a null county
    null_county = people.with_columns(pl.when(row7).then(pl.lit("01")).otherwise(pl.col("state")).alias("state"),
                                      pl.when(row7).then(None).otherwise(pl.col("county")).alias("county"))
    bad_cell = people.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(9).otherwise(pl.col("age")).alias("age"))
    null_unit = people.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(None).otherwise(pl.col("pid"))
                                    .alias("pid"))
    frac = people.with_columns((pl.col("n") + 0.5).alias("n"))
    nan = people.with_columns(pl.when(pl.int_range(pl.len()) == 9).then(float("nan")).otherwise(pl.col("n"))
                              .cast(pl.Float64).alias("n"))
    null_n = people.with_columns(pl.when(pl.int_range(pl.len()) == 9).then(None).otherwise(pl.col("n")).alias("n"))
    big = pl.DataFrame({"state": ["01"] * 2048, "county": ["001"] * 2048, "age": [0] * 2048,
                        "sex": ["F"] * 2048, "n": [2 ** 53] * 2048})
    return {
        "missing level": (people.drop("county"), dict(domains=DOMAINS)),
        "missing level observed": (people.drop("county"), dict(domains="observed")),
        "missing cell": (people.drop("sex"), dict(domains=DOMAINS, cells=CELLS)),
        "missing unit": (people.drop("pid"), dict(domains=DOMAINS, unit="pid", max_contributions=1)),
        "missing count": (people.drop("n"), dict(domains=DOMAINS, count="n")),
        "out of domain": (out_of_domain, dict(domains=DOMAINS)),
        "out of domain, cells": (out_of_domain, dict(domains=DOMAINS, cells=CELLS)),
        "null level": (null_county, dict(domains=DOMAINS, cells=CELLS)),
        "bad cell": (bad_cell, dict(domains=DOMAINS, cells=CELLS)),
        "null unit": (null_unit, dict(domains=DOMAINS, unit="pid", max_contributions=2)),
        "bound 0": (people, dict(domains=DOMAINS, unit="pid", max_contributions=0)),
        "text counts": (people.with_columns(pl.col("n").cast(pl.String)), dict(domains=DOMAINS, count="n")),
        "bool counts": (people.with_columns(pl.col("n") > 0), dict(domains=DOMAINS, count="n")),
        "negative counts": (people.with_columns(pl.col("n") - 2), dict(domains=DOMAINS, count="n")),
        "fractional counts": (frac, dict(domains=DOMAINS, count="n")),
        "NaN counts": (nan, dict(domains=DOMAINS, count="n")),
        "null counts": (null_n, dict(domains=DOMAINS, count="n")),
        "infinite counts": (nan.with_columns(pl.col("n").fill_nan(float("inf"))), dict(domains=DOMAINS, count="n")),
        "huge count": (people.with_columns(pl.col("n").cast(pl.UInt64) + 2 ** 63), dict(domains=DOMAINS, count="n")),
        "huge total": (big, dict(domains=DOMAINS, cells=CELLS, count="n")),
        "unknown": (people, dict(domains=DOMAINS, unknown="keep")),
    }


def test_errors_are_the_pandas_errors_word_for_word(people):
    for name, (frame, kw) in _bad_frames(people).items():
        want = _message(lambda f=frame, k=kw: f.to_pandas().dptree(levels=LEVELS, **k).true_counts(), name)
        for data in (frame, frame.lazy()):
            got = _message(lambda d=data, k=kw: d.dptree(levels=LEVELS, **k).true_counts(), name)
            assert got == want, name


def test_unknown_drop_and_out_of_domain_rows(people):
    frame, kw = _bad_frames(people)["out of domain, cells"]
    ref = frame.to_pandas().dptree(levels=LEVELS, unknown="drop", **kw).release(epsilon=1.0, seed=3)
    for data in (frame, frame.lazy()):
        d = data.dptree(levels=LEVELS, unknown="drop", **kw)
        r = d.release(epsilon=1.0, seed=3)
        pd.testing.assert_frame_equal(r.frame, ref.frame)
        assert r.ledger.private_notes == ref.ledger.private_notes == {"rows_dropped_out_of_domain": 1}
        bad = d.out_of_domain()
        bad = bad.collect() if isinstance(bad, pl.LazyFrame) else bad
        assert bad.to_dicts() == frame.slice(5, 1).to_dicts()


def test_a_missing_polars_gives_one_line_naming_the_extra(monkeypatch):
    monkeypatch.delitem(sys.modules, "hierdp.frontends.polars")  # restored (not re-imported) afterwards
    monkeypatch.setitem(sys.modules, "polars", None)  # "import polars" now fails
    with pytest.raises(MissingDependencyError) as info:
        __import__("hierdp.frontends.polars")
    assert str(info.value) == ("this feature needs the optional package 'polars'; install it with: "
                               "pip install 'hierdp[polars]'")


def test_import_hierdp_does_not_import_polars_and_registers_it_after():
    code = textwrap.dedent("""
        import sys, hierdp
        assert "polars" not in sys.modules, "import hierdp imported polars"
        import polars as pl
        d = pl.DataFrame({"s": ["01", "02"]}).dptree(levels=["s"], domains="observed")
        print(type(d).__name__, d.tree.n_nodes)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["PolarsDPTree", "3"]


SPEC = """hierdp: 1
source: {{path: '{path}'{extra}}}
hierarchy:
  levels:
    - {{name: state, domain: ['01', '02', '03']}}
    - {{name: county, domain: {{per_parent: {{'01': ['001', '002'], '02': ['001', '010'], '03': ['001', '010']}}}}}}
cells:
  - {{name: age, domain: [0, 1, 2]}}
  - {{name: sex, domain: {{values: [F, M]}}}}
privacy: {{epsilon: 1, unit: pid, max_contributions: 2}}
"""


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_spec_engine_polars_gives_the_pandas_release(people, tmp_path, fmt):
    from hierdp.spec import run_spec
    from hierdp.spec.runner import prepare

    records = tmp_path / "records"
    records.mkdir()
    # state 03 gets counties here (a YAML domain list needs a value); no nulls in a CSV round trip
    frame = people.with_columns(pl.col("county").fill_null("010"))
    for i in range(3):
        part = frame.slice(1000 * i, 1000)
        part.write_parquet(records / f"p{i}.parquet") if fmt == "parquet" else part.write_csv(records / f"p{i}.csv")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(path=f"records/*.{fmt}", extra=""))
    ref = run_spec(spec, seed=4, write=False)
    spec.write_text(SPEC.format(path="records/", extra=f", format: {fmt}, engine: polars"))
    r = run_spec(spec, seed=4, write=False)
    assert r.meta["spec"].engine == "polars"
    assert isinstance(prepare(r.meta["spec"]), door.PolarsDPTree)
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)


def test_spec_engine_polars_refuses_what_it_cannot_do(tmp_path):
    from hierdp.errors import SpecError
    from hierdp.spec import validate

    (tmp_path / "r.csv").write_text("state,county,age,sex,pid\n01,001,0,F,1\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(path="r.csv", extra=", engine: polars, filter: [{column: age, op: '<', value: 2}]"))
    with pytest.raises(SpecError, match="engine: polars counts every record of the files; source.filter"):
        validate(spec)


def test_spec_engine_polars_dataset_output_equals_the_pandas_one(people, tmp_path):
    from hierdp.spec.runner import release_dataset_spec

    records = tmp_path / "records"
    records.mkdir()
    frame = people.with_columns(pl.col("county").fill_null("010"))
    for i in range(2):
        frame.slice(1500 * i, 1500).write_parquet(records / f"p{i}.parquet")
    text = SPEC.replace("privacy: {{epsilon: 1, unit: pid, max_contributions: 2}}",
                        "privacy: {{epsilon: 1}}\nexecution: {{split: state, workers: 1}}")
    out = {}
    for engine in ("pandas", "polars"):
        spec = tmp_path / f"{engine}.yaml"
        spec.write_text(text.format(path="records/*.parquet", extra=f", engine: {engine}"))
        release_dataset_spec(spec, tmp_path / f"{engine}-out", seed=3)
        out[engine] = pd.read_parquet(tmp_path / f"{engine}-out").sort_values(["level", *LEVELS, "age", "sex"],
                                                                                ignore_index=True)
    assert len(out["polars"]) == (1 + 3 + 6) * 6
    pd.testing.assert_frame_equal(out["polars"], out["pandas"])


def test_a_bad_value_in_a_row_the_bound_drops_still_raises_whatever_the_key():
    from tests.test_contributions import BAD_KW, _one_bad_row_in_a_big_unit

    df = pl.from_pandas(_one_bad_row_in_a_big_unit())
    for seed in range(6):
        with pytest.raises(DataError, match="'sex' values outside the declared cell domain"):
            df.lazy().dptree(**BAD_KW).node_values(door_rng(seed, 97))
