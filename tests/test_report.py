"""The release report (issue 33 item 1): ``result.report(path)``, ``hierdp report LEDGER``
and the spec's ``output.report``.

References are independent of the code under test: the ledger's own JSON (the budget
table must equal it digit for digit), fractions and error laws worked out by hand or by
brute-force summation of the noise pmf, and the OpenDP deployments registry's schema
(field names, required keys and enumerations transcribed from
opendp/deployments-registry-data, schemas/deployments-schema.yaml @3e9c812a).
"""

from __future__ import annotations

import html
import json
import math
import re
from fractions import Fraction
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
import yaml

import hierdp
from hierdp import _report_facts as facts
from hierdp import report as rep
from hierdp.accounting import zcdp_to_approx_dp
from hierdp.accounting.ledger import Ledger
from hierdp.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

PLANTED = 7777331          # a distinctive true count, planted in the data
PLANTED_NOTE = 4242421     # a distinctive private note (rows dropped): never rendered


# ------------------------------------------------------------------ releases
def _per_level(seed: int | None = None, **kw) -> hierdp.ReleaseResult:
    tree = hierdp.Tree.complete(fanout=3, height=3, level_names=["nation", "region", "district"])
    leaves = np.arange(tree.n_leaves) * 11 + 5
    leaves[4] = PLANTED
    kw.setdefault("epsilon", 1.0)
    kw.setdefault("postprocess", ["blue"])
    return hierdp.release(tree, tree.aggregate(leaves), seed=seed, private_notes={"dropped_rows": PLANTED_NOTE}, **kw)


def _marginals() -> hierdp.ReleaseResult:
    rng = np.random.default_rng(7)
    n = 2000
    state = rng.choice(["S0", "S1"], n)
    county = np.char.add(state.astype(str), np.char.add("-C", rng.integers(0, 2, n).astype(str)))
    people = pd.DataFrame({"state": state, "county": county, "age": rng.choice(["young", "old"], n),
                           "sex": rng.choice(["F", "M"], n)})
    domains = {"state": ["S0", "S1"], "county": {s: [f"{s}-C0", f"{s}-C1"] for s in ["S0", "S1"]}}
    dpt = people.dptree(levels=["state", "county"], domains=domains,
                        cells={"age": ["young", "old"], "sex": ["F", "M"]})
    plan = {"name": "marginals", "integer": True,
            "strategy": {"total": {("age",): 0.5, ("sex",): 0.5}, "state": {("age",): 0.5, ("age", "sex"): 0.5},
                         "county": {("age", "sex"): 0.75, (): 0.25}},
            "budget": {"total": 0.25, "state": 0.5, "county": 1.25}}
    return dpt.release(epsilon=2.0, neighbours="substitute", invariants=["total", "state"], plan=plan)


def _privtree(seed: int | None = None) -> hierdp.ReleaseResult:
    rng = np.random.default_rng(3)
    pts = pd.DataFrame({"x": np.clip(rng.normal(0.3, 0.05, 3000), 0, 1), "y": rng.uniform(0, 1, 3000)})
    return hierdp.release_points(pts, columns=["x", "y"], bounds=[[0, 1], [0, 1]], epsilon=1.0, seed=seed)


@pytest.fixture(scope="module")
def releases() -> dict[str, hierdp.ReleaseResult]:
    return {"per_level": _per_level(), "marginals": _marginals(), "privtree": _privtree(),
            "seeded": _per_level(seed=5)}


