"""``hierarchy.geoid`` (issue 51 item 1): the public list of block GEOIDs defines the tree by
prefix lengths; records carry only the GEOID. The reference is the pandas door given the
prefixes as level columns and the prefix frame as domains (hierdp.tree.geoid_frame, itself
checked against the declared decomposition in tests/test_geoids.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import hierdp
from hierdp.errors import DataError, SpecError
from hierdp.spec import run_spec, validate
from hierdp.spec.runner import release_dataset_spec
from hierdp.tree import geoid_frame

LEVELS = {"State": 2, "County": 5, "Tract": 11, "Block": 15}
BLOCKS = [f"{s}{c}{t}{b}" for s in ("01", "56") for c in ("001", "003") for t in ("000100", "000200")
          for b in ("1000", "1001", "2000")]  # 24 blocks, leading zeros everywhere

SPEC = """hierdp: 1
source: {{path: '{records}'{engine}}}
hierarchy:
  root: US
  geoid: {{file: '{blocks}', column: GEOID, levels: {{State: 2, County: 5, Tract: 11, Block: 15}}}}
privacy: {{epsilon: 1}}
seed: 5
{extra}"""


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(6)
    blocks = tmp_path / "blocks.csv"
    pd.DataFrame({"GEOID": BLOCKS, "AREA": 1}).to_csv(blocks, index=False)
    used = [b for b in BLOCKS if not b.endswith("2000")]  # some blocks stay empty: they are in the list
    records = tmp_path / "people.csv"
    pd.DataFrame({"GEOID": rng.choice(used, 800)}).to_csv(records, index=False)
    return blocks, records


def _spec(tmp_path, files, extra: str = "", engine: str = "", blocks=None) -> object:
    f = tmp_path / "s.yaml"
    f.write_text(SPEC.format(records=files[1], blocks=blocks or files[0], extra=extra, engine=engine))
    return f


def _quiet(fn, *a, **k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return fn(*a, **k)


def test_a_geoid_geography_releases_what_the_door_releases_from_the_prefixes(tmp_path, files):
    got = _quiet(run_spec, _spec(tmp_path, files), write=False)
    people = pd.read_csv(files[1], dtype=str)
    cols = people.assign(**{name: people["GEOID"].str[:n] for name, n in LEVELS.items()})
    want = _quiet(cols.dptree(levels=list(LEVELS), domains=geoid_frame(BLOCKS, LEVELS), root="US").release,
                  epsilon=1.0, seed=5)
    assert got.tree.n_nodes == want.tree.n_nodes == 1 + 2 + 4 + 8 + 24  # empty blocks included
    assert np.array_equal(np.asarray(got.estimate.values), np.asarray(want.estimate.values))
    frame = got.to_frame()
    assert set(frame.loc[frame["level"] == "Block", "Block"]) == set(BLOCKS)  # text, leading zeros kept
    # by subtree into the dataset, the records counted by the pandas engine and by DuckDB (the
    # levels computed there as the code's prefixes): the same dataset
    for name, engine in (("pandas", ""), ("duckdb", ", engine: duckdb")):
        _quiet(release_dataset_spec, _spec(tmp_path, files, "execution: {split: County}\n", engine=engine),
               tmp_path / name)
        assert (tmp_path / name / "_SUCCESS").exists()
    a, b = ({p.name: pq.read_table(p) for p in sorted((tmp_path / n).glob("part-*.parquet"))} for n in ("pandas",
                                                                                                       "duckdb"))
    assert sorted(a) == sorted(b) and all(a[n].equals(b[n]) for n in a)


def test_a_file_column_named_as_a_derived_level_is_replaced_by_the_prefix(tmp_path, files):
    # DuckDB's column names ignore case: a records column 'block' (here the row number of the
    # block, as the census files have it) must not stand in for the level 'Block' the prefix
    # defines; the dataset equals the one from the records without that column
    people = pd.read_csv(files[1], dtype=str)
    with_col = tmp_path / "with.parquet"
    people.assign(block=np.arange(len(people)), COUNTY="x").to_parquet(with_col)
    without = tmp_path / "without.parquet"
    people.to_parquet(without)
    for name, path in (("with", with_col), ("without", without)):
        _quiet(release_dataset_spec, _spec(tmp_path, (files[0], path), "execution: {split: County}\n",
                                           engine=", engine: duckdb"), tmp_path / name)
    a, b = ({p.name: pq.read_table(p) for p in sorted((tmp_path / n).glob("part-*.parquet"))}
            for n in ("with", "without"))
    assert sorted(a) == sorted(b) and all(a[n].equals(b[n]) for n in a)


def test_what_cannot_be_a_geoid_geography_is_one_line(tmp_path, files):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"GEOID": BLOCKS[:-1] + ["5600300020020"]}).to_csv(bad, index=False)
    with pytest.raises(SpecError, match=r"hierarchy\.geoid: 1 GEOID\(s\) are not 15 characters long"):
        _quiet(run_spec, _spec(tmp_path, files, blocks=bad), write=False)
    outside = tmp_path / "outside.csv"
    pd.DataFrame({"GEOID": ["560010001009999"]}).to_csv(outside, index=False)
    with pytest.raises(DataError):  # a record's code outside the list: the door's one line
        _quiet(run_spec, _spec(tmp_path, (files[0], outside)), write=False)
    with pytest.raises(SpecError, match="hierarchy.geoid reads the records with the pandas or duckdb engine today"):
        validate(_spec(tmp_path, files, engine=", engine: polars"))
    text = SPEC.replace("  geoid:", "  levels: [{{name: State, domain: observed}}]\n  geoid:")
    f = tmp_path / "both.yaml"
    f.write_text(text.format(records=files[1], blocks=files[0], extra="", engine=""))
    with pytest.raises(SpecError):
        validate(f)


def test_a_level_name_that_is_not_text_is_one_spec_line(tmp_path, files):
    """Found by tests/test_spec_fuzz.py: a level key renamed to a number made the split-level
    check join the names and fail with a TypeError instead of a spec error."""
    text = SPEC.replace("County: 5", "0: 5")
    f = tmp_path / "numbered.yaml"
    f.write_text(text.format(records=files[1], blocks=files[0], extra="execution: {split: Tract}\n", engine=""))
    with pytest.raises(SpecError, match="level names are text"):
        validate(f)
