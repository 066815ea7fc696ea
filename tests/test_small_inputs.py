"""Small defects a new user meets (issue 50 item 7, issue 53 item 5): each with one clear
line, or the right result."""

from __future__ import annotations

import csv
import gzip
import io
import json
import warnings

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import io as hio

# --------------------------------------------------------------------------------------
# CSV tables: text a spreadsheet would run as a formula is quoted (OWASP "CSV injection")

#: label as given -> the cell a CSV table holds (written by hand from the OWASP rule)
LABELS = {
    '=HYPERLINK("http://x","y")': '\'=HYPERLINK("http://x","y")',
    "+cmd|' /C calc'!A0": "'+cmd|' /C calc'!A0",
    "-2+3": "'-2+3",
    "@SUM(A1)": "'@SUM(A1)",
    "\tx": "'\tx",
    "-": "'-",
    "-1": "-1",  # plain numbers stay as they are
    "+3.5": "+3.5",
    "-2e3": "-2e3",
    "plain": "plain",
    "a=b": "a=b",
}


def _frame() -> pd.DataFrame:
    given = list(LABELS)
    return pd.DataFrame({
        "level": pd.Categorical(["county"] * len(given)),
        "cat": pd.Categorical(given),
        "text": pd.Series(given, dtype="str"),
        "obj": pd.Series(given, dtype=object),
        "estimate": np.linspace(-2.0, 3.0, len(given)),
        "n": np.arange(-3, len(given) - 3),
    })


def _cells(raw: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))


def _check_csv(rows: list[list[str]], frame: pd.DataFrame) -> None:
    assert rows[0] == ["level", "cat", "text", "obj", "estimate", "n"]
    want = list(LABELS.values())
    for col in (1, 2, 3):
        assert [r[col] for r in rows[1:]] == want
    # numeric columns untouched, negative values included
    assert [float(r[4]) for r in rows[1:]] == frame["estimate"].tolist()
    assert [int(r[5]) for r in rows[1:]] == frame["n"].tolist()


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz"])
def test_csv_tables_quote_formula_labels(tmp_path, name):
    frame = _frame()
    hio.write_table(frame, tmp_path / name)
    raw = (tmp_path / name).read_bytes()
    _check_csv(_cells(gzip.decompress(raw) if name.endswith(".gz") else raw), frame)


def test_csv_to_a_stream_quotes_formula_labels():
    frame = _frame()
    buf = io.BytesIO()
    hio.write_release_to_stream(frame, json.dumps({"release_id": "r"}), buf, "csv")
    _check_csv(_cells(buf.getvalue()), frame)


def test_csv_header_cells_are_quoted_too():
    buf = io.BytesIO()
    hio.write_release_to_stream(pd.DataFrame({"=bad": ["a"], "-1": [1]}), "{}", buf, "csv")
    assert _cells(buf.getvalue())[0] == ["'=bad", "-1"]


def test_two_labels_that_quote_alike_stay_two_cells():
    frame = pd.DataFrame({"cat": pd.Categorical(["=x", "'=x"]), "v": [1.0, 2.0]})
    buf = io.BytesIO()
    hio.write_release_to_stream(frame, "{}", buf, "csv")
    assert [r[0] for r in _cells(buf.getvalue())[1:]] == ["'=x", "'=x"]


