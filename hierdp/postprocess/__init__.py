"""Post-processors: consistency and accuracy from noisy measurements only.

Built-ins are registered through the ``hierdp_register_postprocessors`` hook.
"""

from hierdp.plugins.markers import hookimpl
from hierdp.postprocess.base import Estimate, PostProcessor
from hierdp.postprocess.baselines import Boosting, DenseLS, PrivTrie, Processless
from hierdp.postprocess.blue import BLUE
from hierdp.postprocess.gmc import GMC
from hierdp.postprocess.nonneg import NonNegative
from hierdp.postprocess.rounding import ControlledRounding

__all__ = ["Estimate", "PostProcessor", "BLUE", "GMC", "Processless", "Boosting", "PrivTrie", "DenseLS",
           "NonNegative", "ControlledRounding"]


@hookimpl
def hierdp_register_postprocessors():
    return [BLUE, GMC, Processless, Boosting, PrivTrie, DenseLS, NonNegative, ControlledRounding]
