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

__all__ = ["Estimate", "Measurements", "PostProcessor", "node_values", "node_variance", "finite_values",
           "checked_variance"]


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


def node_variance(tree: Tree, variance: Any, shape: tuple[int, ...]) -> np.ndarray:
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



def finite_values(tree: Tree, values: Any) -> np.ndarray:
    """:func:`node_values`, and a one-line DataError if any value is NaN or infinite."""
    from hierdp.errors import DataError

    y = node_values(tree, values)
    # min and max: two reductions without an n-sized temporary (NaN propagates into both)
    if y.size and not (np.isfinite(y.min()) and np.isfinite(y.max())):
        raise DataError("values contain NaN or infinity; mark unmeasured nodes with variance=inf instead")
    return y


def checked_variance(tree: Tree, variance: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """:func:`node_variance` (``None`` passes through), and a one-line DataError if any
    variance is NaN or negative (``inf`` marks an unmeasured node, 0 an exact one)."""
    from hierdp.errors import DataError

    if variance is None:
        return None
    v = node_variance(tree, variance, shape)
    if v.size and not v.min() >= 0:  # NaN or a negative entry (NaN propagates into the minimum)
        raise DataError("variances must be non-negative (inf marks an unmeasured node)")
    return v

@dataclass
class Measurements:
    """What a plan measured: noisy node values and the exact variance of their noise.

    ``values`` has shape ``(n,)`` or ``(n, k)``; ``variance`` has shape ``(n,)`` (shared by
    the cells of a node) or the shape of ``values``, ``inf`` where a node was not measured.
    ``spends`` are the privacy costs the plan paid (:class:`hierdp.accounting.Spend`),
    ``levels`` its per-level summary for the ledger, ``info`` public diagnostics (e.g.
    per-node thresholds). Arrays are in the tree's internal order unless stated.
    Measurements are the only input a post-processing chain receives.
    """

    values: np.ndarray
    variance: np.ndarray | None = None
    spends: list[Any] = field(default_factory=list)
    levels: list[Any] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    def as_estimate(self) -> Estimate:
        """The measurements as the first estimate of a chain: linear in the noise, and not
        consistent unless the plan says otherwise (``info["consistent"]``/``info["linear"]``,
        e.g. a plan that hands on its own least-squares estimate, or integers)."""
        return Estimate(values=self.values, variance=self.variance, info={},
                        measurement_variance=self.variance, linear=bool(self.info.get("linear", True)),
                        consistent=bool(self.info.get("consistent", False)))


@dataclass
class Estimate:
    """Node values with their variances, as a post-processing step hands them on.

    ``values`` has shape ``(n,)`` or ``(n, k)``; ``variance`` has shape ``(n,)`` (shared by
    the cells of a node) or the shape of ``values``, ``inf`` where a node carries no
    information, or is ``None`` when unknown. ``info`` holds diagnostics (e.g. a KKT
    residual). Arrays are in the tree's internal (descending-height) order unless stated.

    The chain protocol (set by :func:`hierdp.postprocessors.chain.run_chain`, never by hand):
    ``measurement_variance`` is the variance of the original measurements (what a later
    weighted step such as ``nonneg`` optimises against); ``linear`` says the values are a
    linear function of the measurements (so ``variance`` is exact); ``consistent`` says
    every parent equals the sum of its children.
    """

    values: np.ndarray
    variance: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    measurement_variance: np.ndarray | None = None
    linear: bool = False
    consistent: bool = False

    @property
    def weights_variance(self) -> np.ndarray | None:
        """The variances a weighted step should use: the measurements' when known."""
        return self.measurement_variance if self.measurement_variance is not None else self.variance


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

    def __init__(self, **params: Any) -> None:
        if params:
            raise TypeError(f"post-processor {self.name!r} takes no parameters, got {sorted(params)}")

    @abstractmethod
    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        """Post-process ``estimate`` (internal order) on ``tree``."""

    def __repr__(self) -> str:
        return f"<postprocessor {self.name!r}>"