def test_parquet_and_json_keep_the_raw_labels(tmp_path):
    frame = _frame()
    hio.write_release(frame, json.dumps({"release_id": "r"}), tmp_path / "t.parquet")
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert back["text"].tolist() == list(LABELS)
    hio.write_release(frame, json.dumps({"release_id": "r"}), tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert [r["text"] for r in doc["table"]] == list(LABELS)


def test_a_release_with_formula_labels_writes_a_safe_csv(tmp_path):
    df = pd.DataFrame({"state": ["=HYPERLINK(\"x\")", "-1", "+3.5", "b"], "county": ["@z", "x", "y", "-5"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=1)
    hio.write_release(res.frame, "{}", tmp_path / "r.csv")
    rows = _cells((tmp_path / "r.csv").read_bytes())
    states = {r[1] for r in rows[1:] if r[1]}
    counties = {r[2] for r in rows[1:] if r[2]}
    assert states == {"'=HYPERLINK(\"x\")", "-1", "+3.5", "b"}
    assert counties == {"'@z", "x", "y", "-5"}


# --------------------------------------------------------------------------------------
# seeds: one line saying the range

TREE = hierdp.Tree.from_parent(np.array([-1, 0, 0]))


@pytest.mark.parametrize("seed", [10**400, 2**256], ids=["400 digits", "2**256"])
def test_a_huge_seed_is_one_clear_line(seed):
    with pytest.raises(hierdp.DataError, match=r"seed must be below 2\*\*256 .*got a (401|78)-digit number") as info:
        hierdp.release(TREE, np.array([5, 2, 3]), epsilon=1.0, seed=seed)
    assert str(seed)[:20] not in str(info.value)
    df = pd.DataFrame({"state": ["a", "b"]})
    with pytest.raises(hierdp.DataError, match=r"seed must be below 2\*\*256"):
        df.dptree(levels=["state"], domains="observed").release(epsilon=1.0, seed=seed)


def test_the_largest_seed_is_accepted():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = hierdp.release(TREE, np.array([5, 2, 3]), epsilon=1.0, seed=2**256 - 1)
    assert res.ledger is not None


def test_a_huge_seed_on_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    from hierdp.cli import EXIT_USER, main

    assert main(["release", "demo", "-q", "--seed", str(10**400), "-o", str(tmp_path / "o.csv")]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed must be below 2**256" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_a_huge_seed_in_a_spec_is_refused_by_validation():
    from hierdp.spec.runner import load_spec

    with pytest.raises(hierdp.SpecError, match=r"seed: seed must be below 2\*\*256 .*401-digit"):
        load_spec("demo", seed=10**400)


# --------------------------------------------------------------------------------------
# threads: a count past 1024 is refused with one line (10**6 made DuckDB hang)

@pytest.mark.parametrize("count", [1025, 10**6, 10**400], ids=["1025", "10**6", "400 digits"])
def test_too_many_threads_is_one_line(monkeypatch, restore_threads, count):
    with pytest.raises(ValueError, match=r"threads must be at most 1024 threads") as info:
        hierdp.set_threads(count)
    assert "\n" not in str(info.value) and len(str(info.value)) < 200
    hierdp.set_threads(None)
    monkeypatch.setenv("HIERDP_THREADS", str(count))
    with pytest.raises(ValueError, match=r"HIERDP_THREADS must be at most 1024"):
        hierdp.get_threads()


def test_1024_threads_are_accepted(monkeypatch, restore_threads):
    hierdp.set_threads(1024)
    assert hierdp.get_threads() == 1024


def test_too_many_threads_on_the_command_line_exits_2(monkeypatch, capsys, tmp_path):
    from hierdp.cli import EXIT_USER, main

    assert main(["release", "demo", "-q", "--threads", "1000000", "-o", str(tmp_path / "o.csv")]) == EXIT_USER
    assert "--threads must be at most 1024" in capsys.readouterr().err
    monkeypatch.setenv("HIERDP_THREADS", "1000000")
    assert main(["release", "demo", "-q", "-o", str(tmp_path / "o.csv")]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HIERDP_THREADS must be at most 1024" in err
    assert not list(tmp_path.iterdir())


def test_the_dataset_door_refuses_a_million_duckdb_threads(tmp_path):
    pytest.importorskip("duckdb")
    pd.DataFrame({"state": ["a", "b"]}).to_parquet(tmp_path / "p.parquet")
    with pytest.raises(hierdp.DataError, match=r"threads=1000000: at most 1024"):
        hierdp.dptree(str(tmp_path / "p.parquet"), levels=["state"], domains="observed", threads=10**6)


# --------------------------------------------------------------------------------------
# epsilon_share (structure_share): a number, never text

def _share_doors():
    from hierdp.frontends.points import release_points
    from hierdp.frontends.sequences import release_sequences
    from hierdp.frontends.taxonomy import release_mixed, release_taxonomy

    rows = [("eu", "fr"), ("eu", "de"), ("am", "us")]
    tax = hierdp.Tree.from_frame(pd.DataFrame(rows, columns=["region", "country"]), ["region", "country"],
                                 domains={"region": "observed", "country": pd.DataFrame(rows, columns=["region",
                                                                                                     "country"])})
    pts = pd.DataFrame({"x": [0.1, 0.5, 0.9], "y": [0.2, 0.4, 0.8]})
    frame = pd.DataFrame({"x": [0.1, 0.5], "country": ["fr", "us"]})
    return {
        "points": lambda **kw: release_points(pts, columns=["x", "y"], bounds=[(0, 1), (0, 1)], **kw),
        "grid": lambda **kw: release_points(pts, columns=["x", "y"], bounds=[(0, 1), (0, 1)], method="grid", **kw),
        "sequences": lambda **kw: release_sequences(["ab", "ba"], max_length=4, alphabet="ab", **kw),
        "taxonomy": lambda **kw: release_taxonomy(tax, np.array([3, 2, 1]), **kw),
        "mixed": lambda **kw: release_mixed(frame, {"x": (0, 1)}, {"country": tax}, **kw),
    }


@pytest.mark.parametrize("door", ["points", "grid", "sequences", "taxonomy", "mixed"])
@pytest.mark.parametrize("spelling", ["epsilon_share", "structure_share"])
def test_a_share_given_as_text_is_refused_before_any_budget_is_spent(door, spelling):
    session = hierdp.Session(epsilon=2.0)
    with pytest.raises(hierdp.BudgetError, match=r"epsilon_share must be a number strictly between 0 and 1, got the "
                                                 r"string '0.5'; pass a number, e.g. epsilon_share=0.5"):
        _share_doors()[door](epsilon=1.0, session=session, **{spelling: "0.5"})
    assert session.releases == ()
    with pytest.raises(hierdp.BudgetError, match=r"strictly between 0 and 1, got 1.5"):
        _share_doors()[door](epsilon=1.0, session=session, **{spelling: 1.5})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _share_doors()[door](epsilon=1.0, session=session, **{spelling: 0.5})
    assert len(session.releases) == 1


# --------------------------------------------------------------------------------------
# a lone surrogate in a label: one line naming the level and the position, at the door

def _obj(*values):
    return pd.Series(list(values), dtype=object)


SURROGATE_FRAME = pd.DataFrame({"state": _obj("a", "b", "\ud800", "a"), "county": _obj("x", "y", "z", "w"),
                                "sex": _obj("F", "M", "F", "\udc80")})
LEVEL_MESSAGE = r"^level column 'state' holds text that is not valid Unicode at position 2 \(0-based; the label"


@pytest.mark.parametrize("door", [
    lambda df, **kw: df.dptree(levels=["state", "county"], **kw),
    lambda df, **kw: hierdp.dptree(df, levels=["state", "county"], **kw),
    lambda df, **kw: hierdp.Tree.from_frame(df, ["state", "county"], **kw),
], ids=["accessor", "hierdp.dptree", "Tree.from_frame"])
@pytest.mark.parametrize("domains", ["observed", {"state": ["a", "b"], "county": "observed"}], ids=["observed",
                                                                                                   "declared"])
def test_a_lone_surrogate_in_a_level_column_is_one_line(door, domains):
    with pytest.raises(hierdp.DataError, match=LEVEL_MESSAGE) as info:
        door(SURROGATE_FRAME, domains=domains)
    text = str(info.value)
    assert "\n" not in text and "\ud800" not in text and "surrogateescape" in text


def test_a_lone_surrogate_in_a_categorical_level_column_names_its_first_row():
    cats = pd.Index(["b", "\ud800", "a"], dtype=object)
    df = SURROGATE_FRAME.assign(state=pd.Categorical(_obj("a", "b", "\ud800", "a"), categories=cats))
    with pytest.raises(hierdp.DataError, match=LEVEL_MESSAGE):
        df.dptree(levels=["state", "county"], domains="observed")


def test_a_lone_surrogate_in_a_cell_column_or_a_declared_domain_is_one_line():
    df = SURROGATE_FRAME.assign(state=["a", "b", "a", "a"])
    with pytest.raises(hierdp.DataError, match=r"^cell column 'sex' holds text that is not valid Unicode at "
                                               r"position 3 \(0-based"):
        df.dptree(levels=["state", "county"], domains="observed", cells={"sex": "observed"})
    with pytest.raises(hierdp.DataError, match=r"^the domain of level 'state' holds text that is not valid Unicode "
                                               r"at position 1 \(0-based; a declared value\)"):
        df.dptree(levels=["state", "county"], domains={"state": ["a", "\udcff", "b"], "county": "observed"})
    with pytest.raises(hierdp.DataError, match=r"^the domain of cell dimension 'sex' holds text that is not valid "
                                               r"Unicode at position 0"):
        df.assign(sex="F").dptree(levels=["state", "county"], domains="observed",
                                  cells={"sex": np.array(["\ud800", "F"])})


def test_a_lone_surrogate_spends_no_budget():
    session = hierdp.Session(epsilon=1.0)
    with pytest.raises(hierdp.DataError, match="not valid Unicode"):
        hierdp.dptree(SURROGATE_FRAME, levels=["state", "county"], domains="observed").release(
            epsilon=1.0, session=session)
    assert session.releases == ()


def test_valid_text_and_mixed_labels_still_pass():
    df = pd.DataFrame({"state": _obj("a", 1, "é", "\U0001f600"), "county": _obj("x", "y", "z", "w")})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=1)
    assert set(res.frame["state"].dropna().astype(str)) == {"a", "1", "é", "\U0001f600"}


def test_a_lone_surrogate_among_distinct_cell_values_names_no_row():
    from hierdp.frontends._cells import resolve_cells

    with pytest.raises(hierdp.DataError, match=r"^cell column 'sex' holds text that is not valid Unicode \(the label "
                                               r"is not shown"):
        resolve_cells({"sex": "observed"}, levels=["state"], root="total", observed=lambda name: _obj("F", "\udc80"))


# --------------------------------------------------------------------------------------
# a Polars frame as domains= (public paths) is accepted, for the whole hierarchy or a level

PATH_ROWS = {"state": ["a", "a", "b", "b"], "county": ["x", "y", "z", "w"]}


def _polars_cases():
    pl = pytest.importorskip("polars")
    paths = pl.DataFrame(PATH_ROWS)
    return paths, [paths, paths.lazy(), {"state": "observed", "county": paths}, {"state": paths, "county": paths}]


def test_polars_paths_as_domains_give_the_pandas_tree():
    paths, cases = _polars_cases()
    df = pd.DataFrame({"state": ["a", "a", "b"], "county": ["x", "y", "z"]})
    want = df.dptree(levels=["state", "county"], domains=pd.DataFrame(PATH_ROWS)).tree
    # by hand: total, 2 states, 4 counties (w is declared, absent from the data)
    assert want.n_nodes == 7 and want.n_leaves == 4
    for domains in cases:
        got = df.dptree(levels=["state", "county"], domains=domains).tree
        assert np.array_equal(got.parent, want.parent) and got.n_leaves == 4
        assert hierdp.Tree.from_frame(df, ["state", "county"], domains=domains).n_nodes == 7
    polars_data = hierdp.dptree(__import__("polars").from_pandas(df), levels=["state", "county"], domains=paths)
    assert polars_data.tree.n_nodes == 7


def test_other_frames_as_domains_are_named_fully_with_the_way_to_convert():
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(hierdp.HierarchyError, match=r"got pyarrow\.lib\.Table; convert it to a pandas DataFrame "
                                                    r"first \(e\.g\. its \.to_pandas\(\)\)"):
        pd.DataFrame(PATH_ROWS).dptree(levels=["state", "county"], domains=pa.table(PATH_ROWS))


# --------------------------------------------------------------------------------------
# a misspelt keyword at a door: "did you mean"

KW_FRAME = pd.DataFrame({"state": ["a", "a", "b"], "county": ["x", "y", "z"]})


def _kw_doors(tmp_path):
    doors = {
        "df.dptree()": lambda **kw: KW_FRAME.dptree(**kw),
        "hierdp.dptree()": lambda **kw: hierdp.dptree(KW_FRAME, **kw),
        "counts.dptree()": lambda **kw: KW_FRAME.groupby(["state", "county"]).size().dptree(**kw),
    }
    try:
        import polars as pl

        doors["df.dptree() (polars)"] = lambda **kw: pl.from_pandas(KW_FRAME).dptree(**kw)
    except ImportError:
        pass
    try:
        import duckdb  # noqa: F401

        KW_FRAME.to_parquet(tmp_path / "p.parquet")
        doors["hierdp.dptree(path)"] = lambda **kw: hierdp.dptree(str(tmp_path / "p.parquet"), **kw)
    except ImportError:
        pass
    return doors


def test_a_misspelt_keyword_at_a_door_says_did_you_mean(tmp_path):
    for where, door in _kw_doors(tmp_path).items():
        if where != "counts.dptree()":
            with pytest.raises(hierdp.UnknownKeywordError, match=r"got an unknown keyword 'level'; did you mean "
                                                                  r"'levels'\?"):
                door(level=["state", "county"], domains="observed")
            kw = {"levels": ["state", "county"]}
        else:
            kw = {}
        with pytest.raises(hierdp.UnknownKeywordError, match=r"got an unknown keyword 'domain'; did you mean "
                                                              r"'domains'\?") as info:
            door(domain="observed", **kw)
        assert ".dptree(" in str(info.value).split(" got ")[0], where
        assert isinstance(info.value, TypeError)  # still a TypeError for code that catches one
        assert door(domains="observed", **kw).tree.n_nodes == 6


def test_the_accessor_keeps_its_signature_for_help():
    import inspect

    params = inspect.signature(pd.DataFrame.dptree.__call__).parameters
    assert list(params)[:3] == ["self", "levels", "domains"]


# --------------------------------------------------------------------------------------
# the report writes a sensitivity as a reader does (√2); the ledger's JSON keeps the double

def test_the_report_writes_root_two_and_the_ledger_keeps_the_double(tmp_path):
    import math

    from tests.test_report import _column, _parse

    df = pd.DataFrame({"state": ["a", "a", "b"], "county": ["x", "y", "z"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = df.dptree(levels=["state", "county"], domains="observed").release(
            rho=0.5, seed=1, neighbours="substitute", mechanism="discrete_gaussian")
    # substitution neighbours: L1 doubles to 2, L2 is sqrt(2) (design.md, privacy rule 2)
    assert {(ls.sensitivity_l1, ls.sensitivity_l2) for ls in res.ledger.levels} == {(2.0, math.sqrt(2))}
    text = res.report(tmp_path / "r.html").read_text(encoding="utf-8")
    table = _parse(text).tables["budget"]
    col = _column(table, "Sensitivity L1 / L2")
    assert [r[col] for r in table["body"]] == ["2 / √2"] * 3
    assert "1.4142135623730951" not in text
    assert "1.4142135623730951" in res.ledger.to_json()  # the machine-readable record keeps the double


@pytest.mark.parametrize("value, text", [(1.0, "1"), (2.0, "2"), (2 ** 0.5, "√2"), (8 ** 0.5, "2√2"),
                                         (12 ** 0.5, "2√3"), (1.5, "1.5"), (None, "")])
def test_sensitivities_are_written_as_a_reader_writes_them(value, text):
    from hierdp.report import _sensitivity

    assert _sensitivity(value) == text


def test_a_table_with_nothing_to_quote_is_passed_through_uncopied():
    frame = pd.DataFrame({"a": pd.Categorical(["x", "-1"]), "b": pd.Series(["p", "+2"], dtype="str"), "v": [-1.0, 2.0]})
    assert hio.neutralise_formulas(frame) is frame