# ------------------------------------------------------------------ an HTML table reader
class _Tables(HTMLParser):
    """Every <table id=...>: header texts and body rows (cell texts), plus every tag and
    attribute seen (for the escaping and no-network checks)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict[str, list]] = {}
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self._table: str | None = None
        self._section = ""
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_details = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        if tag == "table":
            self._table = dict(attrs).get("id") or f"t{len(self.tables)}"
            self.tables[self._table] = {"head": [], "body": [], "foot": []}
        elif tag in ("thead", "tbody", "tfoot"):
            self._section = {"thead": "head", "tbody": "body", "tfoot": "foot"}[tag]
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "details":
            self._in_details += 1

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table][self._section].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "details":
            self._in_details -= 1

    def handle_data(self, data):
        if self._cell is not None and not self._in_details:
            self._cell.append(data)


def _parse(text: str) -> _Tables:
    p = _Tables()
    p.feed(text)
    return p


def _html(result, tmp_path: Path, name: str = "r.html", **kw) -> str:
    path = result.report(tmp_path / name, **kw)
    assert path == tmp_path / name
    return path.read_text(encoding="utf-8")


def _column(table: dict[str, list], title: str) -> int:
    return table["head"][0].index(title)


# ------------------------------------------------------------------ the budget table
@pytest.mark.parametrize("kind", ["per_level", "marginals", "privtree", "seeded"])
def test_budget_table_equals_the_ledger_digit_for_digit(kind, releases, tmp_path):
    result = releases[kind]
    table = _parse(_html(result, tmp_path)).tables["budget"]
    d = json.loads(result.ledger.to_json())     # the ledger as written beside the release
    expected = [(s["label"], s["amount"]) for s in d["decomposition"].get("spends", [])]
    expected += [(e["level"], e["budget"]) for e in d["levels"]]
    name_col, budget_col = _column(table, "Level"), _column(table, "Budget (as recorded)")
    rat_col = _column(table, "Exact rational")
    assert [r[name_col] for r in table["body"]] == [str(n) for n, _ in expected]
    # the recorded number, written as the ledger's JSON writes it
    assert [r[budget_col] for r in table["body"]] == [json.dumps(b) for _, b in expected]
    for r, (_, b) in zip(table["body"], expected):
        assert float(Fraction(r[rat_col])) == b           # the rational stands for the recorded double
    assert table["foot"][0][budget_col] == json.dumps(d["spent"])


def test_budget_rationals_and_shares_are_the_hand_computed_fractions(tmp_path):
    tree = hierdp.Tree.complete(fanout=2, height=3, level_names=["a", "b", "c"])
    result = hierdp.release(tree, tree.aggregate(np.arange(4)), epsilon=1.0, budget="equal")
    assert [ls.budget for ls in result.ledger.levels] == [1 / 3] * 3    # the recorded doubles
    table = _parse(_html(result, tmp_path)).tables["budget"]
    rat, share = _column(table, "Exact rational"), _column(table, "Share of total")
    assert [r[rat] for r in table["body"]] == ["1/3"] * 3
    assert [r[share].split()[0] for r in table["body"]] == ["1/3"] * 3
    assert table["foot"][0][rat] == "1"
    per = hierdp.release(tree, tree.aggregate(np.arange(4)), epsilon=2.0, budget={"a": 0.2, "b": 0.6, "c": 1.2})
    table = _parse(_html(per, tmp_path)).tables["budget"]
    assert [r[rat] for r in table["body"]] == ["1/5", "3/5", "6/5"]
    assert [r[share].split()[0] for r in table["body"]] == ["1/10", "3/10", "3/5"]


def test_exact_rational_reads_the_simplest_fraction_or_the_double_itself():
    assert rep.exact_rational(1 / 3) == Fraction(1, 3)
    assert rep.exact_rational(0.1) == Fraction(1, 10)
    assert rep.exact_rational(1.25) == Fraction(5, 4)
    x = math.pi / 7                                         # no small fraction: the double's own value
    assert rep.exact_rational(x) == Fraction(x) and float(rep.exact_rational(x)) == x


def test_a_run_of_identical_levels_is_one_row_naming_all_of_them(tmp_path):
    tree = hierdp.Tree.from_parent(np.arange(-1, 11))          # a chain of 12 levels
    result = hierdp.release(tree, np.full(12, 3), epsilon=1.0)
    d = result.ledger.to_dict()
    assert any("run" in e for e in d["levels"])                # the ledger compacts them
    text = _html(result, tmp_path)
    table = _parse(text).tables["budget"]
    assert len(table["body"]) == len(d["levels"])
    for name in tree.level_names:
        assert name in text
    assert table["body"][0][_column(table, "Exact rational")] == "1/12"
    assert table["foot"][0][_column(table, "Exact rational")] == "1"


def test_the_loss_implied_per_level_is_the_zcdp_conversion_at_the_release_delta(tmp_path):
    tree = hierdp.Tree.complete(fanout=2, height=3)
    result = hierdp.release(tree, tree.aggregate(np.arange(4)), rho=0.3, delta=1e-6,
                            mechanism="discrete_gaussian", budget={"total": 0.1, "level_1": 0.1, "level_2": 0.1})
    table = _parse(_html(result, tmp_path)).tables["budget"]
    col = _column(table, "Loss implied alone")
    budgets = [ls.budget for ls in result.ledger.levels]
    assert [r[col] for r in table["body"]] == [
        f"ρ = {b:.6g}; alone ⇒ ε = {zcdp_to_approx_dp(b, 1e-6):.6g} at δ = 1e-06" for b in budgets]
    # CKS 2020 is tighter than Bun & Steinke 2016, Prop. 1.3: ε <= ρ + 2 sqrt(ρ ln(1/δ))
    assert zcdp_to_approx_dp(0.1, 1e-6) < 0.1 + 2 * math.sqrt(0.1 * math.log(1e6))


def test_per_query_budgets_of_plan_marginals(releases, tmp_path):
    table = _parse(_html(releases["marginals"], tmp_path)).tables["queries"]
    rows = {(r[0], r[1]): r for r in table["body"]}
    assert rows[("county", "age × sex")][3] == "0.9375" and rows[("county", "age × sex")][4] == "15/16"
    assert rows[("county", "total")][4] == "5/16"
    assert rows[("state", "age")][4] == "1/4"


# ------------------------------------------------------------------ guarantee, invariants, seed
def test_invariants_are_flagged_in_bold_as_not_protected(releases, tmp_path):
    result = releases["marginals"]
    text = _html(result, tmp_path)
    p = _parse(text)
    assert ("strong", [("class", "invariant")]) in p.tags
    for inv in result.ledger.invariants:
        assert f'<strong class="invariant">NOT PROTECTED (published exactly, no noise, no budget): ' \
               f'{rep._e(inv)}</strong>' in text
    rec = yaml.safe_load(_yaml(result, tmp_path))
    unprotected = rec["deployment"]["dp_variant"]["unprotected_quantities"]
    assert all(inv in unprotected for inv in result.ledger.invariants)
    assert "NOT PROTECTED" not in _html(releases["per_level"], tmp_path, "p.html")


def test_a_seeded_release_carries_the_not_for_publication_banner(releases, tmp_path):
    text = _html(releases["seeded"], tmp_path)
    assert 'id="not-for-publication"' in text and "seeded randomness (seed=5)" in text
    y = _yaml(releases["seeded"], tmp_path)
    assert y.splitlines()[2].startswith("# NOT FOR PUBLICATION")
    assert "NOT FOR PUBLICATION" in yaml.safe_load(y)["deployment"]["administrative"]["notes"]
    assert 'id="not-for-publication"' not in _html(releases["per_level"], tmp_path, "p.html")
    assert "NOT FOR PUBLICATION" not in _yaml(releases["per_level"], tmp_path, "p.yaml")


def test_the_guarantee_neighbours_unit_and_structure_sources(releases, tmp_path):
    text = _html(releases["marginals"], tmp_path)
    assert "ε-differential privacy with ε = 2.0" in text
    assert "substitute one privacy unit&#x27;s records by another&#x27;s (bounded DP" in text
    pt = _parse(_html(releases["privtree"], tmp_path, "pt.html")).tables["structure"]
    assert pt["body"][0][:2] == ["(decomposition)", "private output"]
    assert all(r[1].startswith("private") for r in pt["body"][1:])


# ------------------------------------------------------------------ accuracy from the noise law
def _dlap_pmf(scale: float, k: int = 400) -> tuple[np.ndarray, np.ndarray]:
    z = np.arange(-k, k + 1)
    w = np.exp(-np.abs(z) / scale)
    return z, w / w.sum()


def _smallest_k(z: np.ndarray, p: np.ndarray, c: float) -> int:
    for k in range(0, int(z.max())):
        if p[np.abs(z) <= k].sum() >= c:
            return k
    raise AssertionError


def test_discrete_laplace_accuracy_equals_the_brute_force_pmf():
    acc = rep.level_accuracy("discrete_laplace", 1.0, 1.0, 1.0, hierdp.registry.create(
        "mechanism", "discrete_laplace").variance(1.0, hierdp.Sensitivity()))
    z, p = _dlap_pmf(1.0)                                   # scale Δ/ε = 1 (rounded up by < 2⁻²⁰)
    assert acc["mae"] == pytest.approx(float(np.sum(np.abs(z) * p)), rel=1e-5)
    assert acc["mae"] == pytest.approx(2 * math.exp(-1) / (1 - math.exp(-2)), rel=1e-5)   # 0.8509
    assert acc["hw"] == {0.9: 2.0, 0.95: 3.0}                  # by hand: q^(k+1) <= (1-c)(1+q)/2
    assert acc["hw"][0.9] == _smallest_k(z, p, 0.9) and acc["hw"][0.95] == _smallest_k(z, p, 0.95)
    assert acc["std"] == pytest.approx(math.sqrt(float(np.sum(z * z * p))), rel=1e-5)
    assert "exact" in acc["law"]


def test_discrete_gaussian_accuracy_equals_the_brute_force_pmf():
    mech = hierdp.registry.create("mechanism", "discrete_gaussian")
    var = mech.variance(0.5, hierdp.Sensitivity())               # σ² = 1/(2ρ) = 1
    acc = rep.level_accuracy("discrete_gaussian", 0.5, 1.0, 1.0, var)
    z = np.arange(-60, 61)
    p = np.exp(-z * z / 2.0)
    p /= p.sum()
    assert acc["mae"] == pytest.approx(float(np.sum(np.abs(z) * p)), rel=1e-9)
    assert acc["hw"][0.9] == _smallest_k(z, p, 0.9) and acc["hw"][0.95] == _smallest_k(z, p, 0.95)


def test_continuous_laws_and_the_labelled_normal_fallback():
    from scipy.stats import laplace, norm

    lap = hierdp.registry.create("mechanism", "laplace")
    var = lap.variance(0.5, hierdp.Sensitivity())
    acc = rep.level_accuracy("laplace", 0.5, 1.0, 1.0, var)
    b = math.sqrt(var / 2)
    assert acc["hw"][0.95] == pytest.approx(laplace.ppf(0.975, scale=b), rel=1e-9) and acc["mae"] == pytest.approx(b)
    gau = hierdp.registry.create("mechanism", "gaussian")
    var = gau.variance(0.5, hierdp.Sensitivity())
    acc = rep.level_accuracy("gaussian", 0.5, 1.0, 1.0, var)
    assert acc["hw"][0.9] == pytest.approx(norm.ppf(0.95) * math.sqrt(var))
    # a recorded variance the mechanism does not reproduce: normal law, said so
    acc = rep.level_accuracy("discrete_laplace", 1.0, 1.0, 1.0, 100.0)
    assert acc["law"].startswith("normal approximation") and acc["hw"][0.9] == pytest.approx(10 * norm.ppf(0.95))


def test_the_released_values_rmse_per_level_is_the_root_mean_variance(releases, tmp_path):
    result = releases["per_level"]
    table = _parse(_html(result, tmp_path)).tables["released"]
    var, depth = np.asarray(result.estimate.variance), np.asarray(result.tree.depth)
    for row, (d, name) in zip(table["body"], enumerate(result.tree.level_names)):
        assert row[0] == name
        assert float(row[2]) == pytest.approx(math.sqrt(var[depth == d].mean()), rel=1e-3)
    # after nonneg/round the linear variance is not the released error: its table is not shown,
    # the simulated accuracy of the released values is (tests/test_report_accuracy.py)
    text = _html(_per_level(postprocess=["blue", "nonneg", "round"]), tmp_path, "nl.html")
    assert 'id="released"' not in text and 'id="released-accuracy"' in text and "Not shown" not in text


def test_the_privtree_map_draws_every_leaf_cell(releases, tmp_path):
    result = releases["privtree"]
    text = _html(result, tmp_path)
    svg = text[text.index('id="decomposition"'):]
    n_leaves = int(np.asarray(result.structure.is_leaf).sum())
    assert svg.count("<rect ") == n_leaves + 1              # the cells and the frame
    assert f"{n_leaves:,} leaf cells" in svg


# ------------------------------------------------------------------ nothing private, nothing unescaped
def _yaml(result, tmp_path: Path, name: str = "r.yaml", **kw) -> str:
    return result.report(tmp_path / name, **kw).read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", ["per_level", "seeded"])
def test_no_true_count_and_no_private_note_in_the_report(kind, releases, tmp_path):
    result = releases[kind]
    leaves = np.arange(result.tree.n_leaves) * 11 + 5
    leaves[4] = PLANTED
    truth_total = int(leaves.sum())
    for text in (_html(result, tmp_path), _yaml(result, tmp_path)):
        for secret in (PLANTED, PLANTED_NOTE, truth_total):
            for form in (str(secret), f"{secret:,}", f"{secret:.6g}", f"{float(secret)}"):
                assert form not in text
        assert "dropped_rows" not in text
    assert result.ledger.private_notes == {"dropped_rows": PLANTED_NOTE}   # the notes were there to leak


def test_the_planted_count_detector_finds_a_count_that_is_there(tmp_path):
    # the check above can fail: a note holding the planted number does show up
    result = _per_level(notes=[f"count {PLANTED}"])
    assert str(PLANTED) in _html(result, tmp_path)


XSS = ['<script>document.title="pwned"</script>', '"><img src=x onerror=alert(1)>', "</style><b>x</b>"]


def test_labels_and_notes_are_escaped(tmp_path):
    tree = hierdp.Tree.complete(fanout=2, height=3, level_names=XSS)
    result = hierdp.release(tree, tree.aggregate(np.arange(4)), epsilon=1.0, notes=XSS)
    text = _html(result, tmp_path, title=XSS[0], curator=XSS[1])
    for payload in XSS:
        assert payload not in text
    p = _parse(text)
    assert not [t for t, _ in p.tags if t in ("script", "img", "b")]
    assert not [a for _, attrs in p.tags for a, _ in attrs if a.startswith("on")]
    assert [r[0] for r in p.tables["budget"]["body"]] == XSS       # shown, as text
    assert yaml.safe_load(_yaml(result, tmp_path))["deployment"]["basic"]["name"] == "hierdp release " + \
        result.ledger.release_id


def test_the_page_requests_nothing(releases, tmp_path):
    for kind, result in releases.items():
        text = _html(result, tmp_path, f"{kind}.html")
        assert "http://" not in text and "https://" not in text and "url(" not in text and "@import" not in text
        p = _parse(text)
        assert not [t for t, _ in p.tags if t in ("script", "link", "img", "iframe", "object", "embed", "image")]
        assert not [v for _, attrs in p.tags for a, v in attrs if a in ("src", "href", "xlink:href", "action")]
        assert "default-src 'none'" in text     # and the browser is told to refuse any request


# ------------------------------------------------------------------ the registry record
_STR = {"type": "string"}
#: transcribed from opendp/deployments-registry-data schemas/deployments-schema.yaml (@3e9c812a)
REGISTRY = {
    "type": "object", "additionalProperties": False, "required": ["url_slug", "status", "tier", "deployment"],
    "properties": {
        "url_slug": _STR,
        "status": {"enum": ["Converted", "Draft", "Pending", "Changes Required", "Approved",
                            "Approved (Update Requested)", "Approved (Pending)"]},
        "tier": {"enum": [1, 2, 3]},
        "deployment": {"type": "object", "additionalProperties": False, "required": ["basic"], "properties": {
            "basic": {"type": "object", "additionalProperties": False,
                      "required": ["name", "data_curators", "description", "intended_use", "data_product_type",
                                   "data_product_region", "publication_date"],
                      "properties": {"name": _STR, "data_curators": {"type": "array", "items": _STR, "minItems": 1},
                                     "intended_use": _STR, "data_product_region": _STR, "description": _STR,
                                     "data_product_type": {"enum": ["Summary statistics", "Machine learning model",
                                                                    "Dataset", "Synthetic data", "Interactive API",
                                                                    "SQL queries"]},
                                     "publication_date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
                                     "data_product_sector": _STR}},
            "dp_variant": {"type": "object", "additionalProperties": False, "properties": {
                "variant_name": {"enum": ["Pure DP", "Approximate DP", "Zero-concentrated DP", "Renyi DP", "Custom"]},
                "data_domain": _STR, "unprotected_quantities": _STR}},
            "privacy_loss": {"type": "object", "additionalProperties": False, "properties": {
                "privacy_unit": _STR, "privacy_unit_details": _STR, "privacy_parameters_details": {},
                "privacy_parameters": {"type": "object", "additionalProperties": False, "properties": {
                    "epsilon": {"type": "number"}, "delta": {"type": ["number", "string"]},
                    "rho": {"type": "number"}}}}},
            "deployment_model": {"type": "object", "additionalProperties": False, "properties": {
                "model_name": {"enum": ["Local", "Central", "Shuffle", "Federated", "Varies"]},
                "model_name_details": _STR, "actors": _STR,
                "release_type": {"enum": ["One release", "Many releases"]}, "release_type_details": _STR,
                "data_source_type": {"enum": ["Static", "Dynamic"]}, "data_source_type_details": {},
                "access_type": {"enum": ["Interactive", "Non-interactive"]}, "access_type_details": _STR}},
            "accounting": {"type": "object", "additionalProperties": False,
                           "properties": {"post_processing": _STR, "composition": _STR}},
            "implementation": {"type": "object", "additionalProperties": False, "properties": {
                "preprocessing_and_hyperparameter_tuning": _STR, "mechanisms": _STR, "justification": _STR}},
            "administrative": {"type": "object", "additionalProperties": False, "required": ["registry_authors"],
                               "properties": {"sources": _STR, "notes": _STR, "registry_authors": {
                                   "type": "array", "items": _STR, "minItems": 1}}}}}}}


@pytest.mark.parametrize("kind", ["per_level", "marginals", "privtree", "seeded"])
def test_the_yaml_is_a_valid_registry_record_with_the_ledger_facts(kind, releases, tmp_path):
    result = releases[kind]
    text = _yaml(result, tmp_path, curator="Statistics Office", region="Atlantis")
    rec = yaml.safe_load(text)
    jsonschema.validate(rec, REGISTRY)
    L = result.ledger
    assert rec["deployment"]["dp_variant"]["variant_name"] == "Pure DP"
    assert rec["deployment"]["privacy_loss"]["privacy_parameters"] == {"epsilon": L.epsilon}
    assert rec["deployment"]["basic"]["data_curators"] == ["Statistics Office"]
    assert rec["deployment"]["basic"]["publication_date"] == L.created[:10]
    details = rec["deployment"]["privacy_loss"]["privacy_parameters_details"]
    for e in L.to_dict()["levels"]:
        assert f"{e['level']}: {e['unit']} = {json.dumps(e['budget'])} (exact " in details
    # the registry's own check: block scalars literal (|), never folded (>)
    assert not [t for t in yaml.scan(text) if getattr(t, "style", None) not in (None, "|", '"', "'")]


def test_a_zcdp_release_is_a_zero_concentrated_record(tmp_path):
    tree = hierdp.Tree.complete(fanout=2, height=3)
    result = hierdp.release(tree, tree.aggregate(np.arange(4)), rho=0.3, delta=1e-6, mechanism="discrete_gaussian")
    rec = yaml.safe_load(_yaml(result, tmp_path))
    jsonschema.validate(rec, REGISTRY)
    assert rec["deployment"]["dp_variant"]["variant_name"] == "Zero-concentrated DP"
    assert rec["deployment"]["privacy_loss"]["privacy_parameters"]["rho"] == 0.3


def test_an_unknown_report_ending_is_one_clear_error(releases, tmp_path):
    with pytest.raises(hierdp.DataError, match=r"end it in \.html .* or \.yaml"):
        releases["per_level"].report(tmp_path / "r.pdf")
    assert not (tmp_path / "r.pdf").exists()


# ------------------------------------------------------------------ the command line
def _ledger_file(result, tmp_path: Path) -> Path:
    path = tmp_path / "rel.ledger.json"
    path.write_text(result.ledger.to_json(), encoding="utf-8")
    return path


def test_cli_report_from_a_saved_ledger(releases, tmp_path, capsys):
    result = releases["marginals"]
    led = _ledger_file(result, tmp_path)
    assert main(["report", str(led)]) == 0
    out = tmp_path / "rel.report.html"
    assert f"wrote {out}" in capsys.readouterr().out
    table = _parse(out.read_text(encoding="utf-8")).tables["budget"]
    col = _column(table, "Budget (as recorded)")
    assert [r[col] for r in table["body"]] == [json.dumps(e["budget"]) for e in result.ledger.to_dict()["levels"]]
    assert main(["report", str(led), "-o", str(tmp_path / "rel.yaml")]) == 0
    jsonschema.validate(yaml.safe_load((tmp_path / "rel.yaml").read_text(encoding="utf-8")), REGISTRY)


def test_cli_report_of_a_seeded_ledger_says_not_for_publication(releases, tmp_path, capsys):
    led = _ledger_file(releases["seeded"], tmp_path)
    assert main(["report", str(led), "-o", str(tmp_path / "s.html")]) == 0
    assert "NOT FOR PUBLICATION" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["missing", "not json", "not utf-8", "bad yaml", "not a ledger", "bad field",
                                  "wrong type", "ending", "is the ledger", "directory"])
def test_cli_report_bad_input_exits_2_with_one_line(case, releases, tmp_path, capsys):
    led = _ledger_file(releases["per_level"], tmp_path)
    args = {"missing": [str(tmp_path / "nope.json")],
            "ending": [str(led), "-o", str(tmp_path / "r.pdf")],
            "is the ledger": [str(led), "-o", str(tmp_path / "x.yaml")],
            "directory": [str(tmp_path)]}.get(case, [str(led)])
    if case == "not json":
        led.write_text("table,of,csv\n1,2,3\n", encoding="utf-8")
    elif case == "not utf-8":
        led.write_bytes(b"\xff\xfe\x00{")
    elif case == "bad yaml":
        led = led.rename(tmp_path / "rel.yaml")
        led.write_text("guarantee: [pure\n", encoding="utf-8")
        args = [str(led)]
    elif case == "not a ledger":
        led.write_text('{"a": 1}', encoding="utf-8")
    elif case == "bad field":
        led.write_text('{"guarantee": "pure", "levels": [{"surprise": 1}]}', encoding="utf-8")
    elif case == "wrong type":
        d = json.loads(led.read_text(encoding="utf-8"))
        d["levels"][0]["budget"] = "lots"
        led.write_text(json.dumps(d), encoding="utf-8")
    elif case == "is the ledger":
        led = led.rename(tmp_path / "x.yaml")
        led.write_text(releases["per_level"].ledger.to_yaml(), encoding="utf-8")
    assert main(["report", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob("*.pdf"))


# ------------------------------------------------------------------ the spec output
def _spec(tmp_path: Path, report: str, path: str = "out/t.csv") -> Path:
    rng = np.random.default_rng(1)
    pd.DataFrame({"region": rng.choice(["N", "S"], 300), "town": rng.choice(["a", "b"], 300)}).to_csv(
        tmp_path / "people.csv", index=False)
    (tmp_path / "spec.yaml").write_text(f"""hierdp: 1
