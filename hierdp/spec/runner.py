"""Running a validated spec: read the source, build the public tree, release, write.

The private source is read only here, after the spec has validated, and only the
columns the release needs. Public inputs (domain files, public paths, the demo
geography) are read in full.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import sys
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hierdp import subtrees
from hierdp.accounting import PrivacyLoss
from hierdp.data import demo_geography, load_demo, resolve_spec
from hierdp.errors import DataError, HierarchyError, MissingDependencyError, NonPrivateWarning, SpecError, warn
from hierdp.evaluation import evaluate
from hierdp.execution.dask import local_client
from hierdp.execution.folders import charged, kept_counts
from hierdp.frontends.base import door_rng, dptree
from hierdp.frontends.dataset import CountedDataset, DatasetDPTree
from hierdp.frontends.points import release_points
from hierdp.frontends.sequences import release_sequences
from hierdp.io import _writer, atomic_write_all, format_for, is_url, ledger_path_for, write_release, write_text
from hierdp.io.readers import csv_header, read_table, read_text_lines
from hierdp.outofcore import COUNTS, check_dataset_folders, check_dataset_target, counts_folder, release_to_dataset
from hierdp.report import render as render_report
from hierdp.spec.loader import LoadedSpec, Marks, load_file, load_text
from hierdp.spec.validate import ReleaseSpec, raise_issues, validate
from hierdp.tree import geoid_frame

__all__ = ["load_spec", "run_spec", "release_dataset_spec", "source_identity", "prepare", "release_frame",
           "release_points_spec", "write_outputs",
           "write_release_files",
           "evaluate_spec"]


# ------------------------------------------------------------------------ loading
def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, Mapping):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def load_spec(spec: Any, **overrides: Any) -> ReleaseSpec:
    """Load and validate ``spec`` (path, YAML text, dict or :class:`ReleaseSpec`).

    ``overrides`` are spec sections deep-merged over the file's before validation, e.g.
    ``privacy={"epsilon": 2.0}``; ``output="x.csv"`` sets ``output.path`` and ``seed=3``
    sets the seed.
    """
    if isinstance(spec, ReleaseSpec) and not overrides:
        return spec
    if isinstance(spec, ReleaseSpec):
        loaded = LoadedSpec(spec.data, Marks(), spec.filename, spec.base_dir)
    elif isinstance(spec, dict):
        loaded = LoadedSpec(copy.deepcopy(spec), Marks(), None, Path.cwd())
    elif isinstance(spec, (str, Path)) and ("\n" in str(spec) or str(spec).lstrip().startswith("hierdp:")):
        loaded = load_text(str(spec), None, Path.cwd())
    elif isinstance(spec, (str, Path)):

        loaded = load_file(resolve_spec(spec) if isinstance(spec, str) else spec)
    else:
        raise SpecError(f"cannot read a spec from {type(spec).__name__}; give a path, YAML text or a dict")
    raise_issues(loaded.issues, loaded.filename)
    if overrides and isinstance(loaded.data, dict):
        over = dict(overrides)
        if isinstance(over.get("output"), (str, Path)):
            over["output"] = {"path": str(over["output"])}
        if over.get("seed", 0) is None:
            over.pop("seed")
        loaded.data = _merge(loaded.data, over)
    return validate(loaded)


# ------------------------------------------------------------------------ progress
class _Steps:
    """A progress bar over the named steps of a run (tqdm on stderr), silent when disabled."""

    def __init__(self, names: list[str], enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # progress is a nicety
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=len(names), file=sys.stderr, unit="step", leave=False, disable=None,
                                bar_format="{desc:<28}{bar:20} {n_fmt}/{total_fmt} [{elapsed}]")

    @contextmanager
    def step(self, name: str):
        if self.bar is not None:
            self.bar.set_description_str(name)
        yield
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------- reading the data
def _to_str_list(values: Any) -> list[str]:
    return [str(v) for v in values]


def _public_table(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A public CSV (domain or paths file), every column a label (hierdp.io.readers rules)."""

    return read_table(path, "csv", columns=columns, label_columns=csv_header(path) if columns is None else columns)


def _paths_frame(spec: ReleaseSpec) -> pd.DataFrame | None:
    if spec.paths is None:
        return None
    kind, ref = spec.paths
    if kind == "geoid":  # the levels are the codes' prefixes (hierdp.tree.geoid_frame: one line per problem)
        path, col, lengths = ref
        try:
            return geoid_frame(_public_table(path, [col])[col].tolist(), lengths).astype("string")
        except HierarchyError as exc:
            raise SpecError(f"hierarchy.geoid: {exc}") from None
    if kind == "demo":

        frame = demo_geography(ref)
    else:
        frame = _public_table(ref)
    # a level's paths carry the levels above it too (the door places each level under its parent),
    # so the frame holds every level down to the deepest one declared by the paths
    last = max((i for i, lv in enumerate(spec.levels) if lv.domain == ("paths",)), default=-1)
    cols = {lv.column: lv.name for lv in spec.levels[:last + 1]}
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise SpecError(f"hierarchy.paths: the public paths have no column {missing[0]!r}; add it")
    return frame[list(cols)].rename(columns=cols).astype("string")


def _domains(spec: ReleaseSpec) -> dict[str, Any]:
    """dptree ``domains=`` from the spec's level declarations (reads public files only)."""
    out: dict[str, Any] = {}
    paths = _paths_frame(spec)
    for i, lv in enumerate(spec.levels):
        dom = lv.domain
        kind = dom[0]
        if kind == "observed":
            out[lv.name] = "observed"
        elif kind == "list":
            out[lv.name] = _to_str_list(dom[1])
        elif kind == "per_parent":
            out[lv.name] = {str(k): _to_str_list(v) for k, v in dom[1].items()}
        elif kind == "paths":
            out[lv.name] = paths
        elif kind == "file":
            _, path, col, parent_col = dom
            if col is None:  # .txt: one value per line
                out[lv.name] = read_text_lines(path)
                continue
            table = _public_table(path)
            above = [p.column for p in spec.levels[:i]]
            if parent_col is not None and all(c in table.columns for c in above):
                ren = {p.column: p.name for p in spec.levels[:i]}
                ren[col] = lv.name
                out[lv.name] = table[above + [col]].rename(columns=ren)
            elif parent_col is not None:
                grouped = table.groupby(parent_col, sort=False)[col]
                out[lv.name] = {str(k): list(pd.unique(v.to_numpy())) for k, v in grouped}
            else:
                out[lv.name] = list(pd.unique(table[col].to_numpy()))
        else:  # pragma: no cover - validation rejects anything else
            raise SpecError(f"level {lv.name!r}: unsupported domain {dom!r}")
    return out


