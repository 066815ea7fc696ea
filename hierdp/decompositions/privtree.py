"""Data-dependent spatial decompositions: PrivTree, SimpleTree and the uniform grid.

PrivTree (Zhang, Xiao & Xie, SIGMOD'16, Alg. 2) splits a node ``v`` of a quadtree-like
decomposition of a box when its *biased, floored* score

    b(v) = max(c(v) − depth(v)·δ, θ − δ)                                   (Eq. 8)

plus Laplace noise of scale λ exceeds θ. With fan-out β, Cor. 1 makes the tree ε-DP for
λ = (2β−1)/((β−1)·ε) and δ = λ·ln β, with no limit on the height. SimpleTree (Alg. 1) is
the classic private quadtree: split when c(v) + Lap(λ) > θ below a height ``h``, ε-DP for
λ ≥ h/ε. The uniform grid ("UG" of Qardaji et al., used as a baseline in §6) has
m = (n·ε/10)^(2/(d+2)) cells per dimension.

Exactness. The noise comes from the exact discrete Laplace sampler. PrivTree's score is
an integer count minus a real multiple of δ, so everything is put on the integer grid
``Z/K`` (``K = 2**20``): θ is rounded to the grid (a public parameter: any value is
private), the grid noise scale K·λ is rounded *up* by the sampler to a rational, δ is then
rounded *up* to a grid point with δ ≥ λ_used·ln β, and the split test is the integer
comparison ``K·b(v) + Z > K·θ`` with Z ~ DLap(K·λ_used). Why this keeps Cor. 1: the proof
(§3.3) uses only (i) the ratio of the split probabilities of two neighbouring scores is at
most e^{1/λ} (the discrete Laplace of scale K·λ with a shift of at most K grid steps gives
exactly this), (ii) for a score x ≥ θ+1 the log-ratio is at most (1/λ)·e^{(θ+1−x)/λ}
(Lemma 3.1; for the discrete noise the same computation gives an extra factor
e^{1/(K·λ)}, absorbed by inflating λ by the factor 1 + 2/(K·λ), i.e. by about 10⁻⁷), and
(iii) scores along a path decrease by at least δ, summed as a geometric series
Σ e^{−jδ/λ} = 1/(1 − e^{−δ/λ}) ≤ β/(β−1) when δ ≥ λ·ln β: a *larger* δ (or λ) only
shrinks this sum, so rounding δ and λ up only tightens the bound.

A public depth cap (``max_depth``) stops the recursion on floating-point domains (with
θ = 0, duplicate points would be split forever); cutting the output tree at a public depth
is post-processing. Everything is vectorised per depth: the points are sorted once by
their interleaved ("Morton") cell code, every node of the decomposition is a contiguous
range of that order, and a depth's counts are two ``searchsorted`` calls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from hierdp.accounting import Spend, check_epsilon
from hierdp.decompositions.base import Decomposition, Structure
from hierdp.errors import BudgetError, DataError
from hierdp.mechanisms._samplers import dlap_params, sample_discrete_laplace
from hierdp.rng import RandomSource, make_rng
from hierdp.tree import Tree

__all__ = ["PrivTree", "SimpleTree", "UniformGrid", "SpatialStructure", "PrivTreeParameters",
           "privtree_parameters", "as_points", "schedule", "GRID", "MAX_NODES", "check_max_nodes", "check_fanout",
           "NodeCap"]

#: Resolution of the integer grid on which PrivTree's scores and threshold live.
GRID = 1 << 20
_CODE_BITS = 62  # cell codes and the end of the last range fit in int64
_FLOAT_BITS = 52  # finer cells than this are below float64 resolution of the box

#: Default public cap on the nodes a data-dependent decomposition grows (``max_nodes``):
#: growing costs roughly 100-200 bytes per node (a few hundred MB at the cap), and the
#: release then measures every node.
MAX_NODES = 1 << 22


# ----------------------------------------------------------------------------- size caps
def check_max_nodes(max_nodes: Any, what: str = "max_nodes") -> int:
    """``max_nodes`` as an int: a public integer >= 1 (the cap on a decomposition's size)."""
    ok = isinstance(max_nodes, (int, np.integer)) and not isinstance(max_nodes, (bool, np.bool_))
    if not ok or max_nodes < 1:
        shown = repr(max_nodes) if len(repr(max_nodes)) <= 40 else f"a {type(max_nodes).__name__}"
        raise DataError(f"{what} must be a positive integer (a public cap on the decomposition's size), got {shown}")
    return int(max_nodes)


def check_fanout(name: str, beta: int, max_nodes: int, fix: str, what: str = "max_nodes", per_node: int = 1) -> None:
    """Refuse, from public parameters only and before anything is allocated, a fan-out
    whose first split alone exceeds the cap (the root and its ``beta`` children, each
    counting ``per_node``)."""
    if (1 + beta) * per_node > max_nodes:
        raise DataError(f"{name}: one split makes {beta:,} children (fan-out β), more than {what}={max_nodes:,} "
                        f"allows; {fix}, or pass a larger {what}=... if you mean it")


class NodeCap:
    """The public cap enforced as a data-dependent tree grows, before each depth's nodes
    are allocated.

    The node count of PrivTree-like structures depends on noisy split decisions, so no
    public bound short of the worst case exists. :meth:`add` is called with the size of
    the next depth once its split decisions are drawn and before its arrays exist; it
    raises once the tree would exceed the cap. The node counts along the way are those of
    the (ε-DP) structure itself, so the refusal reveals one bit of post-processing of the
    private output, "the structure has more than ``max_nodes`` nodes", and the message
    states no count, depth or value. The structure's noise is drawn by then, so the doors
    charge its budget (they reserve it before drawing)."""

    def __init__(self, name: str, max_nodes: int, fix: str, what: str = "max_nodes", per_node: int = 1) -> None:
        self.name, self.max_nodes, self.fix, self.what, self.per_node = name, max_nodes, fix, what, per_node
        self.total = 0

    def add(self, n: int) -> None:
        """Count ``n`` more nodes; raise when the total passes the cap (before allocating them)."""
        self.total += int(n)
        if self.total * self.per_node > self.max_nodes:
            raise DataError(f"{self.name}: the private structure grew past {self.what}={self.max_nodes:,} (a public "
                            f"cap on memory, checked as the tree grows); {self.fix}, or pass a larger "
                            f"{self.what}=... if you mean it")


# ----------------------------------------------------------------------------- parameters
def _lambda_paper(beta: int, epsilon: float, contributions: int) -> float:
    """λ of Cor. 1 (times ``contributions``, §3.5 "x leaves per tuple"): x·(2β−1)/((β−1)·ε)."""
    return contributions * (2 * beta - 1) / ((beta - 1) * epsilon)


def _biased_score(counts: np.ndarray, depth: int, delta_grid: int, theta_grid: int) -> np.ndarray:
    """K·b(v) of Eq. (8) on the grid: max(K·c(v) − depth·Kδ, Kθ − Kδ) (int64)."""
    return np.maximum(counts.astype(np.int64) * GRID - depth * delta_grid, theta_grid - delta_grid)


@dataclass(frozen=True)
class PrivTreeParameters:
    """The exact parameters PrivTree runs with (all public).

    ``lam`` and ``delta`` are the values used (λ ≥ Cor. 1's λ, δ ≥ λ·ln β), ``theta`` the
    threshold on the grid; ``noise`` the discrete Laplace parameters on the grid ``Z/GRID``.
    """

    epsilon: float
    beta: int
    lam: float
    delta: float
    theta: float
    delta_grid: int
    theta_grid: int
    noise: Any = field(repr=False)


def privtree_parameters(epsilon: float, beta: int, theta: float = 0.0, contributions: int = 1) -> PrivTreeParameters:
    """PrivTree's λ and δ for fan-out ``beta`` at ``epsilon`` (Cor. 1), rounded for exact sampling.

    λ = x·(2β−1)/((β−1)·ε) inflated by 1 + 2/(K·λ) and rounded up to the sampler's
    rational grid scale; δ = λ·ln β rounded up to the grid (module docstring: both only
    tighten the privacy bound). ``contributions`` = x leaves one tuple may reach (§3.5).
    """
    eps = check_epsilon(epsilon, "structure epsilon")
    if int(beta) != beta or beta < 2:
        raise BudgetError(f"PrivTree needs a fan-out of at least 2, got {beta!r}")
    if int(contributions) != contributions or contributions < 1:
        raise BudgetError(f"contributions must be a positive integer, got {contributions!r}")
    if not math.isfinite(float(theta)):
        raise BudgetError(f"theta must be a finite number, got {theta!r}")
    lam0 = _lambda_paper(int(beta), eps, int(contributions))
    lam_target = Fraction(lam0) * (1 + Fraction(2) / (GRID * Fraction(lam0)))
    noise = dlap_params(lam_target * GRID)
    scale = noise.scale  # exact rational, >= K·λ_target
    # ceil(scale·ln β) with a margin of one grid step for the rounding of math.log
    delta_grid = math.ceil(scale * Fraction(math.log(beta))) + 1
    theta_grid = round(Fraction(float(theta)) * GRID)
    return PrivTreeParameters(epsilon=eps, beta=int(beta), lam=float(scale / GRID), delta=delta_grid / GRID,
                              theta=theta_grid / GRID, delta_grid=int(delta_grid), theta_grid=int(theta_grid),
                              noise=noise)


# ----------------------------------------------------------------------------- points and cells
def as_points(data: Any, columns: Sequence[str] | None, bounds: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(points (n, d) float64, bounds (d, 2) float64, column names)`` with clear errors.

    ``data``: a DataFrame (with ``columns``) or an array ``(n, d)``; ``bounds``: the public
    box, one ``(low, high)`` per dimension. Points outside the box raise (their number is
    not reported: it is private).
    """
    if isinstance(data, pd.DataFrame):
        if columns is None:
            raise DataError("give columns=[...] to say which DataFrame columns are the coordinates")
        cols = [str(c) for c in columns]
        missing = [c for c in columns if c not in data.columns]
        if missing:
            raise DataError(f"missing coordinate column {missing[0]!r}; the DataFrame has "
                            f"{list(map(str, data.columns))}")
        try:
            pts = data[list(columns)].to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError("coordinate columns must be numeric") from None
    else:
        try:
            pts = np.asarray(data, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError("points must be a numeric array of shape (n, d) or a DataFrame") from None
        if pts.ndim == 1:
            pts = pts[:, None]
        cols = [str(c) for c in columns] if columns is not None else [f"x{j}" for j in range(pts.shape[1])]
    if pts.ndim != 2 or pts.shape[1] < 1:
        raise DataError(f"points must have shape (n, d), got {pts.shape}")
    d = pts.shape[1]
    if len(cols) != d:
        raise DataError(f"{len(cols)} column names for {d}-dimensional points")
    try:
        b = np.asarray(bounds, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError("bounds must be one (low, high) pair of numbers per dimension") from None
    if b.shape != (d, 2):
        raise DataError(f"bounds must be one (low, high) pair per dimension: shape ({d}, 2), got {b.shape}")
    if not np.all(np.isfinite(b)) or np.any(b[:, 1] <= b[:, 0]):
        raise DataError("every bound must be finite with low < high; the box must be public, not read from the data")
    if pts.size and not np.all(np.isfinite(pts)):
        raise DataError("points contain NaN or infinity; drop or impute them first")
    if pts.size and (np.any(pts < b[:, 0]) or np.any(pts > b[:, 1])):
        raise DataError("some points lie outside the declared bounds; widen the bounds (public) or clip the points")
    return pts, b, cols


def schedule(d: int, split: str, max_depth: int | None) -> tuple[list[list[int]], int]:
    """Which dimensions each level halves, and the depth cap.

    ``split="all"``: every level halves every dimension (β = 2^d, the quadtree);
    ``split="cycle"``: level k halves dimension k mod d (β = 2, a k-d-style binary tree).
    The cap defaults to the deepest level whose cell codes fit in 62 bits with at most 52
    halvings per dimension (float64 resolution of the box).
    """
    if split not in ("all", "cycle"):
        raise DataError(f"split={split!r}: expected 'all' (β = 2^d) or 'cycle' (β = 2)")
    if split == "all":
        limit = min(_CODE_BITS // d, _FLOAT_BITS)
    else:
        limit = min(_CODE_BITS, _FLOAT_BITS * d)
    if max_depth is None:
        max_depth = limit
    if isinstance(max_depth, bool) or int(max_depth) != max_depth or not (0 <= max_depth <= limit):
        raise DataError(f"max_depth must be an integer in [0, {limit}] for {d}-dimensional points with "
                        f"split={split!r}, got {max_depth!r}")
    levels = [list(range(d)) if split == "all" else [k % d] for k in range(int(max_depth))]
    return levels, int(max_depth)


@dataclass
class SpatialStructure(Structure):
    """A decomposition of a public box into cells: the tree plus each node's region.

    ``lows``/``highs``: ``(n_nodes, d)`` region bounds per node (external order; a region
    is ``[low, high)``, closed at the box's upper edge); ``columns``/``bounds``: the
    coordinates and the public box; ``first_child``: external id of each node's first
    child (children are contiguous), -1 for leaves; ``params``: the public parameters
    (λ, δ, θ, β, depth cap, ...). :meth:`locate` places points in leaves.
    """

    lows: np.ndarray = None  # type: ignore[assignment]
    highs: np.ndarray = None  # type: ignore[assignment]
    columns: list[str] = field(default_factory=list)
    bounds: np.ndarray = None  # type: ignore[assignment]
    first_child: np.ndarray = None  # type: ignore[assignment]
    params: dict[str, Any] = field(default_factory=dict)
    method: str = ""
    description: str = ""
    _locator: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)

    @property
    def is_leaf(self) -> np.ndarray:
        return self.first_child < 0

    def locate(self, points: np.ndarray) -> np.ndarray:
        """External id of the leaf holding each point (points inside :attr:`bounds`)."""
        pts = np.asarray(points, dtype=np.float64).reshape(-1, len(self.columns))
        return self._locator(pts)

    def leaf_counts(self, points: np.ndarray) -> np.ndarray:
        """NON-PRIVATE true counts of the leaves (``tree.leaves`` order) — for releasing them
        through a mechanism, or for evaluation."""
        leaf = self.locate(points)
        counts = np.bincount(leaf, minlength=self.tree.n_nodes)
        return counts[self.tree.leaves]


class _Codes:
    """Interleaved cell codes of points under a split schedule (the most significant bits
    are the first levels), and the integer cell index of a code prefix per dimension."""

    def __init__(self, bounds: np.ndarray, levels: list[list[int]]) -> None:
        self.bounds = bounds
        self.levels = levels
        d = bounds.shape[0]
        self.d = d
        self.bits = np.zeros(d, np.int64)  # halvings of each dimension over all levels
        for s in levels:
            self.bits[s] += 1
        self.total = int(sum(len(s) for s in levels))
        self.used = np.cumsum([0] + [len(s) for s in levels])  # code bits used above depth k

    def codes(self, pts: np.ndarray) -> np.ndarray:
        lo, hi = self.bounds[:, 0], self.bounds[:, 1]
        frac = (pts - lo) / (hi - lo)
        cells = np.ldexp(1.0, self.bits)  # 2**bits per dimension, exact
        u = np.clip(np.floor(frac * cells), 0, cells - 1).astype(np.int64)
        code = np.zeros(pts.shape[0], np.int64)
        left = self.bits.copy()
        for s in self.levels:
            for j in s:
                left[j] -= 1
                code = (code << 1) | ((u[:, j] >> left[j]) & 1)
        return code

    def ranges(self, prefix: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
        shift = self.total - int(self.used[depth])
        return prefix << shift, (prefix + 1) << shift


def _grow(pts: np.ndarray, bounds: np.ndarray, levels: list[list[int]], max_depth: int,
          decide: Callable[[int, np.ndarray], np.ndarray], cap: NodeCap | None = None) -> dict[str, Any]:
    """Grow a decomposition top-down, one vectorised pass per depth.

    ``decide(depth, counts)`` returns the split mask of the nodes of a depth given their
    true counts (the only place counts meet randomness). Nodes at ``max_depth`` are not
    offered to ``decide`` (never split). ``cap`` counts each depth's children before they
    are allocated.
    """
    if cap is not None:
        cap.add(1)
    coder = _Codes(bounds, levels)
    sorted_codes = np.sort(coder.codes(pts)) if pts.shape[0] else np.zeros(0, np.int64)
    d = bounds.shape[0]
    prefix = np.zeros(1, np.int64)
    cell = np.zeros((1, d), np.int64)  # integer cell index per dimension at this depth
    parents = [np.array([-1], np.int64)]
    prefixes, cells, depths = [], [], []
    offset = 0  # external id of the first node of this depth
    for k in range(max_depth + 1):
        n_k = prefix.size
        if k < max_depth:
            lo, hi = coder.ranges(prefix, k)
            counts = np.searchsorted(sorted_codes, hi) - np.searchsorted(sorted_codes, lo)
            split = np.asarray(decide(k, counts), dtype=bool)
        else:
            split = np.zeros(n_k, bool)
        prefixes.append(prefix)
        cells.append(cell)
        depths.append(np.full(n_k, k, np.int64))
        if not split.any():
            break
        s = levels[k]
        nb = 1 << len(s)
        par = np.flatnonzero(split)
        if cap is not None:
            cap.add(par.size * nb)
        child_prefix = ((prefix[par] << len(s))[:, None] | np.arange(nb)[None, :]).reshape(-1)
        child_cell = np.repeat(cell[par], nb, axis=0)
        c = np.tile(np.arange(nb), par.size)
        for i, j in enumerate(s):  # the first listed dimension is the most significant bit
            child_cell[:, j] = (child_cell[:, j] << 1) | ((c >> (len(s) - 1 - i)) & 1)
        parents.append(np.repeat(offset + par, nb))
        offset += n_k
        prefix, cell = child_prefix, child_cell
    parent = np.concatenate(parents[:len(prefixes)])
    depth = np.concatenate(depths)
    n = parent.size
    # children of node i are contiguous (BFS order): first child via the parent array
    first_child = np.full(n, -1, np.int64)
    child_ids = np.arange(1, n)
    first_child[parent[1:][::-1]] = child_ids[::-1]
    # regions from integer cell indices: halvings of dimension j above depth k
    halvings = np.zeros((max_depth + 1, d), np.int64)
    for k, s in enumerate(levels[:max_depth]):
        halvings[k + 1] = halvings[k]
        halvings[k + 1, s] += 1
    cell_all = np.concatenate(cells)
    scale = np.ldexp(1.0, -halvings[depth])  # cell width as a fraction of the box
    lo, hi = bounds[:, 0], bounds[:, 1]
    lows = lo + (hi - lo) * (cell_all * scale)
    highs = np.where(cell_all + 1 == np.ldexp(1.0, halvings[depth]), hi, lo + (hi - lo) * ((cell_all + 1) * scale))
    # leaves by code range, for locating points
    prefix_all = np.concatenate(prefixes)
    leaf_ids = np.flatnonzero(first_child < 0)
    starts = np.empty(leaf_ids.size, np.int64)
    for k in np.unique(depth[leaf_ids]):
        sel = depth[leaf_ids] == k
        starts[sel] = coder.ranges(prefix_all[leaf_ids[sel]], int(k))[0]
    order = np.argsort(starts, kind="stable")
    starts, leaf_sorted = starts[order], leaf_ids[order]

    def locator(p: np.ndarray) -> np.ndarray:
        return leaf_sorted[np.searchsorted(starts, coder.codes(p), side="right") - 1]

    return {"parent": parent, "depth": depth, "first_child": first_child, "lows": lows, "highs": highs,
            "locator": locator}


def _structure(grown: dict[str, Any], cols: list[str], bounds: np.ndarray, spends: list[Spend],
               params: dict[str, Any], method: str, provenance: str) -> SpatialStructure:
    depth = grown["depth"]
    names = ["total"] + [f"depth_{k}" for k in range(1, int(depth.max()) + 1)]
    tree = Tree.from_parent(grown["parent"], level_names=names)
    kind = "private output" if spends else "public"
    where = {name: f"{provenance} ({kind})" for name in names}
    return SpatialStructure(tree=tree, spends=spends, private_structure=True, level_provenance=where,
                            lows=grown["lows"],
                            highs=grown["highs"], columns=cols, bounds=bounds, first_child=grown["first_child"],
                            params=params, method=method, description=provenance, _locator=grown["locator"])


class _Spatial(Decomposition):
    data_dependent = True

    def __init__(self, columns: Sequence[str] | None = None, bounds: Any = None) -> None:
        if bounds is None:
            raise DataError(f"{self.name} needs public bounds=[(low, high), ...] per dimension "
                            "(never computed from the data)")
        self.columns = None if columns is None else list(columns)
        self.bounds = bounds

    def _check_fanout(self, split: str, max_depth: int | None, max_nodes: int) -> None:
        """Refuse a fan-out past ``max_nodes`` from the public bounds and split rule alone, before
        any data is read or budget paid (bounds that do not parse are left to :func:`as_points`)."""
        try:
            shape = np.asarray(self.bounds, dtype=np.float64).shape
        except (TypeError, ValueError):
            return
        if len(shape) != 2 or shape[0] < 1:
            return
        levels, cap = schedule(shape[0], split, max_depth)
        if cap > 0:
            check_fanout(self.name, 1 << len(levels[0]), max_nodes,
                         f"{shape[0]} coordinates with split='all' halve all at once; use split='cycle' (β = 2)")

    def _setup(self, data: Any, budget: float | None, rng: RandomSource | None):
        pts, b, cols = as_points(data, self.columns, self.bounds)
        if budget is None:
            raise BudgetError(f"decomposition {self.name!r} reads the data: give it budget=<epsilon> for the structure")
        eps = check_epsilon(budget, "structure epsilon")
        return pts, b, cols, eps, (rng if rng is not None else make_rng(None))


class PrivTree(_Spatial):
    """PrivTree (Zhang, Xiao & Xie 2016, Alg. 2) on points in a public box; ε-DP (Cor. 1).

    Parameters: ``columns`` (coordinate columns when the data is a DataFrame), ``bounds``
    (public ``(low, high)`` per dimension), ``theta`` (threshold θ, default 0 as in §3.4),
    ``split`` (``"all"``: β = 2^d, default; ``"cycle"``: β = 2), ``max_depth`` (public depth
    cap, default the float64 resolution of the box), ``contributions`` (x leaves a tuple
    may reach, §3.5: λ multiplied by x), ``max_nodes`` (public cap on the tree's size,
    default :data:`MAX_NODES` = 4,194,304). The structure costs ``budget`` (ε) and is a
    private output; node counts are not part of it.

    Size. With ``split="all"`` one split makes 2^d children: a fan-out above
    ``max_nodes − 1`` is refused from the public parameters before anything is read or
    allocated (30 coordinates would make 2^30 children; use ``split="cycle"``). How many
    nodes the tree grows depends on noisy decisions (θ far below the counts splits every
    cell down to the depth cap), so the cap is enforced as the tree grows, before each
    depth's nodes are allocated: a tree that would pass ``max_nodes`` raises one
    :class:`~hierdp.errors.DataError` naming ``max_nodes``. That refusal is a function of
    the ε-DP structure alone ("it has more than ``max_nodes`` nodes": post-processing, no
    count, depth or value in the message) and comes after the structure's noise was
    drawn, so its budget is spent. Raise ``max_nodes`` if you mean a larger tree.
    """

    name = "privtree"

    def __init__(self, columns: Sequence[str] | None = None, bounds: Any = None, *, theta: float = 0.0,
                 split: str = "all", max_depth: int | None = None, contributions: int = 1,
                 max_nodes: int = MAX_NODES) -> None:
        super().__init__(columns, bounds)
        self.theta = theta
        self.split = split
        self.max_depth = max_depth
        self.contributions = contributions
        self.max_nodes = check_max_nodes(max_nodes)
        self._check_fanout(split, max_depth, self.max_nodes)

    _FIX = "raise theta, lower max_depth or use split='cycle' (β = 2)"

    def parameters(self, epsilon: float, d: int) -> PrivTreeParameters:
        beta = 2 ** d if self.split == "all" else 2
        return privtree_parameters(epsilon, beta, self.theta, self.contributions)

    @staticmethod
    def decider(p: PrivTreeParameters, rng: RandomSource) -> Callable[[int, np.ndarray], np.ndarray]:
        """Alg. 2, lines 5-8, for all nodes of one depth: split iff K·b(v) + DLap(K·λ) > K·θ."""
        def decide(depth: int, counts: np.ndarray) -> np.ndarray:
            score = _biased_score(counts, depth, p.delta_grid, p.theta_grid)
            return score + sample_discrete_laplace(p.noise, counts.size, rng) > p.theta_grid
        return decide

    @staticmethod
    def path_stop_depths(decide: Callable[[int, np.ndarray], np.ndarray], scores: Any, m: int) -> np.ndarray:
        """For auditing: the depth at which each of ``m`` independent runs of the split
        decisions ``decide`` (:meth:`decider`) stops along one root-to-leaf path whose node
        at depth k has count (or score) ``scores[k]``; ``len(scores)`` for runs that never
        stop. Nodes off the path do not depend on the records on it and are left out."""
        depth = np.full(m, len(scores))
        alive = np.arange(m)
        for k, s in enumerate(scores):
            split = decide(k, np.full(alive.size, s))
            depth[alive[~split]] = k
            alive = alive[split]
            if alive.size == 0:
                break
        return depth.astype(float)

    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> SpatialStructure:
        pts, b, cols, eps, rng = self._setup(data, budget, rng)
        self._check_fanout(self.split, self.max_depth, self.max_nodes)
        levels, cap = schedule(b.shape[0], self.split, self.max_depth)
        p = self.parameters(eps, b.shape[0])
        grown = _grow(pts, b, levels, cap, self.decider(p, rng), NodeCap(self.name, self.max_nodes, self._FIX))
        params = {"epsilon": eps, "beta": p.beta, "lambda": p.lam, "delta": p.delta, "theta": p.theta,
                  "split": self.split, "max_depth": cap, "contributions": self.contributions,
                  "max_nodes": self.max_nodes}
        return _structure(grown, cols, b, [Spend(eps, "epsilon", label="privtree structure")], params, self.name,
                          f"PrivTree (Zhang et al. 2016, Alg. 2), ε={eps:g}, β={p.beta}, λ={p.lam:.6g}, "
                          f"δ={p.delta:.6g}, θ={p.theta:g}")


class SimpleTree(_Spatial):
    """SimpleTree (Zhang et al. 2016, Alg. 1): split when c(v) + Lap(λ) > θ and
    depth(v) < h − 1, with λ = h/ε (ε-DP: a point changes h counts by one). Baseline.

    Parameters as :class:`PrivTree` plus ``height`` (h levels, required). The noisy counts
    decide the shape only; the release measures the leaves afresh. ``max_nodes`` caps the
    size as for :class:`PrivTree` (fan-out refused before anything is allocated, the node
    count enforced as the tree grows, the refusal a function of the private structure only).
    """

    name = "simpletree"

    def __init__(self, columns: Sequence[str] | None = None, bounds: Any = None, *, height: int = 0,
                 theta: float = 0.0, split: str = "all", max_nodes: int = MAX_NODES) -> None:
        super().__init__(columns, bounds)
        if isinstance(height, bool) or int(height) != height or height < 1:
            raise DataError(f"SimpleTree needs height=h >= 1 (the number of levels), got {height!r}")
        self.height = int(height)
        self.theta = float(theta)
        self.split = split
        self.max_nodes = check_max_nodes(max_nodes)
        self._check_fanout(split, self.height - 1, self.max_nodes)

    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> SpatialStructure:
        pts, b, cols, eps, rng = self._setup(data, budget, rng)
        self._check_fanout(self.split, self.height - 1, self.max_nodes)
        levels, cap = schedule(b.shape[0], self.split, self.height - 1)
        noise = dlap_params(Fraction(self.height) / Fraction(eps))  # scale rounded up: λ >= h/ε
        thr = math.floor(self.theta)  # integer counts: c + Z > θ  <=>  c + Z > floor(θ)

        def decide(k: int, counts: np.ndarray) -> np.ndarray:
            return counts + sample_discrete_laplace(noise, counts.size, rng) > thr

        grown = _grow(pts, b, levels, cap, decide,
                      NodeCap(self.name, self.max_nodes, "raise theta, lower height or use split='cycle' (β = 2)"))
        params = {"epsilon": eps, "height": self.height, "lambda": float(noise.scale), "theta": self.theta,
                  "split": self.split, "max_nodes": self.max_nodes}
        return _structure(grown, cols, b, [Spend(eps, "epsilon", label="simpletree structure")], params, self.name,
                          f"SimpleTree (Zhang et al. 2016, Alg. 1), ε={eps:g}, h={self.height}")


class UniformGrid(_Spatial):
    """The uniform grid baseline: m = (n·ε/10)^(2/(d+2)) equal cells per dimension (d = 2:
    Qardaji et al.'s UG, m = sqrt(nε/10)), as a two-level tree (root, cells).

    n is private: unless a public ``n`` is given, the decomposition spends its ``budget``
    on a discrete Laplace estimate of n. ``epsilon_counts`` is the ε the cell counts will
    be measured with (the ε in the formula; default: the structure budget's complement in
    a release, given by the front-end). ``m`` fixes the cells per dimension outright.
    ``max_cells`` (public, default 2^24) caps the m^d cells: the formula's m is lowered to
    fit it, an explicit ``m`` whose m^d passes it is refused (one error naming ``m`` and
    ``max_cells``, before anything is allocated) rather than silently lowered.
    """

    name = "grid"

    def __init__(self, columns: Sequence[str] | None = None, bounds: Any = None, *, n: int | None = None,
                 epsilon_counts: float | None = None, m: int | None = None, max_cells: int = 1 << 24) -> None:
        super().__init__(columns, bounds)
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1):
            raise DataError(f"m (cells per dimension) must be a positive integer, got {m!r:.40}")
        self.n, self.epsilon_counts, self.m = n, epsilon_counts, m
        self.max_cells = check_max_nodes(max_cells, "max_cells")
        # with a public n (or m) the grid reads nothing private: a public structure
        self.data_dependent = n is None and m is None

    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> SpatialStructure:
        pts, b, cols = as_points(data, self.columns, self.bounds)
        d = b.shape[0]
        spends: list[Spend] = []
        rng = rng if rng is not None else make_rng(None)
        if self.m is not None:
            m = int(self.m)
            if m ** d > self.max_cells:  # exact (Python integers): public parameters only
                raise DataError(f"grid: m={m} cells per dimension in {d} dimensions make more than "
                                f"max_cells={self.max_cells:,} cells; lower m, or pass a larger max_cells=... if you "
                                "mean it")
        else:
            if self.n is not None:
                n_hat = float(self.n)
            else:
                if budget is None:
                    raise BudgetError("the grid needs a public n=... or budget=<epsilon> to estimate n privately")
                eps = check_epsilon(budget, "structure epsilon")
                noise = dlap_params(Fraction(1) / Fraction(eps))
                n_hat = float(pts.shape[0] + int(sample_discrete_laplace(noise, 1, rng)[0]))
                spends.append(Spend(eps, "epsilon", label="grid size (noisy n)"))
            e = check_epsilon(self.epsilon_counts if self.epsilon_counts is not None else 1.0, "epsilon_counts")
            m = int(math.ceil(max(n_hat * e / 10.0, 1.0) ** (2.0 / (d + 2))))
        m = max(1, min(m, int(self.max_cells ** (1.0 / d))))
        lo, hi = b[:, 0], b[:, 1]
        grids = np.stack(np.meshgrid(*[np.arange(m)] * d, indexing="ij"), axis=-1).reshape(-1, d)
        lows = np.vstack([lo, lo + (hi - lo) * grids / m])
        highs = np.vstack([hi, np.where(grids + 1 == m, hi, lo + (hi - lo) * (grids + 1) / m)])
        n_cells = m ** d
        parent = np.concatenate([[-1], np.zeros(n_cells, np.int64)])
        first_child = np.full(n_cells + 1, -1, np.int64)
        first_child[0] = 1 if n_cells > 0 else -1

        def locator(p: np.ndarray) -> np.ndarray:
            u = np.clip(np.floor((p - lo) / (hi - lo) * m), 0, m - 1).astype(np.int64)
            return 1 + np.ravel_multi_index(tuple(u.T), (m,) * d)

        grown = {"parent": parent, "depth": np.r_[0, np.ones(n_cells, np.int64)], "first_child": first_child,
                 "lows": lows, "highs": highs, "locator": locator}
        params = {"m": m, "cells": n_cells}
        st = _structure(grown, cols, b, spends, params, self.name, f"uniform grid, {m} cells per dimension")
        st.private_structure = bool(spends)
        return st
