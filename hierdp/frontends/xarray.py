"""The xarray front-end: ``.dptree`` on ``DataArray`` and ``Dataset`` (registered on import).

Counts already laid out as an array, in either of the two layouts users have:

* one dimension per level — what ``df.groupby([...]).size().to_xarray()`` gives, a
  dense (levels x cells) array with NaN where a path has no record;
* one stacked dimension whose ``MultiIndex`` names the levels
  (``da.stack(leaf=levels)``).

Every other dimension is a cell dimension (``cells={dim: domain}``), its coordinates
the cell labels. Domains follow the pandas rules (design, privacy rule 1): the declared
domains decide which paths and cells exist; NaN counts are 0; a nonzero count on a path
or cell outside the declared domains is the pandas out-of-domain error (or dropped with
``unknown="drop"``: the private note ``rows_dropped_out_of_domain``, as in pandas, counts
the dropped (path, cell) entries with a count, the rows of ``out_of_domain()``'s long
table, which are the rows of the pre-aggregated pandas frame of the same counts); counts
above 2**53 are refused as in pandas (:func:`hierdp.rules.value_range_problem`);
``"observed"`` takes the paths/labels with any non-NaN count. The
release is the pandas release of the same counts (same tree, same int64 values), so a
seed gives identical numbers.

Dask-backed arrays are reduced lazily: only the presence masks (for ``"observed"``
domains), a few scalar checks and the in-domain counts are computed, in one
``dask.compute`` call per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd
import xarray as xr

from hierdp import rules
from hierdp.decompositions.declared import Declared
from hierdp.errors import DataError, HierarchyError, expected_one_of
from hierdp.frontends._cells import cell_sizes, domain_error, resolve_cells
from hierdp.frontends.base import register_door, releases_of, suggest_keywords
from hierdp.frontends.counting import leaf_counts_to_nodes
from hierdp.frontends.tree_door import TreeDoor

__all__ = ["ArrayDPTree", "DPTreeDataArrayAccessor", "DPTreeDatasetAccessor"]

def _is_dask(x: Any) -> bool:
    return type(x).__module__.startswith("dask.")


def _compute(*objs: Any) -> tuple:
    """Compute the dask objects among ``objs`` in one pass (numpy objects pass through)."""
    if any(_is_dask(o) for o in objs):
        import dask

        return tuple(dask.compute(*objs))
    return objs


def _uses_observed(spec: Any) -> bool:
    if isinstance(spec, str):
        return spec == "observed"
    if isinstance(spec, Mapping):
        return any(isinstance(v, str) and v == "observed" for v in spec.values())
    return False


def _dim_index(da: xr.DataArray, dim: str, what: str) -> pd.Index:
    if dim not in da.indexes:
        raise DataError(f"{what} dimension {dim!r} has no coordinate labels; assign them first, e.g. "
                        f"da.assign_coords({dim}=[...])")
    idx = da.indexes[dim]
    if idx.has_duplicates:
        raise DataError(f"the coordinate labels of {what} dimension {dim!r} repeat; each label must appear once")
    return idx


class ArrayDPTree(TreeDoor):
    """Counts in an ``xarray.DataArray`` placed on a public tree; what ``da.dptree(...)`` returns.

    Same interface as :class:`~hierdp.frontends.pandas.DPTree` (``release``,
    ``true_counts``, ``out_of_domain``, ``tree``, ``cells``); the counts are pre-aggregated
    (one individual per unit of count, in one cell of one leaf).
    """

    _accessor = "da"

    def __init__(self, da: xr.DataArray, domains: Any = None, *, levels: Sequence[str] | None = None,
                 cells: Mapping[str, Any] | None = None, unknown: str = "raise", root: str = "total",
                 spent: list[dict[str, Any]] | None = None) -> None:
        if not isinstance(da, xr.DataArray):
            raise DataError(f"expected an xarray DataArray, got {type(da).__name__}")
        name = "count" if da.name is None else str(da.name)
        dt = da.dtype
        if not np.issubdtype(dt, np.number) or np.issubdtype(dt, np.bool_) or np.issubdtype(dt, np.complexfloating):
            raise DataError(f"count variable {name!r} must hold non-negative integers, got dtype {dt}")
        cells = dict(cells or {})
        level_list, stack_dim = self._layout(da, levels, cells)
        self._how_rows_count((), level_list, root, count=name, unit=None, max_contributions=None, unknown=unknown,
                             spent=spent)
        self._stack_dim = stack_dim
        level_dims = [stack_dim] if stack_dim is not None else list(level_list)
        cell_dims = [d for d in da.dims if d not in level_dims]
        undeclared = [d for d in cell_dims if d not in cells]
        if undeclared:
            raise HierarchyError(f"dimension {undeclared[0]!r} is neither a level nor a declared cell dimension: "
                                 f"declare it, e.g. cells={{{undeclared[0]!r}: [...]}} (or 'observed' for its labels "
                                 "with counts), or sum it away first")
        extra = [c for c in cells if c not in cell_dims]
        if extra:
            raise DataError(expected_one_of("cell dimension", extra[0], [str(d) for d in cell_dims]).replace(
                "unknown cell dimension", "missing cell dimension"))
        order = list(cells)  # the declared order is the row-major order of the k cells
        arr = da.transpose(*level_dims, *order)
        self._paths = self._path_frame(arr, level_list, stack_dim)
        self._cell_labels = {d: _dim_index(arr, d, "cell") for d in order}
        P = len(self._paths)
        K = int(np.prod([len(ix) for ix in self._cell_labels.values()]))
        data = arr.data
        self._A = data.reshape(P, K)
        observed_levels, observed_cells = _uses_observed(domains), _uses_observed(cells)
        present_rows = present_cells = None
        if observed_levels or observed_cells:
            isnan = np.isnan(self._A) if np.issubdtype(dt, np.floating) else None
            if isnan is None:
                present_rows = np.ones(P, bool)
                present_cells = {d: np.ones(len(ix), bool) for d, ix in self._cell_labels.items()}
            else:
                full = isnan.reshape((P, *(len(ix) for ix in self._cell_labels.values())))
                rows = ~isnan.all(axis=1)
                per_cell = [~full.all(axis=tuple(a for a in range(full.ndim) if a != i + 1))
                            for i in range(len(order))]
                computed = _compute(rows, *per_cell)
                present_rows = np.asarray(computed[0])
                present_cells = {d: np.asarray(m) for d, m in zip(order, computed[1:])}
        source = self._paths[present_rows] if observed_levels else self._paths
        self._structure = Declared(self.levels, domains, root=root).decompose(source)
        self.cells = resolve_cells(cells, levels=self.levels, root=root,
                                   observed=lambda d: self._cell_labels[d][present_cells[d]])

    # -- layout --------------------------------------------------------------------------
    @staticmethod
    def _layout(da: xr.DataArray, levels: Sequence[str] | None,
                cells: Mapping[str, Any]) -> tuple[list[str], str | None]:
        """The levels and the stacked dimension (``None``: one dimension per level)."""
        stacked = [d for d in da.dims if isinstance(da.indexes.get(d), pd.MultiIndex)]
        if levels is None:
            if len(stacked) > 1:
                raise DataError(f"dimensions {stacked} are all stacked (MultiIndex); pass levels=[...] to say which "
                                "one holds the levels")
            if stacked:
                names = list(da.indexes[stacked[0]].names)
                if any(n is None for n in names):
                    raise DataError(f"the MultiIndex of {stacked[0]!r} must name its levels")
                return [str(n) for n in names], str(stacked[0])
            return [str(d) for d in da.dims if d not in cells], None
        levels = list(levels)
        for d in stacked:
            if list(da.indexes[d].names) == levels:
                return levels, str(d)
        for lv in levels:
            if lv not in da.dims:
                raise DataError(expected_one_of("level dimension", lv, [str(d) for d in da.dims]).replace(
                    "unknown level dimension", "missing level dimension"))
        return levels, None

    @staticmethod
    def _path_frame(arr: xr.DataArray, levels: list[str], stack_dim: str | None) -> pd.DataFrame:
        """The label path of each row of the (paths, cells) matrix, row-major like ``reshape``."""
        if stack_dim is not None:
            mi = arr.indexes[stack_dim]
            if mi.has_duplicates:
                raise DataError(f"the stacked dimension {stack_dim!r} lists a path more than once; each path once")
            return pd.DataFrame({lv: mi.get_level_values(lv) for lv in levels})
        idxs = [_dim_index(arr, lv, "level") for lv in levels]
        grids = np.indices([len(ix) for ix in idxs]).reshape(len(idxs), -1) if idxs else np.zeros((0, 1), np.int64)
        return pd.DataFrame({lv: ix.take(g) for lv, ix, g in zip(levels, idxs, grids)})

    # -- counting --------------------------------------------------------------------------
    def _cell_targets(self) -> np.ndarray:
        """For each column of the array's (paths, cells) matrix, its flat cell in the declared
        domains (row-major), -1 where a label is outside its cell domain."""
        flat = np.zeros(1, np.int64)
        ok = np.ones(1, bool)
        for d, labels in self._cell_labels.items():
            dom = self.cells[d]
            codes = np.asarray(dom.get_indexer(labels), np.int64)
            flat = (flat[:, None] * len(dom) + np.maximum(codes, 0)[None, :]).ravel()
            ok = (ok[:, None] & (codes >= 0)[None, :]).ravel()
        return np.where(ok, flat, -1)

    def _reduce(self) -> dict[str, Any]:
        """Everything the release needs from the (possibly Dask-backed) array, computed once:
        the in-domain counts, which out-of-domain rows/columns hold counts, and the checks."""
        A = self._A
        node, bad_row, _ = self._structure.locate(self._paths)  # coordinates only, no data read
        target = self._cell_targets()
        row_ok, col_ok = ~bad_row, target >= 0
        floating = np.issubdtype(A.dtype, np.floating)
        with np.errstate(invalid="ignore"):
            clean = np.where(np.isfinite(A), A, 0.0) if floating else A  # NaN (no record) = 0; inf checked below
            ints = clean.astype(np.int64)  # lazy for Dask; refused below unless exact
        checks = [clean.min() < 0 if A.size else False, np.isinf(A).any() if floating else False,
                  (ints != clean).any() if floating and A.size else False, clean.max() if A.size else 0,
                  clean.sum(dtype=np.float64) if A.size else 0.0]
        good = ints if row_ok.all() else ints[row_ok]
        sub = good if col_ok.all() else good[:, col_ok]
        nz_bad_rows = ints[bad_row] != 0 if bad_row.any() else np.zeros((0, A.shape[1]), bool)
        nz_bad_cols = good[:, ~col_ok] != 0 if (~col_ok).any() else np.zeros((len(good), 0), bool)
        # the out-of-domain entries with a count: the rows of out_of_domain()'s long table
        n_bad = nz_bad_rows.sum() + nz_bad_cols.sum()
        sub, nz_rows, nz_cols, n_bad, neg, inf, frac, top, total = _compute(sub, nz_bad_rows.any(axis=1),
                                                                    nz_bad_cols.any(axis=0), n_bad, *checks)
        return {"node": node, "bad_row": bad_row, "target": target, "row_ok": row_ok, "col_ok": col_ok,
                "sub": np.asarray(sub), "nz_rows": np.asarray(nz_rows, bool), "nz_cols": np.asarray(nz_cols, bool),
                "n_bad": int(n_bad), "neg": bool(neg), "inf": bool(inf), "frac": bool(frac), "top": top,
                "total": float(total)}

    def _problems(self, r: dict[str, Any]) -> list[str]:
        """Kinds of out-of-domain counts (naming levels and cell dimensions, never labels)."""
        problems: list[str] = []
        if r["nz_rows"].any():
            bad_paths = self._paths[r["bad_row"]][r["nz_rows"]]
            problems += self._structure.locate(bad_paths)[2]
        if r["nz_cols"].any():
            cols = np.flatnonzero(~r["col_ok"])[r["nz_cols"]]
            sizes = [len(ix) for ix in self._cell_labels.values()]
            per_dim = np.unravel_index(cols, sizes)
            for (d, labels), pos in zip(self._cell_labels.items(), per_dim):
                if (self.cells[d].get_indexer(labels[pos]) < 0).any():
                    problems.append(f"{d!r} values outside the declared cell domain")
        return problems

    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (n,) or (n, k), external order, and private notes. Reads private data.

        Parameters
        ----------
        rng : RandomSource, optional
            Unused: an array of counts has no privacy-unit column, so no contribution bound
            is drawn (kept for the door's common signature).

        Returns
        -------
        (numpy.ndarray, dict)
            NON-PRIVATE: the exact counts ``(n,)`` or ``(n, k)``, and private notes (e.g.
            ``rows_dropped_out_of_domain``). Never publish them.
        """
        r = self._reduce()
        name = self.count
        if r["neg"]:
            raise DataError(f"count variable {name!r} has negative counts; counts must be >= 0")
        if not r["inf"]:  # before the whole-number check: int64 cannot even hold a float above 2**63
            top = r["top"]
            top = int(top) if isinstance(top, (int, np.integer)) else float(top)
            rules.enforce(rules.value_range_problem(top, f"a count in variable {name!r}"), DataError)
            # as pandas: the total stays within 2**53, so no int64 sum wraps around (the float
            # sum errs by far less than the margin to 2**63; the release checks nodes exactly)
            rules.enforce(rules.value_range_problem(r["total"], "the total of the counts"), DataError)
        if r["inf"] or r["frac"]:
            raise DataError(f"count variable {name!r} has non-integer counts; counts must be whole numbers")
        notes: dict[str, Any] = {}
        problems = self._problems(r)
        if problems:
            if self.unknown == "raise":
                raise domain_error(problems, accessor="da")
            notes["rows_dropped_out_of_domain"] = r["n_bad"]
        vals = r["sub"]  # int64, in-domain paths x in-domain cells
        k = int(np.prod(cell_sizes(self.cells))) if self.cells else 1
        out = np.zeros((self._structure.n_ext, k), np.int64)
        rows = r["node"][r["row_ok"]]
        cols = r["target"][r["col_ok"]]
        unique_rows = np.unique(rows).size == rows.size
        if unique_rows and np.array_equal(cols, np.arange(k)):
            out[rows] = vals  # the usual case: every cell label declared, in order
        else:
            placed = np.zeros((len(rows), k), np.int64)
            placed[:, cols] = vals  # distinct labels map to distinct cells
            if unique_rows:
                out[rows] = placed
            else:
                np.add.at(out, rows, placed)
        values = leaf_counts_to_nodes(self._structure.tree, out if self.cells else out[:, 0])
        return values, notes

    def out_of_domain(self) -> pd.DataFrame:
        """NON-PRIVATE diagnostics: the (path, cell) entries with nonzero counts outside the
        declared domains, long form (level columns, cell columns, count). Never publish them.

        Returns
        -------
        pandas.DataFrame
            NON-PRIVATE: one row per out-of-domain entry with a nonzero count.
        """
        r = self._reduce()
        A = self._A
        sizes = [len(ix) for ix in self._cell_labels.values()]
        parts = []
        bad_rows = np.flatnonzero(r["bad_row"])[r["nz_rows"]]
        bad_cols = np.flatnonzero(~r["col_ok"])[r["nz_cols"]]
        for rows, cols in ((bad_rows, np.arange(A.shape[1])), (np.flatnonzero(r["row_ok"]), bad_cols)):
            if len(rows) == 0 or len(cols) == 0:
                continue
            block = np.asarray(_compute(A[rows][:, cols])[0])
            rr, cc = np.nonzero(np.nan_to_num(block, nan=0.0))
            frame = self._paths.iloc[rows[rr]].reset_index(drop=True)
            for (d, labels), pos in zip(self._cell_labels.items(), np.unravel_index(cols[cc], sizes)):
                frame[d] = labels[pos]
            frame[self.count] = block[rr, cc]
            parts.append(frame)
        cols_out = [*self.levels, *self._cell_labels, self.count]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols_out)


