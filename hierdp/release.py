"""One private release: measure every level, post-process, account.

Implements the flow of the design: true node counts → mechanism with per-level budgets
(basic composition over levels, parallel composition within a level) → Measurements
(noisy values and exact variances) → post-processing chain on noisy data only →
:class:`~hierdp.result.ReleaseResult` with the privacy ledger.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hierdp import registry
from hierdp.accounting import total_budget
from hierdp.budgets.base import BudgetStrategy
from hierdp.errors import BudgetError, DataError, PluginError, PrivacyError
from hierdp.ledger import Ledger, LevelSpend
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.postprocess.base import Estimate, PostProcessor
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

__all__ = ["release", "resolve_mechanism", "resolve_postprocessors", "resolve_budget", "measure"]

_SUM_RTOL = 1e-9


def resolve_mechanism(mechanism: str | Mechanism | Mapping[str, Any]) -> Mechanism:
    """A mechanism instance from a registry name, an instance, or ``{"name": ..., **params}``."""
    if isinstance(mechanism, Mechanism):
        return mechanism
    if isinstance(mechanism, str):
        return registry.create("mechanism", mechanism)
    if isinstance(mechanism, Mapping) and "name" in mechanism:
        params = {k: v for k, v in mechanism.items() if k != "name"}
        params.update(params.pop("params", {}) or {})
        return registry.create("mechanism", mechanism["name"], **params)
    raise PluginError(f"mechanism must be a registered name, a Mechanism or {{'name': ...}}, got {mechanism!r}")


def resolve_postprocessors(postprocess: Any) -> list[PostProcessor]:
    """Post-processor instances from names, ``(name, params)`` pairs, dicts or instances."""
    if postprocess is None:
        return []
    if isinstance(postprocess, (str, PostProcessor, Mapping)):
        postprocess = [postprocess]
    out: list[PostProcessor] = []
    for item in postprocess:
        if isinstance(item, PostProcessor):
            out.append(item)
        elif isinstance(item, str):
            out.append(registry.create("postprocessor", item))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append(registry.create("postprocessor", item[0], **dict(item[1] or {})))
        elif isinstance(item, Mapping) and "name" in item:
            params = {k: v for k, v in item.items() if k not in ("name", "params")}
            params.update(item.get("params") or {})
            out.append(registry.create("postprocessor", item["name"], **params))
        else:
            raise PluginError(f"cannot use {item!r} as a post-processor; give a registered name such as 'blue'")
    for i, pp in enumerate(out):
        if getattr(pp, "requires_consistent_input", False) and not (i > 0 and out[i - 1].consistent):
            raise PluginError(
                f"post-processor {pp.name!r} needs a consistent input (raw measurements are not, and unmeasured "
                f"levels hold placeholders); put 'blue' (or 'gmc', then 'nonneg' for non-negative counts) before it"
            )
    return out


def resolve_budget(
    tree: Tree,
    total: float,
    budget: Any,
    *,
    mechanism: Mechanism,
    sensitivity: Sensitivity,
    true_values: np.ndarray | None = None,
) -> tuple[dict[str, float], str, bool]:
    """Per-level budgets summing to ``total``; returns ``(budgets, description, reads_true_counts)``."""
    names = tree.level_names
    reads_true = False
    if isinstance(budget, str) or isinstance(budget, BudgetStrategy) or (
            isinstance(budget, Mapping) and "strategy" in budget):
        if isinstance(budget, BudgetStrategy):
            strategy = budget
        elif isinstance(budget, str):
            strategy = registry.create("budget", budget)
        else:
            params = {k: v for k, v in budget.items() if k not in ("strategy", "params")}
            params.update(budget.get("params") or {})
            strategy = registry.create("budget", budget["strategy"], **params)
        reads_true = bool(strategy.reads_true_counts)
        alloc = strategy.allocate(tree, total, mechanism=mechanism, sensitivity=sensitivity,
                                  true_values=true_values if reads_true else None)
        desc = strategy.name
        alloc = dict(alloc)
        unknown = set(alloc) - set(names)
        if unknown:
            raise BudgetError(f"budget strategy {desc!r} returned unknown levels {sorted(unknown)}")
        alloc = {n: float(alloc.get(n, 0.0)) for n in names}
    elif isinstance(budget, Mapping):
        unknown = [k for k in budget if k not in names]
        if unknown:
            from hierdp.errors import expected_one_of

            raise BudgetError(expected_one_of("level in budget", unknown[0], names))
        alloc = {n: _budget_value(budget.get(n, 0.0), n) for n in names}
        desc = "per-level"
    elif isinstance(budget, Sequence) or isinstance(budget, np.ndarray):
        vals = list(budget)
        if len(vals) != len(names):
            raise BudgetError(
                f"per-level budget list has {len(vals)} values but the tree has {len(names)} levels "
                f"({', '.join(names)}); give one value per level, the total first"
            )
        alloc = {n: _budget_value(v, n) for n, v in zip(names, vals)}
        desc = "per-level"
    else:
        raise BudgetError(f"budget must be a strategy name, a list or a dict of per-level values, got {budget!r}")
    s = math.fsum(alloc.values())
    if desc == "per-level" and not math.isclose(s, total, rel_tol=_SUM_RTOL, abs_tol=0.0):
        raise BudgetError(
            f"per-level budgets sum to {s:g} but the total budget is {total:g}; make them sum to the total"
        )
    if any(v < 0 or not math.isfinite(v) for v in alloc.values()):
        raise BudgetError(f"budget strategy {desc!r} produced an invalid split {alloc}")
    if s > total * (1 + _SUM_RTOL):
        raise BudgetError(f"budget strategy {desc!r} spends {s:g}, more than the total {total:g}")
    if s <= 0:
        raise BudgetError("no level gets any budget; give at least one level a positive budget")
    if s > total:  # rounding (e.g. total / k, k times): never spend more than declared
        big = max(alloc, key=alloc.__getitem__)
        alloc[big] -= s - total
        while math.fsum(alloc.values()) > total:
            alloc[big] = math.nextafter(alloc[big], 0.0)
    return alloc, desc, reads_true


def _sensitivity(sensitivity: Sensitivity | None, max_contributions: int | None) -> Sensitivity:
    """The per-level sensitivity; with ``max_contributions=c`` at least ``Sensitivity.bounded(c)``."""
    if max_contributions is None:
        return sensitivity or Sensitivity()
    if isinstance(max_contributions, bool) or not isinstance(max_contributions, (int, np.integer)) \
            or max_contributions < 1:
        raise BudgetError(f"max_contributions must be a positive integer, got {max_contributions!r}")
    bound = Sensitivity.bounded(int(max_contributions))
    if sensitivity is None:
        return bound
    if not sensitivity.covers(bound):
        raise PrivacyError(
            f"sensitivity {sensitivity} is smaller than max_contributions={max_contributions} allows "
            f"({bound}); drop one of them or make them agree"
        )
    return sensitivity


def _budget_value(v: Any, level: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
            or v < 0:
        raise BudgetError(f"budget for level {level!r} must be a finite number >= 0, got {v!r}")
    return float(v)


def _check_values(tree: Tree, values: np.ndarray) -> np.ndarray:
    vals = np.asarray(values)
    if vals.ndim not in (1, 2) or vals.shape[0] != tree.n_nodes:
        raise DataError(f"true values must have shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {vals.shape}")
    if vals.dtype == object or not (np.issubdtype(vals.dtype, np.number) or vals.dtype == bool):
        raise DataError(f"true values must be numeric, got dtype {vals.dtype}")
    if np.issubdtype(vals.dtype, np.floating) and not np.all(np.isfinite(vals)):
        raise DataError("true values contain NaN or infinity")
    return vals


def measure(
    tree: Tree, values_internal: np.ndarray, budgets: Mapping[str, float], mechanism: Mechanism,
    sensitivity: Sensitivity, rng: Any,
) -> tuple[np.ndarray, np.ndarray, list[LevelSpend]]:
    """Noisy values and per-node variances (internal order), one mechanism call per level."""
    n = tree.n_nodes
    shape = values_internal.shape
    out_dtype = np.int64 if (mechanism.integer and np.issubdtype(values_internal.dtype, np.integer)) else np.float64
    noisy = np.zeros(shape, dtype=out_dtype)
    variance = np.full(n, np.inf)
    spends: list[LevelSpend] = []
    for d, name in enumerate(tree.level_names):
        b = float(budgets.get(name, 0.0))
        idx = tree._level_index[d]
        n_level = (idx.stop - idx.start) if isinstance(idx, slice) else int(idx.size)
        if b > 0:
            var = float(mechanism.variance(b, sensitivity))
            noisy[idx] = mechanism.sample(values_internal[idx], b, sensitivity, rng)
            variance[idx] = var
        else:
            var = math.inf
        spends.append(LevelSpend(level=name, depth=d, budget=b, unit=mechanism.budget_unit,
                                 mechanism=mechanism.name, n_nodes=n_level, noise_variance=var,
                                 sensitivity_l1=sensitivity.l1, sensitivity_l2=sensitivity.l2))
    return noisy, variance, spends


def release(
    tree: Tree,
    values: np.ndarray,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    mechanism: str | Mechanism | Mapping[str, Any] = "discrete_laplace",
    budget: Any = "equal",
    postprocess: Any = ("blue",),
    seed: int | None = None,
    sensitivity: Sensitivity | None = None,
    privacy_unit: str = "one row = one individual",
    max_contributions: int | None = None,
    notes: Sequence[str] = (),
    private_notes: Mapping[str, Any] | None = None,
) -> ReleaseResult:
    """Release the node counts ``values`` (external order) of ``tree`` privately.

    Every level with a positive budget is measured once by ``mechanism`` (each person
    changes one node per level by at most the sensitivity, so a level costs its budget by
    parallel composition and the levels add up by basic composition); the noisy values
    and their exact variances then go through ``postprocess`` in order. With ``seed``
    the randomness is reproducible and the ledger marks the release not for publication.
    """
    vals = _check_values(tree, values)
    mech = resolve_mechanism(mechanism)
    sens = _sensitivity(sensitivity, max_contributions)
    total, guarantee = total_budget(mech.budget_unit, epsilon=epsilon, delta=delta, rho=rho, mechanism=mech.name)
    if (mech.budget_unit == "rho" and rho is None and epsilon is not None and not isinstance(budget, str)
            and not isinstance(budget, BudgetStrategy) and not (isinstance(budget, Mapping) and "strategy" in budget)):
        raise BudgetError(
            f"per-level values are in the mechanism's unit, rho; with epsilon + delta the total rho is derived "
            f"(rho = {total:.6g}), so give rho= with per-level rho values, or a budget strategy such as 'equal'"
        )
    alloc, budget_desc, reads_true = resolve_budget(tree, total, budget, mechanism=mech, sensitivity=sens,
                                                    true_values=vals)
    pps = resolve_postprocessors(postprocess)
    rng = make_rng(seed)
    vals_int = tree.to_internal(vals)
    noisy, variance, spends = measure(tree, vals_int, alloc, mech, sens, rng)
    measurements = Estimate(values=noisy, variance=variance, info={"mechanism": mech.name})
    est = Estimate(values=noisy, variance=variance, info={})
    for pp in pps:
        if pp.requires_variance and est.variance is None:
            raise PluginError(
                f"post-processor {pp.name!r} needs variances but the previous step did not provide them; "
                "put it earlier in the chain"
            )
        est = pp.apply(tree, est)
    est = _unmeasured_missing(est, pps)
    ledger = Ledger(
        guarantee=guarantee["guarantee"], epsilon=guarantee.get("epsilon"), delta=guarantee.get("delta"),
        rho=guarantee.get("rho"), privacy_unit=privacy_unit, max_contributions=max_contributions,
        mechanism=mech.name, budget_strategy=budget_desc, levels=spends, structure=tree.provenance,
        postprocess=[pp.name for pp in pps], seed=seed, secure_randomness=bool(rng.secure), randomness=repr(rng),
        notes=list(notes), private_notes=dict(private_notes or {}),
    )
    if reads_true:
        ledger.non_private.append(f"budget strategy {budget_desc!r} chose the split by reading true counts")
    return ReleaseResult(
        tree=tree,
        estimate=_external(tree, est),
        measurements=_external(tree, measurements),
        ledger=ledger,
    )


def _unmeasured_missing(est: Estimate, pps: list) -> Estimate:
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
    return Estimate(values=vals, variance=est.variance, info=est.info)


def _external(tree: Tree, est: Estimate) -> Estimate:
    """Reorder an internal-order estimate (and per-node arrays in its ``info``) to external order."""
    info = {k: (tree.to_external(v) if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == tree.n_nodes
                else v) for k, v in est.info.items()}
    return Estimate(
        values=tree.to_external(est.values),
        variance=None if est.variance is None else tree.to_external(est.variance),
        info=info,
    )
