"""Release outputs: standard output, formats, URLs, the ledger's provenance fields and the
table/ledger pair written as one unit (concurrent writers, disk full, kills)."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hierdp import io as hio
from hierdp.accounting.ledger import Ledger
from hierdp.cli import EXIT_OK, EXIT_USER, main

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _ledger_json(**kw) -> str:
    return Ledger(guarantee="pure", epsilon=1.0, **kw).to_json()


# ------------------------------------------------------------------ ledger fields --
def test_ledger_states_id_time_version_trust_model_and_accounting():
    led = Ledger(guarantee="pure", epsilon=1.0)
    assert uuid.UUID(led.release_id).version == 4
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", led.created)
    import hierdp

    assert led.hierdp_version == hierdp.__version__ and led.trust_model == "central"
    assert led.accounting.startswith("basic composition (pure ε)")
    assert Ledger(guarantee="zcdp", epsilon=None, rho=0.5).accounting.startswith("zCDP")
    assert Ledger(guarantee="pure", epsilon=1.0).release_id != led.release_id
    back = Ledger.from_json(led.to_json())
    assert back == led
    old = json.loads(led.to_json())
    for k in ("release_id", "created", "hierdp_version"):
        old.pop(k)
    assert Ledger.from_dict(old).release_id == ""  # an old ledger gets no invented id
    assert f"release {led.release_id}" in str(led)


# ------------------------------------------------------------------ standard output --
def test_json_to_stdout_carries_the_ledger_and_the_summary_goes_to_stderr(capsys):
    assert main(["release", "demo", "--seed", "3", "-o", "-", "--format", "json"]) == EXIT_OK
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert len(doc["table"]) == 225 and doc["ledger"]["seed"] == 3 and doc["ledger"]["spent"] == 1.0
    assert "wrote <stdout>" in cap.err and "Privacy ledger" in cap.err


def test_csv_to_stdout_needs_a_ledger_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["release", "demo", "--seed", "3", "-o", "-"]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --ledger PATH" in err
    assert list(tmp_path.iterdir()) == []
    assert main(["release", "demo", "--seed", "3", "-o", "-", "-q", "--ledger", "l.json"]) == EXIT_OK
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert len(table) == 225
    assert json.loads((tmp_path / "l.json").read_text())["seed"] == 3


def test_parquet_to_stdout_embeds_the_ledger(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    proc = subprocess.run([sys.executable, "-m", "hierdp", "release", "demo", "--seed", "5", "-q", "-o", "-",
                           "--format", "parquet"], capture_output=True, cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    table = pq.read_table(io.BytesIO(proc.stdout))
    ledger = json.loads(table.schema.metadata[b"hierdp.ledger"])
    assert table.num_rows == 225 and ledger["seed"] == 5
    assert table.schema.metadata[b"hierdp.release_id"].decode() == ledger["release_id"]
    assert list(tmp_path.iterdir()) == []


def test_parquet_file_and_side_ledger_share_the_release_id(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "r.parquet"
    assert main(["release", "demo", "--seed", "1", "-q", "-o", str(out)]) == EXIT_OK
    side = json.loads((tmp_path / "r.ledger.json").read_text())
    assert hio.table_release_id(out) == side["release_id"]
    import pyarrow.parquet as pq

    assert json.loads(pq.read_schema(out).metadata[b"hierdp.ledger"]) == side


def test_format_option_overrides_the_extension(tmp_path, capsys):
    out = tmp_path / "r.dat"
    assert main(["release", "demo", "--seed", "1", "-q", "-o", str(out), "--format", "json",
                 "--ledger", str(tmp_path / "led.json")]) == EXIT_OK
    doc = json.loads(out.read_text())
    assert doc["ledger"]["release_id"] == json.loads((tmp_path / "led.json").read_text())["release_id"]


# ------------------------------------------------------------------------- URLs --
def test_url_without_fsspec_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec -> ImportError
    assert main(["release", "demo", "--seed", "1", "-o", "s3://bucket/x.csv"]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'hierdp[remote]'" in err
    assert list(tmp_path.iterdir()) == []  # never a local folder named 's3:'


def test_single_slash_scheme_is_refused_not_a_local_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["release", "demo", "--seed", "1", "-o", "s3:/bucket/x.csv"]) == EXIT_USER
    assert "looks like a URL" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_url_is_written_through_fsspec(capsys, tmp_path):
    # file:// goes through fsspec like s3:// (memory:// is refused: it is gone when the command ends)
    pytest.importorskip("fsspec")
    assert main(["release", "demo", "--seed", "1", "-q", "-o", f"file://{tmp_path}/r.json"]) == EXIT_OK
    doc = json.loads((tmp_path / "r.json").read_text())
    side = json.loads((tmp_path / "r.ledger.json").read_text())
    assert doc["ledger"]["release_id"] == side["release_id"] and len(doc["table"]) == 225


# ------------------------------------------------------------- the pair on disk --
def test_disk_full_names_the_destination(tmp_path, monkeypatch, capsys):
    dest = tmp_path / "r.csv"

    def full(self, path, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    with pytest.raises(OSError) as info:
        hio.write_release(pd.DataFrame({"a": [1]}), _ledger_json(), dest)
    assert info.value.filename == str(dest) and info.value.errno == 28
    assert main(["release", "demo", "--seed", "1", "-o", str(dest)]) == EXIT_USER
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [f"error: No space left on device: {dest}"]
    assert list(tmp_path.iterdir()) == []


def test_concurrent_writers_never_collide_and_leave_a_matching_pair(tmp_path):
    dest = tmp_path / "r.json"
    frame = pd.DataFrame({"a": np.arange(2000)})
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(15):
                hio.write_release(frame, _ledger_json(), dest)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert hio.table_release_id(dest) == json.loads((tmp_path / "r.ledger.json").read_text())["release_id"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.ledger.json"]


def test_leftovers_of_ended_writers_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = [tmp_path / f".hierdp-r.csv.{dead}.abc123.tmp", tmp_path / f".hierdp-r.csv.{dead}.0a1b2c.bak"]
    live = tmp_path / f".hierdp-r.csv.{os.getppid()}.def456.tmp"  # a writer that still runs
    other = tmp_path / ".notes.tmp"  # not ours
    for p in [*stale, live, other]:
        p.write_text("x")
    hio.write_release(pd.DataFrame({"a": [1]}), _ledger_json(), tmp_path / "r.csv")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([live.name, other.name, "r.csv", "r.ledger.json"])


def _child_writer(folder: Path, kill_between_moves: bool) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np, pandas as pd
        from hierdp import io
        from hierdp.accounting.ledger import Ledger
        folder = {str(folder)!r}
        if {kill_between_moves!r}:
            real = os.replace
            def replace(src, dst):
                real(src, dst)
                if str(dst).endswith('.ledger.json') and os.path.exists(os.path.join(folder, 'r.json')):
                    os.kill(os.getpid(), signal.SIGKILL)  # new ledger in place, table not yet
            os.replace = replace
        frame = pd.DataFrame({{"a": np.arange(300_000), "b": np.random.default_rng(0).random(300_000)}})
        print("ready", flush=True)
        while True:
            io.write_release(frame, Ledger(guarantee="pure", epsilon=1.0).to_json(), os.path.join(folder, "r.json"))
    """)
    return subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True)


