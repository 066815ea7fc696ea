"""The synthetic US of benchmarks/census_us_data.py on a 2-state miniature (DC and Wyoming).

Checked against the facts of shared/census/pl94_persons_2020.yaml (hand-copied numbers)
and the Census code formats, not against the generator's own constants.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_census_us as bench  # noqa: E402
import census_us_data as cus  # noqa: E402

STATES = ["11", "56"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("census")
    cus.ensure_states(d, STATES, seed=7, verbose=False)
    return d


def _geo(data: Path, fips: str) -> dict[str, np.ndarray]:
    t = pq.read_table(data / f"state={fips}" / "geography.parquet")
    return {c: np.asarray(t.column(c).to_numpy(zero_copy_only=False), dtype=str) for c in t.column_names}


def _counts(data: Path, fips: str) -> dict[str, np.ndarray]:
    t = pq.read_table(data / f"state={fips}" / "counts.parquet")
    return {c: t.column(c).to_numpy() if c != "geoid" else np.asarray(t.column(c).to_pylist())
            for c in t.column_names}


def test_us_level_sizes_are_the_pl94_geography():
    plans = cus.state_plans()
    assert len(plans) == 51
    assert sum(p.counties for p in plans.values()) == 3143
    assert sum(p.tracts for p in plans.values()) == 84414
    assert sum(p.block_groups for p in plans.values()) == 239780
    assert sum(p.blocks for p in plans.values()) == 8132968
    assert sum(p.persons for p in plans.values()) == 331449281
    assert sorted(plans) == [f"{i:02d}" for i in range(1, 57) if i not in (3, 7, 14, 43, 52)]
    assert plans["11"].counties == 1 and plans["56"].counties == 23 and plans["48"].counties == 254


@pytest.mark.parametrize("fips", STATES)
def test_level_counts_and_codes(data: Path, fips: str):
    plan = cus.state_plans()[fips]
    g = _geo(data, fips)
    assert g["geoid"].size == plan.blocks
    county = np.char.add(g["state"], g["county"])
    tract = np.char.add(county, g["tract"])
    bg = np.char.add(tract, g["block_group"])
    assert np.unique(county).size == plan.counties
    assert np.unique(tract).size == plan.tracts
    assert np.unique(bg).size == plan.block_groups
    assert np.unique(g["geoid"]).size == plan.blocks
    assert set(np.char.str_len(g["county"])) == {3} and set(np.char.str_len(g["tract"])) == {6}
    assert set(np.char.str_len(g["block_group"])) == {1} and set(np.char.str_len(g["block"])) == {4}
    assert set(np.char.str_len(g["geoid"])) == {15} and (g["state"] == fips).all()
    assert g["county"][0] == "001"  # leading zeros kept (not 1)
    assert np.all(np.char.isdigit(g["geoid"]))
    # the Census block GEOID: state + county + tract + block, the block's first digit its group
    assert (g["geoid"] == np.char.add(tract, g["block"])).all()
    assert (np.array([b[0] for b in g["block"]]) == g["block_group"]).all()
    assert "0" not in set(g["block_group"])
    assert (g["geoid"][1:] > g["geoid"][:-1]).all()  # sorted, every block once


@pytest.mark.parametrize("fips", STATES)
def test_persons_empty_blocks_and_heavy_tail(data: Path, fips: str):
    plan = cus.state_plans()[fips]
    g = _geo(data, fips)
    c = _counts(data, fips)
    assert (c["count"] > 0).all()  # only non-zero rows
    assert int(c["count"].sum()) == plan.persons
    assert (g["geoid"][c["block"]] == c["geoid"]).all()
    pop = np.bincount(c["block"], c["count"], minlength=g["geoid"].size)
    empty = float(np.mean(pop == 0))
    assert 0.28 < empty < 0.42, empty  # about a third of the blocks have no residents
    live = pop[pop > 0]
    assert live.max() > 20 * np.median(live)  # heavy-tailed block populations


def test_histogram_shares_and_sparsity(data: Path):
    hist = np.zeros(2016)
    for fips in STATES:
        c = _counts(data, fips)
        cell = ((c["hhgq"].astype(np.int64) * 2 + c["votingage"]) * 2 + c["hispanic"]) * 63 + c["cenrace"]
        assert c["hhgq"].max() <= 7 and c["cenrace"].max() <= 62
        hist += np.bincount(cell, c["count"], minlength=2016)
    h = hist.reshape(8, 2, 2, 63) / hist.sum()
    assert 0.18 < h[:, 0].sum() < 0.26  # under 18: ~22%
    assert 0.12 < h[:, :, 1].sum() < 0.26  # Hispanic: ~19% in the US
    gq = h[1:].sum(axis=(1, 2, 3))
    assert 0.015 < gq.sum() < 0.035 and (gq > 0).all()  # ~2.5% in group quarters, all 7 types
    cenrace = np.sort(h.sum(axis=(0, 1, 2)))[::-1]
    assert cenrace[:6].sum() > 0.85  # most persons in a few race cells
    assert (cenrace > 0).sum() > 30  # and the rare combinations occur
    cells = np.sort(h.ravel())[::-1]
    assert cells[:40].sum() > 0.9  # a few dozen of the 2,016 cells hold most persons
    # White alone (index 0) and Black alone (1) come first in the Census cenrace order
    assert cus.CENRACE[0] == (0,) and cus.CENRACE[6] == (0, 1) and cus.CENRACE[62] == (0, 1, 2, 3, 4, 5)
    assert h.sum(axis=(0, 1, 2))[0] == cenrace[0]


def test_determinism_per_seed():
    a = cus.generate_state("11", seed=3)
    b = cus.generate_state("11", seed=3)
    c = cus.generate_state("11", seed=4)
    assert (a.geography["geoid"] == b.geography["geoid"]).all()
    for x, y in ((a.block, b.block), (a.cell, b.cell), (a.count, b.count)):
        assert np.array_equal(x, y)
    assert a.count.size != c.count.size or not np.array_equal(a.count, c.count)


def test_benchmark_tree_and_counts_from_the_files(data: Path):
    geo = bench.Geography(data, STATES)
    plans = cus.state_plans()
    want = [1, 2] + [sum(getattr(plans[f], a) for f in STATES) for a in ("counties", "tracts", "block_groups",
                                                                           "blocks")]
    assert geo.level_sizes.tolist() == want
    tree = geo.tree()
    assert tree.n_nodes == sum(want) and tree.level_names[-1] == "Block"
    counts = bench.Counts(data, geo)
    blocks = np.arange(int(geo.level_sizes[5]))
    dense = counts.leaves(blocks)
    assert int(dense.sum()) == plans["11"].persons + plans["56"].persons
    c = _counts(data, "56")
    off = int(geo.block_offset[1])
    cell = ((c["hhgq"].astype(np.int64) * 2 + c["votingage"]) * 2 + c["hispanic"]) * 63 + c["cenrace"]
    assert np.array_equal(dense[off + c["block"], cell], c["count"])
    vals = tree.aggregate(dense)
    assert vals[1].sum() == plans["11"].persons and vals[2].sum() == plans["56"].persons


def test_strategy_drops_hhinstlevels_and_renormalises():
    strategy, dropped = bench.marginal_strategy()
    assert dropped["US"] == Fraction(26, 4097) and dropped["Tract"] == Fraction(5, 4102)
    for lv, spec in strategy.items():
        assert abs(sum(spec.values()) - 1) < 1e-12
        assert ("hhgq",) in spec and len(spec) == (9 if lv == "US" else 10)
    assert () not in strategy["US"]  # the US total is invariant, not measured
    # Block: detailed 3945/4097 of the level, renormalised by 1 - 5/4097
    assert strategy["Block"][("hhgq", "votingage", "hispanic", "cenrace")] == pytest.approx(3945 / 4092)
    assert sum(bench.level_budgets().values()) == pytest.approx(2.56)


def test_records_expand_the_counts(tmp_path: Path):
    sd = cus.generate_state("11", seed=5)
    cus.write_state(tmp_path, "11", sd, records=True)
    rec = pq.read_table(tmp_path / "state=11" / "records.parquet")
    assert rec.num_rows == cus.state_plans()["11"].persons
    col = {c: rec.column(c).to_numpy() for c in ("hhgq", "votingage", "hispanic", "cenrace")}
    cell = ((col["hhgq"].astype(np.int64) * 2 + col["votingage"]) * 2 + col["hispanic"]) * 63 + col["cenrace"]
    geoid = np.asarray(rec.column("geoid").to_pylist())
    block = np.searchsorted(sd.geography["geoid"], geoid)
    assert (sd.geography["geoid"][block] == geoid).all()
    key, n = np.unique(block * 2016 + cell, return_counts=True)
    assert np.array_equal(key, sd.block.astype(np.int64) * 2016 + sd.cell) and np.array_equal(n, sd.count)


def _cli_args(**kw):
    import argparse

    base = dict(split="Tract", memory="6GiB", task_memory="256MiB", workers=2, ordering="total")
    return argparse.Namespace(**{**base, **kw})


def test_cli_door_inputs_and_spec_validate(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture):
    # the front door's inputs: one Parquet part per state (links), the public block list with
    # every block (empty ones too), and the bundled pl94 spec pointed at them; `hierdp
    # validate` accepts it (the geography built from the GEOIDs by prefix length)
    from hierdp.cli import main as cli

    counts, blocks = bench.write_cli_inputs(data, STATES, tmp_path)
    assert sorted(p.name for p in counts.iterdir()) == ["11.parquet", "56.parquet"]
    import pyarrow.csv as pacsv

    text = pacsv.ConvertOptions(column_types={"geoid": pa.string()})
    listed = pacsv.read_csv(blocks, convert_options=text).column("geoid").to_pylist()
    geoids = np.concatenate([_geo(data, f)["geoid"] for f in STATES])
    assert listed == geoids.tolist() and all(len(g) == 15 for g in listed[:100])
    spec = bench.write_cli_spec(tmp_path, counts, blocks, _cli_args(ordering="pl94"))
    import yaml

    doc = yaml.safe_load(spec.read_text())
    assert doc["source"] == {"path": str(counts), "count": "count", "engine": "duckdb"}
    assert doc["execution"]["split"] == {"level": "Tract", "memory": "6GiB", "task_memory": "256MiB"}
    assert doc["postprocess"][1] == {"name": "round", "params": {"method": "topdown", "ordering": "pl94"}}
    rc = cli(["validate", str(spec)])
    shown = capsys.readouterr()
    assert rc == 0, shown.err
    assert ": valid (US > State > County > Tract > Block_Group > Block" in shown.out
    assert len(listed) == sum(cus.state_plans()[f].blocks for f in STATES)


def test_cli_door_evaluation_against_hand_errors(data: Path, tmp_path: Path):
    # the evaluation of a released dataset: the truth written in the dataset's layout gives 0
    # everywhere; one Block cell raised by 3 and a row of another block dropped give, at Block
    # only, (3 + the dropped count) / blocks per unit and the same / (blocks x 252) per vhc cell
    pytest.importorskip("duckdb")
    import pandas as pd

    c = _counts(data, "11")
    blocks = len(_geo(data, "11")["geoid"])
    t = pd.DataFrame({k: c[k] for k in ("geoid", "hhgq", "votingage", "hispanic", "cenrace", "count")})
    dims = ["hhgq", "votingage", "hispanic", "cenrace"]
    parts = [t.groupby(dims, as_index=False)["count"].sum().assign(level="US")]
    for lv, n in bench.GEOID_LENGTHS.items():
        agg = t.assign(u=t.geoid.str.slice(0, n)).groupby(["u", *dims], as_index=False)["count"].sum()
        agg["level"] = lv
        for lv2, n2 in bench.GEOID_LENGTHS.items():
            agg[lv2] = agg.u.str.slice(0, n2) if n2 <= n else None
        parts.append(agg.drop(columns="u"))
    out = pd.concat(parts, ignore_index=True).rename(columns={"count": "estimate"})
    out[dims] = out[dims].astype(str)
    ds = tmp_path / "ds"
    ds.mkdir()
    out.to_parquet(ds / "part-00000.parquet")
    got = bench.evaluate_dataset(ds, data, ["11"])
    assert got["Block"][0] == blocks and got["County"][0] == 1 and got["US"][0] == 1
    assert all(e[1:] == (0.0, 0.0) for e in got.values())
    blk = out.index[out.level == "Block"]
    first = blk[0]
    other = next(i for i in blk if out.loc[i, "Block"] != out.loc[first, "Block"])
    dropped = int(out.loc[other, "estimate"])
    out.loc[first, "estimate"] += 3
    out.drop(index=other).to_parquet(ds / "part-00000.parquet")
    got = bench.evaluate_dataset(ds, data, ["11"])
    for lv in ("US", "State", "County", "Tract", "Block_Group"):
        assert got[lv][1:] == (0.0, 0.0)
    assert got["Block"][1] == pytest.approx((3 + dropped) / blocks, rel=1e-12)
    assert got["Block"][2] == pytest.approx((3 + dropped) / (blocks * 252), rel=1e-12)
    assert len(bench.error_lines(got)) == 7
