"""PrivTree on a public taxonomy, with any monotone score (Zhang, Xiao & Xie 2016, §3.5).

§3.5 extends PrivTree (Alg. 2) in two ways implemented here:

* **any tree**: a categorical attribute with a public taxonomy (a :class:`~hierdp.tree.Tree`,
  e.g. the ``declared`` domains of a hierarchy) is decomposed by splitting a node into
  *all* its public child categories, instead of halving a box. A taxonomy leaf cannot be
  split (a public condition, like C1 of §4.2);
* **monotone scores**: the split decision may use any score μ(v) with μ(child) ≤ μ(parent)
  instead of the count c(v), provided λ is scaled by the score's sensitivity s (the most
  μ(v) changes on the one root-to-leaf path a tuple reaches; every other node unchanged).
  The paper's own example (§4.2, Eq. 13) is the *residual* score
  μ(v) = ‖hist(v)‖₁ − max_x hist(v)[x] of a node's histogram (Lemma 4.1: monotone; one
  tuple changes it by at most 1 on its path) — small for small or low-entropy nodes.

The decision is Alg. 2's: with b(v) = max(μ(v) − depth(v)·δ, θ − δ) (Eq. 8), split v when
b(v) + Lap(λ) > θ, with

    λ = s·x·(2β−1)/((β−1)·ε),   δ = λ·ln β                  (Cor. 1; Thm. 4.1 for s = l^⊤)

(x = tuples' leaves, "x leaves per tuple"). Privacy uses only that the biased scores on a
tuple's path fall by at least δ per level (monotonicity) and that δ ≥ λ·ln β; the fan-out
enters the *size* bound (Lemma 3.2) only. A taxonomy's fan-out varies, so β is a public
parameter, by default the largest fan-out of the taxonomy (a larger β means a larger bias
δ, i.e. smaller trees). The same exact integer-grid test as the spatial PrivTree is used
(:mod:`hierdp.decompositions.privtree`): scores must be integers, λ and δ are rounded up.

The structure is the sub-taxonomy of the nodes PrivTree visits (a private output, spent
from the structure budget); its leaves are counted with the rest of ε (plan ``leaves``),
see :func:`hierdp.frontends.taxonomy.release_taxonomy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hierdp.accounting import Spend, check_epsilon
from hierdp.decompositions.base import Decomposition, Structure
from hierdp.decompositions.privtree import PrivTree, privtree_parameters
from hierdp.errors import BudgetError, DataError, PrivacyError
from hierdp.rng import RandomSource, make_rng
from hierdp.tree import Tree

__all__ = ["TaxonomyPrivTree", "TaxonomyStructure", "count_score", "residual_score", "SCORES"]


def count_score(node_values: np.ndarray) -> np.ndarray:
    """c(v): the node's count (a histogram is summed over its bins). Sensitivity 1."""
    v = np.asarray(node_values)
    return v.sum(axis=1) if v.ndim == 2 else v


def residual_score(node_values: np.ndarray) -> np.ndarray:
    """Eq. (13): ‖hist(v)‖₁ − max_x hist(v)[x] of a node histogram ``(n_nodes, k)``.

    Monotone (Lemma 4.1: a child's histogram is dominated bin by bin by its parent's) and
    of sensitivity 1 (one tuple adds 1 to one bin of each node on its path: the sum grows
    by 1 and the max by 0 or 1).
    """
    v = np.asarray(node_values)
    if v.ndim != 2:
        raise DataError("the residual score needs a histogram per taxonomy leaf: data of shape (n_leaves, k)")
    return v.sum(axis=1) - v.max(axis=1)


#: Built-in scores and their sensitivity per tuple.
SCORES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], int]] = {
    "count": (count_score, 1),
    "residual": (residual_score, 1),
}


@dataclass
class TaxonomyStructure(Structure):
    """The released sub-taxonomy: ``tree`` (labels and level names of the taxonomy),
    ``nodes`` (taxonomy node id of each released node, external order), ``params``."""

    taxonomy: Tree = None  # type: ignore[assignment]
    nodes: np.ndarray = None  # type: ignore[assignment]
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def leaf_counts(self, taxonomy_leaf_counts: np.ndarray) -> np.ndarray:
        """NON-PRIVATE true counts of the released leaves (``tree.leaves`` order) from the
        counts of the taxonomy's leaves (``taxonomy.leaves`` order) — for releasing them
        through a mechanism, or for evaluation."""
        full = self.taxonomy.aggregate(np.asarray(taxonomy_leaf_counts))
        return full[self.nodes[self.tree.leaves]]


