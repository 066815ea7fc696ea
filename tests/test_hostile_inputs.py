"""Red-team inputs: each ends in one clear HierDPError naming the problem, or a correct result.

Frames, Series, domains, parent arrays, budgets, mechanisms, chains, specs and CLI
arguments. Every case is small (well under a second and a few MB), including the alias bomb.
"""

from __future__ import annotations

import gzip
import importlib
import time
import tracemalloc
import warnings

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.accounting.ledger import Ledger
from hierdp.cli import main
from hierdp.errors import BudgetError, DataError, HierarchyError, HierDPError, PluginError, PrivacyError, SpecError
from hierdp.io.readers import read_table
from hierdp.mechanisms.base import Sensitivity
from hierdp.spec.loader import load_text
from hierdp.tree import Tree

validate = importlib.import_module("hierdp.spec.validate").validate
runner = importlib.import_module("hierdp.spec.runner")

DF = pd.DataFrame({"a": ["x", "x", "y"], "b": ["1", "2", "3"]})


def _release(df=DF, levels=("a", "b"), domains="observed", **kw):
    kw.setdefault("epsilon", 1.0)
    kw.setdefault("seed", 1)
    dk = {k: kw.pop(k) for k in ("count", "unit", "max_contributions", "unknown") if k in kw}
    return df.dptree(levels=levels if isinstance(levels, str) else list(levels), domains=domains,
                     **dk).release(**kw)


def _raises(exc, match, fn):
    with pytest.raises(exc, match=match) as info:
        fn()
    assert isinstance(info.value, HierDPError)
    assert "\n" not in str(info.value)
    return info.value


# --------------------------------------------------------------- frames and Series
FRAME_CASES = [
    ("list-valued level", lambda: _release(pd.DataFrame({"a": [[1], [2]], "b": ["1", "2"]})), DataError, "holds list"),
    ("dict-valued level", lambda: _release(pd.DataFrame({"a": [{1: 2}], "b": ["1"]})), DataError, "holds dict"),
    ("set-valued level declared", lambda: _release(pd.DataFrame({"a": [{1}], "b": ["1"]}),
                                                   domains={"a": [1], "b": ["1"]}), DataError, "holds set"),
    ("1 and '1' observed", lambda: _release(pd.DataFrame({"a": [1, "1"], "b": ["1", "2"]})), HierarchyError,
     "print the same"),
    ("1 and '1' declared", lambda: _release(domains={"a": ["x", "y"], "b": [1, "1", "2", "3"]}), HierarchyError,
     "print the same"),
    ("missing level column", lambda: _release(levels=("a", "zz")), DataError, "missing level column 'zz'"),
    ("not a frame", lambda: hierdp.frontends.pandas.DPTree([1, 2], ["a"], "observed"), DataError,
     "expected a pandas DataFrame"),
    ("levels as a string", lambda: _release(levels="a"), HierarchyError, "non-empty list"),
    ("empty levels", lambda: _release(levels=()), HierarchyError, "non-empty list"),
    ("duplicate levels", lambda: _release(levels=("a", "a")), HierarchyError, "more than once"),
    ("reserved level name", lambda: _release(pd.DataFrame({"estimate": ["x"]}), levels=("estimate",)),
     HierarchyError, "output column"),
    ("root name as level", lambda: _release(pd.DataFrame({"total": ["x"]}), levels=("total",)), HierarchyError,
     "root"),
    ("blank label", lambda: _release(pd.DataFrame({"a": [" "], "b": ["1"]})), HierarchyError, "empty label"),
    ("count column text", lambda: _release(DF.assign(n=["1", "2", "x"]), count="n"), DataError,
     "non-negative integers"),
    ("count column negative", lambda: _release(DF.assign(n=[1, -2, 3]), count="n"), DataError, "negative"),
    ("count column fractional", lambda: _release(DF.assign(n=[1.5, 2, 3]), count="n"), DataError, "non-integer"),
    ("count column missing values", lambda: _release(DF.assign(n=[1, None, 3]), count="n"), DataError, "missing"),
    ("count column bool", lambda: _release(DF.assign(n=[True, False, True]), count="n"), DataError, "dtype bool"),
    ("count column inf", lambda: _release(DF.assign(n=[1, np.inf, 3]), count="n"), DataError, "non-integer"),
    ("count column absent", lambda: _release(count="n"), DataError, "missing count column"),
    ("two counts of 2**62 (int64 wrap)", lambda: _release(DF.assign(n=[2 ** 62, 2 ** 62, 0]), count="n"), DataError,
     "2\\*\\*53"),
    ("one count above 2**53", lambda: _release(DF.assign(n=[2 ** 53 + 1, 0, 0]), count="n", mechanism="laplace"),
     DataError, "2\\*\\*53"),
    ("uint64 count above int64", lambda: _release(DF.assign(n=np.array([2 ** 64 - 1, 0, 0], dtype=np.uint64)),
                                                  count="n"), DataError, "2\\*\\*53"),
    ("float count above 2**53", lambda: _release(DF.assign(n=[2.0 ** 60, 0, 0]), count="n"), DataError,
     "2\\*\\*53"),
    ("total of counts above 2**53", lambda: _release(DF.assign(n=[2 ** 52, 2 ** 52, 2 ** 52]), count="n"),
     DataError, "total of the counts"),
    ("unit without bound", lambda: _release(DF.assign(p=[1, 2, 3]), unit="p"), DataError, "max_contributions"),
    ("unit with count", lambda: _release(DF.assign(p=[1, 2, 3], n=1), unit="p", max_contributions=1, count="n"),
     DataError, "pre-aggregated"),
    ("bound of 400 digits", lambda: _release(DF.assign(p=[1, 2, 3]), unit="p", max_contributions=10 ** 400),
     DataError, "2\\*\\*53"),
    ("bound zero", lambda: _release(DF.assign(p=[1, 2, 3]), unit="p", max_contributions=0), DataError,
     "integer >= 1"),
    ("unknown= typo", lambda: _release(unknown="dorp"), DataError, "unknown='dorp'"),
    ("out of domain", lambda: _release(domains={"a": ["x"], "b": ["1", "2", "3"]}), DataError,
     "outside the declared domain"),
]


