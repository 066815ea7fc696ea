"""docs/comparison.md: the bias tables ("Non-negative integers on sparse trees: bias per
level") as a plot of z per level, global against top-down ``nonneg``, with the ±3 band.

The numbers are read from the tables of docs/comparison.md itself (the (a) and (b) rows of
(i) and (ii), and the rerun table of issue 47), so the plot cannot disagree with the page:
change a table and the next docs build redraws it; remove or rename one and the build stops.

Run it alone: ``python docs/_figures/bias_levels.py out.svg``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _style import RC, save
else:
    from ._style import RC, save

PAGE = Path(__file__).resolve().parents[1] / "comparison.md"
TREES = {"(i)": "airports", "(ii)": "synthetic census"}  # the sections' trees, as the rerun table names them
SERIES = {  # label -> (how a row's method starts, colour, line style)
    "global nonneg → round": ("(a)", "tab:red", "-"),
    "top-down nonneg → round": ("(b) ", "tab:blue", "-"),
    "top-down, issue 47's round (rerun)": ("rerun", "tab:blue", (0, (3, 2))),
}


def _number(cell: str) -> float:
    return float(cell.replace("*", "").replace("−", "-").replace("+", "").strip())


def _rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text``, cells stripped."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


def _section(text: str, heading: str, name: str, page: Path) -> str:
    """The text under the ``### `` heading matching ``heading`` up to the next one."""
    found = re.search(rf"^### {heading}$(.*?)(?=^### )", text, flags=re.S | re.M)
    if found is None:
        raise ValueError(f"{page.name}: no section '### {name}' with the bias table")
    return found.group(1)


def read_tables(page: Path = PAGE) -> dict[str, dict[str, dict[str, float]]]:
    """``{tree: {series: {level: z}}}`` from the page's tables, levels in the tables' order."""
    text = page.read_text(encoding="utf-8")
    out: dict[str, dict[str, dict[str, float]]] = {tree: {} for tree in TREES.values()}
    for tag, tree in TREES.items():
        method = ""
        for cells in _rows(_section(text, rf"{re.escape(tag)} .*?", f"{tag} ...", page)):
            method = cells[0] or method
            for label, (start, _, _) in SERIES.items():
                if method.startswith(start) and cells[5]:
                    out[tree].setdefault(label, {})[cells[1]] = _number(cells[5])  # column z
    rerun = "Rerun with the integer steps of issue 47"
    tree = ""
    for cells in _rows(_section(text, re.escape(rerun), rerun, page)):
        tree = cells[0] or tree
        out[tree].setdefault("top-down, issue 47's round (rerun)", {})[cells[1]] = _number(cells[4])
    for tree, series in out.items():
        if set(series) != set(SERIES) or len({len(v) for v in series.values()}) != 1:
            raise ValueError(f"{page.name}: the {tree} tables do not give z at every level for {sorted(SERIES)}")
    return out


def draw(path: Path) -> Path:
    import matplotlib.pyplot as plt

    data = read_tables()
    with plt.rc_context(RC):
        fig, axes = plt.subplots(1, len(data), figsize=(9.6, 3.9), sharey=True, layout="constrained")
        for ax, (tree, series) in zip(axes, data.items()):
            levels = list(next(iter(series.values())))
            ax.axhspan(-3, 3, color="tab:green", alpha=0.13, lw=0)
            ax.axhline(0, color="0.5", lw=0.7)
            for label, z in series.items():
                _, colour, style = SERIES[label]
                ax.plot(levels, [z[lv] for lv in levels], marker="o", color=colour, ls=style, lw=1.6, label=label)
                ax.annotate(f"z = {z[levels[-1]]:+.1f}", (len(levels) - 1, z[levels[-1]]), xytext=(6, 0),
                            textcoords="offset points", va="center", fontsize=8.5, color=colour)
            ax.set_yscale("symlog", linthresh=3, linscale=1.0)
            ax.set_yticks([-3, 0, 3, 10, 30, 100, 300])
            ax.set_yticklabels(["−3", "0", "+3", "+10", "+30", "+100", "+300"])
            ax.set_ylim(-6, 400)
            ax.set_xlim(-0.3, len(levels) - 0.2)
            ax.set_title(tree)
            ax.grid(axis="y", color="0.9", lw=0.6)
            ax.text(0.02, 0.06, "|z| < 3: no bias seen\nin 200 releases", transform=ax.transAxes, fontsize=8.5,
                    color="darkgreen")
        axes[0].set_ylabel("z = bias / SE of a level's mean error")
        axes[0].legend(loc="upper right", fontsize=8.5, frameon=False, bbox_to_anchor=(1.0, 0.86))
        fig.suptitle("Bias per level of blue → nonneg → round (200 seeded releases per tree)", fontsize=11)
        return save(fig, path)


if __name__ == "__main__":
    print(draw(Path(sys.argv[1] if len(sys.argv) > 1 else "bias_levels.svg")))
