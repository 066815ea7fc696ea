"""Generation Matrix (Cai et al.): Def. 5-9, Props. 1-11 and Thm. 1-4 against brute-force
definitions computed node by node on random ragged trees."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import shortest_path

import hierdp
from hierdp import generation_matrix as gm
from hierdp.errors import DataError, HierarchyError
from tests.helpers import random_parent


def _tree(n, seed):
    return hierdp.Tree.from_parent(random_parent(np.random.default_rng(seed), n))


def _ancestors(par, i):
    """Brute force: i's proper ancestors, nearest first (internal ids)."""
    out = []
    while par[i] >= 0:
        i = par[i]
        out.append(i)
    return out


trees = st.builds(_tree, st.integers(1, 35), st.integers(0, 2**32 - 1))


@settings(max_examples=40, deadline=None)
@given(tree=trees)
def test_definition_7_and_property_1(tree):
    par = tree._parent
    n = tree.n_nodes
    rng = np.random.default_rng(n)
    wn, we = rng.uniform(0.5, 2, n), rng.uniform(0.5, 2, n)
    G = gm.generation_matrix(tree, wn, we).toarray()
    ref = np.diag(wn)
    for i in range(1, n):
        ref[i, par[i]] = -we[i]
    np.testing.assert_array_equal(G, ref)
    assert np.count_nonzero(G) == 2 * n - 1            # Prop. 1
    assert np.all(np.triu(G, 1) == 0)                   # lower triangular (descending height)
    assert gm.structure_matrix(tree).nnz == 2 * n - 1


@settings(max_examples=40, deadline=None)
@given(tree=trees)
def test_vector_properties_4_5_6(tree):
    par = tree._parent
    n = tree.n_nodes
    kids = [[j for j in range(n) if par[j] == i] for i in range(n)]

    def size(i):
        return 1 + sum(size(j) for j in kids[i])

    np.testing.assert_array_equal(gm.children_counts(tree), [len(k) for k in kids])          # Prop. 4
    np.testing.assert_array_equal(gm.subtree_sizes(tree), [size(i) for i in range(n)])       # Prop. 5
    np.testing.assert_array_equal(gm.depths(tree), [1 + len(_ancestors(par, i)) for i in range(n)])  # Prop. 6


