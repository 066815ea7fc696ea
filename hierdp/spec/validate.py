"""Validation of release specs: every problem at once, each with its path, line and fix.

:func:`validate` runs three passes and raises one :class:`~hierdp.errors.SpecError`
listing every problem found (``SpecError.errors`` holds the rendered lines, and
``SpecError.issues`` the :class:`~hierdp.spec.loader.Issue` objects):

1. YAML syntax (with the loader's positions; tabs, duplicate keys, an empty file);
2. the JSON Schema shipped in ``hierdp/spec/schema.json`` (unknown keys with the
   closest valid key, types, ranges, finiteness);
3. meaning: plugin names resolved through :mod:`hierdp.registry` and their parameters
   checked against the plugin's ``params_schema``, the privacy definition against the
   mechanism's budget unit, per-level budgets against the level names and the total,
   files and columns. Only the *header* of a CSV source and the *schema* of a Parquet
   source are read — never a private value.

Unusual but valid settings (e.g. ε > 10, ``observed`` domains) produce warnings in
``ReleaseSpec.warnings`` rather than errors.
"""

from __future__ import annotations

import glob
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hierdp import registry, rules
from hierdp.decompositions.declared import RESERVED_COLUMNS
from hierdp.decompositions.privtree import PrivTree, SimpleTree, UniformGrid, schedule
from hierdp.decompositions.suffix_tree import SuffixTree
from hierdp.errors import DataError, HierDPError, SpecError, did_you_mean
from hierdp.readers import csv_header
from hierdp.spec.loader import Issue, LoadedSpec, Marks, load_file, load_text
from hierdp.spec.schema import check_against_schema, load_schema

__all__ = ["ReleaseSpec", "LevelSpec", "CellSpec", "validate", "raise_issues", "KNOWN_EXTENSIONS"]

#: file extension -> format
KNOWN_EXTENSIONS = {".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet"}
_LARGE_EPSILON = 10.0


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
    paths: tuple[str, Any] | None  # ("file", Path) | ("demo", name)
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
    engine: str = "pandas"  # "pandas" (in memory) or "dask" (a Dask DataFrame over the source files)
    neighbours: str = "add_remove"  # privacy.neighbours
    invariants: list[Any] = field(default_factory=list)  # level names (str) or label paths (tuples)
    allow_invariants_with_add_remove: bool = False

    def input_files(self) -> list[Path]:
        """Every file this spec reads (spec, source, domain and paths files, a prior file),
        resolved: outputs must never overwrite one of them."""
        files = list(self.source_files)
        if self.filename:
            files.append(Path(self.filename))
        for lv in self.levels:
            if isinstance(lv.domain, tuple) and lv.domain and lv.domain[0] == "file":
                files.append(Path(lv.domain[1]))
        if self.paths is not None and self.paths[0] == "file":
            files.append(Path(self.paths[1]))
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
        """Source columns read as text labels (levels, cells and the privacy unit; hierdp.readers rules)."""
        return [lv.column for lv in self.levels] + [c.column for c in self.cells] + ([self.unit] if self.unit else [])

    @property
    def total(self) -> float:
        """Total budget in the unit the mechanism uses (ε, or ρ when given)."""
        return self.rho if self.rho is not None else self.epsilon  # type: ignore[return-value]

    def needed_columns(self) -> list[str]:
        """Source columns the release reads (levels, cells, count, unit, filters, selection)."""
        cols = [lv.column for lv in self.levels] + [c.column for c in self.cells]
        if self.decomposition is not None:
            dcols = self.decomposition[1].get("columns") or [self.decomposition[1]["column"]]
            cols += [c for c in dcols if c not in cols]
        for c in [self.count, self.unit] + [f["column"] for f in self.filters] + list(self.source_columns or []):
            if c is not None and c not in cols:
                cols.append(c)
        return cols


def raise_issues(issues: list[Issue], filename: str | None) -> None:
    """Raise one :class:`SpecError` listing ``issues`` (no-op when empty)."""
    if not issues:
        return
    lines = [i.render(filename) for i in issues]
    head = lines[0] if len(lines) == 1 else f"{len(lines)} problems in the spec:\n  " + "\n  ".join(lines)
    err = SpecError(head, lines)
    err.issues = list(issues)  # type: ignore[attr-defined]
    raise err


def _load(source: Any) -> LoadedSpec:
    if isinstance(source, LoadedSpec):
        return source
    if isinstance(source, dict):
        return LoadedSpec(source, Marks(), None, Path.cwd())
    if isinstance(source, (str, Path)):
        s = str(source)
        if "\n" in s or (isinstance(source, str) and s.lstrip().startswith(("hierdp:", "{"))):
            return load_text(s, filename=None, base_dir=Path.cwd())
        return load_file(source)
    raise SpecError(f"cannot read a spec from {type(source).__name__}; give a path, YAML text or a dict")


