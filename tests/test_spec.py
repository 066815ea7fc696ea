"""Release specs: the loader's positions, the schema, validation, the worked examples, outputs."""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import registry
from hierdp.errors import SpecError
from hierdp.metrics.base import Metric
from hierdp.plugins import hookimpl
from hierdp.spec import load_schema, load_text, run_spec, schema_text, validate
from hierdp.spec.runner import load_spec, prepare

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
PLUGIN_DIR = ROOT / "examples" / "hierdp-example-plugin"


# --------------------------------------------------------------------------- loader
def test_loader_records_lines_and_columns():
    text = "hierdp: 1\nprivacy:\n  epsilon: 0.5\nlevels:\n  - name: a\n  - name: b\n"
    spec = load_text(text)
    assert spec.data["privacy"]["epsilon"] == 0.5
    assert spec.marks.value[("privacy", "epsilon")] == (3, 12)
    assert spec.marks.key[("privacy", "epsilon")] == (3, 3)
    assert spec.marks.value[("levels", 1, "name")] == (6, 11)
    # an unrecorded path falls back to its nearest ancestor
    assert spec.marks.at(("levels", 1, "name", "deeper")) == (6, 11)


def test_loader_reads_exponent_floats_like_yaml_1_2():
    spec = load_text("a: 1e-6\nb: 5E3\nc: 2.5e+2\nd: '1e-6'\ne: 1_000\n")
    assert spec.data == {"a": 1e-6, "b": 5000.0, "c": 250.0, "d": "1e-6", "e": 1000}
    assert isinstance(spec.data["b"], float)


def test_loader_is_safe():
    spec = load_text("x: !!python/object/apply:os.system ['echo hi']\n")
    assert spec.data is None
    assert "YAML syntax error" in spec.issues[0].message


def test_loader_reports_duplicate_keys():
    spec = load_text("a: 1\nb: 2\na: 3\n")
    assert [(i.path, i.line) for i in spec.issues] == [(("a",), 3)]
    assert "first given on line 1" in spec.issues[0].message


# --------------------------------------------------------------------------- schema
def test_schema_is_a_valid_json_schema_and_matches_the_cli():
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert json.loads(schema_text()) == schema
    assert schema["properties"]["hierdp"]["const"] == 1


