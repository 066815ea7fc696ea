"""docs/security.md: what is private, what is public, and the only ways across.

Private: what is as sensitive as the data (the page's own words). Public: what a release
writes. The only path from true counts to a published value is a mechanism's noise; the
other is invariants, published exactly and flagged as not protected. Each item names where
hierdp keeps or writes it, so the picture can be checked against the page and the code.

Run it alone: ``python docs/_figures/trust_boundary.py out.svg``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _style import RC, save
else:
    from ._style import RC, save

PRIVATE_BG, PUBLIC_BG, WARN = "#fbe9e3", "#e6f0fa", "#b22222"

PRIVATE = [  # (item, where)
    ("the records", "your files and frames (pandas, Polars, Dask, Spark)"),
    ("the true counts", "(leaf, cell) and node counts"),
    ("the release key", "with it, noisy values give the true ones back"),
    ("an out-of-core work folder", "key, spills, counts: owner-only until done"),
    ("an evaluation", "hierdp evaluate: NON-PRIVATE, never publish"),
]
PUBLIC = [
    ("the declared structure", "the domains you declare (or assert 'observed')"),
    ("noisy measurements", "a mechanism's output: noise on the counts"),
    ("estimates", "post-processed from noisy values and public facts"),
    ("the ledger", "guarantee, unit, spend per level, invariants"),
    ("tables, datasets, reports", "CSV/Parquet, dataset parts, the release report"),
]


def draw(path: Path) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(9.8, 4.7))
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1)  # the drawing fills the figure: text at its size
        W, H, gap = 4.3, 4.1, 1.3
        for x0, bg, title, items in [(0.0, PRIVATE_BG, "private: as sensitive as the data", PRIVATE),
                                     (W + gap, PUBLIC_BG, "public: what a release writes", PUBLIC)]:
            ax.add_patch(FancyBboxPatch((x0, 0.55), W, H, boxstyle="round,pad=0,rounding_size=0.12", fc=bg,
                                        ec="0.5", lw=0.9))
            ax.text(x0 + 0.18, 0.55 + H - 0.18, title, va="top", fontsize=10.5, weight="bold")
            for i, (item, where) in enumerate(items):
                y = 0.55 + H - 0.78 - i * 0.72
                ax.text(x0 + 0.25, y, item, va="center", fontsize=9.5, weight="bold")
                ax.text(x0 + 0.25, y - 0.27, where, va="center", fontsize=8.5, color="0.25")
        # the boundary
        xb = W + gap / 2
        ax.plot([xb, xb], [0.55, 0.55 + H + 0.1], color="0.3", lw=1.2, ls=(0, (5, 3)))
        ax.text(xb, 0.55 + H + 0.18, "trust boundary", ha="center", va="bottom", fontsize=9, style="italic")
        y_counts = 0.55 + H - 0.78 - 1 * 0.72
        y_noisy = 0.55 + H - 0.78 - 1 * 0.72
        ax.add_patch(FancyArrowPatch((W - 0.05, y_counts - 0.02), (W + gap + 0.15, y_noisy - 0.02),
                                     arrowstyle="-|>", mutation_scale=14, color="0.15", lw=1.6))
        ax.text(xb, y_counts + 0.12, "noise", ha="center", va="bottom", fontsize=8.5, weight="bold")
        ax.text(xb, y_counts - 0.16, "exact, secure\nsource", ha="center", va="top", fontsize=8, color="0.2",
                linespacing=1.1)
        y_pub = 0.55 + H - 0.78 - 4 * 0.72
        ax.add_patch(FancyArrowPatch((W - 0.05, y_counts - 0.3), (W + gap + 0.15, y_pub + 0.02),
                                     connectionstyle="arc3,rad=0.25", arrowstyle="-|>", mutation_scale=12,
                                     color=WARN, lw=1.2, ls=(0, (4, 2))))
        ax.text(xb, (y_counts + y_pub) / 2 - 0.25, "invariants:\nexact, NOT\nPROTECTED", ha="center", va="center",
                fontsize=8, color=WARN, linespacing=1.1, bbox=dict(fc="white", ec="none", pad=1.5))
        ax.text(0.0, 0.36, "Never holding a private value, on either side: error messages, warnings, log lines, "
                "reprs,\nledgers, pickles (tests/test_hostile_leaks.py plants one in the data of every door and "
                "looks for it).",
                va="top", fontsize=8.5, color="0.2", linespacing=1.3)
        ax.set_xlim(-0.05, 2 * W + gap + 0.05)
        ax.set_ylim(-0.2, 0.55 + H + 0.5)
        ax.axis("off")
        return save(fig, path)


if __name__ == "__main__":
    print(draw(Path(sys.argv[1] if len(sys.argv) > 1 else "trust_boundary.svg")))
