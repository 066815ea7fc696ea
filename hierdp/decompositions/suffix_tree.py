"""Private prediction suffix trees (PST) over sequences: PrivTree's §4 (Zhang, Xiao & Xie 2016).

A sequence ``$x₁…x_l&`` over a public alphabet I makes one *prediction* per symbol after
the start marker: the symbol ``x_i`` (or the end marker ``&``) predicted from its context
``$x₁…x_{i−1}``. A PST node ``v`` has a predictor string ``dom(v)``; its histogram over
I ∪ {&} counts the predictions whose context ends with ``dom(v)`` (§4.1). The children
of ``v`` prepend one symbol of I ∪ {$} to ``dom(v)`` (fan-out β = |I| + 1); a node whose
string begins with ``$`` is never split (condition C1).

The structure is PrivTree (Alg. 2) with the score of Eq. (13),

    c(v) = ‖hist(v)‖₁ − max_x hist(v)[x],

which is monotonic (Lemma 4.1) and moves by at most one when one prediction is added.
One sequence makes at most l⊤ predictions (public ``max_length``; longer sequences are
truncated, §4.2), so λ is l⊤ times that of Cor. 1: Thm. 4.1,
λ = l⊤·(2β−1)/((β−1)·ε_tree), δ = λ·ln β, θ = 0. The exact split test on the integer grid,
the rounding of λ and δ (both only tighten the bound) and the biased score come from
:mod:`hierdp.decompositions.privtree` (``contributions = l⊤``). Each prediction lies in
exactly one leaf (the path of its context ends in a leaf: every split node has all β
children), so the leaf histograms have L1 sensitivity l⊤ (Thm. 4.2) and are measured by
the ``leaves`` plan; the paper's budget split is ε/β for the structure and ε(β−1)/β for
the histograms.

Nodes at depth ≥ l⊤ that do not begin with ``$`` are empty for *every* data set (their
context would be longer than any truncated sequence), so their split decisions do not
depend on the data: not splitting them is the same as cutting the output at the public
depth l⊤ (post-processing). A smaller public ``max_depth`` cuts it earlier.

Vectorised: every prediction is a (context end, target) pair in one flat array of symbol
codes; a depth is one ``bincount`` of (node, target) and one gather of the symbol that
the next depth prepends — no Python loop per sequence or per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hierdp.accounting import Spend, check_epsilon
from hierdp.decompositions.base import Decomposition, Structure
from hierdp.decompositions.privtree import (
    NodeCap,
    PrivTree,
    PrivTreeParameters,
    check_fanout,
    check_max_nodes,
    privtree_parameters,
)
from hierdp.errors import BudgetError, DataError
from hierdp.rng import RandomSource, make_rng
from hierdp.tree import Tree

__all__ = ["SuffixTree", "SuffixStructure", "Corpus", "as_corpus", "suffix_tree_parameters", "MAX_CELLS"]

OBSERVED_PROVENANCE = "observed in the data (asserted public by the user)"

#: Default public cap on the histogram cells of a suffix tree (``max_cells``): nodes × (|I| + 1),
#: what growing it and releasing its histograms hold in memory (128 MB of int64 at the cap).
MAX_CELLS = 1 << 24


# ----------------------------------------------------------------------------- the corpus
@dataclass(frozen=True)
class Corpus:
    """Sequences as flat symbol codes, truncated to l⊤ predictions each.

    ``alphabet``: the public symbols (codes 0..m−1); code ``m`` is the start marker ``$``
    in ``flat`` and the end marker ``&`` in ``target``. ``flat``: per sequence ``$`` then
    its kept symbols; ``ctx_end``: for each prediction, the position in ``flat`` of the
    last symbol of its context; ``target``: the predicted code. NON-PRIVATE (raw data).
    """

    alphabet: pd.Index
    flat: np.ndarray
    ctx_end: np.ndarray
    target: np.ndarray
    l_top: int
    n_sequences: int
    provenance: str

    @property
    def m(self) -> int:
        return len(self.alphabet)


def _items(data: Any, column: str | None) -> list:
    if isinstance(data, pd.DataFrame):
        if column is None:
            raise DataError("give column=... to say which DataFrame column holds the sequences")
        if column not in data.columns:
            raise DataError(f"missing sequence column {column!r}; the DataFrame has {list(map(str, data.columns))}")
        data = data[column]
    if isinstance(data, pd.Series):
        data = data.tolist()
    elif isinstance(data, (str, bytes)):
        raise DataError("expected a collection of sequences (e.g. a list of strings), got a single string")
    try:
        items = list(data)
    except TypeError:
        raise DataError(f"expected a collection of sequences, got {type(data).__name__}") from None
    for i, s in enumerate(items):
        if s is None or (isinstance(s, float) and np.isnan(s)) or isinstance(s, (bytes, dict, set)) \
                or not hasattr(s, "__len__"):
            raise DataError(f"sequence {i} is {type(s).__name__}, not a string or list of symbols; "
                            "drop or fill missing sequences first")
    return items


def _symbols(items: list) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(lengths, flat symbols, all strings)``; strings are split into characters."""
    lengths = np.fromiter((len(s) for s in items), dtype=np.int64, count=len(items))
    if all(isinstance(s, str) for s in items):
        joined = "".join(items)
        try:
            raw = joined.encode("utf-32-le")
        except UnicodeEncodeError:
            raise DataError("the sequences hold text that is not valid Unicode (a lone surrogate, e.g. from bytes "
                            "decoded with errors='surrogateescape'; values not shown: they are private); decode "
                            "the source with its real encoding first") from None
        cp = np.frombuffer(raw, dtype=np.uint32).astype(np.int64)
        return lengths, cp, True
    flat = np.empty(int(lengths.sum()), dtype=object)
    flat[:] = [x for s in items for x in s]
    return lengths, flat, False


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _unhashable_symbols() -> DataError:
    return DataError("the sequences hold symbols that are not hashable (e.g. a list inside a sequence; values not "
                     "shown: they are private); each sequence must be a string or a flat list of hashable symbols "
                     "(strings, numbers, tuples)")


