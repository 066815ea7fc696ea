"""An array over many rows kept on disk in blocks of columns: :class:`ColumnsOnDisk`.

The top stage of a split release works on arrays over every subtree root, ``(roots,
cells)``: the roots' ``(z, u)`` coming up, their values and variances going down, their
values after each top-down step. Each cell is its own tree problem, so the solve reads them
a block of columns at a time, and the pass down reads them a range of rows (one task's
roots) at a time. One file per block of columns, each ``(rows, width)`` row-major, serves
both with plain contiguous reads: a block is one file, a range of rows one read per
block. Memory holds what was read, never the whole array (the whole US of the census
shape: 84,414 roots x 2,016 cells, 1.36 GB per array, eight of them).

Nothing here is a mapping: pages read are the caller's arrays, not a file's mapped pages
counted in the process's resident memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["ColumnsOnDisk", "column_bounds"]


def column_bounds(n_cols: int, width: int) -> list[int]:
    """The edges of blocks of ``width`` columns over ``n_cols`` (the last one narrower)."""
    width = max(int(width), 1)
    return list(range(0, int(n_cols), width)) + [int(n_cols)] if n_cols else [0, 0]


class ColumnsOnDisk:
    """A ``(n_rows, n_cols)`` array in files ``{folder}/{name}-{b}.bin``, one per block of
    columns ``bounds[b]:bounds[b + 1]``, and a layout file ``{name}.json``.

    Written either a block at a time (:meth:`write_block`) or a range of rows at a time in
    row order (:meth:`append`, then :meth:`finish`); read a block (:meth:`block`), a range
    of rows (``a[i:j]``) or chosen rows (:meth:`take`)."""

    def __init__(self, folder: str | os.PathLike[str], name: str, n_rows: int, bounds: Sequence[int],
                 dtype: Any = np.float64) -> None:
        self.folder, self.name = Path(folder), str(name)
        self.n_rows = int(n_rows)
        self.bounds = [int(b) for b in bounds]
        if len(self.bounds) < 2 or any(b > c for b, c in zip(self.bounds, self.bounds[1:])):
            raise ValueError(f"column bounds must rise from 0, got {self.bounds}")
        self.dtype = np.dtype(dtype)
        self._files: list[IO[bytes]] | None = None
        self._appended = 0

    # ------------------------------------------------------------------ layout
    @property
    def n_blocks(self) -> int:
        return len(self.bounds) - 1

    @property
    def n_cols(self) -> int:
        return self.bounds[-1]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    def __len__(self) -> int:
        return self.n_rows

    def path(self, b: int) -> Path:
        """The file of block ``b``."""
        return self.folder / f"{self.name}-{b:04d}.bin"

    @property
    def layout_path(self) -> Path:
        return self.folder / f"{self.name}.json"

    def paths(self) -> list[Path]:
        """Every file this array writes (the layout among them)."""
        return [self.path(b) for b in range(self.n_blocks)] + [self.layout_path]

    def save_layout(self) -> None:
        """The layout beside the blocks, for :meth:`open` (a resumed job)."""
        self.layout_path.write_text(json.dumps({"rows": self.n_rows, "bounds": self.bounds,
                                                "dtype": self.dtype.str}), encoding="utf-8")

    @classmethod
    def open(cls, folder: str | os.PathLike[str], name: str) -> ColumnsOnDisk:
        """The array ``name`` written in ``folder`` before (its layout saved)."""
        spec = json.loads((Path(folder) / f"{name}.json").read_text(encoding="utf-8"))
        return cls(folder, name, spec["rows"], spec["bounds"], np.dtype(spec["dtype"]))

    # ------------------------------------------------------------------ writing
    def write_block(self, b: int, a: np.ndarray) -> None:
        """Block ``b`` whole: ``a`` of shape ``(n_rows, width of b)``."""
        lo, hi = self.bounds[b], self.bounds[b + 1]
        if a.shape != (self.n_rows, hi - lo):
            raise ValueError(f"block {b} of {self.name!r} is {(self.n_rows, hi - lo)}, got {a.shape}")
        with open(self.path(b), "wb") as fh:
            np.ascontiguousarray(a, dtype=self.dtype).tofile(fh)

    def append(self, a: np.ndarray) -> None:
        """The next rows, every column: ``a`` of shape ``(rows, n_cols)``, in row order."""
        a = np.asarray(a)
        if a.ndim != 2 or a.shape[1] != self.n_cols:
            raise ValueError(f"rows of {self.name!r} have {self.n_cols} columns, got shape {a.shape}")
        if self._files is None:
            self._files = [open(self.path(b), "wb") for b in range(self.n_blocks)]  # noqa: SIM115 (closed in finish)
        for b, fh in enumerate(self._files):
            np.ascontiguousarray(a[:, self.bounds[b]:self.bounds[b + 1]], dtype=self.dtype).tofile(fh)
        self._appended += a.shape[0]

    def finish(self) -> None:
        """The appends done: every row must be there."""
        for fh in self._files or []:
            fh.close()
        if self._files is None and self.n_rows == 0:
            for b in range(self.n_blocks):
                self.path(b).write_bytes(b"")
        self._files = None
        if self._appended != self.n_rows:
            raise ValueError(f"{self.name!r} got {self._appended} rows of {self.n_rows}")

    def close(self) -> None:
        """Close the files being appended to (an error stopped the writing; nothing checked)."""
        for fh in self._files or []:
            fh.close()
        self._files = None

    def fsync(self) -> None:
        """Every block and the layout on stable storage."""
        for p in self.paths():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def remove(self) -> None:
        """Delete the files (missing ones are fine)."""
        self.close()
        for p in self.paths():
            p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ reading
    def block(self, b: int) -> np.ndarray:
        """Block ``b``, ``(n_rows, width)``."""
        w = self.bounds[b + 1] - self.bounds[b]
        return np.fromfile(self.path(b), dtype=self.dtype, count=self.n_rows * w).reshape(self.n_rows, w)

    def __getitem__(self, s: slice) -> np.ndarray:
        """Rows ``i:j``, every column (one read per block)."""
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("columns on disk are read by a range of rows (a[i:j])")
        i, j, _ = s.indices(self.n_rows)
        n = max(j - i, 0)
        out = np.empty((n, self.n_cols), self.dtype)
        if n:
            for b in range(self.n_blocks):
                lo, hi = self.bounds[b], self.bounds[b + 1]
                w = hi - lo
                out[:, lo:hi] = np.fromfile(self.path(b), dtype=self.dtype, count=n * w,
                                            offset=i * w * self.dtype.itemsize).reshape(n, w)
        return out

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` (any order), every column: each block mapped, only those rows read."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, self.n_cols), self.dtype)
        if rows.size and self.n_rows:
            for b in range(self.n_blocks):
                w = self.bounds[b + 1] - self.bounds[b]
                if w:
                    m = np.memmap(self.path(b), dtype=self.dtype, mode="r", shape=(self.n_rows, w))
                    out[:, self.bounds[b]:self.bounds[b + 1]] = m[rows]
                    del m
        return out
