"""Error metrics. Built-ins are registered through the ``hierdp_register_metrics`` hook."""

from hierdp.metrics.base import Metric
from hierdp.metrics.errors import BUILTIN_METRICS
from hierdp.metrics.sequences import LengthTVD
from hierdp.plugins.markers import hookimpl

__all__ = ["Metric"]


@hookimpl
def hierdp_register_metrics():
    return list(BUILTIN_METRICS) + [LengthTVD]