def _encode(lengths: np.ndarray, flat: np.ndarray, strings: bool, alphabet: Any) -> tuple[np.ndarray, pd.Index, str]:
    if alphabet is None:
        raise DataError("no alphabet declared: the symbols are part of the public structure, so pass "
                        "alphabet=[...] (the public list of symbols) or alphabet='observed' to assert that "
                        "the symbols seen in the data are public")
    if isinstance(alphabet, str) and alphabet == "observed":
        try:
            uniq = np.unique(flat) if strings else pd.unique(flat)
        except TypeError:
            raise _unhashable_symbols() from None
        if strings:
            index = pd.Index([chr(int(c)) for c in uniq], dtype=object)
        else:
            try:
                uniq = np.asarray(sorted(uniq), dtype=object)
            except TypeError:
                pass
            index = pd.Index(list(uniq), dtype=object)
        provenance = OBSERVED_PROVENANCE
    else:
        if isinstance(alphabet, str):
            alphabet = list(alphabet)
        index = pd.Index(list(alphabet), dtype=object)
        bad = next((a for a in index if not _hashable(a)), None)  # the alphabet is public: say which entry
        if bad is not None:
            raise DataError(f"alphabet entries must be hashable symbols (strings, numbers, tuples), got "
                            f"{type(bad).__name__} {bad!r:.60}")
        if index.has_duplicates:
            raise DataError(f"the alphabet lists {index[index.duplicated()][0]!r} twice")
        provenance = "declared"
    if len(index) == 0:
        raise DataError("the alphabet is empty; declare at least one symbol")
    if strings:
        if not all(isinstance(a, str) and len(a) == 1 for a in index):
            raise DataError("sequences given as strings need an alphabet of single characters; pass lists of "
                            "symbols for longer symbols")
        keys = np.array([ord(a) for a in index], dtype=np.int64)
        order = np.argsort(keys)
        pos = np.searchsorted(keys[order], flat)
        pos = np.minimum(pos, keys.size - 1)
        ok = keys[order][pos] == flat
        codes = np.where(ok, order[pos], -1)
    else:
        try:
            codes = index.get_indexer(pd.Index(flat)) if flat.size else np.zeros(0, np.int64)
        except TypeError:
            raise _unhashable_symbols() from None
    bad = np.flatnonzero(codes < 0)
    if bad.size:
        raise DataError("the data hold symbols outside the declared alphabet (values not shown: they are private); "
                        "add them to alphabet=[...] or pass alphabet='observed'")
    return codes.astype(np.int64), index, provenance


#: the largest l⊤ accepted: one sequence makes at most this many predictions (sensitivity l⊤
#: scales the noise of every histogram; beyond about a million symbols no ε leaves a useful count)
MAX_LENGTH_CAP = 1 << 20


