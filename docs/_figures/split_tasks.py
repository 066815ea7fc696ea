"""docs/scale.md: a country cut into a top part and subtree tasks, as hierdp cuts it.

The picture is drawn from a real :func:`hierdp.subtrees.partition` of a small synthetic
geography (3 states, 12 counties, 36 tracts): the nodes above the split level form the top
part, solved in memory; every county roots a subtree; consecutive subtrees are grouped into
tasks of at most ``task_memory / 60 B`` nodes (``hierdp.subtrees.BYTES_PER_NODE_CELL``).
Nothing is drawn that the partition did not return.

Run it alone: ``python docs/_figures/split_tasks.py out.svg``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: the checkout's hierdp and the style beside this file
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]
    from _style import RC, save
else:
    from ._style import RC, save

#: tracts per county, county by county, state by state
TRACTS = [[3, 2, 4, 3], [5, 2, 3], [2, 4, 3, 2, 3]]
SPLIT = {"level": "county", "memory": 4000, "task_memory": 600}  # bytes: a toy budget for a toy tree


def geography():
    """The tree (total > state > county > tract) and its partition at ``SPLIT``."""
    import hierdp
    from hierdp.subtrees import partition

    parent, labels = [-1], ["total"]
    for s, counties in enumerate(TRACTS):
        state = len(parent)
        parent.append(0)
        labels.append(f"S{s + 1}")
        for c, n_tracts in enumerate(counties):
            county = len(parent)
            parent.append(state)
            labels.append(f"S{s + 1}-C{c + 1}")
            for t in range(n_tracts):
                parent.append(county)
                labels.append(f"S{s + 1}-C{c + 1}-T{t + 1}")
    tree = hierdp.Tree.from_parent(np.asarray(parent), level_names=["total", "state", "county", "tract"])
    return tree, partition(tree, SPLIT)


def _layout(tree) -> np.ndarray:
    """x of every internal node id: leaves left to right in the order of their ancestors'
    internal ids (the order the partition walks the subtrees in), parents centred."""
    ti = tree.internal
    parent, n = np.asarray(ti.parent), tree.n_nodes
    children: list[list[int]] = [[] for _ in range(n)]
    for v in range(1, n):
        children[parent[v]].append(v)
    x = np.zeros(n)
    nxt = 0

    def place(v: int) -> float:
        nonlocal nxt
        if not children[v]:
            x[v] = nxt
            nxt += 1
        else:
            x[v] = np.mean([place(c) for c in sorted(children[v])])
        return x[v]

    place(int(np.flatnonzero(parent < 0)[0]))
    return x


def draw(path: Path) -> Path:
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    tree, part = geography()
    ti = tree.internal
    parent, depth = np.asarray(ti.parent), np.asarray(ti.depth)
    x = _layout(tree)
    y = (tree.n_levels - 1 - depth).astype(float)  # root on top
    task_of = np.full(tree.n_nodes, -1)
    for task in part.tasks():
        task_of[task.nodes] = task.index
    colours = [plt.get_cmap("tab10")(i % 10) for i in range(part.n_tasks)]

    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(9.6, 5.0))
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1)  # the drawing fills the figure: text at its size
        top_y = y[depth < part.depth].min()
        ax.add_patch(FancyBboxPatch((x.min() - 0.6, top_y - 0.35), x.max() - x.min() + 1.2, y.max() - top_y + 0.7,
                                    boxstyle="round,pad=0,rounding_size=0.25", fc="0.92", ec="0.6", lw=0.8, zorder=0))
        ax.text(x.max() + 0.5, y.max() + 0.08, "top part: the levels above the split,\nsolved in memory",
                ha="right", va="center", fontsize=10)
        split_y = y[depth == part.depth][0]
        ax.plot([x.min() - 0.6, x.max() + 0.6], [split_y + 0.5] * 2, color="0.35", lw=0.9, ls=(0, (4, 3)), zorder=1)
        ax.text(x.min() - 1.0, split_y + 0.5, f"split = {part.level!r}", ha="right", va="center", fontsize=8.5,
                color="0.3", style="italic")
        for t in range(part.n_tasks):
            nodes = np.flatnonzero(task_of == t)
            lo, hi = x[nodes].min(), x[nodes].max()
            ax.add_patch(FancyBboxPatch((lo - 0.42, -0.38), hi - lo + 0.84, split_y + 0.72,
                                        boxstyle="round,pad=0,rounding_size=0.25", fc=(*colours[t][:3], 0.16),
                                        ec=colours[t], lw=1.2, zorder=0))
            ax.text((lo + hi) / 2, -0.62, f"task {t}", ha="center", va="top", fontsize=9, color=colours[t])
        for v in range(tree.n_nodes):
            if parent[v] >= 0:
                ax.plot([x[v], x[parent[v]]], [y[v], y[parent[v]]], color="0.55", lw=0.8, zorder=1)
        face = [colours[t] if t >= 0 else (0.3, 0.3, 0.3, 1.0) for t in task_of]
        ax.scatter(x, y, s=[70 if d <= part.depth else 34 for d in depth], c=face, edgecolors="white",
                   linewidths=0.8, zorder=3)
        for d, name in enumerate(tree.level_names):
            ax.text(x.min() - 1.0, tree.n_levels - 1 - d, name, ha="right", va="center", fontsize=10)
        sizes = np.bincount(task_of[task_of >= 0])
        ax.set_title(f"{tree.n_nodes} nodes, split at {part.level!r} with task_memory = {SPLIT['task_memory']} B: "
                     f"{part.top.size} top nodes, {part.roots.size} subtrees in {part.n_tasks} tasks "
                     f"of {sizes.min()}-{sizes.max()} nodes", fontsize=10, loc="left")
        ax.text(x.min() - 2.4, -1.05,
                "1. each task: measure its nodes, pass one summary (z, u) per subtree root up\n"
                "2. the top part: solved in memory with those summaries as measured nodes\n"
                "3. each task: pass down from its roots' final values", fontsize=9, color="0.2", va="top",
                linespacing=1.5)
        ax.set_xlim(x.min() - 2.6, x.max() + 0.8)
        ax.set_ylim(-2.0, y.max() + 0.5)
        ax.axis("off")
        return save(fig, path)


if __name__ == "__main__":
    print(draw(Path(sys.argv[1] if len(sys.argv) > 1 else "split_tasks.svg")))