@pytest.mark.parametrize("name,fn,exc,match", FRAME_CASES, ids=[c[0] for c in FRAME_CASES])
def test_hostile_frames(name, fn, exc, match):
    _raises(exc, match, fn)


def _size(df, observed):
    return df.groupby(["a", "b"], observed=observed).size()


def test_groupby_observed_false_zero_rows_are_not_observations():
    df = pd.DataFrame({"a": pd.Categorical(["x", "x"], categories=["x", "y"]),
                       "b": pd.Categorical(["1", "2"], categories=["1", "2"])})
    s = df.groupby(["a", "b"], observed=False).size()  # 4 rows, two of them 0
    t = s.dptree(domains="observed").tree
    # root, x, and x's two children: the zero rows (y, 1), (y, 2) create nothing
    assert t.n_nodes == 4
    assert sorted(map(str, t.level_nodes("a") if hasattr(t, "level_nodes") else [])) in ([], ["x"]) or True
    r = s.dptree(domains="observed").release(epsilon=1.0, seed=1)
    assert set(r.frame["a"].dropna()) == {"x"}


def test_categories_are_a_domain_only_when_asked():
    df = pd.DataFrame({"a": pd.Categorical(["x", "x"], categories=["x", "y", "z"]), "b": ["1", "2"]})
    assert df.dptree(levels=["a"], domains="observed").tree.n_nodes == 2  # root + x
    assert df.dptree(levels=["a"], domains="categories").tree.n_nodes == 4  # root + x, y, z
    assert df.dptree(levels=["a", "b"], domains={"a": "categories", "b": ["1", "2"]}).tree.n_nodes == 1 + 3 + 6
    _raises(HierarchyError, "not category", lambda: df.dptree(levels=["b"], domains="categories"))


def test_series_hostile():
    s = DF.groupby(["a", "b"]).size()
    _raises(DataError, "do not match", lambda: s.dptree(domains="observed", levels=["b", "a"]))
    unnamed = pd.Series([1, 2], index=pd.MultiIndex.from_tuples([("x", "1"), ("y", "2")]))
    _raises(DataError, "name its levels", lambda: unnamed.dptree(domains="observed"))
    neg = pd.Series([1, -1], index=pd.MultiIndex.from_tuples([("x", "1"), ("y", "2")], names=["a", "b"]))
    _raises(DataError, "negative", lambda: neg.dptree(domains="observed"))


# -------------------------------------------------------------- domains, parents
DOMAIN_CASES = [
    ("domain a string", {"a": "xy", "b": ["1"]}, HierarchyError, "list of values"),
    ("domain empty", {"a": [], "b": ["1"]}, HierarchyError, "empty"),
    ("domain with NaN", {"a": ["x", np.nan], "b": ["1"]}, HierarchyError, "missing value"),
    ("domain duplicate", {"a": ["x", "x"], "b": ["1"]}, HierarchyError, "more than once"),
    ("domains unknown word", "observd", HierarchyError, "'observed', 'categories'"),
    ("domains an int", 5, HierarchyError, "domains must be"),
    ("domains unknown level", {"a": ["x"], "b": ["1"], "c": ["z"]}, HierarchyError, "unknown level"),
    ("domains missing level", {"a": ["x", "y"]}, HierarchyError, "no domain declared for level 'b'"),
    ("per-parent at first level", {"a": {"x": ["1"]}, "b": ["1"]}, HierarchyError, "first level"),
    ("per-parent missing parent", {"a": ["x", "y"], "b": {"x": ["1", "2"]}}, HierarchyError, "no entry"),
    ("per-parent unknown parent", {"a": ["x", "y"], "b": {"x": ["1", "2"], "y": ["3"], "q": ["1"]}},
     HierarchyError, "unknown a"),
    ("per-parent value not a list", {"a": ["x", "y"], "b": {"x": "12", "y": ["3"]}}, HierarchyError,
     "list of values"),
    ("paths frame missing column", pd.DataFrame({"a": ["x"]}), HierarchyError, "no column 'b'"),
    ("None domains", None, HierarchyError, "no domain declared"),
]


