"""What every generated figure shares: a readable size on the page, and files that are the
same bytes on every build (no date, a fixed id salt)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

RC = {
    "font.size": 10,              # 10 pt: about 13 px on the page at its natural width
    "axes.titlesize": 11,
    "svg.hashsalt": "hierdp-docs",
    "svg.fonttype": "path",       # text as outlines: the same picture whatever fonts the reader has
    "figure.dpi": 100,
}


def save(fig: plt.Figure, path: Path) -> Path:
    """Write ``fig`` to ``path`` (SVG or PNG by suffix) reproducibly, and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"Date": None} if path.suffix == ".svg" else {"Software": None}
    fig.savefig(path, metadata=meta, bbox_inches="tight", pad_inches=0.05)
    plt.close(fig)
    return path
