"""The pandas front-end: ``.dptree`` on DataFrames and Series, and :class:`DPTree`.

``df.dptree(levels=[...], domains=...)`` and, for the output of
``df.groupby(levels).size()``, ``series.dptree(domains=...)`` (the MultiIndex names are
the levels, the values the counts). The structure comes from the ``declared``
decomposition; rows are counted by :mod:`hierdp.frontends.counting`. The accessor only
stores the object; everything is validated when it is called (conventions: validation in
methods, not in ``__init__``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp.accounting.session import Session
from hierdp.decompositions.declared import Declared, check_text
from hierdp.errors import DataError
from hierdp.frontends._cells import cell_codes, resolve_cells
from hierdp.frontends._contributions import bounding_key, check_max_contributions
from hierdp.frontends.base import (
    PLAN_DEFAULT,
    RELEASES_BY_OBJECT,
    record_release,
    register_door,
    releases_of,
    suggest_keywords,
)
from hierdp.frontends.counting import check_counts, count_cells, count_rows
from hierdp.frontends.points import PointsResult, release_points
from hierdp.frontends.sequences import SequenceResult, release_sequences
from hierdp.frontends.taxonomy import RegionsResult, release_mixed
from hierdp.frontends.tree_door import TreeDoor
from hierdp.rng import make_rng
from hierdp.tree import Tree

__all__ = ["DPTree", "DPTreeFrameAccessor", "DPTreeSeriesAccessor"]

#: the releases of each data object (kept under its older name; see base.releases_of)
_SPENT = RELEASES_BY_OBJECT


class DPTree(TreeDoor):
    """Private data placed on a public tree; what ``df.dptree(...)`` returns.

    Holds the frame (not copied), the declared structure and how rows count. Building it
    reads the data only to check the columns and the count column, and for levels whose
    domain is declared ``"observed"``; counts are computed at :meth:`release` (or by the
    non-private :meth:`true_counts`).
    """

    def __init__(
        self,
        df: pd.DataFrame,
        levels: Sequence[str],
        domains: Any = None,
        *,
        count: str | None = None,
        unit: str | None = None,
        max_contributions: int | None = None,
        unknown: str = "raise",
        root: str = "total",
        spent: list[dict[str, Any]] | None = None,
        cells: Mapping[str, Any] | None = None,
        count_text: str | None = None,
    ) -> None:
        if not isinstance(df, pd.DataFrame):
            raise DataError(f"expected a pandas DataFrame, got {type(df).__name__}")
        self._how_rows_count(df.columns, levels, root, count=count, unit=unit, max_contributions=max_contributions,
                             unknown=unknown, spent=spent, count_text=count_text)
        self._df = df
        if count is not None:
            # a zero-count row (e.g. from groupby(observed=False)) is not an observation
            observed_rows = df[check_counts(df, count) != 0]
        else:
            observed_rows = df
        self._structure = Declared(self.levels, domains, root=root).decompose(observed_rows)
        self.cells = self._resolve_cells(observed_rows, cells, root)

    def _resolve_cells(self, df: pd.DataFrame, cells: Mapping[str, Any] | None, root: str) -> dict[str, pd.Index]:
        """The declared cell domains ``{column: pd.Index}`` (``{}`` without cells); see
        :mod:`hierdp.frontends._cells`."""
        for name in cells or {}:  # positions in the caller's frame (observed() below sees distinct values)
            if isinstance(name, str) and name in self._df.columns and self._df[name].dtype == object:
                check_text(self._df[name].to_numpy(), f"cell column {name!r}")
        return resolve_cells(cells, levels=self.levels, root=root, observed=lambda name: df[name].dropna().unique(),
                             columns=cast(Sequence[Any], df.columns))

    def node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private diagnostics. Reads private data.

        Parameters
        ----------
        rng : RandomSource, optional
            The randomness that picks the rows kept per unit (``max_contributions``).

        Returns
        -------
        (numpy.ndarray, dict)
            NON-PRIVATE: the exact counts ``(n,)`` or ``(n, k)``, and private notes.
        """
        df = self._df
        notes: dict[str, Any] = {}
        bound = None
        if self.unit is not None:  # bounded on the grouped rows: no copy of the records
            bound = (self.unit, check_max_contributions(self.max_contributions), bounding_key(rng or make_rng(None)))
        if self.cells:
            values, more = count_cells(self._structure, df, self.cells, count=self.count, unknown=self.unknown,
                                       bound=bound)
        else:
            values, more = count_rows(self._structure, df, count=self.count, unknown=self.unknown, bound=bound)
        notes.update(more)
        return values, notes

    def out_of_domain(self) -> pd.DataFrame:
        """NON-PRIVATE diagnostics: the rows of the data that fall outside the declared domains
        (or lack a level value), for fixing the domains. Never publish them.

        Returns
        -------
        pandas.DataFrame
            Those rows (a view of the data: private).
        """
        _, bad, _ = self._structure.locate(self._df)
        if self.cells:
            bad = bad | cell_codes(self.cells, self._df)[1]
        return self._df[bad]


