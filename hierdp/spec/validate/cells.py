"""The ``cells`` section: histogram cell dimensions with public domains."""

from __future__ import annotations

from typing import Any

from hierdp.decompositions.declared import RESERVED_COLUMNS
from hierdp.errors import did_you_mean
from hierdp.spec.validate.context import Context, valid_list
from hierdp.spec.validate.model import CellSpec, LevelSpec

__all__ = ["CellChecks"]


class CellChecks(Context):
    """Checks of ``cells``, like levels (names, columns in the source header, domains)."""

    def cells(self, levels: list[LevelSpec], root: str) -> list[CellSpec]:
        """The ``cells:`` section: histogram cell dimensions with public domains, checked like
        levels (names, columns in the source header, domains)."""
        raw = self.data.get("cells")
        out: list[CellSpec] = []
        if not isinstance(raw, list):
            return out
        level_names = {root} | {lv.name for lv in levels}
        level_cols = {lv.column: j for j, lv in enumerate(levels)}
        reserved = RESERVED_COLUMNS - {"cell"}
        names_seen: dict[str, int] = {}
        cols_seen: dict[str, int] = {}
        for i, c in enumerate(raw):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                continue
            here = ("cells", i)
            name = c["name"]
            col = c["column"] if isinstance(c.get("column"), str) else name
            col_path = here + ("column",) if "column" in c else here + ("name",)
            if name in level_names:
                self.err(here + ("name",), f"{name!r} is both a level (or the root) and a cell dimension; it must be "
                                           "one or the other")
                continue
            if name in names_seen:
                self.err(here + ("name",), f"duplicate cell name {name!r} (also cells[{names_seen[name]}]); each cell "
                                           "dimension needs its own name")
                continue
            if name in reserved:
                self.err(here + ("name",), f"cell name {name!r} is the name of an output column "
                                           f"({', '.join(sorted(reserved))}); rename it and keep `column: {col}`")
                continue
            names_seen[name] = i
            if col in level_cols:
                self.err(col_path, f"column {col!r} is already used by level {level_cols[col]}; a column is a level "
                                   "or a cell dimension, not both")
                continue
            if col in cols_seen:
                self.err(col_path, f"column {col!r} is already used by cells[{cols_seen[col]}]; each cell dimension "
                                   "needs its own column")
                continue
            cols_seen[col] = i
            if self.header is not None and col not in self.header:
                self.err(col_path, "cell " + self.missing_col(col))
            dom = self.cell_domain(c, here, col)
            if dom is not None:
                out.append(CellSpec(name=name, column=col, domain=dom))
        return out

    def cell_domain(self, c: dict, here: tuple, col: str) -> Any:
        """A cell domain: a list, ``observed`` (warned), ``{values}`` or ``{file, column}``."""
        dom = c.get("domain")
        if dom == "observed":
            self.warnings.append(f"cell {c['name']!r} uses `observed`: you assert that its values present in the "
                                 "data are public knowledge")
            return ("observed",)
        if isinstance(dom, list):
            return ("list", dom) if valid_list(dom) else None
        if not isinstance(dom, dict):
            return None
        if "values" in dom and "file" in dom:
            self.err(here + ("domain",), "the cell domain gives values and file; give exactly one of them")
            return None
        if "column" in dom and "file" not in dom:
            self.err(here + ("domain", "column"), "`column` only applies to a domain file; add `file:` or remove it",
                     prefer_key=True)
            return None
        if "values" in dom:
            return ("list", dom["values"]) if valid_list(dom["values"]) else None
        if not isinstance(dom.get("file"), str):
            return None
        files = self.resolve_glob(dom["file"], here + ("domain", "file"))
        if not files:
            return None
        f = files[0]
        if f.suffix.lower() == ".txt" and "column" not in dom:
            return ("file", f, None)
        dcol = dom["column"] if isinstance(dom.get("column"), str) else col
        hdr = self.read_header([f], "csv", here + ("domain", "file")) if self.check_files else [dcol]
        if hdr is None:
            return None
        if dcol not in hdr:
            self.err(here + ("domain", "file"), f"domain file {f.name!r} has no column {dcol!r}"
                                                f"{did_you_mean(dcol, hdr)}; name the column with `column:` "
                                                "(its columns: " + ", ".join(hdr) + ")")
            return None
        return ("file", f, dcol)

