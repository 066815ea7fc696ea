"""The published dataset folder under attack (issue 50 items 1, 4, 5 and 7's output-folder parts).

A dataset folder holds exactly one release: a second release into it, stale or planted parts,
a concurrent release, a work folder inside it or an input inside it are refused with one line
before any budget is charged; temporaries are recognised by a token no one else knows, so
planted files of any name are neither deleted nor a reason to fail. References are hand-made
states of the folders and the uninterrupted release's values (the same seed, the same key).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pq = pytest.importorskip("pyarrow.parquet")

import hierdp  # noqa: E402
from hierdp import outofcore  # noqa: E402
from hierdp.errors import DataError  # noqa: E402
from hierdp.outofcore import SUCCESS, OutputFolderError, WorkFolderError, release_to_dataset  # noqa: E402
from tests.helpers import stop_after_journal  # noqa: E402

warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)

rows = [(f"s{s}", f"c{s}{c}", f"t{s}{c}{t}") for s in range(3) for c in range(3) for t in range(4)]
TREE = hierdp.Tree.from_frame(pd.DataFrame(rows, columns=["state", "county", "tract"]),
                              ["state", "county", "tract"], domains="observed")
LEAF = np.random.default_rng(50).integers(0, 9, size=TREE.n_leaves)
INTERNAL = TREE.to_internal(TREE.aggregate(LEAF))


SPLIT = {"level": "county", "memory": "9kB", "task_memory": 300}  # 9 tasks, one county each


def counts_of(task):
    return INTERNAL[task.nodes]


def run(out: Path, work: Path, **extra):
    args = dict(split=SPLIT, source_id="v1", progress=False, epsilon=1.0, seed=5, workers=1,
                postprocess=["blue", {"name": "nonneg", "params": {"method": "topdown"}},
                             {"name": "round", "params": {"method": "topdown"}}])
    args.update(extra)
    return release_to_dataset(TREE, args.pop("counts_of", counts_of), out, workdir=work, **args)


def _visible(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def _root_estimate(out: Path) -> float:
    ds = pd.read_parquet(out)
    return float(ds.loc[ds["level"] == "total", "estimate"].sum())


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """A finished release (folder ``out``, work folder ``work``) and its files."""
    d = tmp_path_factory.mktemp("first")
    ledger = run(d / "out", d / "work")
    return {"dir": d, "id": ledger.release_id, "files": _visible(d / "out")}


# ---------------------------------------------------------------------------- item 1
@pytest.mark.parametrize("change", [{}, {"split": {"level": "county", "memory": "9kB"}}, {"epsilon": 2.0}, {"source_id": "v2"}])
def test_a_second_release_into_a_finished_folder_is_refused_before_charging(tmp_path, first, change):
    """Another work folder, another task size, other settings: refused with the release id
    that is there, the folder untouched, nothing charged, no work folder made."""
    out = tmp_path / "out"
    out.mkdir()
    for name, data in first["files"].items():
        (out / name).write_bytes(data)
    session = hierdp.Session(epsilon=10.0)
    with pytest.raises(OutputFolderError) as e:
        run(out, tmp_path / "work2", session=session, **change)
    msg = str(e.value)
    assert "\n" not in msg and first["id"] in msg and "finished release" in msg and "delete the folder" in msg
    assert session.spent.get("epsilon", 0) == 0
    assert _visible(out) == first["files"]
    assert not (tmp_path / "work2").exists()
    # read back: one release, its root once
    assert _root_estimate(out) == _root_estimate(first["dir"] / "out")


def test_parts_of_an_unfinished_release_and_planted_parts_are_refused(tmp_path, first):
    part = next(n for n in first["files"] if n.startswith("part-"))
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / part).write_bytes(first["files"][part])  # a stale part of another release, no _SUCCESS
    with pytest.raises(OutputFolderError, match=f"parts of the unfinished release {first['id']}"):
        run(unfinished, tmp_path / "w1")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "part-00007.parquet").write_bytes(b"not a parquet file")
    (planted / "notes.txt").write_text("a foreign file: left alone, never a reason to refuse")
    with pytest.raises(OutputFolderError, match=r"cannot attribute to a release \(e\.g\. 'part-00007\.parquet'\)"):
        run(planted, tmp_path / "w2")
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / SUCCESS).write_text("")  # a marker without a ledger: no release hierdp can name
    with pytest.raises(OutputFolderError, match="_SUCCESS"):
        run(lone, tmp_path / "w3")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "part-00001.parquet").symlink_to(first["dir"] / "out" / part)
    with pytest.raises(OutputFolderError, match="part-00001"):
        run(linked, tmp_path / "w4")
    for w in ("w1", "w2", "w3", "w4"):
        assert not (tmp_path / w).exists()
    # only foreign names: the release goes ahead and leaves them
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "README.md").write_text("mine")
    (ok / ".hidden").write_text("mine")
    run(ok, tmp_path / "w5")
    assert (ok / "README.md").read_text() == "mine" and (ok / ".hidden").read_text() == "mine"
    assert (ok / SUCCESS).exists()


def test_a_finished_work_folder_whose_dataset_was_replaced_is_not_nothing_to_do(tmp_path, first):
    out, work = tmp_path / "out", tmp_path / "work"
    run(out, work)
    for p in out.iterdir():
        p.unlink()
    for name, data in first["files"].items():  # another release's files under this work folder's dataset
        (out / name).write_bytes(data)
    with pytest.raises(OutputFolderError, match=first["id"]):
        run(out, work)


def test_a_concurrent_release_into_the_same_folder_is_refused(tmp_path):
    """Release A is counting (it holds the folder); release B into the same folder with its
    own work folder is refused at once, nothing charged; A then finishes alone."""
    out = tmp_path / "out"
    started, go = threading.Event(), threading.Event()

    def slow(task):
        started.set()
        assert go.wait(60)
        return counts_of(task)

    result: dict = {}

    def a():
        try:
            result["a"] = run(out, tmp_path / "wa", counts_of=slow)
        except BaseException as exc:  # reported below
            result["a"] = exc

    th = threading.Thread(target=a)
    th.start()
    try:
        assert started.wait(60)
        session = hierdp.Session(epsilon=10.0)
        with pytest.raises(OutputFolderError, match="being written by another running release") as e:
            run(out, tmp_path / "wb", session=session, seed=6)
        assert "\n" not in str(e.value)
        assert session.spent.get("epsilon", 0) == 0
    finally:
        go.set()
        th.join()
    assert isinstance(result["a"], hierdp.Ledger), result["a"]
    assert json.loads((out / "_ledger.json").read_text())["release_id"] == result["a"].release_id
    ids = {pq.read_schema(p).metadata[b"hierdp.release_id"].decode() for p in out.glob("part-*.parquet")}
    assert ids == {result["a"].release_id}
    assert not (tmp_path / "wb").exists() or not (tmp_path / "wb" / "release.key").exists()


def test_a_folder_locked_by_another_process_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(OutputFolderError, match="being written by another running release"):
            run(out, tmp_path / "work")
    finally:
        os.close(fd)
    run(out, tmp_path / "work")
    assert (out / SUCCESS).exists()


def test_a_resumed_release_keeps_its_own_partial_parts(tmp_path, first, monkeypatch):
    out, work = tmp_path / "out", tmp_path / "work"
    stop_after_journal("down 2", lambda: run(out, work))
    assert list(out.glob("part-*.parquet")) and not (out / SUCCESS).exists()
    with pytest.raises(WorkFolderError, match="pass resume=True"):  # unfinished: continued only when asked
        run(out, work)
    with pytest.raises(OutputFolderError, match="parts of the unfinished release"):  # another work folder
        run(out, tmp_path / "other")
    run(out, work, resume=True)
    assert pd.read_parquet(out).sort_values(["level", "state", "county", "tract"]).reset_index(drop=True).equals(
        pd.read_parquet(first["dir"] / "out").sort_values(["level", "state", "county", "tract"])
        .reset_index(drop=True))


# ---------------------------------------------------------------------------- item 4
def test_a_work_folder_inside_the_dataset_folder_is_refused(tmp_path):
    session = hierdp.Session(epsilon=10.0)
    for work in (tmp_path / "out", tmp_path / "out" / "work", tmp_path / "out" / "a" / "b"):
        with pytest.raises(OutputFolderError, match="inside the dataset folder") as e:
            run(tmp_path / "out", work, session=session)
        assert "\n" not in str(e.value)
    assert session.spent.get("epsilon", 0) == 0
    assert not (tmp_path / "out").exists()  # refused before the folder was made


SPEC = """hierdp: 1
source: {{path: '{path}', format: parquet, engine: duckdb}}
hierarchy:
  levels:
    - {{name: state, domain: observed}}
    - {{name: county, domain: observed}}
