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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hierdp._kernels.jit import numba as nb
from hierdp._kernels.kernel_common import blue_combine
from hierdp.errors import BudgetError

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
    work: list = field(default_factory=lambda: [None, None, None], repr=False, compare=False)

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
    nc = tree.internal.n_children
    L = tree.n_levels
    fan = np.empty(L, np.int64)
    for d, idx in enumerate(tree.internal.level_index):
        c = nc[idx]
        lo, hi = int(c.min()), int(c.max())
        if lo != hi:
            return None
        fan[d] = lo
    size = np.array([_count(idx) for idx in tree.internal.level_index], np.int64)
    parent = np.arange(-1, L - 1, dtype=np.int64)
    mult = np.ones(L)
    mult[1:] = fan[:-1]
    leaf = np.zeros(L, np.bool_)
    leaf[-1] = True
    return ClassTree(node_class=tree.internal.depth, parent=parent, depth=np.arange(L, dtype=np.int64),
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


def _pair_ids(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids of the pairs (a, b) of non-negative integers, in sorted pair order.

    O(len) with a presence table when the key range is small (e.g. the leaf level, where
    every node has the same shape), else one sort of a single int64 key.
    """
    a = a - a.min()
    b = b - b.min()
    na = int(a.max()) + 1
    nb = int(b.max()) + 1
    key = a * np.int64(nb) + b
    K = na * nb
    if K <= 4 * key.size + 1024:
        present = np.zeros(K, np.bool_)
        present[key] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return rank[key], int(rank[-1]) + 1
    uniq, inv = np.unique(key, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), int(uniq.size)


@nb.njit(cache=True, nogil=True)
def _table_classes(start, stop, ids, par, node_class, shape, nc, prev_start, next_cls):
    """Classes of one depth in one pass: (parent class, shape) pairs numbered in order of
    first appearance through a direct table (parent classes of the previous depth are
    the contiguous ids ``prev_start .. next_cls-1``). Returns ``g = -1`` when the table
    would exceed 4x the level size (the caller then sorts)."""
    n = stop - start
    use_ids = ids.shape[0] > 0
    s_lo = np.int64(1) << 62
    s_hi = np.int64(-1)
    for t in range(n):
        i = ids[t] if use_ids else start + t
        v = shape[i]
        if v < s_lo:
            s_lo = v
        if v > s_hi:
            s_hi = v
    nb_ = s_hi - s_lo + 1
    K = (next_cls - prev_start) * nb_
    if K > 4 * n + 1024:
        return -1, np.empty(0, np.int64), np.empty(0, np.bool_), np.empty(0, np.int64)
    table = np.full(K, -1, np.int64)
    cp = np.empty(n, np.int64)
    lf = np.empty(n, np.bool_)
    size = np.zeros(n, np.int64)
    g = 0
    for t in range(n):
        i = ids[t] if use_ids else start + t
        pcl = node_class[par[i]]
        key = (pcl - prev_start) * nb_ + (shape[i] - s_lo)
        c = table[key]
        if c < 0:
            c = g
            table[key] = g
            cp[g] = pcl
            lf[g] = nc[i] == 0
            g += 1
        size[c] += 1
        node_class[i] = next_cls + c
    return g, cp[:g].copy(), lf[:g].copy(), size[:g].copy()


def _general_classes(tree: Tree) -> ClassTree:
    n = tree.n_nodes
    ptr, kids, nc = tree.internal.child_ptr, tree.internal.child_idx, tree.internal.n_children
    shape = np.zeros(n, np.int64)  # leaves: shape 0
    next_shape = 1
    for h in range(2, tree.height + 1):
        s = tree.height_slice(h)
        a, b = s.start, s.stop
        ch = kids[ptr[a]:ptr[b]]
        cs = shape[ch]
        starts = ptr[a:b] - ptr[a]
        r1 = _mix(np.arange(next_shape, dtype=np.uint64), 0x9E3779B97F4A7C15)
        r2 = _mix(np.arange(next_shape, dtype=np.uint64), 0x632BE59BD9B4E019)
        lo_s, hi_s = int(cs.min()), int(cs.max())
        if lo_s == hi_s:  # e.g. every child a leaf: the multiset is fixed by the child count
            cnt = nc[a:b].astype(np.uint64)
            h1, h2 = cnt * r1[lo_s], cnt * r2[lo_s]
        else:
            h1 = np.add.reduceat(r1[cs], starts)
            h2 = np.add.reduceat(r2[cs], starts)
        ids, g = _group_ids(nc[a:b], h1, h2)
        shape[a:b] = ids + next_shape
        next_shape += g
    node_class = np.empty(n, np.int64)
    par = tree.internal.parent
    node_class[0] = 0
    cls_parent, cls_depth, cls_leaf, cls_size = [np.array([-1])], [np.array([0])], \
        [np.array([nc[0] == 0])], [np.array([1])]
    next_cls = 1
    prev_start = 0
    for d in range(1, tree.n_levels):
        idx = tree.internal.level_index[d]
        if isinstance(idx, slice):
            start, stop, ids = idx.start, idx.stop, np.empty(0, np.int64)
        else:
            start, stop, ids = 0, int(np.size(idx)), np.asarray(idx, dtype=np.int64)
        g, cp, lf, sz = _table_classes(start, stop, ids, par, node_class, shape, nc, prev_start, next_cls)
        if g < 0:  # too many (parent class, shape) pairs for a table: sort instead
            ids_nodes = np.arange(start, stop) if ids.size == 0 else ids
            pc = node_class[par[ids_nodes]]
            gid, g = _pair_ids(pc, shape[ids_nodes])
            node_class[ids_nodes] = gid + next_cls
            # every member of a class has the same parent class and shape: any write wins
            cp = np.empty(g, np.int64)
            cp[gid] = pc
            lf = np.empty(g, np.bool_)
            lf[gid] = nc[ids_nodes] == 0
            sz = np.bincount(gid, minlength=g)
        cls_parent.append(cp)
        cls_depth.append(np.full(g, d))
        cls_leaf.append(lf)
        cls_size.append(sz)
        prev_start = next_cls
        next_cls += g
    parent = np.concatenate(cls_parent).astype(np.int64)
    size = np.concatenate(cls_size).astype(np.int64)
    mult = np.ones(parent.size)
    mult[1:] = size[1:] / size[parent[1:]]
    return ClassTree(node_class=node_class, parent=parent, depth=np.concatenate(cls_depth).astype(np.int64),
                     leaf=np.concatenate(cls_leaf).astype(np.bool_), mult=mult, size=size, uniform=False)


@nb.njit(cache=True, nogil=True)
def _class_blue_variance(cparent, cdepth, cleaf, cmult, lvar, u, su, out):
    """Dawson et al. Alg. 2, variances only, on the class tree for C candidates.

    ``lvar`` (n_levels, C): input variance of every node of a level (inf = unmeasured,
    0 = exact). Work arrays ``u``, ``su`` and the result ``out`` have shape (C, m): one
    contiguous row per candidate, swept one candidate at a time (cache friendly). Same
    case analysis as :func:`hierdp.postprocessors._blue_kernels.blue_2d`
    (:func:`hierdp._kernels.kernel_common.blue_combine` for the merge).
    """
    m = cparent.shape[0]
    C = lvar.shape[1]
    inf = np.inf
    nunc = np.zeros(m)  # per parent class: uninformative children (with multiplicity) ...
    uinf = np.zeros(m)  # ... and the others' u summed
    for c in range(C):
        uc = u[c]
        sc = su[c]
        oc = out[c]
        for i in range(m):
            sc[i] = 0.0
            nunc[i] = 0.0
            uinf[i] = 0.0
        for i in range(m - 1, -1, -1):
            vi = lvar[cdepth[i], c]
            if cleaf[i]:
                ui = vi
            else:  # the variance half of the BLUE combine rule (no values here)
                _, ui = blue_combine(0.0, vi, 0.0, sc[i])
            uc[i] = ui
            p = cparent[i]
            if p >= 0:
                sc[p] += cmult[i] * ui
                if ui == inf:
                    nunc[p] += cmult[i]
                else:
                    uinf[p] += cmult[i] * ui
        for i in range(m):
            p = cparent[i]
            ui = uc[i]
            if p < 0:
                oc[i] = ui
                continue
            U = sc[p]
            if U == inf:  # a single uninformative child is the parent minus its siblings
                if ui < inf:
                    oc[i] = ui
                elif nunc[p] == 1.0 and oc[p] < inf:
                    oc[i] = oc[p] + uinf[p]
                else:
                    oc[i] = inf
            elif U == 0.0:
                oc[i] = 0.0
            else:
                w = ui / U
                val = ui - ui * w + w * w * oc[p]
                oc[i] = val if val > 0.0 else 0.0
    return out


def class_variances(ct: ClassTree, level_variance: np.ndarray, *, copy: bool = True) -> np.ndarray:
    """BLUE variance per class for per-level input variances ``(L,)`` -> ``(m,)`` or
    candidates ``(L, C)`` -> ``(C, m)``. Work buffers are kept per class tree (first
    touch of fresh memory is what a sweep would otherwise pay for); with
    ``copy=False`` the result is a view of them, valid until the next call."""
    lv = np.asarray(level_variance, dtype=np.float64)
    one = lv.ndim == 1
    lv2 = np.ascontiguousarray(lv.reshape(lv.shape[0], -1))
    C, m = lv2.shape[1], ct.n_classes
    work = ct.work
    if work[0] is None or work[0].shape[0] < C:
        work[0], work[1], work[2] = (np.empty((C, m)) for _ in range(3))
    out = work[2][:C]
    _class_blue_variance(ct.parent, ct.depth, ct.leaf, ct.mult, lv2, work[0], work[1], out)
    return (out[0] if one else out).copy() if copy else (out[0] if one else out)


def blue_variance(tree: Tree, level_variance: np.ndarray) -> np.ndarray:
    """BLUE output variance of every node (internal order) for per-level input variances.

    Equals ``blue(tree, y, var).variance`` for any ``y`` when ``var`` is constant on each
    level (Dawson et al. Theorem 8: the variances do not depend on the values).
    """
    lv = np.asarray(level_variance, dtype=np.float64)
    if lv.shape != (tree.n_levels,):

        raise BudgetError(f"need one variance per level ({tree.n_levels}), got shape {lv.shape}")
    ct = class_tree(tree)
    return class_variances(ct, lv)[ct.node_class]
