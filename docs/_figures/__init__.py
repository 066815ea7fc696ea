"""The guide pages' figures, drawn by code: one module per figure, each with ``draw(path)``.

The docs build (docs/conf.py) draws every figure into ``docs/_generated/`` (git-ignored)
before it reads a page, and the pages include them from there (``{figure}
_generated/NAME``); nothing drawn is committed, so a figure is always what its code draws
from the code and numbers of this checkout. Each module also runs alone:
``python docs/_figures/split_tasks.py out.svg``.
"""

from __future__ import annotations

from pathlib import Path

from . import bias_levels, census_budget, spec_flow, split_tasks, trust_boundary

#: file name in docs/_generated/ -> (the module that draws it, the page that shows it)
FIGURES = {
    "scale-split-tasks.svg": (split_tasks, "scale.md"),
    "comparison-bias-levels.svg": (bias_levels, "comparison.md"),
    "spec-flow.svg": (spec_flow, "spec.md"),
    "security-trust-boundary.svg": (trust_boundary, "security.md"),
    "census-budget.svg": (census_budget, "census.md"),
}


def build(target: Path) -> list[Path]:
    """Draw every figure into ``target``; returns the files written."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    return [module.draw(target / name) for name, (module, _) in FIGURES.items()]