@pytest.mark.parametrize("spec_path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_is_schema_valid(spec_path):
    from hierdp.spec.schema import validator_for

    data = load_text(spec_path.read_text()).data
    errors = list(validator_for(load_schema()).iter_errors(data))
    assert errors == []


# ------------------------------------------------------------------------ validation
def test_validation_reads_only_the_header_of_a_csv_source(tmp_path, monkeypatch):
    (tmp_path / "d.csv").write_text("region,x\nnorth,1\nsouth,2\n")
    (tmp_path / "s.yaml").write_text("hierdp: 1\nsource: {path: d.csv}\nhierarchy:\n  levels:\n"
                                     "    - {name: region, domain: [north, south]}\nprivacy: {epsilon: 1}\n")
    calls = []
    real = pd.read_csv

    def spy(*args, **kwargs):
        calls.append(kwargs.get("nrows"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pd, "read_csv", spy)
    spec = validate(tmp_path / "s.yaml")
    assert calls == [0]
    assert spec.level_names == ["total", "region"]


def test_validation_reads_only_the_schema_of_a_parquet_source(tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    pd.DataFrame({"region": ["north", "south"], "n": [3, 4]}).to_parquet(tmp_path / "d.parquet")
    (tmp_path / "s.yaml").write_text("hierdp: 1\nsource: {path: '*.parquet', count: n}\nhierarchy:\n  levels:\n"
                                     "    - {name: region, domain: [north, south]}\nprivacy: {epsilon: 1}\n")

    def forbidden(*a, **k):
        raise AssertionError("validation must not read Parquet data")

    monkeypatch.setattr(pd, "read_parquet", forbidden)
    spec = validate(tmp_path / "s.yaml")
    assert spec.source_format == "parquet" and spec.count == "n"


def test_spec_error_keeps_every_issue_and_pickles():
    import pickle

    with pytest.raises(SpecError, match=r"2 problems in the spec") as info:
        validate("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}]}\n"
                 "privacy: {epsilon: 0}\nmechanism: nope\n")
    err = info.value
    assert len(err.errors) == 2
    assert pickle.loads(pickle.dumps(err)).errors == err.errors


def test_large_epsilon_warns_but_validates():
    spec = validate("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}]}\n"
                    "privacy: {epsilon: 20}\n")
    assert any("unusually large" in w for w in spec.warnings)


class _ParamMetric(Metric):
    """A metric declaring the JSON schema of its parameters."""

    name = "test_param_metric"
    params_schema = {"type": "object", "properties": {"q": {"type": "integer", "minimum": 1}},
                     "additionalProperties": False}

    def __call__(self, true, estimate, *, tree=None, **params):
        return float(np.abs(np.asarray(estimate) - np.asarray(true)).sum())


class _ParamPlugin:
    @hookimpl
    def hierdp_register_metrics(self):
        return [_ParamMetric]


@pytest.fixture
def param_metric():
    plugin = _ParamPlugin()
    registry.register(plugin, name="test-param-metric")
    yield
    registry.unregister(plugin)


def test_plugin_params_schema_is_enforced(param_metric):
    base = ("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}]}\n"
            "privacy: {epsilon: 1}\nevaluate:\n  metrics:\n    - name: test_param_metric\n      params: PARAMS\n")
    validate(base.replace("PARAMS", "{q: 3}"))
    with pytest.raises(SpecError) as info:
        validate(base.replace("PARAMS", "{q: 0, r: 1}"))
    msgs = info.value.errors
    assert any(":8:" in m and "evaluate.metrics[0].params.q: metric 'test_param_metric': must be >= 1, got 0" in m
               for m in msgs), msgs
    assert any("unknown key 'r'" in m for m in msgs), msgs


def test_params_checked_by_construction_without_schema():
    base = ("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}]}\n"
            "privacy: {epsilon: 1}\nbudget: {strategy: greedy, params: PARAMS}\n")
    validate(base.replace("PARAMS", "{tau: 5}"))
    with pytest.raises(SpecError, match=r"budget\.params\.taux: budget 'greedy' has no parameter 'taux'; "
                                        r"did you mean 'tau'\?"):
        validate(base.replace("PARAMS", "{taux: 5}"))
    with pytest.raises(SpecError, match=r"bad parameters for budget 'greedy': tau must be a positive number"):
        validate(base.replace("PARAMS", "{tau: -1}"))


def test_budget_per_level_must_sum_to_rho_total_too(tmp_path):
    text = ("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}]}\n"
            "privacy: {epsilon: 1.0}\nbudget: {per_level: {total: 0.25, state: 0.75}}\n")
    spec = validate(text)
    assert spec.budget == {"per_level": {"total": 0.25, "state": 0.75}}
    with pytest.raises(SpecError, match=r"sum to 1\.25 but privacy\.epsilon is 1"):
        validate(text.replace("0.75", "1.0"))


# --------------------------------------------------------------------- the examples
def _register_example_plugin():
    sys.path.insert(0, str(PLUGIN_DIR))
    try:
        import hierdp_example_plugin
    finally:
        sys.path.remove(str(PLUGIN_DIR))
    if "example_geometric" not in registry.names("mechanism"):
        registry.register(hierdp_example_plugin, name="hierdp-example-plugin-inprocess")
        return hierdp_example_plugin
    return None


@pytest.fixture
def example_plugin():
    mod = _register_example_plugin()
    yield
    if mod is not None:
        registry.unregister(mod)


@pytest.mark.parametrize("name", ["demo", "census", "attribution", "plugin-mechanism"])
def test_example_spec_runs(name, tmp_path, example_plugin):
    spec_path = SPECS / f"{name}.yaml"
    spec = validate(spec_path)
    out = tmp_path / f"{name}.csv"
    result = run_spec(spec_path, seed=5, output=out)
    table = pd.read_csv(out, dtype={lv.name: "string" for lv in spec.levels})
    ledger = json.loads((tmp_path / f"{name}.ledger.json").read_text())
    # every declared node exactly once
    level_cols = [lv.name for lv in spec.levels]
    assert len(table) == result.tree.n_nodes
    assert not table[["level", *level_cols]].astype(str).duplicated().any()
    assert table["level"].value_counts().to_dict() == {
        name_: int(n) for name_, n in zip(result.tree.level_names, np.bincount(result.tree.depth))}
    # the ledger's total equals the spec's budget
    assert math.isclose(ledger["spent"], spec.total, rel_tol=1e-12)
    assert ledger["epsilon"] == spec.epsilon
    assert ledger["for_publication"] is False and ledger["seed"] == 5
    assert "private_notes" not in ledger


def test_demo_declares_every_geography_path(tmp_path):
    from hierdp.data import demo_geography

    result = run_spec(SPECS / "demo.yaml", seed=1, write=False)
    geo = demo_geography("census")
    frame = result.frame
    tracts = frame[frame["level"] == "tract"]
    assert sorted(tracts["tract"].astype(str)) == sorted(geo["tract"].astype(str))
    assert (frame["level"] == "county").sum() == geo["county"].nunique()


def test_census_example_is_integer_nonnegative_consistent(tmp_path):
    pps = registry.names("postprocessor")
    if not {"nonneg", "round"} <= set(pps):
        pytest.skip("nonneg/round post-processors are not installed")
    result = run_spec(SPECS / "census.yaml", seed=3, output=tmp_path / "c.csv")
    v = result.values
    assert np.all(v >= 0) and np.all(v == np.round(v))
    assert result.tree.is_consistent(v)
    table = pd.read_csv(tmp_path / "c.csv", dtype={"state": "string", "county": "string", "tract": "string"})
    # counties were declared per state: 44 counties, each under its own state only
    counties = table[table["level"] == "county"]
    assert len(counties) == 44
    assert (counties["county"].str[:2] == counties["state"]).all()
    # ci columns at the declared level (0.9): after blue -> nonneg -> round, the conservative bound
    # (BLUE's interval of the same measurements ∩ [0, inf)); no std pretends to be the released value's
    assert {"noisy", "ci_low", "ci_high", "ci_method"} <= set(table.columns)
    assert (table["ci_method"] == "bound").all() and table["std"].isna().all()
    assert (table["ci_low"] <= table["estimate"]).all() and (table["estimate"] <= table["ci_high"]).all()
    assert (table["ci_low"] >= 0).all()
    # coverage, not the formula: 20 releases of the spec's plan on the demo's true counts
    # (the test reads true counts to evaluate, as an evaluation would); the 95% intervals must
    # cover 95% of the node-releases (± 3 binomial s.e. of 4500 node-releases, node
    # correlation included in the margin). A 90% interval in place of the 95% one covers ~0.93.
    spec = load_spec(SPECS / "census.yaml")
    dpt = prepare(spec)
    truth = dpt.true_counts()
    hits = []
    for seed in range(20):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
            res = hierdp.release(dpt.tree, truth, epsilon=2.0, budget={"total": 0.2, "state": 0.3, "county": 0.5,
                                                                       "tract": 1.0},
                                 postprocess=["blue", "nonneg", "round"], seed=100 + seed)
        iv = res.intervals(0.95, draws=199, seed=seed)
        hits.append((iv.low[0.95] <= truth) & (truth <= iv.high[0.95]))
    coverage = float(np.mean(hits))
    assert 0.94 <= coverage <= 0.99, coverage


def test_attribution_example_declares_every_delay_bucket(tmp_path):
    spec = validate(SPECS / "attribution.yaml")
    result = run_spec(spec, seed=2, write=False)
    frame = result.frame
    leaves = frame[frame["level"] == "delay"]
    n_loc_nodes = (frame["level"] == "location").sum()
    assert len(leaves) == 4 * n_loc_nodes
    assert set(leaves["delay"].astype(str)) == {"0-1h", "1-24h", "1-7d", "7-30d"}
    # greedy, prior-based: a split over the levels that sums to ε, chosen without true counts
    assert result.ledger.budget_strategy == "greedy"
    assert result.ledger.non_private == []
    assert math.isclose(result.ledger.spent, 1.0, rel_tol=1e-12)


def test_prior_file_is_aligned_to_nodes_by_label_path():
    from hierdp.spec.runner import load_prior, prepare

    spec = validate(SPECS / "attribution.yaml")
    dpt = prepare(spec)
    prior = load_prior(spec, dpt.tree, {"file": "data/attribution_prior.csv", "column": "estimate"})
    table = pd.read_csv(SPECS / "data" / "attribution_prior.csv", dtype="string")
    row = table[(table["campaign"] == "brand") & (table["location"] == "east") & (table["delay"] == "1-7d")]
    node = dpt.tree.node_id("brand", "east", "1-7d")
    assert prior[node] == pytest.approx(float(row["estimate"].iloc[0]))
    root_row = table[table["level"] == "total"]
    assert prior[dpt.tree.root] == pytest.approx(float(root_row["estimate"].iloc[0]))


def test_prior_files_that_do_not_fit_are_errors(tmp_path):
    """A prior whose labels match no node (e.g. recased), whose values are not numbers, or
    which lists a node twice would silently become zeros or overwrite: each is an error."""
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_prior, prepare

    spec = validate(SPECS / "attribution.yaml")
    dpt = prepare(spec)
    good = pd.read_csv(SPECS / "data" / "attribution_prior.csv", dtype="string")
    cases = {
        "recased.csv": (good.assign(campaign=good["campaign"].str.upper()), "no row of 'recased.csv' matches a node"),
        "text.csv": (good.assign(estimate="lots"), "value.s. in column 'estimate' that are not numbers"),
        "twice.csv": (pd.concat([good, good.iloc[[5]]]), "lists a node more than once"),
    }
    for name, (frame, msg) in cases.items():
        frame.to_csv(tmp_path / name, index=False)
        with pytest.raises(SpecError, match=msg):
            load_prior(spec, dpt.tree, {"file": str(tmp_path / name), "column": "estimate"})


def test_a_series_prior_is_aligned_by_node_id():
    from hierdp.budgets._objective import as_counts
    from hierdp.errors import BudgetError

    t = hierdp.Tree.complete(2, 3)
    p = np.arange(7.0)
    np.testing.assert_array_equal(as_counts(t, pd.Series(p[::-1], index=np.arange(7)[::-1])), p)
    np.testing.assert_array_equal(as_counts(t, pd.Series(p)), p)
    with pytest.raises(BudgetError, match="indexed by node id 0..6"):
        as_counts(t, pd.Series(p, index=list("abcdefg")))


def test_overrides_are_merged_before_validation():
    spec = load_spec(SPECS / "demo.yaml", privacy={"epsilon": 2.5}, output="elsewhere.parquet")
    assert spec.epsilon == 2.5 and spec.output["path"] == "elsewhere.parquet"
    assert spec.output["columns"] == ["estimate", "std"]
    with pytest.raises(SpecError, match=r"privacy\.epsilon: must be > 0"):
        load_spec(SPECS / "demo.yaml", privacy={"epsilon": -1})


def test_run_spec_is_exported_and_reproducible_with_a_seed():
    a = hierdp.run_spec(SPECS / "demo.yaml", seed=9, write=False)
    b = hierdp.run_spec(SPECS / "demo.yaml", seed=9, write=False)
    assert np.array_equal(a.values, b.values)
    assert not a.ledger.for_publication


def test_source_filters_and_level_columns(tmp_path):
    (tmp_path / "d.csv").write_text("reg,age\nn,10\nn,30\ns,40\ns,50\ns,5\n")
    (tmp_path / "s.yaml").write_text(
        "hierdp: 1\nsource:\n  path: d.csv\n  filter: [{column: age, op: '>=', value: 18}]\n"
        "hierarchy:\n  levels:\n    - {name: region, column: reg, domain: [n, s, w]}\n"
        "privacy: {epsilon: 1000}\nbudget: {per_level: {region: 1000}}\npostprocess: []\n")
    result = run_spec(tmp_path / "s.yaml", seed=1, write=False)
    f = result.frame.set_index("region")
    # ε = 1000 on one level: discrete Laplace noise is 0 with probability tanh(500) ≈ 1
    assert f.loc["n", "estimate"] == 1 and f.loc["s", "estimate"] == 2 and f.loc["w", "estimate"] == 0


def test_pre_aggregated_parquet_source_and_domain_txt_file(tmp_path):
    pytest.importorskip("pyarrow")
    pd.DataFrame({"k": ["a", "b"], "n": [5, 7]}).to_parquet(tmp_path / "c.parquet")
    (tmp_path / "k.txt").write_text("a\nb\nc\n")
    (tmp_path / "s.yaml").write_text(
        "hierdp: 1\nsource: {path: c.parquet, count: n}\nhierarchy:\n  levels:\n    - {name: k, domain: {file: k.txt}}\n"
        "privacy: {epsilon: 2000}\nbudget: {per_level: {k: 2000}}\npostprocess: []\noutput: {path: o.parquet}\n")
    result = run_spec(tmp_path / "s.yaml", seed=1, output=tmp_path / "o.parquet")
    out = pd.read_parquet(tmp_path / "o.parquet")
    assert out.set_index("k").loc[["a", "b", "c"], "estimate"].tolist() == [5, 7, 0]
    assert result.tree.n_nodes == 4


# ------------------------------------------------------------------ atomic outputs
def test_interrupted_write_leaves_no_partial_output(tmp_path, monkeypatch):
    out = tmp_path / "res" / "demo.csv"
    real = pd.DataFrame.to_csv

    def crash(self, path, *args, **kwargs):
        real(self.head(3), path, *args, **kwargs)  # some bytes reach the disk ...
        raise KeyboardInterrupt  # ... then the run is interrupted

    monkeypatch.setattr(pd.DataFrame, "to_csv", crash)
    with pytest.raises(KeyboardInterrupt):
        run_spec(SPECS / "demo.yaml", seed=1, output=out)
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temporary file, no ledger


def test_interrupted_write_keeps_the_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "demo.csv"
    run_spec(SPECS / "demo.yaml", seed=1, output=out)
    before = out.read_bytes(), (tmp_path / "demo.ledger.json").read_bytes()

    def crash(self, path, *args, **kwargs):
        Path(path).write_text("level,state\ntotal,")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", crash)
    with pytest.raises(OSError, match="No space left"):
        run_spec(SPECS / "demo.yaml", seed=2, output=out)
    assert (out.read_bytes(), (tmp_path / "demo.ledger.json").read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.csv", "demo.ledger.json"]


# ------------------------------------------------------------------------- the docs
def _yaml_blocks(md: Path) -> list[str]:
    import re

    return [b for b in re.findall(r"```yaml\n(.*?)```", md.read_text(), flags=re.S) if b.startswith("hierdp: 1")]


def test_docs_spec_examples_validate():
    from hierdp.spec import load_text

    blocks = _yaml_blocks(ROOT / "docs" / "spec.md")
    assert blocks
    for b in blocks:
        spec = validate(load_text(b, "docs/spec.md", ROOT / "docs"))
        assert spec.level_names[0] == "total"


def test_docs_plugin_error_example_is_what_validation_prints(example_plugin):
    import re

    from hierdp.spec import load_text

    doc = (ROOT / "docs" / "plugins.md").read_text()
    expected = re.search(r"^error: (spec\.yaml:.*)$", doc, flags=re.M).group(1)
    text = (SPECS / "plugin-mechanism.yaml").read_text().replace("tau: 10", "tau: -1")
    with pytest.raises(SpecError) as info:
        validate(load_text(text, "spec.yaml", SPECS))
    assert info.value.errors == [expected]


def test_public_paths_file_glob_source_and_unknown_drop(tmp_path):
    (tmp_path / "a.csv").write_text("st,co\nA,x\nA,y\nB,z\n")
    (tmp_path / "b.csv").write_text("st,co\nB,z\nC,q\n")  # C is outside the declared domain: dropped
    (tmp_path / "public").mkdir()
    (tmp_path / "public" / "geo.csv").write_text("st,co\nA,x\nA,y\nB,z\nB,w\n")
    base = ("hierdp: 1\nsource: {path: '*.csv'}\nhierarchy:\n  unknown: drop\n  LEVELS\n"
            "privacy: {epsilon: 3000}\nbudget: {per_level: {state: 1000, county: 2000}}\npostprocess: []\n")
    specs = {
        # (a) the public paths of every level at once
        "paths": "paths: {file: public/geo.csv}\n  levels:\n    - {name: state, column: st}\n"
                 "    - {name: county, column: co}",
        # (b) a domain file with the level's and every ancestor's column: public paths of that level
        "file": "levels:\n    - {name: state, column: st, domain: [A, B]}\n"
                "    - {name: county, column: co, domain: {file: public/geo.csv}}",
        # (c) a declared top level above levels taken from the public paths (validated, then failed
        # to release: the paths frame held only the county column)
        "mixed": "paths: {file: public/geo.csv}\n  levels:\n    - {name: state, column: st, domain: [A, B]}\n"
                 "    - {name: county, column: co}",
    }
    for name, levels in specs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(base.replace("LEVELS", levels))
        spec = validate(path)
        assert [p.name for p in spec.source_files] == ["a.csv", "b.csv"]
        result = run_spec(path, seed=1, write=False)
        got = {(r.state, None if pd.isna(r.county) else r.county): r.estimate for r in result.frame.itertuples()
               if r.level != "total"}
        # ε >= 1000 per level: the discrete Laplace noise is 0 (P(0) = tanh(500) = 1 in floating point)
        assert got == {("A", None): 2, ("B", None): 2, ("A", "x"): 1, ("A", "y"): 1, ("B", "z"): 2,
                       ("B", "w"): 0}, name
        assert any("dropped" in n for n in result.ledger.notes)


def test_public_paths_must_hold_the_levels_above_the_ones_they_declare(tmp_path):
    """A paths file declares a level under its parents: without the parent's column the spec is
    refused at validation, in one line naming the column (not at release)."""
    (tmp_path / "a.csv").write_text("st,co\nA,x\n")
    (tmp_path / "geo.csv").write_text("co\nx\ny\n")
    path = tmp_path / "s.yaml"
    path.write_text("hierdp: 1\nsource: {path: a.csv}\nhierarchy:\n  paths: {file: geo.csv}\n  levels:\n"
                    "    - {name: state, column: st, domain: [A]}\n    - {name: county, column: co}\n"
                    "privacy: {epsilon: 1}\n")
    with pytest.raises(SpecError, match="the paths file has no column 'st'"):
        validate(path)


def test_yaml_anchors_and_aliases_are_allowed():
    text = ("hierdp: 1\nsource: {demo: census}\nhierarchy:\n  levels:\n"
            "    - {name: state, domain: &states ['01', '02', '03', '04', '05', '06']}\n"
            "    - {name: age_group, domain: observed}\n"
            "privacy: {epsilon: 1}\nbudget: {per_level: {total: 0.5, state: 0.5}}\n")
    spec = validate(text)
    assert spec.levels[0].domain == ("list", ["01", "02", "03", "04", "05", "06"])
    assert validate(text.replace("domain: observed", "domain: *states")).levels[1].domain[0] == "list"


def _zcdp_spec(privacy: str, mechanism: str) -> str:
    return ("hierdp: 1\nsource: {demo: census}\nhierarchy: {paths: {demo: census}, levels: [{name: state}, "
            f"{{name: county}}]}}\nprivacy: {privacy}\nmechanism: {mechanism}\n")


@pytest.mark.parametrize("mechanism", ["gaussian", "discrete_gaussian"])
def test_gaussian_mechanisms_need_rho_or_epsilon_delta(mechanism):
    if mechanism not in registry.names("mechanism"):
        pytest.skip(f"{mechanism} is not installed")
    with pytest.raises(SpecError, match=rf"<spec>:5:12: mechanism: mechanism '{mechanism}' \(Gaussian noise\) "
                                        r"cannot give pure ε-DP: give privacy\.rho, or privacy\.epsilon together "
                                        r"with privacy\.delta"):
        validate(_zcdp_spec("{epsilon: 1.0}", mechanism))
    r = run_spec(_zcdp_spec("{rho: 0.5}", mechanism), seed=3, write=False)
    assert r.ledger.guarantee == "zcdp" and r.ledger.rho == 0.5
    assert math.isclose(r.ledger.spent, 0.5, rel_tol=1e-12)
    r = run_spec(_zcdp_spec("{epsilon: 1.0, delta: 1e-6}", mechanism), seed=3, write=False)
    assert r.ledger.epsilon == 1.0 and r.ledger.delta == 1e-6
    # the ρ spent per level adds up to the ρ that gives (1, 1e-6)-DP, which is below ε²/2
    assert 0 < r.ledger.spent < 0.5


def test_pure_mechanisms_refuse_rho():
    with pytest.raises(SpecError, match=r"mechanism 'laplace' is pure ε-DP .* remove privacy\.rho"):
        validate(_zcdp_spec("{rho: 0.5}", "laplace"))
