"""The Generation Matrix of a hierarchical tree and its properties.

Cai, Liu, Li, Zhang, *Generation Matrix: An Embeddable Matrix Representation for
Hierarchical Trees*. With the nodes in descending order of height (Def. 6; hierdp's
internal order) the Generation Matrix ``G_T^(w_node, w_edge)`` (Def. 7) is the sparse
lower-triangular matrix with ``w_i`` on the diagonal and ``-w_{i->f_i}`` at
``(i, f_i)``; the structure matrix ``G_T`` has all weights 1.

Every matrix here is indexed in the tree's *internal* order (root 0, parents before
children, non-leaf nodes first); :func:`mapping_matrix` / :func:`order_matrix` convert
(Def. 9). Vector properties (Props. 2-6) are computed in O(n) by propagation, never by
forming an inverse; the matrix properties (Props. 7-9, Thm. 2-4) build their (possibly
dense) results directly from the structure and are meant for small trees and analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from hierdp._kernels import gm_passes as GP
from hierdp._kernels.jit import for_size
from hierdp.errors import DataError, HierarchyError

if TYPE_CHECKING:
    from hierdp._kernels.protocols import TreeLike as Tree

__all__ = [
    "generation_matrix", "structure_matrix", "k_order_size", "k_order_submatrix",
    "mapping_matrix", "order_matrix", "leaf_mapping_matrix", "consistency_constraint_matrix",
    "upward", "downward", "build_tree", "children_counts", "subtree_sizes", "depths",
    "ancestor_matrix", "sibling_matrix", "common_ancestor_matrix", "eigenvalues",
    "left_eigenvector", "right_eigenvector", "diagonal_decomposition", "adjacency_matrix",
    "laplacian_matrix", "distance_matrix", "ancestral_matrix", "gmc_matrix",
    "GMCStructure", "gmc_structure",
]


def _weights(tree: Tree, w: np.ndarray | float | None, what: str) -> np.ndarray:
    n = tree.n_nodes
    if w is None:
        return np.ones(n)
    a = np.asarray(w, dtype=np.float64)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,):
        raise DataError(f"{what} must be a scalar or have shape ({n},) (internal order), got {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a == 0):
        raise DataError(f"{what} must be finite and non-zero (Def. 7 needs non-zero weights)")
    return a


def generation_matrix(tree: Tree, w_node: np.ndarray | float | None = None,
                      w_edge: np.ndarray | float | None = None, *, k: int = 0,
                      format: str = "csr") -> sp.sparray:
    """``G_T^(w_node, w_edge)`` (Def. 7) as a scipy sparse array, internal order.

    ``w_node[i]`` is node i's weight and ``w_edge[i]`` the weight of the edge from i to
    its parent (``w_edge[0]`` is ignored, Prop. 11's convention ``w_{1->0} = 1``); both
    default to 1 (the structure matrix ``G_T``). ``k > 0`` returns the k-order
    submatrix ``G_{T^(k)}`` (the leading ``n_k`` rows and columns, Def. 3). The matrix
    has exactly ``2n - 1`` non-zeros (Prop. 1).
    """
    wn = _weights(tree, w_node, "w_node")
    we = _weights(tree, w_edge, "w_edge")
    n = tree.n_nodes
    par = tree.internal.parent
    rows = np.concatenate((np.arange(n), np.arange(1, n)))
    cols = np.concatenate((np.arange(n), par[1:]))
    data = np.concatenate((wn, -we[1:]))
    G = sp.csr_array(sp.coo_array((data, (rows, cols)), shape=(n, n)))
    if k:
        nk = k_order_size(tree, k)
        G = G[:nk, :nk]
    return G.asformat(format)


def structure_matrix(tree: Tree) -> sp.csr_array:
    """The structure matrix ``G_T = G_T^(1, 1)``."""
    return generation_matrix(tree)


def k_order_size(tree: Tree, k: int) -> int:
    """``n_k``: the number of nodes of the k-order subtree ``T^(k) = {i : h_i > k}`` (Def. 3)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise HierarchyError(f"k must be an integer >= 0, got {k!r}")
    return int(np.count_nonzero(tree.internal.height > k))


def k_order_submatrix(G: sp.sparray, tree: Tree, k: int) -> sp.csr_array:
    """The leading principal ``n_k x n_k`` block of ``G``: the Generation Matrix of ``T^(k)``."""
    nk = k_order_size(tree, k)
    return sp.csr_array(G)[:nk, :nk]


def mapping_matrix(s: np.ndarray, n: int) -> sp.csr_array:
    """``H_S`` (Def. 9): ``h_ij = 1`` iff ``s_i = j`` (0-based); ``H_S H_S^T = I`` for an injection."""
    s = np.asarray(s, dtype=np.int64)
    if s.ndim != 1 or np.any(s < 0) or np.any(s >= n) or np.unique(s).size != s.size:
        raise DataError(f"S must be an injective 1-D array of integers in [0, {n})")
    m = s.size
    return sp.csr_array((np.ones(m), (np.arange(m), s)), shape=(m, n))


def order_matrix(tree: Tree) -> sp.csr_array:
    """Permutation ``H_S`` with ``H_S @ v_internal = v_external`` (Def. 9's use for sorting)."""
    n = tree.n_nodes
    if tree.internal.inverse_perm is None:
        return sp.csr_array(sp.eye_array(n, format="csr"))
    return mapping_matrix(tree.internal.inverse_perm, n)


def leaf_mapping_matrix(tree: Tree) -> sp.csr_array:
    """``H_H`` (m x n): row r picks the r-th leaf (internal order), formula (26) ``x = H_H v``."""
    leaves = np.flatnonzero(tree.internal.n_children == 0)
    return mapping_matrix(leaves, tree.n_nodes)


def consistency_constraint_matrix(tree: Tree) -> sp.csr_array:
    """``M_T`` (Def. 5, n x n1): ``m_ii = 1``, ``m_{i, f_i} = -1``; consistency is ``M^T v = 0``."""
    n = tree.n_nodes
    n1 = int(np.count_nonzero(tree.internal.n_children > 0))
    par = tree.internal.parent
    rows = np.concatenate((np.arange(n1), np.arange(1, n)))
    cols = np.concatenate((np.arange(n1), par[1:]))
    data = np.concatenate((np.ones(n1), -np.ones(n - 1)))
    return sp.csr_array(sp.coo_array((data, (rows, cols)), shape=(n, n1)))


# ---------------------------------------------------------------- propagation (Props. 2-3)
def _as2d(tree: Tree, v: np.ndarray) -> tuple[np.ndarray, tuple]:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim not in (1, 2) or a.shape[0] != tree.n_nodes:
        raise DataError(f"expected shape ({tree.n_nodes},) or ({tree.n_nodes}, k), got {a.shape}")
    return np.ascontiguousarray(a.reshape(tree.n_nodes, -1)), a.shape


def upward(tree: Tree, v: np.ndarray, w_node=None, w_edge=None) -> np.ndarray:
    """Upward propagation ``z = G^-T v`` (Prop. 2, formula 14) in one bottom-up pass."""
    a, shape = _as2d(tree, v)
    out = np.empty_like(a)
    GP.upward_2d(tree.internal.parent, _weights(tree, w_node, "w_node"), _weights(tree, w_edge, "w_edge"), a, out)
    return out.reshape(shape)


def downward(tree: Tree, v: np.ndarray, w_node=None, w_edge=None) -> np.ndarray:
    """Downward propagation ``z = G^-1 v`` (Prop. 3, formula 15) in one top-down pass."""
    a, shape = _as2d(tree, v)
    out = np.empty_like(a)
    GP.downward_2d(tree.internal.parent, _weights(tree, w_node, "w_node"), _weights(tree, w_edge, "w_edge"), a, out)
    return out.reshape(shape)


def build_tree(tree: Tree, x: np.ndarray) -> np.ndarray:
    """Formula (25): node values ``v = G_T^-T H_H^T x`` from leaf values ``x`` (internal leaf order)."""
    x = np.asarray(x, dtype=np.float64)
    m = tree.n_leaves
    if x.shape[:1] != (m,):
        raise DataError(f"x must have one row per leaf ({m}), got shape {x.shape}")
    full = np.zeros((tree.n_nodes,) + x.shape[1:])
    full[tree.internal.n_children == 0] = x
    return upward(tree, full)


def children_counts(tree: Tree) -> np.ndarray:
    """Prop. 4: ``(I - G_T^T) 1`` = number of children of each node."""
    G = generation_matrix(tree)
    one = np.ones(tree.n_nodes)
    return np.rint(one - G.T @ one).astype(np.int64)


def subtree_sizes(tree: Tree) -> np.ndarray:
    """Prop. 5: ``G_T^-T 1`` = number of nodes in each node's subtree."""
    return np.rint(upward(tree, np.ones(tree.n_nodes))).astype(np.int64)


def depths(tree: Tree) -> np.ndarray:
    """Prop. 6: ``G_T^-1 1`` = depth of each node, the root having depth 1."""
    return np.rint(downward(tree, np.ones(tree.n_nodes))).astype(np.int64)


# ---------------------------------------------------------------- matrix properties
def ancestor_matrix(tree: Tree) -> sp.csr_array:
    """Prop. 7: ``G_T^-1``: entry (i, j) is 1 iff j = i or j is an ancestor of i.

    Built directly (``sum(depth)`` non-zeros) by walking each level's ancestors one
    level up at a time (a loop per level), not by inverting.
    """
    n = tree.n_nodes
    par = tree.internal.parent
    rows = [np.arange(n)]
    cols = [np.arange(n)]
    cur_nodes = np.arange(1, n)
    cur_anc = par[1:].copy()
    while cur_nodes.size:
        rows.append(cur_nodes)
        cols.append(cur_anc)
        keep = cur_anc > 0
        cur_nodes = cur_nodes[keep]
        cur_anc = par[cur_anc[keep]]
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    return sp.csr_array((np.ones(r.size), (r, c)), shape=(n, n))


def sibling_matrix(tree: Tree) -> sp.csr_array:
    """Prop. 8: ``G_T G_T^T``; off the (0, 0) entry, m_ij = 1 iff i and j are siblings.

    (Its diagonal holds 1 for the root and 2 elsewhere.)
    """
    G = generation_matrix(tree)
    return sp.csr_array(G @ G.T)


def common_ancestor_matrix(tree: Tree) -> sp.csr_array:
    """Prop. 9: ``(G_T^T G_T)^-1 = G^-1 G^-T``: number of common ancestors (incl. themselves);
    the diagonal is the depth (root 1). Dense in general: for small trees."""
    A = ancestor_matrix(tree)
    return sp.csr_array(A @ A.T)


def eigenvalues(G: sp.sparray) -> np.ndarray:
    """Prop. 10: the eigenvalues of a Generation Matrix are its node weights (its diagonal)."""
    return sp.csr_array(G).diagonal()


def left_eigenvector(tree: Tree, i: int, w_node=None, w_edge=None) -> np.ndarray:
    """Prop. 10, formula (17): left eigenvector ``u`` (``u^T G = w_i u^T``) of node weight i.

    ``u_i = 1``, ``u_j = 0`` for j > i and for non-ancestors, and for an ancestor j
    ``u_j = sum_{k in C_j} w_{k->j} u_k / (w_j - w_i)``. Exists when every ancestor's
    weight differs from ``w_i``.
    """
    wn = _weights(tree, w_node, "w_node")
    we = _weights(tree, w_edge, "w_edge")
    par = tree.internal.parent
    n = tree.n_nodes
    u = np.zeros(n)
    u[i] = 1.0
    j, child = int(par[i]), i
    while j >= 0:
        if wn[j] == wn[i]:
            raise DataError(f"left eigenvector of node {i} does not exist: ancestor {j} has the same weight")
        # only the child on the path to i has a non-zero u
        u[j] = we[child] * u[child] / (wn[j] - wn[i])
        j, child = int(par[j]), j
    return u


def right_eigenvector(tree: Tree, i: int, w_node=None, w_edge=None) -> np.ndarray:
    """Prop. 10, formula (18): right eigenvector ``v`` (``G v = w_i v``) of node weight i.

    ``v_i = 1``, ``v_j = 0`` for j < i and non-descendants, and for a descendant j
    ``v_j = w_{j->f_j} v_{f_j} / (w_j - w_i)`` (one top-down pass over the subtree).
    """
    wn = _weights(tree, w_node, "w_node")
    we = _weights(tree, w_edge, "w_edge")
    par = tree.internal.parent
    n = tree.n_nodes
    v = np.zeros(n)
    v[i] = 1.0
    inside = np.zeros(n, bool)
    inside[i] = True
    # parents precede children: a level-free forward sweep over the suffix (vectorised by
    # repeated propagation, one numpy step per depth below i)
    rest = np.arange(i + 1, n)
    while True:
        new = rest[inside[par[rest]] & ~inside[rest]]
        if new.size == 0:
            break
        if np.any(wn[new] == wn[i]):
            j = int(new[wn[new] == wn[i]][0])
            raise DataError(f"right eigenvector of node {i} does not exist: descendant {j} has the same weight")
        v[new] = we[new] * v[par[new]] / (wn[new] - wn[i])
        inside[new] = True
    return v


def diagonal_decomposition(tree: Tree, w_node=None, w_edge=None) -> tuple[np.ndarray, np.ndarray]:
    """Prop. 11 (formula 20): ``G^(w_node, w_edge) = diag(beta) G_T diag(alpha)``.

    ``alpha = exp(G_T^-1 (ln w_node - ln w_edge))``, ``beta = w_node / alpha``, with
    ``w_edge[0] = 1``. Needs positive weights (the logarithms).
    """
    wn = _weights(tree, w_node, "w_node")
    we = _weights(tree, w_edge, "w_edge").copy()
    we[0] = 1.0
    if np.any(wn <= 0) or np.any(we <= 0):
        raise DataError("the diagonal decomposition (formula 20) takes logarithms: weights must be positive")
    alpha = np.exp(downward(tree, np.log(wn) - np.log(we)))
    return alpha, wn / alpha


# ---------------------------------------------------------------- conversions (Thm. 1-4)
def adjacency_matrix(tree: Tree) -> sp.csr_array:
    """Thm. 1: ``A_T = I - G_T``: entry (i, f_i) is 1 (the child-to-parent adjacency)."""
    n = tree.n_nodes
    return sp.csr_array(sp.eye_array(n, format="csr") - generation_matrix(tree))


def laplacian_matrix(tree: Tree) -> sp.csr_array:
    """Thm. 2: ``L_T = G_T^T G_T - e_1 e_1^T`` (degree matrix minus the undirected adjacency)."""
    G = generation_matrix(tree)
    L = sp.lil_array(G.T @ G)
    L[0, 0] -= 1.0
    return sp.csr_array(L)


def distance_matrix(tree: Tree) -> np.ndarray:
    """Thm. 3: ``D_T = d 1^T + 1 d^T - 2 (G_T^T G_T)^-1`` with ``d = G_T^-1 1`` (Prop. 6).

    The paper writes the first terms as ``G^-1 H^T + H^T G^-T`` with an all-ones ``H``.
    Dense n x n: for small trees.
    """
    d = depths(tree).astype(np.float64)
    C = common_ancestor_matrix(tree).toarray()
    return d[:, None] + d[None, :] - 2.0 * C


def ancestral_matrix(tree: Tree) -> np.ndarray:
    """Thm. 4: ``C_T = H_H (G_T^T G_T)^-1 H_H^T - 1`` (leaves x leaves, internal leaf order):
    the depth (root 0) of the nearest common ancestor of two leaves. Dense: small trees."""
    H = leaf_mapping_matrix(tree)
    C = H @ common_ancestor_matrix(tree) @ H.T
    return sp.csr_array(C).toarray() - 1.0


def gmc_matrix(tree: Tree) -> sp.csr_array:
    """``G_{T^(1) <- T}`` (Alg. 1 / Theorem 9): the n1 x n1 Generation Matrix with node
    weights ``sqrt(1 + theta_i)`` and edge weights ``1 / sqrt(1 + theta_i)``; it satisfies
    ``M_T^T M_T = G^T G`` (Theorem 8)."""
    st = gmc_structure(tree)
    n1 = st.n1
    w = np.sqrt(st.theta)
    par = tree.internal.parent[:n1]
    rows = np.concatenate((np.arange(n1), np.arange(1, n1)))
    cols = np.concatenate((np.arange(n1), par[1:]))
    data = np.concatenate((w, -1.0 / w[1:]))
    return sp.csr_array(sp.coo_array((data, (rows, cols)), shape=(n1, n1)))


# GMC's stage 1 (Alg. 1): public structure only, computed once per tree; the GMC
# post-processor (hierdp.postprocessors.gmc) runs stage 2 on it.
_CACHE_KEY = "gmc.structure"
#: Stage 2 visits leaves one by one (``gmc_39_1d_flat`` in :mod:`hierdp.postprocessors._gmc_kernels`) when the
#: runs of sibling leaves are shorter than this on average, else run by run. Measured on
#: this project's 2-core VM (ratio to a numpy pass, run by run vs one by one): binary
#: (runs of 2) 4.7x vs 4.3x, random fan-out 2-5 (2.9) 6.1x vs 4.7x, census-like (52) 3.2x
#: vs 4.7x.
SHORT_RUNS = 8


@dataclass
class GMCStructure:
    """Stage-1 data of GMC for one tree (public structure only)."""

    n1: int
    theta: np.ndarray          # theta' = 1 + theta (Alg. 1), shape (n1,)
    inv_theta: np.ndarray      # 1 / theta'
    leaf_starts: np.ndarray    # runs of sibling leaves
    leaf_parents: np.ndarray
    parent1: np.ndarray        # parents of the non-leaf prefix (int32 when it fits)
    leaf_parent: np.ndarray | None = None  # parents of the leaves, when runs are short
    _unit_variance: np.ndarray | None = field(default=None, repr=False)
    _pool: list = field(default_factory=list, repr=False)


def gmc_structure(tree: Tree) -> GMCStructure:
    """Stage 1 of GMC (Alg. 1), computed once per tree and cached in ``tree.cache``."""
    st = tree.cache.get(_CACHE_KEY)
    if st is None:
        n1 = int(np.count_nonzero(tree.internal.n_children > 0))
        theta = for_size(GP.gmc_theta, tree.n_nodes)(tree.internal.parent, tree.internal.n_children, n1)
        starts, pars = for_size(GP.leaf_runs, tree.n_nodes)(tree.internal.parent, n1)
        inv = 1.0 / theta
        idx = np.int32 if tree.n_nodes < 2**31 - 1 else np.int64
        leaf_parent = None
        n_runs = pars.size
        # short sibling runs (and one run per parent): visit leaves one by one
        one_run = bool(n1 and n_runs and np.bincount(pars, minlength=n1).max() == 1)
        if one_run and (tree.n_nodes - n1) < SHORT_RUNS * n_runs:
            leaf_parent = tree.internal.parent_index[n1:]
        st = GMCStructure(n1=n1, theta=theta, inv_theta=inv, leaf_starts=starts.astype(idx),
                          leaf_parents=pars.astype(idx), parent1=tree.internal.parent_index[:n1],
                          leaf_parent=leaf_parent)
        tree.cache[_CACHE_KEY] = st
    return st