def _apply_filters(df: pd.DataFrame, filters: list[dict[str, Any]]) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for f in filters:
        col = df[f["column"]]
        val = f["value"]
        if pd.api.types.is_string_dtype(col):
            val = [str(v) for v in val] if isinstance(val, list) else str(val)
        op = f["op"]
        if op in ("<", "<=", ">", ">=") and not pd.api.types.is_numeric_dtype(col):
            # an order on labels compares numbers when the column parses as numbers ("010" >= 9);
            # never text order, where "10" < "9"
            num = pd.to_numeric(col, errors="coerce")
            if bool((num.isna() & col.notna()).any()):
                raise DataError(f"source.filter: op {op!r} on column {f['column']!r} compares numbers, but the "
                                "column holds values that are not numbers; use op: in with the values to keep")
            fval = val if isinstance(val, (int, float)) and not isinstance(val, bool) else pd.to_numeric(
                pd.Series([val]), errors="coerce").iloc[0]
            if pd.isna(fval):
                raise DataError(f"source.filter: op {op!r} on column {f['column']!r} needs a number, got {val!r}")
            col, val = num, fval
        try:
            if op == "in":
                m = col.isin(val)
            elif op == "not_in":
                m = ~col.isin(val)
            else:
                m = {"==": col.__eq__, "!=": col.__ne__, "<": col.__lt__, "<=": col.__le__,
                     ">": col.__gt__, ">=": col.__ge__}[op](val)
        except TypeError:
            raise DataError(f"source.filter: cannot compare column {f['column']!r} ({col.dtype}) with {val!r}; "
                            "give a value of the column's type") from None
        mask &= np.asarray(m.fillna(False), dtype=bool)
    return df.loc[mask].reset_index(drop=True)


def _cells(spec: ReleaseSpec) -> dict[str, Any] | None:
    """The ``cells=`` argument of ``.dptree``: {cell name: public values (declared order) or "observed"}."""
    if not spec.cells:
        return None
    out: dict[str, Any] = {}
    for c in spec.cells:
        kind = c.domain[0]
        if kind == "observed":
            out[c.name] = "observed"
        elif kind == "list":
            out[c.name] = _to_str_list(c.domain[1])
        elif c.domain[2] is None:  # .txt: one value per line
            out[c.name] = read_text_lines(c.domain[1])
        else:
            table = _public_table(c.domain[1], [c.domain[2]])
            out[c.name] = [str(v) for v in pd.unique(table[c.domain[2]].dropna().to_numpy())]
    return out


def _renames(spec: ReleaseSpec) -> dict[str, str]:
    """Source column -> level or cell name, where they differ."""
    pairs = [(lv.column, lv.name) for lv in spec.levels] + [(c.column, c.name) for c in spec.cells]
    return {col: name for col, name in pairs if col != name}


def _read_source_dask(spec: ReleaseSpec) -> Any:
    """The source files as a lazy Dask DataFrame under the :mod:`hierdp.io.readers` rules (the
    empty cell the only missing value, label columns as strings), filtered per partition."""
    try:
        import dask.dataframe as dd

        import hierdp.frontends.dask  # noqa: F401  (registers ddf.dptree)
    except ImportError:
        raise MissingDependencyError("dask", "dask") from None
    cols = spec.needed_columns()
    str_cols = spec.label_columns
    files = [str(f) for f in spec.source_files]
    if spec.source_format == "parquet":
        ddf = dd.read_parquet(files, columns=cols)
    else:
        # a gzip file cannot be split into blocks: one partition per file
        blocks = {"blocksize": None} if any(f.lower().endswith(".gz") for f in files) else {}
        # every column as text, the non-label ones (count, filters) made numbers per partition
        # as pandas infers them per file: Dask would guess a type from the first rows and
        # fail further on at a '1.5' or an empty cell
        ddf = dd.read_csv(files, usecols=cols, dtype="string", keep_default_na=False, na_values=[""],
                          index_col=False, encoding="utf-8-sig", **blocks)
        ddf = ddf[cols]
        other = [c for c in cols if c not in str_cols]
        if other:
            meta = ddf._meta.astype({c: "float64" if c == spec.count else "object" for c in other})
            ddf = ddf.map_partitions(_as_numbers, other, meta=meta)
    for c in str_cols:
        if not isinstance(ddf[c].dtype, pd.StringDtype):
            ddf[c] = ddf[c].astype("string")
    if spec.filters:
        ddf = ddf.map_partitions(_apply_filters, spec.filters, meta=ddf._meta)
    return ddf.rename(columns=_renames(spec))


def _read_source_polars(spec: ReleaseSpec) -> Any:
    """The source files as a Polars LazyFrame (``scan_parquet`` / ``scan_csv``; counted by
    the streaming engine) under the :mod:`hierdp.io.readers` rules: label columns (levels,
    cells, the privacy unit) as text, the empty cell the only missing value, the other
    columns as numbers where the file's values are."""
    try:
        import polars as pl

        import hierdp.frontends.polars  # noqa: F401  (registers .dptree on Polars frames)
    except ImportError:
        raise MissingDependencyError("polars", "polars") from None
    cols = spec.needed_columns()
    str_cols = spec.label_columns
    files = [str(f) for f in spec.source_files]
    if spec.source_format == "parquet":
        lf = pl.scan_parquet(files).select(cols)
    else:
        text = {c: pl.String for c in str_cols}
        if any(f.lower().endswith(".gz") for f in files):  # scan_csv reads no compressed file
            lf = pl.concat([pl.read_csv(f, columns=cols, schema_overrides=text, infer_schema_length=None).lazy()
                            for f in files], how="vertical_relaxed")
        else:
            lf = pl.scan_csv(files, schema_overrides=text, infer_schema_length=None).select(cols)
    lf = lf.with_columns(pl.col(c).cast(pl.String) for c in str_cols)
    return lf.rename(_renames(spec))


