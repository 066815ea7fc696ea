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
from hierdp.keyed_noise import NoiseKey
from hierdp.ledger import Ledger
from hierdp.measurements import Estimate, Measurements
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans import per_level as PL
from hierdp.plans.base import Plan
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
        return ("node counts must be non-negative; some are negative (values not shown: they are private). Pass "
                "check_counts=False to release such values as given (the ledger says so)")
    if tree.n_leaves == tree.n_nodes:  # a lone root: nothing to add up
        return None
    agg = tree.aggregate(vals[tree.leaves])
    if np.issubdtype(vals.dtype, np.integer):
        off = bool(np.any(agg != vals))
    else:  # non-negative leaves: a sum's rounding error is relative to the sum itself
        off = not np.allclose(agg, vals, rtol=1e-9, atol=1e-12 * float(agg.max(initial=0.0)))
    if off:
        return ("some internal nodes are not the sum of their leaves (values not shown: they are private); node "
                "counts of a hierarchy add up: pass the leaf counts through tree.aggregate(...), or "
                "check_counts=False to release the values as given (the ledger says so)")
    return None


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


def post_process(resolved: Resolved, tree: Tree, meas: Measurements, exact: np.ndarray | None = None) -> Estimate:
    """Step 5: the post-processing chain on the (internal-order) measurements only.

    ``exact``: the invariant nodes' published values (internal order, ``values[mask]``),
    which every step must keep (:func:`_check_invariants_kept`); needed when the release
    has invariants. Unmeasured nodes without a consistent step become NaN. (Not
    :func:`postprocess`, which runs one named post-processor on external-order arrays.)
    """
    pps = resolved.postprocessors
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
    one of the same measurements (``blue``, ``gmc``, ``postprocess=[]``; plan
    ``per_level``), the ledger is the same plus a note of the split. Streaming:
    :func:`release_by_subtree`.

    ``structure``: the :class:`~hierdp.decompositions.base.Structure` ``tree`` came from.
    A data-dependent one (e.g. ``privtree``) already spent ``structure.spends`` choosing the
    tree: they are paid from the total first (the plan measures with what is left), the
    ledger composes both and records the structure as a private output.

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
    if split is not None:
        return _release_split(tree, vals, split, structure=structure, session=session, check_counts=check_counts,
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
    """Resolve a split release (plan ``per_level`` only; a chain of one GLS step or none,
    then top-down ``nonneg``/``round``) and cut the tree; refusals before any count is read
    or noise drawn."""
    r = resolve(tree, n_cells=n_cells, **keywords)
    if not isinstance(r.plan, PerLevel):
        raise PluginError(f"plan {r.plan.name!r} cannot run by subtree (split=): only plan 'per_level' measures "
                          "node by node with a budget fixed on the whole tree; leave split out")
    step, tail = subtrees.split_chain(r.postprocessors)
    part = subtrees.partition(tree, split, n_cells=n_cells)
    if tail:  # refuses invariants below the split before anything is read
        subtrees.SplitTopDown(part, tail, r.invariants if r.invariant_names else None)
    return r, part, step, tail


def _chain_result(r: Resolved, step: PostProcessor | None, tail: list[PostProcessor], variances: np.ndarray
                  ) -> Estimate:
    """The in-memory chain run on one node measured with each of ``variances``' distinct
    values: its ``info``, flags and dtype are what the whole chain returns (they depend
    on the steps and the kinds of variance, not on the values)."""
    steps = ([step] if step is not None else []) + tail
    v = np.asarray(variances, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    one = Tree.from_parent(np.full(1, -1))
    return run_chain(one, Measurements(np.zeros(1), np.full(1, float(v[0]) if v.size else 1.0)), steps)


def _part_count_problem(parent: np.ndarray, vals: np.ndarray, check: Any) -> str | None:
    """:func:`_count_problem` for a part of the tree given as parent-first local ``parent``
    (-1: no parent inside): non-negative, and every node with children their sum (cell by
    cell; exact for integers, 1e-9 relative for floats). Says what, never which node."""
    if check is not False and check is not True and check != "strict":
        return f"check_counts must be True, 'strict' or False, got {check!r:.40}"
    if check is False or vals.dtype == bool or not vals.size:
        return None
    if vals.min() < 0:
        return ("node counts must be non-negative; some are negative (values not shown: they are private). Pass "
                "check_counts=False to release such values as given (the ledger says so)")
    inside = parent >= 0
    sums = np.zeros(vals.shape, dtype=np.float64 if np.issubdtype(vals.dtype, np.floating) else np.int64)
    np.add.at(sums, parent[inside], vals[inside])
    has = np.zeros(parent.size, dtype=bool)
    has[parent[inside]] = True
    got, want = sums[has], vals[has]
    if np.issubdtype(vals.dtype, np.integer):
        off = bool(np.any(got != want))
    else:
        off = not np.allclose(got, want, rtol=1e-9, atol=1e-12 * float(np.abs(got).max(initial=0.0)))
    if off:
        return ("some internal nodes are not the sum of their leaves (values not shown: they are private); node "
                "counts of a hierarchy add up: pass the leaf counts through tree.aggregate(...), or "
                "check_counts=False to release the values as given (the ledger says so)")
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


class _DiskStore:
    """A task's measurements between its pass up and its pass down, in ``workdir`` (a
    temporary folder by default): memory then holds one task at a time. What is written is
    noisy (released anyway as the measurements), never a true count."""

    def __init__(self, workdir: str | os.PathLike[str] | None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="hierdp-split-") if workdir is None else None
        self.dir = Path(self._tmp.name if self._tmp is not None else os.fspath(cast(Any, workdir)))
        self.dir.mkdir(parents=True, exist_ok=True)
        self._written: list[Path] = []

    def put(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        t = task.index
        for name, a in ((f"task{t}.noisy.npy", noisy), (f"task{t}.var.npy", var)):
            np.save(self.dir / name, a)
            self._written.append(self.dir / name)

    def get(self, task: subtrees.SubtreeTask) -> tuple[np.ndarray, np.ndarray]:
        t = task.index
        return np.load(self.dir / f"task{t}.noisy.npy"), np.load(self.dir / f"task{t}.var.npy")

    def close(self) -> None:
        """Remove what was written (the temporary folder with it)."""
        for path in self._written:
            path.unlink(missing_ok=True)
        if self._tmp is not None:
            self._tmp.cleanup()


class _MemoryStore:
    """The measurements of every node, assembled in full arrays (the in-memory result)."""

    def __init__(self, part: subtrees.Partition, n_cells: int, dtype: Any) -> None:
        self.part = part
        self.noisy = np.zeros((part.tree.n_nodes, n_cells), dtype=dtype)
        self.var = np.full(part.tree.n_nodes, np.inf)

    def put(self, task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray) -> None:
        nodes = task.nodes
        if noisy.dtype != self.noisy.dtype:
            self.noisy = self.noisy.astype(np.result_type(self.noisy.dtype, noisy.dtype))
        self.noisy[nodes] = noisy
        self.var[nodes] = var

    def get(self, task: subtrees.SubtreeTask) -> tuple[np.ndarray, np.ndarray]:
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


def _run_split(r: Resolved, part: subtrees.Partition, step: PostProcessor | None, tail: list[PostProcessor],
               n_cells: int,
               counts_of: Callable[[subtrees.SubtreeTask], Any],
               sink: Callable[[subtrees.SubtreeTask, Estimate, Measurements], None], *, total: float,
               key: NoiseKey, check_counts: Any, store: Any) -> Measurements:
    """The three stages of a split release (:mod:`hierdp.subtrees`); returns the plan's
    spends, levels and info as :class:`~hierdp.measurements.Measurements` without values.

    Every node's noise is keyed by ``key``, its id in the full tree and its cell
    (:func:`hierdp.plans.per_level.measure_nodes`), so it is the noise the in-memory release
    with the same key draws, whatever the split, the task order or the thread count."""
    tree = part.tree
    plan = cast(PerLevel, r.plan)
    alloc, levels, spends, info = subtrees.per_level_allocation(
        plan, tree, total, sensitivity=r.sensitivity, delta=r.loss.delta,
        invariants=r.invariants if r.invariant_names else None)
    mech, sens, inv = plan.mechanism, r.sensitivity, r.invariants if r.invariant_names else None
    engine = subtrees.SplitGLS(part)
    # what the in-memory step says of these variances: the levels' and 0 for invariant nodes
    level_var = np.array([ls.noise_variance for ls in levels if ls.n_nodes] + ([0.0] if inv is not None else []))
    step_info = subtrees.gls_info(step, level_var) if step is not None else {}
    tail_est = _chain_result(r, step, tail, level_var) if tail else None
    z_all: list[np.ndarray] = []
    u_all: list[np.ndarray] = []
    root_counts: list[np.ndarray] = []
    exact: dict[int, np.ndarray] = {}  # invariant values per task (published exactly)

    def measured(task: subtrees.SubtreeTask, vals: np.ndarray, budgets: Mapping[str, float]
                 ) -> tuple[np.ndarray, np.ndarray]:
        noisy, var = PL.measure_nodes(tree, vals, task.nodes, budgets, mech, sens, key)
        if inv is not None and inv[task.nodes].any():
            noisy, var = PL.apply_invariants(vals, noisy, var, inv[task.nodes])
            exact[task.index] = vals[inv[task.nodes]]
        return noisy, var

    for task in part.tasks():  # measure, then the pass up
        vals = _task_counts(task, counts_of(task), n_cells)
        rules.enforce(_part_count_problem(task.parent[1:] - 1, vals, check_counts), DataError)
        noisy, var = measured(task, vals, alloc)
        store.put(task, noisy, var)
        root_counts.append(vals[task.root_pos])
        if step is not None:
            z, u = engine.up(task, noisy.astype(np.float64), var.reshape(-1, 1))
            z_all.append(z)
            u_all.append(u)
    top = _top_task(part)
    roots_vals = np.concatenate(root_counts)
    if top.n_nodes:
        tvals = _task_counts(top, counts_of(top), n_cells)
        both = np.concatenate((top.parent, np.searchsorted(part.top, tree.internal.parent[part.roots])))
        rules.enforce(_part_count_problem(both, np.concatenate((tvals, roots_vals)), check_counts), DataError)
        tnoisy, tvar = measured(top, tvals, alloc)
        store.put(top, tnoisy, tvar)
    else:
        tnoisy, tvar = np.zeros((0, n_cells)), np.zeros(0)
    del roots_vals, root_counts

    def finish(task: subtrees.SubtreeTask, noisy: np.ndarray, var: np.ndarray, x: np.ndarray | None,
               xv: np.ndarray | None) -> None:
        meas = Measurements(noisy, var, info=dict(info))
        if step is None:  # postprocess=[]: the measurements are the estimate
            est = _unmeasured_missing(Estimate(noisy, var, dict(info), var, True, False), [])
        elif tail_est is not None:
            est = Estimate(np.asarray(x, dtype=tail_est.values.dtype), cast(np.ndarray, xv)[:, 0],
                           dict(tail_est.info), var, tail_est.linear, True)
        else:
            est = Estimate(cast(np.ndarray, x), cast(np.ndarray, xv)[:, 0], dict(step_info), var, True, True)
        if task.index in exact:
            est = _check_invariants_kept(est, exact[task.index], inv[task.nodes],  # type: ignore[index]
                                         r.postprocessors, r.cover)
        sink(task, est, meas)

    if step is None:
        if top.n_nodes:
            finish(top, tnoisy, tvar, None, None)
        for task in part.tasks():
            noisy, var = store.get(task)
            finish(task, noisy, var, None, None)
    else:
        x_top, v_top, x_roots, v_roots = engine.top(tnoisy.astype(np.float64), tvar.reshape(-1, 1),
                                                    np.concatenate(z_all), np.concatenate(u_all))
        del z_all, u_all
        fixed: list[np.ndarray] = []
        if tail:  # the top-down steps: the top part first, then each task under its roots' values
            down = subtrees.SplitTopDown(part, tail, inv)
            x_top_final, fixed = down.top(x_top, v_top, x_roots, v_roots)
        if top.n_nodes:
            finish(top, tnoisy, tvar, x_top_final if tail else x_top, v_top)
        first = 0
        for task in part.tasks():
            noisy, var = store.get(task)
            m = task.roots.size
            x, xv = engine.down(task, noisy.astype(np.float64), var.reshape(-1, 1), x_roots[first:first + m],
                                v_roots[first:first + m])
            if tail:
                x = down.down(task, x, xv, [f[first:first + m] for f in fixed])
            first += m
            finish(task, noisy, var, x, xv)
    return Measurements(values=np.zeros((0, n_cells)), variance=None, spends=spends, levels=levels, info=info)


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
                   session: Session | Reservation | None, check_counts: Any, **keywords: Any) -> ReleaseResult:
    """:func:`release` with ``split``: the result assembled in memory from the tasks."""
    n_cells = vals.shape[1] if vals.ndim == 2 else 1
    r, part, step, tail = _split_setup(tree, n_cells, split, keywords)
    check(r, session)
    rng = make_rng(r.seed)
    vals_internal = tree.to_internal(vals).reshape(tree.n_nodes, n_cells)
    acc, decomposition = open_account(r, tree, structure)
    ticket, session = _reserve(session, r)
    integer = bool(r.plan.mechanism.integer) and np.issubdtype(vals_internal.dtype, np.integer)  # type: ignore
    store = _MemoryStore(part, n_cells, np.int64 if integer else np.float64)
    x_full = np.empty((tree.n_nodes, n_cells))
    v_full = np.empty(tree.n_nodes)
    infos: list[dict[str, Any]] = []
    last: list[Estimate] = []

    def sink(task: subtrees.SubtreeTask, est: Estimate, meas: Measurements) -> None:
        x_full[task.nodes] = est.values
        v_full[task.nodes] = est.variance
        infos.append(est.info)
        last[:] = [est]

    meas = _run_split(r, part, step, tail, n_cells, lambda task: vals_internal[task.nodes], sink,  # checked whole above
                      total=r.total - acc.total, key=noise_key(r.seed), check_counts=False, store=store)
    guarantee = account(r, acc, meas)
    noisy, var = store.noisy, store.var
    if step is None:
        est = _unmeasured_missing(Estimate(noisy, var, dict(meas.info), var, True, False), [])
    elif tail:  # the top-down steps' values, info and flags (as every part's)
        est = Estimate(x_full.astype(last[0].values.dtype), v_full, dict(last[0].info), var, last[0].linear, True)
    else:
        est = Estimate(x_full, v_full, subtrees.gls_info(step, var), var, True, True)
    if vals.ndim == 1:
        est = Estimate(est.values[:, 0], est.variance, est.info, est.measurement_variance, est.linear, est.consistent)
        noisy = noisy[:, 0]
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
    **keywords: Any,
) -> SplitRun:
    """A release streamed by subtree: memory grows with the largest task, not the tree.

    ``counts_of(task)`` returns the true counts of ``task.nodes`` (the full tree's internal
    ids, in that order; ``(m,)`` or ``(m, n_cells)``); it is called once per task and once
    for the top part (``task.index == -1``: the nodes above the split level). ``sink(task,
    estimate, measurements)`` receives each part's final estimate (values, variances; in
    ``task.nodes`` order, ``task.external_nodes`` are their external ids) and noisy
    measurements: the top part first, then every task. The ledger is returned, not sunk.

    Tasks are independent once the top is solved. Noise is keyed per node (release key,
    node, cell), so the streamed release equals the in-memory one with the same key bit for
    bit, whatever the split; a call draws a fresh key (or the seed's) and spends the budget. Between a task's
    pass up and its pass down its noisy measurements wait in ``workdir`` (a temporary
    folder by default); they are removed at the end. ``keywords``: those of :func:`release`
    (``epsilon``, ``plan``, ``postprocess``, ``invariants``, ``seed``, ...); ``split`` as there.
    """
    r, part, step, tail = _split_setup(tree, n_cells, split, keywords)
    check(r, session)
    rng = make_rng(r.seed)
    acc, decomposition = open_account(r, tree, None)
    ticket, session = _reserve(session, r)
    store = _DiskStore(workdir)
    try:
        meas = _run_split(r, part, step, tail, n_cells, counts_of, sink, total=r.total - acc.total,
                          key=noise_key(r.seed), check_counts=check_counts, store=store)
    finally:
        store.close()
    guarantee = account(r, acc, meas)
    ledger = build_ledger(r, tree, meas, guarantee, decomposition=decomposition, rng=rng)
    _settle_split(r, ledger, part, check_counts, session, ticket)
    return SplitRun(ledger=ledger, partition=part)
