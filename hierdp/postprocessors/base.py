"""The post-processor interface.

Post-processors see only the public tree and noisy measurements (values plus per-node
variances); they never receive true counts, so their output is private by the
post-processing property of differential privacy. Their input and output types,
:class:`~hierdp.measurements.Measurements` and :class:`~hierdp.measurements.Estimate`, live
in :mod:`hierdp.measurements` (plans make Measurements too); they are re-exported here so
``from hierdp.postprocessors.base import Measurements`` keeps working.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hierdp.errors import DataError
from hierdp.measurements import Estimate, Measurements

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["Estimate", "Measurements", "PostProcessor", "node_values", "node_variance", "finite_values",
           "checked_variance"]


def _floats(a: Any, what: str) -> np.ndarray:
    """``a`` as a float64 array, or a one-line DataError for text, objects or complex numbers."""

    if np.iscomplexobj(a):
        raise DataError(f"{what} must be real numbers, got complex values")
    try:
        return np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        kind = getattr(np.asarray(a, dtype=object).flat[0] if np.size(a) else None, "__class__", type(None)).__name__
        raise DataError(f"{what} must be numbers, got values of type {kind}") from None


def node_values(tree: Tree, values: Any) -> np.ndarray:
    """Node values as float64 of shape ``(n,)`` or ``(n, k)``; clear errors otherwise."""

    y = _floats(values, "values")
    if y.ndim not in (1, 2) or y.shape[0] != tree.n_nodes:
        raise DataError(f"values must have shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {y.shape}")
    return y


def node_variance(tree: Tree, variance: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Variances as float64 of shape ``(n,)`` or ``shape`` (a scalar is broadcast to every
    node); shape errors only, the values are checked by the caller."""

    v = _floats(variance, "variance")
    if v.ndim == 0:
        v = np.full(tree.n_nodes, float(v))
    allowed = list(dict.fromkeys([(tree.n_nodes,), tuple(shape)]))
    if v.shape not in allowed:
        raise DataError(f"variance must have shape {' or '.join(map(str, allowed))}, got {v.shape}")
    return v


def finite_values(tree: Tree, values: Any) -> np.ndarray:
    """:func:`node_values`, and a one-line DataError if any value is NaN or infinite."""

    y = node_values(tree, values)
    # min and max: two reductions without an n-sized temporary (NaN propagates into both)
    if y.size and not (np.isfinite(y.min()) and np.isfinite(y.max())):
        raise DataError("values contain NaN or infinity; mark unmeasured nodes with variance=inf instead")
    return y


def checked_variance(tree: Tree, variance: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """:func:`node_variance` (``None`` passes through), and a one-line DataError if any
    variance is NaN or negative (``inf`` marks an unmeasured node, 0 an exact one)."""

    if variance is None:
        return None
    v = node_variance(tree, variance, shape)
    if v.size and not v.min() >= 0:  # NaN or a negative entry (NaN propagates into the minimum)
        raise DataError("variances must be non-negative (inf marks an unmeasured node)")
    return v

class PostProcessor(ABC):
    """Base class of post-processors (registered through ``hierdp_register_postprocessors``).

    The chain protocol: each step declares what it needs and what it gives.

    ``requires_variance``: the post-processor needs per-node variances.
    ``consistent``: its output satisfies parent = sum of children.
    ``linear``: its output is a linear function of its input, so a linear input stays
    linear and its reported variances stay exact (BLUE, GMC); a non-linear step
    (``nonneg``, ``round``) makes the chain's output non-linear.
    ``requires_consistent_input``: it must come after a consistent post-processor.

    ``apply`` receives an :class:`Estimate` whose ``measurement_variance``, ``linear`` and
    ``consistent`` fields were filled by the chain; it returns the new values and
    variances (the chain sets the protocol fields of the result from the class flags).
    """

    name: ClassVar[str]
    requires_variance: ClassVar[bool] = False
    consistent: ClassVar[bool] = True
    linear: ClassVar[bool] = False
    #: the input must already be consistent (e.g. rounding); a release refuses a chain
    #: that does not put a consistent post-processor before it
    requires_consistent_input: ClassVar[bool] = False
    #: how a release cut into subtree tasks (``split=``, :mod:`hierdp.subtrees`) runs this
    #: step: ``None`` (it cannot: the split release refuses it), ``"gls"`` (a weighted
    #: least-squares consistent estimate with the measurements' variances, solved exactly by
    #: the split engine's passes up, top and down: ``blue``, ``gmc``), ``"top_down"`` (run
    #: on the top part, then per subtree from its root's final value: ``nonneg`` with
    #: ``method="topdown"``, ``round``; :class:`hierdp.subtrees.SplitTopDown`). An instance
    #: may set it from its parameters.
    split_mode: str | None = None
    #: the parameters the step was built with by name (set by
    #: :func:`hierdp.postprocessors.chain.resolve_postprocessors`; ``{}`` otherwise), recorded
    #: in the ledger so that a bootstrap re-runs the same chain
    params: dict[str, Any] = {}

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"post-processor {self.name!r} takes no parameters, got {sorted(params)}")

    @property
    def couples_cells(self) -> bool:
        """Whether a node's cells are solved together (the top-down steps in passes hold each
        unit's total): then a chain's columns are not independent problems. Default False."""
        return False

    @abstractmethod
    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        """Post-process ``estimate`` (internal order) on ``tree``."""

    def __repr__(self) -> str:
        return f"<postprocessor {self.name!r}>"
