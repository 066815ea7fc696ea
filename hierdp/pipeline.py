"""One private release: plan → measurements → post-processing → ledger.

The flow of the design: true node counts → a *plan* measures them within the budget
(``per_level`` by default: one mechanism call per level, basic composition over levels,
parallel within a level) → :class:`~hierdp.measurements.Measurements` (noisy values,
exact variances, spends) → the post-processing chain on noisy data only →
:class:`~hierdp.result.ReleaseResult` with the ledger the accountant builds from every
spend (the plan's and, for a data-dependent structure, the decomposition's).

:func:`release` runs named steps, each usable on its own (a release cut into subtree
tasks calls :func:`measure` per task and :func:`post_process` per subtree):

1. :func:`resolve` — keywords → :class:`Resolved` (plan, :class:`~hierdp.accounting.PrivacyLoss`
   built and validated once, the plan's total and guarantee, sensitivity, invariants, chain);
2. :func:`check` — refusals that need no randomness (a session overspend first);
3. :func:`open_account` then :func:`measure` — a private structure is paid first, then
   the plan measures with what is left;
4. :func:`account` — the plan's spends composed, the guarantee stated;
5. :func:`post_process` — the chain on the measurements only;
6. :func:`build_ledger` — the ledger.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import registry, rules, subtrees
from hierdp._engine import jit as _jit
from hierdp._engine import threads as _threads
from hierdp._engine.columns import ColumnsOnDisk, column_bounds
from hierdp._engine.jit import release_finished, reusing
from hierdp._engine.tree_kernels import children_mismatch
from hierdp.accounting import Accountant, PrivacyLoss, structure_total
from hierdp.decompositions.base import Structure
from hierdp.errors import (
    BudgetError,
    DataError,
    NotForPublicationWarning,
    PluginError,
    PrivacyError,
    expected_one_of,
    warn,
)
from hierdp.execution.executors import Executor, Inline, close_executor, resolve_executor
from hierdp.keyed_noise import NoiseKey
from hierdp.ledger import Ledger
from hierdp.measurements import Estimate, Measurements
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans import per_level as PL
from hierdp.plans.base import Plan
from hierdp.plans.marginals import Marginals, MarginalsDesign
from hierdp.plans.per_level import PerLevel
from hierdp.postprocessors.base import PostProcessor, node_values, node_variance
from hierdp.postprocessors.chain import resolve_postprocessors, run_chain
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.session import Reservation
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.rng import RandomSource
    from hierdp.session import Session

__all__ = ["release", "postprocess", "resolve_plan", "external_estimate", "resolve_invariants", "Resolved",
           "resolve", "check", "open_account", "measure", "account", "post_process", "build_ledger",
           "release_by_subtree", "SplitRun"]


class _PlanDefault(tuple[str, ...]):
    """The default ``postprocess=``: the plan's own ``default_postprocess`` (``('blue',)`` for
    ``per_level``)."""

    def __repr__(self) -> str:
        return "<the plan's default, ('blue',) for per_level>"


_PLAN_DEFAULT = _PlanDefault(("blue",))


def resolve_plan(plan: Any, *, mechanism: Any = None, budget: Any = None) -> Plan:
    """A plan instance from a registry name, an instance or ``{"name": ..., **params}``.

    ``mechanism`` and ``budget`` are the parameters of the default plan ``per_level``
    (given beside ``plan`` for brevity); another plan takes its parameters in ``plan``.
    """
    extra = {k: v for k, v in (("mechanism", mechanism), ("budget", budget)) if v is not None}
    if isinstance(plan, Plan):
        if extra:
            raise PluginError(f"pass {', '.join(extra)} to the plan object itself, not beside plan=")
        return plan
    if isinstance(plan, str):
        name, params = plan, {}
    elif isinstance(plan, Mapping) and "name" in plan:
        name = plan["name"]
        params = {k: v for k, v in plan.items() if k not in ("name", "params")}
        params.update(plan.get("params") or {})
    else:
        raise PluginError(f"plan must be a registered name such as 'per_level', a Plan or {{'name': ...}}, "
                          f"got {plan!r}")
    if extra:
        if name != "per_level":
            raise PluginError(f"{' and '.join(extra)} are parameters of the plan 'per_level'; plan {name!r} takes "
                              "its parameters in plan={'name': ..., ...}")
        params = {**params, **extra}
    return cast(Plan, registry.create("plan", name, **params))


def _check_values(tree: Tree, values: np.ndarray) -> np.ndarray:
    vals = np.asarray(values)
    if vals.ndim not in (1, 2) or vals.shape[0] != tree.n_nodes:
        raise DataError(f"true values must have shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {vals.shape}")
    if vals.dtype == object or not (np.issubdtype(vals.dtype, np.number) or vals.dtype == bool):
        raise DataError(f"true values must be numeric, got dtype {vals.dtype}")
    if np.issubdtype(vals.dtype, np.floating) and not np.all(np.isfinite(vals)):
        raise DataError("true values contain NaN or infinity")
    if vals.dtype == np.uint64 and vals.size and vals.max() > np.iinfo(np.int64).max:
        rules.enforce(rules.value_range_problem(float(vals.max())), DataError)
    if vals.size and vals.dtype != bool:
        # exact for integers: |int64 min| does not fit int64, so compare the two ends
        hi, lo = vals.max(), vals.min()
        big = max(abs(int(hi)), abs(int(lo))) if np.issubdtype(vals.dtype, np.integer) else max(abs(hi), abs(lo))
        rules.enforce(rules.value_range_problem(big), DataError)
    return vals


def _count_problem(tree: Tree, vals: np.ndarray, check: Any) -> str | None:
    """Node values that cannot be counts (``check_counts``): ``True`` (default; ``"strict"``
    is the same, its older spelling) refuses a negative one and a node that is not the sum
    of its leaves, cell by cell for ``(n, k)`` values (one vectorised bottom-up pass: exact
    for integers, 1e-9 relative for floats, whose sums depend on the order of addition);
    ``False`` checks nothing. Says what, never which node or value (they are private)."""
    if check is False:
        return None
    if check is not True and check != "strict":
        return f"check_counts must be True, 'strict' or False, got {check!r:.40}"
    if vals.dtype == bool or not vals.size:
        return None
    if vals.min() < 0:
        return _NEGATIVE_COUNTS
    if tree.n_leaves == tree.n_nodes:  # a lone root: nothing to add up
        return None
    if vals.dtype == np.int64 and vals.size > _jit.SMALL_INPUT:
        got = _children_mismatch(tree, vals)
        if got == 1:
            return _COUNTS_DO_NOT_ADD_UP
        if got == 0:
            return None  # (2, a sum past int64: the aggregation below says so)
    agg = tree.aggregate(vals[tree.leaves])
    if np.issubdtype(vals.dtype, np.integer):
        off = bool(np.any(agg != vals))
    else:  # non-negative leaves: a sum's rounding error is relative to the sum itself
        off = not np.allclose(agg, vals, rtol=1e-9, atol=1e-12 * float(agg.max(initial=0.0)))
    if off:
        return _COUNTS_DO_NOT_ADD_UP
    return None


_CHECK_PIECE = 1 << 22  # child values a piece of the counts check


def _children_mismatch(tree: Tree, vals: np.ndarray) -> int:
    """:func:`hierdp._engine.tree_kernels.children_mismatch` over every internal node of
    ``tree`` for its non-negative int64 ``vals`` (external order, ``(n,)`` or ``(n, k)``),
    in pieces of about the same number of child rows on ``hierdp.get_threads()`` threads:
    0 every node with children is their sum, 1 some is not, 2 a sum passes int64. For
    integers this is the rule of :func:`_count_problem` (node = sum of its leaves), by
    induction from the leaves up."""
    ia = tree.internal
    v2 = np.ascontiguousarray(vals.reshape(vals.shape[0], -1))
    perm = ia.perm if ia.perm is not None else np.zeros(0, np.int64)
    ptr, idx = ia.child_ptr, ia.child_idx
    n_par = int(np.count_nonzero(ia.n_children))  # the nodes with children: the internal order's first
    rows = int(ptr[n_par])
    per = max(1, _CHECK_PIECE // max(1, v2.shape[1]))  # child rows a piece
    cuts = np.unique(np.searchsorted(ptr[: n_par + 1], np.arange(0, rows, per), side="right") - 1)
    bounds = [int(c) for c in cuts] + [n_par]
    pieces = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    got = _threads.run_pieces(lambda r: children_mismatch(v2, perm, ptr, idx, r[0], r[1]), pieces)
    return max(got, default=0)


def _sensitivity(sensitivity: Sensitivity | None, max_contributions: int | None,
                 neighbours: str = "add_remove") -> Sensitivity:
    """The per-level sensitivity: at least what one privacy unit can change under
    ``neighbours`` (:func:`hierdp.rules.sensitivity_floor`); a smaller declared one is refused."""
    floor, how = rules.sensitivity_floor(max_contributions, neighbours)
    rules.enforce(rules.sensitivity_problem(sensitivity, floor, how), PrivacyError)
    return sensitivity or floor


def resolve_invariants(tree: Tree, invariants: Any) -> tuple[np.ndarray, list[str]]:
    """An internal-order boolean mask of the invariant nodes and their names for the ledger.

    ``invariants`` is an iterable of level names (every node of the level; ``"total"`` is
    the root), external node ids (int) or label paths (tuples, e.g. ``("CA", "Alameda")``;
    ``()`` is the root).
    """
    mask = np.zeros(tree.n_nodes, dtype=bool)
    names: list[str] = []
    if invariants is None:
        return mask, names
    if isinstance(invariants, (str, int, np.integer, tuple)):
        invariants = [invariants]
    levels = tree.level_names
    ext: list[int] = []
    for item in invariants:
        if isinstance(item, str):
            if item in levels:
                d = levels.index(item)
            elif item == "total":
                d = 0
            else:

                raise DataError(expected_one_of("invariant level", item, levels) +
                                " (or give node ids / label paths)")
            mask[tree.internal.level_index[d]] = True
            names.append(f"level {levels[d]!r}")
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            node = int(item)
            if not 0 <= node < tree.n_nodes:
                raise DataError(f"invariant node {node} is not a node id of the tree (0..{tree.n_nodes - 1})")
            ext.append(node)
            names.append(f"node {node}" if not tree.has_labels else
                         "node " + ("/".join(map(str, tree.path(node))) or levels[0]))
        elif isinstance(item, tuple):
            node = tree.node_id(item)
            ext.append(node)
            names.append("node " + ("/".join(map(str, item)) or levels[0]))
        else:
            raise DataError(f"invariants must be level names, node ids or label paths (tuples), got {item!r:.60}")
    if ext:
        sel = np.zeros(tree.n_nodes, dtype=bool)
        sel[np.asarray(ext, dtype=np.int64)] = True
        mask |= tree.to_internal(sel)
    # closure: a node whose children are all invariant is their sum, published exactly too
    # (so a plan spends nothing on it); one pass per height
    before = mask.copy()
    par, nch = tree.internal.parent, tree.internal.n_children
    for h in range(2, int(tree.internal.height[0]) + 1):
        below = np.flatnonzero(mask[tree.internal.height_slice(h - 1).start:])  # nodes of height < h
        below = below + tree.internal.height_slice(h - 1).start
        sl = tree.internal.height_slice(h)
        cnt = np.bincount(par[below][par[below] >= 0], minlength=tree.n_nodes)
        mask[sl] |= (cnt[sl] == nch[sl]) & (nch[sl] > 0)
    implied = mask & ~before
    if implied.any():
        covered = np.zeros_like(mask)
        for d, lv in enumerate(levels):
            idx = tree.internal.level_index[d]
            if implied[idx].any() and mask[idx].all():
                names.append(f"level {lv!r} (the sum of invariants)")
                covered[idx] = True
        rest = int((implied & ~covered).sum())
        if rest:
            names.append(f"{rest} node(s) whose children are all invariant (their sums)")
    return mask, list(dict.fromkeys(names))


def _check_invariants_kept(est: Estimate, exact: np.ndarray, mask: np.ndarray,
                           pps: list[Any], cover: str = "cells") -> Estimate:
    """Every estimator must keep the invariants exact. Within float round-off the exact
    value is restored (so written tables hold the integer); a step that moved one is an error.
    With ``cover="total"`` only each invariant node's total over its cells is fixed.
    ``exact``: the invariant nodes' published values (``values[mask]``, internal order)."""
    x = np.array(est.values, copy=True)
    if cover == "total" and x.ndim == 2:
        truth = exact.astype(np.float64).sum(axis=1)
        got = np.asarray(x[mask], dtype=np.float64).sum(axis=1)
        if np.any(np.abs(got - truth) > 1e-7 * (1.0 + np.abs(truth))):
            raise PluginError(f"the post-processing chain {[pp.name for pp in pps]} does not keep the invariant node "
                              "totals exact (it treats cells one by one); for non-negative integers that keep them, "
                              "use plan={'name': 'marginals', ..., 'integer': True} with postprocess=[]")
        return est
    truth = exact.astype(np.float64)
    got = np.asarray(x[mask], dtype=np.float64)
    tol = 1e-7 * (1.0 + np.abs(truth))
    if np.any(np.abs(got - truth) > tol):
        raise PluginError(f"the post-processing chain {[pp.name for pp in pps]} does not keep the invariants exact; "
                          "use steps that honour exact nodes (blue, gmc, nonneg, round)")
    x[mask] = exact.astype(x.dtype) if np.issubdtype(x.dtype, np.integer) else truth.reshape(got.shape)
    var = est.variance
    if var is not None:
        var = np.array(var, dtype=np.float64, copy=True)
        var[mask] = 0.0
    return Estimate(x, var, est.info, est.measurement_variance, est.linear, est.consistent)


