"""The plan ``marginals``: per level, a strategy of marginal queries over the cells, and one
consistent generalised least-squares (GLS) estimate of the full ``(n, k)`` histogram.

Census practice (the 2020 TopDown strategies): at each level every node's histogram over
the cell dimensions (e.g. age x sex x race, ``k`` cells, row-major as in
:mod:`hierdp.frontends._cells`) is measured through a few marginals ``A_S x`` (cells summed
over the dimensions not in ``S``; ``S = ()`` is the node total), marginal ``S`` with share
``s_S`` of the level's budget. A unit's contribution to a level is a non-negative vector
of L1 at most ``c``; every marginal keeps that L1 and an L2 the level's sensitivity
covers (:func:`hierdp.rules.marginal_sensitivity`), so one marginal at budget
``s_S b_level`` is private at that budget, the marginals of a level compose basically
(shares add up to 1: the level costs ``b_level``) and levels compose basically as in
``per_level``. With unit-variance weights ``1/var_S`` per marginal, the estimate is

    minimise  sum_nodes sum_S |A_S x_u - y_{u,S}|^2 / var_{level(u),S}
    subject to  x consistent (parent = sum of children, in every cell).

**Structure (why no matrix is formed).** Every marginal Gram ``A_S^T A_S`` is a Kronecker
product of identities (dims in ``S``) and all-ones matrices ``J`` (dims summed), and all of
them are diagonalised by the same orthonormal basis ``Q = H_1^T (x) ... (x) H_D^T`` (``H_i``
the Helmert matrix of dimension ``i``, first row constant): ``J`` has eigenvalue ``k_i`` on
the constant vector and 0 on its complement. So the Gram of level ``d``,
``G_d = sum_S A_S^T A_S / var_{d,S} = Q diag(lambda_d) Q^T`` with
``lambda_d(j) = sum_S [j_i = 0 for every i not in S] prod_{i not in S} k_i / var_{d,S}``,
for *any* strategies per level (the separable case is not needed: the lattice commutes).
Rotating every node's cells by ``Q^T`` (the tree constraint acts on nodes, the rotation on
cells, so they commute) splits the GLS into ``k`` independent tree problems, column ``j``
measured at node ``u`` by ``z_{u,j} = (Q^T sum_S A_S^T y_{u,S} / var_S)_j / lambda(j)`` with
variance ``1 / lambda(j)`` (``inf`` where the level's strategy does not identify
direction ``j``), i.e. one two-pass BLUE over ``(n, k)`` (Dawson et al. Alg. 2). Rotating
back gives the estimate and, columns being independent, its exact per-cell variances
``(Q o Q) v``. Invariant nodes (``invariants=``; every cell exact) enter with variance 0.

**Cost.** One BLUE over ``(n, k)``, four Helmert transforms of ``(n, k)`` (rhs, estimate,
variances, and where a direction is unidentified the reach of ``inf``), each ``O(n k D)`` by
cumulative sums (:func:`_apply`), plus the marginals themselves, ``O(n k |strategy|)``;
memory a few ``(n, k)`` float64 arrays (1.1 GB peak at 1e5 leaves x 200 cells). No
iterative solver is needed; an arbitrary (non-product) query set would need one
(``benchmarks/bench_marginals.py`` times it against the full-histogram release).

The plan hands on its GLS estimate as the measurements (with its exact per-cell
variances): it is already consistent, so the default chain is empty; ``nonneg`` and
``round`` may follow (``postprocess=["nonneg", "round"]``) for consistent non-negative
integers of the whole table. ``blue``/``gmc`` after it are refused (they would treat the
estimate as independent measurements and misstate its variance).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp import rules
from hierdp._kernels import threads
from hierdp._kernels.helmert import helmert_rows
from hierdp.accounting import PrivacyLoss, Spend, calibrated_total
from hierdp.accounting.ledger import LevelSpend
from hierdp.errors import BudgetError, DataError, PluginError, expected_one_of
from hierdp.measurements import Measurements
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.base import Plan
from hierdp.plans.per_level import (
    _is_strategy,
    _strategy,
    invariant_levels,
    key_for,
    node_identities,
    resolve_budget,
    resolve_mechanism,
)
from hierdp.postprocessors.blue import blue
from hierdp.postprocessors.nonneg import nonneg
from hierdp.postprocessors.rounding import controlled_round
from hierdp.tree import Tree as _Tree

if TYPE_CHECKING:
    from hierdp.keyed_noise import NoiseKey
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["Marginals", "MarginalsDesign", "helmert", "parse_strategy", "MEASUREMENT_BASE"]

#: marginal ``j`` of a level's strategy is keyed-noise measurement ``MEASUREMENT_BASE + j``
#: (:mod:`hierdp.keyed_noise`; node identities already separate the levels)
MEASUREMENT_BASE = 16


@dataclass(frozen=True)
class _LevelDesign:
    """One measured level: its marginals ``(summed axes, budget, noise variance,
    measurement number)`` and the rotated columns' information ``lambda`` and ``1 / lambda``."""

    marginals: list[tuple[tuple[int, ...], float, float, int]]
    lam: np.ndarray
    inv_lam: np.ndarray


