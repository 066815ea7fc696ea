"""Out-of-core split releases to a Parquet dataset (hierdp.outofcore, issue 31 items 2-6).

The reference is the in-memory split release (``hierdp.release(..., split=...)``) with the
same key (seed): noise is keyed per node, so the dataset must hold exactly its values. The
crash tests SIGKILL a subprocess at injected checkpoints (``KILL_ENV``) and resume.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
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
from hierdp.outofcore import KILL_ENV, SUCCESS, WorkFolderError  # noqa: E402
from tests.helpers import stop_after_journal  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: the job, shared by this process and the killed subprocesses: 25 counties (subtrees),
#: one per task (the top solve's 81 nodes bound a task to one county), 2 cells per node
SETUP = r'''
import numpy as np, pandas as pd, warnings
import hierdp
warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
rng = np.random.default_rng(31)
rows = [(f"s{s}", f"c{s}{c}", f"t{s}{c}{t}", f"b{s}{c}{t}{b}") for s in range(5) for c in range(5)
        for t in range(4) for b in range(10)]
paths = pd.DataFrame(rows, columns=["state", "county", "tract", "block"])
TREE = hierdp.Tree.from_frame(paths, ["state", "county", "tract", "block"], domains="observed")
leaf = rng.integers(0, 4, size=(TREE.n_leaves, 2)) * (rng.random((TREE.n_leaves, 1)) < 0.6)
VALUES = TREE.aggregate(leaf)                      # external order, (n, 2)
INTERNAL = TREE.to_internal(VALUES)
SPLIT = {"level": "county", "memory": 81 * 60 * 2}
KW = dict(epsilon=2.0, seed=11, postprocess=["blue", {"name": "nonneg", "params": {"method": "topdown"}},
                                             {"name": "round", "params": {"method": "topdown"}}])
CELLS = {"sex": ["f", "m"]}
def counts_of(task):
    return INTERNAL[task.nodes]
def run(out, work, **extra):
    from hierdp.outofcore import release_to_dataset
    args = dict(split=SPLIT, n_cells=2, cells=CELLS, source_id="synthetic v1", progress=False, **KW)
    args.update(extra)
    return release_to_dataset(TREE, counts_of, out, workdir=work, **args)
'''

JOB: dict = {}
exec(SETUP, JOB)
TREE, VALUES, INTERNAL, run = JOB["TREE"], JOB["VALUES"], JOB["INTERNAL"], JOB["run"]
LEVELS = ["state", "county", "tract", "block"]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def _long(frame: pd.DataFrame) -> pd.Series:
    """estimate by (path, cell) as text keys."""
    key = frame[LEVELS].astype("string").fillna("-").agg("/".join, axis=1) + "|" + frame["sex"].astype(str)
    return pd.Series(frame["estimate"].to_numpy(), index=key.to_numpy()).sort_index()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run's files, and the in-memory split release with the same key."""
    d = tmp_path_factory.mktemp("ref")
    ledger = run(d / "out", d / "work")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        mem = hierdp.release(TREE, VALUES, split=JOB["SPLIT"], **JOB["KW"])
    return {"files": _files(d / "out"), "ledger": ledger, "mem": mem, "dir": d}


def test_the_job_has_at_least_20_subtrees_and_tasks():
    part = hierdp.subtrees.partition(TREE, JOB["SPLIT"], n_cells=2)
    assert part.roots.size == 25 and part.n_tasks == 25


def test_dataset_equals_the_in_memory_release_bit_for_bit(reference):
    mem = reference["mem"].frame
    mem = mem.assign(sex=np.where(mem["cell"] == 0, "f", "m"))
    ds = pd.read_parquet(reference["dir"] / "out")
    assert set(ds.columns) == {"level", *LEVELS, "sex", "estimate"}
    want = _long(mem)
    got = _long(ds)
    assert ds["estimate"].dtype == np.int64 and (ds["estimate"] != 0).all()  # sparse: only non-zero cells
    assert got.index.is_unique
    assert got.equals(want[want != 0])       # same values, same cells, exactly
    assert (want != 0).sum() < len(want)      # the sparse form did drop cells
    parts = sorted(p.name for p in (reference["dir"] / "out").glob("part-*.parquet"))
    assert parts == [f"part-{i:05d}.parquet" for i in range(26)]  # the top part and 25 tasks


