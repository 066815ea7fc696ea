"""Labels as written: YAML must never turn a domain value, a per-parent key or a filter
value on a label column into a number or a boolean (``01``, ``NO``, ``1e3``)."""

from __future__ import annotations

from typing import Any

from hierdp.spec.loader import Issue, Marks
from hierdp.spec.validate.context import kind_of

__all__ = ["labels_as_text"]


def _label_text(value: Any, raw: str | None, path: tuple, marks: Marks, issues: list[Issue]) -> Any:
    """A label as written: the source text of a plain YAML scalar read as a number or
    boolean (``01``, ``1e3``), the string itself, ``str(n)`` for an int of a Python dict;
    anything else (a boolean, float or null of a dict spec) is reported and kept."""
    if isinstance(value, str):
        return value
    if raw is not None and value is not None:
        return raw
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, (bool, float)) or value is None:
        issues.append(marks.issue(path, f"a label must be a string, got {value!r} ({kind_of(value)}); quote it "
                                        f"(e.g. '{raw if raw is not None else value}') to keep it as written"))
    return value


def labels_as_text(data: Any, marks: Marks, issues: list[Issue]) -> Any:
    """The spec with every *label* (domain values, per-parent keys and values, filter values
    on level columns) as the text written, so YAML never turns a label into a number or a
    boolean. Other values (budgets, thresholds) keep their types."""
    if not isinstance(data, dict):
        return data
    data = dict(data)

    def fix_list(items: Any, path: tuple) -> Any:
        if not isinstance(items, list):
            return items
        return [_label_text(v, marks.raw.get(path + (j,)), path + (j,), marks, issues)
                if not isinstance(v, (list, dict)) else v for j, v in enumerate(items)]

    h = data.get("hierarchy")
    level_cols: set[str] = set()
    if isinstance(h, dict) and isinstance(h.get("levels"), list):
        h = data["hierarchy"] = dict(h)
        levels = h["levels"] = list(h["levels"])
        for i, lv in enumerate(levels):
            if not isinstance(lv, dict):
                continue
            for key in ("name", "column"):
                if isinstance(lv.get(key), str):
                    level_cols.add(lv[key])
            dom = lv.get("domain")
            here = ("hierarchy", "levels", i, "domain")
            if isinstance(dom, list):
                levels[i] = dict(lv, domain=fix_list(dom, here))
            elif isinstance(dom, dict):
                dom = dict(dom)
                for k in ("values", "product"):
                    if k in dom:
                        dom[k] = fix_list(dom[k], here + (k,))
                pp = dom.get("per_parent")
                if isinstance(pp, dict):
                    new: dict[Any, Any] = {}
                    for key, vals in pp.items():
                        kpath = here + ("per_parent", key)
                        k2 = _label_text(key, marks.raw_key.get(kpath), kpath, marks, issues)
                        try:
                            hash(k2)
                        except TypeError:
                            k2 = key
                        if k2 != key:  # positions follow the key as written
                            for table in (marks.value, marks.key):
                                for old in [p for p in table if p[:len(kpath)] == kpath]:
                                    table.setdefault(here + ("per_parent", k2) + old[len(kpath):], table[old])
                        new[k2] = fix_list(vals, here + ("per_parent", key))
                    dom["per_parent"] = new
                levels[i] = dict(lv, domain=dom)
    cells = data.get("cells")
    if isinstance(cells, list):
        cells = data["cells"] = list(cells)
        for i, c in enumerate(cells):
            if not isinstance(c, dict):
                continue
            for key in ("name", "column"):
                if isinstance(c.get(key), str):
                    level_cols.add(c[key])  # read as text like a level column
            dom = c.get("domain")
            at: tuple = ("cells", i, "domain")
            if isinstance(dom, list):
                cells[i] = dict(c, domain=fix_list(dom, at))
            elif isinstance(dom, dict) and "values" in dom:
                cells[i] = dict(c, domain=dict(dom, values=fix_list(dom["values"], at + ("values",))))
    src = data.get("source")
    if isinstance(src, dict) and isinstance(src.get("filter"), list):
        src = data["source"] = dict(src)
        filters = src["filter"] = list(src["filter"])
        for i, f in enumerate(filters):
            if isinstance(f, dict) and f.get("column") in level_cols and f.get("op") in ("==", "!=", "in", "not_in"):
                path = ("source", "filter", i, "value")
                v = f.get("value")
                filters[i] = dict(f, value=fix_list(v, path) if isinstance(v, list)
                                  else _label_text(v, marks.raw.get(path), path, marks, issues))
    return data

