"""A planted commit journal (issue 35, item 1): what an attacker who can drop a file into an
output folder sees when the next release is written there. Before the fix, ``recover()``
followed the ``dest``/``backup`` paths of any ``.hierdp-*.<dead pid>.<hex>.journal`` and
deleted or replaced the files they named, anywhere. Now a journal is followed only when
hierdp wrote it (``docs/security.md``); anything else is reported with an
``UntrustedJournalWarning`` naming the file and left alone, and nothing is deleted or
overwritten. Genuine crash recovery is covered by ``test_cli_output.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hierdp import io as hio
from hierdp.accounting.ledger import Ledger
from hierdp.errors import UntrustedJournalWarning

FRAME = pd.DataFrame({"a": [1, 2]})
AS_ROOT = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                             reason="files of another user can only be made by root")


@pytest.fixture(scope="module")
def dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


def _plant(folder: Path, pid: int, files: list[dict], name: str = "x.csv", mode: int = 0o600) -> Path:
    folder.mkdir(exist_ok=True)
    j = folder / f".hierdp-{name}.{pid}.abcdef012345.journal"
    j.write_text(json.dumps({"pid": pid, "files": files}), encoding="utf-8")
    os.chmod(j, mode)
    return j


def _release_into(folder: Path) -> None:
    """The victim's next release into the folder (it runs recovery first)."""
    hio.write_release(FRAME, Ledger(guarantee="pure", epsilon=1.0).to_json(), folder / "rel.csv")


def _victim(path: Path, text: str = "precious") -> Path:
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _attacked(journal: Path, *victims: tuple[Path, str]) -> None:
    with pytest.warns(UntrustedJournalWarning, match=f"left alone '{journal}'.*hierdp did not write it"):
        _release_into(journal.parent)
    for path, text in victims:
        assert path.read_text() == text, f"{path} was changed"
    assert journal.exists()  # reported, not followed and not removed: its owner decides
    assert (journal.parent / "rel.csv").exists()  # the release itself still lands


def test_delete_anywhere(tmp_path, dead_pid):
    """`backup` naming any file: the attacker sees their target deleted (before the fix)."""
    target = _victim(tmp_path / "elsewhere" / "thesis.tex")
    j = _plant(tmp_path / "out", dead_pid, [{"dest": str(tmp_path / "out" / "nothing.csv"),
                                              "backup": str(target), "inode": 1}])
    _attacked(j, (target, "precious"))


def test_overwrite_with_a_file_outside_the_folder(tmp_path, dead_pid):
    """`dest` a victim in the folder (its inode), `backup` the attacker's file on the same
    file system: the victim's content was replaced by the attacker's."""
    victim = _victim(tmp_path / "out" / "published.csv")
    evil = _victim(tmp_path / "evil.csv", "forged")
    j = _plant(tmp_path / "out", dead_pid, [{"dest": str(victim), "backup": str(evil),
                                              "inode": victim.stat().st_ino}])
    _attacked(j, (victim, "precious"), (evil, "forged"))


def test_overwrite_across_folders(tmp_path, dead_pid):
    """A journal in a folder the attacker can write naming files of another folder, backup
    named exactly as hierdp names backups: the other folder's file was replaced."""
    victim = _victim(tmp_path / "other" / "published.csv")
    evil = _victim(tmp_path / "other" / f".hierdp-published.csv.{dead_pid}.0123456789ab.bak", "forged")
    j = _plant(tmp_path / "out", dead_pid, [{"dest": str(victim), "backup": str(evil),
                                              "inode": victim.stat().st_ino}])
    _attacked(j, (victim, "precious"))
    assert evil.exists()  # nothing in the other folder is touched, not even a backup-like name


