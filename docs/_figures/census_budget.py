"""docs/census.md: where the P.L. 94 example spends its ρ, by level and by query.

Read from the bundled spec itself (``specs/pl94.yaml``: the plan's per-level budget and each
level's marginal queries with their shares), so the picture is the budget the example runs
with; the queries are grouped by how many of the four cell attributes they cross.

Run it alone: ``python docs/_figures/census_budget.py out.svg``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _style import RC, save
else:
    from ._style import RC, save

SPEC = Path(__file__).resolve().parents[2] / "specs" / "pl94.yaml"
#: query groups by the number of attributes a query crosses (0: the unit's total; 4: every cell)
GROUPS = {0: ("total", "#4c72b0"), 1: ("one-way marginals", "#8fb3d9"), 2: ("two-way", "#c7d9ec"),
          3: ("three-way", "#f2c98a"), 4: ("detailed (every cell)", "#dd8452")}


def budget(spec: Path = SPEC) -> tuple[float, dict[str, dict[int, float]]]:
    """``(rho, {level: {attributes crossed: rho}})`` as the spec declares it."""
    import yaml

    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    rho = float(doc["privacy"]["rho"])
    params = doc["plan"]["params"]
    levels = params["budget"]
    total = sum(levels.values())
    out: dict[str, dict[int, float]] = {}
    for level, weight in levels.items():
        queries = params["strategy"][level]
        shares = sum(q["share"] for q in queries)
        out[level] = {}
        for q in queries:
            k = len(q["dims"])
            out[level][k] = out[level].get(k, 0.0) + rho * weight / total * q["share"] / shares
    return rho, out


def draw(path: Path) -> Path:
    import matplotlib.pyplot as plt

    rho, levels = budget()
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(9.0, 3.6), layout="constrained")
        names = list(levels)
        for i, level in enumerate(names):
            left = 0.0
            for k, (label, colour) in GROUPS.items():
                width = levels[level].get(k, 0.0)
                ax.barh(i, width, left=left, color=colour, edgecolor="white", lw=0.6,
                        label=label if i == 0 else None)
                left += width
            ax.text(left + 0.008, i, f"ρ = {left:.3f}", va="center", fontsize=9)
        ax.set_yticks(range(len(names)), [n.replace("_", " ") for n in names])
        ax.invert_yaxis()
        ax.set_xlabel(f"ρ (zCDP), of {rho:g} in all")
        ax.set_xlim(0, max(sum(v.values()) for v in levels.values()) * 1.18)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(ncols=5, fontsize=8.5, frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0))
        return save(fig, path)


if __name__ == "__main__":
    print(draw(Path(sys.argv[1] if len(sys.argv) > 1 else "census_budget.svg")))
