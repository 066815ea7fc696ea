"""The commit window of a release write (issue 35 item 9), measured.

``hierdp.io.write_release`` moves the ledger into place, then the table (two
``os.replace`` calls; see ``docs/security.md``). Between the end of the first move and the
end of the second, the folder holds the new ledger beside the old table: a reader looking
then sees a mismatched pair, and a hard kill then leaves the commit journal that the next
write (or ``hierdp.io.recover``) rolls back. This script times that window over many writes
of a small release (the demo's 225 rows, CSV + ledger JSON) into an existing pair, by
wrapping ``os.replace`` in this process only, and prints its median, 99th percentile and
maximum, with the whole commit (journal written -> journal removed, which includes the
folder ``fsync``) for scale. The figures depend on the file system and the load: the
machine and its load are printed with them.

    PYTHONPATH=. python benchmarks/bench_commit_window.py [--writes N] [--folder DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

import hierdp.io as hio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=300)
    ap.add_argument("--folder", default=None, help="where to write (default: a temporary folder)")
    args = ap.parse_args()
    frame = pd.DataFrame({"level": ["tract"] * 225, "node": np.arange(225), "estimate": np.arange(225) * 1.5,
                          "std": np.full(225, 2.0)})
    ledger = '{"release_id": "x", "levels": []}' * 20
    real_replace = os.replace
    real_unlink = Path.unlink
    stamps: list[tuple[str, int]] = []

    def timed_replace(src, dst, *a, **k):
        real_replace(src, dst, *a, **k)
        stamps.append(("replace", time.perf_counter_ns()))

    def timed_unlink(self, *a, **k):
        real_unlink(self, *a, **k)
        if self.name.endswith(".journal"):
            stamps.append(("journal gone", time.perf_counter_ns()))

    orig_write_journal = hio._write_journal

    def timed_write_journal(*a, **k):
        out = orig_write_journal(*a, **k)
        stamps.append(("journal", time.perf_counter_ns()))
        return out

    window, commit = [], []
    with tempfile.TemporaryDirectory(dir=args.folder) as d:
        dest = Path(d) / "release.csv"
        hio.write_release(frame, ledger, dest)  # an existing pair, as when a release is redone
        os.replace, Path.unlink, hio._write_journal = timed_replace, timed_unlink, timed_write_journal
        try:
            for _ in range(args.writes):
                stamps.clear()
                hio.write_release(frame, ledger, dest)
                moves = [t for what, t in stamps if what == "replace"]
                j0 = next(t for what, t in stamps if what == "journal")
                j1 = next(t for what, t in stamps if what == "journal gone")
                window.append((moves[1] - moves[0]) / 1e3)
                commit.append((j1 - j0) / 1e3)
        finally:
            os.replace, Path.unlink, hio._write_journal = real_replace, real_unlink, orig_write_journal
        fs = os.statvfs(d)
    w, c = np.array(window), np.array(commit)
    print(f"machine: {platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
          f"{platform.system()} {platform.release()}, load {os.getloadavg()[0]:.2f}; folder block size {fs.f_bsize}")
    print(f"{args.writes} writes of a 225-row CSV + ledger")
    print(f"  window (ledger moved -> table moved): median {np.median(w):.1f} us, p99 {np.percentile(w, 99):.1f} us, "
          f"max {w.max():.1f} us")
    print(f"  commit (journal written -> removed):  median {np.median(c):.0f} us, p99 {np.percentile(c, 99):.0f} us, "
          f"max {c.max():.0f} us")


if __name__ == "__main__":
    main()