privacy: {{epsilon: 1}}
execution: {{split: county, workers: 1}}
"""


@pytest.fixture
def records(tmp_path) -> Path:
    pytest.importorskip("duckdb")
    folder = tmp_path / "records"
    folder.mkdir()
    df = pd.DataFrame({"state": ["01", "01", "02"], "county": ["01001", "01003", "02005"]})
    df.to_parquet(folder / "part-0.parquet", index=False)
    return folder


@pytest.mark.parametrize("where", ["records", "records/out", "."])
def test_the_output_is_not_the_input_folder(tmp_path, records, where, monkeypatch, capsys):
    from hierdp import cli
    from hierdp.spec import runner

    (tmp_path / "spec.yaml").write_text(SPEC.format(path=f"{records}/"))

    def never(*a, **k):
        raise AssertionError("the source was read")

    monkeypatch.setattr(runner, "prepare", never)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["release", "spec.yaml", "-o", f"{where}/", "--seed", "1", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "input" in err and "Traceback" not in err
    assert sorted(p.name for p in records.iterdir()) == ["part-0.parquet"]


def test_the_counts_folder_is_not_the_dataset_folder(tmp_path, records, monkeypatch):
    from hierdp.spec import runner

    spec = SPEC.format(path=f"{records}/").replace("workers: 1", f"workers: 1, workdir: '{tmp_path}/x'")
    monkeypatch.setattr(runner, "prepare", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
    with pytest.raises(OutputFolderError, match="private folder"):
        runner.release_dataset_spec(spec, tmp_path / "x.counts", seed=1)


# ---------------------------------------------------------------------------- item 5
def test_planted_temporary_names_are_neither_deleted_nor_fatal(tmp_path, first):
    """A directory and files named like hierdp's temporaries (``.x.tmp-y``), one of another
    user's: the release and its resume succeed, charged once, and leave them as they were."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    (out / ".x.tmp-y").mkdir()  # unlink() of a folder fails: the old clean-up failed the charged release
    (out / ".part-00001.parquet.tmp-abc").write_text("mine")
    foreign = out / ".other.tmp-zz"
    foreign.write_text("another user's")
    os.chown(foreign, 4242, 4242)
    session = hierdp.Session(epsilon=10.0)
    stop_after_journal("down 1", lambda: run(out, work, session=session))
    run(out, work, session=session, resume=True)
    assert session.spent["epsilon"] == pytest.approx(1.0)
    assert (out / ".x.tmp-y").is_dir()
    assert (out / ".part-00001.parquet.tmp-abc").read_text() == "mine"
    assert foreign.read_text() == "another user's" and foreign.stat().st_uid == 4242
    assert _visible(out).keys() == first["files"].keys()