source: {{path: people.csv}}
hierarchy:
  levels:
    - {{name: region, domain: [N, S]}}
    - {{name: town, domain: [a, b]}}
privacy: {{epsilon: 1.0}}
postprocess: [blue]
output:
  path: {path}
  report: {report}
""", encoding="utf-8")
    return tmp_path / "spec.yaml"


def test_spec_output_report_is_written_with_the_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = _spec(tmp_path, "out/t.html")
    result = hierdp.run_spec(str(spec))
    assert result.meta["written"] == ["out/t.csv", "out/t.ledger.json", "out/t.html"]
    text = (tmp_path / "out/t.html").read_text(encoding="utf-8")
    assert result.ledger.release_id in text
    assert f"sha256 <code>{facts._sha256(spec)}</code>" in text        # the spec is hashed
    assert "people.csv" in text and facts._sha256(tmp_path / "people.csv") not in text   # the private source is not
    assert main(["release", str(spec), "-q"]) == 0                   # the command line writes it too
    led = json.loads((tmp_path / "out/t.ledger.json").read_text(encoding="utf-8"))
    assert led["release_id"] in (tmp_path / "out/t.html").read_text(encoding="utf-8")


def test_spec_output_report_validation(tmp_path, capsys):
    for bad, msg in [("out/t.txt", "end it in .html"), ("out/t.ledger.json", "same file as output.ledger"),
                     ("s3://bucket/r.html", "local file")]:
        spec = _spec(tmp_path, bad)
        assert main(["validate", str(spec)]) == 2
        err = capsys.readouterr().err
        assert "output.report" in err and msg in err


def test_a_failed_write_leaves_no_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "t.csv").mkdir(parents=True)                 # the table cannot be written
    spec = _spec(tmp_path, "out/t.html")
    assert main(["release", str(spec), "-q"]) == 2
    assert not (tmp_path / "out" / "t.html").exists() and not (tmp_path / "out" / "t.ledger.json").exists()


def test_write_report_replaces_a_previous_report_whole(releases, tmp_path, monkeypatch):
    path = tmp_path / "r.html"
    path.write_text("old", encoding="utf-8")

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Path, "write_text", boom)
    with pytest.raises(RuntimeError):
        releases["per_level"].report(path)
    monkeypatch.undo()
    assert path.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]          # no temporary file left


def test_a_ledger_alone_reports_what_it_holds(releases):
    led = Ledger.from_json(releases["marginals"].ledger.to_json())
    text = rep.report_html(led)
    assert 'id="budget"' in text and 'id="queries"' not in text and 'id="released"' not in text


def test_the_released_values_of_a_deep_chain_are_runs_not_one_row_per_level(tmp_path):
    tree = hierdp.Tree.from_parent(np.arange(-1, 29))          # 30 levels, one node each
    result = hierdp.release(tree, np.full(30, 3), epsilon=3.0, postprocess=[])
    table = _parse(_html(result, tmp_path)).tables["released"]
    std = math.sqrt(result.ledger.levels[0].noise_variance)    # each value is its own measurement
    assert table["body"] == [["30 levels total … level_29", "1", f"{std:.4g}", "0"]]


# ------------------------------------------------------------------ the post-processing chain
def _dd(text: str, term: str) -> str:
    """The text of the ``<dd>`` after ``<dt>term</dt>`` (tags dropped)."""
    m = re.search(r"<dt>" + re.escape(term) + r"</dt><dd>(.*?)</dd>", text, re.S)
    assert m, f"no {term!r} in the page"
    return html_text(m.group(1))


def html_text(fragment: str) -> str:
    """The text of an HTML fragment, tags as spaces, runs of spaces as one."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()