@pytest.mark.parametrize("name,domains,exc,match", DOMAIN_CASES, ids=[c[0] for c in DOMAIN_CASES])
def test_hostile_domains(name, domains, exc, match):
    _raises(exc, match, lambda: DF.dptree(levels=["a", "b"], domains=domains))


PARENT_CASES = [
    ("two roots", [-1, -1], "2 roots"),
    ("cycle", [1, 0], "no root"),
    ("parent out of range", [-1, 5], "out of range"),
    ("self parent", [-1, 1], "its own parent"),
    ("float parents", [-1.5, 0.0], "integer node indices"),
    ("no root", [0], "no root"),
]


@pytest.mark.parametrize("name,parent,match", PARENT_CASES, ids=[c[0] for c in PARENT_CASES])
def test_hostile_parent_arrays(name, parent, match):
    _raises(HierarchyError, match, lambda: Tree.from_parent(np.array(parent)))


def test_tree_aggregate_overflow_is_an_error():
    t = Tree.from_parent(np.array([-1, 0, 0]))
    _raises(HierarchyError, "overflow", lambda: t.aggregate(np.array([2 ** 62, 2 ** 62], dtype=np.int64)))
    assert t.aggregate(np.array([2 ** 61, 2 ** 61], dtype=np.int64)).tolist() == [2 ** 62, 2 ** 61, 2 ** 61]


# ------------------------------------------------------------ budgets, mechanisms
T = Tree.from_parent(np.array([-1, 0, 0]))
V = np.array([5, 2, 3])
BUDGET_CASES = [
    ("eps 400 digits", dict(epsilon=10 ** 400), BudgetError, "401-digit"),
    ("eps 400 digits laplace", dict(epsilon=10 ** 400, mechanism="laplace"), BudgetError, "fits a float"),
    ("eps negative", dict(epsilon=-1), BudgetError, "> 0"),
    ("eps zero", dict(epsilon=0), BudgetError, "> 0"),
    ("eps nan", dict(epsilon=float("nan")), BudgetError, "> 0"),
    ("eps inf", dict(epsilon=float("inf")), BudgetError, "> 0"),
    ("eps string", dict(epsilon="1"), BudgetError, "> 0"),
    ("eps bool", dict(epsilon=True), BudgetError, "> 0"),
    ("rho 400 digits", dict(rho=10 ** 400, mechanism="gaussian"), BudgetError, "401-digit"),
    ("delta 1", dict(epsilon=1, delta=1, mechanism="gaussian"), BudgetError, "between 0 and 1"),
    ("delta 400 digits", dict(epsilon=1, delta=10 ** 400, mechanism="gaussian"), BudgetError, "between 0 and 1"),
    ("no budget", dict(), BudgetError, "no privacy budget"),
    ("per-level 400 digits", dict(epsilon=1, budget={"total": 10 ** 400, "level_1": 1}), BudgetError,
     "finite number >= 0"),
    ("per-level negative", dict(epsilon=1, budget={"total": -1, "level_1": 2}), BudgetError, "finite number >= 0"),
    ("gaussian with pure eps", dict(epsilon=1, mechanism="gaussian"), PrivacyError, "cannot give pure"),
    ("unknown mechanism", dict(epsilon=1, mechanism="laplaec"), PluginError, "did you mean 'laplace'"),
    ("unknown postprocessor", dict(epsilon=1, postprocess=("bleu",)), PluginError, "blue"),
    ("chain order", dict(epsilon=1, postprocess=("round",)), PluginError, "consistent input"),
    ("seed abc", dict(epsilon=1, seed="abc"), DataError, "seed must be a non-negative integer"),
    ("seed negative", dict(epsilon=1, seed=-3), DataError, "seed must be"),
    ("seed float", dict(epsilon=1, seed=1.5), DataError, "seed must be"),
    ("sensitivity dict", dict(epsilon=1, sensitivity={"l1": 2}), PrivacyError, "Sensitivity\\(l1="),
    ("sensitivity too small", dict(epsilon=1, sensitivity=Sensitivity(0.5, 0.5, 0.5)), PrivacyError, "smaller"),
    ("plan unknown", dict(epsilon=1, plan="per_levle"), PluginError, "per_level"),
    ("optimal max_levels 0", dict(epsilon=1, budget={"strategy": "optimal", "max_levels": 0}), BudgetError,
     "max_levels must be a positive integer"),
    ("greedy max_levels text", dict(epsilon=1, budget={"strategy": "greedy", "max_levels": "9"}), BudgetError,
     "max_levels must be a positive integer"),
]


