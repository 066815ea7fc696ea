"""Metrics for sequence releases (Zhang, Xiao & Xie 2016, §6.2).

``length_tvd``: the total variation distance between the distribution of sequence
lengths in the true data and in synthetic data, ½·Σ_l |p(l) − q(l)|. It reads the true
sequences: an evaluation tool, not a private output.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from hierdp.errors import DataError
from hierdp.metrics.base import Metric

__all__ = ["LengthTVD", "lengths_of"]


def lengths_of(x: Any) -> np.ndarray:
    """Lengths from an array of integer lengths or a collection of sequences (strings or lists)."""
    if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.integer):
        arr = x
    else:
        items = list(x.tolist() if hasattr(x, "tolist") else x)
        if items and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            arr = np.asarray(items, dtype=np.int64)
        else:
            try:
                arr = np.fromiter((len(s) for s in items), dtype=np.int64, count=len(items))
            except TypeError:
                raise DataError("pass sequence lengths (integers) or sequences (strings or lists of symbols)") from None
    arr = np.asarray(arr, dtype=np.int64).reshape(-1)
    if arr.size == 0:
        raise DataError("no sequences: the length distribution of an empty collection is undefined")
    if np.any(arr < 0):
        raise DataError("sequence lengths must be non-negative")
    return arr


class LengthTVD(Metric):
    """Total variation distance of the sequence-length distributions (§6.2, Fig. 7).

    ``metric(true, synthetic, max_length=None)``: ``true`` and ``synthetic`` are sequences
    or their lengths; with ``max_length`` both are capped at it first (compare with data
    truncated at l⊤). Returns ½·Σ_l |p(l) − q(l)| in [0, 1].
    """

    name: ClassVar[str] = "length_tvd"

    def __call__(self, true: Any, estimate: Any, *, tree: Any = None, max_length: int | None = None,
                 **params: Any) -> float:
        params = {**self.params, **params}
        if max_length is None:
            max_length = params.pop("max_length", None)
        if params:
            raise TypeError(f"metric 'length_tvd' got unknown parameters {sorted(params)}; it takes ['max_length']")
        a, b = lengths_of(true), lengths_of(estimate)
        if max_length is not None:
            if isinstance(max_length, bool) or int(max_length) != max_length or max_length < 0:
                raise DataError(f"max_length must be a non-negative integer, got {max_length!r}")
            a, b = np.minimum(a, int(max_length)), np.minimum(b, int(max_length))
        size = int(max(a.max(), b.max())) + 1
        p = np.bincount(a, minlength=size) / a.size
        q = np.bincount(b, minlength=size) / b.size
        return float(0.5 * np.abs(p - q).sum())

    def summary(self, true: Any, estimate: Any, *, tree: Any = None, **params: Any) -> float:
        return self(true, estimate, tree=tree, **params)
