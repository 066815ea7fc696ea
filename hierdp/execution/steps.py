"""The steps of one release, each usable on its own: resolve, check, open the account,
measure, account, post-process, build the ledger (:func:`hierdp.release` runs them in
this order; a split release runs :func:`measure`-like steps per task)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import registry, rules
from hierdp.accounting import Accountant, PrivacyLoss
from hierdp.accounting.ledger import Ledger
from hierdp.accounting.session import Reservation
from hierdp.decompositions.base import Structure
from hierdp.errors import (
    BudgetError,
    DataError,
    PluginError,
    PrivacyError,
    expected_one_of,
)
from hierdp.keyed_noise import NoiseKey, tiebreak_seed
from hierdp.measurements import Estimate, Measurements
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.base import Plan
from hierdp.postprocessors.base import PostProcessor
from hierdp.postprocessors.chain import chain_spec, resolve_postprocessors, run_chain
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.accounting.session import Session
    from hierdp.rng import RandomSource


class _PlanDefault(tuple[str, ...]):
    """The default ``postprocess=``: the plan's own ``default_postprocess`` (``('blue',)`` for
    ``per_level``)."""

    def __repr__(self) -> str:
        return "<the plan's default, ('blue',) for per_level>"


PLAN_DEFAULT = _PlanDefault(("blue",))


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


def check_invariants_kept(est: Estimate, exact: np.ndarray, mask: np.ndarray,
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
                              "use postprocess=['nonneg', 'round'] (the top-down steps hold them)")
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
    postprocess: Any = PLAN_DEFAULT,
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
    if postprocess is PLAN_DEFAULT:
        postprocess = the_plan.default_postprocess
    return Resolved(plan=the_plan, loss=loss, total=total, guarantee=guarantee, sensitivity=sens,
                    neighbours=neighbours, invariants=inv_mask, invariant_names=inv_names, cover=cover,
                    postprocessors=resolve_postprocessors(postprocess), seed=seed, privacy_unit=privacy_unit,
                    max_contributions=max_contributions, notes=tuple(notes), private_notes=dict(private_notes or {}))


def reserve(session: Session | Reservation | None, r: Resolved) -> tuple[int | None, Session | None]:
    """The session's charge for this release, taken before the plan draws noise: a new
    reservation, or the :class:`~hierdp.accounting.session.Reservation` a door made before drawing
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
        extra["key"] = key = key if key is not None else NoiseKey.from_rng(rng)
    meas = resolved.plan.measure(tree, values_internal, total=total, delta=resolved.loss.delta,
                                 sensitivity=resolved.sensitivity, rng=rng, **extra)
    return meas if key is None else replace(meas, tiebreak=tiebreak_seed(key))


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


def exact_totals(mask: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """The invariant nodes' published totals over their cells, NaN elsewhere ((n,), the
    order of ``mask``): what the top-down ``nonneg``/``round`` hold exact."""
    t = np.full(mask.shape[0], np.nan)
    t[mask] = np.asarray(exact, dtype=np.float64).reshape(int(mask.sum()), -1).sum(axis=1)
    return t


def post_process(resolved: Resolved, tree: Tree, meas: Measurements, exact: np.ndarray | None = None) -> Estimate:
    """Step 5: the post-processing chain on the (internal-order) measurements only.

    ``exact``: the invariant nodes' published values (internal order, ``values[mask]``),
    which every step must keep (:func:`check_invariants_kept`); needed when the release
    has invariants. Unmeasured nodes without a consistent step become NaN. (Not
    :func:`postprocess`, which runs one named post-processor on external-order arrays.)
    """
    pps = resolved.postprocessors
    if resolved.invariant_names and resolved.cover == "total" and exact is not None and np.ndim(meas.values) == 2:
        meas = replace(meas, exact_totals=exact_totals(resolved.invariants, exact))
    est = run_chain(tree, meas, pps)
    if not pps:  # the estimate is the plan's output: its diagnostics (e.g. ghazi's thresholds) stay valid
        est = Estimate(est.values, est.variance, dict(meas.info), est.measurement_variance, est.linear, est.consistent)
    est = unmeasured_missing(est, pps)
    if resolved.invariant_names:
        if exact is None:
            raise DataError("a release with invariants needs their published values (exact=) to check them")
        est = check_invariants_kept(est, exact, resolved.invariants, pps, resolved.cover)
    return est


def build_ledger(resolved: Resolved, tree: Tree, meas: Measurements, guarantee: dict[str, Any], *,
                 structure: Structure | None = None, decomposition: dict[str, Any] | None = None,
                 rng: RandomSource) -> Ledger:
    """Step 6: the release's :class:`~hierdp.accounting.ledger.Ledger` from the composed ``guarantee``
    (:func:`account`), the plan's per-level summary and what :func:`resolve` decided."""
    the_plan, inv_names = resolved.plan, resolved.invariant_names
    fields = the_plan.ledger_fields()
    ledger = Ledger(
        guarantee=guarantee["guarantee"], epsilon=guarantee.get("epsilon"), delta=guarantee.get("delta"),
        rho=guarantee.get("rho"), privacy_unit=resolved.privacy_unit, max_contributions=resolved.max_contributions,
        mechanism=fields["mechanism"], budget_strategy=fields["budget_strategy"], plan=the_plan.name,
        levels=list(meas.levels), structure=tree.provenance if structure is None else structure.provenance,
        postprocess=[pp.name for pp in resolved.postprocessors],
        postprocess_params=chain_spec(list(resolved.postprocessors)), seed=resolved.seed,
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


def unmeasured_missing(est: Estimate, pps: list[PostProcessor]) -> Estimate:
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
        tiebreak=est.tiebreak,
    )
