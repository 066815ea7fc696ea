"""docs/spec.md: what ``hierdp release spec.yaml`` does with each section of a spec, in order.

The steps are those of :func:`hierdp.spec.runner.run_spec` (validate, read the source, build
the public tree, measure and post-process, write); the sections under each step are the
spec's own. Drawing checks both against the code: every section drawn must be a section of
the JSON Schema (``hierdp schema``) and every section of the schema must be drawn, so the
picture cannot name a section that does not exist or forget one that does.

Run it alone: ``python docs/_figures/spec_flow.py out.svg``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _style import RC, save
else:
    from ._style import RC, save

SCHEMA = Path(__file__).resolve().parents[2] / "hierdp" / "spec" / "schema.json"
PRIVATE, PUBLIC, NEUTRAL, WARN = "#f6d9cf", "#d6e6f5", "#eeeeee", "#b22222"

#: what a section drawn in a step needs said beside it
ASIDE = {"decomposition": "(instead of hierarchy:\nchosen privately from\nthe points, paid for)"}
#: (step, sections it reads, one line on what it touches, colour): run_spec's steps in order
STEPS = [
    ("validate", ["hierdp", "description", "every section"], "before any\nrecord is read", NEUTRAL),
    ("read\nthe source", ["source"], "the records:\nprivate", PRIVATE),
    ("build the\npublic tree", ["hierarchy", "cells", "decomposition"], "declared\ndomains: public", PUBLIC),
    ("measure", ["privacy", "budget", "plan", "mechanism", "split", "execution", "seed"],
     "true counts in,\nnoise added", PRIVATE),
    ("post-\nprocess", ["postprocess"], "noisy values\nonly", PUBLIC),
    ("write", ["output"], "the table\nand its ledger", PUBLIC),
]
SIDE = ("evaluate", "hierdp evaluate: NON-PRIVATE,\nit reads the true counts:\nnever publish its table")


def check_against_schema() -> None:
    """Every section drawn exists, and every section of the schema is drawn."""
    sections = set(json.loads(SCHEMA.read_text(encoding="utf-8"))["properties"])
    drawn = {s for _, secs, _, _ in STEPS for s in secs if s != "every section"} | {SIDE[0]}
    if drawn != sections:
        raise ValueError(f"spec_flow.py draws sections {sorted(drawn - sections)} the schema lacks and omits "
                         f"{sorted(sections - drawn)}; update the figure")


def draw(path: Path) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    check_against_schema()
    w, gap, top = 1.42, 0.26, 3.75
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(9.8, 4.5))
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1)  # the drawing fills the figure: text at its size
        boxes = []
        for i, (step, sections, note, colour) in enumerate(STEPS):
            x = i * (w + gap)
            ax.add_patch(FancyBboxPatch((x, 0.95), w, top - 0.95, boxstyle="round,pad=0,rounding_size=0.08",
                                        fc=colour, ec="0.45", lw=0.9))
            ax.text(x + w / 2, top - 0.12, step, ha="center", va="top", fontsize=10, weight="bold", linespacing=1.1)
            listed = [s for s in sections if s not in ASIDE]
            ax.text(x + w / 2, top - 0.62, "\n".join(s if s == "every section" else f"{s}:" for s in listed),
                    ha="center", va="top", fontsize=8.5, family="monospace", linespacing=1.35)
            for s in (s for s in sections if s in ASIDE):
                ax.text(x + w / 2, top - 0.75 - 0.25 * len(listed), f"{s}:", ha="center", va="top", fontsize=8.5,
                        family="monospace")
                ax.text(x + w / 2, top - 0.98 - 0.25 * len(listed), ASIDE[s], ha="center", va="top", fontsize=8,
                        color="0.25", linespacing=1.15)
            ax.text(x + w / 2, 1.05, note, ha="center", va="bottom", fontsize=8.5, color="0.25", style="italic")
            boxes.append(x)
            if i:
                ax.add_patch(FancyArrowPatch((x - gap + 0.03, 2.0), (x - 0.03, 2.0), arrowstyle="-|>",
                                             mutation_scale=12, color="0.3", lw=1.1))
        # the non-private side branch: from the counts, never into the release
        ew = 2.6
        x_eval = boxes[3] + w / 2 - ew / 2
        ax.add_patch(FancyBboxPatch((x_eval, -0.25), ew, 0.89, boxstyle="round,pad=0,rounding_size=0.08",
                                    fc="white", ec=WARN, lw=1.1, ls=(0, (4, 2))))
        ax.text(x_eval + ew / 2, 0.56, f"{SIDE[0]}:", ha="center", va="top", fontsize=8.5,
                family="monospace", color=WARN)
        ax.text(x_eval + ew / 2, 0.34, SIDE[1], ha="center", va="top", fontsize=8.5, color=WARN, linespacing=1.2)
        ax.add_patch(FancyArrowPatch((boxes[3] + w / 2, 0.95), (boxes[3] + w / 2, 0.64), arrowstyle="-|>",
                                     mutation_scale=10, color=WARN, lw=1.0, ls=(0, (3, 2))))
        # the legend of the colours
        for j, (colour, what) in enumerate([(PRIVATE, "touches private data (records, true counts)"),
                                            (PUBLIC, "public structure or noisy values only")]):
            ax.add_patch(FancyBboxPatch((0.0, 0.42 - j * 0.36), 0.22, 0.2, boxstyle="round,pad=0,rounding_size=0.03",
                                        fc=colour, ec="0.45", lw=0.7))
            ax.text(0.3, 0.52 - j * 0.36, what, va="center", fontsize=8.5)
        ax.set_xlim(-0.05, boxes[-1] + w + 0.05)
        ax.set_ylim(-0.3, top + 0.05)
        ax.axis("off")
        return save(fig, path)


if __name__ == "__main__":
    print(draw(Path(sys.argv[1] if len(sys.argv) > 1 else "spec_flow.svg")))
