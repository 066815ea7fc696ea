"""The outcome of a release: estimates, their uncertainty, the ledger, the tree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp.accounting.ledger import Ledger
from hierdp.accuracy import release_accuracy
from hierdp.postprocessors.base import Estimate
from hierdp.report import write_report
from hierdp.tree import Tree
from hierdp.uncertainty import DEFAULT_DRAWS, Intervals, release_intervals

__all__ = ["ReleaseResult"]


@dataclass
class ReleaseResult:
    """A private release.

    Attributes
    ----------
    tree : the public structure.
    estimate : post-processed values (external order) and their variances (``inf``
        where unknown, ``None`` when the chain does not track them).
    measurements : the raw noisy measurements and their noise variances.
    ledger : the privacy accounting (public, holds no true count).
    """

    tree: Tree
    estimate: Estimate
    measurements: Estimate
    ledger: Ledger
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def values(self) -> np.ndarray:
        """Released node values (external order)."""
        return self.estimate.values

    @property
    def std(self) -> np.ndarray | None:
        """Standard error of each released value (``None`` if not tracked)."""
        v = self.estimate.variance
        return None if v is None else np.sqrt(v)

    def _frame(self, noisy: bool) -> pd.DataFrame:
        tree = self.tree
        cols: dict[str, Any] = {}
        level_cat = pd.Categorical.from_codes(tree.internal.depth.astype(np.int64),
                                              categories=cast(Any, list(tree.level_names)), ordered=True)
        cols["level"] = level_cat
        cols.update(tree.label_columns())
        est = tree.to_internal(self.estimate.values)
        var = self._released_variance()
        noisy_vals = self._noisy_internal() if noisy else None
        if est.ndim == 1:
            cols["estimate"] = est
            cols["std"] = np.sqrt(var) if var is not None else np.full(tree.n_nodes, np.nan)
            if "threshold" in self.estimate.info:  # public per-node thresholds (plan 'ghazi')
                cols["threshold"] = tree.to_internal(np.asarray(self.estimate.info["threshold"], dtype=np.float64))
            if noisy:
                cols["noisy"] = noisy_vals
            return self._with_note(pd.DataFrame(cols))
        # (n, k): one row per node and cell, one column per cell dimension (row-major cells)
        k = est.shape[1]
        base = pd.DataFrame(cols)
        rep = base.loc[base.index.repeat(k)].reset_index(drop=True)
        axes = _cell_axes(self.meta, k)
        if list(axes) == ["cell"] and isinstance(axes["cell"], pd.RangeIndex):
            rep["cell"] = np.tile(np.arange(k), tree.n_nodes)  # unlabelled cells: their position
        else:
            sizes = [len(ix) for ix in axes.values()]
            for i, (name, ix) in enumerate(axes.items()):
                inner = int(np.prod(sizes[i + 1:]))
                codes = np.tile(np.repeat(np.arange(len(ix)), inner), tree.n_nodes * int(np.prod(sizes[:i])))
                rep[name] = pd.Categorical.from_codes(codes, categories=ix)
        rep["estimate"] = est.reshape(-1)
        if var is None:
            rep["std"] = np.nan
        else:
            v = var if var.ndim == 2 else np.repeat(var[:, None], k, axis=1)
            rep["std"] = np.sqrt(v).reshape(-1)
        if noisy:
            rep["noisy"] = noisy_vals if isinstance(noisy_vals, pd.api.extensions.ExtensionArray) \
                else cast(np.ndarray, noisy_vals).reshape(-1)
        return self._with_note(rep)

    def _released_variance(self) -> np.ndarray | None:
        """The variance of each released value (internal order) as the frame and the Dataset
        show it. After a non-linear step (nonneg, round) the linear estimate's variance is not
        the error of the released value: only exactly known nodes (variance 0) keep theirs,
        the others are NaN (``to_frame(confidence=...)`` gives a conservative interval)."""
        if self.estimate.variance is None:
            return None
        var = np.asarray(self.tree.to_internal(self.estimate.variance))
        return var if self.estimate.linear else np.where(var == 0, 0.0, np.nan)

    def _with_note(self, frame: pd.DataFrame) -> pd.DataFrame:
        if self.estimate.variance is not None and not self.estimate.linear:
            frame.attrs["std"] = self._std_note
        return frame

    _std_note = ("empty: the chain ends in a non-linear step (e.g. nonneg, round), so the linear estimate's std is "
                 "not the released value's error; use to_frame(confidence=...) for intervals with their coverage")

    def _noisy_internal(self) -> np.ndarray | pd.arrays.IntegerArray:
        """Raw measurements (internal order), missing (NaN / <NA>) where a level was not measured."""
        tree = self.tree
        vals = tree.to_internal(self.measurements.values)
        var = self.measurements.variance
        unmeasured = np.zeros(tree.n_nodes, bool) if var is None else np.isinf(tree.to_internal(var))
        if unmeasured.ndim > 1:
            unmeasured = unmeasured.all(axis=1)
        mask = np.broadcast_to(unmeasured.reshape((-1,) + (1,) * (vals.ndim - 1)), vals.shape)
        if np.issubdtype(vals.dtype, np.integer):
            flat = pd.array(vals.reshape(-1), dtype="Int64")
            flat[mask.reshape(-1)] = pd.NA
            return flat  # 1-D: (n,) or the (n*k,) cells of the long frame
        out = np.where(mask, np.nan, vals.astype(np.float64))
        return out

    @cached_property
    def frame(self) -> pd.DataFrame:
        """Tidy table: one row per node (top level first), ``level``, the hierarchy columns
        (``<NA>`` below the node's level), ``estimate`` and ``std`` (and ``threshold``, the public
        τ_u above which a node's estimate is within the factor 1 ± α, for plan ``ghazi``)."""
        return self._frame(noisy=False)

    def to_frame(self, noisy: bool = False, confidence: float | None = None, *, draws: int = DEFAULT_DRAWS,
                 seed: int | None = None, nonlinear: str = "bound") -> pd.DataFrame:
        """:attr:`frame`, optionally with the raw ``noisy`` measurements and, with
        ``confidence=c``, ``ci_low``/``ci_high`` and the per-node ``ci_method``.

        The intervals come from the public noise law (:mod:`hierdp.uncertainty`): exact
        quantiles where a value is one measurement, simulation through the chain (``draws``
        noise vectors, O(draws·n)) for linear estimates; after ``nonneg``/``round`` a
        conservative bound (``nonlinear="bound"``: ``std`` is then empty, not the linear
        estimate's) or a parametric bootstrap (``"bootstrap"``: ``std`` is its RMSE).
        ``frame.attrs["uncertainty"]`` says which method and what coverage. Post-processing:
        no privacy cost.

        Parameters
        ----------
        noisy : bool, default False
            Add the ``noisy`` column: the raw measurements (missing where a level was not
            measured).
        confidence : float, optional
            Add ``ci_low``/``ci_high``/``ci_method`` at this level c in (0, 1); ``None`` (the
            default) adds no interval.
        draws, seed, nonlinear
            As for :meth:`intervals` (used only with ``confidence``).

        Returns
        -------
        pandas.DataFrame
            One row per node (per node and cell for a histogram release), top level first.

        Examples
        --------
        >>> import pandas as pd, hierdp, warnings
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # a seeded release warns: not for publication
        ...     r = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=0)
        >>> list(r.to_frame(noisy=True, confidence=0.9, seed=1).columns)
        ['level', 'state', 'county', 'estimate', 'std', 'noisy', 'ci_low', 'ci_high', 'ci_method']
        """
        frame = self._frame(noisy=noisy)
        if confidence is None:
            return frame
        iv = self.intervals(confidence, draws=draws, seed=seed, nonlinear=nonlinear)
        return self._add_intervals(frame, iv, float(confidence))

    def intervals(self, confidence: float | tuple[float, ...] = 0.9, *, draws: int = DEFAULT_DRAWS,
                  seed: int | None = None, randomize: bool = True, nonlinear: str = "bound") -> Intervals:
        """Confidence intervals of the released values (external order); see
        :func:`hierdp.uncertainty.release_intervals`. Post-processing: no privacy cost.

        The intervals come from the public noise law only: exact quantiles where a value is
        one measurement, simulation through the post-processing chain for a linear
        estimate (order statistics of ``draws`` simulated errors, coverage
        ``1 - 2j/(draws+1) >= c``), randomized for integer noise (Stevens 1950).

        Parameters
        ----------
        confidence : float or tuple of float, default 0.9
            One level c or several, each in (0, 1).
        draws : int, default 999
            R, the number of simulated noise vectors (cost O(R·n)); needs
            ``R >= 2/(1-c) - 1``.
        seed : int, optional
            Seed of the simulation (public noise only, no privacy role); ``None`` uses the
            secure source, or the release's own seed for a seeded release.
        randomize : bool, default True
            With integer noise, add a public U(-1/2, 1/2) so that coverage is exactly c;
            ``False`` gives deterministic, conservative intervals (coverage >= c).
        nonlinear : {"bound", "bootstrap"}, default "bound"
            After ``nonneg``/``round``: a conservative bound (coverage >= c) or a
            parametric bootstrap (coverage not guaranteed).

        Returns
        -------
        hierdp.uncertainty.Intervals
            ``low[c]``/``high[c]`` per level c, ``std``, the per-node ``method`` and a public
            ``summary``.

        Examples
        --------
        >>> import pandas as pd, hierdp, warnings
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # a seeded release warns: not for publication
        ...     r = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=0)
        >>> iv = r.intervals(0.9, seed=1)
        >>> sorted(iv.low), iv.low[0.9].shape
        ([0.9], (6,))
        >>> bool(((iv.low[0.9] <= r.values) & (r.values <= iv.high[0.9])).all())
        True
        """
        return release_intervals(self.tree, self.estimate, self.measurements, self.ledger,
                                 confidence=confidence, draws=draws, seed=seed, randomize=randomize,
                                 nonlinear=nonlinear)

    def accuracy(self, confidence: float = 0.9, *, repetitions: int = 100, by_size: bool = False,
                 seed: int | None = None) -> pd.DataFrame:
        """The accuracy of the released values per level, by post-processing alone.

        Computed by a parametric bootstrap, ``repetitions`` repetitions, of the release's
        noise law and post-processing, with the released values as the truth
        (:func:`hierdp.accuracy.release_accuracy`): fresh noise from the mechanism, budgets
        and sensitivities in the ledger is added to the released values on the measured
        nodes, the release's own chain (e.g. ``blue -> nonneg -> round``) runs on them, and
        the errors of each unit's total (a node's total over its cells) are summarised. It
        reads no true count: no privacy cost, and it may be published with the release.
        The returned frame's ``attrs["method"]`` says the same.

        Parameters
        ----------
        confidence : float, default 0.9
            ``moe`` is this quantile of the absolute error, in (0, 1).
        repetitions : int, default 100
            The number of simulated releases (cost: that many chain passes).
        by_size : bool, default False
            One row per level and size band of the released total (``size``: 0, 1-9,
            10-99, 100-999, 1000+) with at least one unit.
        seed : int, optional
            Seed of the simulated noise (public, no privacy role); ``None`` (the default)
            uses the secure source.

        Returns
        -------
        pandas.DataFrame
            ``level`` (and ``size``), ``units``, ``mae`` (mean absolute error of a unit's
            released total) and ``moe`` (margin of error at ``confidence``).

        Raises
        ------
        hierdp.errors.DataError
            When the release cannot be re-simulated (plan ``ghazi``, a structure built from
            the data, a chain whose parameters cannot be reproduced).

        Examples
        --------
        >>> import pandas as pd, hierdp, warnings
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # a seeded release warns: not for publication
        ...     r = df.dptree(levels=["state", "county"], domains="observed").release(
        ...         epsilon=1.0, seed=0, postprocess=["blue", "nonneg", "round"])
        >>> acc = r.accuracy(0.9, seed=1)
        >>> list(acc.columns), list(acc["level"])
        (['level', 'units', 'mae', 'moe'], ['total', 'state', 'county'])
        >>> acc.attrs["reads_true_counts"]
        False
        """
        return release_accuracy(self.tree, self.estimate, self.measurements, self.ledger, confidence=confidence,
                                repetitions=repetitions, by_size=by_size, seed=seed, meta=self.meta)

    def _add_intervals(self, frame: pd.DataFrame, iv: Intervals, c: float) -> pd.DataFrame:
        tree = self.tree
        lo, hi = tree.to_internal(iv.low[c]), tree.to_internal(iv.high[c])
        std = tree.to_internal(iv.std)
        method = np.asarray(tree.to_internal(iv.method))
        if lo.ndim == 2:  # the long frame of (n, k) cells: node-major
            method = np.repeat(method, lo.shape[1])
        frame["std"] = std.reshape(-1)
        frame["ci_low"] = lo.reshape(-1)
        frame["ci_high"] = hi.reshape(-1)
        frame["ci_method"] = pd.Categorical(method, categories=["exact", "simulation", "bound", "bootstrap",
                                                                "normal", "none"])
        frame.attrs["uncertainty"] = dict(iv.summary)
        return frame

    def to_xarray(self, noisy: bool = False) -> Any:
        """An ``xarray.Dataset`` with dimensions ``node`` and, for histograms, one per cell
        dimension (labelled; a single ``cell`` 0..k-1 when the release has no cell labels):
        ``estimate``, ``std`` (per node when shared by its cells), ``noisy`` on request, the
        level labels as coordinates along ``node`` and the ledger (JSON) in ``attrs["ledger"]``,
        with ``hierdp.release_id``, the version, time, trust model and accounting. After
        ``nonneg``/``round`` the ``std`` is :attr:`frame`'s: NaN but where exact.

        Parameters
        ----------
        noisy : bool, default False
            Add the ``noisy`` variable: the raw measurements (NaN where a level was not
            measured).

        Returns
        -------
        xarray.Dataset
            The release, its ledger and provenance in ``attrs`` (no true count).
        """
        import xarray as xr

        tree = self.tree
        est = tree.to_internal(self.estimate.values)
        var = self._released_variance()  # the frame's std: NaN after nonneg/round, not the linear one
        axes = {} if est.ndim == 1 else _cell_axes(self.meta, est.shape[1])
        shape = (tree.n_nodes, *(len(ix) for ix in axes.values()))
        dims = ("node", *axes)
        data: dict[str, Any] = {"estimate": (dims, est.reshape(shape))}
        if var is not None:
            if var.ndim == 1:
                data["std"] = (("node",), np.sqrt(var))
            else:
                data["std"] = (dims, np.sqrt(var).reshape(shape))
        if noisy:
            raw = self._noisy_internal()
            raw = raw.to_numpy(dtype=np.float64, na_value=np.nan) if isinstance(raw, pd.api.extensions.ExtensionArray) \
                else np.asarray(raw, dtype=np.float64)
            data["noisy"] = (dims, raw.reshape(shape))
        coords: dict[str, Any] = {"level": ("node", np.asarray(tree.level_names, dtype=object)[tree.internal.depth])}
        for name, col in tree.label_columns().items():
            coords[name] = ("node", np.asarray(pd.Series(col, dtype=object).where(pd.notna(col), None)))
        for name, ix in axes.items():
            coords[name] = (name, np.asarray(ix))
        ds = xr.Dataset(data, coords=coords)
        if "std" in ds and self.estimate.variance is not None and not self.estimate.linear:
            ds["std"].attrs["note"] = self._std_note
        ds.attrs["ledger"] = self.ledger.to_json()  # once (Parquet metadata, shared with pandas, says hierdp.ledger)
        ds.attrs["hierdp.release_id"] = self.ledger.release_id
        for key in ("hierdp_version", "created", "trust_model", "accounting"):
            ds.attrs[key] = getattr(self.ledger, key)
        return ds

    def report(self, path: str | Path, *, title: str | None = None, curator: str | None = None,
               intended_use: str | None = None, region: str | None = None,
               authors: Sequence[str] | None = None) -> Path:
        """Write the release report: ``.html`` gives one self-contained page (guarantee,
        invariants flagged as not protected, structure provenance, the budget per level and
        per query as recorded and as exact rationals, mechanism and seed status, the expected
        accuracy per level from the public noise law, plotted, the accuracy of the released
        values in words and by size (:meth:`accuracy`, simulated for releases of up to 250,000
        node-cells), the decomposition map of a points release, provenance); ``.yaml`` the
        same facts as a draft record of the OpenDP
        deployments registry. Nothing in it is computed from the true counts. Written
        atomically. Post-processing: no privacy cost.

        Parameters
        ----------
        path : the report file, ending in ``.html`` or ``.yaml``.
        title, curator, intended_use, region, authors : descriptive fields the ledger cannot
            know (the YAML record marks them to be completed when left out).

        Returns
        -------
        Path
            ``path``.

        Examples
        --------
        >>> import pathlib, tempfile, warnings, pandas as pd, hierdp
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # a seeded release warns: not for publication
        ...     r = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=0)
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> r.report(folder / "release.html").name
        'release.html'
        >>> record = r.report(folder / "release.yaml", curator="Statistics Office")
        >>> "Statistics Office" in record.read_text()
        True
        >>> import shutil; shutil.rmtree(folder)
        """
        return write_report(path, self.ledger, self, title=title, curator=curator, intended_use=intended_use,
                            region=region, authors=authors)

    def __repr__(self) -> str:
        L = self.ledger
        budget = f"ε={L.epsilon:g}" if L.epsilon is not None else f"ρ={L.rho:g}"
        flag = "" if L.for_publication else " [NOT FOR PUBLICATION]"
        return (f"<ReleaseResult: {self.tree.n_nodes:,} nodes, {budget}, {L.mechanism}, "
                f"post-processing {' -> '.join(L.postprocess) or 'none'}{flag}>")


def _cell_axes(meta: dict[str, Any], k: int) -> dict[str, pd.Index]:
    """The cell dimensions of an (n, k) release: ``meta["cells"]`` (``{name: labels}``,
    row-major, set by the front-ends) or one unlabelled ``cell`` dimension 0..k-1."""
    cells = meta.get("cells") or {}
    axes = {str(name): pd.Index(ix) for name, ix in cells.items()}
    if not axes or int(np.prod([len(ix) for ix in axes.values()])) != k:
        return {"cell": pd.RangeIndex(k)}
    return axes
