"""Benchmark trees of the Generation Matrix paper's three shapes, built with vectorised code.

- :func:`complete_tree`: SynData, the complete binary tree (height 24: 16,777,215 nodes).
- :func:`census_like_tree`: 8 levels shaped like Census 2010 (nation > state > county >
  county subdivision > place > tract > block group > block; ~11.8M nodes at scale 1).
- :func:`random_fanout_tree`: NYCTaxi-style per-second histogram tree, leaves grouped
  bottom-up with fan-outs 2, 3, 4, 5 drawn with probabilities 40/30/20/10%.

Every builder numbers nodes level by level with siblings contiguous, which is already
hierdp's internal (descending-height) order since all leaves are at the deepest level.
"""

from __future__ import annotations

import numpy as np

import hierdp

__all__ = ["complete_tree", "census_like_tree", "random_fanout_tree", "CENSUS_LEVELS"]

#: (level name, node count at scale 1) -- approximate Census 2010 geography counts
CENSUS_LEVELS = (
    ("nation", 1),
    ("state", 52),
    ("county", 3_221),
    ("county_subdivision", 36_000),
    ("place", 45_000),
    ("tract", 74_000),
    ("block_group", 218_000),
    ("block", 11_400_000),
)


def complete_tree(height: int, fanout: int = 2) -> hierdp.Tree:
    """The complete ``fanout``-ary tree with ``height`` levels (SynData: binary, 24)."""
    return hierdp.Tree.complete(fanout=fanout, height=height)


def _tree_from_level_parents(level_parents: list[np.ndarray], names: list[str]) -> hierdp.Tree:
    """``level_parents[d]``: parent (index within level d-1) of each node at level d >= 1."""
    sizes = [1] + [p.size for p in level_parents]
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    parent = np.empty(offsets[-1], np.int64)
    parent[0] = -1
    for d, p in enumerate(level_parents, start=1):
        parent[offsets[d]:offsets[d + 1]] = offsets[d - 1] + p
    return hierdp.Tree(parent, level_names=names)


def census_like_tree(scale: float = 1.0, seed: int = 0) -> hierdp.Tree:
    """An 8-level tree with Census 2010-like level sizes (about 11.8M nodes at scale 1).

    Level d has ``round(count_d * scale)`` nodes (at least as many as level d-1; the 52
    states are kept at every scale, so the root's fan-out -- which Boosting uses -- is the
    real one); each parent gets one child and the rest are spread with log-normal (skewed)
    weights, so fan-outs vary strongly as in the real geography. Children of a parent are
    contiguous.
    """
    rng = np.random.default_rng(seed)
    names = [name for name, _ in CENSUS_LEVELS]
    level_parents = []
    prev = 1
    for name, count in CENSUS_LEVELS[1:]:
        size = count if name == "state" else max(prev, int(round(count * scale)))
        weights = rng.lognormal(0.0, 1.0, prev)
        extra = rng.multinomial(size - prev, weights / weights.sum())
        fan = extra + 1
        level_parents.append(np.repeat(np.arange(prev, dtype=np.int64), fan))
        prev = size
    return _tree_from_level_parents(level_parents, names)


def random_fanout_tree(n_leaves: int, seed: int = 0,
                       fanouts: tuple[int, ...] = (2, 3, 4, 5),
                       probs: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)) -> hierdp.Tree:
    """Per-second histogram tree: consecutive nodes are grouped bottom-up into parents with a
    random fan-out (2-5 with probabilities 40/30/20/10%) until a single root remains (the
    last group of a level may be smaller)."""
    if n_leaves < 1:
        raise ValueError(f"n_leaves must be >= 1, got {n_leaves}")
    rng = np.random.default_rng(seed)
    fan_arr = np.asarray(fanouts)
    levels_bottom_up = []  # parent index (within the level above) of each node, bottom-up
    count = int(n_leaves)
    while count > 1:
        mean = float(np.dot(fan_arr, probs))
        draws = fan_arr[rng.choice(fan_arr.size, size=int(count / mean * 1.2) + 16, p=probs)]
        csum = np.cumsum(draws)
        g = int(np.searchsorted(csum, count)) + 1   # groups needed to cover `count`
        fan = draws[:g].copy()
        fan[-1] -= int(csum[g - 1]) - count
        levels_bottom_up.append(np.repeat(np.arange(g, dtype=np.int64), fan))
        count = g
    level_parents = levels_bottom_up[::-1]
    depth = len(level_parents)
    names = ["total"] + [f"level_{d}" for d in range(1, depth)] + (["second"] if depth else [])
    return _tree_from_level_parents(level_parents, names)