def _read_source_spark(spec: ReleaseSpec) -> Any:
    """The source files as a Spark DataFrame (the active session, or a local[2] one on the
    loopback address) under the :mod:`hierdp.io.readers` rules where Spark allows: label
    columns as text, the count column as numbers (CSV: every column read as text, the
    empty cell missing), filtered per Arrow batch with the pandas filters."""
    from hierdp.frontends.spark import local_session

    spark = local_session()
    cols = spec.needed_columns()
    files = [str(f) for f in spec.source_files]
    if spec.source_format == "parquet":
        sdf = spark.read.parquet(*files)
    else:
        sdf = spark.read.csv(files, header=True, inferSchema=False, encoding="UTF-8")
    missing = [c for c in cols if c not in sdf.columns]
    if missing:
        raise DataError(f"{files[0]}: no column {missing[0]!r}; it has: {', '.join(sdf.columns)}")
    sdf = sdf.select(*cols)
    for c in spec.label_columns:
        sdf = sdf.withColumn(c, sdf[c].cast("string"))
    if spec.count is not None and spec.source_format != "parquet":
        sdf = sdf.withColumn(spec.count, sdf[spec.count].cast("double"))
    if spec.filters:
        filters = spec.filters

        def keep(batches: Any) -> Any:
            for b in batches:
                yield _apply_filters(b, filters)

        sdf = sdf.mapInPandas(keep, sdf.schema)
    for old_name, new_name in _renames(spec).items():
        sdf = sdf.withColumnRenamed(old_name, new_name)
    return sdf