def check_max_length(max_length: Any) -> int:
    """``max_length`` (l⊤) as an int: a public integer in [1, :data:`MAX_LENGTH_CAP`]."""
    what = ("max_length (l⊤, the most predictions one sequence makes: its symbols and the end marker) must be a "
            "public positive integer")
    integral = isinstance(max_length, (int, np.integer)) or (
        isinstance(max_length, (float, np.floating)) and math.isfinite(max_length) and float(max_length).is_integer())
    if isinstance(max_length, (bool, np.bool_)) or not integral:
        shown = repr(max_length) if len(repr(max_length)) <= 40 else f"a {type(max_length).__name__}"
        raise DataError(f"{what}, got {shown}")
    if max_length < 1:
        raise DataError(f"{what}, got {int(max_length)}")
    if max_length > MAX_LENGTH_CAP:
        shown = f"{int(max_length)}" if max_length < 10 ** 30 else f"a number of {len(str(int(max_length)))} digits"
        raise DataError(f"max_length must be at most {MAX_LENGTH_CAP:,} (l⊤ is the sensitivity of every histogram: "
                        f"its noise grows with it), got {shown}; cut long sequences to a public length")
    return int(max_length)


def as_corpus(data: Any, *, alphabet: Any, max_length: int, column: str | None = None) -> Corpus:
    """Encode sequences (strings, or lists of hashable symbols) for the suffix tree.

    ``alphabet``: the public symbols (a list; a string is a list of characters) or
    ``"observed"`` (the user's assertion that the symbols seen are public). ``max_length``
    is l⊤ (§4.2): a sequence of at most l⊤ − 1 symbols is kept whole with its end marker;
    a longer one keeps its first l⊤ symbols and no end marker (open-ended).
    """
    l_top = check_max_length(max_length)
    items = _items(data, column)
    lengths, flat, strings = _symbols(items)
    codes, index, provenance = _encode(lengths, flat, strings, alphabet)
    m = len(index)
    n = lengths.size
    kept = np.minimum(lengths, l_top)                      # symbols kept
    n_pred = kept + (lengths < l_top)                      # predictions: symbols (+ the end marker)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n else np.zeros(0, np.int64)
    pos = np.arange(codes.size) - np.repeat(starts, lengths)
    keep = pos < l_top
    new_starts = np.concatenate([[0], np.cumsum(kept + 1)[:-1]]) if n else np.zeros(0, np.int64)
    out = np.full(int((kept + 1).sum()), m, dtype=np.int64)  # '$' everywhere, symbols written over
    out[np.repeat(new_starts, lengths)[keep] + 1 + pos[keep]] = codes[keep]
    e_start = np.repeat(new_starts, n_pred)
    e_rank = np.arange(int(n_pred.sum())) - np.repeat(np.concatenate([[0], np.cumsum(n_pred)[:-1]]) if n
                                                      else np.zeros(0, np.int64), n_pred)
    ctx_end = e_start + e_rank
    is_end = e_rank == np.repeat(kept, n_pred)            # the end-marker prediction
    target = np.where(is_end, m, out[np.minimum(ctx_end + 1, max(out.size - 1, 0))])
    return Corpus(alphabet=index, flat=out, ctx_end=ctx_end, target=target.astype(np.int64), l_top=l_top,
                  n_sequences=int(n), provenance=provenance)


# ----------------------------------------------------------------------------- parameters
def suffix_tree_parameters(epsilon: float, alphabet_size: int, max_length: int,
                           theta: float = 0.0) -> PrivTreeParameters:
    """Thm. 4.1's λ = l⊤·(2β−1)/((β−1)·ε) and δ = λ·ln β for β = |I| + 1, exactly as
    :func:`~hierdp.decompositions.privtree.privtree_parameters` rounds them (l⊤ = ``max_length``)."""
    l_top = check_max_length(max_length)
    try:
        return privtree_parameters(epsilon, int(alphabet_size) + 1, theta, l_top)
    except BudgetError:  # the scale grows with l⊤: name the public parameters that set it
        raise BudgetError(f"the suffix tree's noise scale λ = l⊤·(2β−1)/((β−1)·ε) for max_length={l_top}, "
                          f"{int(alphabet_size)} symbols and a structure epsilon of {float(epsilon):g} is outside "
                          "the exact samplers' range [2**-30, 2**40]; lower max_length or raise epsilon") from None