def validate(source: Any, *, check_files: bool = True) -> ReleaseSpec:
    """Validate a spec (a path, YAML text, a :class:`LoadedSpec` or a dict).

    Returns the normalised :class:`ReleaseSpec`; raises :class:`SpecError` listing every
    problem. With ``check_files`` the source header, domain files and output format are
    checked too (nothing but column names is read from the private source).
    """
    loaded = _load(source)
    fname = loaded.filename
    raise_issues(loaded.issues, fname)
    data, marks = loaded.data, loaded.marks
    if not isinstance(data, dict):
        raise_issues([Issue((), f"the spec must be a mapping of sections (hierdp, source, hierarchy, privacy, ...), "
                               f"got {_kind(data)}; start the file with `hierdp: 1`", 1, 1)], fname)
    if "hierdp" in data and data["hierdp"] != 1:
        raise_issues([marks.issue(("hierdp",), f"unsupported spec version {data['hierdp']!r}; "
                                               "this hierdp reads `hierdp: 1`")], fname)
    issues: list[Issue] = []
    data = _labels_as_text(data, marks, issues)
    issues += check_against_schema(data, load_schema(), marks)
    ctx = _Checker(data, marks, loaded.base_dir or Path.cwd(), issues, check_files)
    spec = ctx.run(fname)
    issues.sort(key=lambda i: (i.line if i.line is not None else 0, i.column or 0))
    raise_issues(issues, fname)
    assert spec is not None
    return spec


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
        issues.append(marks.issue(path, f"a label must be a string, got {value!r} ({_kind(value)}); quote it "
                                        f"(e.g. '{raw if raw is not None else value}') to keep it as written"))
    return value


def _labels_as_text(data: Any, marks: Marks, issues: list[Issue]) -> Any:
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
                                for src in [p for p in table if p[:len(kpath)] == kpath]:
                                    table.setdefault(here + ("per_parent", k2) + src[len(kpath):], table[src])
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
            here = ("cells", i, "domain")
            if isinstance(dom, list):
                cells[i] = dict(c, domain=fix_list(dom, here))
            elif isinstance(dom, dict) and "values" in dom:
                cells[i] = dict(c, domain=dict(dom, values=fix_list(dom["values"], here + ("values",))))
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


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(type(value),
                                                                                          type(value).__name__)


def _get(d: Any, key: str, typ: type | tuple = object, default: Any = None) -> Any:
    """``d[key]`` when ``d`` is a dict and the value has type ``typ`` (else ``default``)."""
    if isinstance(d, dict) and key in d and isinstance(d[key], typ) and not (
            typ in (int, float, (int, float)) and isinstance(d[key], bool)):
        return d[key]
    return default


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v) if math.isfinite(v) else None
    except OverflowError:  # an int beyond float64: the schema pass has said so
        return None