def _as_numbers(part: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """A CSV partition's ``columns`` (read as text) as numbers where every value is one, as
    pandas infers a file's columns (integers stay exact integers; an empty cell is missing);
    a column with other text stays text (the count check refuses it, filters compare text)."""
    out = {}
    for c in columns:
        try:
            out[c] = pd.to_numeric(part[c])
        except (TypeError, ValueError):
            pass
    return part.assign(**out) if out else part


@contextmanager
def _source_errors(spec: ReleaseSpec):
    """Errors raised while Dask parses the source files (on a worker, at compute time) as the
    one-line DataError of :mod:`hierdp.io.readers`, naming the source."""
    if spec.engine != "dask":
        yield
        return
    where = ", ".join(str(f) for f in spec.source_files[:3]) + (" ..." if len(spec.source_files) > 3 else "")
    try:
        yield
    except UnicodeDecodeError:
        raise DataError(f"{where}: bytes that are not UTF-8 text; save the files as UTF-8") from None
    except pd.errors.ParserError as exc:
        raise DataError(f"{where}: not a readable CSV ({' '.join(str(exc).split())}); check the files") from None
    except ValueError as exc:
        if "Mismatched dtypes" not in str(exc):
            raise
        raise DataError(f"{where}: a column holds numbers in the first rows and other values further on (Dask "
                        "infers a column's type from the first rows); make the column one kind of value, or read "
                        "the source with engine: pandas") from None


def read_source(spec: ReleaseSpec) -> Any:
    """The private records (only the needed columns), filtered, with level and cell columns
    renamed to their names: a pandas DataFrame, a lazy Dask DataFrame with ``engine: dask``, or a
    Polars LazyFrame with ``engine: polars``."""
    if spec.engine == "dask":
        return _read_source_dask(spec)
    if spec.engine == "polars":
        return _read_source_polars(spec)
    if spec.engine == "spark":
        return _read_source_spark(spec)
    if spec.engine == "duckdb":  # the dataset door reads the files itself, out of core
        return list(spec.source_files)
    cols = spec.needed_columns()
    str_cols = spec.label_columns
    if spec.source_demo is not None:

        df = load_demo(spec.source_demo)
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise DataError(f"demo {spec.source_demo!r} has no column {missing[0]!r}")
        df = df[cols]
    else:
        df = read_table(spec.source_files, spec.source_format, columns=cols, label_columns=str_cols)
    for c in str_cols:
        if not pd.api.types.is_string_dtype(df[c]):
            df[c] = df[c].astype("string")
    df = _apply_filters(df, spec.filters)
    if spec.geoid is not None:  # each level's column: the code's prefix of its length
        _, col, lengths = spec.geoid
        df = df.assign(**{name: df[col].str.slice(0, n) for name, n in lengths.items()})
    return df.rename(columns=_renames(spec))


def prepare(spec: ReleaseSpec, data: Any = None):
    """The :class:`~hierdp.frontends.pandas.DPTree` of a spec (a ``DaskDPTree`` with
    ``engine: dask``, a :class:`~hierdp.frontends.dataset.DatasetDPTree` with ``engine:
    duckdb``; ``data`` replaces reading the source)."""
    df = read_source(spec) if data is None else data
    if spec.engine == "duckdb" and isinstance(df, list):
        # label columns as text, as the pandas engine reads them (hierdp.io.readers rules)
        prefixes = None if spec.geoid is None else {name: (spec.geoid[1], n) for name, n in spec.geoid[2].items()}
        return DatasetDPTree(df, [lv.name for lv in spec.levels], _domains(spec), count=spec.count,
                             unit=spec.unit, max_contributions=spec.max_contributions, unknown=spec.unknown,
                             root=spec.root, cells=_cells(spec), format=spec.source_format, labels_as_text=True,
                             prefixes=prefixes)
    if spec.engine == "spark":  # a Spark DataFrame has no accessor: the functional door
        return dptree(df, levels=[lv.name for lv in spec.levels], domains=_domains(spec), count=spec.count,
                      unit=spec.unit, max_contributions=spec.max_contributions, unknown=spec.unknown,
                      root=spec.root, cells=_cells(spec))
    with _source_errors(spec):
        return df.dptree(levels=[lv.name for lv in spec.levels], domains=_domains(spec), count=spec.count,
                         unit=spec.unit, max_contributions=spec.max_contributions, unknown=spec.unknown,
                         root=spec.root, cells=_cells(spec))


# ------------------------------------------------------------------------- release
def _budget_arg(spec: ReleaseSpec, dpt: Any) -> Any:
    b = spec.budget
    if isinstance(b, dict) and "per_level" in b:
        return dict(b["per_level"])
    if isinstance(b, dict) and "strategy" in b:
        params = dict(b["params"])
        if isinstance(params.get("prior"), dict):
            params["prior"] = load_prior(spec, dpt.tree, params["prior"])
        return {"strategy": b["strategy"], "params": params}
    return b


def load_prior(spec: ReleaseSpec, tree: Any, ref: Mapping[str, Any]) -> np.ndarray:
    """Node values (external order) from a public prior table: ``{file: path, column: name}``.

    The table has the hierarchy columns (named like the levels, ``<NA>`` below a node's
    level, as a release's output has) and a value column (default ``estimate``); nodes
    missing from the table get 0. A previous release's output is a valid prior; with the
    spec's cell columns (a histogram release's output) each node's value is its total
    over the cells.
    """
    if not isinstance(ref.get("file"), str):
        raise SpecError("budget.params.prior needs `file:` (a CSV of node values, e.g. an earlier release)")
    path = Path(ref["file"])
    path = path if path.is_absolute() else spec.base_dir / path
    if not path.is_file():
        raise SpecError(f"budget.params.prior.file: file {ref['file']!r} does not exist (looked for {path})")
    column = ref.get("column", "estimate")
    names = [lv.name for lv in spec.levels]
    table = read_table(path, "csv", label_columns=names)
    missing = [c for c in names + [column] if c not in table.columns]
    if missing:
        raise SpecError(f"budget.params.prior.file: {path.name!r} has no column {missing[0]!r}; "
                        f"it needs the level columns {names} and {column!r}")
    values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
    bad = int(np.sum(np.isnan(values) & table[column].notna().to_numpy()))
    if bad:
        raise SpecError(f"budget.params.prior.file: {path.name!r} has {bad} value(s) in column {column!r} that "
                        "are not numbers; fix them or leave them empty")
    cell_cols = [c.name for c in spec.cells if c.name in table.columns]
    if cell_cols:  # a histogram release's output: the prior is each node's total over its cells
        summed = pd.DataFrame({"v": values}).groupby([table[n] for n in names], dropna=False, sort=False)["v"]
        totals = summed.sum(min_count=1)
        table = totals.index.to_frame(index=False)
        values = totals.to_numpy(dtype=float)
    # join on the label paths (missing below a node's level on both sides), one vectorised
    # merge: the nodes' paths in the tree's internal order, as label_columns gives them
    cols = tree.label_columns()
    nodes = pd.DataFrame({n: pd.Series(cols[n], dtype=object) for n in names})
    nodes = nodes.where(nodes.notna(), None)
    nodes["__node__"] = np.arange(tree.n_nodes)
    rows = table[names].astype(object)
    rows = rows.where(rows.notna(), None)
    if rows.duplicated().any():
        raise SpecError(f"budget.params.prior.file: {path.name!r} lists a node more than once; keep one row per node")
    rows["__value__"] = values
    hit = nodes.merge(rows, on=names, how="inner")
    node = hit["__node__"].to_numpy()
    if tree.n_nodes > 1 and not np.any(node != 0):
        raise SpecError(f"budget.params.prior.file: no row of {path.name!r} matches a node below the root; its level "
                        f"columns {names} must hold this tree's labels (as an earlier release's output does)")
    internal = np.zeros(tree.n_nodes)
    v = hit["__value__"].to_numpy(dtype=float)
    finite = np.isfinite(v)
    internal[node[finite]] = v[finite]
    return tree.to_external(internal)


def _how(spec: ReleaseSpec, dpt: Any) -> dict[str, Any]:
    """The spec's plan, or its mechanism and budget, as release keywords."""
    if spec.plan is not None:
        return {"plan": {"name": spec.plan[0], "params": dict(spec.plan[1])}}
    return {"mechanism": {"name": spec.mechanism[0], "params": dict(spec.mechanism[1])},
            "budget": _budget_arg(spec, dpt)}


def _release(spec: ReleaseSpec, dpt: Any, seed: int | None, epsilon: float | None = None):
    how = _how(spec, dpt)
    eps = spec.epsilon if epsilon is None else epsilon
    loss: dict[str, Any] = {"epsilon": eps, "delta": spec.delta, "rho": spec.rho if epsilon is None else None}
    if spec.accountant != "tight" and eps is not None and spec.delta is not None:  # privacy.accountant
        loss = {"epsilon": PrivacyLoss(epsilon=eps, delta=spec.delta, accountant=spec.accountant)}
    return dpt.release(
        **loss,
        postprocess=[{"name": n, "params": dict(p)} for n, p in spec.postprocess],
        seed=seed, **how, **_privacy_relation(spec), **({"split": spec.split} if spec.split is not None else {}),
    )


def release_points_spec(spec: ReleaseSpec, df: pd.DataFrame, seed: int | None) -> Any:
    """Release a spec's ``decomposition`` (PrivTree, SimpleTree or the grid) on the source
    rows through the points front-end; returns the :class:`~hierdp.frontends.points.PointsResult`
    (``suffix_tree``: :func:`release_sequences_spec`)."""

    name, params = spec.decomposition
    if name == "suffix_tree":
        return release_sequences_spec(spec, df, seed)
    params = dict(params)
    cols, bounds = params.pop("columns"), params.pop("bounds")
    share = params.pop("epsilon_share", None)
    notes = [spec.description] if spec.description else []
    return release_points(df, cols, bounds, epsilon=spec.epsilon, method=name, structure_share=share, seed=seed,
                          mechanism={"name": spec.mechanism[0], "params": dict(spec.mechanism[1])},
                          postprocess=[{"name": n, "params": dict(p)} for n, p in spec.postprocess],
                          notes=notes, **params)


def release_sequences_spec(spec: ReleaseSpec, df: pd.DataFrame, seed: int | None) -> Any:
    """Release a spec's ``decomposition: {name: suffix_tree, ...}``: a private prediction
    suffix tree over the sequences in ``params.column`` (one row = one sequence; split into
    symbols at ``params.separator``, else one character per symbol; an empty cell is an
    empty sequence) through :func:`~hierdp.frontends.sequences.release_sequences`."""

    if spec.decomposition is None:
        raise SpecError("this spec has no `decomposition:`; release it with run_spec")
    params = dict(spec.decomposition[1])
    col, sep = params.pop("column"), params.pop("separator", None)
    values = df[col].astype(object).where(df[col].notna(), "")
    if not all(isinstance(v, str) for v in values):
        raise DataError(f"column {col!r} must hold text (one sequence per row); read it as strings")
    seqs = values.str.split(sep).map(lambda s: [x for x in s if x != ""]) if sep is not None else values
    alphabet = params.pop("alphabet")
    notes = [spec.description] if spec.description else []
    return release_sequences(pd.DataFrame({col: seqs}), col, epsilon=spec.epsilon, max_length=params.pop("max_length"),
                             alphabet=alphabet if alphabet == "observed" else list(alphabet),
                             structure_share=params.pop("epsilon_share", None),
                             mechanism={"name": spec.mechanism[0], "params": dict(spec.mechanism[1])},
                             seed=seed, notes=notes, **params)


def _privacy_relation(spec: ReleaseSpec) -> dict[str, Any]:
    """privacy.neighbours and privacy.invariants as release keywords (only when set)."""
    out: dict[str, Any] = {}
    if spec.neighbours != "add_remove":
        out["neighbours"] = spec.neighbours
    if spec.invariants:
        out["invariants"] = list(spec.invariants)
        if spec.allow_invariants_with_add_remove:
            out["allow_invariants_with_add_remove"] = True
        if spec.invariants_cover is not None:
            out["invariants_cover"] = spec.invariants_cover
    return out


def release_frame(spec: ReleaseSpec, result: Any) -> pd.DataFrame:
    """The output table of a release: level and hierarchy columns plus the requested value
    columns (a decomposition: one row per region, its bounds per column, depth and leaf flag)."""
    out = spec.output or {}
    want = list(out.get("columns") or ["estimate", "std"])
    if spec.decomposition is not None:
        frame = result.to_frame(noisy="noisy" in want)
        keep = [c for c in frame.columns if c not in ("estimate", "std", "noisy")] + \
            [c for c in want if c in ("estimate", "std", "noisy") and c in frame.columns]  # suffix_tree: no std
        sep = spec.decomposition[1].get("separator") if spec.decomposition[0] == "suffix_tree" else None
        if sep is not None:  # contexts of symbol lists, written as the source writes a sequence
            frame = frame.assign(context=frame["context"].map(sep.join))
        table = frame[keep].copy()
        if not result.ledger.for_publication:
            table["status"] = "NOT FOR PUBLICATION: " + "; ".join(result.ledger.not_for_publication_reasons())
        return table
    level = float(out.get("ci_level") or 0.95) if "ci" in want else None
    # with intervals, ``std`` is the one they come with (the bootstrap RMSE after nonneg/round)
    frame = result.to_frame(noisy="noisy" in want, confidence=level)
    keep = [c for c in frame.columns if c not in ("estimate", "std", "noisy", "ci_low", "ci_high", "ci_method")]
    for c in want:
        if c in ("estimate", "std", "noisy"):
            keep.append(c)
    if "ci" in want:  # exact / simulated / bootstrap quantiles of the public noise law (hierdp.uncertainty)
        keep += ["ci_low", "ci_high", "ci_method"]
    table = frame[keep].copy()
    table.attrs = dict(frame.attrs)
    if not result.ledger.for_publication:
        # a seeded (or non-private) release must say so in every copy of its table, not only the ledger
        table["status"] = "NOT FOR PUBLICATION: " + "; ".join(result.ledger.not_for_publication_reasons())
    return table


def write_outputs(spec: ReleaseSpec, result: Any, path: str | Path | None = None) -> tuple[Path, ...]:
    """Write the table, the ledger and, when ``output.report`` names one, the report (as one
    unit, atomically); returns their paths."""

    out = spec.output or {}
    dest = path if path is not None else out.get("path")
    if dest is None:
        raise SpecError("no output path: set output.path in the spec or pass -o/--output")
    fmt = out.get("format") if path is None else None
    ledger = out.get("ledger") if path is None else None
    report = out.get("report")
    check_output_paths(spec, [Path(dest), Path(ledger) if ledger else ledger_path_for(dest)]
                       + ([Path(report)] if report else []))
    result.meta.setdefault("spec", spec)  # the report hashes the spec's public files
    return write_release_files(release_frame(spec, result), result, dest, fmt=fmt, ledger_path=ledger,
                               report_path=report)


def write_release_files(frame: pd.DataFrame, result: Any, dest: str | Path, *, fmt: str | None = None,
                        ledger_path: str | Path | None = None,
                        report_path: str | Path | None = None) -> tuple[Path, ...]:
    """The table ``frame``, ``result``'s ledger and, with ``report_path``, its report
    (:func:`hierdp.report.render`). Local files land as one unit (:func:`hierdp.io.atomic_write_all`:
    the ledger, the report, then the table; a failure leaves every file as it was); with a
    URL table the report, a local file, is written atomically once the table and ledger are."""
    ledger_json = result.ledger.to_json()
    if report_path is None:
        return write_release(frame, ledger_json, dest, fmt=fmt, ledger_path=ledger_path)
    text = render_report(report_path, result.ledger, result)
    if is_url(dest) or is_url(ledger_path or ""):
        written = write_release(frame, ledger_json, dest, fmt=fmt, ledger_path=ledger_path)
        return (*written, write_text(report_path, text))
    table = Path(dest)
    lpath = Path(ledger_path) if ledger_path is not None else ledger_path_for(table)
    rpath = Path(report_path)
    if len({table.resolve(), lpath.resolve(), rpath.resolve()}) < 3:
        raise DataError(f"the table {str(table)!r}, its ledger {str(lpath)!r} and its report {str(rpath)!r} must be "
                        "three different files; give each its own name")
    fmt = format_for(table, fmt)
    atomic_write_all([(lpath, lambda tmp: tmp.write_text(ledger_json, encoding="utf-8")),
                      (rpath, lambda tmp: tmp.write_text(text, encoding="utf-8")),
                      (table, _writer(frame, fmt, gzip=table.name.lower().endswith(".gz"), ledger_json=ledger_json))])
    return table, lpath, rpath


def check_output_paths(spec: ReleaseSpec, outputs: list[Path]) -> None:
    """Refuse, before anything is released, output paths that would destroy an input of the
    spec or that lie inside a file (one-line SpecErrors)."""
    _refuse_overwriting_inputs(spec, outputs)
    for dest in outputs:
        for parent in Path(dest).absolute().parents:
            if parent.exists() and not parent.is_dir():
                raise SpecError(f"the output {str(dest)!r} is inside {str(parent)!r}, which is a file, not a "
                                "folder; choose another output path")


def _refuse_overwriting_inputs(spec: ReleaseSpec, outputs: list[Path]) -> None:
    """An output path that is one of the spec's inputs (the private source, a domain file,
    the prior, the spec) would destroy it: a one-line SpecError instead."""
    inputs = set(spec.input_files())
    for out in outputs:
        if out.resolve() in inputs:
            raise SpecError(f"the output {str(out)!r} is one of this spec's input files; writing it would replace "
                            "that input; choose another output path")


def run_spec(spec: Any, *, seed: int | None = None, output: str | Path | None = None, write: bool = True,
             progress: bool = False, **overrides: Any):
    """Validate and run a release spec; returns the :class:`~hierdp.result.ReleaseResult`.

    Parameters
    ----------
    spec : path of a YAML spec, YAML text, a dict, or a validated ``ReleaseSpec``.
    seed : fixed seed (tests only; the ledger marks the release not for publication).
    output : output path overriding ``output.path``; the ledger goes beside it.
    write : write the output files (when the spec or ``output`` names a path).
    progress : show a progress bar on stderr.
    overrides : spec sections deep-merged over the file's (e.g. ``privacy={"epsilon": 2}``).

    >>> import hierdp
    >>> r = hierdp.run_spec("specs/demo.yaml", seed=1, write=False)  # doctest: +SKIP
    """
    if seed is not None:
        overrides["seed"] = seed
    rs = load_spec(spec, **overrides)
    steps = _Steps(["read", "tree", "release", "write"], progress)
    try:
        with steps.step("reading the source"):
            df = read_source(rs)
        if rs.decomposition is not None:  # the structure is private: chosen and measured in one step
            with steps.step("decomposing and measuring"):
                result = release_points_spec(rs, df, rs.seed)
        else:
            with steps.step("building the public tree"):
                dpt = prepare(rs, df)
            with steps.step("measuring and post-processing"), _source_errors(rs):
                result = _release(rs, dpt, rs.seed)
        with steps.step("writing"):
            dest = output if output is not None else (rs.output or {}).get("path")
            if write and dest is not None:
                written = write_outputs(rs, result, output)
                result.meta["written"] = [str(p) for p in written]
    finally:
        steps.close()
    result.meta["spec"] = rs
    return result


# ------------------------------------------------------------------------ out of core
#: files up to this size are hashed whole for :func:`source_identity`; larger ones by samples
_HASH_WHOLE = 64 * 2**20
#: a larger file's samples: its first and last MiB, the Parquet footer, and this many blocks between
_SAMPLES, _SAMPLE = 64, 64 * 2**10


def _content_digest(path: Path) -> str:
    """SHA-256 of a file's content: all of it up to :data:`_HASH_WHOLE` bytes, else its first and
    last MiB, its Parquet footer (whole: the row groups' offsets and statistics) and
    :data:`_SAMPLES` blocks spread evenly between (6 MiB and the footer, whatever the size)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= _HASH_WHOLE:
            for block in iter(lambda: fh.read(2**20), b""):
                h.update(block)
            return h.hexdigest()
        spots = [(0, 2**20), (size - 2**20, 2**20)]
        fh.seek(size - 8)
        tail = fh.read(8)
        footer = int.from_bytes(tail[:4], "little")
        if tail[4:] == b"PAR1" and footer + 8 <= size:
            spots.append((size - 8 - min(footer, _HASH_WHOLE), min(footer, _HASH_WHOLE)))
        spots += [(int(i * (size - _SAMPLE) / (_SAMPLES + 1)), _SAMPLE) for i in range(1, _SAMPLES + 1)]
        for at, n in spots:
            fh.seek(at)
            h.update(fh.read(n))
    return h.hexdigest()


def source_identity(spec: ReleaseSpec) -> str:
    """The input's identity for a resumable release: the spec's text and every file it reads
    (resolved name, size, modification time and a digest of the content:
    :func:`_content_digest`), or the bundled demo's name. The digest catches a file changed in
    place with its size and time kept (whole for files up to 64 MiB; by samples beyond)."""
    parts = [f"demo:{spec.source_demo}"] if spec.source_demo is not None else []
    for f in sorted(set(spec.input_files())):
        try:
            st = f.stat()
            parts.append(f"{f}:{st.st_size}:{st.st_mtime_ns}:{_content_digest(f)}")
        except OSError:
            parts.append(f"{f}:missing")
    return "\n".join(parts)


def default_workdir(out: str | Path) -> Path:
    """The work folder beside the dataset ``out/``: ``out.work/``."""
    p = Path(out)
    if p.name in ("", ".", ".."):  # "-o ./": the folder's own name
        p = p.resolve()
    return p.with_name(p.name + ".work")


def dataset_workdir(spec: ReleaseSpec, out: str | Path) -> Path | None:
    """The work folder of the spec's dataset release into ``out/``: ``execution.workdir``,
    else ``out.work/`` beside it; ``None`` on Spark (``execution.engine: spark`` has none)."""
    ex = spec.execution or {"workdir": None}
    if ex.get("engine") == "spark":
        return None
    return Path(ex["workdir"] if ex.get("workdir") is not None else default_workdir(out))


def _input_folders(spec: ReleaseSpec) -> list[Path]:
    """The folders a spec's source reads whole: a folder of parts (every file at any depth),
    or the fixed start of a ``**`` glob."""
    path = (spec.data.get("source") or {}).get("path") if isinstance(spec.data, dict) else None
    if not isinstance(path, str):
        return []
    q = Path(path) if Path(path).is_absolute() else spec.base_dir / path
    if "**" in path:
        fixed = q.parts[:next(i for i, part in enumerate(q.parts) if any(c in part for c in "*?["))]
        return [Path(*fixed)] if fixed else []
    return [q] if q.is_dir() else []


def check_dataset_release(spec: ReleaseSpec, out: str | Path, *, resume: bool = False) -> None:
    """The refusals of a dataset release made before its data are read or counted: the work
    folder (and the folder of true counts beside it) outside the dataset folder, the dataset
    folder apart from the spec's inputs, no other release in it, and an unfinished release
    continued only with ``resume`` (:func:`hierdp.outofcore.check_dataset_target`)."""
    workdir = dataset_workdir(spec, out)
    private = [workdir.with_name(workdir.name + ".counts")] if workdir is not None else []
    check_dataset_folders(out, workdir=workdir, private=list(private), inputs=list(spec.input_files()),
                          input_folders=list(_input_folders(spec)))
    check_dataset_target(out, workdir=workdir, resume=resume)


def release_dataset_spec(spec: Any, out: str | Path, *, resume: bool = False, progress: bool = False,
                         seed: int | None = None, stream: Any = None) -> Any:
    """Run a release spec out of core into the Parquet dataset ``out/``
    (:func:`hierdp.outofcore.release_to_dataset`; the spec's ``execution:`` gives the split,
    the workers and the work folder, by default ``out.work/`` beside it). With ``source.engine:
    duckdb`` the source files are counted once on DuckDB into a private counts file in a new
    owner-only folder inside the work folder (removed when the run ends) and each task reads
    only its own leaves (:meth:`hierdp.frontends.dataset.DatasetDPTree.counted`); with
    ``engine: pandas`` the source is read and counted in memory as today, then handed to
    the runner task by task. ``plan: marginals`` and ``per_level`` both run by subtree.
    With ``engine: dask`` each task is counted on the cluster
    (:meth:`hierdp.frontends.dask.DaskDPTree.counted_on`; the process's distributed client,
    else a local cluster of ``workers`` processes). ``execution.engine: dask`` runs the
    subtree tasks as Dask tasks (the distributed client this process already has, else a
    local cluster of ``workers`` processes); ``local`` (the default) on ``workers`` threads.
    Returns the :class:`~hierdp.accounting.ledger.Ledger`."""
    rs = load_spec(spec, **({"seed": seed} if seed is not None else {}))
    if rs.decomposition is not None or rs.engine not in ("pandas", "duckdb", "polars", "dask", "spark"):
        raise SpecError("a dataset output (-o DIR/) runs a release on a declared hierarchy read with pandas, "
                        "polars, dask, spark or duckdb; remove the decomposition, or write one table (-o FILE)")
    if resume and rs.unit is not None and rs.seed is None:
        raise SpecError("a release that bounds contributions per unit (privacy.unit) draws its sample of rows "
                        "afresh on every run, so it cannot be resumed: run it again with an empty work folder")
    ex = rs.execution or {"split": rs.split if rs.split is not None else "auto", "workers": 2, "workdir": None}
    check_dataset_release(rs, out, resume=resume)  # before the data are read and counted
    if ex.get("engine") == "spark":  # the subtree tasks on the Spark executors (no work folder: no resume)
        from hierdp.frontends.spark import release_to_dataset as spark_release_to_dataset

        if resume:
            raise SpecError("execution.engine: spark has no work folder to resume; run the release again")
        dpt = prepare(rs)
        return spark_release_to_dataset(
            dpt, out, split=ex["split"], epsilon=rs.epsilon, delta=rs.delta, rho=rs.rho,
            postprocess=[{"name": n, "params": dict(p)} for n, p in rs.postprocess], seed=rs.seed,
            **_how(rs, dpt), **_privacy_relation(rs))
    source_id = source_identity(rs)
    dpt = prepare(rs)
    how = _how(rs, dpt)
    counted = rs.engine in ("duckdb", "dask")
    with _source_errors(rs):
        values, keywords = dpt.release_inputs(
            epsilon=rs.epsilon, delta=rs.delta, rho=rs.rho,
            postprocess=[{"name": n, "params": dict(p)} for n, p in rs.postprocess], seed=rs.seed,
            values=not counted, **how, **_privacy_relation(rs))
    for k in ("split", "session"):
        keywords.pop(k, None)
    tree = dpt.tree
    n_cells = int(dpt.n_cells)
    workdir = Path(ex["workdir"] if ex["workdir"] is not None else default_workdir(out))
    args = dict(workdir=workdir, split=ex["split"], n_cells=n_cells, cells=dict(dpt.cells) if dpt.cells else None,
                source_id=source_id, workers=ex["workers"], resume=resume, progress=progress, stream=stream)
    if rs.engine == "dask":  # counted per task on the cluster; the tasks on Dask, or here on threads
        with local_client(ex["workers"]) as client, _source_errors(rs):
            part = subtrees.partition(tree, ex["split"], n_cells=n_cells)  # the one release_to_dataset cuts
            data = dpt.counted_on(client, part, rng=door_rng(rs.seed, 97))
            keywords["private_notes"] = {**dict(keywords.get("private_notes") or {}), **dict(data.notes)}
            if ex.get("engine", "local") == "dask":
                return release_to_dataset(tree, data.counts_of, out, executor=client, **args, **keywords)
            return release_to_dataset(tree, lambda task: data.counts_of(task).result(), out, **args, **keywords)
    if not counted:
        internal = tree.to_internal(values).reshape(tree.n_nodes, n_cells)
        return _release_to_dataset(ex, tree, lambda task: internal[task.nodes], out, args, keywords)
    # true counts on disk: in a new owner-only folder inside the (private) work folder, never
    # in a folder found there. A run that stops once its release has charged its budget keeps
    # them for --resume (as the release key: the work folder is as sensitive as the data),
    # which reads them instead of counting again; any other end removes them.
    source = hashlib.sha256(repr(source_id).encode()).hexdigest()
    counts_dir = kept_counts(workdir, source) if resume else None
    done = False
    try:
        if counts_dir is not None:
            data = CountedDataset.reopen(counts_dir, tree)
            if progress:
                (stream or sys.stderr).write(f"resuming with the counts of the interrupted run ({counts_dir.name})\n")
        else:
            counts_dir = counts_folder(workdir)
            if progress:
                (stream or sys.stderr).write("counting the records\n")
            with _source_errors(rs):
                data = dpt.counted(counts_dir, rng=door_rng(rs.seed, 97), source=source, progress=progress)
        keywords["private_notes"] = {**dict(keywords.get("private_notes") or {}), **dict(data.notes)}
        ledger = _release_to_dataset(ex, tree, data.counts_of, out, args, keywords)
        done = True
    finally:
        if counts_dir is not None and (done or not charged(workdir)):
            shutil.rmtree(counts_dir, ignore_errors=True)
    for stale in workdir.glob(COUNTS + "*"):  # complete: the counts of killed runs go too
        shutil.rmtree(stale, ignore_errors=True)
    return ledger


def _release_to_dataset(ex: Mapping[str, Any], tree: Any, counts_of: Any, out: str | Path, args: dict[str, Any],
                        keywords: dict[str, Any]) -> Any:
    """:func:`release_to_dataset` on ``workers`` threads, or its tasks on the spec's executor
    (``dask``: this process's distributed client, or a new local cluster; a registered name)."""
    engine = ex.get("engine", "local")
    return release_to_dataset(tree, counts_of, out, executor=None if engine == "local" else engine, **args, **keywords)


# ------------------------------------------------------------------------ evaluate
def evaluate_spec(spec: Any, *, repetitions: int | None = None, seed: int | None = None,
                  output: str | Path | None = None, write: bool = True, progress: bool = False,
                  **overrides: Any) -> pd.DataFrame:
    """NON-PRIVATE: run the spec's ``evaluate`` section and return the table of errors.

    The spec's release (mechanism, budget, post-processing) is one configuration of
    :func:`hierdp.evaluate`, repeated ``repetitions`` times at each ε of
    ``evaluate.epsilons`` (default: the privacy section's total) and scored with every
    metric against the *true* counts, per level where the metric has a breakdown. The
    columns are those of :data:`hierdp.evaluation.COLUMNS`. When written, the table goes to
    CSV and a plot of error against ε to a PNG beside it.
    """

    rs = load_spec(spec, **overrides)
    if rs.evaluate is None:
        raise SpecError("the spec has no `evaluate:` section; add one with `metrics: [...]`")
    ev = rs.evaluate
    reps = int(repetitions or ev["repetitions"])
    base_seed = seed if seed is not None else rs.seed
    warn("evaluation reads the TRUE counts: its results are not differentially private; "
         "do not publish them", NonPrivateWarning)
    dpt = prepare(rs)
    config: dict[str, Any] = {
        "mechanism": {"name": rs.mechanism[0], "params": dict(rs.mechanism[1])},
        "budget": _budget_arg(rs, dpt),
        "postprocess": [{"name": n, "params": dict(p)} for n, p in rs.postprocess],
    }
    grid = [float(e) for e in (ev.get("epsilons") or [rs.total])]
    if rs.rho is not None:
        config["rho"] = grid
    else:
        config["epsilon"] = grid
        if rs.delta is not None:
            config["delta"] = rs.delta
    name = Path(rs.filename).stem if rs.filename else "spec"
    table = evaluate(dpt, {name: config}, repetitions=reps, metrics=[(n, dict(p)) for n, p in ev["metrics"]],
                     by_level=True, seed=base_seed, progress=progress)
    dest = output if output is not None else ev.get("output")
    if write and dest is not None:

        plot_path = Path(dest).with_suffix(".png")
        _refuse_overwriting_inputs(rs, [Path(dest), plot_path])
        # both or neither: the table and its plot are staged, then moved into place together
        atomic_write_all([(dest, _writer(table, "csv", gzip=str(dest).lower().endswith(".gz"))),
                          (plot_path, _plot_writer(table))])
        table.attrs["written"] = [str(dest), str(plot_path)]
    return table


def _plot_writer(table: pd.DataFrame) -> Any:
    """A writer of the error-against-ε figure (:func:`hierdp.plot.error_vs_epsilon`), one
    panel per metric, as PNG."""
    from hierdp.plot import _axes, error_vs_epsilon

    def write(tmp: Path) -> None:
        metrics = list(dict.fromkeys(table["metric"]))
        fig = _axes(None, (6.0, 4.0 * len(metrics))).figure
        fig.clear()
        for i, m in enumerate(metrics, start=1):
            error_vs_epsilon(table, m, ax=fig.add_subplot(len(metrics), 1, i),
                             title=f"{m}  [NON-PRIVATE: true counts]")
        fig.savefig(tmp, format="png", dpi=100)

    return write