INVARIANTS_COVER = ("total", "cells")


@dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class Resolved:
    """What :func:`resolve` decided for one release: public facts only, never a true count.

    The later steps (:func:`check`, :func:`measure`, :func:`account`, :func:`post_process`,
    :func:`build_ledger`) read it; a release cut into subtree tasks shares one.

    Attributes
    ----------
    plan : the measurement plan.
    loss : the release's privacy loss (validated once, here).
    total : the budget in the plan's unit that ``loss`` gives (:meth:`Plan.total_for`).
    guarantee : the ledger's guarantee fields for ``loss`` (``guarantee``, ``epsilon``,
        ``delta``, ``rho``); :func:`account` may complete δ.
    sensitivity : per-level sensitivity of one privacy unit (at least the floor).
    neighbours : ``"add_remove"`` or ``"substitute"``.
    invariants : internal-order boolean mask of the nodes published exactly.
    invariant_names : their descriptions for the ledger (empty: no invariants).
    cover : ``"cells"`` or ``"total"``: what an invariant of a node with cells fixes.
    postprocessors : the post-processing chain.
    seed, privacy_unit, max_contributions, notes, private_notes : as given to :func:`release`
        (``private_notes`` may describe the private data and is kept out of the repr).
    """

    plan: Plan
    loss: PrivacyLoss
    total: float
    guarantee: dict[str, Any]
    sensitivity: Sensitivity
    neighbours: str
    invariants: np.ndarray = field(repr=False)
    invariant_names: list[str]
    cover: str
    postprocessors: list[PostProcessor]
    seed: int | None
    privacy_unit: str
    max_contributions: int | None
    notes: tuple[str, ...] = ()
    private_notes: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def measure_keywords(self) -> dict[str, Any]:
        """The optional keywords of ``plan.measure`` this release needs (the plan protocol:
        :attr:`Plan.supports_invariants`, :attr:`Plan.invariant_covers`,
        :attr:`Plan.takes_neighbours`)."""
        extra: dict[str, Any] = {"invariants": self.invariants} if self.invariant_names else {}
        if self.invariant_names and len(self.plan.invariant_covers) > 1:
            extra["invariants_cover"] = self.cover
        if self.plan.takes_neighbours:
            extra["neighbours"] = self.neighbours
        return extra


def _resolve_invariants(tree: Tree, the_plan: Plan, invariants: Any, *, neighbours: str, allow_add_remove: bool,
                        invariants_cover: str, n_cells: int) -> tuple[np.ndarray, list[str], str]:
    """The invariant mask, ledger names and cover of a release, refused when ``the_plan``
    cannot keep them or the neighbour relation does not allow them."""
    inv_mask, inv_names = resolve_invariants(tree, invariants)
    rules.enforce(rules.invariants_problem(neighbours, len(inv_names), bool(allow_add_remove)), PrivacyError)
    if inv_names and not the_plan.supports_invariants:
        raise PluginError(f"plan {the_plan.name!r} cannot keep invariants exact; use plan='per_level' or "
                          "'marginals', or drop invariants=")
    if invariants_cover not in INVARIANTS_COVER:
        raise DataError(f"invariants_cover must be 'total' (each invariant node's total over its cells) or 'cells' "
                        f"(every cell), got {invariants_cover!r:.40}")
    cover = invariants_cover if n_cells > 1 else "cells"
    if inv_names and cover not in the_plan.invariant_covers:
        raise PluginError(f"plan {the_plan.name!r} keeps invariants on every cell only; to publish only the invariant "
                          "nodes' totals exactly use plan={'name': 'marginals'} (without a strategy it measures the "
                          "full histogram), or pass invariants_cover='cells' to publish every cell of them exactly")
    if inv_names and cover == "total":
        inv_names = [f"{nm} (totals over the cells)" for nm in inv_names]
    return inv_mask, inv_names, cover


def resolve(
    tree: Tree,
    *,
    n_cells: int = 1,
    epsilon: float | PrivacyLoss | None = None,
    delta: float | None = None,
    rho: float | None = None,
    plan: Any = "per_level",
    mechanism: Any = None,
    budget: Any = None,
    postprocess: Any = _PLAN_DEFAULT,
    seed: int | None = None,
    sensitivity: Sensitivity | None = None,
    privacy_unit: str = "one row = one individual",
    max_contributions: int | None = None,
    notes: Sequence[str] = (),
    private_notes: Mapping[str, Any] | None = None,
    neighbours: str = "add_remove",
    invariants: Any = None,
    allow_invariants_with_add_remove: bool = False,
    invariants_cover: str = "total",
) -> Resolved:
    """Step 1 of a release: turn :func:`release`'s keywords into a :class:`Resolved`.

    Checks, in this order: the seed, the plan, the neighbour relation, the sensitivity
    (:func:`hierdp.rules.sensitivity_floor`), the invariants (and whether the plan keeps
    them), the privacy loss (:meth:`hierdp.PrivacyLoss.of`, then the plan's
    :meth:`~hierdp.plans.base.Plan.total_for`), the post-processing chain. Reads no true
    count (``n_cells``: the number of histogram cells per node, 1 for ``(n,)`` values) and
    draws no noise.
    """
    rules.enforce(rules.seed_problem(seed), DataError)
    the_plan = resolve_plan(plan, mechanism=mechanism, budget=budget)
    rules.enforce(rules.neighbours_problem(neighbours), PrivacyError)
    sens = _sensitivity(sensitivity, max_contributions, neighbours)
    inv_mask, inv_names, cover = _resolve_invariants(
        tree, the_plan, invariants, neighbours=neighbours, allow_add_remove=allow_invariants_with_add_remove,
        invariants_cover=invariants_cover, n_cells=n_cells)
    loss = PrivacyLoss.of(epsilon, delta, rho, unit=the_plan.budget_unit, who=the_plan.budget_owner)
    total, guarantee = the_plan.total_for(loss)
    # the split's own curve (issue 34: the discrete Gaussian's exact one) needs the public tree and sensitivity
    total, guarantee = the_plan.calibrate(tree, loss, total, guarantee, sensitivity=sens, invariants=inv_mask)
    if postprocess is _PLAN_DEFAULT:
        postprocess = the_plan.default_postprocess
    return Resolved(plan=the_plan, loss=loss, total=total, guarantee=guarantee, sensitivity=sens,
                    neighbours=neighbours, invariants=inv_mask, invariant_names=inv_names, cover=cover,
                    postprocessors=resolve_postprocessors(postprocess), seed=seed, privacy_unit=privacy_unit,
                    max_contributions=max_contributions, notes=tuple(notes), private_notes=dict(private_notes or {}))


def _reserve(session: Session | Reservation | None, r: Resolved) -> tuple[int | None, Session | None]:
    """The session's charge for this release, taken before the plan draws noise: a new
    reservation, or the :class:`~hierdp.session.Reservation` a door made before drawing
    noise of its own (claimed: it serves one release)."""
    if session is None:
        return None, None
    if isinstance(session, Reservation):
        session.session.claim(session.ticket)
        return session.ticket, session.session
    return session.reserve(r.guarantee), session


def check(resolved: Resolved, session: Session | Reservation | None = None) -> None:
    """Step 2: refuse what resolving alone cannot, before any randomness is used.

    A ``session`` refuses a release that would overspend it (:meth:`hierdp.Session.check`);
    a plan whose measurements are already an estimate (:attr:`Plan.returns_estimate`)
    refuses linear steps that need variances (they would misstate them).
    """
    if isinstance(session, Reservation):
        pass  # paid already: the door reserved the whole release before drawing noise of its own
    elif session is not None:
        session.check(resolved.guarantee)
    the_plan = resolved.plan
    if the_plan.returns_estimate:
        redo = [pp.name for pp in resolved.postprocessors if pp.linear and pp.requires_variance]
        if redo:
            raise PluginError(f"plan {the_plan.name!r} hands on its own consistent GLS estimate with exact variances; "
                              f"{redo[0]!r} would treat it as independent measurements and misstate the variances: "
                              "use postprocess=[] or ['nonneg', 'round']")


def open_account(resolved: Resolved, tree: Tree,
                 structure: Structure | None = None) -> tuple[Accountant, dict[str, Any]]:
    """Step 3a (accounting, before measuring): an :class:`~hierdp.accounting.Accountant`
    over the release's total that has paid a data-dependent ``structure``'s spends first,
    and the ledger's ``decomposition`` entry. The plan then measures with what is left,
    ``resolved.total - accountant.total``."""
    acc = Accountant(unit="rho" if resolved.plan.budget_unit == "rho" else "epsilon", budget=resolved.total)
    return acc, _structure_spends(acc, structure, tree)


def measure(resolved: Resolved, tree: Tree, values_internal: np.ndarray, *, total: float,
            rng: RandomSource, key: NoiseKey | None = None) -> Measurements:
    """Step 3: the plan measures the internal-order true ``values_internal`` of ``tree``
    within ``total`` (in the plan's unit) and ``resolved.loss.delta``. The only step that
    reads true counts together with randomness; what it returns is private. A plan with
    :attr:`Plan.keyed_noise` gets ``key`` (:func:`noise_key`): noise keyed per node."""
    extra = resolved.measure_keywords()
    if resolved.plan.keyed_noise:
        extra["key"] = key if key is not None else NoiseKey.from_rng(rng)
    return resolved.plan.measure(tree, values_internal, total=total, delta=resolved.loss.delta,
                                 sensitivity=resolved.sensitivity, rng=rng, **extra)


