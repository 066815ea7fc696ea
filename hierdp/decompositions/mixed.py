"""PrivTree on mixed numeric and categorical attributes (Zhang, Xiao & Xie 2016, §3.5).

"Given a multi-dimensional dataset D containing both numeric and categorical attributes,
and [a] taxonomy for each categorical attribute, we can still apply PrivTree on D ... by
splitting each numeric dimension of D according to a binary tree and each categorical
dimension based on its taxonomy." A node's domain is a product: a half-open interval per
numeric attribute (inside its public bounds) times a taxonomy node per categorical
attribute. A node is split along **one** attribute, chosen by a public rule: at depth k
the attributes are tried in the order k, k+1, ... (mod D) and the first one that can
still be split is used (a numeric interval can be halved until its public resolution
``max_halvings`` is reached; a taxonomy node splits into all its public children unless
it is a taxonomy leaf). A node none of whose attributes can split is a leaf.

The decision is Alg. 2's: split v when max(c(v) − depth(v)·δ, θ − δ) + Lap(λ) > θ with
λ = x·(2β−1)/((β−1)·ε), δ = λ·ln β. The fan-out varies (2 for a numeric split, the number
of child categories for a categorical one); privacy only needs the counts along a tuple's
path to be monotone and δ ≥ λ·ln β (see :mod:`hierdp.decompositions.taxonomy`), so β is
a public parameter, by default the largest fan-out that can occur. The test runs on the
exact integer grid of :mod:`hierdp.decompositions.privtree` (same decider).

Everything is vectorised per depth: each record carries the index of its current node;
a depth's counts are one ``bincount`` and the records of split nodes move to their
children by bit extraction (numeric) or an ancestor table lookup (categorical).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hierdp.accounting import Spend, check_epsilon
from hierdp.decompositions.base import Decomposition, Structure
from hierdp.decompositions.privtree import (
    MAX_NODES,
    NodeCap,
    PrivTree,
    check_fanout,
    check_max_nodes,
    privtree_parameters,
)
from hierdp.decompositions.taxonomy import _own_labels
from hierdp.errors import BudgetError, DataError
from hierdp.rng import RandomSource, make_rng
from hierdp.tree import Tree

__all__ = ["MixedPrivTree", "MixedStructure"]

_BITS = 52  # numeric resolution: cells of width (high − low)/2^52 at most


@dataclass
class MixedStructure(Structure):
    """A decomposition of numeric boxes × taxonomy nodes.

    ``lows``/``highs``: ``(n_nodes, n_numeric)`` interval per numeric column (``[low,
    high)``, closed at the upper bound); ``categories``: ``(n_nodes, n_categorical)``
    taxonomy node id per categorical column; ``split_on``: the column each internal node
    was split along (``""`` for leaves); ``counts_of``: NON-PRIVATE true leaf counts of
    a frame (for the release and for evaluation).
    """

    numeric: list[str] = field(default_factory=list)
    categorical: list[str] = field(default_factory=list)
    taxonomies: dict[str, Tree] = field(default_factory=dict)
    lows: np.ndarray = None  # type: ignore[assignment]
    highs: np.ndarray = None  # type: ignore[assignment]
    categories: np.ndarray = None  # type: ignore[assignment]
    split_on: np.ndarray = None  # type: ignore[assignment]
    params: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    _router: Any = field(default=None, repr=False)

    def locate(self, frame: pd.DataFrame) -> np.ndarray:
        """External id of the leaf holding each record of ``frame`` (same columns as decomposed)."""
        return self._router(frame)

    def leaf_counts(self, frame: pd.DataFrame) -> np.ndarray:
        """NON-PRIVATE true counts of the leaves (``tree.leaves`` order) — for releasing them
        through a mechanism, or for evaluation."""
        return np.bincount(self.locate(frame), minlength=self.tree.n_nodes)[self.tree.leaves]

    def region_frame(self) -> pd.DataFrame:
        """One row per node: ``node``, ``depth``, ``leaf``, ``split_on``, ``<num>_low``/
        ``<num>_high`` and ``<cat>`` (the taxonomy node's own label, or its id)."""
        tree = self.tree
        cols: dict[str, Any] = {"node": np.arange(tree.n_nodes), "depth": tree.depth,
                                "leaf": tree.n_children == 0, "split_on": self.split_on}
        for j, c in enumerate(self.numeric):
            cols[f"{c}_low"] = self.lows[:, j]
            cols[f"{c}_high"] = self.highs[:, j]
        for j, c in enumerate(self.categorical):
            lab = _own_labels(self.taxonomies[c])
            ids = self.categories[:, j]
            cols[c] = lab[ids] if lab is not None else ids
        return pd.DataFrame(cols)


def _leaf_index(tax: Tree, values: pd.Series, column: str) -> np.ndarray:
    """Taxonomy leaf id (external) of each record, matching the leaves' own labels."""
    lab = _own_labels(tax)
    leaves = tax.leaves
    keys = pd.Index(lab[leaves]) if lab is not None else pd.Index(leaves)
    if not keys.is_unique:
        raise DataError(f"the leaves of the taxonomy of {column!r} repeat labels; leaf labels must be unique "
                        "to place records (relabel them, e.g. 'fr/paris')")
    pos = keys.get_indexer(values.to_numpy() if lab is not None else values.to_numpy(dtype=np.int64))
    if np.any(pos < 0):
        raise DataError(f"column {column!r} holds values that are not leaves of its taxonomy; declare them in "
                        "the taxonomy (public) or drop those records")
    return leaves[pos]


class _Router:
    """Places records in the leaves of a grown mixed decomposition, one pass per depth."""

    def __init__(self, dec: MixedPrivTree, split_dim, first_child, level, cat, anc_tables, rank) -> None:
        self.dec, self.split_dim, self.first_child = dec, split_dim, first_child
        self.level, self.cat, self.anc, self.rank = level, cat, anc_tables, rank

    def __call__(self, frame: pd.DataFrame) -> np.ndarray:
        dec = self.dec
        u, leaf = dec._encode(frame)
        dn = len(dec.numeric)
        node = np.zeros(len(frame), np.int64)
        active = np.flatnonzero(self.split_dim[node] >= 0)
        while active.size:
            v = node[active]
            d = self.split_dim[v]
            child = np.zeros(active.size, np.int64)
            for j in range(dn):
                sel = d == j
                child[sel] = (u[active[sel], j] >> (dec.max_halvings - 1 - self.level[v[sel], j])) & 1
            for j, c in enumerate(dec.categorical):
                sel = d == dn + j
                tax = dec.taxonomies[c]
                nxt = self.anc[j][tax.depth[self.cat[v[sel], j]] + 1, leaf[active[sel], j]]
                child[sel] = self.rank[j][nxt]
            node[active] = self.first_child[v] + child
            active = active[self.split_dim[node[active]] >= 0]
        return node


class MixedPrivTree(Decomposition):
    """PrivTree on numeric × categorical attributes (§3.5); ε-DP (Cor. 1).

    Parameters
    ----------
    numeric : ``{column: (low, high)}`` public bounds of the numeric columns.
    categorical : ``{column: Tree}`` public taxonomy of each categorical column; the
        column holds the records' leaf labels (unique among the leaves).
    theta : θ (default 0). ``beta``: β of λ and δ (default: the largest fan-out, 2 or a
        taxonomy's). ``max_depth``: public depth cap (default: every attribute exhausted,
        at most 200). ``max_halvings``: public resolution of each numeric interval
        (default 32). ``contributions``: x leaves per tuple (λ × x). ``max_nodes``: public
        cap on the decomposition's size (default 4,194,304; see :class:`PrivTree`): a
        fan-out whose first split alone passes it is refused before anything is
        allocated, and the node count (which depends on noisy decisions: θ far below the
        counts splits every numeric interval down to ``max_halvings``) is enforced as the
        tree grows, before each depth is allocated. The refusal is a function of the ε-DP
        structure only (it has more than ``max_nodes`` nodes; no count, depth or value is
        shown) and comes after the structure's noise is drawn (its budget is spent).

    ``decompose(frame)`` takes a DataFrame with those columns (one row per record).
    """

    name = "privtree_mixed"
    data_dependent = True

    def __init__(self, numeric: Mapping[str, Any] | None = None, categorical: Mapping[str, Tree] | None = None, *,
                 theta: float = 0.0, beta: int | None = None, max_depth: int | None = None,
                 max_halvings: int = 32, contributions: int = 1, max_nodes: int = MAX_NODES) -> None:
        numeric = dict(numeric or {})
        categorical = dict(categorical or {})
        if not numeric and not categorical:
            raise DataError("privtree_mixed needs numeric={column: (low, high)} and/or categorical={column: Tree}")
        overlap = set(numeric) & set(categorical)
        if overlap:
            raise DataError(f"column {sorted(overlap)[0]!r} is both numeric and categorical; give it once")
        b = np.asarray([numeric[c] for c in numeric], dtype=np.float64).reshape(len(numeric), 2)
        if not np.all(np.isfinite(b)) or np.any(b[:, 1] <= b[:, 0]):
            raise DataError("every numeric bound must be finite with low < high (public, not read from the data)")
        for c, t in categorical.items():
            if not isinstance(t, Tree):
                raise DataError(f"categorical[{c!r}] must be a hierdp.Tree (the public taxonomy)")
        if isinstance(max_halvings, bool) or int(max_halvings) != max_halvings or not 1 <= max_halvings <= _BITS:
            raise DataError(f"max_halvings must be an integer in [1, {_BITS}], got {max_halvings!r}")
        fan = max([2 if numeric else 0] + [int(t.n_children.max()) for t in categorical.values()])
        beta = max(fan, 2) if beta is None else beta
        if isinstance(beta, bool) or int(beta) != beta or beta < 2:
            raise BudgetError(f"beta must be an integer >= 2, got {beta!r}")
        exhaust = len(numeric) * int(max_halvings) + sum(t.n_levels - 1 for t in categorical.values())
        cap = min(exhaust, 200) if max_depth is None else max_depth
        if isinstance(cap, bool) or int(cap) != cap or cap < 0:
            raise DataError(f"max_depth must be a non-negative integer, got {max_depth!r}")
        self.numeric, self.bounds = list(numeric), b
        self.categorical, self.taxonomies = list(categorical), categorical
        self.theta, self.beta, self.max_depth = float(theta), int(beta), int(cap)
        self.max_halvings, self.contributions = int(max_halvings), int(contributions)
        self.max_nodes = check_max_nodes(max_nodes)
        if self.max_depth > 0:  # public: refused before any data is read or budget paid
            check_fanout(self.name, int(fan), self.max_nodes, "a categorical column's taxonomy has that many "
                         "children under one node; give it intermediate levels")

    def parameters(self, epsilon: float):
        """λ = x·(2β−1)/((β−1)ε), δ = λ·ln β (Cor. 1), rounded up for the exact grid."""
        return privtree_parameters(epsilon, self.beta, self.theta, self.contributions)

    def _encode(self, data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Integer cells at resolution 2^max_halvings per numeric column, and the taxonomy
        leaf of each record per categorical column."""
        missing = [c for c in self.numeric + self.categorical if c not in data.columns]
        if missing:
            raise DataError(f"missing column {missing[0]!r}; the DataFrame has {list(map(str, data.columns))}")
        n_rec, H = len(data), self.max_halvings
        if self.numeric:
            try:
                x = data[self.numeric].to_numpy(dtype=np.float64)
            except (TypeError, ValueError):
                raise DataError("numeric columns must hold numbers") from None
            lo, hi = self.bounds[:, 0], self.bounds[:, 1]
            if not np.all(np.isfinite(x)) or np.any(x < lo) or np.any(x > hi):
                raise DataError("numeric values must be finite and inside the declared bounds; widen the bounds "
                                "(public) or clip the values")
            u = np.clip(np.floor((x - lo) / (hi - lo) * 2.0 ** H), 0, 2 ** H - 1).astype(np.int64)
        else:
            u = np.zeros((n_rec, 0), np.int64)
        leaf = np.zeros((n_rec, len(self.categorical)), np.int64)
        for j, c in enumerate(self.categorical):
            leaf[:, j] = _leaf_index(self.taxonomies[c], data[c], c)
        return u, leaf

    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> MixedStructure:
        if not isinstance(data, pd.DataFrame):
            raise DataError("privtree_mixed decomposes a DataFrame with the numeric and categorical columns")
        if budget is None:
            raise BudgetError("privtree_mixed reads the data: give it budget=<epsilon> for the structure")
        eps = check_epsilon(budget, "structure epsilon")
        rng = rng if rng is not None else make_rng(None)
        cap = NodeCap(self.name, self.max_nodes, "raise theta, lower max_depth or max_halvings")
        p = self.parameters(eps)
        decide = PrivTree.decider(p, rng)
        n_rec = len(data)
        dn, dc = len(self.numeric), len(self.categorical)
        D = dn + dc
        H = self.max_halvings
        u, leaf = self._encode(data)
        # categorical: ancestor tables anc[j][d] = ancestor at taxonomy depth d of each record's leaf
        anc_tables, rank, kids = [], [], []
        for c in self.categorical:
            tax = self.taxonomies[c]
            par = tax.parent
            table = [np.arange(tax.n_nodes)]
            for _ in range(tax.n_levels - 1):
                prev = table[-1]
                table.append(np.where(par[prev] >= 0, par[prev], prev))
            # anc_by_depth[d][v] = ancestor of v at depth d (v itself when deeper is asked)
            depth = tax.depth
            up = np.stack(table)  # up[s][v] = s-th ancestor (clamped at the root)
            by_depth = np.stack([up[np.clip(depth - d, 0, None), np.arange(tax.n_nodes)]
                                 for d in range(tax.n_levels)])
            anc_tables.append(by_depth)
            order = np.argsort(par, kind="stable")[1:]
            r = np.zeros(tax.n_nodes, np.int64)
            starts = np.searchsorted(par[order], np.arange(tax.n_nodes), side="left")
            r[order] = np.arange(order.size) - starts[par[order]]
            rank.append(r)
            kids.append((order, starts, np.searchsorted(par[order], np.arange(tax.n_nodes), side="right")))
        # frontier state
        f_level = np.zeros((1, dn), np.int64)  # halvings so far per numeric column
        f_cell = np.zeros((1, dn), np.int64)
        f_cat = np.array([[self.taxonomies[c].root for c in self.categorical]], np.int64).reshape(1, dc)
        rec = np.zeros(n_rec, np.int64)  # frontier index of each record, -1 once in a final leaf
        parents, levels_all, cells_all, cats_all, split_all = [np.array([-1], np.int64)], [], [], [], []
        offset = 0
        cap.add(1)
        for k in range(self.max_depth + 1):
            nf = f_level.shape[0]
            can = np.zeros((nf, D), bool)
            if dn:
                can[:, :dn] = f_level < H
            for j, c in enumerate(self.categorical):
                can[:, dn + j] = self.taxonomies[c].n_children[f_cat[:, j]] > 0
            order = (k + np.arange(D)) % D  # the public rule: attributes tried from k mod D on
            first = np.argmax(can[:, order], axis=1)
            dim = order[first]
            splittable = can.any(axis=1) & (k < self.max_depth)
            alive = rec >= 0
            counts = np.bincount(rec[alive], minlength=nf)
            split = np.zeros(nf, bool)
            if splittable.any():
                split[splittable] = decide(k, counts[splittable])
            levels_all.append(f_level)
            cells_all.append(f_cell)
            cats_all.append(f_cat)
            split_all.append(np.where(split, dim, -1))
            if not split.any():
                break
            sp = np.flatnonzero(split)
            d_sp = dim[sp]
            nchild = np.where(d_sp < dn, 2, 0)
            for j in range(dc):
                sel = d_sp == dn + j
                nchild[sel] = self.taxonomies[self.categorical[j]].n_children[f_cat[sp[sel], j]]
            child_start = np.cumsum(nchild) - nchild  # first child's index in the next frontier
            total = int(nchild.sum())
            cap.add(total)  # before the next depth's arrays are allocated
            owner = np.repeat(np.arange(sp.size), nchild)  # position in sp of each child's parent
            within = np.arange(total) - child_start[owner]
            c_level = f_level[sp[owner]].copy()
            c_cell = f_cell[sp[owner]].copy()
            c_cat = f_cat[sp[owner]].copy()
            od = d_sp[owner]
            for j in range(dn):
                sel = od == j
                c_level[sel, j] += 1
                c_cell[sel, j] = c_cell[sel, j] * 2 + within[sel]
            for j in range(dc):
                sel = np.flatnonzero(od == dn + j)
                order_j, starts_j, _ = kids[j]
                c_cat[sel, j] = order_j[starts_j[f_cat[sp[owner[sel]], j]] + within[sel]]
            parents.append(offset + sp[owner])
            # move the records of split nodes to their children
            pos_of = np.full(nf, -1, np.int64)
            pos_of[sp] = np.arange(sp.size)
            r_idx = np.flatnonzero(alive)
            r_pos = pos_of[rec[r_idx]]
            moving = r_pos >= 0
            stop = r_idx[~moving]
            rec[stop] = -1
            r_idx, r_pos = r_idx[moving], r_pos[moving]
            r_dim = d_sp[r_pos]
            child = np.zeros(r_idx.size, np.int64)
            for j in range(dn):
                sel = r_dim == j
                lvl = f_level[sp[r_pos[sel]], j]
                child[sel] = (u[r_idx[sel], j] >> (H - 1 - lvl)) & 1
            for j in range(dc):
                sel = r_dim == dn + j
                node = f_cat[sp[r_pos[sel]], j]
                tax = self.taxonomies[self.categorical[j]]
                nxt = anc_tables[j][tax.depth[node] + 1, leaf[r_idx[sel], j]]
                child[sel] = rank[j][nxt]
            rec[r_idx] = child_start[r_pos] + child
            offset += nf
            f_level, f_cell, f_cat = c_level, c_cell, c_cat
        parent = np.concatenate(parents[:len(levels_all)])
        level = np.concatenate(levels_all)
        cell = np.concatenate(cells_all)
        cat = np.concatenate(cats_all)
        split_dim = np.concatenate(split_all)
        names_dim = np.array(self.numeric + self.categorical + [""], dtype=object)
        lo, hi = self.bounds[:, 0], self.bounds[:, 1]
        w = np.ldexp(1.0, -level) if dn else np.zeros((parent.size, 0))
        lows = lo + (hi - lo) * (cell * w)
        highs = np.where(cell + 1 == np.ldexp(1.0, level), hi, lo + (hi - lo) * ((cell + 1) * w))
        depth_max = len(levels_all) - 1  # one block of nodes per depth
        names = ["total"] + [f"depth_{k}" for k in range(1, depth_max + 1)]
        tree = Tree.from_parent(parent, level_names=names)
        n = parent.size
        first_child = np.full(n, -1, np.int64)
        ids = np.arange(1, n)
        first_child[parent[1:][::-1]] = ids[::-1]
        router = _Router(self, split_dim, first_child, level, cat, anc_tables, rank)
        desc = (f"PrivTree on mixed attributes (Zhang et al. 2016, §3.5), ε={eps:g}, β={p.beta}, "
                f"λ={p.lam:.6g}, δ={p.delta:.6g}, θ={p.theta:g}, split order: depth mod {D} over "
                f"{', '.join(self.numeric + self.categorical)}")
        st = MixedStructure(tree=tree, spends=[Spend(eps, "epsilon", label="privtree_mixed structure")],
                            private_structure=True, level_provenance={n: f"{desc} (private output)" for n in names},
                            numeric=list(self.numeric), categorical=list(self.categorical),
                            taxonomies=dict(self.taxonomies), lows=lows, highs=highs, categories=cat,
                            split_on=names_dim[np.where(split_dim >= 0, split_dim, D)],
                            params={"epsilon": eps, "beta": p.beta, "lambda": p.lam, "delta": p.delta,
                                    "theta": p.theta, "max_depth": self.max_depth,
                                    "max_halvings": self.max_halvings, "contributions": self.contributions,
                                    "max_nodes": self.max_nodes},
                            description=desc, _router=router)
        return st
