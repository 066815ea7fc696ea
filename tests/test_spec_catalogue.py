"""A catalogue of broken specs: each fails `hierdp release` with exit code 2, exactly one
error line naming the file:line:column and YAML path, a fix, and no output file."""

from __future__ import annotations

import re

import pytest

from hierdp import registry
from hierdp.cli import main
from hierdp.mechanisms.base import Mechanism
from hierdp.plugins import hookimpl

BASE = """\
hierdp: 1
source:
  path: people.csv
hierarchy:
  levels:
    - name: region
      domain: [north, south]
    - name: city
      domain:
        per_parent:
          north: [a, b]
          south: [c]
privacy:
  epsilon: 1.0
budget: equal
mechanism: discrete_laplace
postprocess: [blue]
output:
  path: out.csv
"""

PEOPLE = "person_id,region,city,age\n1,north,a,30\n2,north,b,41\n3,south,c,25\n4,north,a,52\n"


def sub(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


class _Zcdp(Mechanism):
    """A stand-in Gaussian-type (ρ-zCDP) mechanism for the catalogue."""

    name = "catalogue_zcdp"
    budget_unit = "rho"

    def variance(self, budget, sensitivity):  # pragma: no cover - never sampled here
        return sensitivity.l2 ** 2 / (2 * budget)

    def sample(self, values, budget, sensitivity, rng):  # pragma: no cover - never sampled here
        raise AssertionError("validation must fail before sampling")


class _Plugin:
    @hookimpl
    def hierdp_register_mechanisms(self):
        return [_Zcdp]


# (id, spec text, expected line (None: no position), regex the one error line must match)
CASES = [
    ("typo-section", sub("privacy:", "privcy:"), 13, r"privcy: unknown key 'privcy'; did you mean 'privacy'\?"),
    ("typo-epsilon", sub("  epsilon: 1.0", "  epsilom: 1.0"), 14,
     r"privacy\.epsilom: unknown key .*did you mean 'epsilon'\?"),
    ("negative-epsilon", sub("epsilon: 1.0", "epsilon: -1"), 14, r"privacy\.epsilon: must be > 0, got -1; give"),
    ("zero-epsilon", sub("epsilon: 1.0", "epsilon: 0"), 14, r"privacy\.epsilon: must be > 0, got 0"),
    ("inf-epsilon", sub("epsilon: 1.0", "epsilon: .inf"), 14, r"privacy\.epsilon: must be a finite number, got inf"),
    ("nan-epsilon", sub("epsilon: 1.0", "epsilon: .nan"), 14, r"privacy\.epsilon: must be a finite number, got nan"),
    ("string-epsilon", sub("epsilon: 1.0", "epsilon: one"), 14,
     r"privacy\.epsilon: must be a number, got the string 'one'"),
    ("delta-out-of-range", sub("epsilon: 1.0", "epsilon: 1.0\n  delta: 1.5",
                               sub("mechanism: discrete_laplace", "mechanism: catalogue_zcdp")), 15,
     r"privacy\.delta: must be < 1, got 1\.5"),
    ("budget-sum", sub("budget: equal", "budget:\n  per_level: {total: 0.2, region: 0.3, city: 0.4}"), 16,
     r"budget\.per_level: per-level budgets sum to 0\.9 but privacy\.epsilon is 1; make them add up"),
    ("budget-unknown-level", sub("budget: equal", "budget:\n  per_level: {total: 0.5, regoin: 0.5}"), 16,
     r"budget\.per_level\.regoin: 'regoin' is not a level; did you mean 'region'\?"),
    ("budget-negative", sub("budget: equal", "budget:\n  per_level: {total: 1.5, region: -0.5}"), 16,
     r"budget\.per_level\.region: must be >= 0, got -0\.5"),
    ("unknown-mechanism", sub("mechanism: discrete_laplace", "mechanism: discrete_laplas"), 16,
     r"mechanism: unknown mechanism 'discrete_laplas'; did you mean 'discrete_laplace'\?"),
    ("unknown-postprocessor", sub("postprocess: [blue]", "postprocess: [bleu]"), 17,
     r"postprocess\[0\]: unknown postprocessor 'bleu'; did you mean 'blue'\?"),
    ("unknown-budget", sub("budget: equal", "budget: equl"), 15,
     r"budget: unknown budget 'equl'; did you mean 'equal'\?"),
    ("mechanism-params", sub("mechanism: discrete_laplace", "mechanism:\n  name: discrete_laplace\n"
                                                          "  params: {scale: 2}"), 18,
     r"mechanism\.params\.scale: mechanism 'discrete_laplace' takes no parameters; remove `scale`"),
    ("gaussian-under-pure-epsilon", sub("mechanism: discrete_laplace", "mechanism: catalogue_zcdp"), 16,
     r"mechanism: mechanism 'catalogue_zcdp' \(Gaussian noise\) cannot give pure ε-DP: give privacy\.rho"),
    ("rho-with-pure-mechanism", sub("epsilon: 1.0", "rho: 0.5"), 16,
     r"mechanism 'discrete_laplace' is pure ε-DP .*remove privacy\.rho"),
    ("epsilon-and-rho", sub("epsilon: 1.0", "epsilon: 1.0\n  rho: 0.5", sub("mechanism: discrete_laplace",
                                                                         "mechanism: catalogue_zcdp")), 15,
     r"privacy\.rho: give either privacy\.epsilon .* or privacy\.rho, not both"),
    ("round-first", sub("postprocess: [blue]", "postprocess: [round]"), 17,
     r"postprocess\[0\]: 'round' needs a consistent input; put 'blue'"),
    ("per-level-rho-from-epsilon-delta", sub("epsilon: 1.0", "epsilon: 1.0\n  delta: 1.0e-9",
                                             sub("mechanism: discrete_laplace", "mechanism: catalogue_zcdp",
                                                 sub("budget: equal", "budget:\n  per_level: {total: 0.5, region: 0.25, city: 0.25}"))),
     17, r"budget\.per_level: per-level values are in the mechanism's unit, rho; .*give privacy\.rho"),
    ("missing-source-file", sub("path: people.csv", "path: peple.csv"), 3,
     r"source\.path: file 'peple\.csv' does not exist .*check the path"),
    ("missing-level-column", sub("- name: city", "- name: city\n      column: town"), 9,
     r"hierarchy\.levels\[1\]\.column: level column 'town' is missing from the source"),
    ("missing-filter-column", sub("  path: people.csv", "  path: people.csv\n  filter:\n"
                                                        "    - {column: agee, op: '>=', value: 18}"), 5,
     r"source\.filter\[0\]\.column: column 'agee' is not in the source; did you mean 'age'\?"),
    ("missing-domain-file", sub("domain: [north, south]", "domain: {file: regions.txt}"), 7,
     r"hierarchy\.levels\[0\]\.domain\.file: file 'regions\.txt' does not exist"),
    ("domain-typo", sub("domain: [north, south]", "domain: observd"), 7,
     r"hierarchy\.levels\[0\]\.domain: got the string 'observd'; did you mean 'observed'\?; expected"),
    ("empty-domain", sub("domain: [north, south]", "domain: []"), 7,
     r"hierarchy\.levels\[0\]\.domain: must list at least 1 item"),
    ("duplicate-domain-value", sub("domain: [north, south]", "domain: [north, north]"), 7,
     r"hierarchy\.levels\[0\]\.domain: lists 'north' more than once; remove the duplicate"),
    ("per-parent-unknown-parent", sub("          south: [c]", "          south: [c]\n          sout: [d]"), 13,
     r"per_parent\.sout: 'sout' is not a value of the parent level 'region'; did you mean 'south'\?"),
    ("per-parent-first-level", sub("domain: [north, south]", "domain: {per_parent: {x: [north]}}"), 7,
     r"hierarchy\.levels\[0\]\.domain\.per_parent: level 'region' is the first level.*give a list"),
    ("unknown-attribute-observed", sub("      domain: [north, south]", "      attribute: unknown\n"
                                                                      "      domain: observed"), 8,
     r"level 'region' is an unknown attribute.*declare its full domain"),
    ("no-domain", sub("      domain: [north, south]\n", ""), 6,
     r"hierarchy\.levels\[0\]: level 'region' declares no domain; .*add `domain:`"),
    ("duplicate-level-names", sub("- name: city", "- name: region"), 8,
     r"hierarchy\.levels\[1\]\.name: duplicate level name 'region' \(also level 0\)"),
    ("level-named-like-root", sub("- name: city", "- name: total"), 8,
     r"level name 'total' is the root's name; rename the level"),
    ("levels-not-a-list", sub("  levels:\n    - name: region\n      domain: [north, south]\n    - name: city\n"
                              "      domain:\n        per_parent:\n          north: [a, b]\n          south: [c]\n",
                              "  levels: {region: [north, south]}\n"), 5,
     r"hierarchy\.levels: must be a list, got a mapping"),
    ("duplicate-key", sub("epsilon: 1.0", "epsilon: 1.0\n  epsilon: 2.0"), 15,
     r"privacy\.epsilon: duplicate key 'epsilon' \(first given on line 14\); keep only one"),
    ("max-contributions-without-unit", sub("epsilon: 1.0", "epsilon: 1.0\n  max_contributions: 2"), 15,
     r"privacy\.max_contributions: max_contributions needs privacy\.unit"),
    ("unit-column-missing", sub("epsilon: 1.0", "epsilon: 1.0\n  unit: persn_id\n  max_contributions: 1"), 15,
     r"privacy\.unit: column 'persn_id' is not in the source; did you mean 'person_id'\?"),
    ("output-format", sub("path: out.csv", "path: out.xlsx"), 19,
     r"output\.path: cannot tell the output format from 'out\.xlsx'; end it in \.csv or \.parquet"),
    ("prior-inline-list", sub("budget: equal", "budget:\n  strategy: greedy\n  params:\n    prior: [1, 2, 3]"), 18,
     r"budget\.params\.prior: in a spec the prior is a table: give \{file: <csv>, column: estimate\}"),
    ("prior-glob", sub("budget: equal", "budget:\n  strategy: greedy\n  params:\n    prior: {file: 'pe*.csv'}"), 18,
     r"budget\.params\.prior\.file: the prior is one file; give its name, not a pattern"),
    ("level-named-like-an-output-column", sub("- name: city", "- name: estimate\n      column: city"), 8,
     r"hierarchy\.levels\[1\]\.name: level name 'estimate' is the name of an output column .*keep `column: city`"),
    ("output-ledger-is-the-table", sub("path: out.csv", "path: out.csv\n  ledger: ./out.csv"), 20,
     r"output\.ledger: output\.ledger is the same file as output\.path.*give it its own name"),
    ("output-column", sub("path: out.csv", "path: out.csv\n  columns: [estimate, stdev]"), 20,
     r"output\.columns\[1\]: must be one of 'estimate', 'std', 'noisy', 'ci', got the string 'stdev'; "
     r"did you mean 'std'\?"),
    ("unknown-demo", sub("  path: people.csv", "  demo: censsu"), 3,
     r"source\.demo: unknown demo dataset 'censsu'; did you mean 'census'\?"),
    ("version-2", sub("hierdp: 1", "hierdp: 2"), 1, r"hierdp: unsupported spec version 2; this hierdp reads `hierdp: 1`"),
    ("missing-version", sub("hierdp: 1\n", ""), 1, r"missing required key 'hierdp'; add `hierdp:`"),
    ("yaml-syntax", sub("postprocess: [blue]", "postprocess: [blue"), 18, r"YAML syntax error: .*check the indentation"),
    ("tabs", sub("  epsilon: 1.0", "\tepsilon: 1.0"), 14, r"YAML syntax error: a tab character is used for "
                                                         r"indentation; indent with spaces only"),
    ("empty-file", "", 1, r"the spec is empty; a spec starts with `hierdp: 1`"),
    ("comment-only-file", "# nothing here\n", 1, r"the spec is empty"),
    ("not-a-mapping", "- hierdp: 1\n", 1, r"the spec must be a mapping of sections .*start the file with `hierdp: 1`"),
    ("filter-in-needs-list", sub("  path: people.csv", "  path: people.csv\n  filter:\n"
                                                       "    - {column: region, op: in, value: north}"), 5,
     r"source\.filter\[0\]\.value: operator 'in' needs a list of values, got a string; write value: \[a, b\]"),
]


def test_catalogue_is_large_enough():
    assert len(CASES) >= 25
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.fixture
def zcdp_plugin():
    plugin = _Plugin()
    registry.register(plugin, name="catalogue-zcdp")
    yield
    registry.unregister(plugin)


@pytest.mark.parametrize("case_id,text,line,pattern", CASES, ids=[c[0] for c in CASES])
def test_broken_spec(case_id, text, line, pattern, tmp_path, capsys, zcdp_plugin, monkeypatch):
    (tmp_path / "people.csv").write_text(PEOPLE)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    monkeypatch.chdir(tmp_path)
    out_file = tmp_path / "result" / "out.csv"
    code = main(["release", str(spec), "-o", str(out_file)])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    errors = [ln for ln in captured.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, captured.err
    assert "Traceback" not in captured.err
    msg = errors[0]
    assert msg.startswith(f"error: {spec}:{line}:"), msg
    assert re.search(pattern, msg), msg
    assert not out_file.exists() and not (tmp_path / "out.csv").exists()
    assert not (tmp_path / "result").exists()


def test_all_errors_reported_at_once(tmp_path, capsys):
    (tmp_path / "people.csv").write_text(PEOPLE)
    text = sub("epsilon: 1.0", "epsilon: -2", sub("postprocess: [blue]", "postprocess: [bleu]",
                                                 sub("privacy:", "privacy:\n  delat: 0.1")))
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    code = main(["validate", str(spec)])
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert code == 2
    assert len(errors) == 3
    # sorted by position in the file
    assert [int(e.split(":")[2]) for e in errors] == sorted(int(e.split(":")[2]) for e in errors)
    assert any("did you mean 'delta'" in e for e in errors)
    assert any("did you mean 'blue'" in e for e in errors)
    assert any("privacy.epsilon: must be > 0" in e for e in errors)
