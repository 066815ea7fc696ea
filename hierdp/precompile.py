"""Fill the kernel cache ahead of time (``hierdp compile``).

A process's first release of a small tree (up to ``hierdp._kernels.jit.SMALL_INPUT``
node-cells) runs numpy passes and compiles nothing; its later releases from the secure key
take the compiled kernels when numba's on-disk cache holds them
(:func:`hierdp._kernels.jit.ready`), and a cache miss never compiles. On a machine that has
never run a large release the cache is empty, so small releases stay on the numpy passes.
:func:`compile_kernels` compiles the versions small releases use into the cache once
(about a minute of CPU), as the first large release would.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

import hierdp
from hierdp._kernels import jit

__all__ = ["compile_kernels", "Compiled"]


@dataclass(frozen=True)
class Compiled:
    """What :func:`compile_kernels` did: ``releases`` run, kernel versions ``compiled``
    (cache misses) and ``loaded`` (already in the cache), in ``seconds`` of wall time,
    into the folder ``cache``."""

    releases: int
    compiled: int
    loaded: int
    seconds: float
    cache: str


def _trees():
    """A tree of fixed fan-out and one whose fan-out keeps changing (BLUE's two 1-D
    kernels), both far below the size at which passes are cut into pieces."""
    rng = np.random.default_rng(0)
    fixed = hierdp.Tree.complete(4, 4)
    ragged = hierdp.Tree.from_parent(np.r_[-1, np.zeros(12, np.int64), 1 + rng.integers(0, 12, 200)])
    return fixed, ragged


def compile_kernels() -> Compiled:
    """Compile into the on-disk cache the kernel versions that small releases take:
    ``per_level`` with discrete Laplace and discrete Gaussian noise, one cell and several,
    through ``blue``, ``nonneg``, ``round`` (both methods) and ``gmc``.

    Runs seeded releases on two small trees with every kernel compiled; the values are
    thrown away (no data is read). Returns a :class:`Compiled`.
    """
    chains = [["blue"], ["blue", "nonneg", "round"], ["blue", "nonneg", ("round", {"method": "topdown"})],
              ["gmc"], ["blue", ("nonneg", {"method": "global"})]]
    old = jit.SMALL_INPUT, jit.REUSE
    before = _counts()
    t0 = time.perf_counter()
    runs = 0
    jit.SMALL_INPUT, jit.REUSE = -1, False  # every kernel compiled, whatever the size
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for tree in _trees():
                leaves = np.arange(tree.n_leaves) % 7
                for counts in (tree.aggregate(leaves), tree.aggregate(np.stack([leaves, leaves[::-1]], axis=1))):
                    for loss in ({"epsilon": 1.0}, {"rho": 0.5, "mechanism": "discrete_gaussian"}):
                        for chain in chains:
                            hierdp.release(tree, counts, postprocess=chain, seed=0, **loss)
                            runs += 1
    finally:
        jit.SMALL_INPUT, jit.REUSE = old
    after = _counts()
    return Compiled(releases=runs, compiled=after[0] - before[0], loaded=after[1] - before[1],
                    seconds=time.perf_counter() - t0, cache=os.environ.get("NUMBA_CACHE_DIR", ""))


def _counts() -> tuple[int, int]:
    """(cache misses, cache hits) over every hierdp kernel loaded so far."""
    miss = hit = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("hierdp") or mod is None:
            continue
        for v in list(vars(mod).values()):
            if isinstance(v, jit.numba.core.dispatcher.Dispatcher) and v.py_func.__module__ == name:
                st = v.stats
                miss += sum(st.cache_misses.values())
                hit += sum(st.cache_hits.values())
    return miss, hit