@pd.api.extensions.register_dataframe_accessor("dptree")
class DPTreeFrameAccessor:
    """``df.dptree(levels, domains, count=None, unit=None, max_contributions=None, unknown="raise", cells=None)``;
    ``df.dptree.privtree(...)`` (points), ``df.dptree.suffix_tree(...)`` (sequences) and
    ``df.dptree.privtree_mixed(...)`` (numeric × categorical attributes)."""

    def __init__(self, obj: pd.DataFrame) -> None:
        self._obj = obj
        self._spent = releases_of(obj)

    @suggest_keywords("df.dptree()")
    def __call__(self, levels: Sequence[str], domains: Any = None, *, count: str | None = None,
                 unit: str | None = None, max_contributions: int | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None) -> DPTree:
        """Place this frame's rows on a public tree: ``df.dptree(levels=[...], domains=...)``.

        Parameters
        ----------
        levels : sequence of str
            The columns naming each row's path, top-down (``["state", "county", "tract"]``).
        domains : mapping, DataFrame, "observed" or None, optional
            The public structure: per level a list of labels (top level) or
            ``{parent: [children]}``, or one DataFrame of paths (one column per level, e.g. a
            published geography file). ``"observed"`` (for a level or all) takes the labels
            seen in the data, an explicit assertion that they are public.
        count : str, optional
            A column of non-negative integer counts per row (aggregated input); default:
            each row counts 1.
        unit : str, optional
            The column identifying the privacy unit (e.g. a person id) when one unit may have
            several rows; with ``max_contributions``.
        max_contributions : int, optional
            Rows kept per ``unit`` (the others are dropped at random); the sensitivity scales
            with it.
        unknown : {"raise", "drop"}, default "raise"
            Rows outside the declared domains: refuse (the error names the level, never the
            value) or drop them (the ledger says rows may have been dropped, not how many).
        root : str, default "total"
            The name of the root level.
        cells : mapping, optional
            Histogram cells per node: ``{column: [labels]}`` (or ``"observed"``); the release
            then counts ``(node, cell)`` pairs.

        Returns
        -------
        DPTree
            The door: ``.release(epsilon=...)``, ``.tree``, and the NON-PRIVATE diagnostics
            ``.true_counts()`` and ``.out_of_domain()``.

        Examples
        --------
        >>> import pandas as pd, hierdp
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> door = df.dptree(levels=["state", "county"], domains={"state": ["A", "B"],
        ...                  "county": {"A": ["x", "y"], "B": ["z"]}})
        >>> door.tree.n_nodes
        6
        """
        return DPTree(self._obj, levels, domains, count=count, unit=unit, max_contributions=max_contributions,
                      unknown=unknown, root=root, spent=self._spent, cells=cells)

    def privtree(self, columns: Sequence[str], bounds: Any, epsilon: float | None = None, *,
                 delta: float | None = None, rho: float | None = None, session: Session | None = None,
                 seed: int | None = None, neighbours: str = "add_remove", invariants: Any = None,
                 postprocess: Any = PLAN_DEFAULT, epsilon_share: float | None = None,
                 max_contributions: int | None = None, method: str = "privtree", **params: Any) -> PointsResult:
        """A private spatial decomposition of the points in ``columns`` inside the public
        ``bounds`` and its region counts: :func:`hierdp.frontends.points.release_points`
        (``method="privtree"`` by default; ``"simpletree"`` and ``"grid"`` for baselines).

        PrivTree (Zhang, Xiao & Xie 2016, Alg. 2 with the biased, floored count of Eq. 8)
        splits a region where its noisy count is high, with no height limit.

        Parameters
        ----------
        columns : sequence of str
            The numeric columns of the points (two for a map).
        bounds : sequence of (low, high)
            The public box, one pair per column; points outside it are refused.
        epsilon, delta, rho : float, optional
            The total privacy loss, as in :func:`hierdp.release` (structure and counts).
        session : Session, optional
            Draw the spend from this :class:`hierdp.Session`.
        seed : int, optional
            Reproducible noise for tests (NOT FOR PUBLICATION).
        neighbours, invariants : optional
            Only ``"add_remove"`` and no invariants: the regions are chosen privately.
        postprocess : str, sequence or None, optional
            Post-processing of the region counts (default ``["blue"]``).
        epsilon_share : float, optional
            The share of the total that chooses the regions (default 0.5).
        max_contributions : int, optional
            Points one privacy unit may contribute.
        method : {"privtree", "simpletree", "grid"}, default "privtree"
            The decomposition.
        **params
            The method's parameters (e.g. ``theta``, ``max_depth`` for PrivTree).

        Returns
        -------
        PointsResult
            The regions' estimates and ledger; ``.query(lows, highs)`` answers range counts,
            :func:`hierdp.plot.decomposition` draws the regions.

        Examples
        --------
        >>> import numpy as np, pandas as pd, hierdp, warnings
        >>> pts = pd.DataFrame(np.random.default_rng(0).random((2000, 2)), columns=["x", "y"])
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        ...     r = pts.dptree.privtree(["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1)
        >>> r.ledger.guarantee
        'pure'
        """
        result = release_points(self._obj, columns, bounds, epsilon=epsilon, delta=delta, rho=rho, session=session,
                                seed=seed, neighbours=neighbours, invariants=invariants, postprocess=postprocess,
                                epsilon_share=epsilon_share, max_contributions=max_contributions, method=method,
                                _door="df.dptree.privtree()", **params)
        record_release(self._spent, result.ledger)
        return result

    def suffix_tree(self, column: str, epsilon: float | None = None, max_length: int | None = None,
                    alphabet: Any = None, *, delta: float | None = None, rho: float | None = None,
                    session: Session | None = None, seed: int | None = None, neighbours: str = "add_remove",
                    invariants: Any = None, postprocess: Any = PLAN_DEFAULT, epsilon_share: float | None = None,
                    **params: Any) -> SequenceResult:
        """A private prediction suffix tree over the sequences in ``column`` (strings or
        lists of symbols; one row = one sequence = one privacy unit) with ``alphabet`` declared
        (a list) or ``"observed"`` and l⊤ = ``max_length``:
        :func:`hierdp.frontends.sequences.release_sequences`.

        Parameters
        ----------
        column : str
            The column of sequences.
        epsilon, delta, rho : float, optional
            The total privacy loss, as in :func:`hierdp.release`.
        max_length : int, optional
            l⊤ of the prediction suffix tree (Zhang, Xiao & Xie 2016, §4.2): a sequence
            makes at most l⊤ predictions; longer ones are cut.
        alphabet : list or "observed", optional
            The public symbols; ``"observed"`` asserts the symbols seen are public.
        session : Session, optional
            Draw the spend from this :class:`hierdp.Session`.
        seed : int, optional
            Reproducible noise for tests (NOT FOR PUBLICATION).
        neighbours, invariants : optional
            Only ``"add_remove"`` and no invariants: the tree is chosen privately.
        postprocess : str, sequence or None, optional
            Post-processing of the node counts.
        epsilon_share : float, optional
            The share of the total that chooses the tree (default 1/β, §4.2).
        **params
            Parameters of the suffix-tree decomposition.

        Returns
        -------
        SequenceResult
            The suffix tree's estimates and ledger, with sampling and frequent-pattern
            queries (see docs/sequences.md).
        """
        result = release_sequences(self._obj, column, epsilon=epsilon, max_length=max_length, alphabet=alphabet,
                                   delta=delta, rho=rho, session=session, seed=seed, neighbours=neighbours,
                                   invariants=invariants, postprocess=postprocess, epsilon_share=epsilon_share,
                                   _door="df.dptree.suffix_tree()", **params)
        record_release(self._spent, result.ledger)
        return result

    def privtree_mixed(self, numeric: Mapping[str, Any] | None = None, categorical: Mapping[str, Tree] | None = None,
                       epsilon: float | None = None, *, delta: float | None = None, rho: float | None = None,
                       session: Session | None = None, seed: int | None = None, neighbours: str = "add_remove",
                       invariants: Any = None, postprocess: Any = PLAN_DEFAULT, epsilon_share: float | None = None,
                       max_contributions: int | None = None, **params: Any) -> RegionsResult:
        """PrivTree on numeric × categorical columns (Zhang et al. 2016, §3.5) and the region
        counts: :func:`hierdp.frontends.taxonomy.release_mixed` on this frame.

        Parameters
        ----------
        numeric : mapping, optional
            ``{column: (low, high)}``: the numeric attributes and their public bounds.
        categorical : mapping, optional
            ``{column: Tree}``: the categorical attributes and their public taxonomies.
        epsilon, delta, rho : float, optional
            The total privacy loss, as in :func:`hierdp.release`.
        session : Session, optional
            Draw the spend from this :class:`hierdp.Session`.
        seed : int, optional
            Reproducible noise for tests (NOT FOR PUBLICATION).
        neighbours, invariants : optional
            Only ``"add_remove"`` and no invariants: the regions are chosen privately.
        postprocess : str, sequence or None, optional
            Post-processing of the region counts.
        epsilon_share : float, optional
            The share of the total that chooses the regions.
        max_contributions : int, optional
            Rows one privacy unit may contribute.
        **params
            PrivTree's parameters.

        Returns
        -------
        RegionsResult
            The regions' estimates and ledger.
        """
        result = release_mixed(self._obj, numeric, categorical, epsilon=epsilon, delta=delta, rho=rho,
                               session=session, seed=seed, neighbours=neighbours, invariants=invariants,
                               postprocess=postprocess, epsilon_share=epsilon_share,
                               max_contributions=max_contributions, _door="df.dptree.privtree_mixed()", **params)
        record_release(self._spent, result.ledger)
        return result


