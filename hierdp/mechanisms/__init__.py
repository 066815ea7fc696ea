"""Noise mechanisms. Built-ins are registered through the ``hierdp_register_mechanisms`` hook.

``__all__`` lists the registered release mechanisms and the base classes.
:class:`~hierdp.mechanisms.truncated_laplace.TruncatedLaplace` is not one of them: it is
the building block of the ``ghazi`` plan (an (ε, δ) guarantee per measurement), importable
from :mod:`hierdp.mechanisms.truncated_laplace` (and, for older code, from here) but
neither registered nor exported.
"""

from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.mechanisms.discrete_gaussian import DiscreteGaussian
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.mechanisms.truncated_laplace import TruncatedLaplace  # noqa: F401  (older import path; not exported)
from hierdp.plugins.markers import hookimpl

__all__ = ["Mechanism", "Sensitivity", "DiscreteLaplace", "DiscreteGaussian", "Laplace", "Gaussian"]


@hookimpl
def hierdp_register_mechanisms():
    return [DiscreteLaplace, DiscreteGaussian, Laplace, Gaussian]
