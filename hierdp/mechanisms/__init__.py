"""Noise mechanisms. Built-ins are registered through the ``hierdp_register_mechanisms`` hook."""

from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.plugins.markers import hookimpl

__all__ = ["Mechanism", "Sensitivity", "DiscreteLaplace"]


@hookimpl
def hierdp_register_mechanisms():
    return [DiscreteLaplace]
