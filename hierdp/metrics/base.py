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

    #: whether :meth:`by_level` gives one value per depth (override both in subclasses)
    has_levels: ClassVar[bool] = False

    def summary(self, true: np.ndarray, estimate: np.ndarray, *, tree: Any = None, **params: Any) -> float:
        """One number for the whole tree: the metric (averaged if it returns an array); for a
        stack of repetitions ``(R, n)``, the mean over repetitions. Built-ins override this
        with the reduction their definition prescribes (e.g. a root mean square)."""
        t = np.asarray(true)
        e = np.asarray(estimate)
        if e.ndim == t.ndim + 1:
            return float(np.mean([self.summary(true, x, tree=tree, **params) for x in e]))
        return float(np.mean(self(true, estimate, tree=tree, **params)))

    def __repr__(self) -> str:
        return f"<metric {self.name!r}>"
