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

__all__ = ["Estimate", "PostProcessor", "node_values", "node_variance"]


def _floats(a: Any, what: str) -> np.ndarray:
    """``a`` as a float64 array, or a one-line DataError for text, objects or complex numbers."""
    from hierdp.errors import DataError

    if np.iscomplexobj(a):
        raise DataError(f"{what} must be real numbers, got complex values")
    try:
        return np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        kind = getattr(np.asarray(a, dtype=object).flat[0] if np.size(a) else None, "__class__", type(None)).__name__
        raise DataError(f"{what} must be numbers, got values of type {kind}") from None


def node_values(tree: Tree, values: Any) -> np.ndarray:
    """Node values as float64 of shape ``(n,)`` or ``(n, k)``; clear errors otherwise."""
    from hierdp.errors import DataError

    y = _floats(values, "values")
    if y.ndim not in (1, 2) or y.shape[0] != tree.n_nodes:
        raise DataError(f"values must have shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {y.shape}")
    return y


def node_variance(tree: Tree, variance: Any, shape: tuple) -> np.ndarray:
    """Variances as float64 of shape ``(n,)`` or ``shape`` (a scalar is broadcast to every
    node); shape errors only, the values are checked by the caller."""
    from hierdp.errors import DataError

    v = _floats(variance, "variance")
    if v.ndim == 0:
        v = np.full(tree.n_nodes, float(v))
    allowed = list(dict.fromkeys([(tree.n_nodes,), tuple(shape)]))
    if v.shape not in allowed:
        raise DataError(f"variance must have shape {' or '.join(map(str, allowed))}, got {v.shape}")
    return v


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