def test_dense_form_and_std_column(tmp_path, reference):
    run(tmp_path / "out", tmp_path / "work", dense=True, std=True)
    ds = pd.read_parquet(tmp_path / "out")
    assert len(ds) == TREE.n_nodes * 2
    mem = reference["mem"].frame
    mem = mem.assign(sex=np.where(mem["cell"] == 0, "f", "m"))
    assert _long(ds).equals(_long(mem))
    # after round the linear std is not the released value's error: NaN, as ReleaseResult.frame says
    assert ds["std"].isna().all()


def test_ledger_in_every_part_and_beside(reference):
    out = reference["dir"] / "out"
    text = (out / "_ledger.json").read_text()
    assert hierdp.Ledger.from_json(text).release_id == reference["ledger"].release_id
    for p in out.glob("part-*.parquet"):
        meta = pq.read_schema(p).metadata
        assert meta[b"hierdp.ledger"].decode() == text
    assert (out / SUCCESS).exists()
    led = reference["ledger"]
    assert led.levels == reference["mem"].ledger.levels and not led.for_publication


def test_secrets_are_owner_only_and_gone_when_done(tmp_path, monkeypatch):
    seen = {}
    real = outofcore.SplitStages.up

    def spy(self, task, counts):  # while the release runs: the key file is 0600, the folder 0700
        key = tmp_path / "work" / "release.key"
        seen["key"] = key.stat().st_mode & 0o777
        seen["work"] = (tmp_path / "work").stat().st_mode & 0o777
        return real(self, task, counts)

    monkeypatch.setattr(outofcore.SplitStages, "up", spy)
    run(tmp_path / "out", tmp_path / "work", workers=1)
    assert seen == {"key": 0o600, "work": 0o700}
    left = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert left == ["journal", "ledger.json", "lock", "release.json"]  # no key, no spilled state


def _killed_run(out: Path, work: Path, at: int, resume: bool = False) -> int:
    script = SETUP + f"\nrun({str(out)!r}, {str(work)!r}, resume={resume})\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{KILL_ENV: str(at)})
    proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A work folder killed right after the release was charged (checkpoint 3: its
    fingerprint, key and ledger are made) and the files of its uninterrupted resume: every
    later kill starts from a copy, so all runs share one key and one ledger and their
    datasets can be compared byte for byte."""
    d = tmp_path_factory.mktemp("prepared")
    assert _killed_run(d / "out0", d / "work0", 3) == -9
    steps = [ln for ln in (d / "work0" / "journal").read_text().splitlines() if not ln.startswith("tmp ")]
    key_line, charged = steps  # (the "tmp" line: the run's temporaries' token, journalled before use)
    assert charged == "charged" and key_line.startswith("key ") and len(key_line) == 4 + 64  # the key's digest binds it
    shutil.copytree(d / "work0", d / "wref")
    run(d / "outref", d / "wref", resume=True)
    return {"dir": d, "files": _files(d / "outref")}


def _from_prepared(prepared, tmp_path: Path, name: str) -> tuple[Path, Path]:
    work = tmp_path / f"work-{name}"
    shutil.copytree(prepared["dir"] / "work0", work)
    return tmp_path / f"out-{name}", work


def test_sigkill_at_random_points_then_resume_is_bit_identical(tmp_path, prepared, reference):
    """>= 10 kill points (seeded draws over the ~105 checkpoints of a run, plus the first and
    the last few); each killed run leaves no visible partial part, and its resume gives the
    uninterrupted run's files byte for byte."""
    ref = prepared["files"]
    assert _long(pd.read_parquet(prepared["dir"] / "outref")).equals(
        _long(pd.read_parquet(reference["dir"] / "out")))  # the same values as any run with this key
    points = sorted({1, 53, 105, *np.random.default_rng(7).choice(np.arange(2, 104), size=7,
                                                                   replace=False).tolist()})
    assert len(points) >= 10
    for at in points:
        out, work = _from_prepared(prepared, tmp_path, str(at))
        assert _killed_run(out, work, at, resume=True) == -9, at
        visible = [p for p in out.glob("*") if not p.name.startswith(".")]
        for p in visible:  # whatever is visible is whole and final
            assert p.read_bytes() == ref[p.name], (at, p.name)
        run(out, work, resume=True)
        assert _files(out) == ref, at
        assert not any(p.name.startswith(".") for p in out.iterdir())
    # killed before the release was charged: it starts afresh (a new ledger), the same values
    out, work = tmp_path / "out-early", tmp_path / "work-early"
    assert _killed_run(out, work, 2) == -9
    run(out, work, resume=True)
    assert _long(pd.read_parquet(out)).equals(_long(pd.read_parquet(reference["dir"] / "out")))