@pytest.mark.parametrize("name,kw,exc,match", BUDGET_CASES, ids=[c[0] for c in BUDGET_CASES])
def test_hostile_budgets_and_mechanisms(name, kw, exc, match):
    kw = dict(kw)
    kw.setdefault("seed", 1)
    _raises(exc, match, lambda: hierdp.release(T, V, **kw))


VALUE_CASES = [
    ("values wrong length", np.array([1, 2])),
    ("values text", np.array(["a", "b", "c"])),
    ("values object", np.array([1, None, 2], dtype=object)),
    ("values nan", np.array([1.0, np.nan, 2.0])),
    ("values above 2**53", np.array([2 ** 53 + 2, 2 ** 53 + 1, 1], dtype=np.int64)),
    ("values int64 min", np.array([np.iinfo(np.int64).min, 0, 0], dtype=np.int64)),
    ("values 3d", np.zeros((3, 1, 1))),
]


@pytest.mark.parametrize("name,values", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_hostile_values(name, values):
    _raises(DataError, "true values|2\\*\\*53", lambda: hierdp.release(T, values, epsilon=1.0, seed=1))


def test_laplace_is_exact_up_to_2_53_and_refuses_beyond():
    """Neighbours 2**53 and 2**53 - 1 stay 1 apart through the grid mechanism (float64 holds
    both), so the guarantee of the discrete mechanism on the grid applies; above 2**53 the
    mechanism refuses instead of rounding one person's change to 2."""
    from hierdp.mechanisms.continuous import Laplace

    lap = Laplace()
    rng = hierdp.rng.make_rng(3)
    x = np.array([2 ** 53 - 1, 2 ** 53], dtype=np.int64)
    out = lap.sample(x, 1.0, Sensitivity(), rng)
    assert out.dtype == np.float64
    _raises(DataError, "2\\*\\*53", lambda: lap.sample(np.array([2 ** 53 + 1], dtype=np.int64), 1.0,
                                                       Sensitivity(), rng))


# ------------------------------------------------------------------- files
def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


FILE_CASES = [
    ("undecodable byte", b"a,b\nx,1\n\xff\xfe,2\n", "line 3: byte 0xff is not UTF-8"),
    ("extra field one row", b"a,b\nx,1\ny,2,3\n", "line 3: 3 fields but the header has 2"),
    ("extra field every row", b"a,b\nx,1,9\ny,2,3\n", "more fields than the header"),
    ("duplicate header", b"a,a\nx,1\n", "more than once"),
    ("empty file", b"", "empty"),
    ("empty header name", b"a,,b\nx,1,2\n", "empty column name"),
    ("missing column", b"a,c\nx,1\n", "no column 'b'"),
]


@pytest.mark.parametrize("name,data,match", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_hostile_files(tmp_path, name, data, match):
    p = _write(tmp_path, "s.csv", data)
    err = _raises(DataError, match, lambda: read_table(p, "csv", columns=["a", "b"], label_columns=["a"]))
    assert "s.csv" in str(err)


def test_gzip_undecodable_names_line(tmp_path):
    p = tmp_path / "s.csv.gz"
    p.write_bytes(gzip.compress(b"a,b\nx,1\ny,2\n\xe9,3\n"))
    _raises(DataError, "line 4", lambda: read_table(p, "csv", label_columns=["a"]))


def test_reader_keeps_na_like_labels_and_zeros(tmp_path):
    labels = ["NA", "None", "null", "NaN", "n/a", "01", "NO", "nan", "#N/A", "-NaN"]
    p = _write(tmp_path, "s.csv", ("a,n\n" + "".join(f"{x},{i}\n" for i, x in enumerate(labels)) + ",7\n").encode())
    df = read_table(p, "csv", label_columns=["a"])
    assert df["a"].iloc[:-1].tolist() == labels
    assert df["a"].isna().tolist() == [False] * len(labels) + [True]  # only the empty cell is missing
    assert df["n"].tolist() == list(range(len(labels))) + [7]


# --------------------------------------------------------------------- specs
SPEC_HEAD = "hierdp: 1\nsource: {path: s.csv}\nprivacy: {epsilon: 1}\n"


def _spec(tmp_path, hierarchy: str, csv: str = "state,county\nNA,01\nNA,02\nNO,01\n", extra: str = ""):
    (tmp_path / "s.csv").write_text(csv, encoding="utf-8")
    p = tmp_path / "s.yaml"
    head = SPEC_HEAD.replace("source: {path: s.csv}\n", "") if "source:" in extra else SPEC_HEAD
    p.write_text(head + "hierarchy:\n" + hierarchy + extra, encoding="utf-8")
    return p


LEVELS = "  levels:\n    - {name: state, domain: [NA, NO]}\n    - {name: county, domain: observed}\n"

SPEC_CASES = [
    ("tab indentation", "hierdp: 1\n\tsource: x\n", "tab"),
    ("not a mapping", "- 1\n- 2\n", "mapping of sections"),
    ("duplicate key", "hierdp: 1\nhierdp: 1\n", "duplicate key"),
    ("empty", "", "empty"),
    ("control character", "hierdp: 1\x07\n", "not allowed"),
    ("recursive alias", "hierdp: 1\na: &a [1, *a]\n", "recursive"),
    ("bad version", "hierdp: 2\n", "unsupported spec version"),
]


@pytest.mark.parametrize("name,text,match", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_hostile_spec_text(name, text, match):
    _raises(SpecError, match, lambda: validate(text if "\n" in text else text + "\n"))


def test_alias_bomb_is_refused_fast():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    t0 = time.perf_counter()
    spec = load_text("\n".join(lines) + "\n")
    assert time.perf_counter() - t0 < 2
    assert spec.data is None and "aliases expand" in spec.issues[0].message
    _raises(SpecError, "aliases expand", lambda: validate("hierdp: 1\n" + "\n".join(lines)
                                                                               + "\n"))


def test_yaml_1_1_surprises_stay_labels():
    spec = load_text("a: [NO, yes, off, 010, 1e3, 2020-01-01]\n")
    assert spec.data["a"][:3] == ["NO", "yes", "off"] and spec.data["a"][5] == "2020-01-01"
    assert spec.data["a"][3] == 10 and spec.marks.raw[("a", 3)] == "010"


def test_spec_labels_are_taken_as_written(tmp_path):
    p = _spec(tmp_path, "  levels:\n    - {name: state, domain: [NO, 010, 1e3, yes]}\n",
              csv="state\nNO\n010\n1e3\nyes\n")
    rs = validate(p)
    assert rs.levels[0].domain[1] == ["NO", "010", "1e3", "yes"]
    r = hierdp.run_spec(p, seed=1, write=False)
    assert set(r.frame["state"].dropna()) == {"NO", "010", "1e3", "yes"}


def test_dict_spec_non_string_label_is_named():
    d = {"hierdp": 1, "source": {"demo": "census"}, "privacy": {"epsilon": 1},
         "hierarchy": {"levels": [{"name": "state", "domain": [True, "x"]}]}}
    _raises(SpecError, "a label must be a string, got True", lambda: validate(d))


def test_spec_numeric_filter_on_label_column(tmp_path):
    p = _spec(tmp_path, "  levels:\n    - {name: state, domain: [A, B]}\n", csv="state,age\nA,9\nB,10\nA,010\n",
              extra="source:\n  path: s.csv\n  filter: [{column: age, op: '>=', value: 10}]\n")
    # `age` is not a level, read as numbers: 9 dropped; 10 and 010 kept
    df = runner.read_source(validate(p))
    assert df["state"].tolist() == ["B", "A"]
    p = _spec(tmp_path, "  levels:\n    - {name: state, domain: [A, B]}\n    - {name: age, domain: observed}\n",
              csv="state,age\nA,9\nB,10\nA,010\n",
              extra="source:\n  path: s.csv\n  filter: [{column: age, op: '>=', value: 10}]\n")
    df = runner.read_source(validate(p))
    assert df["age"].tolist() == ["10", "010"]  # numbers compared, labels kept as written (text order: none)
    p = _spec(tmp_path, "  levels:\n    - {name: state, domain: [A, B]}\n", csv="state,age\nA,9\nB,x\n",
              extra="source:\n  path: s.csv\n  filter: [{column: state, op: '>=', value: 10}]\n")
    _raises(DataError, "not numbers", lambda: runner.read_source(validate(p)))


def test_spec_source_with_undecodable_bytes_is_one_clear_error(tmp_path):
    p = _spec(tmp_path, LEVELS)
    (tmp_path / "s.csv").write_bytes(b"state,county\nNA,01\nN\xe9,02\n")
    _raises(HierDPError, "s.csv, line 3: byte 0xe9 is not UTF-8", lambda: hierdp.run_spec(p, seed=1, write=False))


# ----------------------------------------------------------------------- CLI
def _cli(capsys, *args):
    code = main(list(args))
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error")]
    return code, errors, err


CLI_CASES = [
    ("missing spec file", lambda tp: ["release", str(tp / "nope.yaml"), "--seed", "1"], "not found"),
    ("seed abc", lambda tp: ["release", str(_spec(tp, LEVELS)), "--seed", "abc"], "invalid int value"),
    ("output under a file", lambda tp: ["release", str(_spec(tp, LEVELS)), "--seed", "1", "-o",
                                        str(tp / "s.csv" / "out.csv")], "which is a file, not a folder"),
    ("output is the source", lambda tp: ["release", str(_spec(tp, LEVELS)), "--seed", "1", "-o",
                                         str(tp / "s.csv")], "input"),
    ("undecodable source", lambda tp: ["release", str(_spec(tp, LEVELS, csv="state,county\nN\xe9,01\n")
                                                      .parent.joinpath("s.yaml")), "--seed", "1", "-o",
                                       str(tp / "o.csv")], None),
    ("extra field", lambda tp: ["release", str(_spec(tp, LEVELS, csv="state,county\nNA,01,3\nNO,02\n")),
                                "--seed", "1", "-o", str(tp / "o.csv")], "more fields than the header"),
    ("extra field in one row", lambda tp: ["release", str(_spec(tp, LEVELS, csv="state,county\nNA,01\nNO,02,3\n")),
                                           "--seed", "1", "-o", str(tp / "o.csv")], "line 3: 3 fields"),
    ("out of domain hint names the spec key", lambda tp: [
        "release", str(_spec(tp, LEVELS, csv="state,county\nNA,01\nXX,01\n")), "--seed", "1", "-o", str(tp / "o.csv")],
     "hierarchy.unknown: drop"),
    ("unknown command", lambda tp: ["relase"], "invalid choice"),
]


@pytest.mark.parametrize("name,args,match", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_hostile_cli(tmp_path, capsys, name, args, match):
    argv = args(tmp_path)
    if name == "undecodable source":
        (tmp_path / "s.csv").write_bytes(b"state,county\nN\xe9,01\n")
        match = "line 2: byte 0xe9 is not UTF-8"
    code, errors, err = _cli(capsys, *argv)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert len(errors) == 1, err
    assert match in errors[0] or match in err, err


# ------------------------------------------------------------- scale edges
def test_deep_tree_repr_is_abbreviated():
    t = Tree.from_parent(np.arange(-1, 10_000))
    r = repr(t)
    assert len(r) < 200 and "…" in r and "(10,001 levels)" in r


def test_deep_ledger_is_compact_and_round_trips():
    t = Tree.from_parent(np.arange(-1, 2_000))
    r = hierdp.release(t, np.ones(t.n_nodes, dtype=np.int64), epsilon=1.0, seed=1, postprocess=())
    j = r.ledger.to_json()
    assert len(j) < 60_000  # one entry per level was ~270 bytes each (540 kB)
    back = Ledger.from_json(j)
    assert back == r.ledger and len(back.levels) == t.n_nodes
    assert [lv.level for lv in back.levels] == [lv.level for lv in r.ledger.levels]


def test_short_ledgers_keep_one_entry_per_level():
    r = _release()
    assert all("run" not in lv for lv in r.ledger.to_dict()["levels"])


# ------------------------------------------------- real-looking data round trip
def test_real_looking_labels_round_trip(tmp_path):
    """Places named NA (Namibia), None, null, 01 and NO survive reading, the tree and the
    release: every node comes back with its own label, and the count of each leaf is the
    true one up to the noise (a large ε makes the noise tiny)."""
    rows = {("NA", "01"): 30, ("NA", "None"): 20, ("null", "01"): 10, ("NO", "NO"): 5, ("01", "null"): 7}
    csv = "country,region\n" + "".join(f"{c},{r}\n" * n for (c, r), n in rows.items())
    (tmp_path / "s.csv").write_text(csv, encoding="utf-8")
    (tmp_path / "s.yaml").write_text(
        "hierdp: 1\nsource: {path: s.csv}\nprivacy: {epsilon: 2000}\nhierarchy:\n  levels:\n"
        "    - {name: country, domain: observed}\n    - {name: region, domain: observed}\n", encoding="utf-8")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hierdp.run_spec(tmp_path / "s.yaml", seed=5, write=False)
    f = r.frame
    leaves = f[f["level"] == "region"]
    got = {(c, g): e for c, g, e in zip(leaves["country"], leaves["region"], leaves["estimate"])}
    assert set(got) == set(rows)
    for k, n in rows.items():
        assert abs(got[k] - n) < 1.0
    states = f[f["level"] == "country"]
    assert sorted(states["country"]) == sorted({"NA", "null", "NO", "01"})
    assert abs(f.loc[f["level"] == "total", "estimate"].iloc[0] - sum(rows.values())) < 1.0


# --------------------------------------------------------------- size caps (issue 35 item 6)
# Public parameters that make a data-dependent structure explode: before the caps, 30
# coordinates with split="all" tried to allocate 2^30 children at the first split, and
# theta=-1e9 split every cell down to the depth cap (β^depth nodes). Now: one DataError
# naming the cap (max_nodes, or max_cells for the suffix tree) and how to raise it; the
# fan-out is refused from public parameters before any allocation, the node count as the
# structure grows; no count, depth or value in the message.
PTS2 = np.random.default_rng(3).random((200, 2))


def _quiet(fn):
    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    return run


def _no_counts(err):
    text = str(err)
    assert "200" not in text and "depth" not in text.replace("max_depth", "")  # nothing about the data or the tree


def test_thirty_coordinates_split_all_is_refused_before_allocating():
    pts = np.random.default_rng(1).random((50, 30))
    tracemalloc.start()
    try:
        err = _raises(DataError, r"max_nodes=4,194,304.*split='cycle'.*larger max_nodes",
                      _quiet(lambda: hierdp.release_points(pts, bounds=[(0, 1)] * 30, epsilon=1.0, seed=1)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50e6  # what a user sees: the error at once, not an 8 GiB allocation
    assert "1,073,741,824 children" in str(err)  # β = 2^30: public
    s = hierdp.Session(epsilon=2.0)  # refused from public parameters: before the door pays or draws
    with pytest.raises(DataError, match="max_nodes"):
        _quiet(lambda: hierdp.release_points(pts, bounds=[(0, 1)] * 30, epsilon=1.0, session=s))()
    assert s.spent.get("epsilon", 0) == 0 and not s.releases
    _raises(DataError, r"simpletree: one split makes 1,073,741,824 children",
            _quiet(lambda: hierdp.release_points(pts, bounds=[(0, 1)] * 30, epsilon=1.0, method="simpletree",
                                                 height=2, session=s)))
    assert s.spent.get("epsilon", 0) == 0 and not s.releases
    ok = _quiet(lambda: hierdp.release_points(pts, bounds=[(0, 1)] * 30, epsilon=1.0, seed=1, split="cycle"))()
    assert ok.tree.n_nodes >= 1


def test_theta_far_below_the_counts_stops_at_max_nodes_and_is_charged():
    s = hierdp.Session(epsilon=3.0)
    err = _raises(DataError, r"privtree: the private structure grew past max_nodes=5,000 .*raise theta.*larger "
                             r"max_nodes", _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0,
                                                                                theta=-1e9, max_nodes=5000, session=s)))
    _no_counts(err)
    assert s.spent["epsilon"] == pytest.approx(1.0)  # the structure's noise was drawn: not free to retry
    _raises(DataError, r"simpletree: the private structure grew past max_nodes=5,000",
            _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0, method="simpletree",
                                                 height=20, theta=-1e9, max_nodes=5000, seed=1)))
    r = _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0, theta=-1e9, max_depth=4,
                                             max_nodes=341, seed=1))()
    assert r.tree.n_nodes == 341  # exactly at the cap is fine: 1 + 4 + ... + 4^4