@xr.register_dataarray_accessor("dptree")
class DPTreeDataArrayAccessor:
    """``da.dptree(domains, levels=None, cells=None, unknown="raise", root="total")``.

    ``levels`` defaults to the names of the one stacked (MultiIndex) dimension, else to
    the dimensions not declared in ``cells`` (in array order, top-down).
    """

    def __init__(self, obj: xr.DataArray) -> None:
        self._obj = obj
        self._spent = releases_of(obj)

    @suggest_keywords("da.dptree()")
    def __call__(self, domains: Any = None, *, levels: Sequence[str] | None = None,
                 cells: Mapping[str, Any] | None = None, unknown: str = "raise", root: str = "total") -> ArrayDPTree:
        """Place this array's counts on a public tree: ``da.dptree(domains, levels=[...])``.

        Parameters
        ----------
        domains : mapping, DataFrame, "observed" or None, optional
            The public structure, as for ``df.dptree`` (:class:`DPTreeFrameAccessor
            <hierdp.frontends.pandas.DPTreeFrameAccessor>`); ``"observed"`` takes the
            coordinate labels, an explicit assertion that they are public.
        levels : sequence of str, optional
            The dimensions (or stacked index levels) naming each count's path, top-down.
        cells : mapping, optional
            The dimensions that are histogram cells per node: ``{dim: labels}`` (or
            ``"observed"``).
        unknown : {"raise", "drop"}, default "raise"
            Counts outside the declared domains: refuse (the error names the level, never
            the value) or drop them (the ledger says counts may have been dropped, not how
            many).
        root : str, default "total"
            The name of the root level.

        Returns
        -------
        ArrayDPTree
            The door: ``.release(epsilon=...)``, ``.tree`` and the NON-PRIVATE diagnostics
            ``.true_counts()`` and ``.out_of_domain()``.

        Examples
        --------
        >>> import numpy as np, xarray as xr, hierdp
        >>> da = xr.DataArray(np.array([3, 1, 2]), dims=["state"], coords={"state": ["A", "B", "C"]})
        >>> da.dptree("observed").tree.n_nodes
        4
        """
        return ArrayDPTree(self._obj, domains, levels=levels, cells=cells, unknown=unknown, root=root,
                           spent=self._spent)


