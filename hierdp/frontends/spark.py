"""The Spark DataFrame front-end: ``hierdp.dptree(spark_df, levels=..., domains=...)``.

Records that live in Spark, counted where they live. Same arguments and errors as the
pandas ``df.dptree`` (``levels``, ``domains``, ``cells``, ``count``, ``unit``,
``max_contributions``, ``unknown``, ``root``). Only the DataFrame API that Spark Connect
supports is used (``groupBy().applyInPandas``, ``mapInPandas``, SQL functions; no RDDs,
no ``SparkContext``, no broadcast variables): the public structure travels to the
executors inside the tasks' closures. What runs where:

* executors — contribution bounding (``groupBy(bucket).applyInPandas``: the rows are
  grouped into buckets by a hash of ``unit``, as many as the session's
  ``spark.sql.shuffle.partitions``, so every unit's rows meet in one pandas frame,
  which keeps ``c`` rows per unit chosen uniformly with a random source created inside
  the task: secure by default), the domain checks (a missing or out-of-domain value in any
  partition gives the pandas error, word for word: the tasks report the kinds of problem,
  the driver merges them as pandas finds them over all rows) and the aggregation of the
  rows to ``(leaf-cell key, count)`` pairs, summed by key in Spark;
* driver — the public structure (built from the declared domains; ``"observed"`` computes
  only the distinct level paths / cell labels on the executors), the (leaves x cells)
  counts, the noise and the post-processing: the one release path of every door.

No randomness is drawn on the executors. With contribution bounding the driver draws the
bounding key from the release's random source (secure by default) and hands it to the
tasks; which rows a unit keeps is a function of that key and of the rows' content, not of
their order or partitioning (:mod:`hierdp.frontends._contributions`), so a seeded release
is identical to the pandas door's with and without bounding, and a rerun task keeps the
same rows.

Sessions are the caller's; :func:`local_session` builds a local one (bound to the
loopback address) and says in one line when Java is missing. :func:`release_to_dataset`
runs a split release's subtree tasks on the executors (``groupBy(task).applyInPandas``)
into a Parquet dataset in the layout of :func:`hierdp.outofcore.release_to_dataset`.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.decompositions.declared import Declared
from hierdp.errors import DataError, HierDPError, MissingDependencyError
from hierdp.execution.driver import StageContext, measure_task, pass_down_task, settle_split, solve_top
from hierdp.execution.folders import claim_dataset_folder, need_pyarrow, unlock
from hierdp.execution.stages import SplitStages, split_setup, top_task
from hierdp.execution.steps import account, build_ledger, check, noise_key, open_account, reserve
from hierdp.execution.stores import CarriedStore
from hierdp.frontends._cells import check_columns, domain_error, resolve_cells
from hierdp.frontends._contributions import bounded_rows, bounding_key, content_hash
from hierdp.frontends.base import door_rng, register_door, releases_of
from hierdp.frontends.counting import (
    DROPPED_BY_BOUND,
    DROPPED_OUT_OF_DOMAIN,
    check_counts,
    counted_rows,
    dropped_notes,
    leaf_counts_to_nodes,
    place_cells,
    total_problem,
)
from hierdp.frontends.tree_door import TreeDoor
from hierdp.outofcore import DatasetSink
from hierdp.rng import make_rng

__all__ = ["SparkDPTree", "JavaNotFoundError", "local_session", "require_pyspark", "is_spark_frame",
           "release_to_dataset", "merge_problems"]

#: PySpark 4 warns on every pandas conversion that it "does not yet fully support pandas >=
#: 3.0.0". This door is tested under pandas 3 (tests/test_spark.py, in CI): once it is
#: imported, that one message from PySpark's own modules is not shown (nothing else is
#: filtered; ``warnings.resetwarnings()`` brings it back)
PANDAS3_WARNING = r"PySpark does not yet fully support pandas >= 3"
warnings.filterwarnings("ignore", message=PANDAS3_WARNING, category=FutureWarning, module=r"pyspark(\.|$)")

#: reserved keys of the per-task result (real keys are >= 0)
_DROPPED_BY_BOUND, _DROPPED_OUT_OF_DOMAIN = DROPPED_BY_BOUND, DROPPED_OUT_OF_DOMAIN
#: errors found in a task, by the stage of the pandas door that finds them (its order)
_ERR_UNIT, _ERR_COUNT, _ERR_PLACE, _ERR_DOMAIN, _ERR_TOTAL = -3, -4, -5, -6, -7
_STAGES = (_ERR_UNIT, _ERR_COUNT, _ERR_PLACE, _ERR_DOMAIN, _ERR_TOTAL)
_RESULT_SCHEMA = "key long, w long, err string"
_BUCKET = "__hierdp_bucket__"
#: the number of records of a (path, cell) row after Spark's own group-by (no unit, no count)
_ROWS = "__hierdp_rows__"


class JavaNotFoundError(HierDPError, RuntimeError):
    """Spark needs a Java runtime and none was found (the message says where it looked)."""


def require_pyspark() -> Any:
    """``pyspark.sql`` or one line naming the extra: ``pip install 'hierdp[spark]'``."""
    try:
        import pyspark.sql
    except ImportError:
        raise MissingDependencyError("pyspark", "spark") from None
    return pyspark.sql


def _java_problem() -> str | None:
    """Where Spark's launcher looks for ``java`` (``$JAVA_HOME/bin/java``, else ``java``
    on the ``PATH``), and why it is not there; ``None`` when it is."""
    home = os.environ.get("JAVA_HOME")
    if home:
        exe = os.path.join(home, "bin", "java")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return None
        return f"JAVA_HOME={home} has no bin/java"
    if shutil.which("java") is None:
        return "no java on the PATH and JAVA_HOME is not set"
    return None


def _java_error(why: str) -> JavaNotFoundError:
    return JavaNotFoundError(f"Spark needs a Java runtime (17 or later) and {why}: install one (e.g. apt-get install "
                             "openjdk-17-jre-headless) and set JAVA_HOME to it, or put its java on the PATH")


def local_session(master: str = "local[2]", *, shuffle_partitions: int = 8,
                  conf: Mapping[str, str] | None = None) -> Any:
    """The active Spark session, or a new local one bound to the loopback address.

    A new session runs ``master`` with ``spark.driver.host=127.0.0.1`` (and
    ``SPARK_LOCAL_IP=127.0.0.1`` unless set: by default Spark picks the machine's network
    interface), no web UI and ``shuffle_partitions`` shuffle partitions.

    Parameters
    ----------
    master : str, default "local[2]"
        The Spark master of a new session.
    shuffle_partitions : int, default 8
        ``spark.sql.shuffle.partitions`` of a new session.
    conf : mapping, optional
        More configuration of a new session.

    Returns
    -------
    pyspark.sql.SparkSession

    Raises
    ------
    MissingDependencyError
        pyspark is not installed (``pip install 'hierdp[spark]'``).
    JavaNotFoundError
        No Java runtime where Spark looks for one.
    """
    sql = require_pyspark()
    active = sql.SparkSession.getActiveSession()
    if active is not None:
        return active
    why = _java_problem()
    if why is not None:
        raise _java_error(why)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (sql.SparkSession.builder.master(master).appName("hierdp")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # the launcher failed: the JVM did not start
        if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway" in str(exc):
            raise _java_error("its launcher could not start it (JAVA_GATEWAY_EXITED)") from None
        raise


def is_spark_frame(data: Any) -> bool:
    """Whether ``data`` is a Spark DataFrame (classic or Spark Connect), without importing pyspark."""
    if "pyspark" not in sys.modules:
        return False
    try:
        from pyspark.sql import DataFrame
    except ImportError:  # pragma: no cover - a broken install
        return False
    if isinstance(data, DataFrame):  # the parent of classic and Connect DataFrames (Spark >= 4)
        return True
    connect = sys.modules.get("pyspark.sql.connect.dataframe")  # only if the user's code loaded it
    return connect is not None and isinstance(data, connect.DataFrame)


# ---------------------------------------------------------------------------- tasks (executors)
def _error_rows(stage: int, messages: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({"key": np.full(len(messages), stage, np.int64), "w": np.zeros(len(messages), np.int64),
                         "err": pd.Series(list(messages), dtype=object)})


def _count_frame(part: pd.DataFrame, structure: Any, cells: Mapping[str, pd.Index], count: str | None,
                 unit: str | None, max_contributions: int | None, unknown: str,
                 bound_key: np.ndarray | None, rows: str | None = None) -> pd.DataFrame:
    """One frame of rows -> ``(key, w, err)``: the count per leaf-cell key (``node * k +
    cell``), the private numbers of rows dropped under the reserved negative keys, or the
    errors found (by stage). Runs on an executor; the rows kept per unit follow from the
    driver's bounding key and the rows' content (the pandas door's choice). ``rows``: the
    frame holds distinct (path, cell) rows and their numbers of records in that column."""
    part = part.drop(columns=[_BUCKET], errors="ignore").reset_index(drop=True)
    dropped_bound, kept = 0, None
    if unit is not None:  # which rows the bound keeps (every row is still placed and checked)
        names = [*structure.levels, *cells]
        try:
            kept, dropped_bound = bounded_rows(part[unit], int(max_contributions or 0), cast(np.ndarray, bound_key),
                                               lambda over: content_hash(part[names].iloc[over], names))
        except DataError as exc:
            return _error_rows(_ERR_UNIT, [str(exc)])
    try:
        part, w = counted_rows(part, rows if rows is not None else count)
    except DataError as exc:
        return _error_rows(_ERR_COUNT, [str(exc)])
    try:
        if cells:
            key, bad, problems = place_cells(structure, part, cells)
        else:
            key, bad, problems = structure.locate(part)
    except DataError as exc:
        return _error_rows(_ERR_PLACE, [str(exc)])
    dropped = 0
    if bad.any() and unknown == "raise":  # any record's value, also in a row the bound drops
        return _error_rows(_ERR_DOMAIN, problems)  # the kinds of problem (levels, never values)
    if kept is not None:
        key, bad = key[kept], bad[kept]
        w = None if w is None else w[kept]
    if bad.any():
        dropped = int(bad.sum()) if rows is None else int(cast(np.ndarray, w)[bad].sum())
    keep = ~bad
    if w is not None:
        problem = total_problem(w[keep])
        if problem is not None:
            return _error_rows(_ERR_TOTAL, [problem])
    key = key[keep]
    uniq, inv = np.unique(key, return_inverse=True)
    if w is None:
        sums = np.bincount(inv, minlength=len(uniq)).astype(np.int64)
    else:
        sums = np.zeros(len(uniq), np.int64)
        np.add.at(sums, inv, w[keep])
    return pd.DataFrame({"key": np.r_[uniq, _DROPPED_BY_BOUND, _DROPPED_OUT_OF_DOMAIN].astype(np.int64),
                         "w": np.r_[sums, dropped_bound, dropped].astype(np.int64),
                         "err": pd.Series([None] * (len(uniq) + 2), dtype=object)})


def _count_batches(batches: Iterator[pd.DataFrame], **kw: Any) -> Iterator[pd.DataFrame]:
    """``mapInPandas``: each Arrow batch of a partition counted on its own (no unit)."""
    for part in batches:
        yield _count_frame(part, bound_key=None, **kw)


def _count_bucket(key: tuple[Any, ...], part: pd.DataFrame, *, bound_key: np.ndarray, **kw: Any) -> pd.DataFrame:
    """``applyInPandas`` over the unit buckets: a bucket holds every row of its units."""
    return _count_frame(part, bound_key=bound_key, **kw)


def _bad_rows(batches: Iterator[pd.DataFrame], structure: Any, cells: Mapping[str, pd.Index]) -> Iterator[pd.DataFrame]:
    for part in batches:
        part = part.reset_index(drop=True)
        bad = place_cells(structure, part, cells)[1] if cells else structure.locate(part)[1]
        yield part[bad]


# ---------------------------------------------------------------------------- the driver
def merge_problems(problems: Sequence[str], levels: Sequence[str], cells: Sequence[str]) -> list[str]:
    """The kinds of problem the tasks found, as pandas finds them over all rows: per level
    (top-down) then per cell dimension, "outside the domain" when any task saw a value
    outside it, else "missing values".

    Parameters
    ----------
    problems : sequence of str
        The problems reported by the tasks (:func:`hierdp.frontends._cells.domain_error`'s
        kinds: they name levels and cell dimensions, never values).
    levels, cells : sequence of str
        The level columns (top-down) and the cell dimensions.

    Returns
    -------
    list of str
        The problems in the order the pandas door reports them.
    """
    seen = set(problems)
    kinds: list[tuple[str, ...]] = [(f"{name!r} values outside the declared domain",
              f"{name!r} values outside the declared domain of their parent", f"missing {name!r} values")
             for name in levels]
    kinds += [(f"{name!r} values outside the declared cell domain", f"missing {name!r} values") for name in cells]
    out: list[str] = []
    for candidates in kinds:  # outside the domain first: "missing" only when every miss was missing
        found = next((what for what in candidates if what in seen), None)
        if found is not None and found not in out:
            out.append(found)
    known = {what for candidates in kinds for what in candidates}
    return out + sorted(p for p in seen if p not in known)


def _meta(sdf: Any) -> pd.DataFrame:
    """An empty pandas frame with the Spark frame's columns and the dtypes the tasks see."""
    return sdf.limit(0).toPandas()


class SparkDPTree(TreeDoor):
    """Records in a Spark DataFrame placed on a public tree; what
    ``hierdp.dptree(spark_df, levels=..., domains=...)`` returns.

    Same interface as :class:`~hierdp.frontends.pandas.DPTree`; checks, contribution
    bounding and counting run on the Spark executors (see the module docstring), the
    release on the driver.
    """

    def __init__(self, sdf: Any, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None,
                 spent: list[dict[str, Any]] | None = None) -> None:
        require_pyspark()
        if not is_spark_frame(sdf):
            raise DataError(f"expected a Spark DataFrame, got {type(sdf).__name__}")
        meta = _meta(sdf)
        columns = [str(c) for c in meta.columns]
        self._how_rows_count(meta.columns, levels, root, count=count, unit=unit,
                             max_contributions=max_contributions, unknown=unknown, spent=spent)
        self._sdf = sdf
        decl = Declared(self.levels, domains, root=root)
        if self._observed(domains):
            check_columns(columns, self.levels, {}, None, None)
            rows = sdf if count is None else sdf.where(sdf[count] != 0)
            # the distinct level paths are enough for the observed domains (and small)
            self._structure = decl.decompose(rows.select(*self.levels).distinct().toPandas())
        else:
            self._structure = decl.decompose(meta)  # checks the domains and the columns; reads no data
        if count is not None:
            check_counts(meta, count)
        self.cells = resolve_cells(cells, levels=self.levels, root=root, columns=columns,
                                   observed=lambda name: sdf.select(name).dropna().distinct().toPandas()[name])

    @staticmethod
    def _observed(domains: Any) -> bool:
        if isinstance(domains, str):
            return domains == "observed"
        return isinstance(domains, Mapping) and any(isinstance(v, str) and v == "observed" for v in domains.values())

    def _columns(self) -> list[str]:
        cols = [*self.levels, *self.cells]
        cols += [c for c in (self.count, self.unit) if c is not None and c not in cols]
        return cols

    def keyed_sums(self, rng: Any = None) -> Any:
        """NON-PRIVATE: a lazy Spark DataFrame of the per-key sums (``key``, ``err``, ``w``):
        one row per (leaf, cell) reached (``key = node * k + cell``, external node ids), the
        reserved negative keys (rows dropped) and the errors the tasks found.

        Parameters
        ----------
        rng : RandomSource, optional
            The source of the bounding key that picks the rows kept per unit (drawn here,
            on the driver, and handed to the tasks); ``None``: a secure source.

        Returns
        -------
        pyspark.sql.DataFrame
            NON-PRIVATE, lazy. Never publish it.
        """
        from pyspark.sql import functions as F

        bound_key = bounding_key(rng or make_rng(None)) if self.unit is not None else None
        kw = dict(structure=self._structure, cells=self.cells, count=self.count, unit=self.unit,
                  max_contributions=self.max_contributions, unknown=self.unknown)
        sdf = self._sdf.select(*self._columns())
        if self.unit is None and self.count is None:
            # Spark's own group-by first (as fast as a plain count): the tasks then place the
            # distinct (path, cell) rows, not every record
            grouped = sdf.groupBy(*self._columns()).agg(F.count(F.lit(1)).alias(_ROWS))

            def count_grouped(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
                return _count_batches(batches, rows=_ROWS, **kw)

            per_task = grouped.mapInPandas(count_grouped, _RESULT_SCHEMA)
        elif self.unit is None:
            def count_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
                return _count_batches(batches, **kw)

            per_task = sdf.mapInPandas(count_batches, _RESULT_SCHEMA)
        else:
            def count_bucket(key: tuple[Any, ...], part: pd.DataFrame) -> pd.DataFrame:
                return _count_bucket(key, part, bound_key=cast(np.ndarray, bound_key), **kw)

            # as many buckets as the session's shuffle partitions: about one bucket (one
            # pandas frame, one call) per task
            n_buckets = max(1, int(sdf.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200))
            bucket = F.pmod(F.xxhash64(F.col(self.unit)), F.lit(n_buckets))
            per_task = sdf.withColumn(_BUCKET, bucket).groupBy(_BUCKET).applyInPandas(count_bucket, _RESULT_SCHEMA)
        return per_task.groupBy("key", "err").agg(F.sum("w").alias("w"))

    def _settle(self, reserved: pd.DataFrame) -> dict[str, Any]:
        """The errors the tasks found, raised as the pandas door raises them (its first), and
        the private notes, from the rows of the reserved (negative) keys."""
        keys = reserved["key"].to_numpy(np.int64)
        errs = reserved["err"].to_numpy(object)
        for stage in _STAGES:  # the first error the pandas door would meet
            found = sorted({str(e) for e in errs[keys == stage]})
            if not found:
                continue
            if stage == _ERR_DOMAIN:
                raise domain_error(merge_problems(found, self.levels, list(self.cells)))
            raise DataError(found[0])
        w = reserved["w"].to_numpy(np.int64)
        notes = dropped_notes(keys, w, self.unit is not None)
        return notes

    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private notes; the counting runs on Spark.

        Parameters
        ----------
        rng : RandomSource, optional
            The randomness that picks the rows kept per unit (``max_contributions``); a
            seeded one seeds each bucket's choice, ``None`` uses the secure source.

        Returns
        -------
        (numpy.ndarray, dict)
            NON-PRIVATE: the exact counts ``(n,)`` or ``(n, k)``, and private notes (e.g.
            ``rows_dropped_out_of_domain``). Never publish them.
        """
        sums = self.keyed_sums(rng).toPandas()  # only the (leaf, cell) counts come to the driver
        keys = sums["key"].to_numpy(np.int64)
        notes = self._settle(sums[keys < 0])
        w = sums["w"].to_numpy(np.int64)
        if self.count is not None:
            rules.enforce(total_problem(w[keys >= 0]), DataError)
        k = self.n_cells
        flat = np.zeros(self._structure.n_ext * k, np.int64)
        ok = keys >= 0
        flat[keys[ok]] = w[ok]
        counts = flat.reshape(self._structure.n_ext, k) if self.cells else flat
        return leaf_counts_to_nodes(self._structure.tree, counts), notes

    def out_of_domain(self) -> Any:
        """NON-PRIVATE diagnostics: a lazy Spark DataFrame of the rows outside the declared
        domains (``.toPandas()`` it, or ``.show()``). Never publish them.

        Returns
        -------
        pyspark.sql.DataFrame
            NON-PRIVATE: the out-of-domain rows, lazily.
        """
        structure, cells = self._structure, self.cells

        def bad_rows(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            return _bad_rows(batches, structure, cells)

        return self._sdf.mapInPandas(bad_rows, self._sdf.schema)


def spark_door(data: Any, levels: Sequence[str] | None = None, domains: Any = None, **keywords: Any) -> SparkDPTree:
    """``hierdp.dptree(spark_df, levels=[...], domains=..., ...)``: the keywords of the
    pandas ``df.dptree`` (``count``, ``unit``, ``max_contributions``, ``unknown``,
    ``root``, ``cells``).

    Parameters
    ----------
    data : pyspark.sql.DataFrame
        The private records (classic or Spark Connect).
    levels : sequence of str
        The hierarchy columns, top-down.
    domains : mapping, DataFrame, "observed" or None, optional
        The public structure, as for ``df.dptree``.
    **keywords
        ``count``, ``unit``, ``max_contributions``, ``unknown``, ``root``, ``cells``.

    Returns
    -------
    SparkDPTree
        The door: ``.release(epsilon=...)``, ``.tree``, and the NON-PRIVATE diagnostics
        ``.true_counts()`` and ``.out_of_domain()``.
    """
    if levels is None:
        raise DataError("hierdp.dptree(Spark DataFrame, ...) needs levels=[...] (the hierarchy columns, top-down)")
    return SparkDPTree(data, levels, domains, spent=releases_of(data), **keywords)


register_door("pyspark.sql.DataFrame", is_spark_frame, spark_door)


# ---------------------------------------------------------------------------- subtree tasks on Spark
def _npz(**arrays: Any) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in arrays.items() if v is not None})
    return buf.getvalue()


def _unnpz(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _sum_up(vals: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Children's counts added into their parents (local ``parent``, -1: none inside),
    deepest level first: one vectorised step per level."""
    for d in range(int(depth.max(initial=0)), 0, -1):
        sel = (depth == d) & (parent >= 0)
        if sel.any():
            np.add.at(vals, parent[sel], vals[sel])
    return vals


def _task_values(task: Any, tree: Any, keys: np.ndarray, w: np.ndarray, n_cells: int) -> np.ndarray:
    """The true counts ``(m, n_cells)`` of ``task.nodes`` from its leaves' ``(key, w)``
    (``key = external node * n_cells + cell``), summed up the task's subtrees."""
    ti = tree.internal
    ext = keys // n_cells
    internal = ext if ti.inverse_perm is None else ti.inverse_perm[ext]
    vals = np.zeros((task.n_nodes, n_cells), np.int64)
    np.add.at(vals, (np.searchsorted(task.nodes, internal), keys % n_cells), w)
    return _sum_up(vals, task.parent[1:] - 1, ti.depth[task.nodes])


#: the stage context of the release an executor's Python worker is running (the last one
#: only: it holds the release key), so its stages are built once per worker
_EXECUTOR_CONTEXT: dict[str, StageContext] = {}


def _worker_context(token: str, ctx: StageContext) -> StageContext:
    """The release's :class:`~hierdp.execution.driver.StageContext` in this Python worker:
    the first one unpickled for ``token`` (its stages built once), else ``ctx``."""
    kept = _EXECUTOR_CONTEXT.get(token)
    if kept is None:
        _EXECUTOR_CONTEXT.clear()
        _EXECUTOR_CONTEXT[token] = kept = ctx
    return kept


def release_to_dataset(door: SparkDPTree, out: str | os.PathLike[str], *, split: Any = "auto",
                       dense: bool = False, std: bool = False, session: Any = None, **keywords: Any) -> Any:
    """A split release of a Spark door's records into the Parquet dataset ``out/``, its
    subtree tasks run on the Spark executors.

    The stages of :func:`hierdp.outofcore.release_to_dataset` (the one code path of
    :class:`hierdp.execution.stages.SplitStages`; exact split GLS of Dawson et al. 2023, Alg.
    1-2, then top-down ``nonneg``/``round``), placed on Spark:

    1. the records counted to (leaf, cell) on the executors (the door's tasks: checks,
       contribution bounding, aggregation), fixed once (``localCheckpoint``: a lost
       executor fails the release rather than draw another sample of rows);
    2. **up**, ``groupBy(task).applyInPandas``: each task's counts summed up its subtrees,
       measured (noise keyed per node: the bits the local release draws) and passed up;
       only the roots' ``(z, u)`` and counts go to the driver;
    3. **top** on the driver (the levels above the split; its part is written there);
    4. **down**, ``groupBy(task).applyInPandas`` again over the tasks' measurements joined
       with their roots' solution: pass down, top-down steps, and the task's part written
       by the executor.

    The output has the layout of :func:`hierdp.outofcore.release_to_dataset` (``part-NNNNN
    .parquet`` with the ledger in each part's metadata, ``_ledger.json``, then
    ``_SUCCESS``), so the same readers work on both; ``out`` must be a folder every
    executor can write (local mode, or a shared file system). The release key travels to
    the executors inside the tasks: it is as sensitive as the data (TLS between machines).
    There is no work folder and no resume: Spark retries failed tasks (whose output is
    the same bits); a failed release is run again as a new release.

    Parameters
    ----------
    door : SparkDPTree
        ``hierdp.dptree(spark_df, levels=..., domains=..., ...)``.
    out : str or path
        The dataset folder (created; its parent must exist).
    split : str, int or dict, default "auto"
        As for :func:`hierdp.release` (a level, ``"auto"`` or ``{"memory": ...}``).
    dense, std : bool, default False
        As for :func:`hierdp.outofcore.release_to_dataset`.
    session : Session, optional
        Draw the spend from this :class:`hierdp.Session` (checked before any noise).
    **keywords
        The release keywords of ``door.release`` (``epsilon``, ``postprocess``, ``seed``, ...).

    Returns
    -------
    Ledger
        The release's ledger (also in ``out/_ledger.json`` and in every part).
    """

    if not isinstance(door, SparkDPTree):
        raise DataError(f"release_to_dataset on Spark needs a Spark door (hierdp.dptree(spark_df, ...)), "
                        f"got {type(door).__name__}")
    _, kw = door.release_inputs(values=False, split=split, **keywords)
    for name in ("split", "session"):
        kw.pop(name, None)
    tree, n_cells = door.tree, door.n_cells
    cells = {k: list(v) for k, v in door.cells.items()} if door.cells else None
    split_setup(tree, n_cells, split, dict(kw))  # refusals before the data are read
    out = Path(out)
    need_pyarrow()
    held = claim_dataset_folder(out, None)  # locked for this release; no other release in it (refused before
    try:                                         # the data are counted or the budget charged)
        return _release_on_spark(door, out, split, dense, std, session, kw, tree, n_cells, cells)
    finally:
        unlock(held)


def _release_on_spark(door: SparkDPTree, out: Path, split: Any, dense: bool, std: bool, session: Any,
                      kw: dict[str, Any], tree: Any, n_cells: int, cells: dict[str, Any] | None) -> Any:
    """The body of :func:`release_to_dataset` once the dataset folder is held."""
    from pyspark.sql import functions as F

    tag = os.urandom(8).hex()  # the temporaries' names carry it (hierdp.outofcore.atomic)

    # 1. the counts, on the executors, fixed once; errors raised as the pandas door raises them
    sums = door.keyed_sums(door_rng(kw.get("seed"), 97)).localCheckpoint(eager=True)
    kw["private_notes"] = {**dict(kw.get("private_notes") or {}),
                           **door._settle(sums.where(F.col("key") < 0).toPandas())}
    r, part, step, tail = split_setup(tree, n_cells, split, kw)

    # the release: checked, keyed and charged once, before any noise (as outofcore)
    check(r, session)
    key = noise_key(r.seed)
    acc, decomposition = open_account(r, tree, None)
    stage_total = r.total - acc.total  # before the account is charged below
    st = SplitStages(r, part, step, tail, n_cells, total=stage_total, key=key, check_counts=True, spills=True)
    ticket, sess = reserve(session, r)
    meas = st.summary()
    ledger = build_ledger(r, tree, meas, account(r, acc, meas), decomposition=decomposition, rng=make_rng(r.seed))
    settle_split(r, ledger, part, True, sess, ticket)
    token = f"{ledger.release_id}-{os.urandom(8).hex()}"
    sink = DatasetSink(out, tree, n_cells, cells, dense, std, ledger.to_json(), ledger.release_id, tag)
    store = CarriedStore(part, n_cells)
    # what the executors run the stages with (pickled without its stages; the key explicitly exported)
    ctx = StageContext(r, part, step, tail, n_cells, total=stage_total, key=key, check_counts=True,
                       store=store, sink=sink, stages=st)

    # each leaf's task (-1: a leaf above the split level, in the top part)
    ti = tree.internal
    task_of = np.full(tree.n_nodes, -1, np.int64)
    for t in range(part.n_tasks):
        task_of[part.task(t).nodes] = t
    task_of_ext = task_of if ti.inverse_perm is None else task_of[ti.inverse_perm]

    def with_task(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for b in batches:
            yield pd.DataFrame({"task": task_of_ext[b["key"].to_numpy(np.int64) // n_cells],
                                "key": b["key"].to_numpy(np.int64), "w": b["w"].to_numpy(np.int64)})

    spark = sums.sparkSession
    counts = sums.where(F.col("key") >= 0).select("key", "w").mapInPandas(with_task, "task long, key long, w long")
    every_task = spark.range(part.n_tasks).select(F.col("id").alias("task"), F.lit(-1).cast("long").alias("key"),
                                                  F.lit(0).cast("long").alias("w"))  # tasks without records too

    # 2. up, per task on the executors (the driver's stage function; the state carried in the rows)
    def up(group: tuple[Any, ...], rows: pd.DataFrame) -> pd.DataFrame:
        t = int(group[0])
        keys = rows["key"].to_numpy(np.int64)
        mine = keys >= 0
        vals = _task_values(part.task(t), tree, keys[mine], rows["w"].to_numpy(np.int64)[mine], n_cells)
        (roots, z, u), state = measure_task((_worker_context(token, ctx), t, vals))
        return pd.DataFrame({"task": [t], "roots": [_npz(roots=roots, z=z, u=u)], "state": [_npz(**state)]})

    measured = (counts.where(F.col("task") >= 0).unionByName(every_task).groupBy("task")
                .applyInPandas(up, "task long, roots binary, state binary").localCheckpoint(eager=True))

    # 3. the top, on the driver (the driver's top stage over the collected pass-up outputs)
    ups = measured.select("task", "roots").toPandas().sort_values("task")
    if len(ups) != part.n_tasks:  # pragma: no cover - every task is in every_task
        raise DataError("a subtree task went missing on Spark; run the release again")
    for t, blob in zip(ups["task"], ups["roots"], strict=True):
        got = _unnpz(blob)
        store.done("up", int(t), (got["roots"], got.get("z"), got.get("u")))
    del ups, got
    top = top_task(part)
    top_vals = None
    if top.n_nodes:  # the leaves above the split and every root's counts, summed up (before the store hands them on)
        top_leaves = counts.where(F.col("task") < 0).select("key", "w").toPandas()
        tk = top_leaves["key"].to_numpy(np.int64)
        ext = tk // n_cells
        internal = ext if ti.inverse_perm is None else ti.inverse_perm[ext]
        top_vals = np.zeros((top.n_nodes, n_cells), np.int64)
        np.add.at(top_vals, (np.searchsorted(part.top, internal), tk % n_cells), top_leaves["w"].to_numpy(np.int64))
        np.add.at(top_vals, np.searchsorted(part.top, ti.parent[part.roots]),
                  store.root_counts().reshape(-1, n_cells))
        top_vals = _sum_up(top_vals, top.parent, ti.depth[part.top])
    ctx.counts_of = lambda task: top_vals
    solve_top(ctx, st, lambda obj: obj)
    ctx.counts_of = None
    x_roots, v_roots, fixed = store.top_solution()

    # 4. down, per task on the executors, each writing its part
    rows = []
    for t in range(part.n_tasks):
        s = part.root_slice(t)
        rows.append((t, _npz(x=x_roots[s], v=v_roots[s], **{f"fixed{j}": f[s] for j, f in enumerate(fixed)})))
    solved = spark.createDataFrame(pd.DataFrame(rows, columns=["task", "solution"]), "task long, solution binary")
    n_fixed = len(fixed)
    store.close()

    def down(group: tuple[Any, ...], rows: pd.DataFrame) -> pd.DataFrame:
        t = int(group[0])
        state, sol = _unnpz(rows["state"].iloc[0]), _unnpz(rows["solution"].iloc[0])
        n = pass_down_task((_worker_context(token, ctx), t, (sol["x"], sol["v"],
                                                             [sol[f"fixed{j}"] for j in range(n_fixed)]), state))
        return pd.DataFrame({"task": [t], "rows": [n]})

    written = measured.join(solved, "task").groupBy("task").applyInPandas(down, "task long, rows long").toPandas()
    if len(written) != part.n_tasks:  # pragma: no cover
        raise DataError("a subtree task's part was not written on Spark; run the release again")
    sink.finish()
    return ledger