def test_paths_through_a_symlinked_folder(tmp_path, dead_pid):
    """Paths through a symlink inside the folder reach another folder: no deletion, no overwrite."""
    victim = _victim(tmp_path / "other" / "published.csv")
    doomed = _victim(tmp_path / "other" / "notes.txt")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "via").symlink_to(tmp_path / "other")
    j = _plant(tmp_path / "out", dead_pid, [
        {"dest": str(tmp_path / "out" / "via" / "published.csv"), "backup": str(tmp_path / "out" / "via" / "notes.txt"),
         "inode": victim.stat().st_ino},
        {"dest": "x.csv", "backup": "via/notes.txt", "inode": 1}])
    _attacked(j, (victim, "precious"), (doomed, "precious"))


def test_symlinked_destination_and_backup_are_not_followed(tmp_path, dead_pid):
    """Names in the folder that are symlinks to files elsewhere (the inode of the target)."""
    victim = _victim(tmp_path / "elsewhere" / "published.csv")
    evil = _victim(tmp_path / "evil.csv", "forged")
    out = tmp_path / "out"
    out.mkdir()
    (out / "pub.csv").symlink_to(victim)
    (out / f".hierdp-pub.csv.{dead_pid}.0123456789ab.bak").symlink_to(evil)
    _plant(out, dead_pid, [{"name": "pub.csv", "backup": f".hierdp-pub.csv.{dead_pid}.0123456789ab.bak",
                            "inode": victim.stat().st_ino}])
    assert hio.recover(out) == []  # the names are in the folder, but neither link is followed
    assert victim.read_text() == "precious" and evil.read_text() == "forged"
    assert (out / "pub.csv").is_symlink() and (out / f".hierdp-pub.csv.{dead_pid}.0123456789ab.bak").is_symlink()


def test_journal_that_is_a_symlink(tmp_path, dead_pid):
    """A journal name that is a symlink to a record elsewhere is not read."""
    victim = _victim(tmp_path / "out" / "published.csv")
    record = _plant(tmp_path / "elsewhere", dead_pid, [{"dest": str(victim), "backup": None,
                                                        "inode": victim.stat().st_ino}])
    j = tmp_path / "out" / f".hierdp-x.csv.{dead_pid}.abcdef012345.journal"
    j.symlink_to(record)
    _attacked(j, (victim, "precious"))


def test_journal_others_may_write(tmp_path, dead_pid):
    """A journal that anyone could have written (mode 0666) deletes nothing, even when all
    it names lies in the folder."""
    victim = _victim(tmp_path / "out" / "published.csv")
    j = _plant(tmp_path / "out", dead_pid, [{"name": "published.csv", "backup": None,
                                              "inode": victim.stat().st_ino}], mode=0o666)
    _attacked(j, (victim, "precious"))


def test_journal_with_a_second_name(tmp_path, dead_pid):
    """A hard link to a journal (two names): not a journal hierdp wrote."""
    victim = _victim(tmp_path / "out" / "published.csv")
    j = _plant(tmp_path / "out", dead_pid, [{"name": "published.csv", "backup": None,
                                              "inode": victim.stat().st_ino}])
    os.link(j, tmp_path / "copy")
    _attacked(j, (victim, "precious"))


@AS_ROOT
def test_journal_of_another_user(tmp_path, dead_pid):
    """A journal owned by another user (a group member of a shared publication folder)."""
    victim = _victim(tmp_path / "out" / "published.csv")
    j = _plant(tmp_path / "out", dead_pid, [{"name": "published.csv", "backup": None,
                                              "inode": victim.stat().st_ino}])
    os.chown(j, 65534, 65534)
    _attacked(j, (victim, "precious"))


@AS_ROOT
def test_backup_of_another_user(tmp_path, dead_pid):
    """A backup name in the folder that another user made: never moved over a file of ours."""
    victim = _victim(tmp_path / "out" / "published.csv")
    evil = _victim(tmp_path / "out" / f".hierdp-published.csv.{dead_pid}.0123456789ab.bak", "forged")
    os.chown(evil, 65534, 65534)
    _plant(tmp_path / "out", dead_pid, [{"name": "published.csv", "backup": evil.name,
                                         "inode": victim.stat().st_ino}])
    _release_into(tmp_path / "out")
    assert victim.read_text() == "precious" and evil.read_text() == "forged"