@xr.register_dataset_accessor("dptree")
class DPTreeDatasetAccessor:
    """``ds.dptree(domains, count="n", levels=None, cells=None, ...)``: the counts are the
    variable ``count`` (optional when the Dataset holds one data variable)."""

    def __init__(self, obj: xr.Dataset) -> None:
        self._obj = obj
        self._spent = releases_of(obj)

    @suggest_keywords("ds.dptree()")
    def __call__(self, domains: Any = None, *, count: str | None = None, levels: Sequence[str] | None = None,
                 cells: Mapping[str, Any] | None = None, unknown: str = "raise", root: str = "total") -> ArrayDPTree:
        """Place the counts of the variable ``count`` on a public tree, as
        :class:`DPTreeDataArrayAccessor` does for a DataArray.

        Parameters
        ----------
        domains : mapping, DataFrame, "observed" or None, optional
            The public structure, as for ``da.dptree``.
        count : str, optional
            The data variable holding the counts (optional when there is only one).
        levels, cells
            As for ``da.dptree``.
        unknown : {"raise", "drop"}, default "raise"
            Counts outside the declared domains: refuse (the error names the level, never
            the value) or drop them (the ledger says counts may have been dropped, not how
            many).
        root : str, default "total"
            The name of the root level.

        Returns
        -------
        ArrayDPTree
            The door, as ``da.dptree`` returns.
        """
        ds = self._obj
        names = [str(v) for v in ds.data_vars]
        if count is None:
            if len(names) != 1:
                raise DataError(f"the Dataset holds {len(names)} data variables; name the counts with count=... "
                                f"(one of {', '.join(map(repr, sorted(names)))})")
            count = names[0]
        if count not in ds.data_vars:
            raise DataError(expected_one_of("count variable", count, names).replace(
                "unknown count variable", "missing count variable"))
        return ArrayDPTree(ds[count], domains, levels=levels, cells=cells, unknown=unknown, root=root,
                           spent=self._spent)


def _dataarray_door(data: Any, **keywords: Any) -> ArrayDPTree:
    return cast(ArrayDPTree, data.dptree(**keywords))


register_door("xarray.DataArray", lambda data: isinstance(data, xr.DataArray), _dataarray_door)
register_door("xarray.Dataset", lambda data: isinstance(data, xr.Dataset), _dataarray_door)