def test_the_chain_shows_each_steps_parameters_given_and_default(tmp_path):
    tree = hierdp.Tree.complete(fanout=3, height=3)
    result = hierdp.release(tree, tree.aggregate(np.arange(9) * 4), epsilon=1.0,
                            postprocess=["blue", "nonneg", {"name": "round", "method": "remainder"}])
    assert result.ledger.postprocess_params == [{}, {}, {"method": "remainder"}]
    # given first, then the defaults in the constructors' order (rounding.py, nonneg.py)
    want = ["blue", "nonneg (max_iter: 200, tol: 1e-09, method: topdown, ordering: total)",
            "round (method: remainder, atol: 1e-07, ordering: total)"]
    assert facts.chain_steps(result.ledger) == want
    text = _html(result, tmp_path)
    assert _dd(text, "Post-processing (no privacy cost)").startswith(" → ".join(want))
    rec = yaml.safe_load(_yaml(result, tmp_path))
    assert rec["deployment"]["accounting"]["post_processing"] == " -> ".join(want)


def test_an_older_ledger_shows_the_chains_names_and_another_version_names_its_defaults(tmp_path):
    tree = hierdp.Tree.complete(fanout=3, height=3)
    result = hierdp.release(tree, tree.aggregate(np.arange(9) * 4), epsilon=1.0,
                            postprocess=["blue", "nonneg", {"name": "round", "method": "remainder", "atol": 1e-6}])
    d = json.loads(result.ledger.to_json())
    del d["postprocess_params"]                              # written before the parameters were recorded
    old = Ledger.from_dict(d)
    assert facts.chain_steps(old) == ["blue", "nonneg", "round"]
    text = rep.report_html(old)
    assert _dd(text, "Post-processing (no privacy cost)") == "blue → nonneg → round"
    d = json.loads(result.ledger.to_json())
    d["hierdp_version"] = "0.0.1"                            # its defaults may not be today's
    other = Ledger.from_dict(d)
    assert facts.chain_steps(other) == ["blue", "nonneg (the defaults of hierdp 0.0.1)",
                                        "round (method: remainder, atol: 1e-06; the defaults of hierdp 0.0.1)"]