@AS_ROOT
def test_temporaries_of_another_user_are_not_removed(tmp_path, dead_pid):
    stale = _victim(tmp_path / "out" / f".hierdp-r.csv.{dead_pid}.abc123.tmp", "theirs")
    os.chown(stale, 65534, 65534)
    _release_into(tmp_path / "out")
    assert stale.read_text() == "theirs"


def test_wrong_names_are_reported(tmp_path, dead_pid):
    """A backup not named as hierdp names a backup of that destination, a destination that
    is a hierdp temporary, or a journal whose record belongs to another writer."""
    out = tmp_path / "out"
    keep = _victim(out / "keep.txt")
    cases = [
        [{"name": "keep.txt", "backup": "keep.txt", "inode": keep.stat().st_ino}],
        [{"name": ".hierdp-a.tmp", "backup": None, "inode": 1}],
        [{"name": "keep.txt", "backup": f".hierdp-other.csv.{dead_pid}.0123456789ab.bak",
          "inode": keep.stat().st_ino}],
    ]
    for i, files in enumerate(cases):
        j = _plant(out, dead_pid, files, name=f"c{i}.csv")
        with pytest.warns(UntrustedJournalWarning, match=j.name):
            hio.recover(out)
        j.unlink()
    j = out / f".hierdp-c.csv.{dead_pid}.abcdef012345.journal"
    j.write_text(json.dumps({"pid": dead_pid + 1, "files": []}))
    with pytest.warns(UntrustedJournalWarning, match="does not match its name"):
        hio.recover(out)
    assert keep.read_text() == "precious"


def test_a_journal_of_the_previous_format_inside_its_folder_is_still_followed(tmp_path, dead_pid):
    """A journal an earlier hierdp wrote (absolute paths, all in its folder) still rolls back."""
    out = tmp_path / "out"
    new = _victim(out / "r.ledger.json", "new")
    old = _victim(out / f".hierdp-r.ledger.json.{dead_pid}.0123456789ab.bak", "old")
    _plant(out, dead_pid, [{"dest": str(new), "backup": str(old), "inode": new.stat().st_ino}], mode=0o644)
    assert hio.recover(out) == [new]
    assert new.read_text() == "old" and sorted(p.name for p in out.iterdir()) == ["r.ledger.json"]


def test_journals_hierdp_writes_are_private_to_the_writer(tmp_path, monkeypatch):
    """The journal a commit writes is 0600 whatever the umask (a 0664 one would be refused)."""
    seen: list[int] = []
    real = os.replace

    def spy(src, dst):
        seen.extend(os.lstat(p).st_mode & 0o777 for p in Path(dst).parent.iterdir() if p.name.endswith(".journal"))
        return real(src, dst)

    monkeypatch.setattr(hio.os, "replace", spy)
    old = os.umask(0o002)
    try:
        _release_into(tmp_path)
    finally:
        os.umask(old)
    assert seen and set(seen) == {0o600}


def test_a_ledger_in_another_folder_gets_a_journal_there(tmp_path, monkeypatch):
    """A table and its ledger in two folders: each folder's journal names only its own file."""
    seen: dict[str, list[str]] = {}
    real = os.replace

    def spy(src, dst):
        for folder in (tmp_path / "t", tmp_path / "l"):
            for p in folder.iterdir():
                if p.name.endswith(".journal"):
                    seen[folder.name] = [f["name"] for f in json.loads(p.read_text())["files"]]
        return real(src, dst)

    monkeypatch.setattr(hio.os, "replace", spy)
    (tmp_path / "t").mkdir()
    (tmp_path / "l").mkdir()
    hio.write_release(FRAME, Ledger(guarantee="pure", epsilon=1.0).to_json(), tmp_path / "t" / "r.csv",
                      ledger_path=tmp_path / "l" / "r.ledger.json")
    assert seen == {"t": ["r.csv"], "l": ["r.ledger.json"]}