def test_this_releases_own_leftover_temporaries_go(tmp_path):
    """A temporary the run made (its token journalled) and left when it was killed is removed
    on resume; a look-alike with another token stays."""
    out, work = tmp_path / "out", tmp_path / "work"
    stop_after_journal("down 0", lambda: run(out, work))
    tag = next(ln[4:] for ln in (work / "journal").read_text().splitlines() if ln.startswith("tmp "))
    mine = out / f".part-00009.parquet.tmp-{tag}-k1l2"  # as a SIGKILL mid-write leaves it
    mine.write_bytes(b"half")
    other = out / f".part-00009.parquet.tmp-{'0' * 16}-k1l2"
    other.write_bytes(b"not ours")
    run(out, work, resume=True)
    assert not mine.exists() and other.read_bytes() == b"not ours"


# ---------------------------------------------------------------------------- item 7
@pytest.mark.parametrize("state", ["empty", "lock", "lock+spill", "journal", "fingerprint-temporary"])
@pytest.mark.parametrize("resume", [False, True])
def test_a_work_folder_killed_while_being_set_up_starts_afresh(tmp_path, first, state, resume):
    """What a SIGKILL right after the work folder is made can leave (nothing drawn, nothing
    charged): the same call, with or without resume, gives the uninterrupted release's values."""
    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir(mode=0o700)
    if state != "empty":
        (work / "lock").write_bytes(b"")
    if state in ("lock+spill", "journal", "fingerprint-temporary"):
        (work / "spill").mkdir(mode=0o700)
    if state in ("journal", "fingerprint-temporary"):
        (work / "journal").write_text("tmp 0123456789abcdef\n")
    if state == "fingerprint-temporary":
        (work / ".release.json.tmp-0123456789abcdef-x1y2").write_text('{"format": 1, "id": "half')
    run(out, work, resume=resume)
    assert pd.read_parquet(out).equals(pd.read_parquet(first["dir"] / "out"))  # the same key: the same values
    assert sorted(p.name for p in work.iterdir()) == ["journal", "ledger.json", "lock", "release.json"]


