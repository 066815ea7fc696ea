"""hierdp.io: atomic writes, formats, the ledger's place beside the output."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest

from hierdp.errors import DataError
from hierdp.io import atomic_write, format_for, ledger_path_for, read_table, write_release, write_table


@pytest.mark.parametrize("name,ledger", [("r.csv", "r.ledger.json"), ("r.csv.gz", "r.ledger.json"),
                                         ("r.parquet", "r.ledger.json"), ("x.y.csv", "x.y.ledger.json")])
def test_ledger_goes_beside_the_output(name, ledger):
    assert ledger_path_for(Path("out") / name) == Path("out") / ledger


def test_format_from_extension_or_argument():
    assert format_for("a.CSV") == "csv" and format_for("a.csv.gz") == "csv"
    assert format_for("a.pq") == "parquet" and format_for("a.dat", "parquet") == "parquet"
    with pytest.raises(DataError, match=r"cannot tell the format of 'a\.xlsx'; end it in \.csv or \.parquet"):
        format_for("a.xlsx")
    with pytest.raises(DataError, match=r"unknown table format 'xls'"):
        format_for("a.csv", "xls")


def test_gzip_csv_follows_the_destination_name(tmp_path):
    df = pd.DataFrame({"level": ["total", "a"], "estimate": [3.0, 1.5]})
    write_table(df, tmp_path / "t.csv.gz")
    with gzip.open(tmp_path / "t.csv.gz", "rt") as fh:
        assert fh.read().splitlines() == ["level,estimate", "total,3.0", "a,1.5"]


def test_failed_writer_leaves_nothing_and_keeps_the_old_file(tmp_path):
    dest = tmp_path / "keep.txt"
    dest.write_text("old")

    def half(tmp: Path) -> None:
        tmp.write_text("new but incomplete")
        raise RuntimeError("disk vanished")

    with pytest.raises(RuntimeError, match="disk vanished"):
        atomic_write(dest, half)
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_write_release_puts_both_files_in_place(tmp_path):
    df = pd.DataFrame({"level": ["total"], "estimate": [1.0]})
    table, ledger = write_release(df, '{"spent": 1.0}', tmp_path / "deep" / "r.csv")
    assert table.read_text() == "level,estimate\ntotal,1.0\n"
    assert ledger == tmp_path / "deep" / "r.ledger.json" and ledger.read_text() == '{"spent": 1.0}'
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["r.csv", "r.ledger.json"]


def test_read_table_keeps_leading_zeros_and_concatenates(tmp_path):
    (tmp_path / "a.csv").write_text("state,n\n01,3\n")
    (tmp_path / "b.csv").write_text("state,n\n02,4\n")
    df = read_table([tmp_path / "a.csv", tmp_path / "b.csv"], "csv", columns=["state", "n"],
                    string_columns=["state"])
    assert df["state"].tolist() == ["01", "02"] and df["n"].tolist() == [3, 4]


def test_failed_table_move_rolls_the_ledger_back(tmp_path, monkeypatch):
    import os

    import pandas as pd

    from hierdp import io

    dest = tmp_path / "r.csv"
    io.write_release(pd.DataFrame({"a": [1]}), '{"old": true}', dest)
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst) == str(dest):
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        io.write_release(pd.DataFrame({"a": [2]}), '{"new": true}', dest)
    monkeypatch.setattr(os, "replace", real_replace)
    assert (tmp_path / "r.ledger.json").read_text() == '{"old": true}'
    assert pd.read_csv(dest)["a"].tolist() == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.ledger.json"]  # no temporaries left


def test_directory_as_output_is_a_clear_error(tmp_path):
    import pandas as pd

    from hierdp import io
    from hierdp.errors import DataError

    (tmp_path / "t.csv").mkdir()
    with pytest.raises(DataError, match="t.csv' : it is a directory|t.csv': it is a directory"):
        io.write_release(pd.DataFrame({"a": [1]}), "{}", tmp_path / "t.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


def test_ledger_at_the_table_path_is_refused(tmp_path):
    import pandas as pd

    from hierdp import io
    from hierdp.errors import DataError

    with pytest.raises(DataError, match="the ledger would overwrite the table"):
        io.write_release(pd.DataFrame({"a": [1]}), "{}", tmp_path / "t.csv", ledger_path=tmp_path / "t.csv")
    assert list(tmp_path.iterdir()) == []


def test_written_files_get_ordinary_permissions(tmp_path):
    """Not mkstemp's private 0600: a new file gets 0666 less the umask, a replaced file
    keeps its mode."""
    import os

    import pandas as pd

    from hierdp import io

    mask = os.umask(0o022)
    try:
        dest, led = io.write_release(pd.DataFrame({"a": [1]}), "{}", tmp_path / "t.csv")
        assert oct(dest.stat().st_mode & 0o777) == oct(0o644) and oct(led.stat().st_mode & 0o777) == oct(0o644)
        os.chmod(dest, 0o640)
        io.write_release(pd.DataFrame({"a": [2]}), "{}", dest)
        assert oct(dest.stat().st_mode & 0o777) == oct(0o640)
    finally:
        os.umask(mask)


def test_write_all_rolls_back_every_file_when_a_later_one_fails(tmp_path):
    from hierdp import io

    (tmp_path / "a.txt").write_text("old a")

    def boom(tmp):
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError, match="plot failed"):  # a writer fails: nothing is moved
        io.atomic_write_all([(tmp_path / "a.txt", lambda t: t.write_text("new a")), (tmp_path / "b.png", boom)])
    assert (tmp_path / "a.txt").read_text() == "old a" and not (tmp_path / "b.png").exists()
    (tmp_path / "c").mkdir()
    with pytest.raises(io.DataError, match="'.*c': it is a directory"):  # checked before anything is written
        io.atomic_write_all([(tmp_path / "a.txt", lambda t: t.write_text("new a")), (tmp_path / "c", boom)])
    assert (tmp_path / "a.txt").read_text() == "old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "c"]