@settings(max_examples=40, deadline=None)
@given(tree=trees, k=st.sampled_from([1, 2]))
def test_propagations_are_the_inverses(tree, k):
    """Props. 2-3: upward = G^-T v, downward = G^-1 v, against a dense solve."""
    n = tree.n_nodes
    rng = np.random.default_rng(n + k)
    wn, we = rng.uniform(0.5, 2, n), rng.uniform(-2, 2, n)
    we[we == 0] = 1.0
    v = rng.normal(size=(n, k)) if k > 1 else rng.normal(size=n)
    G = gm.generation_matrix(tree, wn, we).toarray()
    np.testing.assert_allclose(gm.upward(tree, v, wn, we), np.linalg.solve(G.T, v), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(gm.downward(tree, v, wn, we), np.linalg.solve(G, v), rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(tree=trees)
def test_matrix_properties_7_8_9(tree):
    par = tree._parent
    n = tree.n_nodes
    anc = [set(_ancestors(par, i)) | {i} for i in range(n)]
    P7 = np.array([[1.0 if j in anc[i] else 0.0 for j in range(n)] for i in range(n)])
    np.testing.assert_array_equal(gm.ancestor_matrix(tree).toarray(), P7)
    np.testing.assert_allclose(gm.ancestor_matrix(tree).toarray() @ gm.structure_matrix(tree).toarray(),
                               np.eye(n), atol=1e-12)      # it really is G^-1
    S = gm.sibling_matrix(tree).toarray()
    for i in range(n):
        for j in range(n):
            if i != j:
                assert (S[i, j] == 1) == (par[i] == par[j] and par[i] >= 0)          # Prop. 8
    assert S[0, 0] == 1
    C = gm.common_ancestor_matrix(tree).toarray()
    ref = np.array([[len(anc[i] & anc[j]) for j in range(n)] for i in range(n)])
    np.testing.assert_array_equal(C, ref)                                             # Prop. 9
    G = gm.structure_matrix(tree).toarray()
    np.testing.assert_allclose(C, np.linalg.inv(G.T @ G), atol=1e-8)


@settings(max_examples=30, deadline=None)
@given(tree=trees)
def test_conversions_theorems_1_to_4(tree):
    par = tree._parent
    n = tree.n_nodes
    A = np.zeros((n, n))
    for i in range(1, n):
        A[i, par[i]] = 1.0
    np.testing.assert_array_equal(gm.adjacency_matrix(tree).toarray(), A)                    # Thm. 1
    U = A + A.T
    np.testing.assert_allclose(gm.laplacian_matrix(tree).toarray(), np.diag(U.sum(1)) - U)  # Thm. 2
    D = shortest_path(sp.csr_array(U), unweighted=True, directed=False)
    np.testing.assert_allclose(gm.distance_matrix(tree), D)                                  # Thm. 3
    leaves = np.flatnonzero(tree._n_children == 0)
    depth0 = gm.depths(tree) - 1
    lca_depth = np.array([[max(depth0[a] for a in (set(_ancestors(par, i)) | {i}) & (set(_ancestors(par, j)) | {j}))
                           for j in leaves] for i in leaves])
    np.testing.assert_allclose(gm.ancestral_matrix(tree), lca_depth)                         # Thm. 4


@settings(max_examples=30, deadline=None)
@given(tree=trees)
def test_eigen_and_diagonal_decomposition(tree):
    n = tree.n_nodes
    rng = np.random.default_rng(3 * n)
    wn = rng.permutation(np.arange(1, n + 1)).astype(float)  # distinct weights: eigenvectors exist
    we = rng.uniform(0.5, 2, n)
    G = gm.generation_matrix(tree, wn, we)
    np.testing.assert_array_equal(gm.eigenvalues(G), wn)                                     # Prop. 10
    Gd = G.toarray()
    for i in range(n):
        u = gm.left_eigenvector(tree, i, wn, we)
        v = gm.right_eigenvector(tree, i, wn, we)
        np.testing.assert_allclose(u @ Gd, wn[i] * u, atol=1e-9)
        np.testing.assert_allclose(Gd @ v, wn[i] * v, atol=1e-9)
        assert u[i] == v[i] == 1.0
    alpha, beta = gm.diagonal_decomposition(tree, wn, we)                                    # Prop. 11
    np.testing.assert_allclose(np.diag(beta) @ gm.structure_matrix(tree).toarray() @ np.diag(alpha), Gd,
                               rtol=1e-10, atol=1e-12)


def test_eigenvector_missing_when_weights_repeat():
    tree = hierdp.Tree.complete(2, 3)
    with pytest.raises(DataError, match="does not exist"):
        gm.left_eigenvector(tree, 3, np.ones(7))
    with pytest.raises(DataError, match="does not exist"):
        gm.right_eigenvector(tree, 0, np.ones(7))


@settings(max_examples=30, deadline=None)
@given(tree=trees)
def test_k_order_subtrees_mapping_and_constraint_matrices(tree):
    par = tree._parent
    n = tree.n_nodes
    h = tree._height
    G = gm.structure_matrix(tree)
    for k in range(0, int(h[0]) + 1):
        keep = [i for i in range(n) if h[i] > k]           # Def. 3
        assert gm.k_order_size(tree, k) == len(keep)
        assert keep == list(range(len(keep)))               # T^(k) is a prefix
        np.testing.assert_array_equal(gm.k_order_submatrix(G, tree, k).toarray(), G.toarray()[:len(keep), :len(keep)])
        np.testing.assert_array_equal(gm.generation_matrix(tree, k=k).toarray(), G.toarray()[:len(keep), :len(keep)])
    H = gm.order_matrix(tree)                               # Def. 9
    v = np.arange(n, dtype=float)
    np.testing.assert_array_equal(H @ v, tree.to_external(v))
    HH = gm.leaf_mapping_matrix(tree)
    np.testing.assert_array_equal((HH @ HH.T).toarray(), np.eye(tree.n_leaves))
    x = np.random.default_rng(n).poisson(3, tree.n_leaves).astype(float)
    v = gm.build_tree(tree, x)                              # formula (25)
    ext_of_internal_leaves = tree._ext(np.flatnonzero(tree._n_children == 0))
    np.testing.assert_allclose(v, tree.to_internal(tree.aggregate(x[np.argsort(ext_of_internal_leaves)])))
    np.testing.assert_allclose(HH @ v, x)                   # formula (26)
    M = gm.consistency_constraint_matrix(tree).toarray()    # Def. 5
    n1 = int((tree._n_children > 0).sum())
    assert M.shape == (n, n1)
    for i in range(n):
        for j in range(n1):
            assert M[i, j] == (1 if i == j else -1 if par[i] == j else 0)
    np.testing.assert_allclose(M.T @ v, 0, atol=1e-9)       # consistent values satisfy M^T v = 0


def test_theorem_8_and_alg_1_on_figure_1_like_tree():
    """Alg. 1 by hand on root(0) -> {1, 2, 3}, 1 -> {4, 5}, 2 -> {6}, 4 -> {7, 8}:
    theta_4 = 2, theta_1 = 2 - 1/3 = 5/3, theta_2 = 1, theta_0 = 3 - 3/8 - 1/2 = 17/8."""
    parent = np.array([-1, 0, 0, 0, 1, 1, 2, 4, 4])
    tree = hierdp.Tree.from_parent(parent)
    from hierdp.postprocessors.gmc import gmc_structure

    st_ = gmc_structure(tree)
    ext_theta = {}
    for i_int in range(st_.n1):
        ext_theta[int(tree._ext(np.array([i_int]))[0])] = st_.theta[i_int] - 1.0
    assert ext_theta == pytest.approx({4: 2.0, 1: 5 / 3, 2: 1.0, 0: 17 / 8})
    G = gm.gmc_matrix(tree).toarray()
    M = gm.consistency_constraint_matrix(tree).toarray()
    np.testing.assert_allclose(G.T @ G, M.T @ M, atol=1e-12)        # Theorem 8
    assert "gmc.structure" in tree.cache and gmc_structure(tree) is st_   # stage 1 cached


@settings(max_examples=40, deadline=None)
@given(tree=trees)
def test_theorem_8_random(tree):
    if tree.n_nodes == 1:
        return
    G = gm.gmc_matrix(tree).toarray()
    M = gm.consistency_constraint_matrix(tree).toarray()
    np.testing.assert_allclose(G.T @ G, M.T @ M, atol=1e-10)


def test_bad_weights_and_orders():
    tree = hierdp.Tree.complete(2, 3)
    with pytest.raises(DataError, match="non-zero"):
        gm.generation_matrix(tree, np.zeros(7))
    with pytest.raises(DataError, match="shape"):
        gm.generation_matrix(tree, np.ones(3))
    with pytest.raises(HierarchyError, match="k must be"):
        gm.k_order_size(tree, -1)
    with pytest.raises(DataError, match="positive"):
        gm.diagonal_decomposition(tree, -np.ones(7))
    assert tree.generation_matrix().shape == (7, 7)
