"""Post-processors: consistency and accuracy from noisy measurements only.

Built-ins are registered through the ``hierdp_register_postprocessors`` hook.
"""

from hierdp.plugins.markers import hookimpl
from hierdp.postprocess.base import Estimate, PostProcessor
from hierdp.postprocess.blue import BLUE

__all__ = ["Estimate", "PostProcessor", "BLUE"]


@hookimpl
def hierdp_register_postprocessors():
    return [BLUE]
