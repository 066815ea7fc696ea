"""A spec with ``plan: marginals`` runs by subtree (issue 51 item 2): ``split:`` in memory
and ``execution:`` into the resumable Parquet dataset, node-total invariants included. The
reference is the same release in Python (the door, in memory, no split): the keyed noise
makes the split and out-of-core releases equal it value for value."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import hierdp
from hierdp.errors import SpecError
from hierdp.spec import validate
from hierdp.spec.runner import release_dataset_spec, run_spec

SPEC = """hierdp: 1
source: {{path: '{path}'}}
hierarchy:
  root: total
  levels:
    - {{name: state, domain: ['01', '02']}}
    - {{name: county, domain: [a, b, c]}}
cells:
  - {{name: age, domain: [0, 1, 2]}}
  - {{name: sex, domain: [F, M]}}
privacy: {{rho: 0.5, neighbours: substitute, invariants: [total, state]}}
plan:
  name: marginals
  params:
    mechanism: discrete_gaussian
    strategy: [{{dims: [age, sex], share: 0.6}}, {{dims: [age], share: 0.2}}, {{dims: [], share: 0.2}}]
postprocess: [nonneg, {{name: round, params: {{method: topdown}}}}]
seed: 7
{extra}"""


@pytest.fixture
def records(tmp_path):
    rng = np.random.default_rng(3)
    n = 2_000
    df = pd.DataFrame({"state": rng.choice(["01", "02"], n), "county": rng.choice(["a", "b", "c"], n),
                       "age": rng.choice(["0", "1", "2"], n), "sex": rng.choice(["F", "M"], n)})
    path = tmp_path / "people.csv"
    df.to_csv(path, index=False)
    return path


def _spec(tmp_path, records, extra: str = ""):
    f = tmp_path / "s.yaml"
    f.write_text(SPEC.format(path=records, extra=extra))
    return f


def _by_node(frame: pd.DataFrame) -> pd.Series:
    keys = [c for c in ("level", "state", "county", "age", "sex") if c in frame.columns]
    frame = frame.assign(**{k: frame[k].astype(object).where(frame[k].notna(), "").astype(str) for k in keys})
    return frame.set_index(keys)["estimate"].astype(np.int64).sort_index()


def test_a_marginals_spec_runs_by_subtree_in_memory_and_into_a_dataset(tmp_path, records):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        whole = run_spec(_spec(tmp_path, records), write=False)
        split = run_spec(_spec(tmp_path, records, "split: state\n"), write=False)
        ledger = release_dataset_spec(_spec(tmp_path, records, "execution: {split: state, workers: 2}\n"),
                                      tmp_path / "out")
    assert np.array_equal(np.asarray(split.estimate.values), np.asarray(whole.estimate.values))
    frame = pd.concat([pq.read_table(p).to_pandas() for p in sorted((tmp_path / "out").glob("part-*.parquet"))])
    got = _by_node(frame)
    want = _by_node(whole.to_frame())
    want = want[want != 0]  # the dataset is sparse: integer zeros are left out
    assert got.index.equals(want.index) and np.array_equal(got.to_numpy(), want.to_numpy())
    assert ledger.plan == "marginals" and [i.split("'")[1] for i in ledger.invariants] == ["total", "state"]
    assert (tmp_path / "out" / "_SUCCESS").exists()
    # consistent non-negative integers: each state's cells are its counties' sums; the state
    # totals are published exactly (invariants: the true counts of the records)
    people = pd.read_csv(records, dtype=str)
    g = got.reset_index()
    assert (g["estimate"] >= 0).all()
    states = g[g["level"] == "state"].groupby(["state", "age", "sex"])["estimate"].sum()
    counties = g[g["level"] == "county"].groupby(["state", "age", "sex"])["estimate"].sum()
    assert states.sub(counties, fill_value=0).eq(0).all()
    assert g[g["level"] == "state"].groupby("state")["estimate"].sum().to_dict() == \
        people.groupby("state").size().to_dict()


def test_a_plan_that_cannot_run_by_subtree_is_one_line(tmp_path, records):
    text = SPEC[:SPEC.index("plan:")] + "plan: ghazi\n" + SPEC[SPEC.index("postprocess:"):]
    f = tmp_path / "g.yaml"
    f.write_text(text.format(path=records, extra="execution: {split: state}\n"))
    with pytest.raises(SpecError, match="execution runs a release on a declared hierarchy by subtree with plan "
                                        "per_level or marginals"):
        validate(f)


def test_invariants_cover_needs_invariants(tmp_path, records):
    f = tmp_path / "c.yaml"
    f.write_text(SPEC.format(path=records, extra="").replace("invariants: [total, state]}",
                                                             "invariants_cover: total}"))
    with pytest.raises(SpecError, match="invariants_cover says what invariant nodes publish; it needs "
                                        "privacy.invariants"):
        validate(f)
