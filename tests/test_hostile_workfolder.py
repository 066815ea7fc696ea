"""Private working state under attack (issue 50 items 2, 3 and 7, the work-folder side).

The attacker of these tests can write to the folder the output and work folder sit in (or
is another user on the machine): they pre-create the folders hierdp would use, with modes
of their choice, plant files in them and keep them open, or swap the release key between
two runs. The reference behaviour is stated by hand: the true counts, the key and the
spills only ever sit in a folder this user created with mode 0700 (files 0600), a folder
hierdp did not make for this user is refused with one line, and a resume refuses a key or
an input that is not the release's own.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow.parquet")

import hierdp  # noqa: E402
from hierdp import outofcore  # noqa: E402
from hierdp.errors import DataError  # noqa: E402
from hierdp.keyed_noise import NoiseKey  # noqa: E402
from hierdp.outofcore import WorkFolderError, release_to_dataset  # noqa: E402
from tests.helpers import stop_after_journal  # noqa: E402

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="simulating another owner needs os.chown (root)")
OTHER_UID = 54321

SPEC = """hierdp: 1
source: {{path: '{path}', format: parquet, engine: duckdb}}
hierarchy:
  levels:
    - {{name: state, domain: observed}}
    - {{name: county, domain: observed}}
privacy: {{epsilon: 2}}
seed: 3
postprocess: [blue]
execution: {{split: county, workers: 1}}
"""


def _records(folder: Path) -> Path:
    rng = np.random.default_rng(4)
    n = 900
    state = rng.choice(["a", "b", "c"], n)
    df = pd.DataFrame({"state": state, "county": np.char.add(state.astype(str), rng.choice(["1", "2", "3"], n))})
    folder.mkdir()
    df.iloc[:500].to_parquet(folder / "part-0.parquet", index=False)
    df.iloc[500:].to_parquet(folder / "part-1.parquet", index=False)
    return folder


def _spec(tmp: Path, records: Path) -> Path:
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC.format(path=f"{records}/"))
    return spec


def _quiet_release(*args, **kw):
    from hierdp.spec.runner import release_dataset_spec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return release_dataset_spec(*args, **kw)


def _private(path: Path) -> bool:
    st = os.lstat(path)
    return st.st_uid == os.geteuid() and not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077 == 0


# ---------------------------------------------------------------- item 2: the counts
def test_a_planted_counts_folder_never_receives_the_true_counts(tmp_path, monkeypatch):
    """The attacker's reproducer: ``<out>.work.counts/`` made 0777 with an empty 0666
    ``counts.parquet.partial`` that the attacker holds open. The release must not write a
    byte into it; the counts it does write sit in a folder of ours, 0700, the file 0600."""
    from hierdp.frontends.dataset import CountedDataset

    records = _records(tmp_path / "records")
    out = tmp_path / "out"
    planted = tmp_path / "out.work.counts"
    planted.mkdir()
    os.chmod(planted, 0o777)
    bait = planted / "counts.parquet.partial"
    bait.write_bytes(b"")
    os.chmod(bait, 0o666)
    held = os.open(bait, os.O_RDONLY)  # the attacker's descriptor, opened before the release
    seen: list[tuple[Path, int, bool]] = []
    real = CountedDataset.counts_of

    def spy(self, task):
        seen.append((self.path, stat.S_IMODE(os.stat(self.path).st_mode), _private(self.path.parent)))
        return real(self, task)

    monkeypatch.setattr(CountedDataset, "counts_of", spy)
    try:
        _quiet_release(_spec(tmp_path, records), out)
        assert os.read(held, 1 << 20) == b""  # nothing reached the attacker's file
    finally:
        os.close(held)
    assert bait.read_bytes() == b"" and sorted(p.name for p in planted.iterdir()) == ["counts.parquet.partial"]
    assert seen and all(mode == 0o600 and private for _, mode, private in seen)
    assert all(planted not in path.parents for path, _, _ in seen)
    assert not seen[0][0].exists()  # gone with the release
    assert len(pd.read_parquet(out)) > 0


def test_counted_refuses_a_counts_folder_it_did_not_make(tmp_path):
    records = _records(tmp_path / "records")
    door = hierdp.dptree(str(records), levels=["state", "county"], domains="observed")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(DataError, match="open to other users") as err:
        door.counted(shared)
    assert "\n" not in str(err.value) and not list(shared.iterdir())
    link = tmp_path / "link"
    link.symlink_to(shared)
    with pytest.raises(DataError, match="symbolic link"):
        door.counted(link)
    made = door.counted(tmp_path / "mine")  # a new folder: made 0700, the file 0600
    assert stat.S_IMODE(os.stat(tmp_path / "mine").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(made.path).st_mode) == 0o600


@ROOT_ONLY
def test_counted_refuses_a_folder_of_another_user(tmp_path):
    records = _records(tmp_path / "records")
    door = hierdp.dptree(str(records), levels=["state", "county"], domains="observed")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(DataError, match="belongs to another user"):
        door.counted(theirs)
    assert not list(theirs.iterdir())


def test_duckdb_spills_go_to_a_private_folder_inside_a_shared_temp_directory(tmp_path):
    """DuckDB creates its spill files 0644: in a temp_directory others may read they would
    show the records. They go to a fresh 0700 folder inside it, removed afterwards."""
    records = _records(tmp_path / "records")
    shared = tmp_path / "scratch"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # a sticky scratch folder, as /tmp
    door = hierdp.dptree(str(records), levels=["state", "county"], domains="observed", temp_directory=shared)
    with door._connect() as con:
        spill = Path(con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
        assert spill.parent == shared and _private(spill) and stat.S_IMODE(os.stat(spill).st_mode) == 0o700
    assert not spill.exists() and not list(shared.iterdir())


# ---------------------------------------------------------------- item 3: the work folder and its key
SMALL = hierdp.Tree.complete(fanout=3, height=4, level_names=["L1", "L2", "L3", "L4"])
SMALL_VALUES = SMALL.to_internal(SMALL.aggregate(np.arange(SMALL.n_leaves) % 5))


def _small(out: Path, work: Path, **kw):
    args = dict(split={"level": "L3", "memory": 2000}, source_id="small v1", progress=False, epsilon=1.0, seed=5,
                workers=1)
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return release_to_dataset(SMALL, lambda task: SMALL_VALUES[task.nodes], out, workdir=work, **args)


def _interrupted(out: Path, work: Path, monkeypatch, line: str = "up 1") -> None:
    stop_after_journal(line, lambda: _small(out, work))


@ROOT_ONLY
def test_a_work_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    with pytest.raises(WorkFolderError, match="belongs to another user") as err:
        _small(tmp_path / "out", theirs)
    assert "\n" not in str(err.value) and not list(theirs.iterdir())
    # an interrupted release whose folder changed hands since is not resumed either
    out, work = tmp_path / "out2", tmp_path / "work2"
    _interrupted(out, work, monkeypatch)
    for p in [work, *work.rglob("*")]:
        os.chown(p, OTHER_UID, OTHER_UID, follow_symlinks=False)
    before = sorted(p.name for p in work.iterdir())
    with pytest.raises(WorkFolderError, match="belongs to another user"):
        _small(out, work, resume=True)
    assert sorted(p.name for p in work.iterdir()) == before


def test_a_work_folder_open_to_others_or_a_symlink_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(WorkFolderError, match=r"open to other users \(mode 0777\).*chmod 700") as err:
        _small(tmp_path / "out", shared)
    assert "\n" not in str(err.value)
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o777 and not list(shared.iterdir())  # not adopted
    link = tmp_path / "link"
    link.symlink_to(shared)
    with pytest.raises(WorkFolderError, match="symbolic link"):
        _small(tmp_path / "out", link)
    # an interrupted release's folder opened to the group since: refused before anything is read
    out, work = tmp_path / "out2", tmp_path / "work2"
    _interrupted(out, work, monkeypatch)
    os.chmod(work, 0o770)
    with pytest.raises(WorkFolderError, match="open to other users"):
        _small(out, work, resume=True)
    # inside a folder others may write to (not sticky): they could swap the folder itself
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    os.chmod(open_parent, 0o777)
    with pytest.raises(WorkFolderError, match="other users may write to"):
        _small(tmp_path / "out3", open_parent / "work")
    assert not (open_parent / "work").exists()


def test_a_swapped_release_key_is_refused_on_resume(tmp_path, monkeypatch):
    """The journal binds the release to the digest of the key made for it: a resume with
    another key (a swapped ``release.key``) stops before any noise is drawn with it."""
    out, work = tmp_path / "out", tmp_path / "work"
    _interrupted(out, work, monkeypatch)
    key_file = work / "release.key"
    original = key_file.read_bytes()
    outofcore.save_key(key_file, NoiseKey(bytes(range(32)), secure=True))
    parts = sorted(p.name for p in out.glob("part-*"))
    with pytest.raises(WorkFolderError, match="release key is not the one") as err:
        _small(out, work, resume=True)
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in out.glob("part-*")) == parts and "down 0" not in (work / "journal").read_text()
    # the release's own key back: the resume runs, and gives the uninterrupted values
    key_file.write_bytes(original)
    _small(out, work, resume=True)
    _small(tmp_path / "ref", tmp_path / "wref")
    got, want = (pd.read_parquet(p).sort_values("node").reset_index(drop=True) for p in (out, tmp_path / "ref"))
    assert len(want) > 10 and got.equals(want)


# ---------------------------------------------------------------- item 7: the input changed in place
def test_an_input_changed_in_place_with_the_same_size_and_mtime_is_not_resumed(tmp_path, monkeypatch):
    """An interrupted release; then 40 people move to another county in a CSV part, the file
    keeps its size and its modification time is set back: the resume must refuse the input
    (the remaining tasks would count other data than the finished ones)."""
    from hierdp.spec.runner import load_spec, source_identity

    records = _records(tmp_path / "parquet")
    folder = tmp_path / "records"
    folder.mkdir()
    for p in sorted(records.glob("*.parquet")):
        pd.read_parquet(p).to_csv(folder / (p.stem + ".csv"), index=False)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(path=f"{folder}/").replace("format: parquet", "format: csv"))
    out = tmp_path / "out"
    stop_after_journal("up 0", lambda: _quiet_release(spec, out))
    before = source_identity(load_spec(spec))
    target = folder / "part-1.csv"
    st = target.stat()
    lines = target.read_text().splitlines(keepends=True)
    moved = [ln[:-2] + ("2" if ln[-2] != "2" else "1") + "\n" for ln in lines[1:41]]  # county a1 -> a2 ...
    target.write_text("".join([lines[0], *moved, *lines[41:]]))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    assert target.read_text() != "".join(lines)
    assert source_identity(load_spec(spec)) != before
    with pytest.raises(WorkFolderError, match="holds another release"):
        _quiet_release(spec, out, resume=True)


def test_source_identity_sees_a_byte_changed_in_the_middle_of_a_small_file(tmp_path):
    from hierdp.spec.runner import load_spec, source_identity

    records = _records(tmp_path / "records")
    spec = load_spec(_spec(tmp_path, records))
    before = source_identity(spec)
    target = records / "part-0.parquet"
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert source_identity(spec) != before
    assert source_identity(spec) == source_identity(spec)
