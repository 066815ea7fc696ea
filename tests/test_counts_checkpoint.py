"""Counts are checkpointed in the work folder (issue 51 item 6): a counted dataset's release
(``source.engine: duckdb``) stopped after its budget was charged keeps its counts, owner-only,
for ``--resume``, which reads them instead of counting the records again and gives the
dataset of an uninterrupted run; a run stopped before the charge, and a completed one, leave
no counts behind."""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

import hierdp
from hierdp.frontends.dataset import DatasetDPTree
from hierdp.spec.runner import release_dataset_spec
from tests.helpers import stop_after_journal

SPEC = """hierdp: 1
source: {{path: '{path}/', format: parquet, engine: duckdb}}
hierarchy:
  levels:
    - {{name: state, domain: observed}}
    - {{name: county, domain: observed}}
privacy: {{epsilon: 2}}
seed: 3
postprocess: [blue]
execution: {{split: county, workers: 1, workdir: '{work}'}}
"""


def _setup(tmp: Path, name: str) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(4)
    state = rng.choice(["a", "b", "c"], 900)
    df = pd.DataFrame({"state": state, "county": np.char.add(state.astype(str), rng.choice(["1", "2", "3"], 900))})
    records = tmp / "records"
    if not records.exists():
        records.mkdir()
        df.iloc[:500].to_parquet(records / "part-0.parquet", index=False)
        df.iloc[500:].to_parquet(records / "part-1.parquet", index=False)
    spec = tmp / f"{name}.yaml"
    work = tmp / f"{name}.work"
    spec.write_text(SPEC.format(path=records, work=work))
    return spec, tmp / name, work


def _run(spec: Path, out: Path, **kw) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return release_dataset_spec(spec, out, **kw)


def _tables(out: Path) -> dict[str, object]:
    return {p.name: pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))}


def test_a_resumed_counted_release_reads_the_kept_counts_instead_of_counting_again(tmp_path, monkeypatch) -> None:
    spec, out, work = _setup(tmp_path, "a")
    ref_spec, ref_out, _ = _setup(tmp_path, "ref")
    _run(ref_spec, ref_out)
    counted: list[int] = []
    real = DatasetDPTree._leaf_keys

    def spy(self, *a, **k):
        counted.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(DatasetDPTree, "_leaf_keys", spy)
    stop_after_journal("charged", lambda: _run(spec, out))
    assert counted == [1]
    kept = [p for p in work.iterdir() if p.name.startswith("counts-")]
    assert len(kept) == 1 and (kept[0] / "counts.json").exists()  # kept for the resume, private
    assert stat.S_IMODE(os.stat(kept[0]).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(kept[0] / "counts.parquet").st_mode) == 0o600
    _run(spec, out, resume=True)
    assert counted == [1]  # not counted again
    a, b = _tables(out), _tables(ref_out)
    assert sorted(a) == sorted(b) and all(a[n].equals(b[n]) for n in a)
    assert not [p for p in work.iterdir() if p.name.startswith("counts-")]  # complete: the counts are gone


def test_a_run_stopped_before_its_charge_leaves_no_counts(tmp_path, monkeypatch) -> None:
    spec, out, work = _setup(tmp_path, "b")

    def fail(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("hierdp.spec.runner.release_to_dataset", fail)  # counted, then stopped before any charge
    try:
        _run(spec, out)
    except KeyboardInterrupt:
        pass
    assert not [p for p in work.iterdir() if p.name.startswith("counts-")]