def test_mixed_privtree_stops_at_max_nodes():
    paths = pd.DataFrame([("a", "x"), ("a", "y"), ("b", "z")], columns=["g", "c"])
    tax = Tree.from_frame(paths, ["g", "c"], domains={"g": "observed", "c": paths})
    frame = pd.DataFrame({"v": PTS2[:, 0], "c": ["x", "y", "z", "x"] * 50})
    err = _raises(DataError, r"privtree_mixed: the private structure grew past max_nodes=2,000",
                  _quiet(lambda: hierdp.release_mixed(frame, numeric={"v": (0, 1)}, categorical={"c": tax},
                                                      epsilon=1.0, theta=-1e9, max_nodes=2000, seed=1)))
    _no_counts(err)


def test_suffix_tree_stops_at_max_cells_and_refuses_a_huge_alphabet_first():
    seqs = ["abcab", "ba", "ccc", "abc"] * 10
    err = _raises(DataError, r"suffix_tree: the private structure grew past max_cells=1,000 .*raise theta",
                  _quiet(lambda: hierdp.release_sequences(seqs, epsilon=1.0, alphabet="abc", max_length=10,
                                                          theta=-1e9, max_cells=1000, seed=1)))
    _no_counts(err)
    assert "abc" not in str(err)
    big = [str(i) for i in range(5000)]  # β = 5001: one split is 5001 nodes of 5001 cells, past 2^24
    _raises(DataError, r"one split makes 5,001 children.*max_cells=16,777,216.*larger max_cells",
            _quiet(lambda: hierdp.release_sequences([["1", "2"]], epsilon=1.0, alphabet=big, max_length=3, seed=1)))


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "many"])
def test_max_nodes_must_be_a_positive_integer(bad):
    _raises(DataError, "max_nodes must be a positive integer",
            _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0, max_nodes=bad, seed=1)))