@dataclass(frozen=True, eq=False)
class MarginalsDesign:
    """What :meth:`Marginals.design` fixes before any count is read: the cell sizes, per
    depth the level's marginals (``None``: not measured), the marginals' sensitivity, the
    invariant mode, and the plan's spends, ledger levels and ``info`` as the in-memory
    release states them. Public structure and budgets only (no count)."""

    sizes: tuple[int, ...]
    k: int
    per_depth: list[_LevelDesign | None] = field(repr=False)
    sensitivity: Sensitivity = field(repr=False)
    totals_only: bool
    has_invariants: bool
    spends: list[Spend] = field(repr=False)
    levels: list[LevelSpend] = field(repr=False)
    info: dict[str, Any] = field(repr=False)
    reads_true_counts: bool = False
    budget_strategy: str = ""


def helmert(m: int) -> np.ndarray:
    """The ``m x m`` orthonormal Helmert matrix: row 0 constant ``1/sqrt(m)``, row ``i`` the
    contrast of the first ``i`` entries against entry ``i``."""
    H = np.zeros((m, m))
    H[0] = 1.0 / math.sqrt(m)
    for i in range(1, m):
        H[i, :i] = 1.0 / math.sqrt(i * (i + 1))
        H[i, i] = -i / math.sqrt(i * (i + 1))
    return H


def _helmert_axis(a: np.ndarray, axis: int, mode: str) -> np.ndarray:
    """``H`` (``"fwd"``), ``H^T`` (``"bwd"``) or ``(H^T)^2`` elementwise (``"sq"``) applied
    along ``axis`` in O(m) per vector by cumulative sums (no m x m product), with
    ``inv_i = 1 / sqrt(i (i+1))`` (``inv_0 = 1``):
    ``(H a)_i = (sum_{c<i} a_c - i a_i) inv_i``, ``(H a)_0 = sum_c a_c / sqrt(m)``;
    ``(H^T b)_c = b_0 / sqrt(m) + sum_{i>c} b_i inv_i - c b_c inv_c``;
    ``((H^T)^2 v)_c = v_0 / m + sum_{i>c} v_i inv_i^2 + v_c c / (c+1)``.
    The floating-point operations are those of the compiled
    :func:`hierdp._kernels.helmert.helmert_rows`, in the same order: the same bits."""
    m = a.shape[axis]
    if m == 1:
        return a
    shape = [1] * a.ndim
    shape[axis] = m
    i = np.arange(m, dtype=np.float64)
    norm = np.sqrt(i * (i + 1.0))
    norm[0] = 1.0
    first = [slice(None)] * a.ndim
    first[axis] = slice(0, 1)
    first_t = tuple(first)
    if mode == "fwd":
        incl = np.cumsum(a, axis=axis)
        out = ((incl - a) - i.reshape(shape) * a) * (1.0 / norm).reshape(shape)
        last = [slice(None)] * a.ndim
        last[axis] = slice(m - 1, m)
        out[first_t] = incl[tuple(last)] / math.sqrt(m)  # the sum as the kernel adds it: left to right
        return out
    w = a * (1.0 / norm if mode == "bwd" else 1.0 / (norm * norm)).reshape(shape)
    w[first_t] = 0.0
    rev = np.flip(np.cumsum(np.flip(w, axis=axis), axis=axis), axis=axis) - w  # sum over i > c
    if mode == "bwd":
        return (a[first_t] / math.sqrt(m) + rev) - i.reshape(shape) * w
    return (a[first_t] / m + rev) + a * (i / (i + 1.0)).reshape(shape)


#: arrays of more values than this are rotated by the compiled kernel
#: (:func:`hierdp._kernels.helmert.helmert_rows`, one node at a time, every dimension in cache),
#: smaller ones by numpy (:func:`_helmert_axis` per dimension: no compile for a small
#: release) until the kernel is loaded in this process, then by the kernel too (several
#: times faster warm); the two give the same bits
KERNEL_MIN = 1 << 16

_MODES = {"fwd": 0, "bwd": 1, "sq": 2}


def _kernel_ready() -> bool:
    """Whether :func:`helmert_rows` is compiled or loaded in this process already."""
    return bool(helmert_rows.signatures)