# ------------------------------------------------------------------ readable charts
class _SvgText(HTMLParser):
    """The font size every ``<text>`` of every inline ``<svg>`` is drawn at: its own
    ``font-size`` or the nearest ancestor's (the browser's 16 px when none says)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.svgs = 0
        self.sizes: list[tuple[float, str]] = []
        self._stack: list[float | None] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
            self._stack = []
        if tag == "svg" or self._stack:
            size = a.get("font-size")
            m = re.search(r"font-size:\s*([\d.]+)", a.get("style") or "")
            self._stack.append(float(m.group(1)) if m else float(size) if size else None)
            if tag in ("text", "tspan"):
                self._text = []

    def handle_endtag(self, tag):
        if not self._stack:
            return
        if tag in ("text", "tspan") and self._text is not None:
            eff = next((s for s in reversed(self._stack) if s is not None), 16.0)
            self.sizes.append((eff, "".join(self._text)))
            self._text = None
        self._stack.pop()

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def svg_text_sizes(text: str) -> _SvgText:
    p = _SvgText()
    p.feed(text)
    return p


def _uneven() -> hierdp.ReleaseResult:
    tree = hierdp.Tree.complete(fanout=3, height=4, level_names=["nation", "region", "district", "block"])
    return hierdp.release(tree, tree.aggregate(np.arange(27) * 3), epsilon=1.0, postprocess=["blue"],
                          budget={"nation": 0.1, "region": 0.2, "district": 0.3, "block": 0.4})


def test_the_font_reader_sees_small_text():
    p = svg_text_sizes('<svg font-size="12"><text>a</text><g font-size="9"><text>b</text></g>'
                       '<text style="font-size: 8px">c</text></svg><svg><text>d</text></svg>')
    assert p.svgs == 2 and p.sizes == [(12.0, "a"), (9.0, "b"), (8.0, "c"), (16.0, "d")]


def test_no_chart_text_is_smaller_than_11px(releases, tmp_path):
    pages = {"uneven": _uneven(), "marginals": releases["marginals"], "privtree": releases["privtree"]}
    for kind, result in pages.items():
        p = svg_text_sizes(_html(result, tmp_path, f"{kind}.html"))
        assert p.svgs >= 1 and p.sizes, kind
        small = [(s, t) for s, t in p.sizes if s < 11]
        assert small == [], (kind, small)
    # the uneven release draws its three charts, with every value labelled
    p = svg_text_sizes(_html(pages["uneven"], tmp_path, "u.html"))
    assert p.svgs == 3
    shown = [t for _, t in p.sizes]
    assert {"0.1", "0.2", "0.3", "0.4"} <= set(shown)                  # the budget bars' labels
    assert {"23", "11", "8", "6"} <= set(shown)                        # 90 % half-widths (discrete Laplace)


def test_an_equal_split_is_one_sentence_not_a_chart_of_identical_bars(releases, tmp_path):
    text = _html(releases["per_level"], tmp_path)            # ε = 1 split equally over three levels
    assert 'aria-label="Budget per level"' not in text
    m = re.search(r'<p class="chart-note" id="budget-equal">([^<]*)</p>', text)
    assert m and html.unescape(m.group(1)) == ("The budget is split equally: ε = 1/3 ≈ 0.3333 (1/3 of the total) "
                                               "each for nation, region and district; no chart is drawn, its "
                                               "bars would all be equal.")
    # the same law on every level: one sentence instead of three identical groups of bars
    assert 'aria-label="Expected error of one measurement per level"' not in text
    assert "Every level&#x27;s measurement has the same expected error (std " in text
    # an uneven split draws its chart
    uneven = _html(_uneven(), tmp_path, "u.html")
    assert 'aria-label="Budget per level"' in uneven and 'id="budget-equal"' not in uneven


def test_one_measured_level_is_named_not_drawn(tmp_path):
    tree = hierdp.Tree.complete(fanout=2, height=3, level_names=["total", "half", "quarter"])
    result = hierdp.release(tree, tree.aggregate(np.arange(4)), epsilon=0.5, budget={"quarter": 0.5},
                            postprocess=["blue"])
    text = _html(result, tmp_path)
    m = re.search(r'<p class="chart-note" id="budget-equal">([^<]*)</p>', text)
    assert m and html.unescape(m.group(1)) == "The whole budget, ε = 0.5, goes to quarter; no chart is drawn."
