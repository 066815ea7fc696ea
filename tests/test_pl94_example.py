"""The bundled P.L. 94 persons example (issue 51 item 3): it validates, and ``hierdp release
pl94 -o DIR/`` releases its counts (GEOID, the four codes, count) by subtree into a
consistent dataset: non-negative integers, every parent's cell the sum of its children's,
the US and State totals exact (the invariants: checked against the counts file itself)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from hierdp import data
from hierdp.cli import main

LEVELS = ["State", "County", "Tract", "Block_Group", "Block"]
CELLS = ["hhgq", "votingage", "hispanic", "cenrace"]


def test_the_pl94_example_validates_and_releases_a_consistent_dataset(tmp_path, monkeypatch, capsys) -> None:
    assert "pl94" in data.example_names()
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "pl94"]) == 0
    assert "2016 cells" in capsys.readouterr().out
    (tmp_path / "out").mkdir()
    assert main(["release", "pl94", "-o", "out/pl94/", "-q"]) == 0
    out = tmp_path / "out" / "pl94"
    assert (out / "_SUCCESS").exists()
    frame = pd.concat([pq.read_table(p).to_pandas() for p in sorted(out.glob("part-*.parquet"))], ignore_index=True)
    est = frame["estimate"].to_numpy()
    assert np.issubdtype(est.dtype, np.integer) and (est >= 0).all()
    # consistency, cell by cell: each level's cells add up to the level above's (zeros are left out: sparse)
    for above, below in zip(["US"] + LEVELS[:-1], LEVELS, strict=True):
        key = LEVELS[:LEVELS.index(below)] + CELLS
        up = frame[frame["level"] == above].groupby(key, observed=True)["estimate"].sum() if above != "US" else \
            frame[frame["level"] == "US"].groupby(CELLS, observed=True)["estimate"].sum()
        down = frame[frame["level"] == below].groupby(key, observed=True)["estimate"].sum()
        assert up.sub(down, fill_value=0).eq(0).all(), (above, below)
    # the invariants: the US and every State total equal the counts file's
    counts = pd.read_csv(data.example_path("pl94").parent / "data" / "pl94_counts.csv", dtype={"GEOID": str})
    assert int(frame.loc[frame["level"] == "US", "estimate"].sum()) == int(counts["count"].sum())
    states = frame[frame["level"] == "State"].groupby("State", observed=True)["estimate"].sum()
    truth = counts.groupby(counts["GEOID"].str[:2])["count"].sum()
    assert states.to_dict() == truth.to_dict()
    ledger = (out / "_ledger.json").read_text(encoding="utf-8")
    assert "level 'State' (totals over the cells)" in ledger  # privacy.invariants_cover: total
    # the empty blocks of the public list are nodes of the release (none has people in the counts)
    blocks = pd.read_csv(data.example_path("pl94").parent / "data" / "pl94_blocks.csv", dtype=str)["GEOID"]
    assert set(counts["GEOID"]) < set(blocks)
