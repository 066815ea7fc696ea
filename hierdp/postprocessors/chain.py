"""The post-processing chain: resolving steps and running them on measurements only.

The protocol (:class:`~hierdp.postprocessors.base.PostProcessor` flags): a step that
``requires_variance`` gets variances or the chain refuses; a step that
``requires_consistent_input`` must follow a ``consistent`` one (:func:`hierdp.rules.check_chain`);
after each step the chain records whether the values are still ``linear`` in the
measurements (every step so far linear) and ``consistent`` (the last step is), and hands
the measurements' variances on as ``measurement_variance``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hierdp import registry, rules
from hierdp.errors import PluginError
from hierdp.postprocessors.base import Estimate, Measurements, PostProcessor

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["resolve_postprocessors", "run_chain"]


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
            out.append(_built(registry.create("postprocessor", item), {}))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            params = dict(item[1] or {})
            out.append(_built(registry.create("postprocessor", item[0], **params), params))
        elif isinstance(item, Mapping) and "name" in item:
            params = {k: v for k, v in item.items() if k not in ("name", "params")}
            params.update(item.get("params") or {})
            out.append(_built(registry.create("postprocessor", item["name"], **params), params))
        else:
            raise PluginError(f"cannot use {item!r} as a post-processor; give a registered name such as 'blue'")
    rules.check_chain(out)
    return out


def _built(step: PostProcessor, params: dict[str, Any]) -> PostProcessor:
    """``step`` with the parameters it was built with (:attr:`PostProcessor.params`), which the
    ledger records so that a bootstrap re-runs the same chain."""
    step.params = dict(params)
    return step


def chain_spec(steps: list[PostProcessor]) -> list[dict[str, Any]]:
    """The parameters of each step as built (``{}`` for an instance given as such), for the
    ledger (:attr:`hierdp.Ledger.postprocess_params`); JSON-safe values only, else ``{}``."""
    out: list[dict[str, Any]] = []
    for step in steps:
        params = dict(getattr(step, "params", None) or {})
        try:
            json.dumps(params)
        except (TypeError, ValueError):
            params = {}
        out.append(params)
    return out


def ledger_chain(names: list[str], params: list[dict[str, Any]]) -> list[Any]:
    """The chain a ledger records: its names with their parameters (names alone when a
    ledger written before the parameters were recorded has none)."""
    if len(params) != len(names):
        return list(names)
    return [{"name": n, **dict(p)} for n, p in zip(names, params)]


def couples_cells(steps: list[PostProcessor]) -> bool:
    """Whether a step of ``steps`` solves a node's cells together (the top-down steps in
    passes hold each child's total over its cells): then columns stacked from several
    replicates (a bootstrap's) must run one replicate at a time."""
    return any(bool(getattr(pp, "couples_cells", False)) for pp in steps)


def run_chain_replicates(tree: Tree, values: np.ndarray, variance: np.ndarray | None, steps: list[PostProcessor],
                         k: int, *, tiebreak: int | None = None, info: dict[str, Any] | None = None) -> np.ndarray:
    """The chain's values on ``values`` (n, k * m): ``m`` replicates of ``k`` cells stacked as
    ``(n, k, m)`` reshaped, in one run when no step couples the cells, else one run per
    replicate. Returns float64 (n, k * m) in the same layout."""
    n = values.shape[0]
    if k == 1 or not couples_cells(steps):  # one cell: the passes solve each column alone
        return np.asarray(run_chain(tree, Measurements(values, variance, info=dict(info or {}), tiebreak=tiebreak),
                                    steps).values, dtype=np.float64).reshape(n, -1)
    y3 = np.asarray(values).reshape(n, k, -1)
    out = np.empty(y3.shape)
    for r in range(y3.shape[2]):
        est = run_chain(tree, Measurements(np.ascontiguousarray(y3[:, :, r]), variance, info=dict(info or {}),
                                           tiebreak=tiebreak), steps)
        out[:, :, r] = np.asarray(est.values, dtype=np.float64).reshape(n, k)
    return out.reshape(n, -1)


def run_chain(tree: Tree, measurements: Measurements, steps: list[PostProcessor]) -> Estimate:
    """Apply ``steps`` in order to the (internal-order) ``measurements``; returns the estimate."""
    est = first = measurements.as_estimate()
    for pp in steps:
        if pp.requires_variance and est.variance is None and est is first:
            raise PluginError(
                f"post-processor {pp.name!r} needs variances, but the plan's measurements have none (a non-linear "
                "plan such as 'ghazi'); use postprocess=[] or steps that need no variances"
            )
        if pp.requires_variance and est.variance is None:
            raise PluginError(
                f"post-processor {pp.name!r} needs variances but the previous step did not provide them; "
                "put it earlier in the chain"
            )
        out = pp.apply(tree, est)
        est = Estimate(values=out.values, variance=out.variance, info=dict(out.info),
                       measurement_variance=measurements.variance, linear=est.linear and bool(pp.linear),
                       consistent=bool(pp.consistent), exact_totals=measurements.exact_totals,
                       tiebreak=measurements.tiebreak)
    return est
