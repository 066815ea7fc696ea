"""BLUE variances without values, on a compressed tree of equivalence classes.

The variances returned by the two-pass BLUE (Dawson et al. 2023, Alg. 2, Theorem 8)
depend only on the input variances and on the shape of the tree, never on the noisy
values. With one input variance per *level* (a per-level budget split), two nodes get
the same output variance whenever they have isomorphic subtrees and isomorphic
"contexts" (the path from the root with every sibling subtree along it). We group the
nodes into such classes once per tree (cached in ``tree.cache``):

* the *shape* of a node is the multiset of its children's shapes (leaves share one
  shape), found bottom-up, one height class at a time, with a 128-bit multiset hash;
* the *class* of a node is the pair (class of its parent, shape of the node), found
  top-down, one depth at a time.

Every node of a class has the same number ``mult`` of same-class siblings, so the BLUE
recursions run on the class tree with sums weighted by ``mult``. On a tree whose levels
are uniform (every node of a depth has the same number of children, e.g. a complete
tree) the classes are the levels themselves and one evaluation costs O(levels); in
general the class tree is never larger than the tree. The kernel evaluates many
candidate per-level variance vectors in one sweep (used by the greedy and continuous
budget optimisers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numba as nb
import numpy as np

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["ClassTree", "class_tree", "class_variances", "blue_variance"]

_CACHE_KEY = "hierdp.budgets.class_tree"


@dataclass(frozen=True)
class ClassTree:
    """Nodes grouped into classes that share every BLUE variance under per-level noise.

    ``node_class`` (n,) maps internal node ids to classes; per class: ``parent`` (-1 for
    the root's class, always smaller than the class id), ``depth``, ``leaf``, ``mult``
    (same-class children of one node of the parent class) and ``size`` (nodes in the
    class). ``uniform`` is True when the classes are the levels.
    """

    node_class: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    leaf: np.ndarray
    mult: np.ndarray
    size: np.ndarray
    uniform: bool

    @property
    def n_classes(self) -> int:
        return int(self.parent.size)


def class_tree(tree: Tree) -> ClassTree:
    """The (cached) class tree of ``tree``; structure only, no data."""
    ct = tree.cache.get(_CACHE_KEY)
    if ct is None:
        ct = _uniform_classes(tree) or _general_classes(tree)
        tree.cache[_CACHE_KEY] = ct
    return ct


def _uniform_classes(tree: Tree) -> ClassTree | None:
    nc = tree._n_children
    L = tree.n_levels
    fan = np.empty(L, np.int64)
    for d, idx in enumerate(tree._level_index):
        c = nc[idx]
        lo, hi = int(c.min()), int(c.max())
        if lo != hi:
            return None
        fan[d] = lo
    size = np.array([_count(idx) for idx in tree._level_index], np.int64)
    parent = np.arange(-1, L - 1, dtype=np.int64)
    mult = np.ones(L)
    mult[1:] = fan[:-1]
    leaf = np.zeros(L, np.bool_)
    leaf[-1] = True
    return ClassTree(node_class=tree._depth, parent=parent, depth=np.arange(L, dtype=np.int64),
                     leaf=leaf, mult=mult, size=size, uniform=True)


def _count(idx) -> int:
    return idx.stop - idx.start if isinstance(idx, slice) else int(np.size(idx))


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray, salt: int) -> np.ndarray:
    """splitmix64 finaliser of ``x + salt`` (uint64, wrapping)."""
    z = x.astype(np.uint64) + np.uint64(salt)
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _group_ids(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids (0..g-1) of equal key tuples, in order of first sorted appearance."""
    n = keys[0].size
    if n == 0:
        return np.empty(0, np.int64), 0
    order = np.lexsort(keys[::-1])
    new = np.zeros(n, np.bool_)
    new[0] = True
    for k in keys:
        ks = k[order]
        new[1:] |= ks[1:] != ks[:-1]
    ids_sorted = np.cumsum(new) - 1
    ids = np.empty(n, np.int64)
    ids[order] = ids_sorted
    return ids, int(ids_sorted[-1]) + 1


def _general_classes(tree: Tree) -> ClassTree:
    n = tree.n_nodes
    ptr, kids, nc = tree._child_ptr, tree._child_idx, tree._n_children
    shape = np.zeros(n, np.int64)  # leaves: shape 0
    next_shape = 1
    for h in range(2, tree.height + 1):
        s = tree.height_slice(h)
        a, b = s.start, s.stop
        ch = kids[ptr[a]:ptr[b]]
        cs = shape[ch]
        starts = ptr[a:b] - ptr[a]
        h1 = np.add.reduceat(_mix(cs, 0x9E3779B97F4A7C15), starts)
        h2 = np.add.reduceat(_mix(cs, 0x632BE59BD9B4E019), starts)
        ids, g = _group_ids(nc[a:b], h1, h2)
        shape[a:b] = ids + next_shape
        next_shape += g
    node_class = np.empty(n, np.int64)
    par = tree._parent
    node_class[0] = 0
    cls_parent, cls_depth, cls_leaf, cls_size = [np.array([-1])], [np.array([0])], \
        [np.array([nc[0] == 0])], [np.array([1])]
    next_cls = 1
    for d in range(1, tree.n_levels):
        idx = tree._level_index[d]
        ids_nodes = np.arange(idx.start, idx.stop) if isinstance(idx, slice) else np.asarray(idx)
        pc = node_class[par[ids_nodes]]
        sh = shape[ids_nodes]
        gid, g = _group_ids(pc, sh)
        node_class[ids_nodes] = gid + next_cls
        _, first = np.unique(gid, return_index=True)
        rep = ids_nodes[first]
        cls_parent.append(node_class[par[rep]])
        cls_depth.append(np.full(g, d))
        cls_leaf.append(nc[rep] == 0)
        cls_size.append(np.bincount(gid, minlength=g))
        next_cls += g
    parent = np.concatenate(cls_parent).astype(np.int64)
    size = np.concatenate(cls_size).astype(np.int64)
    mult = np.ones(parent.size)
    mult[1:] = size[1:] / size[parent[1:]]
    return ClassTree(node_class=node_class, parent=parent, depth=np.concatenate(cls_depth).astype(np.int64),
                     leaf=np.concatenate(cls_leaf).astype(np.bool_), mult=mult, size=size, uniform=False)


@nb.njit(cache=True, nogil=True)
def _class_blue_variance(cparent, cdepth, cleaf, cmult, lvar, out):
    """Dawson et al. Alg. 2, variances only, on the class tree for C candidates at once.

    ``lvar`` (n_levels, C): input variance of every node of a level (inf = unmeasured,
    0 = exact). Writes the BLUE variance of each class and candidate to ``out`` (m, C).
    Same case analysis as :func:`hierdp._kernels.blue_2d`.
    """
    m = cparent.shape[0]
    C = lvar.shape[1]
    inf = np.inf
    u = np.empty((m, C))
    su = np.zeros((m, C))
    for i in range(m - 1, -1, -1):
        p = cparent[i]
        d = cdepth[i]
        for c in range(C):
            vi = lvar[d, c]
            if cleaf[i]:
                ui = vi
            else:
                U = su[i, c]
                if vi == inf:
                    ui = U
                elif U == inf:
                    ui = vi
                elif vi == 0.0 or U == 0.0:
                    ui = 0.0
                else:
                    ui = vi * U / (vi + U)
            u[i, c] = ui
            if p >= 0:
                su[p, c] += cmult[i] * ui
    for i in range(m):
        p = cparent[i]
        for c in range(C):
            ui = u[i, c]
            if p < 0:
                out[i, c] = ui
                continue
            U = su[p, c]
            if U == inf:
                out[i, c] = inf if ui == inf else ui
            elif U == 0.0:
                out[i, c] = 0.0
            else:
                w = ui / U
                val = ui - ui * w + w * w * out[p, c]
                out[i, c] = val if val > 0.0 else 0.0
    return out


def class_variances(ct: ClassTree, level_variance: np.ndarray) -> np.ndarray:
    """BLUE variance per class for per-level input variances ``(L,)`` or candidates ``(L, C)``."""
    lv = np.asarray(level_variance, dtype=np.float64)
    one = lv.ndim == 1
    lv2 = np.ascontiguousarray(lv.reshape(lv.shape[0], -1))
    out = np.empty((ct.n_classes, lv2.shape[1]))
    _class_blue_variance(ct.parent, ct.depth, ct.leaf, ct.mult, lv2, out)
    return out[:, 0] if one else out


def blue_variance(tree: Tree, level_variance: np.ndarray) -> np.ndarray:
    """BLUE output variance of every node (internal order) for per-level input variances.

    Equals ``blue(tree, y, var).variance`` for any ``y`` when ``var`` is constant on each
    level (Dawson et al. Theorem 8: the variances do not depend on the values).
    """
    lv = np.asarray(level_variance, dtype=np.float64)
    if lv.shape != (tree.n_levels,):
        from hierdp.errors import BudgetError

        raise BudgetError(f"need one variance per level ({tree.n_levels}), got shape {lv.shape}")
    ct = class_tree(tree)
    return class_variances(ct, lv)[ct.node_class]