def noise_key(seed: int | None) -> NoiseKey:
    """The release's noise key: secure (``os.urandom``) when ``seed`` is None, else derived
    from the seed (reproducible, not for publication)."""
    return NoiseKey.fresh() if seed is None else NoiseKey.from_seed(seed)


def account(resolved: Resolved, acc: Accountant, meas: Measurements) -> dict[str, Any]:
    """Step 4: compose the plan's spends into ``acc`` (refusing a plan that spent more than
    the total, or more δ than given) and return the ledger's guarantee fields (an (ε, δ)
    plan given no δ states the δ it spent)."""
    acc.spend_all(meas.spends)  # refuses a plan that spent more than the total
    delta, the_plan = resolved.loss.delta, resolved.plan
    if delta is not None and acc.delta_total > delta * (1 + rules.SUM_RTOL):
        raise BudgetError(f"plan {the_plan.name!r} spent δ = {acc.delta_total:g}, more than delta = {delta:g}")
    guarantee = resolved.guarantee
    if guarantee["guarantee"] == "approx" and the_plan.budget_unit == "approx":
        guarantee = dict(guarantee, delta=acc.delta_total if delta is None else delta)
    return guarantee


def _exact_totals(mask: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """The invariant nodes' published totals over their cells, NaN elsewhere ((n,), the
    order of ``mask``): what the top-down ``nonneg``/``round`` hold exact."""
    t = np.full(mask.shape[0], np.nan)
    t[mask] = np.asarray(exact, dtype=np.float64).reshape(int(mask.sum()), -1).sum(axis=1)
    return t


def post_process(resolved: Resolved, tree: Tree, meas: Measurements, exact: np.ndarray | None = None) -> Estimate:
    """Step 5: the post-processing chain on the (internal-order) measurements only.

    ``exact``: the invariant nodes' published values (internal order, ``values[mask]``),
    which every step must keep (:func:`_check_invariants_kept`); needed when the release
    has invariants. Unmeasured nodes without a consistent step become NaN. (Not
    :func:`postprocess`, which runs one named post-processor on external-order arrays.)
    """
    pps = resolved.postprocessors
    if resolved.invariant_names and resolved.cover == "total" and exact is not None and np.ndim(meas.values) == 2:
        meas = replace(meas, exact_totals=_exact_totals(resolved.invariants, exact))
    est = run_chain(tree, meas, pps)
    if not pps:  # the estimate is the plan's output: its diagnostics (e.g. ghazi's thresholds) stay valid
        est = Estimate(est.values, est.variance, dict(meas.info), est.measurement_variance, est.linear, est.consistent)
    est = _unmeasured_missing(est, pps)
    if resolved.invariant_names:
        if exact is None:
            raise DataError("a release with invariants needs their published values (exact=) to check them")
        est = _check_invariants_kept(est, exact, resolved.invariants, pps, resolved.cover)
    return est


def build_ledger(resolved: Resolved, tree: Tree, meas: Measurements, guarantee: dict[str, Any], *,
                 structure: Structure | None = None, decomposition: dict[str, Any] | None = None,
                 rng: RandomSource) -> Ledger:
    """Step 6: the release's :class:`~hierdp.ledger.Ledger` from the composed ``guarantee``
    (:func:`account`), the plan's per-level summary and what :func:`resolve` decided."""
    the_plan, inv_names = resolved.plan, resolved.invariant_names
    fields = the_plan.ledger_fields()
    ledger = Ledger(
        guarantee=guarantee["guarantee"], epsilon=guarantee.get("epsilon"), delta=guarantee.get("delta"),
        rho=guarantee.get("rho"), privacy_unit=resolved.privacy_unit, max_contributions=resolved.max_contributions,
        mechanism=fields["mechanism"], budget_strategy=fields["budget_strategy"], plan=the_plan.name,
        levels=list(meas.levels), structure=tree.provenance if structure is None else structure.provenance,
        postprocess=[pp.name for pp in resolved.postprocessors], seed=resolved.seed,
        secure_randomness=bool(rng.secure), randomness=repr(rng), notes=list(resolved.notes),
        private_notes=dict(resolved.private_notes), decomposition=dict(decomposition or {}),
        neighbours=resolved.neighbours, invariants=inv_names,
        certified_by=guarantee.get("accountant", ""), accounting=guarantee.get("accounting", ""),
    )
    if inv_names:
        ledger.notes.append(rules.invariants_text(inv_names, resolved.neighbours))
    ledger.non_private.extend(meas.info.get("non_private", []))
    ledger.non_private.extend(the_plan.non_private_reasons())
    return ledger


def release(
    tree: Tree,
    values: np.ndarray,
    *,
    epsilon: float | PrivacyLoss | None = None,
    delta: float | None = None,
    rho: float | None = None,
    plan: Any = "per_level",
    mechanism: Any = None,
    budget: Any = None,
    postprocess: Any = _PLAN_DEFAULT,
    seed: int | None = None,
    sensitivity: Sensitivity | None = None,
    privacy_unit: str = "one row = one individual",
    max_contributions: int | None = None,
    session: Session | Reservation | None = None,
    notes: Sequence[str] = (),
    private_notes: Mapping[str, Any] | None = None,
    structure: Structure | None = None,
    neighbours: str = "add_remove",
    invariants: Any = None,
    allow_invariants_with_add_remove: bool = False,
    invariants_cover: str = "total",
    check_counts: bool | str = True,
    split: Any = None,
    executor: Any = None,
) -> ReleaseResult:
    """Release the node counts ``values`` (external order) of ``tree`` privately.

    The privacy loss is ``epsilon`` (pure ε-DP; with ``delta`` (ε, δ)-DP) or ``rho``
    (ρ-zCDP; with ``delta`` the ledger also states the (ε, δ) it converts to), or a ready
    :class:`~hierdp.accounting.PrivacyLoss` passed as ``epsilon``.

    ``plan`` decides how the counts are measured (default ``per_level`` with
    ``mechanism`` — default ``discrete_laplace`` — and ``budget`` — default ``equal``);
    the noisy values and their exact variances then go through ``postprocess`` in order.
    The sensitivity is what one privacy unit can change per level (one row, or
    ``max_contributions`` rows); a larger one may be declared, never a smaller one. With
    ``session`` the spend is drawn from a :class:`hierdp.Session`, which refuses to
    overspend.

    ``neighbours``: ``"add_remove"`` (default) or ``"substitute"`` (bounded DP; the
    sensitivity floor becomes ``2c`` in L1 and ``sqrt(2) c`` in L2,
    :meth:`Sensitivity.for_neighbours`); the ledger states it. ``invariants``: level names,
    node ids or label paths published exactly, at no budget and without protection; every
    estimator keeps them (BLUE/GMC as exact constraints, ``nonneg``, ``round``) and their
    std is 0. They need ``neighbours="substitute"`` (the guarantee then holds for
    substitutions that leave them unchanged) unless ``allow_invariants_with_add_remove=True``.
    With histogram cells (values ``(n, k)``), ``invariants_cover="total"`` (default) fixes
    each invariant node's total over its cells (census practice: state populations; plan
    ``marginals``), ``"cells"`` every cell of it.

    ``check_counts``: ``True`` (default) refuses negative node values (counts cannot be)
    and internal nodes that are not the sum of their leaves (cell by cell for ``(n, k)``
    values; floats to 1e-9 relative): pass ``tree.aggregate(leaf_counts)``. ``"strict"``
    is accepted as the same. ``False`` releases the values as given and the ledger says so.

    With ``seed`` the randomness is reproducible: a
    :class:`~hierdp.errors.NotForPublicationWarning` is raised and the ledger and written
    tables are marked NOT FOR PUBLICATION.

    ``split``: run the release by subtree (:mod:`hierdp.subtrees`): a level name or depth
    (``"county"``: one subtree per county, in blocks), ``"auto"`` or ``{"memory": "4GiB"}``
    (the level and blocks chosen so that the largest task fits), or ``{"level": ...,
    "memory": ...}``. Each task is measured, then solved bottom-up; the levels above the
    split are solved in memory; then each task top-down. The estimate equals the in-memory
    one of the same measurements (``blue``, ``gmc``, ``postprocess=[]`` with plan
    ``per_level``; plan ``marginals``' own GLS, then top-down ``nonneg``/``round`` after
    either), the ledger is the same plus a note of the split. Streaming:
    :func:`release_by_subtree`.

    ``structure``: the :class:`~hierdp.decompositions.base.Structure` ``tree`` came from.
    A data-dependent one (e.g. ``privtree``) already spent ``structure.spends`` choosing the
    tree: they are paid from the total first (the plan measures with what is left), the
    ledger composes both and records the structure as a private output.

    Parameters
    ----------
    tree : Tree
        The public tree (:class:`hierdp.Tree`); its levels name the budget's keys.
    values : numpy.ndarray
        True node counts, shape ``(n,)`` or ``(n, k)`` with ``k`` histogram cells, in the
        tree's external order, internal nodes the sums of their leaves
        (``tree.aggregate(leaf_counts)``). Private: never shown in errors or the ledger.
    epsilon : float or PrivacyLoss, optional
        Total ε (pure ε-DP, or (ε, δ)-DP with ``delta``), or a ready
        :class:`~hierdp.accounting.PrivacyLoss`. Give ``epsilon`` or ``rho``.
    delta : float, optional
        δ of (ε, δ)-DP; with ``rho``, the δ at which the ledger also states the (ε, δ) the
        ρ-zCDP guarantee converts to (Canonne, Kamath & Steinke 2020).
    rho : float, optional
        Total ρ of ρ-zCDP (Bun & Steinke 2016); for Gaussian mechanisms.
    plan : str, dict or MeasurementPlan, default "per_level"
        How the counts are measured: ``"per_level"`` (one mechanism call per level),
        ``"marginals"`` (histogram marginals per level), ``"ghazi"`` (deep trees, Ghazi et
        al. 2023), a registered name, ``{"name": ..., **params}`` or a plan object.
    mechanism : str, dict or Mechanism, optional
        The noise: ``"discrete_laplace"`` (default under ε), ``"discrete_gaussian"``
        (default under ρ), ``"laplace"``, ``"gaussian"``, a registered name,
        ``{"name": ..., **params}`` or a mechanism object.
    budget : str, dict, list or BudgetStrategy, optional
        How the total splits over the levels (plan ``per_level``). One of: a strategy name,
        ``"equal"`` (default), ``"leaves"`` (all on the deepest level), ``"greedy"`` or
        ``"optimal"`` (minimum expected tree error from the public noise law, Dawson et al.
        2023 §3.2), ``"greedy_oracle"``/``"optimal_oracle"`` (read the true counts:
        NON-PRIVATE, for evaluation only); ``{"strategy": name, **params}``; explicit
        per-level amounts ``{"state": 0.2, "county": 0.3, "tract": 0.5}`` (in the unit of
        the total, ε or ρ; levels left out get 0; they must add up to the total); a list
        of amounts, one per level, the root level first; or a
        :class:`~hierdp.budgets.base.BudgetStrategy` object.
    postprocess : str, sequence or None, optional
        Post-processors applied in order to the noisy values and their exact variances:
        ``"blue"`` (the plan ``per_level``'s default; best linear unbiased and consistent,
        Dawson et al. 2023, Alg. 2), ``"gmc"`` (Cai et al.), ``"nonneg"``, ``"round"``,
        registered names or ``{"name": ..., **params}``; ``[]`` for the raw measurements.
    seed : int, optional
        Reproducible randomness for tests and examples: raises
        :class:`~hierdp.errors.NotForPublicationWarning` and marks the ledger NOT FOR
        PUBLICATION. Without it, noise comes from the operating system's secure source.
    sensitivity : Sensitivity, optional
        What one privacy unit changes per level; at least the floor that
        ``max_contributions`` and ``neighbours`` imply.
    privacy_unit : str, default "one row = one individual"
        The privacy unit, as the ledger states it.
    max_contributions : int, optional
        Rows one privacy unit may contribute (the sensitivity floor scales with it).
    session : Session or Reservation, optional
        A :class:`hierdp.Session` (or a reservation of one) to draw the spend from; it
        refuses to overspend before any noise is drawn.
    notes : sequence of str, default ()
        Public notes, written into the ledger.
    private_notes : mapping, optional
        Private diagnostics, kept out of the ledger's public text.
    structure : Structure, optional
        The decomposition ``tree`` came from; a data-dependent one's spends are paid first.
    neighbours : {"add_remove", "substitute"}, default "add_remove"
        The neighbour relation of the guarantee.
    invariants : str, sequence or None, optional
        Level names, node ids or label paths published exactly (not protected).
    allow_invariants_with_add_remove : bool, default False
        Accept invariants under ``neighbours="add_remove"`` (the guarantee then excludes them).
    invariants_cover : {"total", "cells"}, default "total"
        With histogram cells: fix each invariant node's total, or every cell of it.
    check_counts : bool or "strict", default True
        Refuse negative values and inconsistent internal nodes; ``False`` releases the
        values as given and the ledger says so.
    split : str, int, dict or None, optional
        Run the release by subtree: a level name or depth, ``"auto"``, ``{"memory":
        "4GiB"}`` or ``{"level": ..., "memory": ...}``.
    executor : str, object or None, optional
        With ``split``: where the subtree tasks run (:mod:`hierdp.execution`): a registered
        executor name (``"inline"``, the default, ``"threads"``, or a plugin's) or an object
        whose ``map(function, tasks)`` yields results in task order. The release is the
        same bit for bit whatever the executor.

    Returns
    -------
    ReleaseResult
        The estimate (``.frame``, ``.estimate``, ``.std``, ``.intervals()``), the noisy
        measurements and the :class:`~hierdp.ledger.Ledger` of the release.

    Examples
    --------
    >>> import numpy as np, hierdp, warnings
    >>> t = hierdp.Tree.complete(fanout=2, height=2)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    ...     r = hierdp.release(t, np.array([5, 2, 3]), epsilon=1.0, seed=1)
    >>> r.ledger.guarantee, r.ledger.for_publication
    ('pure', False)
    """
    vals = _check_values(tree, values)
    rules.enforce(_count_problem(tree, vals, check_counts), DataError)
    if executor is not None and split is None:
        raise ValueError("executor= runs the tasks of a release by subtree: give split= as well (e.g. split='auto'), "
                         "or leave executor out")
    if split is not None:
        return _release_split(tree, vals, split, structure=structure, session=session, check_counts=check_counts,
                              executor=executor,
                              epsilon=epsilon, delta=delta, rho=rho, plan=plan, mechanism=mechanism, budget=budget,
                              postprocess=postprocess, seed=seed, sensitivity=sensitivity, privacy_unit=privacy_unit,
                              max_contributions=max_contributions, notes=notes, private_notes=private_notes,
                              neighbours=neighbours, invariants=invariants,
                              allow_invariants_with_add_remove=allow_invariants_with_add_remove,
                              invariants_cover=invariants_cover)
    r = resolve(tree, n_cells=vals.shape[1] if vals.ndim == 2 else 1, epsilon=epsilon, delta=delta, rho=rho,
                plan=plan, mechanism=mechanism, budget=budget, postprocess=postprocess, seed=seed,
                sensitivity=sensitivity, privacy_unit=privacy_unit, max_contributions=max_contributions, notes=notes,
                private_notes=private_notes, neighbours=neighbours, invariants=invariants,
                allow_invariants_with_add_remove=allow_invariants_with_add_remove, invariants_cover=invariants_cover)
    if structure is not None and structure.spends:  # a structure's pure-ε spends are not Gaussian noise
        total, guarantee = structure_total(r.loss, r.guarantee, len(structure.spends)) \
            if r.plan.budget_unit == "rho" else (r.total, r.guarantee)
        r = replace(r, total=total, guarantee=guarantee)
    check(r, session)  # before any randomness: a refused release draws no noise
    rng = make_rng(seed)
    vals_internal = tree.to_internal(vals)
    acc, decomposition = open_account(r, tree, structure)  # a private structure is paid first
    # charged from here on, whatever happens: a release refused after drawing noise is not free to retry
    ticket, session = _reserve(session, r)
    with reusing(seed is None):  # the secure key never repeats: the path taken cannot show in the values
        meas = measure(r, tree, vals_internal, total=r.total - acc.total, rng=rng, key=noise_key(seed))
        guarantee = account(r, acc, meas)
        est = post_process(r, tree, meas, vals_internal[r.invariants] if r.invariant_names else None)
    ledger = build_ledger(r, tree, meas, guarantee, structure=structure, decomposition=decomposition, rng=rng)
    if check_counts is False:
        ledger.notes.append("node values released as given (check_counts=False): they were not checked to be "
                            "non-negative counts that add up from the leaves")
    if session is not None:
        session.settle(cast(int, ticket), ledger)
    if seed is not None:
        warn(f"release with seed={seed}: reproducible randomness is for tests and benchmarks; the "
             "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning)
    release_finished()  # later small releases of this process may take cached compiled kernels
    return ReleaseResult(
        tree=tree,
        estimate=external_estimate(tree, est),
        measurements=external_estimate(tree, Estimate(meas.values, meas.variance, dict(meas.info))),
        ledger=ledger,
    )


def _structure_spends(acc: Accountant, structure: Structure | None, tree: Tree) -> dict[str, Any]:
    """Pay a data-dependent structure's spends first; the ledger's ``decomposition`` entry."""
    if structure is None:
        return {}
    if structure.tree is not tree:
        raise DataError("structure= must be the Structure the released tree came from (structure.tree is tree)")
    acc.spend_all(structure.spends)  # refuses a structure that spent more than the total
    if structure.spends and not acc.total < cast(float, acc.budget):  # a Structure comes with a budget
        raise BudgetError(f"the structure spent the whole budget ({acc.total:g}); nothing is left to measure counts")
    return {"name": getattr(structure, "method", "") or type(structure).__name__,
            "description": str(getattr(structure, "description", "")),
            "private_structure": bool(structure.private_structure),
            "spends": [{"label": s.label, "amount": s.amount, "unit": s.unit} for s in structure.spends],
            "spent": acc.total}


def _unmeasured_missing(est: Estimate, pps: list[PostProcessor]) -> Estimate:
    """Without a consistent step in the chain, the values of unmeasured nodes (variance
    inf) are the measurement's placeholders, not estimates: they become NaN."""
    if est.variance is None or est.consistent or any(pp.consistent for pp in pps):
        return est
    var = np.asarray(est.variance)
    unmeasured = np.isinf(var)
    if not unmeasured.any():
        return est
    vals = np.array(est.values, dtype=np.float64)
    vals[np.broadcast_to(unmeasured.reshape(var.shape + (1,) * (vals.ndim - var.ndim)), vals.shape)] = np.nan
    return Estimate(values=vals, variance=est.variance, info=est.info, linear=est.linear,
                    consistent=est.consistent, measurement_variance=est.measurement_variance)


def external_estimate(tree: Tree, est: Estimate) -> Estimate:
    """Reorder an internal-order estimate (and per-node arrays in its ``info``) to external order."""
    info = {k: (tree.to_external(v) if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == tree.n_nodes
                else v) for k, v in est.info.items()}
    return Estimate(
        values=tree.to_external(est.values),
        variance=None if est.variance is None else tree.to_external(est.variance),
        info=info, linear=est.linear, consistent=est.consistent,
        measurement_variance=None if est.measurement_variance is None else tree.to_external(est.measurement_variance),
    )


def postprocess(name: str, tree: Tree, values: Any, variance: Any = None, **params: Any) -> Estimate:
    """Run the post-processor ``name`` on external-order node ``values`` (and ``variance``).

    Parameters
    ----------
    name : str
        A registered post-processor: ``"blue"`` (Dawson et al. 2023, Alg. 2), ``"gmc"``
        (Cai et al., formula 39), ``"nonneg"``, ``"round"``, ``"boosting"``, ``"privtrie"``, ...
    tree : Tree
        The public tree.
    values : array_like
        Noisy node values, ``(n,)`` or ``(n, k)``, external order (already noisy: this is
        post-processing).
    variance : array_like, optional
        Their variances (per node, or per level broadcast); needed by ``blue``.
    **params
        Parameters of the post-processor.

    Returns
    -------
    Estimate
        ``.values`` and, where the post-processor knows it, ``.variance``.

    Examples
    --------
    >>> import numpy as np, hierdp
    >>> t = hierdp.Tree.complete(fanout=2, height=2)
    >>> est = hierdp.postprocess("blue", t, np.array([10., 4., 5.]), variance=np.ones(3))
    >>> np.round(est.values, 6).tolist()
    [9.666667, 4.333333, 5.333333]
    """
    pp = registry.create("postprocessor", name, **params)
    raw = node_values(tree, values)
    vals = tree.to_internal(raw)
    var = None if variance is None else tree.to_internal(node_variance(tree, variance, raw.shape))
    if var is None and pp.requires_variance:
        var = np.ones(tree.n_nodes)
    est = run_chain(tree, Measurements(vals, var), [pp])
    return external_estimate(tree, est)



# ---------------------------------------------------------------------------- releases by subtree
@dataclass(frozen=True, eq=False)
class SplitRun:
    """What :func:`release_by_subtree` returns: the release's ledger (the in-memory one plus
    a note of the split) and the :class:`~hierdp.subtrees.Partition` its tasks came from."""

    ledger: Ledger
    partition: subtrees.Partition


def _split_setup(tree: Tree, n_cells: int, split: Any, keywords: dict[str, Any]
                 ) -> tuple[Resolved, subtrees.Partition, PostProcessor | None, list[PostProcessor]]:
    """Resolve a split release (plan ``per_level``: a chain of one GLS step or none, then
    top-down ``nonneg``/``round``; plan ``marginals``: its own GLS, then those top-down
    steps) and cut the tree; refusals before any count is read or noise drawn."""
    r = resolve(tree, n_cells=n_cells, **keywords)
    if not isinstance(r.plan, (PerLevel, Marginals)):
        raise PluginError(f"plan {r.plan.name!r} cannot run by subtree (split=): only plans 'per_level' and "
                          "'marginals' measure node by node with a budget fixed on the whole tree; leave split out")
    if isinstance(r.plan, Marginals):
        subtrees.check_marginals(r.plan)
    step, tail = subtrees.split_chain(r.postprocessors, plan_gls=isinstance(r.plan, Marginals))
    part = subtrees.partition(tree, split, n_cells=n_cells)
    if tail:  # refuses invariants below the split before anything is read
        subtrees.SplitTopDown(part, tail, r.invariants if r.invariant_names else None)
    return r, part, step, tail


def _chain_result(r: Resolved, step: PostProcessor | None, tail: list[PostProcessor], variances: np.ndarray,
                  info: Mapping[str, Any] | None = None) -> Estimate:
    """The in-memory chain run on one node measured with each of ``variances``' distinct
    values: its ``info``, flags and dtype are what the whole chain returns (they depend
    on the steps and the kinds of variance, not on the values). ``info``: the plan's
    measurement info (its ``consistent``/``linear`` flags, e.g. ``marginals``' estimate)."""
    steps = ([step] if step is not None else []) + tail
    v = np.asarray(variances, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    one = Tree.from_parent(np.full(1, -1))
    return run_chain(one, Measurements(np.zeros(1), np.full(1, float(v[0]) if v.size else 1.0),
                                       info=dict(info or {})), steps)


_NEGATIVE_COUNTS = ("node counts must be non-negative; some are negative (values not shown: they are private). "
                    "Pass check_counts=False to release such values as given (the ledger says so)")
_COUNTS_DO_NOT_ADD_UP = ("some internal nodes are not the sum of their leaves (values not shown: they are private); "
                         "node counts of a hierarchy add up: pass the leaf counts through tree.aggregate(...), or "
                         "check_counts=False to release the values as given (the ledger says so)")


def _part_count_problem(parent: np.ndarray, vals: np.ndarray, check: Any) -> str | None:
    """:func:`_count_problem` for a part of the tree given as parent-first local ``parent``
    (-1: no parent inside): non-negative, and every node with children their sum (cell by
    cell; exact for integers, 1e-9 relative for floats). Says what, never which node."""
    if check is not False and check is not True and check != "strict":
        return f"check_counts must be True, 'strict' or False, got {check!r:.40}"
    if check is False or vals.dtype == bool or not vals.size:
        return None
    if vals.min() < 0:
        return _NEGATIVE_COUNTS
    inside = parent >= 0
    sums = np.zeros(vals.shape, dtype=np.float64 if np.issubdtype(vals.dtype, np.floating) else np.int64)
    rows = np.flatnonzero(inside)
    par = parent[rows]
    if par.size:
        # children's rows grouped by parent (a stable sort: already grouped in a parent-first
        # part, then no copy of the rows) and summed by one reduceat, not np.add.at (slow
        # on (n, k) rows); the same sequential sum per parent
        if np.all(par[1:] >= par[:-1]):
            kids = vals[rows[0]:] if rows.size == vals.shape[0] - rows[0] else vals[rows]
        else:
            o = np.argsort(par, kind="stable")
            par, kids = par[o], vals[rows[o]]
        starts = np.flatnonzero(np.r_[True, par[1:] != par[:-1]])
        sums[par[starts]] = np.add.reduceat(kids, starts, axis=0, dtype=sums.dtype)
    has = np.zeros(parent.size, dtype=bool)
    has[par] = True
    got, want = sums[has], vals[has]
    if np.issubdtype(vals.dtype, np.integer):
        off = bool(np.any(got != want))
    else:
        off = not np.allclose(got, want, rtol=1e-9, atol=1e-12 * float(np.abs(got).max(initial=0.0)))
    if off:
        return _COUNTS_DO_NOT_ADD_UP
    return None


def _top_count_problem(parent: np.ndarray, vals: np.ndarray, roots_parent: np.ndarray, roots_vals: np.ndarray,
                       check: Any) -> str | None:
    """:func:`_part_count_problem` for the top part (``parent``, ``vals``) and the subtree
    roots below it (each root's parent's position in the top part, and the roots' counts,
    already checked by their tasks): the same rule and the same messages, without joining
    the two (the roots' rows are not copied)."""
    if check is not False and check is not True and check != "strict":
        return _part_count_problem(parent, vals, check)
    if check is False or vals.dtype == bool or not vals.size:
        return None
    if vals.min() < 0:
        return _NEGATIVE_COUNTS
    floating = np.issubdtype(vals.dtype, np.floating) or np.issubdtype(roots_vals.dtype, np.floating)
    sums = np.zeros(vals.shape, dtype=np.float64 if floating else np.int64)
    rows = np.flatnonzero(parent >= 0)
    has = np.zeros(parent.size, dtype=bool)
    for par, kids in ((parent[rows], vals[rows]), (roots_parent, roots_vals)):
        if not par.size:
            continue
        if not np.all(par[1:] >= par[:-1]):  # grouped by parent for one reduceat (the roots are, in a tree's order)
            o = np.argsort(par, kind="stable")
            par, kids = par[o], kids[o]
        starts = np.flatnonzero(np.r_[True, par[1:] != par[:-1]])
        sums[par[starts]] += np.add.reduceat(kids, starts, axis=0, dtype=sums.dtype)
        has[par] = True
    got, want = sums[has], vals[has]
    if not floating:
        off = bool(np.any(got != want))
    else:
        off = not np.allclose(got, want, rtol=1e-9, atol=1e-12 * float(np.abs(got).max(initial=0.0)))
    if off:
        return _COUNTS_DO_NOT_ADD_UP
    return None


def _task_counts(task: subtrees.SubtreeTask, counts: Any, n_cells: int) -> np.ndarray:
    """The counts a ``counts_of`` gave for ``task``, as ``(m, n_cells)``; one-line errors."""
    a = np.asarray(counts)
    what = "the top part" if task.index < 0 else f"task {task.index}"
    if a.shape not in ((task.n_nodes,), (task.n_nodes, n_cells)) or (a.ndim == 1 and n_cells != 1):
        raise DataError(f"counts_of({what}) must return shape ({task.n_nodes}, {n_cells})"
                        f"{f' or ({task.n_nodes},)' if n_cells == 1 else ''} in task.nodes order, got {a.shape}")
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise DataError(f"counts_of({what}) must return numbers, got dtype {a.dtype}")
    if np.issubdtype(a.dtype, np.floating) and a.size and not np.isfinite(a).all():
        raise DataError(f"counts_of({what}) returned NaN or infinity")
    if a.size and a.dtype != bool:
        big = max(abs(int(a.max())), abs(int(a.min()))) if np.issubdtype(a.dtype, np.integer) else \
            float(np.abs(a).max())
        rules.enforce(rules.value_range_problem(big), DataError)
    return a.reshape(task.n_nodes, n_cells)


def _narrowest(a: np.ndarray) -> np.ndarray:
    """``a`` as the narrowest signed integer type holding all its values (an integer
    array), else ``a`` itself: lossless, and the same values back by ``astype``."""
    if a.dtype.kind not in "iu" or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a


class _DiskStore:
    """A task's measurements between its pass up and its pass down, in ``workdir`` (a
    temporary folder by default): memory then holds one task at a time. What is written is
    noisy (released anyway as the measurements), never a true count."""

    def __init__(self, workdir: str | os.PathLike[str] | None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hierdp-split-") if workdir is None else None
        self.dir = Path(self._tmp.name if self._tmp is not None else os.fspath(cast(Any, workdir)))
        self.dir.mkdir(parents=True, exist_ok=True)
        self._written: list[Path] = []
        self._columns: list[ColumnsOnDisk] = []

    def put(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, st: _SplitStages) -> None:
        path = self.dir / f"task{task.index}.npz"
        self._written.append(path)
        with open(path, "wb") as fh:
            np.savez(fh, **cast(Any, st.spill(task, noisy, var)))

    def get(self, task: subtrees.SubtreeTask, st: _SplitStages) -> tuple[np.ndarray, np.ndarray]:
        path = self.dir / f"task{task.index}.npz"
        with np.load(path, allow_pickle=False) as f:
            state = {k: f[k] for k in f.files}
        path.unlink()  # read once: free the disk as the pass down goes
        return st.unspill(task, state)

    def track(self, cols: ColumnsOnDisk) -> ColumnsOnDisk:
        """``cols`` (the top stage's arrays over every subtree root, noisy) removed with the
        rest at :meth:`close`."""
        self._columns.append(cols)
        return cols

    def close(self) -> None:
        """Remove what was written (the temporary folder with it)."""
        for path in self._written:
            path.unlink(missing_ok=True)
        for cols in self._columns:
            cols.remove()
        if self._tmp is not None:
            self._tmp.cleanup()


class _RootCounts:
    """The subtree roots' true counts, ``(roots, n_cells)`` in ``part.roots`` order, filled
    in place task by task: one copy (a list joined at the end held two; the whole US of
    the census shape: 1.4 GB each). Never written out of memory."""

    def __init__(self, n_roots: int, n_cells: int) -> None:
        self.n_roots, self.n_cells = int(n_roots), int(n_cells)
        self._a: np.ndarray | None = None
        self._at = 0

    def add(self, rows: np.ndarray) -> None:
        """The next task's roots' counts (its roots, in order)."""
        rows = np.asarray(rows).reshape(len(rows), -1)
        if self._a is None:
            self._a = np.empty((self.n_roots, rows.shape[1]), rows.dtype)
        elif not np.can_cast(rows.dtype, self._a.dtype, "safe"):  # a wider type from a later task
            self._a = self._a.astype(np.result_type(self._a.dtype, rows.dtype))
        self._a[self._at:self._at + rows.shape[0]] = rows
        self._at += rows.shape[0]

    def value(self) -> np.ndarray:
        """Every root's counts (all tasks added)."""
        if self._a is None:
            return np.zeros((0, self.n_cells), np.int64)
        return self._a[:self._at]


#: the most the rotation back of the roots' values to cells works in at once (bytes;
#: :meth:`_SplitStages.top_on_disk`)
_ROTATE_BYTES = 256 << 20


class _RowsOnDisk:
    """A ``(rows, ...)`` array kept in a ``.npy`` file and read back by row ranges
    (``a[i:j]``) with plain reads, not a mapping: memory holds only the rows read. An
    out-of-core work folder of the previous version kept the top stage's arrays over every
    subtree root this way (one file each); a resume still reads them. The top stage now
    keeps them in blocks of cells (:class:`~hierdp._engine.columns.ColumnsOnDisk`)."""

    def __init__(self, path: Path) -> None:
        """The ``.npy`` file at ``path`` (written by :meth:`write`), not read yet."""
        head = np.load(path, mmap_mode="r", allow_pickle=False)  # the header only: mapped, no page read
        self.path, self.shape, self.dtype = Path(path), tuple(head.shape), head.dtype
        self._offset = int(head.offset)
        del head
        self._row = int(np.prod(self.shape[1:], dtype=np.int64))

    @staticmethod
    def write(path: Path, a: np.ndarray) -> None:
        """``a`` into a ``.npy`` file at ``path``."""
        with open(path, "wb") as fh:
            np.lib.format.write_array(fh, np.ascontiguousarray(a), allow_pickle=False)

    def __len__(self) -> int:
        return int(self.shape[0])

    def __getitem__(self, s: slice) -> np.ndarray:
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("rows on disk are read by a range of rows (a[i:j])")
        i, j, _ = s.indices(self.shape[0])
        n = max(j - i, 0)
        out = np.fromfile(self.path, dtype=self.dtype, count=n * self._row,
                          offset=self._offset + i * self._row * self.dtype.itemsize)
        return out.reshape((n,) + tuple(self.shape[1:]))


class _MemoryStore:
    """The measurements of every node, assembled in full arrays (the in-memory result)."""

    def __init__(self, part: subtrees.Partition, n_cells: int, dtype: Any, per_cell: bool = False) -> None:
        self.part = part
        self.noisy = np.zeros((part.tree.n_nodes, n_cells), dtype=dtype)
        n = part.tree.n_nodes
        # per_level: one variance per node; marginals: one per rotated column
        self.var = np.full((n, n_cells) if per_cell else n, np.inf)

    def put(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, st: _SplitStages | None = None
            ) -> None:
        nodes = task.nodes
        if noisy.dtype != self.noisy.dtype:
            self.noisy = self.noisy.astype(np.result_type(self.noisy.dtype, noisy.dtype))
        self.noisy[nodes] = noisy
        self.var[nodes] = var

    def get(self, task: subtrees.SubtreeTask, st: _SplitStages | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.noisy[task.nodes], self.var[task.nodes]

    def close(self) -> None:
        pass


def _top_task(part: subtrees.Partition) -> subtrees.SubtreeTask:
    """The top part as a task (index -1): the nodes above the split level."""
    ti = part.tree.internal
    par = ti.parent[part.top]
    perm = ti.perm
    return subtrees.SubtreeTask(index=-1, nodes=part.top, roots=part.roots[:0], root_pos=np.zeros(0, np.int64),
                                root_of=np.zeros(part.top.size, np.int64),
                                parent=np.where(par >= 0, np.searchsorted(part.top, par), -1),
                                level_names=part.tree.level_names[:part.depth],
                                external=None if perm is None else perm[part.top])


class _SplitStages:
    """The stages of a split release (:mod:`hierdp.subtrees`) as separate steps, so that the
    in-memory and streamed releases (:func:`_run_split`) and the out-of-core runner
    (:mod:`hierdp.outofcore`, tasks on workers, state spilled between stages) run one code
    path: :meth:`up` per task (measure, pass up), :meth:`top_measured` and :meth:`top` once
    (the levels above the split, in memory), :meth:`down` per task (pass down, top-down
    steps, the part's estimate). Thread-safe once built: the methods only read the shared
    state (``exact`` is written per task index; ``top_measured``/``top`` run once).

    Every node's noise is keyed by ``key``, its id in the full tree and its cell
    (:func:`hierdp.plans.per_level.measure_nodes`; for ``marginals`` the marginal and its
    cell, :meth:`hierdp.plans.marginals.Marginals.measure_rotated`), so it is the noise the
    in-memory release with the same key draws, whatever the split, the task order or the
    thread count. ``marginals`` runs its GLS as the split GLS over the rotated columns
    (each node's cells rotated by the Helmert basis: ``k`` independent tree problems, one
    two-pass BLUE over ``(n, k)``), then rotates each part back."""

    def __init__(self, r: Resolved, part: subtrees.Partition, step: PostProcessor | None,
                 tail: list[PostProcessor], n_cells: int, *, total: float, key: NoiseKey, check_counts: Any,
                 spills: bool = False) -> None:
        self.r, self.part, self.step, self.tail, self.n_cells = r, part, step, tail, n_cells
        self.key, self.check_counts = key, check_counts
        #: whether tasks' measurements are spilled between the passes (:meth:`spill`): then
        #: ``marginals`` keeps each task's noisy marginals, their compact form, until spilled
        self.spills = spills
        self._draws: dict[int, dict[tuple[int, int], np.ndarray]] = {}
        self.tree = tree = part.tree
        self.inv = inv = r.invariants if r.invariant_names else None
        self.marg = marg = isinstance(r.plan, Marginals)
        self.des: MarginalsDesign | None = None
        if marg:
            self.mplan = mplan = cast(Marginals, r.plan)
            self.des = des = subtrees.marginals_design(mplan, tree, total, n_cells=n_cells, sensitivity=r.sensitivity,
                                                       neighbours=r.neighbours, invariants=inv,
                                                       invariants_cover=r.cover)
            self.levels, self.spends, self.info = list(des.levels), list(des.spends), dict(des.info)
            self.alloc: dict[str, float] = {}
            level_var = np.array([ls.noise_variance for ls in self.levels if ls.n_nodes and ls.measured] + [1.0])
            self.tail_est = _chain_result(r, None, tail, level_var, self.info) if tail else None
            self.step_info: dict[str, Any] = {}
        else:
            plan = cast(PerLevel, r.plan)
            self.alloc, self.levels, self.spends, self.info = subtrees.per_level_allocation(
                plan, tree, total, sensitivity=r.sensitivity, delta=r.loss.delta, invariants=inv)
            self.mech, self.sens = plan.mechanism, r.sensitivity
            # what the in-memory step says of these variances: the levels' and 0 for invariant nodes
            level_var = np.array([ls.noise_variance for ls in self.levels if ls.n_nodes]
                                 + ([0.0] if inv is not None else []))
            self.step_info = subtrees.gls_info(step, level_var) if step is not None else {}
            self.tail_est = _chain_result(r, step, tail, level_var) if tail else None
        #: whether a GLS runs (the plan's own for ``marginals``, else the chain's first step)
        self.gls = marg or step is not None
        #: ``marginals`` with invariants on every cell: those cells are exact after the rotation back
        self.exact_cells = marg and inv is not None and not cast(MarginalsDesign, self.des).totals_only
        self.engine = subtrees.SplitGLS(part)
        self.down_steps = subtrees.SplitTopDown(part, tail, inv) if tail else None
        self.exact: dict[int, np.ndarray] = {}  # invariant values per task (published exactly)
        self._root_exact: tuple[np.ndarray, np.ndarray] | None = None
        self._totals2: np.ndarray | None = None  # node-total invariants of the top part and the roots

    def summary(self) -> Measurements:
        """The plan's spends, levels and info as :class:`~hierdp.measurements.Measurements`
        without values (known before any noise is drawn)."""
        return Measurements(values=np.zeros((0, self.n_cells)), variance=None, spends=self.spends,
                            levels=self.levels, info=self.info)

    def measured(self, task: subtrees.SubtreeTask, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The task's measurements as the GLS takes them: (m, k) values and (m,) or (m, k)
        variances (the rotated columns for ``marginals``)."""
        tree, key, inv = self.tree, self.key, self.inv
        inv_rows = None if inv is None else inv[task.nodes]
        some = inv_rows is not None and bool(inv_rows.any())
        if self.des is not None:  # measure_rotated's two steps, the draws kept when they are spilled
            depth = tree.internal.depth[task.nodes]
            draws = self.mplan.draw_marginals(self.des, depth, vals, task.nodes, key)
            exact = vals.reshape(task.n_nodes, -1)[cast(np.ndarray, inv_rows)] if some else None
            noisy, var = self.mplan.rotated_from_draws(self.des, depth, draws, inv_rows if some else None, exact)
            if self.spills and task.index >= 0:
                self._draws[task.index] = draws
        else:
            noisy, var = PL.measure_nodes(tree, vals, task.nodes, self.alloc, self.mech, self.sens, key)
            if some:
                noisy, var = PL.apply_invariants(vals, noisy, var, cast(np.ndarray, inv_rows))
        if some:
            self.exact[task.index] = vals[cast(np.ndarray, inv_rows)]
        return noisy, var

    def spill(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> dict[str, np.ndarray]:
        """The task's measurements (:meth:`up`'s ``noisy``, ``var``) in the smallest form
        that gives them back bit for bit (:meth:`unspill`), to wait on disk between the
        passes: for ``marginals`` the noisy marginals themselves (about 1.3 values per
        node-cell on the census strategy instead of the rotated values and variances, 16 B
        per node-cell), integers stored in the narrowest type that holds them (1-2 B for
        a block's noisy counts); for ``per_level`` the noisy values narrowed likewise. All
        of it is noisy; the invariant rows' exact counts travel separately (``exact``).
        The whole US of the census shape spilled 273 GB before (16 B per node-cell) and
        filled this machine's disk."""
        draws = self._draws.pop(task.index, None)
        if self.marg and draws is not None:
            out = {f"draw_{d}_{j}": _narrowest(a) for (d, j), a in draws.items()}
            out["spill_form"] = np.array("draws")
            return out
        return {"spill_form": np.array("values"), "noisy": _narrowest(noisy), "noisy_dtype": np.array(noisy.dtype.str),
                "var": var}

    def unspill(self, task: subtrees.SubtreeTask, state: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`spill`'s arrays back to the task's ``noisy`` and ``var``, bit for bit
        (invariant rows: from ``exact[task.index]``, set before this is called)."""
        form = str(state["spill_form"]) if "spill_form" in state else "values"
        if form == "draws":
            draws = {}
            for name, a in state.items():
                if name.startswith("draw_"):
                    _, d, j = name.split("_")
                    draws[(int(d), int(j))] = a
            inv_rows = None if self.inv is None else self.inv[task.nodes]
            some = inv_rows is not None and bool(inv_rows.any())
            return self.mplan.rotated_from_draws(cast(MarginalsDesign, self.des), self.tree.internal.depth[task.nodes],
                                                 draws, inv_rows if some else None,
                                                 self.exact.get(task.index) if some else None)
        noisy = state["noisy"]
        if "noisy_dtype" in state:
            noisy = noisy.astype(np.dtype(str(state["noisy_dtype"])), copy=False)
        return noisy, state["var"]

    def up(self, task: subtrees.SubtreeTask, counts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                   np.ndarray | None, np.ndarray | None]:
        """Stage 1 of a task: its counts checked and measured, then its pass up. Returns the
        noisy values and variances (``task.nodes`` order), the roots' true counts (for the
        top part's check and the invariant roots' exact cells; never written out of the
        work folder) and ``(z, u)`` of each root (``None`` without a GLS)."""
        vals = _task_counts(task, counts, self.n_cells)
        rules.enforce(_part_count_problem(task.parent[1:] - 1, vals, self.check_counts), DataError)
        noisy, var = self.measured(task, vals)
        z = u = None
        if self.gls:
            z, u = self.engine.up(task, noisy.astype(np.float64), var.reshape(task.n_nodes, -1))
        return noisy, var, vals[task.root_pos], z, u

    def top_measured(self, top: subtrees.SubtreeTask, counts: Any, roots_vals: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2, measuring: the top part's counts checked (with the roots' counts of every
        task, ``part.roots`` order) and measured."""
        part, tree, inv = self.part, self.tree, self.inv
        if inv is not None and self.exact_cells and self.tail:  # invariant roots: their exact cells, top-down
            root_inv = inv[part.roots]
            self._root_exact = (root_inv, roots_vals[root_inv])
        tvals = _task_counts(top, counts, self.n_cells) if top.n_nodes else np.zeros((0, self.n_cells), np.int64)
        if inv is not None and self.r.cover == "total" and not self.exact_cells and self.tail:
            # node-total invariants: the top-down steps solve those nodes' cells jointly (as in memory)
            mask2 = np.concatenate((inv[part.top], inv[part.roots]))
            self._totals2 = _exact_totals(mask2, np.concatenate((tvals[inv[part.top]], roots_vals[inv[part.roots]])))
        if not top.n_nodes:
            return np.zeros((0, self.n_cells)), (np.zeros((0, self.n_cells)) if self.marg else np.zeros(0))
        # the top part's counts checked with its children among the roots, the roots' rows not
        # copied (the whole US of the census shape: 1.4 GB each; each task checked its own)
        roots_parent = np.searchsorted(part.top, tree.internal.parent[part.roots])
        rules.enforce(_top_count_problem(top.parent, tvals, roots_parent, roots_vals, self.check_counts), DataError)
        return self.measured(top, tvals)

    def _cells(self, task_index: int, mask: np.ndarray | None, x: np.ndarray, xv: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """``marginals``: rotated GLS values back to cells, invariant cells exact (as in memory)."""
        xc, vc = Marginals.rotate_back(cast(MarginalsDesign, self.des), x, xv)
        if self.exact_cells and mask is not None and task_index in self.exact:
            xc[mask] = self.exact[task_index]
            vc[mask] = 0.0
        return xc, vc

    def top(self, tnoisy: np.ndarray, tvar: np.ndarray, z: np.ndarray | None, u: np.ndarray | None
            ) -> _TopSolution:
        """Stage 2, solving, in memory: the top part's GLS values and variances (cells) and
        its final values after the top-down steps (``None`` without a GLS), the roots'
        values and variances as the pass down takes them (``part.roots`` order; rotated
        columns for ``marginals``) and, per top-down step, the roots' values each task is
        held to.

        The roots' arrays are the bulk of it (``(roots, k)`` each); ``z`` and ``u`` are
        dropped once solved. A caller that hands them over without keeping references of
        its own (as :func:`_run_split` does) then holds at most
        :data:`~hierdp.subtrees.TOP_HELD_BYTES_PER_NODE_CELL` per cell of the top part and
        the roots at any moment, plus one block of cells, the figure the split's memory
        budget counts. A streamed release keeps the roots' arrays on disk instead
        (:meth:`top_on_disk`)."""
        n_top = int(self.part.top.size)
        if not self.gls:
            return _TopSolution(None, None, None, np.zeros((0, self.n_cells)), np.zeros((0, 1)), [])
        tv = tvar.reshape(n_top, -1) if n_top else tvar
        x_top, v_top, x_roots, v_roots = self.engine.top(tnoisy.astype(np.float64), tv, cast(np.ndarray, z),
                                                         cast(np.ndarray, u))
        del z, u  # solved: only the outputs from here on
        inv = self.inv
        if self.marg:
            x_top, v_top = self._cells(-1, None if inv is None else inv[self.part.top], x_top, v_top)
        fixed: list[Any] = []
        final = x_top
        if self.down_steps is not None:  # the top-down steps: the top part first, then each task under its roots
            if self.marg:
                xr, vr = Marginals.rotate_back(cast(MarginalsDesign, self.des), x_roots, v_roots)
                if self._root_exact is not None and self._root_exact[0].any():
                    xr[self._root_exact[0]] = self._root_exact[1]
                    vr[self._root_exact[0]] = 0.0
            else:
                xr, vr = x_roots, v_roots
            handed = [xr, vr]  # handed over: down_steps.top drops them once it has its own copies
            del xr, vr
            final, fixed = self.down_steps.top(x_top, v_top, handed.pop(0), handed.pop(0), totals=self._totals2)
        return _TopSolution(x_top, v_top, final, x_roots, v_roots, fixed)

    def roots_columns(self, folder: Path, name: str, n_cols: int) -> ColumnsOnDisk:
        """An array over every subtree root on disk in :meth:`top_on_disk`'s blocks of
        cells (one column: variances shared by the cells)."""
        k = self.n_cells
        width = self.part.top_block(k, roots_on_disk=True) if n_cols > 1 else 1
        return ColumnsOnDisk(folder, name, int(self.part.roots.size), column_bounds(n_cols, width))

    def top_on_disk(self, tnoisy: np.ndarray, tvar: np.ndarray, z: ColumnsOnDisk, u: ColumnsOnDisk,
                    folder: Path) -> _TopSolution:
        """:meth:`top` with the roots' arrays on disk in ``folder``, in blocks of cells
        (:class:`~hierdp._engine.columns.ColumnsOnDisk`, made by :meth:`roots_columns`):
        ``z``/``u`` come in there (and are removed once solved), the roots' values,
        variances and per-step values go out there for the pass down to read by task.
        Memory holds the top part's arrays and one block of the roots' (the whole US of
        the census shape: 5.7 GB held by :meth:`top`, about 1 GB here). The same numbers
        as :meth:`top`: every cell is its own problem, in the solve and in the top-down
        steps, and the rotation back to cells is one row at a time."""
        made: list[ColumnsOnDisk] = []  # removed again if anything fails on the way
        nr = int(self.part.roots.size)

        def columns(name: str, bounds: list[int], dtype: Any = np.float64) -> ColumnsOnDisk:
            made.append(ColumnsOnDisk(folder, name, nr, bounds, dtype))
            return made[-1]

        try:
            return self._top_on_disk(tnoisy, tvar, z, u, columns)
        except BaseException:
            for cols in made:
                cols.remove()
            raise

    def _top_on_disk(self, tnoisy: np.ndarray, tvar: np.ndarray, z: ColumnsOnDisk, u: ColumnsOnDisk,
                     columns: Callable[..., ColumnsOnDisk]) -> _TopSolution:
        nr = int(self.part.roots.size)
        n_top = int(self.part.top.size)
        tv = tvar.reshape(n_top, -1) if n_top else tvar
        x_roots = columns("x_roots", z.bounds)
        v_roots = columns("v_roots", u.bounds)
        x_top, v_top = self.engine.top_on_disk(tnoisy.astype(np.float64), tv, z, u, x_roots, v_roots)
        z.remove()
        u.remove()
        inv = self.inv
        if self.marg:
            x_top, v_top = self._cells(-1, None if inv is None else inv[self.part.top], x_top, v_top)
        fixed: list[Any] = []
        final = x_top
        if self.down_steps is not None:
            xr, vr = x_roots, v_roots
            if self.marg:  # rotated back to cells a range of roots at a time, into the same blocks
                des = cast(MarginalsDesign, self.des)
                xr = columns("x_cells", z.bounds)
                vr = columns("v_cells", z.bounds)
                exact_at = exact_rows = None
                if self._root_exact is not None and self._root_exact[0].any():
                    exact_at, exact_rows = np.flatnonzero(self._root_exact[0]), self._root_exact[1]
                step = max(1, _ROTATE_BYTES // max(8 * 8 * self.n_cells, 1))  # ~8 float64 arrays of a range
                for i in range(0, nr, step):
                    j = min(i + step, nr)
                    xc, vc = Marginals.rotate_back(des, x_roots[i:j], v_roots[i:j])
                    if exact_at is not None:
                        a, b = np.searchsorted(exact_at, [i, j])
                        xc[exact_at[a:b] - i] = cast(np.ndarray, exact_rows)[a:b]
                        vc[exact_at[a:b] - i] = 0.0
                    xr.append(xc)
                    vr.append(vc)
                    del xc, vc
                xr.finish()
                vr.finish()
            final, fixed = self.down_steps.top_on_disk(
                x_top, v_top, xr, vr, lambda j, dtype: columns(f"fixed{j}", z.bounds, dtype),
                totals=self._totals2)
            if self.marg:
                xr.remove()
                vr.remove()
        return _TopSolution(x_top, v_top, final, x_roots, v_roots, fixed)

    def finish_top(self, top: subtrees.SubtreeTask, tnoisy: np.ndarray, tvar: np.ndarray, sol: _TopSolution
                   ) -> tuple[Estimate, Measurements]:
        """The top part's estimate and measurements (after :meth:`top`)."""
        return self.finish(top, tnoisy, tvar, sol.x_top, sol.v_top, sol.final_top)

    def down(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, x_roots: np.ndarray,
             v_roots: np.ndarray, fixed: list[np.ndarray]) -> tuple[Estimate, Measurements]:
        """Stage 3 of a task: its pass down from its roots' values (the task's roots, in
        order; ``fixed``: per top-down step), then the top-down steps; the part's estimate."""
        if not self.gls:
            return self.finish(task, noisy, var, None, None)
        x, xv = self.engine.down(task, noisy.astype(np.float64), var.reshape(task.n_nodes, -1), x_roots, v_roots)
        if self.marg:
            x, xv = self._cells(task.index, None if self.inv is None else self.inv[task.nodes], x, xv)
        final = self.down_steps.down(task, x, xv, fixed) if self.down_steps is not None else None
        return self.finish(task, noisy, var, x, xv, final)

    def finish(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, x: np.ndarray | None,
               xv: np.ndarray | None, final: np.ndarray | None = None) -> tuple[Estimate, Measurements]:
        """The part's estimate and measurements: ``x``/``xv`` the GLS estimate (cells),
        ``final`` the top-down steps' values when the chain has them."""
        step, tail_est, info, step_info, exact, inv, r = (self.step, self.tail_est, self.info, self.step_info,
                                                          self.exact, self.inv, self.r)
        if self.marg:  # the plan's measurements are its GLS estimate (as in memory)
            x_c, v_c = cast(np.ndarray, x), cast(np.ndarray, xv)
            meas = Measurements(x_c, v_c, info=dict(info))
            if tail_est is not None:
                est = Estimate(np.asarray(final, dtype=tail_est.values.dtype), v_c, dict(tail_est.info), v_c,
                               tail_est.linear, True)
            else:
                est = Estimate(x_c, v_c, dict(info), v_c, True, True)
        else:
            meas = Measurements(noisy, var, info=dict(info))
            if step is None:  # postprocess=[]: the measurements are the estimate
                est = _unmeasured_missing(Estimate(noisy, var, dict(info), var, True, False), [])
            elif tail_est is not None:
                est = Estimate(np.asarray(final, dtype=tail_est.values.dtype), cast(np.ndarray, xv)[:, 0],
                               dict(tail_est.info), var, tail_est.linear, True)
            else:
                est = Estimate(cast(np.ndarray, x), cast(np.ndarray, xv)[:, 0], dict(step_info), var, True, True)
        if task.index in exact:
            est = _check_invariants_kept(est, exact[task.index], inv[task.nodes],  # type: ignore[index]
                                         r.postprocessors, r.cover)
        return est, meas


@dataclass(frozen=True, eq=False)  # holds arrays
class _TopSolution:
    """What :meth:`_SplitStages.top` solves: the top part's GLS values and variances (cells)
    and final values (after the top-down steps), the roots' values and variances for the
    pass down (``part.roots`` order) and, per top-down step, the roots' held values."""

    x_top: np.ndarray | None
    v_top: np.ndarray | None
    final_top: np.ndarray | None
    x_roots: Any  # an array, or ColumnsOnDisk / _RowsOnDisk (read by row ranges)
    v_roots: Any
    fixed: list[Any]


def _run_split(r: Resolved, part: subtrees.Partition, step: PostProcessor | None, tail: list[PostProcessor],
               n_cells: int,
               counts_of: Callable[[subtrees.SubtreeTask], Any],
               sink: Callable[[subtrees.SubtreeTask, Estimate, Measurements], None], *, total: float,
               key: NoiseKey, check_counts: Any, store: Any, executor: Executor | None = None) -> Measurements:
    """The three stages of a split release (:class:`_SplitStages`) in this process, the
    tasks of stages 1 and 3 run by ``executor`` (:mod:`hierdp.execution`; default inline;
    ``sink`` is called in this thread, in task order); returns the plan's spends, levels and
    info as :class:`~hierdp.measurements.Measurements` without values. The numbers do not
    depend on the executor: the noise is keyed per node, each task's steps are its own and
    a task writes only its own rows of the store."""
    executor = executor if executor is not None else Inline()
    st = _SplitStages(r, part, step, tail, n_cells, total=total, key=key, check_counts=check_counts,
                      spills=isinstance(store, _DiskStore))
    root_counts = _RootCounts(part.roots.size, n_cells)
    # every root's (z, u): filled in place in memory (one copy, handed to the top solve), or
    # on disk in blocks of cells when the tasks spill (the top solve then reads a block at a time)
    zu: list[Any] = []
    on_disk = isinstance(store, _DiskStore)

    def up(task: subtrees.SubtreeTask) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        noisy, var, roots_vals, z, u = st.up(task, counts_of(task))
        store.put(task, noisy, var, st)
        return roots_vals, z, u

    at = 0
    for roots_vals, z, u in executor.map(up, part.tasks()):  # measure, then the pass up
        root_counts.add(roots_vals)
        del roots_vals
        if z is not None and u is not None:
            if not zu:
                if on_disk:
                    zu = [store.track(st.roots_columns(store.dir, "z", z.shape[1])),
                          store.track(st.roots_columns(store.dir, "u", u.shape[1]))]
                else:
                    zu = [np.empty((part.roots.size,) + z.shape[1:], z.dtype),
                          np.empty((part.roots.size,) + u.shape[1:], u.dtype)]
            if on_disk:
                zu[0].append(z)
                zu[1].append(u)
            else:
                zu[0][at:at + z.shape[0]] = z
                zu[1][at:at + u.shape[0]] = u
            at += z.shape[0]
        del z, u
    top = _top_task(part)
    tnoisy, tvar = st.top_measured(top, counts_of(top) if top.n_nodes else None, root_counts.value())
    if top.n_nodes and isinstance(store, _MemoryStore):  # the disk store holds tasks only (the top stays here)
        store.put(top, tnoisy, tvar)
    del root_counts
    if on_disk and zu:
        zu[0].finish()
        zu[1].finish()
        sol = st.top_on_disk(tnoisy, tvar, zu[0], zu[1], store.dir)
        for a in [sol.x_roots, sol.v_roots, *sol.fixed]:
            store.track(a)
    else:
        sol = st.top(tnoisy, tvar, zu.pop(0) if zu else None, zu.pop(0) if zu else None)
    if top.n_nodes:
        sink(top, *st.finish_top(top, tnoisy, tvar, sol))
    firsts = np.cumsum([0] + [task.roots.size if st.gls else 0 for task in part.tasks()])

    def down(task_first: tuple[subtrees.SubtreeTask, int]) -> tuple[subtrees.SubtreeTask, Estimate, Measurements]:
        task, first = task_first
        noisy, var = store.get(task, st)
        m = task.roots.size if st.gls else 0
        return task, *st.down(task, noisy, var, sol.x_roots[first:first + m], sol.v_roots[first:first + m],
                              [f[first:first + m] for f in sol.fixed])

    for task, est, meas in executor.map(down, zip(part.tasks(), (int(f) for f in firsts))):
        sink(task, est, meas)
    return st.summary()


def _split_note(part: subtrees.Partition) -> str:
    return (f"computed by subtree (split at level {part.level!r}: {part.roots.size:,} subtrees in {part.n_tasks:,} "
            f"tasks, the {part.top.size:,} nodes above solved in memory); the estimate equals the in-memory one of "
            "the same measurements")


def _settle_split(r: Resolved, ledger: Ledger, part: subtrees.Partition, check_counts: Any,
                  session: Session | None, ticket: int | None) -> None:
    """The end of a split release, in memory or streamed: the ledger's notes, the session's
    charge and the seeded-release warning."""
    if check_counts is False:
        ledger.notes.append("node values released as given (check_counts=False): they were not checked to be "
                            "non-negative counts that add up from the leaves")
    ledger.notes.append(_split_note(part))
    if session is not None:
        session.settle(cast(int, ticket), ledger)
    if r.seed is not None:
        warn(f"release with seed={r.seed}: reproducible randomness is for tests and benchmarks; the "
             "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning)


def _release_split(tree: Tree, vals: np.ndarray, split: Any, *, structure: Structure | None,
                   session: Session | Reservation | None, check_counts: Any, executor: Any = None,
                   **keywords: Any) -> ReleaseResult:
    """:func:`release` with ``split``: the result assembled in memory from the tasks."""
    n_cells = vals.shape[1] if vals.ndim == 2 else 1
    ex = resolve_executor(executor)
    r, part, step, tail = _split_setup(tree, n_cells, split, keywords)
    check(r, session)
    rng = make_rng(r.seed)
    vals_internal = tree.to_internal(vals).reshape(tree.n_nodes, n_cells)
    acc, decomposition = open_account(r, tree, structure)
    ticket, session = _reserve(session, r)
    marg = isinstance(r.plan, Marginals)
    integer = bool(r.plan.mechanism.integer) and np.issubdtype(vals_internal.dtype, np.integer)  # type: ignore
    store = _MemoryStore(part, n_cells, np.float64 if marg or not integer else np.int64, per_cell=marg)
    # the estimate's values, made at the first part in that part's dtype (the top-down steps'
    # integers): a float array cast to int64 at the end cost ~17 ns a node-cell
    full: dict[str, np.ndarray] = {}
    v_full = np.empty((tree.n_nodes, n_cells) if marg else tree.n_nodes)
    # marginals: the measurements are the plan's GLS estimate (as in memory), not the store's rotated columns
    mx_full = np.empty((tree.n_nodes, n_cells)) if marg else None
    last: list[Estimate] = []

    def sink(task: subtrees.SubtreeTask, est: Estimate, meas: Measurements) -> None:
        x = full.get("x")
        if x is None:
            x = full["x"] = np.empty((tree.n_nodes, n_cells), est.values.dtype)
        elif not np.can_cast(est.values.dtype, x.dtype, "safe"):  # parts that differ: never one lost digit
            x = full["x"] = x.astype(np.result_type(x.dtype, est.values.dtype))
        x[task.nodes] = est.values
        v_full[task.nodes] = est.variance
        if mx_full is not None:
            mx_full[task.nodes] = meas.values
        last[:] = [est]

    try:
        meas = _run_split(r, part, step, tail, n_cells, lambda task: vals_internal[task.nodes], sink,  # checked whole
                          total=r.total - acc.total, key=noise_key(r.seed), check_counts=False, store=store,
                          executor=ex)
    finally:
        if ex is not executor:  # made here (from a name or None): closed here; a user's own executor is theirs
            close_executor(ex)
    guarantee = account(r, acc, meas)
    noisy, var = store.noisy, store.var
    x_full = full["x"] if "x" in full else np.empty((tree.n_nodes, n_cells))
    if marg:
        noisy, var = cast(np.ndarray, mx_full), v_full.copy()
        est = Estimate(x_full.astype(last[0].values.dtype, copy=False), v_full, dict(last[0].info), var,
                       last[0].linear, True)
    elif step is None:
        est = _unmeasured_missing(Estimate(noisy, var, dict(meas.info), var, True, False), [])
    elif tail:  # the top-down steps' values, info and flags (as every part's)
        est = Estimate(x_full.astype(last[0].values.dtype, copy=False), v_full, dict(last[0].info), var,
                       last[0].linear, True)
    else:
        est = Estimate(x_full, v_full, subtrees.gls_info(step, var), var, True, True)
    if vals.ndim == 1:
        def cell0(a: Any) -> Any:  # marginals' variances are per cell
            return a[:, 0] if marg and a is not None else a

        est = Estimate(est.values[:, 0], cell0(est.variance), est.info, cell0(est.measurement_variance),
                       est.linear, est.consistent)
        noisy, var = noisy[:, 0], cell0(var)
    if r.invariant_names:
        est = _check_invariants_kept(est, vals_internal[r.invariants].reshape(
            (-1,) + vals.shape[1:]), r.invariants, r.postprocessors, r.cover)
    meas_full = Measurements(noisy, var, meas.spends, meas.levels, meas.info)
    ledger = build_ledger(r, tree, meas_full, guarantee, structure=structure, decomposition=decomposition, rng=rng)
    _settle_split(r, ledger, part, check_counts, session, ticket)
    return ReleaseResult(
        tree=tree,
        estimate=external_estimate(tree, est),
        measurements=external_estimate(tree, Estimate(noisy, var, dict(meas.info))),
        ledger=ledger,
    )


def release_by_subtree(
    tree: Tree,
    counts_of: Callable[[subtrees.SubtreeTask], Any],
    sink: Callable[[subtrees.SubtreeTask, Estimate, Measurements], None],
    *,
    split: Any,
    n_cells: int = 1,
    workdir: str | os.PathLike[str] | None = None,
    session: Session | Reservation | None = None,
    check_counts: bool | str = True,
    workers: int = 1,
    executor: Any = None,
    **keywords: Any,
) -> SplitRun:
    """A release streamed by subtree: memory grows with the largest task, not the tree.

    ``counts_of(task)`` returns the true counts of ``task.nodes`` (the full tree's internal
    ids, in that order; ``(m,)`` or ``(m, n_cells)``); it is called once per task and once
    for the top part (``task.index == -1``: the nodes above the split level). ``sink(task,
    estimate, measurements)`` receives each part's final estimate (values, variances; in
    ``task.nodes`` order, ``task.external_nodes`` are their external ids) and noisy
    measurements (plan ``marginals``: its GLS estimate with per-cell variances, as in
    memory): the top part first, then every task. The ledger is returned, not sunk.

    Tasks are independent once the top is solved. Noise is keyed per node (release key,
    node, cell), so the streamed release equals the in-memory one with the same key bit for
    bit, whatever the split; a call draws a fresh key (or the seed's) and spends the budget. Between a task's
    pass up and its pass down its noisy measurements wait in ``workdir`` (a temporary
    folder by default); they are removed at the end. ``keywords``: those of :func:`release`
    (``epsilon``, ``plan``, ``postprocess``, ``invariants``, ``seed``, ...); ``split`` as there.

    ``workers``: tasks run on this many threads at once (default 1: one after another,
    each task's kernels using every thread). With more, ``counts_of`` is called from
    several threads at once and must be safe to; ``sink`` is still called from this
    thread, in task order; memory holds up to ``workers + 1`` tasks. The numbers do not
    change with ``workers``. ``executor``: where the tasks run instead (:mod:`hierdp.execution`:
    a registered name such as ``"inline"`` or ``"threads"``, built with ``workers``, or an object
    with a ``map(function, tasks)`` method yielding results in task order); the numbers do not
    change with it either.
    """
    ex = resolve_executor(executor, workers)
    r, part, step, tail = _split_setup(tree, n_cells, split, keywords)
    check(r, session)
    rng = make_rng(r.seed)
    acc, decomposition = open_account(r, tree, None)
    ticket, session = _reserve(session, r)
    store = _DiskStore(workdir)
    try:
        meas = _run_split(r, part, step, tail, n_cells, counts_of, sink, total=r.total - acc.total,
                          key=noise_key(r.seed), check_counts=check_counts, store=store, executor=ex)
    finally:
        store.close()
        if ex is not executor:  # made here (from a name or workers): closed here; a user's own executor is theirs
            close_executor(ex)
    guarantee = account(r, acc, meas)
    ledger = build_ledger(r, tree, meas, guarantee, decomposition=decomposition, rng=rng)
    _settle_split(r, ledger, part, check_counts, session, ticket)
    return SplitRun(ledger=ledger, partition=part)