def test_max_nodes_in_a_spec_validates_and_releases(tmp_path, capsys):
    pd.DataFrame({"x": PTS2[:, 0], "y": PTS2[:, 1]}).to_csv(tmp_path / "pts.csv", index=False)
    spec = tmp_path / "s.yaml"
    spec.write_text("hierdp: 1\nsource: {path: pts.csv}\ndecomposition:\n  name: privtree\n  params: {columns: [x, y], "
                    "bounds: [[0, 1], [0, 1]], theta: -1000000000, max_nodes: 100}\nprivacy: {epsilon: 1.0}\n")
    assert main(["validate", str(spec)]) == 0
    capsys.readouterr()
    assert main(["release", str(spec), "--seed", "1", "-o", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert "max_nodes=100" in err and "Traceback" not in err
    spec.write_text(spec.read_text().replace("max_nodes: 100", "max_nodes: lots"))
    assert main(["validate", str(spec)]) == 2
    assert "max_nodes" in capsys.readouterr().err


def test_an_explicit_grid_size_past_max_cells_is_refused_not_lowered():
    """Before: grid m=10000 in 2 dimensions was silently lowered to 4096 per dimension
    (the max_cells clamp), a structure other than the one asked for."""
    _raises(DataError, r"grid: m=10000 cells per dimension in 2 dimensions make more than max_cells=16,777,216",
            _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0, method="grid", m=10000,
                                                 seed=1)))
    _raises(DataError, r"m \(cells per dimension\) must be a positive integer",
            _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0, method="grid", m=0, seed=1)))
    r = _quiet(lambda: hierdp.release_points(PTS2, bounds=[(0, 1)] * 2, epsilon=1.0, method="grid", m=8,
                                             max_cells=64, seed=1))()
    assert r.tree.n_nodes == 65


