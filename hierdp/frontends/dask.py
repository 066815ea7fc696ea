"""The Dask DataFrame front-end: ``ddf.dptree(...)`` (registered when dask is installed).

Records too many for one machine's memory, counted where they live. Same arguments as
the pandas ``df.dptree`` (``levels``, ``domains``, ``cells``, ``count``, ``unit``,
``max_contributions``, ``unknown``, ``root``); what runs where:

* distributed — contribution bounding (a shuffle by ``unit`` so each unit's rows meet in
  one partition, then a uniform choice of ``c`` rows per unit, made on the worker from
  the bounding key the client drew and the rows' content), the domain checks (a missing column or an
  out-of-domain value in any partition raises the pandas error) and the aggregation:
  each partition is reduced to ``(leaf-cell key, count)`` pairs, then summed by key;
* in memory — the public structure (built from the declared domains; ``"observed"``
  computes only the distinct level paths / cell labels), the small per-leaf result, the
  noise and the post-processing (they are small: 10⁹ records are ~10⁷ nodes).

No randomness is drawn on workers. With contribution bounding the rows a unit keeps are
a function of the bounding key (drawn here from the release's random source, secure by
default) and of the rows' content, not of their order or partitioning
(:mod:`hierdp.frontends._contributions`): a seeded release is identical to the pandas
one with and without bounding, and a rerun task keeps the same rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.decompositions.declared import Declared
from hierdp.errors import DataError, MissingDependencyError
from hierdp.frontends._cells import cell_sizes, check_columns, domain_error, resolve_cells
from hierdp.frontends._contributions import bounded_rows, bounding_key, content_hash
from hierdp.frontends.base import register_door, releases_of, suggest_keywords
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
from hierdp.rng import make_rng
from hierdp.tree import Tree

try:  # an optional dependency: pip install "hierdp[dask]"
    import dask
    import dask.dataframe as dd
    from dask.dataframe.extensions import register_dataframe_accessor
except ImportError:  # pragma: no cover - exercised only without dask
    dask = dd = register_dataframe_accessor = None

__all__ = ["DaskDPTree", "DPTreeDaskAccessor"]

_DROPPED_BY_BOUND, _DROPPED_OUT_OF_DOMAIN = DROPPED_BY_BOUND, DROPPED_OUT_OF_DOMAIN


def _place(part: pd.DataFrame, structure: Any, cells: Mapping[str, pd.Index]) -> tuple[np.ndarray, np.ndarray,
                                                                                        list[str]]:
    if cells:
        return place_cells(structure, part, cells)
    node, bad, problems = structure.locate(part)
    return node, bad, problems


def _count_partition(part: pd.DataFrame, structure: Any, cells: Mapping[str, pd.Index], count: str | None,
                     unit: str | None, max_contributions: int | None, unknown: str,
                     bound_key: tuple[int, ...] | None) -> pd.DataFrame:
    """One partition → ``(key, w)``: the count per leaf-cell key (``node * k + cell``), plus
    the private numbers of rows dropped under the reserved negative keys. Runs on a worker."""
    check_columns(part.columns, structure.levels, cells, count, unit)
    dropped_bound, kept = 0, None
    if unit is not None:  # which rows the bound keeps (every row is still placed and checked)
        names = [*structure.levels, *cells]
        kept, dropped_bound = bounded_rows(part[unit], int(max_contributions or 0), np.array(bound_key, np.int64),
                                           lambda over: content_hash(part[names].iloc[over], names))
    part, w = counted_rows(part, count)
    key, bad, problems = _place(part, structure, cells)
    dropped = 0
    if bad.any() and unknown == "raise":  # any record's value, also in a row the bound drops
        raise domain_error(problems)  # word for word the pandas error
    if kept is not None:
        key, bad = key[kept], bad[kept]
    if bad.any():
        dropped = int(bad.sum())
    keep = ~bad
    if w is not None:  # as pandas: the counts' total stays exact (checked per partition and in sum)
        rules.enforce(total_problem(w[keep]), DataError)
    key = key[keep]
    uniq, inv = np.unique(key, return_inverse=True)
    sums = np.bincount(inv, weights=None if w is None else w[keep], minlength=len(uniq))
    return pd.DataFrame({"key": np.r_[uniq, _DROPPED_BY_BOUND, _DROPPED_OUT_OF_DOMAIN].astype(np.int64),
                         "w": np.r_[np.rint(sums), dropped_bound, dropped].astype(np.int64)})


def _bad_rows(part: pd.DataFrame, structure: Any, cells: Mapping[str, pd.Index]) -> pd.DataFrame:
    check_columns(part.columns, structure.levels, cells, None, None)
    return part[_place(part, structure, cells)[1]]


def _empty_like(ddf: Any) -> pd.DataFrame:
    """An empty pandas frame with the Dask DataFrame's columns and dtypes (no data read)."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in ddf.dtypes.items()})