# ----------------------------------------------------------------------------- growing
def _descend(corpus: Corpus, first_child: np.ndarray, events: np.ndarray, node: np.ndarray, depth: int) -> tuple:
    """Move the predictions ``events`` (at nodes ``node`` of ``depth``) whose node is split
    to the child that prepends the next context symbol; returns the moved events and nodes."""
    fc = first_child[node]
    mv = fc >= 0
    ev = events[mv]
    return ev, fc[mv] + corpus.flat[corpus.ctx_end[ev] - depth]


def _grow(corpus: Corpus, decide, max_depth: int, roots: int = 1, replica: np.ndarray | None = None,
          cap: NodeCap | None = None) -> dict:
    """Grow PSTs top-down, one vectorised pass per depth.

    ``decide(depth, scores)`` returns the split mask of a depth's nodes from their Eq. (13)
    scores. ``roots`` independent trees are grown at once (a forest, for audits);
    ``replica`` gives each prediction's root (default: all in root 0). Nodes beginning with
    ``$`` and nodes at ``max_depth`` are never offered to ``decide``. Returns per node (BFS
    order, children contiguous in code order) ``parent``, ``symbol``, ``first_child``,
    ``replica`` (its root) and ``depth``. ``cap`` counts each depth's children before
    they (and their histograms) are allocated.
    """
    if cap is not None:
        cap.add(roots)
    m = corpus.m
    k = beta = m + 1
    n_ev = corpus.target.size
    ev = np.arange(n_ev)
    node_local = np.zeros(n_ev, np.int64) if replica is None else np.asarray(replica, np.int64)
    n_d = roots
    offset = 0
    parents = [np.full(roots, -1, np.int64)]
    symbols = [np.full(roots, -1, np.int64)]
    replicas = [np.arange(roots)]
    depths = [np.zeros(roots, np.int64)]
    firsts = []
    for d in range(max_depth + 1):
        is_dollar = symbols[-1] == m
        if d < max_depth:
            hist = np.bincount(node_local * k + corpus.target[ev], minlength=n_d * k).reshape(n_d, k)
            score = hist.sum(axis=1) - hist.max(axis=1)            # Eq. (13)
            open_ = ~is_dollar                                      # C1
            split = np.zeros(n_d, bool)
            split[open_] = np.asarray(decide(d, score[open_]), dtype=bool)
        else:
            split = np.zeros(n_d, bool)
        par = np.flatnonzero(split)
        if cap is not None:
            cap.add(par.size * beta)
        fc_local = np.full(n_d, -1, np.int64)
        fc_local[par] = np.arange(par.size) * beta
        nxt = offset + n_d
        firsts.append(np.where(fc_local >= 0, fc_local + nxt, -1))
        if par.size == 0:
            break
        ev, node_local = _descend(corpus, fc_local, ev, node_local, d)
        parents.append(np.repeat(offset + par, beta))
        symbols.append(np.tile(np.arange(beta), par.size))
        replicas.append(np.repeat(replicas[-1][par], beta))
        depths.append(np.full(par.size * beta, d + 1, np.int64))
        offset = nxt
        n_d = par.size * beta
    return {"parent": np.concatenate(parents), "symbol": np.concatenate(symbols),
            "first_child": np.concatenate(firsts), "replica": np.concatenate(replicas),
            "depth": np.concatenate(depths)}


