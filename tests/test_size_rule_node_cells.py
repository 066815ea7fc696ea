"""The size rule counts node-cells (issue 51 item 4: the library must not choose an
interpreted kernel for a task of many node-cells): the kernels GMC runs on ``(n, k)``
values are sized by their node-cells, so a small tree with many cells runs compiled."""

from __future__ import annotations

import numpy as np
import pytest

import hierdp
from hierdp._kernels import jit
from hierdp.postprocessors import gmc


@pytest.mark.parametrize("params, kernel", [({"variance": "levels"}, "gmc_weighted_2d"),
                                            ({"formula": 36}, "gmc_36_2d")])
def test_gmc_sizes_its_two_dimensional_kernels_by_node_cells(monkeypatch, params, kernel) -> None:
    monkeypatch.setattr(jit, "SMALL_INPUT", 1 << 14)  # the library's rule (the test session may force compiling)
    t = hierdp.Tree.complete(fanout=3, height=4)  # 40 nodes: far below SMALL_INPUT ...
    k = 1 + jit.SMALL_INPUT // t.n_nodes  # ... but more node-cells than SMALL_INPUT
    y = np.random.default_rng(1).normal(size=(t.n_nodes, k))
    kw = dict(params)
    if kw.get("variance") == "levels":
        kw["variance"] = np.array([1.0, 2.0, 3.0, 4.0])[t.internal.depth]
    sizes: dict[str, int] = {}
    real = gmc.for_size

    def spy(fn, n):
        sizes[getattr(fn, "__name__", str(fn))] = n
        return real(fn, n)

    monkeypatch.setattr(gmc, "for_size", spy)
    hierdp.postprocess("gmc", t, y, **kw)
    assert sizes[kernel] == t.n_nodes * k > jit.SMALL_INPUT, sizes