def _own_labels(tree: Tree) -> np.ndarray | None:
    """Each node's own label (external order), or None for an unlabelled tree. One pass per level."""
    if not tree.has_labels:
        return None
    cols = tree.label_columns()  # internal order, ancestor label per level
    depth_int = tree.internal.depth
    out = np.empty(tree.n_nodes, dtype=object)
    out[depth_int == 0] = tree.level_names[0]
    for d, name in enumerate(tree.level_names[1:], start=1):
        sel = np.flatnonzero(depth_int == d)
        out[sel] = np.asarray(cols[name], dtype=object)[sel]
    return tree.to_external(out)


class TaxonomyPrivTree(Decomposition):
    """PrivTree on a public taxonomy (§3.5): split a node into its child categories when
    its biased, floored score plus Laplace noise exceeds θ; ε-DP (Cor. 1 with λ scaled by
    the score's sensitivity).

    Parameters
    ----------
    taxonomy : the public :class:`~hierdp.tree.Tree` of categories (e.g. a declared hierarchy).
    score : ``"count"`` (Alg. 2), ``"residual"`` (Eq. 13, needs histogram data) or a
        callable mapping node values ``(n_nodes,)`` / ``(n_nodes, k)`` (subtree sums of the
        data) to integer scores; it must be monotone for *every* input.
    sensitivity : most a tuple changes the score of a node on its path (callables; the
        built-ins know theirs). λ is multiplied by it.
    theta : threshold θ (default 0). ``beta``: the β of λ and δ (default: the taxonomy's
        largest fan-out). ``max_depth``: public depth cap. ``contributions``: x leaves a
        tuple may reach (λ multiplied by x; §3.5).

    ``decompose(data)``: ``data`` holds the private counts of the taxonomy's leaves,
    ``(n_leaves,)`` or per-bin ``(n_leaves, k)``, in ``taxonomy.leaves`` order.

    Size: the structure is a sub-tree of the public taxonomy, which is already in memory,
    so no parameter (θ, β, ``max_depth``) can make it larger than the taxonomy; unlike the
    spatial, mixed and suffix-tree decompositions it needs no ``max_nodes`` cap.
    """

    name = "privtree_taxonomy"
    data_dependent = True

    def __init__(self, taxonomy: Tree | None = None, *, score: str | Callable[[np.ndarray], np.ndarray] = "count",
                 sensitivity: int | None = None, theta: float = 0.0, beta: int | None = None,
                 max_depth: int | None = None, contributions: int = 1) -> None:
        if not isinstance(taxonomy, Tree):
            raise DataError("privtree_taxonomy needs taxonomy=<hierdp.Tree> (the public categories)")
        if isinstance(score, str):
            if score not in SCORES:
                raise DataError(f"unknown score {score!r}; expected one of {sorted(SCORES)} or a callable")
            fn, s = SCORES[score]
            if sensitivity is not None and sensitivity < s:
                raise BudgetError(f"score {score!r} has sensitivity {s}; sensitivity={sensitivity} would understate it")
            sensitivity = s if sensitivity is None else sensitivity
        elif callable(score):
            fn = score
            if sensitivity is None:
                raise BudgetError("a custom score needs sensitivity=<int>: the most one tuple changes a node's score")
        else:
            raise DataError(f"score must be a name or a callable, got {type(score).__name__}")
        if isinstance(sensitivity, bool) or int(sensitivity) != sensitivity or sensitivity < 1:
            raise BudgetError(f"sensitivity must be a positive integer, got {sensitivity!r}")
        fan = int(taxonomy.n_children.max()) if taxonomy.n_nodes > 1 else 0
        beta = max(fan, 2) if beta is None else beta
        if isinstance(beta, bool) or int(beta) != beta or beta < 2:
            raise BudgetError(f"beta must be an integer >= 2, got {beta!r}")
        cap = taxonomy.n_levels - 1
        if max_depth is not None and (isinstance(max_depth, bool) or int(max_depth) != max_depth or max_depth < 0):
            raise DataError(f"max_depth must be a non-negative integer, got {max_depth!r}")
        self.taxonomy = taxonomy
        self.score_name = score if isinstance(score, str) else getattr(score, "__name__", "custom")
        self.score = fn
        self.sensitivity = int(sensitivity)
        self.theta = float(theta)
        self.beta = int(beta)
        self.max_depth = cap if max_depth is None else min(int(max_depth), cap)
        self.contributions = int(contributions)

    def parameters(self, epsilon: float):
        """The exact :class:`~hierdp.decompositions.privtree.PrivTreeParameters`: λ of
        Cor. 1 times ``sensitivity`` × ``contributions``, δ = λ·ln β, both rounded up."""
        return privtree_parameters(epsilon, self.beta, self.theta, self.contributions * self.sensitivity)

    def node_scores(self, data: Any) -> np.ndarray:
        """Integer scores μ(v) of every taxonomy node (external order) from the leaf data;
        refuses a score that is not an integer or not monotone on this input (a wrong score
        function: the check reveals only that the function breaks its contract)."""
        tax = self.taxonomy
        arr = np.asarray(data)
        if arr.ndim not in (1, 2) or arr.shape[0] != tax.n_leaves:
            raise DataError(f"data must hold the counts of the {tax.n_leaves} taxonomy leaves (taxonomy.leaves "
                            f"order): shape ({tax.n_leaves},) or ({tax.n_leaves}, k), got {arr.shape}")
        if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool) or (arr.size and arr.min() < 0):
            raise DataError("taxonomy leaf counts must be non-negative integers")
        mu = np.asarray(self.score(tax.aggregate(arr.astype(np.int64))))
        if mu.shape != (tax.n_nodes,):
            raise DataError(f"the score must return one value per taxonomy node ({tax.n_nodes}), got {mu.shape}")
        if not np.issubdtype(mu.dtype, np.integer):
            if not (np.all(np.isfinite(mu)) and np.all(mu == np.round(mu))):
                raise DataError("the score must be integer-valued (the split test runs on an exact integer grid)")
            mu = mu.astype(np.int64)
        par = tax.parent
        child = np.flatnonzero(par >= 0)
        if np.any(mu[child] > mu[par[child]]):
            raise PrivacyError(f"score {self.score_name!r} is not monotone (a child scores above its parent): "
                               "PrivTree's privacy proof needs μ(child) <= μ(parent) for every input")
        return mu.astype(np.int64)

    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> TaxonomyStructure:
        if budget is None:
            raise BudgetError("privtree_taxonomy reads the data: give it budget=<epsilon> for the structure")
        eps = check_epsilon(budget, "structure epsilon")
        rng = rng if rng is not None else make_rng(None)
        tax = self.taxonomy
        mu = self.node_scores(data)
        p = self.parameters(eps)
        decide = PrivTree.decider(p, rng)
        # children of every taxonomy node, grouped (CSR over external ids)
        par = tax.parent
        kids_sorted = np.argsort(par, kind="stable")[1:]  # drops the root (parent -1 sorts first)
        starts = np.searchsorted(par[kids_sorted], np.arange(tax.n_nodes), side="left")
        ends = np.searchsorted(par[kids_sorted], np.arange(tax.n_nodes), side="right")
        frontier = np.array([tax.root], np.int64)
        kept, kept_parent = [frontier], [np.array([-1], np.int64)]
        offset = 0
        for k in range(self.max_depth + 1):
            can = (tax.n_children[frontier] > 0) & (k < self.max_depth)
            split = np.zeros(frontier.size, bool)
            if can.any():
                split[can] = decide(k, mu[frontier[can]])
            if not split.any():
                break
            sp = frontier[split]
            n = ends[sp] - starts[sp]
            idx = np.repeat(starts[sp] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
            children = kids_sorted[idx]
            kept.append(children)
            kept_parent.append(np.repeat(offset + np.flatnonzero(split), n))
            offset += frontier.size
            frontier = children
        nodes = np.concatenate(kept)
        parent = np.concatenate(kept_parent)
        labels = _own_labels(tax)
        depth_max = int(tax.depth[nodes].max())
        names = list(tax.level_names[:depth_max + 1])
        tree = Tree.from_parent(parent, labels=None if labels is None else list(labels[nodes]), level_names=names)
        desc = (f"PrivTree on a taxonomy (Zhang et al. 2016, §3.5), ε={eps:g}, score={self.score_name} "
                f"(sensitivity {self.sensitivity}), β={p.beta}, λ={p.lam:.6g}, δ={p.delta:.6g}, θ={p.theta:g}")
        params = {"epsilon": eps, "beta": p.beta, "lambda": p.lam, "delta": p.delta, "theta": p.theta,
                  "score": self.score_name, "sensitivity": self.sensitivity, "max_depth": self.max_depth,
                  "contributions": self.contributions}
        return TaxonomyStructure(tree=tree, spends=[Spend(eps, "epsilon", label="privtree_taxonomy structure")],
                                 private_structure=True,
                                 level_provenance={n: f"{desc} (private output)" for n in names},
                                 taxonomy=tax, nodes=nodes, params=params, description=desc)