def _wrap(obj: Any) -> Any:
    """A large constant for the task graph, embedded once (by name, without hashing it)."""
    return dask.delayed(obj, name=f"hierdp-{type(obj).__name__}-{uuid.uuid4().hex}")


class DaskDPTree(TreeDoor):
    """Records in a Dask DataFrame placed on a public tree; what ``ddf.dptree(...)`` returns.

    Same interface as :class:`~hierdp.frontends.pandas.DPTree`; counting runs on the Dask
    scheduler (see the module docstring), the release in memory.
    """

    _accessor = "ddf"

    def __init__(self, ddf: Any, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None,
                 spent: list[dict[str, Any]] | None = None) -> None:
        if dd is None:  # pragma: no cover

            raise MissingDependencyError("dask", "dask")
        if not isinstance(ddf, dd.DataFrame):
            raise DataError(f"expected a Dask DataFrame, got {type(ddf).__name__}")
        meta = _empty_like(ddf)
        self._how_rows_count(meta.columns, levels, root, count=count, unit=unit,
                             max_contributions=max_contributions, unknown=unknown, spent=spent)
        self._ddf = ddf
        decl = Declared(self.levels, domains, root=root)
        if self._observed(domains):
            check_columns(meta.columns, self.levels, {}, None, None)
            # the distinct level paths are enough for the observed domains (and small)
            self._structure = decl.decompose(ddf[self.levels].drop_duplicates().compute())
        else:
            self._structure = decl.decompose(meta)  # checks the domains and the columns; reads no data
        if count is not None:
            check_counts(meta, count)
        self.cells = resolve_cells(cells, levels=self.levels, root=root, columns=meta.columns,
                                   observed=lambda name: ddf[name].dropna().unique().compute())

    @staticmethod
    def _observed(domains: Any) -> bool:
        if isinstance(domains, str):
            return domains == "observed"
        return isinstance(domains, Mapping) and any(isinstance(v, str) and v == "observed" for v in domains.values())

    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private notes; the counting runs on Dask.

        Parameters
        ----------
        rng : RandomSource, optional
            The source of the bounding key that picks the rows kept per unit
            (``max_contributions``); ``None``: a secure source.

        Returns
        -------
        (numpy.ndarray, dict)
            NON-PRIVATE: the exact counts ``(n,)`` or ``(n, k)``, and private notes (e.g.
            ``rows_dropped_out_of_domain``). Never publish them.
        """
        bound_key = tuple(bounding_key(rng or make_rng(None)).tolist()) if self.unit is not None else None
        frame = self._ddf
        if self.unit is not None:
            frame = frame.shuffle(on=self.unit)  # every unit's rows in one partition
        meta = pd.DataFrame({"key": pd.Series(dtype="int64"), "w": pd.Series(dtype="int64")})
        per_part = frame.map_partitions(_count_partition, _wrap(self._structure), _wrap(self.cells), self.count,
                                        self.unit, self.max_contributions, self.unknown, bound_key, meta=meta)
        sums = per_part.groupby("key")["w"].sum().compute()
        keys = sums.index.to_numpy(np.int64)
        w = sums.to_numpy(np.int64)
        if self.count is not None:
            rules.enforce(total_problem(w[keys >= 0]), DataError)
        notes = dropped_notes(keys, w, self.unit is not None)
        k = int(np.prod(cell_sizes(self.cells))) if self.cells else 1
        counts = np.zeros(self._structure.n_ext * k, np.int64)
        ok = keys >= 0
        counts[keys[ok]] = w[ok]
        counts = counts.reshape(self._structure.n_ext, k) if self.cells else counts
        return leaf_counts_to_nodes(self._structure.tree, counts), notes

    def counted_on(self, client: Any, partition: Any, rng: Any = None) -> DaskTaskCounts:
        """Count the records per subtree task on the cluster, for the subtree tasks on Dask
        (:func:`hierdp.outofcore.release_to_dataset` with ``executor=client``).

        Each partition is counted on a worker as in :meth:`node_values` (the domain checks,
        the bound, the pandas errors), then split by the task owning each leaf; a task's
        counts are summed on a worker from its pieces, and never reach this process. Only
        the numbers of dropped rows (private notes) come back here. Counting runs now, so a
        bad partition raises here, before any noise.

        Parameters
        ----------
        client : distributed.Client
            The cluster's client.
        partition : hierdp.subtrees.Partition
            The release's partition (``hierdp.subtrees.partition(tree, split, n_cells=...)``).
        rng : RandomSource, optional
            As for :meth:`node_values`.

        Returns
        -------
        DaskTaskCounts
            ``.counts_of(task)`` (futures) and ``.notes``.
        """
        import distributed

        bound_key = tuple(bounding_key(rng or make_rng(None)).tolist()) if self.unit is not None else None
        frame = self._ddf.shuffle(on=self.unit) if self.unit is not None else self._ddf
        meta = pd.DataFrame({"key": pd.Series(dtype="int64"), "w": pd.Series(dtype="int64")})
        per_part = frame.map_partitions(_count_partition, _wrap(self._structure), _wrap(self.cells), self.count,
                                        self.unit, self.max_contributions, self.unknown, bound_key, meta=meta)
        tree = self.tree
        ti = tree.internal
        k = self.n_cells
        n_tasks = partition.n_tasks
        task_of = np.full(tree.n_nodes, -1, np.int64)  # internal id -> its task (-1: the top part)
        for t in range(n_tasks):  # one vectorised step per task
            task_of[partition.task(t).nodes] = t
        depth, par = np.asarray(ti.depth), np.asarray(ti.parent)
        anchor = np.arange(tree.n_nodes, dtype=np.int64)  # the ancestor in the top part (depth < split)
        while partition.depth > 0:  # one vectorised step per level
            deep = depth[anchor] >= partition.depth
            if not deep.any():
                break
            anchor = np.where(deep, par[anchor], anchor)
        if partition.depth == 0:
            anchor[:] = -1
        inv = ti.inverse_perm
        internal_of_ext = np.arange(tree.n_nodes) if inv is None else np.asarray(inv)
        where = np.empty(3 * tree.n_nodes, np.int64)
        where[0::3] = task_of[internal_of_ext]
        where[1::3] = internal_of_ext
        where[2::3] = anchor[internal_of_ext]
        parts = client.compute(per_part.to_delayed())
        where_f = client.submit(_same, where, pure=False)  # a task: recomputed if its worker dies
        buckets = [client.submit(_by_task, f, where_f, k, n_tasks, pure=False) for f in parts]
        dropped = client.gather([client.submit(operator_getitem_last, b, pure=False) for b in buckets])
        distributed.wait(buckets)
        keys = np.concatenate([d[0] for d in dropped]) if dropped else np.zeros(0, np.int64)
        w = np.concatenate([d[1] for d in dropped]) if dropped else np.zeros(0, np.int64)
        notes = dropped_notes(keys, w, self.unit is not None)
        return DaskTaskCounts(client, buckets, n_tasks, k, notes)

    def out_of_domain(self) -> Any:
        """NON-PRIVATE diagnostics: a lazy Dask DataFrame of the rows outside the declared
        domains (``.compute()`` it, or ``.head()``). Never publish them.

        Returns
        -------
        dask.dataframe.DataFrame
            NON-PRIVATE: the out-of-domain rows, lazily.
        """
        return self._ddf.map_partitions(_bad_rows, _wrap(self._structure), _wrap(self.cells),
                                        meta=_empty_like(self._ddf))


def _by_task(frame: pd.DataFrame, where: np.ndarray, k: int, n_tasks: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """One partition's ``(key, w)`` counts, bucketed by subtree task. ``where[3 * ext]`` is
    the task holding leaf ``ext`` (``-1``: the top part), ``where[3 * ext + 1]`` its internal
    id, ``where[3 * ext + 2]`` its ancestor in the top part (``-1`` without a top part).
    Buckets ``0 .. n_tasks - 1``: each task's ``(internal leaf * k + cell, w)``; bucket
    ``n_tasks``: the top part's, every count at its ancestor there (summed); bucket
    ``n_tasks + 1``: the reserved keys (numbers of dropped rows). Runs on a worker."""
    key = frame["key"].to_numpy(np.int64)
    w = frame["w"].to_numpy(np.int64)
    ok = key >= 0
    ext = key[ok] // k
    cell = key[ok] % k
    wk = w[ok]
    task = where[3 * ext]
    node = where[3 * ext + 1] * k + cell
    order = np.argsort(task, kind="stable")
    ts = task[order]
    bounds = np.searchsorted(ts, np.arange(n_tasks + 1))
    out = [(node[order[lo:hi]], wk[order[lo:hi]]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    anchor = where[3 * ext + 2]
    has = anchor >= 0
    top_key, inv = np.unique(anchor[has] * k + cell[has], return_inverse=True)
    out.append((top_key, np.bincount(inv, weights=wk[has], minlength=top_key.size).astype(np.int64)))
    out.append((key[~ok], w[~ok]))
    return out


def _task_counts(nodes: np.ndarray, parent: np.ndarray, k: int, *pieces: tuple[np.ndarray, np.ndarray]
                 ) -> np.ndarray:
    """A task's true counts ``(m, k)`` (``task.nodes`` order) from its buckets of every
    partition: each count added at its node, then summed up the task's own tree. On a worker."""
    m = nodes.size
    off = parent.size - m  # 1: a subtree task (its unmeasured root first); 0: the top part
    vals = np.zeros((m + off, k), np.int64)
    for node_cell, w in pieces:
        node = node_cell // k
        pos = np.searchsorted(nodes, node)
        np.add.at(vals, (pos + off, node_cell % k), w)
    local = Tree(parent, _check=False)
    sums = local.to_external(local.internal.sum_up(np.ascontiguousarray(local.to_internal(vals)), consume=True))
    return np.asarray(sums)[off:]