def _pair_matches(folder: Path) -> bool:
    table, ledger = folder / "r.json", folder / "r.ledger.json"
    return hio.table_release_id(table) == json.loads(ledger.read_text())["release_id"]


def test_sigkill_at_random_points_leaves_old_or_new_pair(tmp_path):
    """A writer killed anywhere (also exactly between the ledger and the table moves)
    leaves, after recovery by the next writer or io.recover, a pair with one release id."""
    rng = np.random.default_rng(7)
    hio.write_release(pd.DataFrame({"a": [0]}), _ledger_json(), tmp_path / "r.json")  # an old pair
    for i in range(5):
        proc = _child_writer(tmp_path, kill_between_moves=False)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(float(rng.uniform(0.05, 1.2)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        hio.recover(tmp_path)
        assert _pair_matches(tmp_path), f"kill {i}: table and ledger of different releases"
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".hierdp-")]
    before = hio.table_release_id(tmp_path / "r.json")
    proc = _child_writer(tmp_path, kill_between_moves=True)
    proc.wait(timeout=120)
    proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    ledger_now = json.loads((tmp_path / "r.ledger.json").read_text())["release_id"]
    assert ledger_now != before  # the kill did land between the two moves
    assert any(p.name.endswith(".journal") for p in tmp_path.iterdir())
    restored = hio.recover(tmp_path)
    assert tmp_path / "r.ledger.json" in restored
    assert hio.table_release_id(tmp_path / "r.json") == before and _pair_matches(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.ledger.json"]


def test_evaluate_refuses_urls_instead_of_making_a_local_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "attribution", "-o", "s3://bucket/ev.csv", "-q"]) == EXIT_USER
    assert "is not a local file path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_slow_writer_and_a_fast_one_still_leave_one_release_pair(tmp_path, monkeypatch):
    """Writer A moves its ledger, then stalls; writer B writes a whole pair meanwhile; A
    moves its table last. Without a commit lock the folder ends with B's ledger beside A's
    table (two different releases); with it B waits and the last pair is whole."""
    dest = tmp_path / "r.json"
    real_replace = os.replace
    a_moved_ledger = threading.Event()

    def replace(src, dst, *a, **k):
        real_replace(src, dst, *a, **k)
        if threading.current_thread().name == "A" and str(dst).endswith(".ledger.json"):
            a_moved_ledger.set()
            time.sleep(0.3)  # A stalls between its two moves

    monkeypatch.setattr(hio.os, "replace", replace)
    frame = pd.DataFrame({"a": [1, 2]})
    a = threading.Thread(target=hio.write_release, args=(frame, _ledger_json(), dest), name="A")
    a.start()
    assert a_moved_ledger.wait(5)
    hio.write_release(frame, _ledger_json(), dest)  # writer B, in this thread
    a.join()
    assert hio.table_release_id(dest) == json.loads((tmp_path / "r.ledger.json").read_text())["release_id"]