# ----------------------------------------------------------------------------- the structure
@dataclass
class SuffixStructure(Structure):
    """A prediction suffix tree: the tree plus what each node predicts from.

    ``symbol``: the code each node prepends to its parent's string (0..m−1 a symbol of
    ``alphabet``, m the start marker ``$``, −1 the root); ``first_child``: external id of
    a node's first child (children are contiguous, in code order), −1 for leaves;
    ``alphabet``: the public symbols; ``l_top``: l⊤; ``params``: λ, δ, θ, β, ε.
    Histogram cells (``k = m + 1``) are the symbols then the end marker ``&``.
    """

    symbol: np.ndarray = None  # type: ignore[assignment]
    first_child: np.ndarray = None  # type: ignore[assignment]
    alphabet: pd.Index = None  # type: ignore[assignment]
    l_top: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    method: str = "suffix_tree"
    description: str = ""

    @property
    def m(self) -> int:
        return len(self.alphabet)

    @property
    def is_leaf(self) -> np.ndarray:
        return self.first_child < 0

    @property
    def cells(self) -> pd.Index:
        """Histogram cells: the alphabet, then ``"&"`` (the end of a sequence)."""
        return pd.Index(list(self.alphabet) + ["&"], dtype=object, name="next")

    def contexts(self, start: str = "$") -> np.ndarray:
        """The predictor string of every node (external order), as tuples of symbols;
        ``start`` stands for the start marker."""
        labels = np.empty(self.m + 1, dtype=object)
        labels[:] = [(a,) for a in self.alphabet] + [(start,)]
        out = np.empty(self.tree.n_nodes, dtype=object)
        out[0] = ()
        depth = self.tree.depth
        parent = self.tree.parent
        for d in range(1, int(depth.max()) + 1 if depth.size else 1):  # one vectorised step per depth
            ids = np.flatnonzero(depth == d)
            out[ids] = [a + b for a, b in zip(labels[self.symbol[ids]], out[parent[ids]])]
        return out

    def leaf_of(self, corpus: Corpus) -> np.ndarray:
        """External id of the leaf each prediction of ``corpus`` falls in (one pass per depth)."""
        ev = np.arange(corpus.target.size)
        node = np.zeros(ev.size, np.int64)
        leaf = np.zeros(ev.size, np.int64)
        d = 0
        while ev.size:
            stop = self.first_child[node] < 0
            leaf[ev[stop]] = node[stop]
            ev, node = _descend(corpus, self.first_child, ev, node, d)
            d += 1
        return leaf

    def node_histograms(self, corpus: Corpus) -> np.ndarray:
        """NON-PRIVATE true prediction histograms ``(n_nodes, m + 1)`` of every node
        (external order): for releasing them through a mechanism, or for evaluation."""
        k = self.m + 1
        counts = np.bincount(self.leaf_of(corpus) * k + corpus.target, minlength=self.tree.n_nodes * k)
        leaves = counts.reshape(self.tree.n_nodes, k)[self.tree.leaves]
        return self.tree.aggregate(leaves)