def _same(obj: Any) -> Any:
    return obj


def operator_getitem_last(buckets: list[Any]) -> Any:
    """The last bucket of :func:`_by_task` (the reserved keys: numbers of dropped rows)."""
    return buckets[-1]


class DaskTaskCounts:
    """True counts of a Dask DataFrame's records per subtree task, kept on the cluster
    (PRIVATE); made by :meth:`DaskDPTree.counted_on`. ``counts_of(task)`` returns a
    ``distributed.Future`` of the task's ``(m, n_cells)`` counts, for
    :func:`hierdp.outofcore.release_to_dataset` with ``executor=`` the same client.

    Attributes
    ----------
    notes : the private notes of the count (rows dropped by the bound or out of the domains).
    """

    def __init__(self, client: Any, buckets: list[Any], n_tasks: int, n_cells: int, notes: dict[str, Any]) -> None:
        self._client, self._buckets, self._n_tasks, self._k = client, buckets, n_tasks, n_cells
        self.notes = notes

    def counts_of(self, task: Any) -> Any:
        """A future of ``task``'s true counts (NON-PRIVATE: never publish them), summed on a
        worker from every partition's bucket of that task.

        Parameters
        ----------
        task : hierdp.subtrees.SubtreeTask
            A task of the partition given to :meth:`DaskDPTree.counted_on` (``index == -1``:
            the top part).

        Returns
        -------
        distributed.Future
            Of the exact int64 counts ``(m, n_cells)`` in ``task.nodes`` order.
        """
        import operator

        b = self._n_tasks if task.index < 0 else int(task.index)
        pieces = [self._client.submit(operator.getitem, f, b, pure=False) for f in self._buckets]
        return self._client.submit(_task_counts, np.asarray(task.nodes), np.asarray(task.parent), self._k, *pieces,
                                   pure=False)


