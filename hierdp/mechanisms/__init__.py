"""Noise mechanisms. Built-ins are registered through the ``hierdp_register_mechanisms`` hook."""

from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.mechanisms.discrete_gaussian import DiscreteGaussian
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.mechanisms.truncated_laplace import TruncatedLaplace
from hierdp.plugins.markers import hookimpl

__all__ = ["Mechanism", "Sensitivity", "DiscreteLaplace", "DiscreteGaussian", "Laplace", "Gaussian",
           "TruncatedLaplace"]


@hookimpl
def hierdp_register_mechanisms():
    return [DiscreteLaplace, DiscreteGaussian, Laplace, Gaussian]
