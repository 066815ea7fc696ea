"""The points front-end: private spatial decompositions of coordinates in a public box.

``points.dptree.privtree(columns=["x", "y"], bounds=[(x0, x1), (y0, y1)], epsilon=1.0)``
(or :func:`release_points` with ``method="simpletree"`` / ``"grid"``): the decomposition
spends ``structure_share`` of ε choosing the cells (a private output, recorded in the
ledger), the leaves are counted with the rest through the ``leaves`` plan (parallel
composition: the leaves are disjoint), and BLUE makes every internal count the sum of its
leaves. The result is a normal release (:class:`PointsResult`) whose ``frame`` has one row
per region and whose :meth:`PointsResult.query` answers axis-aligned range counts under
the uniformity assumption (Zhang et al. 2016, §2.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from hierdp import registry, rules
from hierdp._kernels.jit import numba as nb
from hierdp.accounting import pure_epsilon
from hierdp.accounting.session import Session
from hierdp.decompositions.privtree import SpatialStructure, as_points
from hierdp.errors import BudgetError, DataError, expected_one_of
from hierdp.frontends.base import (
    PLAN_DEFAULT,
    admit_private_structure,
    canonical_keywords,
    door_rng,
    release_path,
    take,
)
from hierdp.plans.leaves import Leaves
from hierdp.result import ReleaseResult

__all__ = ["PointsResult", "release_points", "range_counts", "query_structure"]

METHODS = ("privtree", "simpletree", "grid")


def _check_boxes(lows: Any, highs: Any, d: int) -> tuple[np.ndarray, np.ndarray]:
    lo = np.asarray(lows, dtype=np.float64)
    hi = np.asarray(highs, dtype=np.float64)
    if lo.ndim == 1:
        lo, hi = lo[None, :], hi[None, :] if hi.ndim == 1 else hi
    if lo.shape != hi.shape or lo.ndim != 2 or lo.shape[1] != d:
        raise DataError(f"lows and highs must both have shape (q, {d}), got {lo.shape} and {hi.shape}")
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise DataError("query bounds must be finite")
    return lo, hi


def query_structure(structure: SpatialStructure, leaf_values: np.ndarray, lows: Any, highs: Any,
                    *, max_pairs: int = 1 << 21) -> np.ndarray:
    """Range counts over ``[low, high]`` boxes from leaf values (``tree.leaves`` order).

    A node inside a box contributes its subtree sum, a leaf crossing the box the share of
    its value proportional to the overlapping volume (uniformity assumption, §2.2). The
    tree is descended one depth at a time for many (query, node) pairs at once, at most
    ``max_pairs`` per step (no Python loop per query or per node). A uniform grid is
    answered in closed form: the overlap shares factor over the dimensions.
    """
    tree = structure.tree
    qlo, qhi = _check_boxes(lows, highs, len(structure.columns))
    leaf_values = np.asarray(leaf_values, dtype=np.float64)
    if structure.method == "grid" and len(structure.columns) == 2 and tree.n_nodes > 1:
        return _grid_query(structure, leaf_values, qlo, qhi)
    sub = tree.aggregate(leaf_values)  # subtree sums, external order
    vol = np.prod(structure.highs - structure.lows, axis=1)
    nlo, nhi, first = structure.lows, structure.highs, structure.first_child
    n_children = tree.n_children
    out = np.zeros(qlo.shape[0])
    stack = [(np.arange(qlo.shape[0]), np.full(qlo.shape[0], tree.root, np.int64))]
    while stack:
        q, node = stack.pop()
        lo_q, hi_q, lo_n, hi_n = qlo[q], qhi[q], nlo[node], nhi[node]
        width = np.clip(np.minimum(hi_q, hi_n) - np.maximum(lo_q, lo_n), 0.0, None)
        overlap = np.prod(width, axis=1) > 0
        inside = np.all((lo_q <= lo_n) & (hi_q >= hi_n), axis=1)
        partial = overlap & ~inside
        leaf = partial & (first[node] < 0)
        share = inside.astype(np.float64)
        share[leaf] = np.prod(width[leaf], axis=1) / vol[node[leaf]]
        out += np.bincount(q, weights=sub[node] * share, minlength=out.size)
        go = np.flatnonzero(partial & ~leaf)
        nc = n_children[node[go]]
        chunk = np.cumsum(nc) // max_pairs  # expand at most ~max_pairs children at a time
        for c in np.unique(chunk):
            sel = go[chunk == c]
            k = n_children[node[sel]]
            q2 = np.repeat(q[sel], k)
            start = np.repeat(first[node[sel]] - np.cumsum(k) + k, k)
            stack.append((q2, start + np.arange(q2.size)))
    return out


def _grid_query(structure: SpatialStructure, leaf_values: np.ndarray, qlo: np.ndarray,
                qhi: np.ndarray, batch: int = 2048) -> np.ndarray:
    """Uniform grid (m × m cells under the root): answer = wx · E · wyᵀ with the per-axis
    overlap shares wx, wy of every cell row/column."""
    m = int(structure.params["m"])
    est = leaf_values.reshape(m, m)  # cells in ravel order (x index major), as located
    lo, hi = structure.bounds[:, 0], structure.bounds[:, 1]
    edges = [lo[j] + (hi[j] - lo[j]) * np.arange(m + 1) / m for j in range(2)]
    out = np.empty(qlo.shape[0])
    for a in range(0, qlo.shape[0], batch):
        w = []
        for j in range(2):
            e0, e1 = edges[j][:-1], edges[j][1:]
            ov = np.clip(np.minimum(qhi[a:a + batch, j, None], e1) - np.maximum(qlo[a:a + batch, j, None], e0), 0, None)
            w.append(ov / (e1 - e0))
        out[a:a + batch] = np.einsum("qi,qi->q", w[0] @ est, w[1])
    return out


@nb.njit(cache=True, nogil=True)
def _dominance(py: np.ndarray, cx: np.ndarray, cy: np.ndarray, n_y: int) -> np.ndarray:  # pragma: no cover - jit
    """Offline sweep with a Fenwick tree: for corners sorted by ``cx`` (points with x-rank
    below ``cx``), the number of points whose y-rank is at most ``cy``."""
    bit = np.zeros(n_y + 1, np.int64)
    out = np.zeros(cx.size, np.int64)
    i = 0
    for j in range(cx.size):
        while i < cx[j]:
            k = py[i]
            while k <= n_y:
                bit[k] += 1
                k += k & (-k)
            i += 1
        k = cy[j]
        acc = 0
        while k > 0:
            acc += bit[k]
            k -= k & (-k)
        out[j] = acc
    return out


def range_counts(points: np.ndarray, lows: Any, highs: Any) -> np.ndarray:
    """NON-PRIVATE exact counts of ``points`` (n, d) in each closed box ``[low, high]`` —
    for evaluation only. Two dimensions: inclusion-exclusion over four dominance counts
    (one sweep, O((n + q) log n)); other d: one vectorised pass per query."""
    pts = np.asarray(points, dtype=np.float64)
    lo, hi = _check_boxes(lows, highs, pts.shape[1])
    if pts.shape[1] != 2:
        order = np.argsort(pts[:, 0], kind="stable")
        p = pts[order]
        a = np.searchsorted(p[:, 0], lo[:, 0], side="left")
        b = np.searchsorted(p[:, 0], hi[:, 0], side="right")
        out = np.empty(lo.shape[0], np.int64)
        for i in range(lo.shape[0]):  # per query, vectorised over its slice of points
            s = p[a[i]:b[i]]
            out[i] = int(np.count_nonzero(np.all((s >= lo[i]) & (s <= hi[i]), axis=1)))
        return out
    order = np.argsort(pts[:, 0], kind="stable")
    xs = pts[order, 0]
    ys = np.sort(pts[:, 1])
    py = np.searchsorted(ys, pts[order, 1], side="right").astype(np.int64)  # y-rank, 1-based, ties share
    q = lo.shape[0]
    # corners: (x ≤ hi, y ≤ hi), (x < lo, y ≤ hi), (x ≤ hi, y < lo), (x < lo, y < lo)
    cx = np.concatenate([np.searchsorted(xs, hi[:, 0], "right"), np.searchsorted(xs, lo[:, 0], "left"),
                         np.searchsorted(xs, hi[:, 0], "right"), np.searchsorted(xs, lo[:, 0], "left")])
    cy = np.concatenate([np.searchsorted(ys, hi[:, 1], "right"), np.searchsorted(ys, hi[:, 1], "right"),
                         np.searchsorted(ys, lo[:, 1], "left"), np.searchsorted(ys, lo[:, 1], "left")])
    srt = np.argsort(cx, kind="stable")
    dom = np.empty(4 * q, np.int64)
    dom[srt] = _dominance(py, cx[srt].astype(np.int64), cy[srt].astype(np.int64), ys.size)
    d = dom.reshape(4, q)
    return d[0] - d[1] - d[2] + d[3]


@dataclass(repr=False)
class PointsResult(ReleaseResult):
    """A release on a private spatial decomposition: a :class:`ReleaseResult` plus the
    ``structure`` (regions of the nodes) and :meth:`query` for range counts."""

    structure: SpatialStructure | None = None

    @cached_property
    def frame(self) -> pd.DataFrame:
        """One row per region (external node order): ``node``, ``depth``, ``leaf``,
        ``<column>_low``/``<column>_high`` per coordinate, ``estimate`` and ``std``."""
        st = self.structure
        tree = self.tree
        cols: dict[str, Any] = {"node": np.arange(tree.n_nodes), "depth": tree.depth, "leaf": st.is_leaf}
        for j, c in enumerate(st.columns):
            cols[f"{c}_low"] = st.lows[:, j]
            cols[f"{c}_high"] = st.highs[:, j]
        cols["estimate"] = self.estimate.values
        cols["std"] = self.std if self.std is not None else np.full(tree.n_nodes, np.nan)
        return pd.DataFrame(cols)

    def to_frame(self, noisy: bool = False) -> pd.DataFrame:
        """:attr:`frame`, optionally with the raw measurements. Post-processing: no privacy cost.

        Parameters
        ----------
        noisy : bool, default False
            Add the ``noisy`` column: the raw region measurements (NaN where unmeasured).

        Returns
        -------
        pandas.DataFrame
            One row per region (external node order).
        """
        out = self.frame.copy()
        if noisy:
            var = self.measurements.variance
            vals = np.asarray(self.measurements.values, dtype=np.float64)
            out["noisy"] = np.where(np.isinf(var), np.nan, vals) if var is not None else vals
        return out

    def query(self, lows: Any, highs: Any) -> np.ndarray:
        """Estimated counts in the boxes ``[lows[i], highs[i]]`` (arrays of shape (q, d)),
        from the released leaf estimates with the uniformity assumption (Zhang, Xiao & Xie
        2016, §2.2): a region inside a box counts whole, a leaf crossing it the share of its
        estimate proportional to the overlapping volume. Post-processing: no privacy cost.

        Parameters
        ----------
        lows, highs : array_like, shape (q, d)
            The boxes' lower and upper corners, one row per query, one column per coordinate
            (in the order of the released ``columns``).

        Returns
        -------
        numpy.ndarray, shape (q,)
            The estimated count in each box.

        Examples
        --------
        >>> import numpy as np, pandas as pd, hierdp, warnings
        >>> pts = pd.DataFrame(np.random.default_rng(0).random((2000, 2)), columns=["x", "y"])
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        ...     r = pts.dptree.privtree(["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1)
        >>> q = r.query([[0, 0], [0, 0]], [[1, 1], [0.5, 0.5]])  # the whole box, its lower-left quarter
        >>> q.shape
        (2,)
        >>> bool(np.isclose(q[0], r.values[r.tree.leaves].sum()))  # the whole box: all the leaves
        True
        """
        leaves = self.tree.leaves
        return query_structure(self.structure, np.asarray(self.estimate.values, dtype=np.float64)[leaves],
                               lows, highs)

    def __repr__(self) -> str:
        base = super().__repr__()
        return base.replace("<ReleaseResult:", f"<PointsResult ({self.structure.method}):", 1)


#: the keywords of each method's decomposition (beside the shared release keywords)
METHOD_PARAMETERS: dict[str, tuple[str, ...]] = {"privtree": ("theta", "split", "max_depth", "max_nodes"),
                                                 "simpletree": ("height", "theta", "split", "max_nodes"),
                                                 "grid": ("n", "epsilon_counts", "m", "max_cells")}


def release_points(data: Any, columns: Sequence[str] | None = None, bounds: Any = None, epsilon: float | None = None,
                   *, delta: float | None = None, rho: float | None = None, session: Session | None = None,
                   seed: int | None = None, neighbours: str = "add_remove", invariants: Any = None,
                   postprocess: Any = PLAN_DEFAULT, epsilon_share: float | None = None,
                   max_contributions: int | None = None, method: str = "privtree",
                   mechanism: Any = "discrete_laplace", notes: Sequence[str] = (), _door: str = "release_points()",
                   **params: Any) -> PointsResult:
    """Privately decompose points in a public box and release the region counts.

    ``method``: ``"privtree"`` (Alg. 2; keywords ``theta``, ``split``, ``max_depth``,
    ``max_nodes``, ``max_contributions``), ``"simpletree"`` (Alg. 1; ``height`` required,
    ``max_nodes``) or ``"grid"``
    (the uniform grid; ``n`` public or estimated with the structure share, ``m``).
    ``epsilon_share`` of ``epsilon`` pays for the structure (default half, as in §3.4;
    1% for the grid, which only needs a noisy n), the rest for the leaf counts
    (``mechanism``, discrete Laplace by default). ``max_contributions`` = x (PrivTree,
    §3.5): a tuple may fall in x leaves, so λ and the leaf sensitivity are multiplied by x.
    The bound is the user's assertion: rows are not grouped by unit here, so bound them
    first if a unit may have more than x rows. ``session``: checked against the whole spend
    before the structure's noise is drawn. ``neighbours``/``invariants``: refused (the
    structure is private). Older spellings: ``structure_share``, ``contributions``.

    Parameters
    ----------
    data : DataFrame or array_like
        The points, one row each (one row = one privacy unit unless ``max_contributions``).
    columns : sequence of str, optional
        The coordinate columns of a DataFrame.
    bounds : sequence of (low, high)
        The public box, one pair per coordinate.
    epsilon, delta, rho : float, optional
        The total privacy loss (structure and counts), as in :func:`hierdp.release`.
    session : Session, optional
        Draw the spend from this :class:`hierdp.Session` (checked before any noise).
    seed : int, optional
        Reproducible noise for tests (NOT FOR PUBLICATION).
    neighbours, invariants : optional
        Only ``"add_remove"`` and no invariants (the structure is private).
    postprocess : str, sequence or None, optional
        Post-processing of the counts (default: the plan's, ``["blue"]``).
    epsilon_share : float, optional
        The share of ``epsilon`` that chooses the regions.
    max_contributions : int, optional
        x: the leaves one tuple may fall in.
    method : {"privtree", "simpletree", "grid"}, default "privtree"
        The decomposition (Zhang, Xiao & Xie 2016, Alg. 2; Alg. 1; the uniform grid).
    mechanism : str or Mechanism, default "discrete_laplace"
        The noise on the leaf counts.
    notes : sequence of str, default ()
        Public notes for the ledger.
    **params
        The method's parameters (``theta``, ``max_depth``, ``height``, ``m``, ...).

    Returns
    -------
    PointsResult
        The regions' estimates and ledger; ``.query(lows, highs)`` answers range counts.

    Examples
    --------
    >>> import numpy as np, hierdp, warnings
    >>> pts = np.random.default_rng(0).random((2000, 2))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    ...     r = hierdp.release_points(pts, bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1)
    >>> r.query(np.array([[0.0, 0.0]]), np.array([[1.0, 1.0]])).shape
    (1,)
    """
    if method not in METHODS:
        raise DataError(expected_one_of("method", method, METHODS))
    bounded = ("max_contributions",) if method == "privtree" else ()  # §3.5: PrivTree's λ scales with x
    given = canonical_keywords(_door, params, (*METHOD_PARAMETERS[method], "epsilon_share", *bounded),
                               release_points)
    epsilon_share = take(_door, given, "epsilon_share", epsilon_share)
    max_contributions = take(_door, given, "max_contributions", max_contributions)
    params = given
    if max_contributions is not None and not bounded:
        raise DataError(f"method {method!r} does not take max_contributions (its noise assumes one leaf per "
                        "tuple); use method='privtree' or leave max_contributions out")
    eps = pure_epsilon(epsilon)
    structure_share = epsilon_share
    if structure_share is None:
        structure_share = 0.01 if method == "grid" else 0.5
    rules.enforce(rules.share_problem(structure_share), BudgetError)
    eps_tree = eps * float(structure_share)
    eps_leaves = eps - eps_tree
    x = 1 if max_contributions is None else max_contributions
    if method == "grid":
        params.setdefault("epsilon_counts", eps_leaves)
    extra = {"contributions": x} if method == "privtree" else {}
    # through the registry: the decomposition's parameters are checked as in a spec, and its public size
    # caps (max_nodes against the fan-out) before the door pays or reads the points
    decomp = registry.create("decomposition", method, columns=columns, bounds=bounds, **extra, **params)
    paid = admit_private_structure(_door, method, epsilon=eps, delta=delta, rho=rho, session=session, seed=seed,
                                   neighbours=neighbours, invariants=invariants, mechanism=mechanism)
    pts, b, cols = as_points(data, columns, bounds)
    rng = door_rng(seed, 12345)
    structure = decomp.decompose(pts, budget=eps_tree, rng=rng)
    tree = structure.tree
    values = tree.aggregate(structure.leaf_counts(pts))
    x = int(x)  # x leaves per tuple: the leaf vector's sensitivity is x
    # the structure's spends are paid first; the leaves get the rest (all of ε if the structure is public)
    pp = {} if postprocess is PLAN_DEFAULT else {"postprocess": postprocess}
    result = release_path(tree, values, epsilon=eps, delta=delta, rho=rho, session=paid,
                          plan=Leaves(mechanism), seed=seed, notes=list(notes) + [
                              f"{method}: the structure (cell boundaries) is a private output paid from the budget"
                              if structure.private_structure else f"{method}: the structure is public"],
                          structure=structure, max_contributions=x if x > 1 else None, **pp)
    return PointsResult(tree=result.tree, estimate=result.estimate, measurements=result.measurements,
                        ledger=result.ledger, meta=dict(result.meta), structure=structure)
