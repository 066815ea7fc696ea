"""The metric interface.

Metrics compare a released estimate with the true counts, so they read private data:
they are evaluation tools, never part of a release, and their output must not be
published as if it were private.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

__all__ = ["Metric"]


class Metric(ABC):
    """Base class of error metrics (registered through ``hierdp_register_metrics``).

    ``metric(true, estimate, tree=None, **params)``: arrays indexed like the tree's
    external numbering (shape ``(n,)``), or a stack of repetitions ``(R, n)``.
    """

    name: ClassVar[str]

    def __init__(self, **params: Any) -> None:
        self.params = params

    @abstractmethod
    def __call__(self, true: np.ndarray, estimate: np.ndarray, *, tree: Any = None, **params: Any) -> Any:
        """The error of ``estimate`` against ``true``."""

    def __repr__(self) -> str:
        return f"<metric {self.name!r}>"
