"""The ``hierarchy`` section: levels, their columns and their public domains."""

from __future__ import annotations

from typing import Any

from hierdp.data import DEMOS
from hierdp.decompositions.declared import RESERVED_COLUMNS
from hierdp.errors import did_you_mean
from hierdp.spec.validate.context import Context, get, valid_list
from hierdp.spec.validate.model import LevelSpec

__all__ = ["HierarchyChecks"]


class HierarchyChecks(Context):
    """Checks of ``hierarchy`` (levels, domains, a paths file)."""

    def hierarchy(self) -> tuple[list[LevelSpec], str, tuple | None, str]:
        """The levels (names, columns, domains), the root name, a paths table and ``unknown``."""
        h = self.data.get("hierarchy")
        root = get(h, "root", str, "total")
        unknown = get(h, "unknown", str, "raise")
        levels: list[LevelSpec] = []
        if not isinstance(h, dict):
            return levels, root, None, unknown
        if isinstance(h.get("geoid"), dict):
            return self.geoid_hierarchy(h, root, unknown)
        if "levels" not in h and "geoid" not in h:
            self.err(("hierarchy",), "the hierarchy needs `levels:` (the level columns, top-down) or `geoid:` "
                                     "(a public list of unit codes and their prefix lengths)")
        paths = None
        p = get(h, "paths", dict)
        if p is not None:
            if isinstance(p.get("file"), str):
                files = self.resolve_glob(p["file"], ("hierarchy", "paths", "file"))
                paths = ("file", files[0]) if files else None
            elif isinstance(p.get("demo"), str):

                if p["demo"] not in DEMOS:
                    self.err(("hierarchy", "paths", "demo"), f"unknown demo geography {p['demo']!r}"
                                                             f"{did_you_mean(p['demo'], DEMOS)}; bundled: "
                                                             f"{', '.join(sorted(DEMOS))}")
                else:
                    paths = ("demo", p["demo"])
        raw = get(h, "levels", list, [])
        names_seen: dict[str, int] = {}
        cols_seen: dict[str, int] = {}
        for i, lv in enumerate(raw):
            if not isinstance(lv, dict) or not isinstance(lv.get("name"), str):
                continue
            name: str = lv["name"]
            col: str = lv["column"] if isinstance(lv.get("column"), str) else name
            here = ("hierarchy", "levels", i)
            name_ok = True
            if name == root:
                name_ok = False
                self.err(here + ("name",), f"level name {name!r} is the root's name; rename the level "
                                           "or set hierarchy.root")
            if name in names_seen:
                name_ok = False
                self.err(here + ("name",), f"duplicate level name {name!r} (also level {names_seen[name]}); "
                                           "each level needs its own name")

            if name in RESERVED_COLUMNS:
                name_ok = False
                self.err(here + ("name",), f"level name {name!r} is the name of an output column "
                                           f"({', '.join(sorted(RESERVED_COLUMNS))}); rename the level and keep "
                                           f"`column: {col}` to read the same data")
            names_seen.setdefault(name, i)
            if not name_ok and "column" not in lv:
                pass  # the column defaults to the (bad) name: one error is enough
            elif col in cols_seen:
                self.err(here + ("column",) if "column" in lv else here + ("name",),
                         f"column {col!r} is already used by level {cols_seen[col]}; each level needs its own column")
            cols_seen.setdefault(col, i)
            if name_ok and self.header is not None and col not in self.header:
                self.err(here + ("column",) if "column" in lv else here + ("name",),
                         f"level column {col!r} is missing from the source" + self.missing_col(col)[len(
                             f"column {col!r} is not in the source"):])
            dom = self.domain(lv, i, levels, paths, col)
            levels.append(LevelSpec(name=name, column=col, domain=dom, attribute=get(lv, "attribute", str)))
        if paths is not None and paths[0] == "file" and self.check_files:
            hdr = self.read_header([paths[1]], "csv", ("hierarchy", "paths", "file"))
            if hdr is not None:  # the paths hold every level down to the deepest one they declare
                last = max((i for i, lv in enumerate(levels) if lv.domain == ("paths",)), default=-1)
                for lv in levels[:last + 1]:
                    if lv.column not in hdr:
                        self.err(("hierarchy", "paths", "file"), f"the paths file has no column {lv.column!r}"
                                                                  f"{did_you_mean(lv.column, hdr)}; it needs one "
                                                                  "column per level")
        return levels, root, paths, unknown

    def geoid_hierarchy(self, h: dict, root: str, unknown: str) -> tuple[list[LevelSpec], str, tuple | None, str]:
        """``hierarchy.geoid``: the levels are the prefixes of one code column, the public
        list of the finest units' codes their paths (:func:`hierdp.tree.geoid_frame`)."""
        g = h["geoid"]
        here = ("hierarchy", "geoid")
        if "levels" in h or "paths" in h:
            self.err(here, "give the geography once: hierarchy.geoid, or hierarchy.levels (and paths), not both")
            return [], root, None, unknown
        engine = get(self.data.get("source"), "engine", str, "pandas")
        if engine not in ("pandas", "duckdb"):
            self.err(here, f"hierarchy.geoid reads the records with the pandas or duckdb engine today; source.engine "
                           f"{engine!r} cannot derive the levels from the code column yet: use engine: pandas or "
                           "duckdb")
        col = get(g, "column", str)
        raw = get(g, "levels", dict, {})
        levels: list[LevelSpec] = []
        lengths: list[int] = []
        for name, n in raw.items():
            if not isinstance(name, str) or not name:
                self.err(here + ("levels",), f"level names are text (the level's name, then its prefix length: "
                                             f"County: 5), got {name!r}")
                continue
            if name == root or name in RESERVED_COLUMNS or name == col:
                self.err(here + ("levels", name), f"level name {name!r} is the root's, an output column's or the "
                                                  "code column's name; rename the level")
            if isinstance(n, int) and lengths and n <= lengths[-1]:
                self.err(here + ("levels", name), f"level {name!r}: prefix length {n} does not nest under the level "
                                                  f"above ({lengths[-1]}); lengths grow strictly from the top down")
            lengths.append(n if isinstance(n, int) else 0)
            levels.append(LevelSpec(name=name, column=name, domain=("paths",)))
        if col is not None and self.header is not None and col not in self.header:
            self.err(here + ("column",), self.missing_col(col))
        files = self.resolve_glob(g["file"], here + ("file",)) if isinstance(g.get("file"), str) else []
        if files and col is not None and self.check_files:
            hdr = self.read_header(files[:1], "csv", here + ("file",))
            if hdr is not None and col not in hdr:
                self.err(here + ("file",), f"the GEOID list has no column {col!r}{did_you_mean(col, hdr)}")
        paths = ("geoid", (files[0], col, dict(raw))) if files and col is not None else None
        return levels, root, paths, unknown

    def domain(self, lv: dict, i: int, previous: list[LevelSpec], paths: tuple | None, col: str) -> Any:
        """Level ``i``'s public domain, normalised (a list, ``observed``, a file, per parent, or paths)."""
        here = ("hierarchy", "levels", i)
        if "domain" not in lv:
            if paths is not None or get(self.data.get("hierarchy"), "paths", dict) is not None:
                return ("paths",)
            self.err(here, f"level {lv['name']!r} declares no domain; the tree's structure must be public: "
                           "add `domain:` with a list of values, a file, a per-parent mapping, or `observed` "
                           "to assert that the values seen in the data are public")
            return None
        dom = lv["domain"]
        attr = lv.get("attribute")
        if dom == "observed":
            if attr == "unknown":
                self.err(here + ("domain",), f"level {lv['name']!r} is an unknown attribute, so its values are "
                                             "not public: declare its full domain instead of `observed`")
            else:
                self.warnings.append(f"level {lv['name']!r} uses `observed`: you assert that its values "
                                     "present in the data are public knowledge")
            return ("observed",)
        if isinstance(dom, list):
            return ("list", dom) if valid_list(dom) else None
        if not isinstance(dom, dict):
            return None
        keys = [k for k in ("values", "product", "file", "per_parent") if k in dom]
        if len(keys) > 1:
            self.err(here + ("domain",), f"the domain gives {' and '.join(keys)}; give exactly one of values, "
                                         "product, file or per_parent")
            return None
        if "column" in dom and "file" not in dom:
            self.err(here + ("domain", "column"), "`column` only applies to a domain file; add `file:` "
                                                  "or remove it", prefer_key=True)
        if not keys:
            return None
        k = keys[0]
        if k in ("values", "product"):
            return ("list", dom[k]) if valid_list(dom[k]) else None
        if k == "file":
            if not isinstance(dom["file"], str):
                return None
            files = self.resolve_glob(dom["file"], here + ("domain", "file"))
            if not files:
                return None
            f = files[0]
            dcol = dom.get("column", col) if isinstance(dom.get("column", col), str) else col
            parent_col = previous[-1].column if previous else None
            if f.suffix.lower() == ".txt" and "column" not in dom:
                return ("file", f, None, None)
            hdr = self.read_header([f], "csv", here + ("domain", "file")) if self.check_files else [dcol]
            if hdr is None:
                return None
            if dcol not in hdr:
                self.err(here + ("domain", "file"), f"domain file {f.name!r} has no column {dcol!r}"
                                                    f"{did_you_mean(dcol, hdr)}; name the column with "
                                                    "`column:` (its columns: " + ", ".join(hdr) + ")")
                return None
            per_parent = parent_col if parent_col is not None and parent_col in hdr and parent_col != dcol else None
            return ("file", f, dcol, per_parent)
        # per_parent
        mapping = dom["per_parent"]
        if not isinstance(mapping, dict):
            return None
        if not previous:
            self.err(here + ("domain", "per_parent"), f"level {lv['name']!r} is the first level, whose only "
                                                      "parent is the root: give a list of values instead")
            return None
        parent = previous[-1]
        if parent.domain is not None and parent.domain[0] == "list":
            known = [str(x) for x in parent.domain[1]]
            for key in mapping:
                if str(key) not in known and key not in parent.domain[1]:
                    self.err(here + ("domain", "per_parent", key),
                             f"{key!r} is not a value of the parent level {parent.name!r}"
                             f"{did_you_mean(str(key), known)}; every key must be a declared {parent.name} value",
                             prefer_key=True)
            missing = [v for v in parent.domain[1] if v not in mapping and str(v) not in map(str, mapping)]
            if missing:
                self.err(here + ("domain", "per_parent"),
                         f"no entry for {parent.name} value(s) {missing[:3]}; add them (every parent needs a list)")
        return ("per_parent", mapping)