def _apply(a: np.ndarray, mode: str) -> np.ndarray:
    """Apply the Helmert transform ``mode`` along every cell axis of ``a`` ``(n, k_1, ..., k_D)``.

    Each dimension of size ``m`` costs ``O(m)`` per vector (cumulative sums, no ``m x m``
    product); large arrays go to the compiled kernel, which keeps every dimension in cache."""
    shape = a.shape
    sizes = tuple(int(m) for m in shape[1:])
    if all(m == 1 for m in sizes):
        return a
    if a.size <= KERNEL_MIN and not _kernel_ready():
        for ax in range(1, a.ndim):
            if shape[ax] > 1:
                a = _helmert_axis(a, ax, mode)
        return a
    n, k = shape[0], math.prod(sizes)
    flat = np.ascontiguousarray(a, dtype=np.float64).reshape(n, k)
    out = np.empty((n, k))
    dims = np.asarray(sizes, dtype=np.int64)
    code = _MODES[mode]
    step = max(1, (1 << 18) // max(k, 1))  # about 2 MB of rows per piece
    threads.run_pieces(lambda r: helmert_rows(flat, out, dims, code, r[0], r[1]), threads.spans(n, step))
    return out.reshape(shape)


def _levels_present(design: MarginalsDesign, depth: np.ndarray) -> Iterator[tuple[int, _LevelDesign, np.ndarray]]:
    """``(depth, its design, its rows)`` for each measured level with rows among ``depth``."""
    for d, lvd in enumerate(design.per_depth):
        if lvd is None:
            continue
        rows = np.flatnonzero(depth == d)
        if rows.size:
            yield d, lvd, rows


def _dims_key(dims: Any, where: str) -> tuple:
    if isinstance(dims, str):
        return (dims,)
    if isinstance(dims, (tuple, list)) and all(isinstance(d, str) for d in dims):
        return tuple(dims)
    raise PluginError(f"{where}: marginal dimensions must be a list of cell dimension names (e.g. ['age', 'sex'], "
                      f"[] for the node total), got {dims!r:.60}")


def _parse_spec(spec: Any, where: str) -> dict[tuple, float]:
    """One level's strategy: ``{dims: share}`` or ``[{dims: [...], share: s}, ...]``."""
    if isinstance(spec, Mapping):
        items = [(_dims_key(k, where), v) for k, v in spec.items()]
    elif isinstance(spec, Sequence) and not isinstance(spec, str):
        items = []
        for entry in spec:
            if not isinstance(entry, Mapping) or set(entry) - {"dims", "share"} or "share" not in entry:
                raise PluginError(f"{where}: each marginal is {{dims: [...], share: s}}, got {entry!r:.60}")
            items.append((_dims_key(entry.get("dims", []), where), entry["share"]))
    else:
        raise PluginError(f"{where}: a level's strategy is {{('age', 'sex'): 0.5, ...}} or a list of "
                          f"{{dims: [...], share: s}}, got {spec!r:.60}")
    if not items:
        raise PluginError(f"{where}: the strategy measures no marginal; name at least one")
    out: dict[tuple, float] = {}
    for dims, share in items:
        if len(set(dims)) != len(dims):
            raise PluginError(f"{where}: marginal {list(dims)} names a dimension twice")
        f = rules.finite_float(share)
        if f is None or f <= 0:
            raise BudgetError(f"{where}: the share of marginal {list(dims)} must be a number > 0, got {share!r:.60}")
        key = tuple(sorted(dims))
        if key in out:
            raise PluginError(f"{where}: marginal {list(dims)} is listed twice; give it one share")
        out[key] = f
    s = math.fsum(out.values())
    if not math.isclose(s, 1.0, rel_tol=rules.SUM_RTOL):
        raise BudgetError(f"{where}: the shares add up to {s:g}; make them add up to 1 (the level's budget is split "
                          "over its marginals by basic composition)")
    return out


def parse_strategy(strategy: Any) -> dict[str | None, dict[tuple, float]]:
    """``{level: {dims: share}}``; key ``None`` holds a strategy shared by every level;
    ``None`` (no strategy): every level measures the full histogram."""
    if strategy is None:
        return {}
    if isinstance(strategy, Mapping) and strategy and all(rules.finite_float(v) is not None
                                                          for v in strategy.values()):
        return {None: _parse_spec(strategy, "strategy")}
    if isinstance(strategy, Sequence) and not isinstance(strategy, str):
        return {None: _parse_spec(strategy, "strategy")}
    if not isinstance(strategy, Mapping) or not strategy:
        raise PluginError("plan 'marginals' needs strategy=: per level, the marginals it measures with their "
                          "shares, e.g. {'county': {('age', 'sex'): 0.5, ('age',): 0.3, (): 0.2}}")
    return {str(level): _parse_spec(spec, f"strategy for level {level!r}") for level, spec in strategy.items()}


class Marginals(Plan):
    """Marginal-query strategies per level on histogram cells, with one consistent GLS estimate.

    Parameters
    ----------
    strategy : per level, the marginals it measures and their shares of the level's budget:
        ``{"county": {("age", "sex"): 0.5, ("age",): 0.3, (): 0.2}}`` (``()`` = the node
        total), or in specs ``{county: [{dims: [age, sex], share: 0.5}, ...]}``; one spec
        without level keys applies to every level. Levels not named (every level when
        ``strategy`` is None) measure the full histogram (every dimension, share 1).
    cells : the cell dimensions in declaration order, ``{name: size or labels}``
        (``df.dptree(..., cells=...)`` fills it when omitted; one-histogram values,
        shape ``(n,)``, need none).
    mechanism, budget : as for ``per_level`` (noise per marginal cell; the split over levels).
    integer : finish with consistent non-negative integers that keep the invariants
        (``nonneg`` then ``round``, weighted by the GLS per-cell variances). With node-total
        invariants this is the only way to both: the cell-by-cell chain steps cannot keep a
        total over cells, so the plan runs them on the tree whose invariant nodes carry
        their totals as exact nodes above their cells (:func:`integer_with_totals`).
    """

    name = "marginals"
    default_postprocess = ()
    supports_invariants = True
    invariant_covers = ("total", "cells")  # each node's total over its cells (census practice) or every cell
    takes_neighbours = True  # for the marginals' sensitivity
    returns_estimate = True  # a consistent GLS estimate with exact variances
    keyed_noise = True
    runs_by_subtree = True

    def __init__(self, strategy: Any = None, cells: Mapping[str, Any] | None = None,
                 mechanism: Any = "discrete_laplace", budget: Any = "equal", integer: bool = False) -> None:
        if not isinstance(integer, (bool, np.bool_)):
            raise PluginError(f"plan 'marginals': integer must be True or False, got {integer!r:.40}")
        self.integer = bool(integer)
        self.strategy = parse_strategy(strategy)
        self.cells = None if cells is None else self._parse_cells(cells)
        self.mechanism = resolve_mechanism(mechanism)
        self.budget = budget
        self._strategy = _strategy(budget) if _is_strategy(budget) else None
        if self.mechanism.delta_per_use > 0:
            raise PluginError(f"plan 'marginals' takes pure ε or ρ mechanisms; {self.mechanism.name!r} has a δ per "
                              "use (use discrete_laplace, laplace, discrete_gaussian or gaussian)")

    @staticmethod
    def _parse_cells(cells: Mapping[str, Any]) -> list[tuple[str, int]]:
        if not isinstance(cells, Mapping) or not cells:
            raise PluginError("plan 'marginals': cells= maps each cell dimension to its size or labels, "
                              "e.g. {'age': 5, 'sex': ['F', 'M']}")
        out = []
        for name, v in cells.items():
            size = int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else len(v)
            if size < 1:
                raise PluginError(f"plan 'marginals': cell dimension {name!r} needs at least one value")
            out.append((str(name), size))
        return out

    def with_cells(self, cells: Mapping[str, Any]) -> Marginals:
        """A copy of this plan with its cell dimensions set (front-ends call it)."""
        new = object.__new__(Marginals)
        new.__dict__.update(self.__dict__)
        new.cells = self._parse_cells(cells)
        return new

    @property
    def budget_unit(self) -> str:
        return self.mechanism.budget_unit

    @property
    def budget_owner(self) -> str:
        return f"mechanism {self.mechanism.name!r}"

    def total_for(self, loss: PrivacyLoss) -> tuple[float, dict[str, Any]]:
        rules.enforce(rules.rho_per_level_problem(self.mechanism.budget_unit, rho_given=loss.rho is not None,
                                                  per_level=self._strategy is None and loss.epsilon is not None),
                      BudgetError)
        # an (ε, δ) request on Gaussian noise met under loss.accountant, as plan 'per_level' does (issue 34):
        # the queries' Gaussian noise is one Gaussian mechanism with μ² = 2 Σ ρ (sequential within a level)
        return calibrated_total(self.mechanism.budget_unit, loss, curve=getattr(self.mechanism, "privacy_curve", None),
                                mechanism=self.mechanism.name)

    def _level_strategy(self, tree: Tree, names: list[str]) -> dict[str, dict[tuple, float]]:
        levels = tree.level_names
        unknown = [lv for lv in self.strategy if lv is not None and lv not in levels]
        if unknown:

            raise PluginError("plan 'marginals': " + expected_one_of("level in strategy", unknown[0], levels))
        out = {}
        for lv in levels:
            spec = self.strategy.get(lv, self.strategy.get(None, {tuple(sorted(names)): 1.0}))
            for dims in spec:
                bad = [d for d in dims if d not in names]
                if bad:

                    raise PluginError(f"plan 'marginals', level {lv!r}: " +
                                      expected_one_of("cell dimension", bad[0], names))
            out[lv] = spec
        return out

    def _cells_of(self, values_shape: tuple[int, ...]) -> tuple[list[str], tuple[int, ...]]:
        """The cell dimensions' names and sizes for values of shape ``(n,)`` or ``(n, k)``."""
        if self.cells is None and (len(values_shape) == 1 or values_shape[1] == 1):
            self_cells: list[tuple[str, int]] = []  # one count per node: no cell dimension
        elif self.cells is None:
            raise PluginError("plan 'marginals' needs cells= (the cell dimensions and their sizes), e.g. "
                              "plan={'name': 'marginals', 'strategy': ..., 'cells': {'age': 5, 'sex': 2}}; "
                              "df.dptree(..., cells=...) fills it")
        else:
            self_cells = self.cells
        k = int(np.prod([s for _, s in self_cells]))
        got = 1 if len(values_shape) == 1 else values_shape[1]
        if got != k:
            raise DataError(f"plan 'marginals': the cells {dict(self_cells)} make {k} cells per node but the values "
                            f"have {got}")
        return [n for n, _ in self_cells], tuple(s for _, s in self_cells)

    def design(self, tree: Tree, values_shape: tuple[int, ...], *, total: float, sensitivity: Sensitivity,
               neighbours: str = "add_remove", invariants: np.ndarray | None = None,
               invariants_cover: str = "cells", true_values: np.ndarray | None = None) -> MarginalsDesign:
        """Everything of the measurement but the counts and the noise: the budget of each
        level (on the whole tree's shape; ``true_values``, external order, only for a
        strategy that reads them), each level's marginals with their budgets, variances and
        keyed-noise measurement numbers, and the rotated-column variances ``1 / lambda_d``
        (module docstring). A release by subtree computes it once and measures each task
        with it (:meth:`measure_rotated`), so every node gets the in-memory noise."""
        names, sizes = self._cells_of(values_shape)
        k = int(np.prod(sizes))
        strat = self._level_strategy(tree, names)
        mech = self.mechanism
        msens = rules.marginal_sensitivity(sensitivity, neighbours)
        has_inv = invariants is not None and bool(invariants.any())
        totals_only = has_inv and invariants_cover == "total" and k > 1
        # node-total invariants leave the other directions of those nodes to measure
        inv_levels = [] if totals_only else invariant_levels(tree, invariants)
        alloc, desc, reads_true = resolve_budget(tree, total, self.budget if self._strategy is None else self._strategy,
                                                 mechanism=mech, sensitivity=msens, true_values=true_values,
                                                 invariant_levels=inv_levels)
        spends: list[Spend] = []
        levels: list[LevelSpend] = []
        described: dict[str, Any] = {}
        per_depth: list[_LevelDesign | None] = []
        unit = "epsilon" if mech.budget_unit == "epsilon" else "rho"
        for d, lv in enumerate(tree.level_names):
            b = float(alloc.get(lv, 0.0))
            idx = tree.internal.level_index[d]
            n_d = (idx.stop - idx.start) if isinstance(idx, slice) else int(np.size(idx))
            if b <= 0:
                levels.append(LevelSpend(level=lv, depth=d, budget=0.0, unit=mech.budget_unit, mechanism=mech.name,
                                         n_nodes=n_d, noise_variance=0.0 if lv in inv_levels else math.inf,
                                         sensitivity_l1=msens.l1, sensitivity_l2=msens.l2))
                per_depth.append(None)
                continue
            lam = np.zeros(sizes)
            described[lv] = []
            marg: list[tuple[tuple[int, ...], float, float, int]] = []
            for j, (dims, share) in enumerate(strat[lv].items()):
                summed = tuple(i for i, nm in enumerate(names) if nm not in dims)
                var_m = float(mech.variance(share * b, msens))
                marg.append((summed, share * b, var_m, MEASUREMENT_BASE + j))
                ind = np.ones(sizes)
                for i in summed:
                    e0 = np.zeros(sizes[i])
                    e0[0] = 1.0
                    ind = ind * e0.reshape([-1 if a == i else 1 for a in range(len(sizes))])
                lam += ind * float(np.prod([sizes[i] for i in summed])) / var_m
                described[lv].append({"dims": [nm for nm in names if nm in dims], "share": share,
                                      "budget": share * b, "noise_variance": var_m})
            lam_f = lam.reshape(k)
            with np.errstate(divide="ignore"):
                inv_lam = np.where(lam_f > 0, 1.0 / np.where(lam_f > 0, lam_f, 1.0), np.inf)
            per_depth.append(_LevelDesign(marginals=marg, lam=lam_f, inv_lam=inv_lam))
            cell_var = _cell_variance(inv_lam.reshape((1,) + sizes)).reshape(k)
            spends.append(Spend(b, unit, label=lv))
            levels.append(LevelSpend(level=lv, depth=d, budget=b, unit=mech.budget_unit, mechanism=mech.name,
                                     n_nodes=n_d, noise_variance=float(np.mean(cell_var)),
                                     sensitivity_l1=msens.l1, sensitivity_l2=msens.l2))
        info: dict[str, Any] = {"method": "gls_marginals" + ("+nonneg+round" if self.integer else ""),
                                "budget_strategy": desc, "marginals": described,
                                # the chain protocol: a consistent estimate, linear unless made integer
                                "consistent": True, "linear": not self.integer}
        if self.integer:
            info["variance_note"] = ("variance of the linear GLS estimate; the integer output is not linear in the "
                                     "measurements")
        if reads_true:
            info["non_private"] = [f"budget strategy {desc!r} chose the split by reading true counts"]
        return MarginalsDesign(sizes=sizes, k=k, per_depth=per_depth, sensitivity=msens, totals_only=totals_only,
                               has_invariants=has_inv, spends=spends, levels=levels, info=info,
                               reads_true_counts=bool(reads_true), budget_strategy=desc)

    def measure_rotated(self, design: MarginalsDesign, depth: np.ndarray, values: np.ndarray, ids: np.ndarray,
                        key: NoiseKey, invariants: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The rotated measurements ``z`` and their variances ``1 / lambda`` ``(m, k)`` of any
        set of nodes (row ``r``: depth ``depth[r]``, counts ``values[r]`` ``(m, k)``,
        noise identity ``ids[r]``, its index in the full tree's internal order), ``inf``
        where unmeasured; ``invariants`` (row mask) enter exactly (variance 0: every
        rotated column, or column 0, the node total, under ``totals_only``).

        The noise of marginal ``j`` of a level at node ``g``, cell ``c`` of the marginal
        (row-major over the dimensions it keeps) is keyed by (key, ``MEASUREMENT_BASE + j``,
        ``g``, ``c``) only (:mod:`hierdp.keyed_noise`), so measuring the nodes task by task,
        in any order and on any thread count, draws the noise the whole tree's measurement
        draws, bit for bit. One vectorised pass per level present."""
        draws = self.draw_marginals(design, depth, values, ids, key)
        exact = None
        if invariants is not None and invariants.any():
            exact = values.reshape(values.shape[0], design.k)[invariants]
        return self.rotated_from_draws(design, depth, draws, invariants, exact)

    def draw_marginals(self, design: MarginalsDesign, depth: np.ndarray, values: np.ndarray, ids: np.ndarray,
                       key: NoiseKey) -> dict[tuple[int, int], np.ndarray]:
        """The noisy marginals of any set of nodes (as :meth:`measure_rotated`): ``{(depth,
        j): noisy}``, marginal ``j`` of that level's strategy at the rows of that depth, in
        row order, shaped ``(rows, kept dimensions...)``. Integers for an integer mechanism:
        the compact form a split release spills between its passes (about 1.3 values per
        node-cell on the census strategy, small ones), from which
        :meth:`rotated_from_draws` gives back the rotated measurements bit for bit."""
        sizes, k = design.sizes, design.k
        mech = self.mechanism
        m = values.shape[0]
        vals = values.reshape(m, k)
        out: dict[tuple[int, int], np.ndarray] = {}
        for d, lvd, rows in _levels_present(design, depth):
            n_d = rows.size
            Xc = vals[rows].reshape((n_d,) + sizes)
            for j, (summed, budget, _var_m, measurement) in enumerate(lvd.marginals):
                true_m = Xc.sum(axis=tuple(1 + i for i in summed)) if summed else Xc
                flat_m = np.ascontiguousarray(true_m).reshape(n_d, -1)
                noisy_m = mech.sample_keyed(flat_m, budget, design.sensitivity, key, ids[rows], measurement)
                out[(d, j)] = np.asarray(noisy_m).reshape(true_m.shape)
        return out

    def rotated_from_draws(self, design: MarginalsDesign, depth: np.ndarray,
                           draws: Mapping[tuple[int, int], np.ndarray], invariants: np.ndarray | None = None,
                           exact: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The rotated measurements ``z`` and variances of :meth:`measure_rotated` from the
        noisy marginals :meth:`draw_marginals` drew (any integer dtype holding the same
        values gives the same bits) and, for the ``invariants`` rows, their true counts
        ``exact`` ``(rows, k)``. Post-processing of noisy values and public structure, apart
        from the invariants, which are published exactly anyway."""
        sizes, k = design.sizes, design.k
        m = depth.shape[0]
        z = np.zeros((m, k))
        zvar = np.full((m, k), np.inf)
        for d, lvd, rows in _levels_present(design, depth):
            n_d = rows.size
            rhs = np.zeros((n_d,) + sizes)
            for j, (summed, _budget, var_m, _measurement) in enumerate(lvd.marginals):
                noisy_m = draws[(d, j)]
                rhs += np.expand_dims(np.asarray(noisy_m, dtype=np.float64), tuple(1 + i for i in summed)) / var_m
            zt = _apply(rhs, "fwd").reshape(n_d, k)
            lam_f = lvd.lam
            z[rows] = np.where(lam_f > 0, zt / np.where(lam_f > 0, lam_f, 1.0), 0.0)
            zvar[rows] = lvd.inv_lam
        if invariants is not None and invariants.any():
            if exact is None:
                raise ValueError("rotated_from_draws: invariant rows need their exact counts")
            if design.totals_only:   # rotated column 0 is the node total / sqrt(k): exact
                z[invariants, 0] = exact.astype(np.float64).sum(axis=1) / math.sqrt(k)
                zvar[invariants, 0] = 0.0
            else:
                z[invariants] = _apply(exact.astype(np.float64).reshape((-1,) + sizes), "fwd").reshape(-1, k)
                zvar[invariants] = 0.0
        return z, zvar

    @staticmethod
    def rotate_back(design: MarginalsDesign, x: np.ndarray, xv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cells' estimate ``Q x`` and per-cell variances ``(Q o Q) xv`` from the rotated
        columns' GLS estimate ``x`` and variances ``xv`` ``(m, k)`` (module docstring)."""
        m, sizes, k = x.shape[0], design.sizes, design.k
        out = _apply(np.asarray(x, dtype=np.float64).reshape((m,) + sizes), "bwd").reshape(m, k)
        var = _cell_variance(np.asarray(xv, dtype=np.float64).reshape((m,) + sizes)).reshape(m, k)
        return out, var

    def measure(self, tree: Tree, values: np.ndarray, *, total: float, delta: float | None,
                sensitivity: Sensitivity, rng: RandomSource, invariants: np.ndarray | None = None,
                neighbours: str = "add_remove", invariants_cover: str = "cells", key: NoiseKey | None = None,
                node_ids: np.ndarray | None = None) -> Measurements:
        """The GLS estimate (see the class). ``key`` and ``node_ids``: noise keyed per node
        (:func:`hierdp.plans.per_level.measure`); marginal ``j`` of a level's strategy (in
        its listed order) is measurement ``MEASUREMENT_BASE + j``, its cells indexed
        row-major over the dimensions it keeps (:meth:`measure_rotated`)."""
        key = key_for(rng, key)
        ids = node_identities(tree, node_ids)
        vals = values if values.ndim == 2 else values.reshape(-1, 1)
        des = self.design(tree, values.shape, total=total, sensitivity=sensitivity, neighbours=neighbours,
                          invariants=invariants, invariants_cover=invariants_cover,
                          true_values=tree.to_external(vals))
        n, k = tree.n_nodes, des.k
        has_inv, totals_only = des.has_invariants, des.totals_only
        z, zvar = self.measure_rotated(des, tree.internal.depth, vals, ids, key,
                                       invariants if has_inv else None)
        est = blue(tree, z, zvar)
        del z, zvar
        x, var = self.rotate_back(des, np.asarray(est.values).reshape(n, k), np.asarray(est.variance).reshape(n, k))
        if has_inv and not totals_only:
            x[invariants] = vals[invariants]   # exact up to round-off already
            var[invariants] = 0.0
        if self.integer:
            totals = vals[invariants].astype(np.float64).sum(axis=1) if totals_only else None
            x = integer_with_totals(tree, x, var, invariants if totals_only else None, totals,
                                    exact_cells=invariants if has_inv and not totals_only else None)
        if values.ndim == 1:
            x, var = x[:, 0], var[:, 0]
        return Measurements(values=x, variance=var, spends=list(des.spends), levels=list(des.levels),
                            info=dict(des.info))

    def ledger_fields(self) -> dict[str, str]:
        desc = self._strategy.name if self._strategy is not None else "per-level"
        return {"mechanism": self.mechanism.name, "budget_strategy": f"{desc}; marginals per level"}

    def __repr__(self) -> str:
        return f"<plan 'marginals' mechanism={self.mechanism.name!r}>"


def integer_with_totals(tree: Tree, x: np.ndarray, var: np.ndarray, inv: np.ndarray | None,
                        totals: np.ndarray | None, exact_cells: np.ndarray | None = None) -> np.ndarray:
    """Consistent non-negative integers close to the consistent estimate ``x`` ``(n, k)``
    (internal order; weights ``1 / var``) that keep the invariants.

    ``exact_cells`` (node mask): every cell of those nodes is exact — ``nonneg`` with
    variance 0 there, then controlled rounding (integral exact nodes keep their value).
    ``inv`` + ``totals``: only each invariant node's total over its cells is exact. Cells
    couple through those totals, so the problem is re-posed on a tree where it is again a
    tree problem: the invariant nodes (upward closed: their ancestors are invariant, and
    each has all or none of its children invariant) become *total* nodes with their
    invariant children below them; an invariant node whose children are not invariant
    (a frontier node) has its ``k`` cells below its total, and every node under it keeps
    its cells below its parent's same cell. ``nonneg`` with the totals exact, then
    ``round`` (exact integral totals keep their value), solve it; cells of the invariant
    nodes above the frontier are the sums of the frontier's cells (they are left out of the
    weighted objective: a further approximation besides the diagonal GLS weights).
    """

    n, k = x.shape
    if inv is None or totals is None:
        v = np.array(var, dtype=np.float64, copy=True)
        if exact_cells is not None:
            v[exact_cells] = 0.0
        xn, _ = nonneg(tree, x, v)
        return controlled_round(tree, xn)
    par = tree.internal.parent
    nch = tree.internal.n_children
    p_inv = np.where(par >= 0, inv[np.maximum(par, 0)], True)
    if np.any(inv & ~p_inv):
        raise DataError("integer output with node-total invariants needs invariants from the top (every ancestor of "
                        "an invariant node invariant, e.g. levels total and state)")
    inv_children = np.bincount(par[inv & (par >= 0)], minlength=n)
    if np.any(inv & (inv_children > 0) & (inv_children < nch)):
        raise DataError("integer output with node-total invariants needs each invariant node to have all or none of "
                        "its children invariant (use whole levels)")
    frontier = inv & (inv_children == 0)
    in_d = frontier.copy()
    for h in range(int(tree.internal.height[0]), 0, -1):   # parents before children
        sl = tree.internal.height_slice(h)
        p = par[sl]
        in_d[sl] |= np.where(p >= 0, in_d[np.maximum(p, 0)], False)
    I_idx = np.flatnonzero(inv)
    D_idx = np.flatnonzero(in_d)
    m = I_idx.size
    pos_i = np.full(n, -1, dtype=np.int64)
    pos_i[I_idx] = np.arange(m)
    pos_d = np.full(n, -1, dtype=np.int64)
    pos_d[D_idx] = np.arange(D_idx.size)
    cells = np.arange(k, dtype=np.int64)
    par2 = np.empty(m + D_idx.size * k, dtype=np.int64)
    pi = par[I_idx]
    par2[:m] = np.where(pi >= 0, pos_i[np.maximum(pi, 0)], -1)
    pd_ = par[D_idx]
    cell_par = np.where(frontier[D_idx][:, None], pos_i[D_idx][:, None],
                        m + pos_d[np.maximum(pd_, 0)][:, None] * k + cells[None, :])
    par2[m:] = cell_par.reshape(-1)
    t2 = _Tree.from_parent(par2)
    vals2 = np.concatenate([np.asarray(totals, dtype=np.float64), x[D_idx].reshape(-1)])
    var2 = np.concatenate([np.zeros(m), np.asarray(var, dtype=np.float64)[D_idx].reshape(-1)])
    var2[m:][var2[m:] == 0] = 1e-300   # a cell the GLS pinned (e.g. by exact neighbours) stays put
    xn, _ = nonneg(t2, t2.to_internal(vals2), t2.to_internal(var2))
    r2 = t2.to_external(controlled_round(t2, xn))
    if not np.array_equal(r2[:m], np.rint(totals).astype(np.int64)):
        raise DataError("integer output could not keep the invariant totals; they must be integer counts")
    leaves = np.flatnonzero(nch == 0)
    full = np.zeros((n, k), dtype=np.int64)
    full[leaves] = r2[m:].reshape(-1, k)[pos_d[leaves]]
    return tree.internal.sum_up(full, consume=True)


def _cell_variance(v: np.ndarray) -> np.ndarray:
    """Per-cell variances ``(Q o Q) v`` of ``Q x`` for independent rotated columns with
    variances ``v`` (shape ``(n, k_1, ..., k_D)``); ``inf`` wherever an unidentified
    direction reaches the cell."""
    bad = np.isinf(v)
    out = _apply(np.where(bad, 0.0, v), "sq")
    if bad.any():
        reach = _apply(bad.astype(np.float64), "sq") > 0
        out = np.where(reach, np.inf, out)
    return out