def test_a_second_kill_during_the_resume_still_resumes(tmp_path, prepared):
    out, work = _from_prepared(prepared, tmp_path, "twice")
    assert _killed_run(out, work, 40, resume=True) == -9
    assert _killed_run(out, work, 30, resume=True) == -9
    run(out, work, resume=True)
    assert _files(out) == prepared["files"]


def test_no_partial_part_is_ever_visible_while_running(tmp_path, reference):
    out = tmp_path / "out"
    seen: set[str] = set()
    stop = threading.Event()
    ref = {name: pq.read_table(reference["dir"] / "out" / name).replace_schema_metadata(None)
           for name in reference["files"] if name.startswith("part-")}

    def watch():
        while not stop.is_set():
            if out.is_dir():
                for p in out.iterdir():
                    if p.name.startswith("part-"):
                        seen.add(p.name)
                        # whole: it reads, with the final rows (another run: another ledger inside)
                        assert pq.read_table(p).replace_schema_metadata(None).equals(ref[p.name])

    errors = []

    def guarded():
        try:
            watch()
        except BaseException as exc:  # reported below
            errors.append(exc)

    th = threading.Thread(target=guarded)
    th.start()
    try:
        run(out, tmp_path / "work")
    finally:
        stop.set()
        th.join()
    assert not errors, errors
    assert len(seen) >= 5  # the watcher did see parts appear


def test_rerun_after_finish_does_nothing(tmp_path, reference, monkeypatch, capsys):
    run(tmp_path / "out", tmp_path / "work")
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()}
    monkeypatch.setitem(JOB, "INTERNAL", None)  # counts_of would fail if called
    led = run(tmp_path / "out", tmp_path / "work", progress=True)
    assert "nothing to do" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()} == before
    assert led.release_id == hierdp.Ledger.from_json((tmp_path / "out" / "_ledger.json").read_text()).release_id


