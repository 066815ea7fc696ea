"""One private release: plan → measurements → post-processing → ledger.

The flow of the design: true node counts → a *plan* measures them within the budget
(``per_level`` by default: one mechanism call per level, basic composition over levels,
parallel within a level) → :class:`~hierdp.postprocessors.base.Measurements` (noisy
values, exact variances, spends) → the post-processing chain on noisy data only →
:class:`~hierdp.result.ReleaseResult` with the ledger the accountant builds from every
spend (the plan's and, for a data-dependent structure, the decomposition's).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import registry, rules
from hierdp.accounting import Accountant
from hierdp.decompositions.base import Structure
from hierdp.errors import BudgetError, DataError, NotForPublicationWarning, PluginError, PrivacyError
from hierdp.ledger import Ledger
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.base import Plan
from hierdp.postprocessors.base import Estimate, Measurements, PostProcessor, node_values, node_variance
from hierdp.postprocessors.chain import resolve_postprocessors, run_chain
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.session import Session

__all__ = ["release", "postprocess", "resolve_plan", "external_estimate"]


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


def _sensitivity(sensitivity: Sensitivity | None, max_contributions: int | None) -> Sensitivity:
    """The per-level sensitivity: at least what one privacy unit can change (one row, or
    ``max_contributions`` rows); a smaller declared one is refused (rules.sensitivity_problem)."""
    if max_contributions is None:
        floor, how = Sensitivity(), "one row per privacy unit"
    else:
        rules.enforce(rules.max_contributions_problem(max_contributions), BudgetError)
        floor, how = Sensitivity.bounded(int(max_contributions)), f"max_contributions={max_contributions}"
    rules.enforce(rules.sensitivity_problem(sensitivity, floor, how), PrivacyError)
    return sensitivity or floor


def release(
    tree: Tree,
    values: np.ndarray,
    *,
    epsilon: float | None = None,
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
    session: Session | None = None,
    notes: Sequence[str] = (),
    private_notes: Mapping[str, Any] | None = None,
    structure: Structure | None = None,
) -> ReleaseResult:
    """Release the node counts ``values`` (external order) of ``tree`` privately.

    ``plan`` decides how the counts are measured (default ``per_level`` with
    ``mechanism`` — default ``discrete_laplace`` — and ``budget`` — default ``equal``);
    the noisy values and their exact variances then go through ``postprocess`` in order.
    The sensitivity is what one privacy unit can change per level (one row, or
    ``max_contributions`` rows); a larger one may be declared, never a smaller one. With
    ``session`` the spend is drawn from a :class:`hierdp.Session`, which refuses to
    overspend. With ``seed`` the randomness is reproducible: a
    :class:`~hierdp.errors.NotForPublicationWarning` is raised and the ledger and written
    tables are marked NOT FOR PUBLICATION.

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
    rules.enforce(rules.seed_problem(seed), DataError)
    the_plan = resolve_plan(plan, mechanism=mechanism, budget=budget)
    sens = _sensitivity(sensitivity, max_contributions)
    total, guarantee = the_plan.total(epsilon=epsilon, delta=delta, rho=rho)
    if postprocess is _PLAN_DEFAULT:
        postprocess = getattr(the_plan, "default_postprocess", ("blue",))
    pps = resolve_postprocessors(postprocess)
    if session is not None:
        session.check(guarantee)
    rng = make_rng(seed)
    acc = Accountant(unit="rho" if the_plan.budget_unit == "rho" else "epsilon", budget=total)
    decomposition = _structure_spends(acc, structure, tree)
    meas = the_plan.measure(tree, tree.to_internal(vals), total=total - acc.total, delta=delta, sensitivity=sens,
                            rng=rng)
    for s in meas.spends:  # refuses a plan that spent more than the total
        acc.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
    if delta is not None and acc.delta_total > delta * (1 + rules.SUM_RTOL):
        raise BudgetError(f"plan {the_plan.name!r} spent δ = {acc.delta_total:g}, more than delta = {delta:g}")
    if guarantee["guarantee"] == "approx" and the_plan.budget_unit == "approx":
        guarantee = dict(guarantee, delta=acc.delta_total if delta is None else delta)
    est = run_chain(tree, meas, pps)
    if not pps:  # the estimate is the plan's output: its diagnostics (e.g. ghazi's thresholds) stay valid
        est = Estimate(est.values, est.variance, dict(meas.info), est.measurement_variance, est.linear, est.consistent)
    est = _unmeasured_missing(est, pps)
    fields = the_plan.ledger_fields()
    ledger = Ledger(
        guarantee=guarantee["guarantee"], epsilon=guarantee.get("epsilon"), delta=guarantee.get("delta"),
        rho=guarantee.get("rho"), privacy_unit=privacy_unit, max_contributions=max_contributions,
        mechanism=fields["mechanism"], budget_strategy=fields["budget_strategy"], plan=the_plan.name,
        levels=list(meas.levels), structure=tree.provenance if structure is None else structure.provenance,
        postprocess=[pp.name for pp in pps], seed=seed,
        secure_randomness=bool(rng.secure), randomness=repr(rng), notes=list(notes),
        private_notes=dict(private_notes or {}), decomposition=decomposition,
    )
    ledger.non_private.extend(meas.info.get("non_private", []))
    ledger.non_private.extend(the_plan.non_private_reasons())
    if session is not None:
        session.charge(ledger)
    if seed is not None:
        warnings.warn(f"release with seed={seed}: reproducible randomness is for tests and benchmarks; the "
                      "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning, stacklevel=2)
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
    for s in structure.spends:  # refuses a structure that spent more than the total
        acc.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
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
    if est.variance is None or any(pp.consistent for pp in pps):
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