def test_a_work_folder_with_foreign_files_is_still_refused(tmp_path):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)  # owner-only, so that the private-folder check lets it through to this one
    (work / "lock").write_bytes(b"")
    (work / "journal").write_text("tmp 0123456789abcdef\n")
    (work / ".release.json.tmp-ffffffffffffffff-x").write_text("")  # another token: not this folder's
    with pytest.raises(WorkFolderError, match="not empty and holds no hierdp release"):
        run(tmp_path / "out", work)
    (work / ".release.json.tmp-ffffffffffffffff-x").unlink()
    (work / "journal").write_text("charged\n")  # a journal of steps without a fingerprint: not a start
    with pytest.raises(WorkFolderError, match="not empty and holds no hierdp release"):
        run(tmp_path / "out", work)


def _spec_file(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text("""hierdp: 1
source: {demo: census}
hierarchy:
  root: total
  paths: {demo: census}
  levels: [{name: state}, {name: county}, {name: tract}]
privacy: {epsilon: 1.0}
execution: {split: county, workers: 1, memory: 9kB}
""")
    return spec


def test_a_rerun_without_resume_is_refused_before_the_count(tmp_path, monkeypatch):
    from hierdp.spec import runner

    spec = _spec_file(tmp_path)
    stop_after_journal("up 0", lambda: runner.release_dataset_spec(spec, tmp_path / "out", seed=3))

    def never(*a, **k):
        raise AssertionError("the source was read and counted")

    monkeypatch.setattr(runner, "prepare", never)
    with pytest.raises(WorkFolderError, match="--resume"):
        runner.release_dataset_spec(spec, tmp_path / "out", seed=3)


def test_ctrl_c_says_what_exists_and_that_resume_continues(tmp_path, monkeypatch, capsys):
    from hierdp import cli

    spec = _spec_file(tmp_path)
    real = outofcore.write_part
    calls = []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 3:  # the second of the two tasks: the top part and the first task's are written
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(outofcore, "write_part", interrupted)
    code = cli.main(["release", str(spec), "-o", f"{tmp_path}/out/", "--seed", "3", "-q"])
    err = capsys.readouterr().err
    assert code == 130
    parts = len(list((tmp_path / "out").glob("part-*.parquet")))
    assert parts >= 2
    assert err.count("\n") == 1 and "no output was written" not in err
    assert f"{parts} part(s)" in err and "--resume" in err
    monkeypatch.undo()
    assert cli.main(["release", str(spec), "-o", f"{tmp_path}/out/", "--seed", "3", "-q", "--resume"]) == 0
    assert (tmp_path / "out" / SUCCESS).exists()


def test_describe_unfinished_before_anything_was_charged(tmp_path):
    assert outofcore.describe_unfinished(tmp_path / "out", tmp_path / "work") == \
        "no output was written; run the same command again (nothing was charged)"
    with pytest.raises(DataError, match="is a file"):
        (tmp_path / "f").write_text("")
        outofcore.check_dataset_target(tmp_path / "f")
