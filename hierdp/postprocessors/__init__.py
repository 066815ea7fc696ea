"""Post-processors: consistency and accuracy from noisy measurements only.

Built-ins are registered through the ``hierdp_register_postprocessors`` hook.
"""

from hierdp.plugins.markers import hookimpl
from hierdp.postprocessors.base import Estimate, PostProcessor
from hierdp.postprocessors.baselines import Boosting, DenseLS, PrivTrie, Processless
from hierdp.postprocessors.blue import BLUE
from hierdp.postprocessors.gmc import GMC
from hierdp.postprocessors.nonneg import NonNegative
from hierdp.postprocessors.rounding import ControlledRounding

__all__ = ["Estimate", "PostProcessor", "BLUE", "GMC", "Processless", "Boosting", "PrivTrie", "DenseLS",
           "NonNegative", "ControlledRounding"]


@hookimpl
def hierdp_register_postprocessors():
    return [BLUE, GMC, Processless, Boosting, PrivTrie, DenseLS, NonNegative, ControlledRounding]
