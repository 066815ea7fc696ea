"""The normalised spec that validation returns: :class:`ReleaseSpec` and its parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LevelSpec", "CellSpec", "ReleaseSpec"]


@dataclass
class LevelSpec:
    """One level of the hierarchy, normalised."""

    name: str
    column: str
    domain: Any  # ("list", values) | ("observed",) | ("file", Path, column) | ("per_parent", mapping) | ("paths",)
    attribute: str | None = None


@dataclass
class CellSpec:
    """One cell dimension (``cells:`` section), normalised."""

    name: str
    column: str
    domain: Any  # ("list", values) | ("observed",) | ("file", Path, column or None for .txt)


@dataclass
class ReleaseSpec:
    """A validated spec with defaults filled in and input paths resolved."""

    data: dict[str, Any]
    filename: str | None
    base_dir: Path
    source_files: list[Path]
    source_demo: str | None
    source_format: str
    source_columns: list[str] | None
    count: str | None
    filters: list[dict[str, Any]]
    root: str
    levels: list[LevelSpec]
    paths: tuple[str, Any] | None  # ("file", Path) | ("demo", name) | ("geoid", (Path, column, {level: length}))
    unknown: str
    unit: str | None
    max_contributions: int | None
    epsilon: float | None
    delta: float | None
    rho: float | None
    budget: Any  # strategy name | {"strategy", "params"} | {"per_level": {...}}
    mechanism: tuple[str, dict[str, Any]]
    postprocess: list[tuple[str, dict[str, Any]]]
    output: dict[str, Any] | None
    evaluate: dict[str, Any] | None
    seed: int | None
    description: str = ""
    warnings: list[str] = field(default_factory=list)
    plan: tuple[str, dict[str, Any]] | None = None  # a plan other than per_level, with its params
    #: a spatial decomposition replacing the hierarchy: (name, params with columns, bounds, epsilon_share)
    decomposition: tuple[str, dict[str, Any]] | None = None
    cells: list[CellSpec] = field(default_factory=list)  # histogram cell dimensions, in row-major order
    #: "pandas" (in memory), "dask" (a Dask DataFrame over the source files) or "duckdb" (the dataset door)
    engine: str = "pandas"
    neighbours: str = "add_remove"  # privacy.neighbours
    accountant: str = "tight"  # privacy.accountant: how an (ε, δ) request is met (hierdp.PrivacyLoss)
    invariants: list[Any] = field(default_factory=list)  # level names (str) or label paths (tuples)
    allow_invariants_with_add_remove: bool = False
    invariants_cover: str | None = None  # privacy.invariants_cover: "total" or "cells" (None: the plan's default)
    split: Any = None  # split: a level name, "auto" or {level, memory} (hierdp.subtrees)
    #: execution: out of core into a Parquet dataset (hierdp.outofcore): {split, workers, workdir (Path or None)}
    execution: dict[str, Any] | None = None

    def input_files(self) -> list[Path]:
        """Every file this spec reads (spec, source, domain and paths files, a prior file),
        resolved: outputs must never overwrite one of them."""
        files = list(self.source_files)
        if self.filename:
            files.append(Path(self.filename))
        for lv in self.levels:
            if isinstance(lv.domain, tuple) and lv.domain and lv.domain[0] == "file":
                files.append(Path(lv.domain[1]))
        if self.paths is not None and self.paths[0] in ("file", "geoid"):
            files.append(Path(self.paths[1][0] if self.paths[0] == "geoid" else self.paths[1]))
        files += [Path(c.domain[1]) for c in self.cells if c.domain and c.domain[0] == "file"]
        b = self.budget
        prior = b.get("params", {}).get("prior") if isinstance(b, dict) and isinstance(b.get("params"), dict) else None
        if isinstance(prior, dict) and isinstance(prior.get("file"), str):
            pf = Path(prior["file"])
            files.extend(sorted((pf if pf.is_absolute() else self.base_dir / pf).parent.glob(pf.name))
                         if any(ch in pf.name for ch in "*?[") else [pf if pf.is_absolute() else self.base_dir / pf])
        return [f.resolve() for f in files]

    @property
    def level_names(self) -> list[str]:
        """Level names, the root first."""
        return [self.root] + [lv.name for lv in self.levels]

    @property
    def label_columns(self) -> list[str]:
        """Source columns read as text labels (levels, cells and the privacy unit; hierdp.io.readers rules)."""
        return self.level_columns + [c.column for c in self.cells] + ([self.unit] if self.unit else [])

    @property
    def geoid(self) -> tuple[Path, str, dict[str, int]] | None:
        """``hierarchy.geoid``: the GEOID list's file, the code column and the prefix lengths."""
        return self.paths[1] if self.paths is not None and self.paths[0] == "geoid" else None

    @property
    def level_columns(self) -> list[str]:
        """The source columns the levels are read from (the one code column of a GEOID geography)."""
        return [self.geoid[1]] if self.geoid is not None else [lv.column for lv in self.levels]

    @property
    def total(self) -> float:
        """Total budget in the unit the mechanism uses (ε, or ρ when given)."""
        return self.rho if self.rho is not None else self.epsilon  # type: ignore[return-value]

    @property
    def decomposition_columns(self) -> list[str]:
        """The source columns a decomposition reads (``columns`` of a spatial one, the
        ``column`` of sequences); empty without a decomposition."""
        if self.decomposition is None:
            return []
        params = self.decomposition[1]
        cols = params.get("columns")
        if isinstance(cols, list):
            return [c for c in cols if isinstance(c, str)]
        return [params["column"]] if isinstance(params.get("column"), str) else []

    def needed_columns(self) -> list[str]:
        """Source columns the release reads (levels, cells, count, unit, filters, selection)."""
        cols = self.level_columns + [c.column for c in self.cells]
        cols += [c for c in self.decomposition_columns if c not in cols]
        for c in [self.count, self.unit] + [f["column"] for f in self.filters] + list(self.source_columns or []):
            if c is not None and c not in cols:
                cols.append(c)
        return cols