class _Checker:
    """The semantic pass; appends to ``issues`` and builds the normalised spec."""

    def __init__(self, data: dict, marks: Marks, base_dir: Path, issues: list[Issue], check_files: bool) -> None:
        self.data, self.marks, self.base_dir, self.issues = data, marks, base_dir, issues
        self.check_files = check_files
        self.warnings: list[str] = []
        self.header: list[str] | None = None  # source columns, when known

    def err(self, path: tuple, msg: str, prefer_key: bool = False) -> None:
        self.issues.append(self.marks.issue(path, msg, prefer_key=prefer_key))

    # ------------------------------------------------------------------ driver
    def run(self, fname: str | None) -> ReleaseSpec | None:
        d = self.data
        src = self.source()
        levels, root, paths, unknown = self.hierarchy()
        cells = self.cells(levels, root)
        priv = self.privacy()
        if isinstance(root, str) and isinstance(levels, list):
            self.check_invariants(priv, [root] + [lv.name for lv in levels if lv is not None])
        decomposition = self.decomposition()
        plan = self.plugin(("plan",), d.get("plan", "per_level"), "plan")
        per_level = (plan is None or plan[0] == "per_level") and "decomposition" not in d
        if per_level:
            mech = self.plugin(("mechanism",), d.get("mechanism", "discrete_laplace"), "mechanism")
            self.check_mechanism_unit(mech, priv)
        elif "decomposition" in d:  # the leaves plan, with the spec's mechanism
            mech = self.plugin(("mechanism",), d.get("mechanism", "discrete_laplace"), "mechanism")
            self.check_mechanism_unit(mech, priv)
        else:
            mech = None
            self.check_plan(plan, priv)
        default_chain = list(getattr(registry.get("plan", plan[0]), "default_postprocess", ("blue",))) \
            if plan is not None else ["blue"]
        pps_raw = d.get("postprocess", default_chain)
        pps = []
        if isinstance(pps_raw, list):
            for i, item in enumerate(pps_raw):
                pps.append(self.plugin(("postprocess", i), item, "postprocessor"))
            self.check_postprocess_order(pps)
        budget = self.budget(levels, root, priv, mech) if per_level else None
        output = self.output()
        evaluate = self.evaluate(priv)
        eps = priv.get("epsilon")
        if eps is not None and eps > _LARGE_EPSILON:
            self.warnings.append(f"privacy.epsilon = {eps:g} is unusually large (> {_LARGE_EPSILON:g}): "
                                 "the release protects individuals only weakly")
        if self.issues:
            return None
        spec = ReleaseSpec(
            data=d, filename=fname, base_dir=self.base_dir, source_files=src["files"], source_demo=src["demo"],
            source_format=src["format"], source_columns=src["columns"], count=src["count"],
            filters=src["filter"], root=root, levels=levels, paths=paths, unknown=unknown,
            unit=priv.get("unit"), max_contributions=priv.get("max_contributions"),
            epsilon=priv.get("epsilon"), delta=priv.get("delta"), rho=priv.get("rho"), budget=budget,
            mechanism=mech or ("discrete_laplace", {}), postprocess=[p for p in pps if p is not None],
            plan=plan if plan is not None and not per_level and "decomposition" not in d else None,
            decomposition=decomposition,
            output=output, evaluate=evaluate, seed=_get(d, "seed", int),
            description=_get(d, "description", str, ""), warnings=self.warnings,
            cells=cells, engine=src["engine"],
            neighbours=priv.get("neighbours", "add_remove"), invariants=list(priv.get("invariants", [])),
            allow_invariants_with_add_remove=bool(priv.get("allow_invariants_with_add_remove", False)),
        )
        self.check_outputs_spare_inputs(spec)
        return None if self.issues else spec

    def check_outputs_spare_inputs(self, spec: ReleaseSpec) -> None:
        """No output file (table, ledger, evaluation table and plot) may be an input file."""
        from hierdp.io import ledger_path_for

        inputs = set(spec.input_files())
        outs: list[tuple[tuple, Path]] = []
        o = spec.output or {}
        if o.get("path"):
            outs.append((("output", "path"), Path(o["path"])))
            led = o.get("ledger")
            outs.append((("output", "ledger") if led else ("output", "path"),
                         Path(led) if led else ledger_path_for(o["path"])))
        e = spec.evaluate or {}
        if e.get("output"):
            outs += [(("evaluate", "output"), Path(e["output"])),
                     (("evaluate", "output"), Path(e["output"]).with_suffix(".png"))]
        nul: set[tuple] = set()
        for where, out in outs:
            if "\x00" in str(out):  # pathlib would raise ValueError('embedded null byte')
                if where not in nul:
                    self.err(where, "the path holds a NUL character, which no file name can")
                nul.add(where)
                continue
            if out.resolve() in inputs:
                self.err(where, f"{str(out)!r} is one of this spec's input files; writing it would replace that "
                                "input; choose another output path")

    # ------------------------------------------------------------------ source
    def source(self) -> dict[str, Any]:
        s = self.data.get("source")
        out: dict[str, Any] = {"files": [], "demo": None, "format": "csv", "columns": None, "count": None,
                               "filter": [], "engine": "pandas"}
        if not isinstance(s, dict):
            return out
        out["engine"] = _get(s, "engine", str, "pandas")
        if out["engine"] == "dask":
            if "demo" in s:
                self.err(("source", "engine"), "engine: dask reads source files (source.path); a bundled demo is "
                                               "read in memory: remove `engine: dask`", prefer_key=True)
            problem = _dask_problem()
            if problem is not None:
                self.err(("source", "engine"), problem)
        path, demo = _get(s, "path", str), _get(s, "demo", str)
        out["columns"] = _get(s, "columns", list)
        out["count"] = _get(s, "count", str)
        out["filter"] = [f for f in _get(s, "filter", list, []) if isinstance(f, dict)
                         and isinstance(f.get("column"), str) and "op" in f and "value" in f]
        if "path" in s and "demo" in s:
            self.err(("source", "demo"), "give either source.path or source.demo, not both", prefer_key=True)
            return out
        if "path" not in s and "demo" not in s:
            self.err(("source",), "the source needs `path:` (a CSV/Parquet file or glob) or `demo:` "
                                  "(a bundled dataset, e.g. census)")
            return out
        for i, f in enumerate(_get(s, "filter", list, [])):
            if isinstance(f, dict) and f.get("op") in ("in", "not_in") and "value" in f \
                    and not isinstance(f["value"], list):
                self.err(("source", "filter", i, "value"), f"operator {f['op']!r} needs a list of values, "
                                                           f"got {_kind(f['value'])}; write value: [a, b]")
            elif isinstance(f, dict) and f.get("op") not in ("in", "not_in") and isinstance(f.get("value"),
                                                                                              (list, dict)):
                self.err(("source", "filter", i, "value"), f"operator {f.get('op')!r} compares with one value, "
                                                           f"got {_kind(f['value'])}; use op: in for a list")
        if demo is not None:
            from hierdp.data import DEMOS

            out["demo"] = demo
            if demo not in DEMOS:
                self.err(("source", "demo"), f"unknown demo dataset {demo!r}{did_you_mean(demo, DEMOS)}; "
                                             f"bundled: {', '.join(sorted(DEMOS))}")
                return out
            if self.check_files:
                self.header = _demo_columns(demo)
        elif path is not None:
            files = self.resolve_glob(path, ("source", "path"))
            out["files"] = files
            fmt = _get(s, "format", str)
            if fmt is None and files:
                fmts = {_format_of(f) for f in files}
                if None in fmts:
                    bad = next(f for f in files if _format_of(f) is None)
                    self.err(("source", "path"), f"cannot tell the format of {bad.name!r} from its extension; "
                                                 "add `format: csv` or `format: parquet`")
                    return out
                if len(fmts) > 1:
                    self.err(("source", "path"), "the glob matches both CSV and Parquet files; "
                                                 "narrow the pattern to one format")
                    return out
                fmt = fmts.pop()
            out["format"] = fmt or "csv"
            if self.check_files and files:
                self.header = self.read_header(files, out["format"], ("source", "path"))
        if self.header is not None:
            cols = set(self.header)
            for i, c in enumerate(out["columns"] or []):
                if isinstance(c, str) and c not in cols:
                    self.err(("source", "columns", i), self.missing_col(c))
            if out["count"] is not None and out["count"] not in cols:
                self.err(("source", "count"), self.missing_col(out["count"]))
            for i, f in enumerate(_get(s, "filter", list, [])):
                if isinstance(f, dict) and isinstance(f.get("column"), str) and f["column"] not in cols:
                    self.err(("source", "filter", i, "column"), self.missing_col(f["column"]))
        return out

    def missing_col(self, c: str) -> str:
        avail = self.header or []
        shown = ", ".join(repr(a) for a in avail[:12]) + (" ..." if len(avail) > 12 else "")
        return f"column {c!r} is not in the source{did_you_mean(c, avail)} (its columns: {shown})"

    def resolve(self, p: str) -> Path:
        q = Path(p).expanduser()
        return q if q.is_absolute() else self.base_dir / q

    def resolve_glob(self, p: str, path: tuple) -> list[Path]:
        full = self.resolve(p)
        if any(ch in p for ch in "*?["):
            files = sorted(Path(f) for f in glob.glob(str(full)) if Path(f).is_file())
            if not files:
                self.err(path, f"no file matches {p!r} (looked in {full.parent}); check the pattern")
            return files
        if not full.exists():
            self.err(path, f"file {p!r} does not exist (looked for {full}); check the path "
                           "(relative paths are relative to the spec's folder)")
            return []
        if full.is_dir():
            self.err(path, f"{p!r} is a folder; give a file or a glob such as '{p.rstrip('/')}/*.csv'")
            return []
        return [full]

    def read_header(self, files: list[Path], fmt: str, path: tuple) -> list[str] | None:
        """Column names only (CSV header row / Parquet schema); every file must have the first's columns."""

        headers = []
        for f in files:
            try:
                if fmt == "parquet":
                    try:
                        import pyarrow.parquet as pq
                    except ImportError:
                        self.err(path, "reading Parquet needs pyarrow: pip install 'hierdp[parquet]'")
                        return None
                    names = list(pq.read_schema(f).names)
                else:
                    names = csv_header(f)
            except DataError as exc:  # undecodable bytes, repeated names, empty file: the reader's message
                self.err(path, str(exc))
                return None
            except Exception as exc:  # unreadable/garbled file: report, do not crash
                self.err(path, f"cannot read the header of {f.name!r} as {fmt} ({type(exc).__name__}); "
                               "check the file and its format")
                return None
            headers.append(names)
        for f, h in zip(files[1:], headers[1:]):
            if set(h) != set(headers[0]):
                self.err(path, f"{f.name!r} has other columns than {files[0].name!r}; "
                               "all files of a glob need the same columns")
                return None
        return headers[0] if headers else None

    # --------------------------------------------------------------- hierarchy
    def hierarchy(self) -> tuple[list[LevelSpec], str, tuple | None, str]:
        h = self.data.get("hierarchy")
        root = _get(h, "root", str, "total")
        unknown = _get(h, "unknown", str, "raise")
        levels: list[LevelSpec] = []
        if not isinstance(h, dict):
            return levels, root, None, unknown
        paths = None
        p = _get(h, "paths", dict)
        if p is not None:
            if isinstance(p.get("file"), str):
                files = self.resolve_glob(p["file"], ("hierarchy", "paths", "file"))
                paths = ("file", files[0]) if files else None
            elif isinstance(p.get("demo"), str):
                from hierdp.data import DEMOS

                if p["demo"] not in DEMOS:
                    self.err(("hierarchy", "paths", "demo"), f"unknown demo geography {p['demo']!r}"
                                                             f"{did_you_mean(p['demo'], DEMOS)}; bundled: "
                                                             f"{', '.join(sorted(DEMOS))}")
                else:
                    paths = ("demo", p["demo"])
        raw = _get(h, "levels", list, [])
        names_seen: dict[str, int] = {}
        cols_seen: dict[str, int] = {}
        for i, lv in enumerate(raw):
            if not isinstance(lv, dict) or not isinstance(lv.get("name"), str):
                continue
            name = lv["name"]
            col = lv.get("column", name) if isinstance(lv.get("column", name), str) else name
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
            levels.append(LevelSpec(name=name, column=col, domain=dom, attribute=_get(lv, "attribute", str)))
        if paths is not None and paths[0] == "file" and self.check_files:
            hdr = self.read_header([paths[1]], "csv", ("hierarchy", "paths", "file"))
            if hdr is not None:
                for lv in levels:
                    if lv.domain == ("paths",) and lv.column not in hdr:
                        self.err(("hierarchy", "paths", "file"), f"the paths file has no column {lv.column!r}"
                                                                  f"{did_you_mean(lv.column, hdr)}; it needs one "
                                                                  "column per level")
        return levels, root, paths, unknown

    def domain(self, lv: dict, i: int, previous: list[LevelSpec], paths: tuple | None, col: str) -> Any:
        here = ("hierarchy", "levels", i)
        if "domain" not in lv:
            if paths is not None or _get(self.data.get("hierarchy"), "paths", dict) is not None:
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
            return ("list", dom) if _valid_list(dom) else None
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
            return ("list", dom[k]) if _valid_list(dom[k]) else None
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

    # ----------------------------------------------------------- decomposition
    def decomposition(self) -> tuple[str, dict[str, Any]] | None:
        """``decomposition: {name, params}``: a private spatial decomposition of coordinate
        columns instead of a declared hierarchy (released by the points front-end). Checks
        the columns against the source header, the bounds (finite, low < high, one pair per
        column), the method's keywords, and the sections that do not apply."""
        d = self.data
        if "decomposition" not in d:
            if "hierarchy" not in d:
                self.err((), "the spec says nothing about what to count: add `hierarchy:` (a declared tree of "
                              "categories) or `decomposition:` (a private spatial decomposition of coordinates)")
            return None
        here = ("decomposition",)
        if "hierarchy" in d:
            self.err(("hierarchy",), "give either hierarchy (declared categories) or decomposition (points), "
                                     "not both", prefer_key=True)
        for key, why in (("plan", "the leaves of a decomposition are measured by the plan 'leaves'"),
                         ("budget", "the split is decomposition.params.epsilon_share"),
                         ("evaluate", "evaluation of point releases is not supported in specs; use "
                                      "benchmarks/bench_privtree.py"),
                         ("cells", "a decomposition releases one count per region, not histograms")):
            if key in d:
                self.err((key,), f"`{key}` does not apply with a decomposition: {why}; remove it", prefer_key=True)
        p = d.get("privacy")
        if isinstance(p, dict):
            for key in ("delta", "rho"):
                if key in p:
                    self.err(("privacy", key), f"a decomposition release is pure ε-DP (its structure is): give "
                                               f"privacy.epsilon alone and remove {key}", prefer_key=True)
            seqs = isinstance(d["decomposition"], dict) and d["decomposition"].get("name") == "suffix_tree"
            for key in ("unit", "max_contributions"):
                if key in p and seqs:
                    self.err(("privacy", key), "for suffix_tree one row is one sequence is one privacy unit and "
                                               "decomposition.params.max_length bounds its contribution; remove "
                                               f"{key}", prefer_key=True)
                elif key in p:
                    self.err(("privacy", key), "rows are not grouped by unit for a decomposition: bound each "
                                               "unit to x rows beforehand and set decomposition.params."
                                               f"contributions: x (PrivTree); remove {key}", prefer_key=True)
        src = d.get("source")
        if isinstance(src, dict) and "count" in src:
            self.err(("source", "count"), "a decomposition counts rows (one point each); pre-aggregated counts "
                                          "are not supported: remove source.count", prefer_key=True)
        o = d.get("output")
        if isinstance(o, dict) and isinstance(o.get("columns"), list) and "ci" in o["columns"]:
            self.err(("output", "columns"), "intervals (`ci`) are not written for a decomposition; use estimate, "
                                            "std and noisy")
        dec = d["decomposition"]
        if not isinstance(dec, dict) or not isinstance(dec.get("params"), dict):
            return None  # the schema reported it
        name = dec.get("name")
        if name == "suffix_tree":
            return self.suffix_tree(dict(dec["params"]))
        if name not in ("privtree", "simpletree", "grid"):
            return None  # the schema reported it
        params = dict(dec["params"])
        cols, bounds = params.get("columns"), params.get("bounds")
        ok = True
        if not (isinstance(cols, list) and cols and all(isinstance(c, str) for c in cols)):
            return None  # the schema reported it
        if self.header is not None:
            for i, c in enumerate(cols):
                if c not in self.header:
                    ok = False
                    self.err(here + ("params", "columns", i), self.missing_col(c))
        if not isinstance(bounds, list):
            return None
        if len(bounds) != len(cols):
            self.err(here + ("params", "bounds"), f"{len(bounds)} bound pair(s) for {len(cols)} column(s); give "
                                                  "one [low, high] per column")
            return None
        for i, pair in enumerate(bounds):
            vals = [_num(v) for v in pair] if isinstance(pair, list) and len(pair) == 2 else [None]
            lo, hi = (vals + [None])[:2]
            if lo is None or hi is None:
                ok = False  # the schema reported the type or finiteness
            elif not lo < hi:
                ok = False
                self.err(here + ("params", "bounds", i), f"bounds of {cols[i]!r} must have low < high, got "
                                                         f"{pair}; the box is public: declare it, wider than the data")
        if not ok:
            return None
        cls = {"privtree": PrivTree, "simpletree": SimpleTree, "grid": UniformGrid}[name]
        own = [k for k in _init_params(cls) if k not in ("columns", "bounds")]
        extra = {k: v for k, v in params.items() if k not in ("columns", "bounds", "epsilon_share")}
        for k in extra:
            if k not in own:
                ok = False
                self.err(here + ("params", k), f"decomposition {name!r} has no parameter {k!r}"
                                               f"{did_you_mean(str(k), own + ['epsilon_share'])}; its parameters: "
                                               f"columns, bounds, epsilon_share, {', '.join(own)}", prefer_key=True)
        if ok:
            try:
                obj = cls(cols, bounds, **extra)
                if name == "privtree":
                    schedule(len(cols), obj.split, obj.max_depth)
                    obj.parameters(1.0, len(cols))  # theta, contributions
                elif name == "simpletree":
                    schedule(len(cols), obj.split, obj.height - 1)
            except HierDPError as exc:
                ok = False
                self.err(here + ("params",), f"bad parameters for decomposition {name!r}: {exc}")
            except (TypeError, ValueError) as exc:
                ok = False
                self.err(here + ("params",), f"bad parameters for decomposition {name!r}: {exc}")
        return (name, params) if ok else None

    def suffix_tree(self, params: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """``decomposition: {name: suffix_tree, params: {column, max_length, alphabet, ...}}``
        (PrivTree §4, sequences): the column against the source header, the keywords of
        :class:`~hierdp.decompositions.suffix_tree.SuffixTree`, and no ``postprocess`` (the
        histograms are chosen by ``params.histograms``)."""
        here = ("decomposition", "params")
        ok = True
        col = params.get("column")
        ml = params.get("max_length")
        if not isinstance(col, str) or isinstance(ml, bool) or not isinstance(ml, int) or ml < 1 \
                or "alphabet" not in params:
            return None  # the schema reported it
        if self.header is not None and col not in self.header:
            ok = False
            self.err(here + ("column",), self.missing_col(col))
        if "postprocess" in self.data:
            ok = False
            self.err(("postprocess",), "`postprocess` does not apply to suffix_tree: its histograms are made "
                                       "non-negative by decomposition.params.histograms (nonneg or clamp); remove it",
                     prefer_key=True)
        own = ["column", "max_length", "alphabet", "epsilon_share", "separator", "histograms", "theta", "max_depth"]
        for k in params:
            if k not in own:
                ok = False
                self.err(here + (k,), f"decomposition 'suffix_tree' has no parameter {k!r}"
                                      f"{did_you_mean(str(k), own)}; its parameters: {', '.join(own)}",
                         prefer_key=True)
        if ok:
            try:
                SuffixTree(alphabet=params["alphabet"], max_length=params["max_length"],
                           theta=params.get("theta", 0.0), max_depth=params.get("max_depth"), column=col)
            except (HierDPError, TypeError, ValueError) as exc:
                ok = False
                self.err(here, f"bad parameters for decomposition 'suffix_tree': {exc}")
        return ("suffix_tree", params) if ok else None

    # ------------------------------------------------------------------- cells
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
            return ("list", dom) if _valid_list(dom) else None
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
            return ("list", dom["values"]) if _valid_list(dom["values"]) else None
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

    # ----------------------------------------------------------------- privacy
    def privacy(self) -> dict[str, Any]:
        p = self.data.get("privacy")
        out: dict[str, Any] = {}
        if not isinstance(p, dict):
            return out
        eps, delta, rho = _num(p.get("epsilon")), p.get("delta"), _num(p.get("rho"))
        delta = delta if isinstance(delta, float) and 0 < delta < 1 else None
        if "epsilon" in p and "rho" in p:
            self.err(("privacy", "rho"), "give either privacy.epsilon (with optional delta) or privacy.rho, "
                                         "not both", prefer_key=True)
        elif "epsilon" not in p and "rho" not in p and not any(
                did_you_mean(str(k), ["epsilon", "rho"]) for k in p):
            self.err(("privacy",), "no privacy budget: add `epsilon: <number > 0>` (or `rho:` for zCDP mechanisms)")
        if "delta" in p and "epsilon" not in p:
            self.err(("privacy", "delta"), "delta only goes with epsilon ((ε, δ)-DP); add privacy.epsilon "
                                           "or remove delta", prefer_key=True)
        unit, mc = _get(p, "unit", str), _get(p, "max_contributions", int)
        src = self.data.get("source")
        problem = rules.unit_bound_problem(unit="unit" in p, max_contributions="max_contributions" in p,
                                           count=isinstance(src, dict) and "count" in src)
        if problem is not None:
            key = "max_contributions" if "max_contributions" in p and "unit" not in p else "unit"
            self.err(("privacy", key), problem, prefer_key=True)
        if unit is not None and self.header is not None and unit not in self.header:
            self.err(("privacy", "unit"), self.missing_col(unit))
        out.update(epsilon=eps, delta=delta if eps is not None else None, rho=rho if "epsilon" not in p else None,
                   unit=unit, max_contributions=mc)
        neighbours = p.get("neighbours", "add_remove")
        valid = rules.neighbours_problem(neighbours) is None  # the schema reports a bad value
        neighbours = neighbours if valid else "add_remove"
        allow = p.get("allow_invariants_with_add_remove", False) is True
        inv = p.get("invariants", [])
        invariants: list[Any] = []
        if isinstance(inv, list):
            for item in inv:
                invariants.append(tuple(item) if isinstance(item, list) else item)
        problem = rules.invariants_problem(neighbours, len(invariants), allow) if valid else None
        if problem is not None:
            self.err(("privacy", "invariants"), problem)
        out.update(neighbours=neighbours, invariants=invariants, allow_invariants_with_add_remove=allow)
        return out

    def check_invariants(self, priv: dict, level_names: list[str]) -> None:
        """Invariant level names must be levels of the hierarchy (label paths are checked at release)."""
        for i, item in enumerate(priv.get("invariants", [])):
            if isinstance(item, str) and item not in level_names:
                self.err(("privacy", "invariants", i), f"unknown level {item!r}{did_you_mean(item, level_names)}; "
                                                       f"expected one of {', '.join(map(repr, level_names))} "
                                                       "(or a label path such as [CA, Alameda])")

    # ----------------------------------------------------------------- plugins
    def plugin(self, path: tuple, ref: Any, kind: str, name_key: str = "name") -> tuple[str, dict[str, Any]] | None:
        """Resolve ``name`` or ``{name, params}`` through the registry and check the params."""

        if isinstance(ref, str):
            name, params, npath = ref, {}, path
        elif isinstance(ref, dict) and isinstance(ref.get(name_key), str):
            name, params, npath = ref[name_key], ref.get("params", {}), path + (name_key,)
            if not isinstance(params, dict):
                return None
        else:
            return None
        try:
            known = registry.names(kind)
        except HierDPError as exc:
            self.err(npath, f"cannot list the installed {kind}s: {exc}")
            return None
        if name not in known:
            self.err(npath, f"unknown {kind} {name!r}{did_you_mean(name, known)} (installed: "
                            f"{', '.join(known) or 'none'}; see `hierdp plugins`, a plugin package may be missing)")
            return None
        cls = registry.get(kind, name)
        self.check_params(cls, kind, name, params, path + ("params",))
        return name, dict(params)

    def check_plan(self, plan: tuple | None, priv: dict) -> None:
        """A plan other than ``per_level`` takes its parameters in ``plan.params``, and its
        budget unit decides which privacy totals it accepts (rules.mechanism_unit_problem)."""
        if plan is None:
            return
        for key in ("mechanism", "budget"):
            if key in self.data:
                self.err((key,), f"`{key}` is a parameter of the plan 'per_level'; plan {plan[0]!r} takes its "
                                 "parameters in plan.params", prefer_key=True)
        try:
            unit = registry.create("plan", plan[0], **plan[1]).budget_unit
        except HierDPError:
            return  # bad parameters were reported by check_params
        p = self.data.get("privacy", {})
        path = ("plan",) if isinstance(self.data.get("plan"), str) else ("plan", "name")
        problem = rules.mechanism_unit_problem(unit, plan[0], epsilon="epsilon" in p, delta="delta" in p,
                                               rho="rho" in p, kind="plan")
        if problem is not None:
            self.err(path, problem)

    def check_postprocess_order(self, pps: list) -> None:
        """A post-processor that needs a consistent input must follow a consistent one."""
        if any(ref is None for ref in pps):
            return  # an unknown name was reported already
        classes = [registry.get("postprocessor", ref[0]) for ref in pps]
        for i, message in rules.chain_order_problems(classes):
            self.err(("postprocess", i), message)

    def check_params(self, cls: type, kind: str, name: str, params: dict, path: tuple) -> None:
        schema = getattr(cls, "params_schema", None)
        if isinstance(schema, dict):
            for issue in check_against_schema(params, schema, self.marks, path):
                self.issues.append(Issue(issue.path, f"{kind} {name!r}: {issue.message}", issue.line, issue.column))
            return
        if not params:
            return
        named = _init_params(cls)
        if _takes_no_params(cls):
            for k in params:
                self.err(path + (k,), f"{kind} {name!r} takes no parameters; remove `{k}`", prefer_key=True)
            return
        # no declared schema: construct the plugin with the spec's parameters (public values only)
        trial = {k: (None if k == "prior" and isinstance(v, dict) else v) for k, v in params.items()}
        try:
            cls(**trial)
        except TypeError as exc:
            bad = [k for k in params if named and k not in named]
            if bad:
                for k in bad:
                    self.err(path + (k,), f"{kind} {name!r} has no parameter {k!r}{did_you_mean(str(k), named)}; "
                                          f"its parameters: {', '.join(named)}", prefer_key=True)
            else:
                self.err(path, f"bad parameters for {kind} {name!r}: {exc}")
        except Exception as exc:  # a plugin's own check (HierDPError, ValueError, ...)
            text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else (str(exc) or repr(exc))
            self.err(path, f"bad parameters for {kind} {name!r}: {text.splitlines()[0] if text else repr(exc)}")

    def check_mechanism_unit(self, mech: tuple | None, priv: dict) -> None:

        if mech is None or not priv:
            return
        p_raw = self.data.get("privacy", {})
        if "epsilon" in p_raw and "rho" in p_raw:
            return  # already reported: give one of them
        unit = getattr(registry.get("mechanism", mech[0]), "budget_unit", "epsilon")
        p = self.data.get("privacy", {})
        path = ("mechanism",) if isinstance(self.data.get("mechanism"), str) else ("mechanism", "name")
        problem = rules.mechanism_unit_problem(unit, mech[0], epsilon="epsilon" in p, delta="delta" in p,
                                               rho="rho" in p)
        if problem is not None:
            self.err(path, problem)

    # ------------------------------------------------------------------ budget
    def budget(self, levels: list[LevelSpec], root: str, priv: dict, mech: tuple | None = None) -> Any:
        b = self.data.get("budget", "equal")
        names = [root] + [lv.name for lv in levels]
        total = priv.get("rho") if priv.get("rho") is not None else priv.get("epsilon")
        problem = None if mech is None or priv.get("delta") is None else rules.rho_per_level_problem(
            _mechanism_unit(mech), rho_given=priv.get("rho") is not None,
            per_level=isinstance(b, dict) and "per_level" in b)
        if problem is not None:
            self.err(("budget", "per_level"), problem, prefer_key=True)
            return None
        if isinstance(b, str):
            r = self.plugin(("budget",), b, "budget")
            self.warn_oracle(b)
            return r[0] if r else None
        if not isinstance(b, dict):
            return None
        if "strategy" in b and "per_level" in b:
            self.err(("budget", "per_level"), "give either budget.strategy or budget.per_level, not both",
                     prefer_key=True)
            return None
        if "params" in b and "strategy" not in b:
            self.err(("budget", "params"), "budget.params needs budget.strategy; remove params or name a strategy",
                     prefer_key=True)
            return None
        if isinstance(b.get("strategy"), str):
            r = self.plugin(("budget",), b, "budget", name_key="strategy")
            prior = b.get("params", {}).get("prior") if isinstance(b.get("params"), dict) else None
            if isinstance(prior, dict):
                self.check_prior(prior, names)
            elif prior is not None:
                self.err(("budget", "params", "prior"), f"in a spec the prior is a table: give {{file: <csv>, "
                                                        f"column: estimate}}, got {_kind(prior)}")
            self.warn_oracle(b["strategy"])
            return {"strategy": r[0], "params": r[1]} if r else None
        per = _get(b, "per_level", dict)
        if per is None:
            return None
        ok = True
        for k, v in per.items():
            if k not in names:
                ok = False
                self.err(("budget", "per_level", k), f"{k!r} is not a level{did_you_mean(str(k), names)}; "
                                                     f"levels: {', '.join(names)}", prefer_key=True)
            if _num(v) is None or v < 0:
                ok = False
        if ok and total is not None:
            s = math.fsum(float(v) for v in per.values())
            unit = "rho" if priv.get("rho") is not None else "epsilon"
            problem = rules.budget_sum_problem(s, total, key=f"privacy.{unit}")
            if problem is not None:
                self.err(("budget", "per_level"), problem)
        return {"per_level": dict(per)}

    def check_prior(self, prior: dict, names: list[str]) -> None:
        """``budget.params.prior: {file, column}``: a public table of node values (e.g. an earlier release)."""
        here = ("budget", "params", "prior")
        extra = [k for k in prior if k not in ("file", "column")]
        for k in extra:
            self.err(here + (k,), f"unknown key {k!r}{did_you_mean(str(k), ['file', 'column'])} "
                                  "(valid keys here: file, column)", prefer_key=True)
        if not isinstance(prior.get("file"), str):
            self.err(here, "the prior needs `file:` (a CSV with the level columns and a value column, "
                           "e.g. the output of an earlier release)")
            return
        if "column" in prior and not isinstance(prior["column"], str):
            self.err(here + ("column",), f"must be a string, got {_kind(prior['column'])}")
            return
        if any(ch in prior["file"] for ch in "*?["):
            self.err(here + ("file",), f"the prior is one file; give its name, not a pattern ({prior['file']!r})")
            return
        files = self.resolve_glob(prior["file"], here + ("file",))
        if files and self.check_files:
            hdr = self.read_header(files[:1], "csv", here + ("file",))
            if hdr is not None:
                need = names[1:] + [prior.get("column", "estimate")]
                for c in need:
                    if c not in hdr:
                        self.err(here + ("file",), f"the prior file has no column {c!r}{did_you_mean(c, hdr)}; "
                                                   f"it needs the level columns and the value column")

    def warn_oracle(self, name: str) -> None:

        try:
            cls = registry.get("budget", name)
        except HierDPError:
            return
        if getattr(cls, "reads_true_counts", False):
            self.warnings.append(f"budget strategy {name!r} reads the TRUE counts: the release is not "
                                 "differentially private and the ledger says so (evaluation only)")

    # ------------------------------------------------------------------ output
    def output(self) -> dict[str, Any] | None:
        o = self.data.get("output")
        if not isinstance(o, dict):
            return None
        out = {"path": _get(o, "path", str), "format": _get(o, "format", str),
               "columns": _get(o, "columns", list, ["estimate", "std"]), "ci_level": _get(o, "ci_level", float, 0.95),
               "ledger": _get(o, "ledger", str)}
        if out["path"] is not None and out["format"] is None:
            fmt = _format_of(Path(out["path"]))
            if fmt is None or Path(out["path"]).suffix.lower() in (".txt", ".tsv"):
                self.err(("output", "path"), f"cannot tell the output format from {out['path']!r}; end it in "
                                             ".csv or .parquet, or add `format:`")
            out["format"] = fmt
        if out["format"] == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                self.err(("output", "format"), "writing Parquet needs pyarrow: pip install 'hierdp[parquet]'")
        if out["path"] is not None and out["ledger"] is not None \
                and Path(out["ledger"]).resolve() == Path(out["path"]).resolve():
            self.err(("output", "ledger"), "output.ledger is the same file as output.path: the ledger would be "
                                           "overwritten by the table; give it its own name, or drop it for "
                                           "the default <name>.ledger.json")
        if "ci_level" in o and "ci" not in out["columns"]:
            self.warnings.append("output.ci_level is set but output.columns has no 'ci'; no interval is written")
        return out

    # ---------------------------------------------------------------- evaluate
    def evaluate(self, priv: dict) -> dict[str, Any] | None:
        e = self.data.get("evaluate")
        if not isinstance(e, dict):
            return None
        metrics = []
        for i, m in enumerate(_get(e, "metrics", list, [])):
            r = self.plugin(("evaluate", "metrics", i), m, "metric")
            if r:
                metrics.append(r)
        if "epsilons" in e and priv.get("rho") is not None:
            self.err(("evaluate", "epsilons"), "evaluate.epsilons sweeps ε, but this spec is budgeted in rho; "
                                               "remove epsilons", prefer_key=True)
        return {"metrics": metrics, "repetitions": _get(e, "repetitions", int, 10),
                "epsilons": _get(e, "epsilons", list), "output": _get(e, "output", str)}


def _dask_problem() -> str | None:
    """Why ``engine: dask`` cannot run here (dask.dataframe missing), else None."""
    try:
        import dask.dataframe  # noqa: F401
    except ImportError:
        return ("engine: dask needs the optional package dask (dask.dataframe); install it with: "
                "pip install 'hierdp[dask]' (or remove `engine: dask` to read the source with pandas)")
    return None


def _demo_columns(name: str) -> list[str]:
    """Column names of a bundled demo dataset (its header row only)."""

    from importlib import resources

    from hierdp.data import demo_path

    with resources.as_file(demo_path(name)) as path:
        return csv_header(path)


def _valid_list(values: Any) -> bool:
    """A domain list the schema accepts: non-empty, scalar items, no duplicates."""
    if not isinstance(values, list) or not values:
        return False
    if not all(isinstance(v, (str, int, bool)) and not isinstance(v, float) for v in values):
        return False
    return len({(type(v), v) for v in values}) == len(values)


def _init_params(cls: type) -> list[str]:
    """Keyword parameter names accepted along the ``__init__`` chain of ``cls``."""
    names: list[str] = []
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            ps = list(inspect.signature(init).parameters.values())[1:]
        except (TypeError, ValueError):
            continue
        names += [p.name for p in ps if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names]
    return names


def _takes_no_params(cls: type) -> bool:
    """True when ``cls.__init__`` is a kind's base ``__init__`` that rejects every parameter."""
    from hierdp.budgets.base import BudgetStrategy
    from hierdp.mechanisms.base import Mechanism
    from hierdp.postprocessors.base import PostProcessor

    return cls.__init__ in (Mechanism.__init__, PostProcessor.__init__, BudgetStrategy.__init__)


def _format_of(p: Path) -> str | None:
    name = p.name.lower()
    for ext in sorted(KNOWN_EXTENSIONS, key=len, reverse=True):
        if name.endswith(ext):
            return KNOWN_EXTENSIONS[ext]
    return None


def _mechanism_unit(mech: tuple) -> str:

    return getattr(registry.get("mechanism", mech[0]), "budget_unit", "epsilon")
