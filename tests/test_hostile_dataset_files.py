"""The DuckDB door on hostile file names and on files that change under it (issue 50 items
6 and 7, the DuckDB side).

References are hand counts: each file's rows are known, so the total a door counts must be
the sum over the files it names, each once. A file deleted, garbled or ragged after (or
while) the door is built gives one line that names the file and the fix: never DuckDB's
text (SQL, and for a CSV the offending row itself).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

import hierdp  # noqa: E402
from hierdp.errors import DataError  # noqa: E402
from hierdp.frontends.dataset import DatasetDPTree, dataset_files  # noqa: E402

LEVELS = ["state", "county"]
SECRET = "SECRET4711"


def _people(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    state = rng.choice(["a", "b"], n)
    return pd.DataFrame({"state": state, "county": np.char.add(state.astype(str), rng.choice(["1", "2"], n))})


def _total(source, **kw) -> int:
    door = DatasetDPTree(source, LEVELS, domains="observed", **kw)
    values, _ = door.node_values()
    return int(np.asarray(values)[0])


def _one_line(err: pytest.ExceptionInfo, *absent: str) -> str:
    text = str(err.value)
    assert "\n" not in text and "SELECT" not in text and "read_parquet" not in text and "read_csv" not in text
    for word in absent:
        assert word not in text
    return text


# ---------------------------------------------------------------- item 6: names read as globs
@pytest.fixture
def globby(tmp_path) -> Path:
    """p0 (200 rows), p1 (600) and a file literally named ``p[01].parquet`` (600), plus files
    named with ``*`` and ``?`` beside ones those patterns would match."""
    folder = tmp_path / "data"
    folder.mkdir()
    sizes = {"p0.parquet": 200, "p1.parquet": 600, "p[01].parquet": 600, "q*.parquet": 10, "qa.parquet": 30,
             "r?.parquet": 7}
    for i, (name, n) in enumerate(sizes.items()):
        _people(n, i).to_parquet(folder / name, index=False)
    return folder


def test_a_file_named_like_a_pattern_counts_its_own_rows_once(globby):
    assert _total([globby / "p[01].parquet"]) == 600  # was 800: DuckDB read it as p0 + p1
    assert _total([globby / "q*.parquet"]) == 10
    assert _total([globby / "r?.parquet", globby / "p0.parquet"]) == 207
    assert _total(str(globby)) == 200 + 600 + 600 + 10 + 30 + 7  # the folder: every file once
    # a path that names an existing file is that file, even when it reads as a pattern
    assert _total(str(globby / "p[01].parquet")) == 600
    files, _ = dataset_files(str(globby / "p[01].parquet"))
    assert files == [globby / "p[01].parquet"]
    # in a folder whose name is a pattern too
    shutil.copytree(globby, globby.parent / "d[1]")
    assert _total([globby.parent / "d[1]" / "p[01].parquet", globby.parent / "d[1]" / "q*.parquet"]) == 610
    assert _total(str(globby.parent / "d[1]")) == 1447


def test_a_pattern_that_names_no_file_is_still_a_glob(tmp_path):
    for i, n in enumerate([5, 7, 11]):
        _people(n, i).to_parquet(tmp_path / f"part-{i}.parquet", index=False)
    assert _total(str(tmp_path / "part-[01].parquet")) == 12
    assert _total(str(tmp_path / "part-*.parquet")) == 23


def test_csv_files_named_like_patterns(tmp_path):
    _people(30, 1).to_csv(tmp_path / "c[1].csv", index=False)
    _people(40, 2).to_csv(tmp_path / "c1.csv", index=False)
    assert _total([tmp_path / "c[1].csv"]) == 30
    assert _total(str(tmp_path)) == 70


def test_an_out_of_domain_value_names_the_file_with_the_pattern_name(globby):
    bad = _people(20, 9)
    bad.loc[3, "county"] = "zz"
    bad.to_parquet(globby / "p[01].parquet", index=False)
    door = DatasetDPTree([globby / "p0.parquet", globby / "p[01].parquet"], LEVELS,
                         domains={"state": ["a", "b"], "county": {"a": ["a1", "a2"], "b": ["b1", "b2"]}})
    with pytest.raises(DataError, match="outside the declared domain") as err:
        door.node_values()
    assert "'p[01].parquet'" in str(err.value) and "zz" not in str(err.value)


# ---------------------------------------------------------------- item 7: files that change under the door
@pytest.fixture
def parts(tmp_path) -> Path:
    folder = tmp_path / "records"
    folder.mkdir()
    _people(300, 1).to_parquet(folder / "part-0.parquet", index=False)
    _people(300, 2).to_parquet(folder / "part-1.parquet", index=False)
    return folder


def test_a_file_deleted_after_the_door_is_built(parts, tmp_path):
    door = hierdp.dptree(str(parts), levels=LEVELS, domains="observed")
    (parts / "part-1.parquet").unlink()
    with pytest.raises(DataError, match=r"dataset part 'part-1.parquet' is gone .*open the dataset again") as err:
        door.node_values()
    _one_line(err)
    with pytest.raises(DataError, match="'part-1.parquet' is gone"):
        door.counted(tmp_path / "counts")


@pytest.mark.parametrize("how", ["junk", "truncated", "middle"])
def test_a_file_garbled_after_the_door_is_built(parts, how):
    door = hierdp.dptree(str(parts), levels=LEVELS, domains="observed")
    target = parts / "part-1.parquet"
    data = target.read_bytes()
    if how == "junk":
        target.write_bytes(b"x" * len(data))
    elif how == "truncated":
        target.write_bytes(data[: len(data) // 2])
    else:  # the footer intact, the pages in between overwritten
        target.write_bytes(data[:4] + b"\xff" * (len(data) // 2) + data[4 + len(data) // 2:])
    with pytest.raises(DataError, match=r"dataset part 'part-1.parquet': not a readable Parquet file") as err:
        door.node_values()
    _one_line(err)


@pytest.mark.parametrize("row", [f"b,b1,{SECRET}", "b"])
def test_a_ragged_csv_is_one_line_naming_the_file_and_the_row(tmp_path, row):
    folder = tmp_path / "csv"
    folder.mkdir()
    _people(30, 1).to_csv(folder / "a.csv", index=False)
    lines = ["state,county"] + [f"a,a{i % 2 + 1}" for i in range(50)] + [row] + ["b,b1"] * 10
    (folder / "b.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        _total(str(folder))
    text = _one_line(err, SECRET)
    fields = len(row.split(","))
    assert f"dataset part 'b.csv': row 52 has {fields} field" in text and "the header has 2" in text


def test_a_csv_made_ragged_after_the_door_is_built(tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    _people(30, 1).to_csv(folder / "a.csv", index=False)
    door = hierdp.dptree(str(folder), levels=LEVELS, domains="observed")
    with open(folder / "a.csv", "a") as fh:
        fh.write(f"a,a1,{SECRET},x\n")
    with pytest.raises(DataError, match=r"dataset file 'a.csv': row 32 has 4 fields, the header has 2") as err:
        door.node_values()
    _one_line(err, SECRET)


def test_duckdb_errors_that_are_not_about_the_files_are_not_disguised(parts):
    door = hierdp.dptree(str(parts), levels=LEVELS, domains="observed")
    with door._connect() as con:
        with pytest.raises(Exception, match="no_such_table") as err:
            con.execute("SELECT * FROM no_such_table").fetchall()
    assert not isinstance(err.value, DataError)