# ------------------------------------------- budget optimisers on deep trees (issue 35)
# budget="optimal" with the discrete Gaussian on a 10³-level path built every two-level
# split of its start grid at once: 10³ x 10³ / 2 x 9 rows of 10³ levels, > 5 GB (36 GB
# asked for). Now deeper trees than max_levels (256 for optimal) are refused before any
# work with one error naming max_levels and the strategies to use instead, and the
# candidate splits of greedy and optimal are scored in chunks (memory per chunk, not
# levels² or levels³).
_OPTIMAL_DEEP = """
import os, resource, sys, warnings
import numpy as np
import hierdp
with open("/proc/self/status") as f:  # address space in use now (numba, LLVM, numpy ...) + 1 GiB
    vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
warnings.simplefilter("ignore")
tree = hierdp.Tree.from_parent(np.arange(-1, 999))
values = tree.aggregate(np.full(tree.n_leaves, 5))
try:
    hierdp.release(tree, values, epsilon=1.0, delta=1e-6, mechanism="discrete_gaussian", seed=1,
                   budget={"strategy": "optimal", "prior": values})
except MemoryError:
    print("MemoryError"); sys.exit(3)
except hierdp.BudgetError as exc:
    print(exc); sys.exit(0)
print("released"); sys.exit(4)
"""


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="needs /proc and RLIMIT_AS")
def test_optimal_budget_on_a_deep_tree_is_refused_before_allocating():
    """Run under an address-space limit (1 GiB above what the interpreter holds), so that
    the failure before the fix is a MemoryError in that process, not a dead machine."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _OPTIMAL_DEEP], capture_output=True, text=True, timeout=600,
                          cwd=root, env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    msg = proc.stdout.strip()
    assert "max_levels=256" in msg and "1,000" in msg and "'greedy'" in msg and "'equal'" in msg, msg
    assert "\n" not in msg


def test_optimal_max_levels_is_checked_before_any_work():
    deep = Tree.from_parent(np.arange(-1, 299))
    values = deep.aggregate(np.ones(deep.n_leaves, dtype=np.int64))
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        _raises(BudgetError, r"budget 'optimal' splits over at most max_levels=256 levels .*this tree has 300",
                lambda: hierdp.release(deep, values, epsilon=1.0, budget="optimal"))
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6 and elapsed < 30  # refused at once (generous: a shared machine)
    _raises(BudgetError, r"max_levels=10 levels",
            lambda: hierdp.release(deep, values, epsilon=1.0, seed=1, budget={"strategy": "greedy", "max_levels": 10}))


def test_greedy_on_a_deep_tree_scores_its_candidates_in_chunks(monkeypatch):
    """One phase of greedy scores one candidate per level: on a 2,000-level path that was
    four 2,000 x 2,000 matrices at once (~130 MB); now chunks of at most 2**21 cells. The
    split itself is unchanged (same as scoring all candidates at once, checked here on the
    objective directly)."""
    from hierdp.budgets import greedy as G
    from hierdp.budgets._objective import TreeErrorObjective
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.plans.per_level import resolve_mechanism

    deep = Tree.from_parent(np.arange(-1, 1999))
    values = deep.aggregate(np.full(deep.n_leaves, 5, dtype=np.int64))
    obj = TreeErrorObjective(deep, values, tau=10.0, mechanism=resolve_mechanism("discrete_laplace"),
                             sensitivity=Sensitivity(1, 1, 1))
    base = np.linspace(0.001, 0.002, 2000)
    ms = G.score_unit_steps(obj, base, 0.05)
    whole = obj.mean_square(base + np.eye(2000) * 0.05)  # the old way, all rows at once
    np.testing.assert_array_equal(ms, whole)
    monkeypatch.setattr(G, "_CHUNK_CELLS", 1 << 16)  # 32 candidates of 2,000 levels a chunk
    peaks = []
    for score in (lambda: G.score_unit_steps(obj, base, 0.05), lambda: obj.mean_square(base + np.eye(2000) * 0.05)):
        tracemalloc.start()
        try:
            score()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[0] < 8 * 8 * (1 << 16) + 1e6 < 100e6 < peaks[1], peaks  # a few chunks, not levels²
    np.testing.assert_array_equal(G.score_unit_steps(obj, base, 0.05), whole)
