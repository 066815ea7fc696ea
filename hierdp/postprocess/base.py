"""The post-processor interface.

Post-processors see only the public tree and noisy measurements (values plus per-node
variances); they never receive true counts, so their output is private by the
post-processing property of differential privacy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["Estimate", "PostProcessor"]


@dataclass
class Estimate:
    """Node values with their variances.

    ``values`` has shape ``(n,)`` or ``(n, k)``; ``variance`` has shape ``(n,)`` (shared by
    the cells of a node) or the shape of ``values``, ``inf`` where a node carries no
    information, or is ``None`` when unknown. ``info`` holds diagnostics (e.g. a KKT
    residual). Arrays are in the tree's internal (descending-height) order unless stated.
    """

    values: np.ndarray
    variance: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)


class PostProcessor(ABC):
    """Base class of post-processors (registered through ``hierdp_register_postprocessors``).

    ``requires_variance``: the post-processor needs per-node variances.
    ``consistent``: its output satisfies parent = sum of children.
    ``requires_consistent_input``: it must come after a consistent post-processor.
    """

    name: ClassVar[str]
    requires_variance: ClassVar[bool] = False
    consistent: ClassVar[bool] = True
    #: the input must already be consistent (e.g. rounding); a release refuses a chain
    #: that does not put a consistent post-processor before it
    requires_consistent_input: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"post-processor {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        """Post-process ``estimate`` (internal order) on ``tree``."""

    def __repr__(self) -> str:
        return f"<postprocessor {self.name!r}>"