@pd.api.extensions.register_series_accessor("dptree")
class DPTreeSeriesAccessor:
    """``counts.dptree(domains=...)`` for a Series of counts indexed by the levels."""

    def __init__(self, obj: pd.Series) -> None:
        self._obj = obj
        self._spent = releases_of(obj)

    @suggest_keywords("counts.dptree()")
    def __call__(self, domains: Any = None, *, levels: Sequence[str] | None = None, unknown: str = "raise",
                 root: str = "total", cells: Mapping[str, Any] | None = None) -> DPTree:
        """Place counts already grouped by level on a public tree: ``counts.dptree(domains=...)``.

        Parameters
        ----------
        domains : mapping, DataFrame, "observed" or None, optional
            The public structure, as in ``df.dptree``.
        levels : sequence of str, optional
            The index names that are levels (default: all but the ``cells``), top-down.
        unknown : {"raise", "drop"}, default "raise"
            Index paths outside the declared domains: refuse or drop.
        root : str, default "total"
            The name of the root level.
        cells : mapping, optional
            Index names that are histogram cells, with their labels.

        Returns
        -------
        DPTree
            The door, as ``df.dptree(...)`` returns it (the Series' values are the counts).

        Examples
        --------
        >>> import pandas as pd, hierdp
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> counts = df.groupby(["state", "county"]).size()
        >>> counts.dptree(domains="observed").tree.n_nodes
        6
        """
        s = self._obj
        names = [cast(str, n) for n in s.index.names]
        if any(n is None for n in names):
            raise DataError("the Series index must name its levels (e.g. the result of df.groupby([...]).size())")
        if levels is None:
            levels = [n for n in names if not cells or n not in cells]
        elif list(levels) + [n for n in names if n not in levels] != names or sorted(
                n for n in names if n not in levels) != sorted(cells or ()):
            raise DataError(f"levels {list(levels)} (and cells {list(cells or ())}) do not match the index names "
                            f"{names}: the index names the levels, top-down, then the cell dimensions")
        value_name = "count" if "count" not in names else "__count__"
        frame = s.rename(value_name).reset_index()
        # the ledger names the counts as the user has them: the Series, not the internal column
        text = f"the Series {s.name!r}" if s.name is not None else "the Series' values"
        return DPTree(frame, levels, domains, count=value_name, unknown=unknown, root=root, spent=self._spent,
                      cells=cells, count_text=text)


def _frame_door(data: Any, **keywords: Any) -> DPTree:
    levels = keywords.pop("levels", None)
    if levels is None:
        raise DataError("hierdp.dptree(DataFrame, ...) needs levels=[...] (the hierarchy columns, top-down)")
    return cast(DPTree, data.dptree(levels, **keywords))


register_door("pandas.DataFrame", lambda data: isinstance(data, pd.DataFrame), _frame_door)
register_door("pandas.Series", lambda data: isinstance(data, pd.Series), lambda data, **kw: data.dptree(**kw))