def test_a_work_folder_of_another_release_is_refused(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    assert _killed_run(out, work, 20) == -9
    for change in ({"source_id": "synthetic v2"}, {"epsilon": 1.0}, {"dense": True}):
        with pytest.raises(WorkFolderError, match="holds another release") as e:
            run(out, work, resume=True, **change)
        assert "\n" not in str(e.value)
    with pytest.raises(WorkFolderError, match="pass resume=True"):
        run(out, work)  # unfinished: continuing it must be asked for
    with pytest.raises(WorkFolderError, match="needs source_id"):
        run(out, work, resume=True, source_id=None)
    (tmp_path / "other").mkdir(mode=0o700)  # private, but not hierdp's (a folder open to others: test_hostile_workfolder)
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(WorkFolderError, match="not empty and holds no hierdp release"):
        run(out, tmp_path / "other")


def test_missing_and_unwritable_output_folder(tmp_path):
    with pytest.raises(DataError, match="parent .* does not exist; create it first"):
        run(tmp_path / "nowhere" / "out", tmp_path / "work")
    with pytest.raises(DataError, match="is not writable"):
        run(Path("/proc/hierdp-outofcore-test"), tmp_path / "work")  # even root cannot write here
    (tmp_path / "afile").write_text("")
    with pytest.raises(DataError, match="is a file"):
        run(tmp_path / "afile", tmp_path / "work")
    assert not (tmp_path / "work").exists()  # refused before anything is written or drawn


def test_disk_full_gives_one_line_and_the_work_folder_resumes(tmp_path, reference, monkeypatch):
    real = pq.write_table
    calls = []

    def full(table, where, **kw):  # the disk fills up in the middle of the 7th part
        calls.append(where)
        if len(calls) == 7:
            Path(where).write_bytes(b"PAR1 half a part")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", full)
    session = hierdp.Session(epsilon=5.0)
    with pytest.raises(DataError, match="no space left on the device .* resume=True") as e:
        run(tmp_path / "out", tmp_path / "work", session=session)
    assert "\n" not in str(e.value)
    spent = session.spent
    assert spent["epsilon"] == pytest.approx(2.0)
    assert not (tmp_path / "out" / SUCCESS).exists()
    assert not any(p.name.startswith(".") for p in (tmp_path / "out").iterdir())  # the half part is gone
    for p in (tmp_path / "out").glob("part-*.parquet"):  # and no visible part is a half one
        pq.read_table(p)
    monkeypatch.setattr(pq, "write_table", real)
    led = run(tmp_path / "out", tmp_path / "work", resume=True, session=session)
    assert session.spent == spent  # charged once
    # the same values as the reference; every part carries this release's one ledger
    assert _long(pd.read_parquet(tmp_path / "out")).equals(_long(pd.read_parquet(reference["dir"] / "out")))
    for p in (tmp_path / "out").glob("part-*.parquet"):
        assert pq.read_schema(p).metadata[b"hierdp.ledger"].decode() == led.to_json()


def test_disk_full_in_a_spill_of_stage_one(tmp_path, reference, monkeypatch):
    real = np.savez
    calls = []

    def full(fh, **arrays):
        calls.append(1)
        if len(calls) == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fh, **arrays)

    monkeypatch.setattr(outofcore.np, "savez", full)
    with pytest.raises(DataError, match="no space left on the device"):
        run(tmp_path / "out", tmp_path / "work", workers=1)
    monkeypatch.setattr(outofcore.np, "savez", real)
    run(tmp_path / "out", tmp_path / "work", resume=True)
    assert _long(pd.read_parquet(tmp_path / "out")).equals(_long(pd.read_parquet(reference["dir"] / "out")))


# ---------------------------------------------------------------------------- spec and command line
SPEC = """hierdp: 1
source:
  demo: census
hierarchy:
  root: total
  paths:
    demo: census
  levels:
    - name: state
    - name: county
    - name: tract
privacy:
  epsilon: 1.0
postprocess: [blue, {name: nonneg, params: {method: topdown}}, {name: round, params: {method: topdown}}]
"""
EXECUTION = "execution:\n  split: county\n  workers: 2\n  memory: 9kB\n"