class DPTreeDaskAccessor:
    """``ddf.dptree(levels, domains, count=None, unit=None, max_contributions=None, unknown="raise",
    cells=None)``, as ``df.dptree`` on pandas."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj
        self._spent = releases_of(obj)

    @suggest_keywords("ddf.dptree()")
    def __call__(self, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None) -> DaskDPTree:
        """Place this Dask DataFrame's rows on a public tree: ``ddf.dptree(levels=[...],
        domains=...)``, as ``df.dptree`` on pandas; counting runs on the Dask scheduler.

        Parameters
        ----------
        levels, domains, count, unit, max_contributions, unknown, root, cells
            As for ``df.dptree`` (:meth:`DPTreeFrameAccessor.__call__
            <hierdp.frontends.pandas.DPTreeFrameAccessor.__call__>`).

        Returns
        -------
        DaskDPTree
            The door: ``.release(epsilon=...)``, ``.tree`` and the NON-PRIVATE diagnostics
            ``.true_counts()`` and ``.out_of_domain()``.
        """
        return DaskDPTree(self._obj, levels, domains, count=count, unit=unit, max_contributions=max_contributions,
                          unknown=unknown, root=root, cells=cells, spent=self._spent)


if register_dataframe_accessor is not None:
    register_dataframe_accessor("dptree")(DPTreeDaskAccessor)
    register_door("dask.DataFrame", lambda data: isinstance(data, dd.DataFrame),
                  lambda data, **kw: _dask_door(data, **kw))


def _dask_door(data: Any, **keywords: Any) -> DaskDPTree:
    levels = keywords.pop("levels", None)
    if levels is None:
        raise DataError("hierdp.dptree(Dask DataFrame, ...) needs levels=[...] (the hierarchy columns, top-down)")
    return DPTreeDaskAccessor(data)(levels, **keywords)
