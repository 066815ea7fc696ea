"""The post-processing chain: resolving steps and running them on measurements only.

The protocol (:class:`~hierdp.postprocessors.base.PostProcessor` flags): a step that
``requires_variance`` gets variances or the chain refuses; a step that
``requires_consistent_input`` must follow a ``consistent`` one (:func:`hierdp.rules.check_chain`);
after each step the chain records whether the values are still ``linear`` in the
measurements (every step so far linear) and ``consistent`` (the last step is), and hands
the measurements' variances on as ``measurement_variance``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

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
            out.append(registry.create("postprocessor", item))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append(registry.create("postprocessor", item[0], **dict(item[1] or {})))
        elif isinstance(item, Mapping) and "name" in item:
            params = {k: v for k, v in item.items() if k not in ("name", "params")}
            params.update(item.get("params") or {})
            out.append(registry.create("postprocessor", item["name"], **params))
        else:
            raise PluginError(f"cannot use {item!r} as a post-processor; give a registered name such as 'blue'")
    rules.check_chain(out)
    return out


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