def _cli(args: list[str], cwd: Path, kill_at: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(KILL_ENV, None)
    if kill_at is not None:
        env[KILL_ENV] = str(kill_at)
    return subprocess.run([sys.executable, "-m", "hierdp", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_cli_writes_the_dataset_of_the_in_memory_spec_release_and_resumes(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC + EXECUTION)
    killed = _cli(["release", "spec.yaml", "-o", "out/", "--seed", "3", "-q"], tmp_path, kill_at=9)
    assert killed.returncode == -9
    assert not (tmp_path / "out" / SUCCESS).exists()
    again = _cli(["release", "spec.yaml", "-o", "out/", "--seed", "3", "-q"], tmp_path)
    assert again.returncode == 2 and "--resume" in again.stderr and again.stderr.count("\n") == 1
    done = _cli(["release", "spec.yaml", "-o", "out/", "--seed", "3", "--resume"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr and "peak RSS" in done.stderr
    assert (tmp_path / "out" / SUCCESS).exists() and not (tmp_path / "out.work" / "release.key").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        mem = hierdp.run_spec(SPEC, seed=3, write=False, split={"level": "county", "memory": "9kB"})
    levels = ["state", "county", "tract"]

    def keyed(frame):
        key = frame[levels].astype("string").fillna("-").agg("/".join, axis=1)
        return pd.Series(frame["estimate"].to_numpy(), index=key.to_numpy()).sort_index()

    want = keyed(mem.frame)
    got = keyed(pd.read_parquet(tmp_path / "out"))
    assert got.equals(want[want != 0])
    parts = list((tmp_path / "out").glob("part-*.parquet"))
    assert len(parts) >= 3
    rerun = _cli(["release", "spec.yaml", "-o", "out/", "--seed", "3"], tmp_path)
    assert rerun.returncode == 0 and "nothing to do" in rerun.stderr
    other = _cli(["release", "spec.yaml", "-o", "out/", "--seed", "4"], tmp_path)
    assert other.returncode == 2 and "holds another release" in other.stderr


def test_spec_execution_is_validated(tmp_path):
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec

    spec = load_spec(SPEC + EXECUTION)
    assert spec.execution == {"split": {"level": "county", "memory": "9kB"}, "workers": 2, "workdir": None}
    assert load_spec(SPEC + "execution: {workers: 1}\n").execution["split"] == "auto"
    with pytest.raises(SpecError, match="unknown split level 'countie'"):
        load_spec(SPEC + "execution: {split: countie}\n")
    with pytest.raises(SpecError, match="give the split once"):
        load_spec(SPEC + "split: county\nexecution: {split: county}\n")
    with pytest.raises(SpecError, match="workers"):
        load_spec(SPEC + "execution: {workers: 0}\n")
    with pytest.raises(SpecError, match="memory"):
        load_spec(SPEC + "execution: {memory: lots}\n")
    spec = load_spec(SPEC + "execution: {split: {level: county, memory: 9kB, task_memory: 3kB}}\n")
    assert spec.execution["split"] == {"level": "county", "memory": "9kB", "task_memory": "3kB"}
    with pytest.raises(SpecError, match=r"split task_memory must be a positive number of bytes .* got 'lots'"):
        load_spec(SPEC + "execution: {split: {level: county, task_memory: lots}}\n")


def test_spec_output_path_of_a_dataset_is_a_folder(tmp_path):
    # with execution: (or a trailing /) output.path names the dataset's folder, which has no
    # table suffix; without either, a path the format cannot be told from is still refused
    from hierdp.errors import SpecError
    from hierdp.spec.runner import load_spec

    for extra in (EXECUTION + "output: {path: out/census/}\n", EXECUTION + "output: {path: out/census}\n",
                  "output: {path: out/census/}\n"):
        assert load_spec(SPEC + extra).output["format"] == "parquet"
    with pytest.raises(SpecError, match="cannot tell the output format from 'out/census'"):
        load_spec(SPEC + "output: {path: out/census}\n")
    assert load_spec(SPEC + "output: {path: out/census.csv}\n").output["format"] == "csv"


def test_a_torn_journal_line_and_a_busy_work_folder(tmp_path, prepared):
    import fcntl

    out, work = _from_prepared(prepared, tmp_path, "torn")
    with open(work / "journal", "a") as fh:  # power lost in the middle of a line
        fh.write("up 1")
    held = os.open(work / "lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(WorkFolderError, match="in use by another running release"):
            run(out, work, resume=True)
    finally:
        os.close(held)
    run(out, work, resume=True)
    assert _files(out) == prepared["files"]
    assert all(line in {"charged", "top", "done"} or line.split()[0] in {"up", "down", "tmp", "key"}
               for line in (work / "journal").read_text().splitlines())


def _run_until_journalled(out: Path, work: Path, line: str, monkeypatch) -> None:
    """A resumed run stopped right after the journal takes ``line``."""
    stop_after_journal(line, lambda: run(out, work, resume=True))


def test_a_work_folder_whose_top_arrays_went_missing_solves_the_top_again(tmp_path, prepared, monkeypatch):
    """The journal says the top is done but ``top/`` is gone (deleted, or a folder copied
    without it): the resume solves the top again from the spilled tasks (the same key, the
    same numbers) instead of failing on a missing file."""
    out, work = _from_prepared(prepared, tmp_path, "top-gone")
    _run_until_journalled(out, work, "down 3", monkeypatch)
    assert "top" in (work / "journal").read_text().splitlines()
    shutil.rmtree(work / "top")
    run(out, work, resume=True)
    assert _files(out) == prepared["files"]
    assert not list(work.glob("top*"))


def test_the_top_waits_on_disk_and_an_older_work_folder_still_resumes(tmp_path, prepared, monkeypatch):
    """Stage 2 leaves the roots' arrays in the work folder (``top/``: files of blocks of
    cells with their layouts) that the pass down reads by task (memory holds none of them
    whole); a work folder stopped there by an older version (one ``top.npz``, or one
    ``top-NAME.npy`` per array) resumes to the same files (its top solved again from the
    spills); all of it goes at the end."""
    from hierdp._kernels.columns import ColumnsOnDisk

    out, work = _from_prepared(prepared, tmp_path, "top")
    _run_until_journalled(out, work, "top", monkeypatch)
    names = ["fixed0", "fixed1", "v_roots", "x_roots"]
    assert sorted(p.stem for p in (work / "top").glob("*.json")) == names
    assert not (work / "top.partial").exists()
    old = {name: ColumnsOnDisk.open(work / "top", name) for name in names}
    old = {name: a[0:len(a)] for name, a in old.items()}
    assert old["x_roots"].shape == (TREE.level_nodes("county").size, 2)  # one row per subtree root
    out_b, work_b = tmp_path / "out-top-npy", tmp_path / "work-top-npy"
    shutil.copytree(work, work_b)
    shutil.copytree(out, out_b)  # the top part's own part is written before "top" is journalled
    with open(work / "top.npz", "wb") as fh:  # the oldest form, then resumed by this version
        np.savez(fh, **old)
    for w in (work, work_b):
        shutil.rmtree(w / "top")
    for name, a in old.items():  # one .npy per array, rows in order
        with open(work_b / f"top-{name}.npy", "wb") as fh:
            np.save(fh, a)
    for o, w in ((out, work), (out_b, work_b)):
        run(o, w, resume=True)
        assert _files(o) == prepared["files"]
        assert not list(w.glob("top*"))


def test_progress_bars_into_a_log_redraw_once_a_minute():
    # a bar redrawn twice a second into a log file keeps every redraw (the whole-US run wrote
    # megabytes of them); on a terminal it redraws in place
    import io

    from hierdp.outofcore import _bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log, tty = io.StringIO(), Terminal()
    with _bar(10, "stage", True, log) as a, _bar(10, "stage", True, tty) as b:
        assert a.mininterval == 60.0 and b.mininterval == 0.5
        for _ in range(10):
            a.update(1)
    assert log.getvalue().count("\r") <= 3 and "10/10" in log.getvalue()


def test_a_terminal_bar_keeps_its_clock_running_through_one_long_task(monkeypatch):
    # a split whose subtrees all fit one task showed '0/1' frozen for minutes (issue 53 item 5):
    # on a terminal the bar is redrawn between tasks, so its elapsed time moves
    import io
    import re
    import time

    import hierdp.outofcore as oc

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(oc, "_TICK", 0.1)
    tty = Terminal()
    with oc._bar(1, "up", True, tty) as bar:
        time.sleep(1.3)
        bar.update(1)
    clocks = re.findall(r"0/1 \[00:(\d\d)<", tty.getvalue())
    assert "00" in clocks and "01" in clocks, tty.getvalue()


def test_fewer_tasks_than_workers_says_how_to_cut_more(tmp_path):
    import io

    err = io.StringIO()
    run(tmp_path / "out", tmp_path / "work", split={"level": "county", "memory": "1GiB"}, workers=2,
        progress=True, stream=err)
    assert "the 25 subtrees at level 'county' fit 1 task for 2 workers: a smaller split task_memory" \
        in err.getvalue()
    err = io.StringIO()
    run(tmp_path / "out2", tmp_path / "work2", workers=2, progress=True, stream=err)  # 25 tasks: no word
    assert "task_memory" not in err.getvalue()