class SuffixTree(Decomposition):
    """Private prediction suffix tree (Zhang, Xiao & Xie 2016, §4.2); ε-DP (Thm. 4.1).

    Parameters: ``alphabet`` (public symbols, or ``"observed"``: the user's assertion that
    the symbols seen are public), ``max_length`` (l⊤, public: the most predictions — symbols
    plus the end marker — one sequence makes; longer sequences are truncated), ``theta``
    (θ, default 0 as in §4.2), ``max_depth`` (a public depth cap, default l⊤), ``column``
    (when the data is a DataFrame), ``max_cells`` (public cap on the tree's histogram
    cells, nodes × (|I| + 1), default :data:`MAX_CELLS` = 16,777,216). The structure
    costs ``budget`` (ε_tree; the paper gives it ε/β of the release) and is a private output.

    Size. Every split makes β = |I| + 1 children, each with a histogram of |I| + 1 cells: an
    alphabet whose first split alone passes ``max_cells`` is refused before the tree is
    grown. How many nodes grow depends on noisy decisions (θ far below the scores splits
    every node down to ``max_depth``: β^depth nodes), so the cap is enforced as the tree
    grows, before each depth's nodes and histograms are allocated; a tree that would pass
    it raises one :class:`~hierdp.errors.DataError` naming ``max_cells``. The refusal is a
    function of the ε-DP structure alone ("it has more than max_cells / (|I| + 1) nodes":
    post-processing; no count, depth or symbol in the message) and comes after the
    structure's noise was drawn, so its budget is spent. Raise ``max_cells`` if you mean it.
    """

    name = "suffix_tree"
    data_dependent = True

    def __init__(self, alphabet: Any = None, max_length: int | None = None, *, theta: float = 0.0,
                 max_depth: int | None = None, column: str | None = None, max_cells: int = MAX_CELLS) -> None:
        if max_length is None:
            raise DataError("suffix_tree needs max_length=l⊤ (public): the most predictions one sequence makes")
        self.alphabet = alphabet
        self.max_length = check_max_length(max_length)
        self.theta = float(theta)
        if max_depth is not None and (isinstance(max_depth, bool) or int(max_depth) != max_depth or max_depth < 0):
            raise DataError(f"max_depth must be a non-negative integer, got {max_depth!r}")
        self.max_depth = self.max_length if max_depth is None else min(int(max_depth), self.max_length)
        self.column = column
        self.max_cells = check_max_nodes(max_cells, "max_cells")

    def size_cap(self, beta: int, replicas: int = 1) -> NodeCap:
        """The size cap for an alphabet of ``beta − 1`` symbols: the fan-out checked now (public),
        the node count as the tree grows (``replicas`` trees share ``replicas`` × the cap)."""
        what = "max_cells"
        if self.max_depth > 0:
            check_fanout(self.name, beta, self.max_cells * replicas, "a split makes one child per symbol and the "
                         "start marker, each with a histogram of as many cells; declare a smaller alphabet",
                         what=what, per_node=beta)
        return NodeCap(self.name, self.max_cells * replicas, "raise theta or lower max_depth", what=what,
                       per_node=beta)

    def corpus(self, data: Any) -> Corpus:
        """The encoded, truncated sequences (NON-PRIVATE)."""
        if isinstance(data, Corpus):
            return data
        return as_corpus(data, alphabet=self.alphabet, max_length=self.max_length, column=self.column)

    def parameters(self, epsilon: float, alphabet_size: int) -> PrivTreeParameters:
        return suffix_tree_parameters(epsilon, alphabet_size, self.max_length, self.theta)

    def _budget(self, budget: float | None) -> float:
        if budget is None:
            raise BudgetError("decomposition 'suffix_tree' reads the data: give it budget=<epsilon> for the "
                              "structure (the paper's share is ε/β)")
        return check_epsilon(budget, "structure epsilon")

    def decompose(self, data: Any = None, *, budget: float | None = None,
                  rng: RandomSource | None = None) -> SuffixStructure:
        corpus = self.corpus(data)
        eps = self._budget(budget)
        rng = rng if rng is not None else make_rng(None)
        cap = self.size_cap(corpus.m + 1)
        p = self.parameters(eps, corpus.m)
        grown = _grow(corpus, PrivTree.decider(p, rng), self.max_depth, cap=cap)
        names = ["total"] + [f"depth_{d}" for d in range(1, int(grown["depth"].max()) + 1)]
        tree = Tree.from_parent(grown["parent"], level_names=names)
        where = {name: "suffix_tree (private output)" for name in names}
        where["alphabet"] = corpus.provenance
        params = {"epsilon": eps, "beta": p.beta, "lambda": p.lam, "delta": p.delta, "theta": p.theta,
                  "max_length": self.max_length, "max_depth": self.max_depth, "max_cells": self.max_cells}
        desc = (f"prediction suffix tree (PrivTree §4.2, Zhang et al. 2016), ε={eps:g}, β={p.beta}, "
                f"l⊤={self.max_length}, λ={p.lam:.6g}, δ={p.delta:.6g}, θ={p.theta:g}")
        return SuffixStructure(tree=tree, spends=[Spend(eps, "epsilon", label="suffix_tree structure")],
                               private_structure=True, level_provenance=where, symbol=grown["symbol"],
                               first_child=grown["first_child"], alphabet=corpus.alphabet, l_top=self.max_length,
                               params=params, description=desc)

    def draw_structures(self, data: Any, *, budget: float, replicas: int,
                        rng: RandomSource | None = None) -> dict[str, np.ndarray]:
        """``replicas`` independent structure draws at once, as :meth:`decompose` makes them
        (a forest: ``parent``, ``symbol``, ``first_child`` and each node's ``replica``) —
        for audits of the structure's privacy. Same parameters and noise as :meth:`decompose`."""
        corpus = self.corpus(data)
        eps = self._budget(budget)
        rng = rng if rng is not None else make_rng(None)
        r = int(replicas)
        cap = self.size_cap(corpus.m + 1, r)
        p = self.parameters(eps, corpus.m)
        n_ev = corpus.target.size
        big = Corpus(alphabet=corpus.alphabet, flat=np.tile(corpus.flat, r),
                     ctx_end=(corpus.ctx_end[None, :] + corpus.flat.size * np.arange(r)[:, None]).reshape(-1),
                     target=np.tile(corpus.target, r), l_top=corpus.l_top, n_sequences=corpus.n_sequences * r,
                     provenance=corpus.provenance)
        return _grow(big, PrivTree.decider(p, rng), self.max_depth, roots=r, replica=np.repeat(np.arange(r), n_ev),
                     cap=cap)

    def __repr__(self) -> str:
        return f"<decomposition 'suffix_tree' l⊤={self.max_length}>"
