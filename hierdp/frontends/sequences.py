"""The sequences front-end: a private prediction suffix tree (PrivTree §4) and its uses.

``trips.dptree.suffix_tree(column="trip", epsilon=1.0, max_length=20, alphabet=[...])``
(or :func:`release_sequences`): the ``suffix_tree`` decomposition spends ε/β choosing the
PST (a private output, recorded in the ledger), the leaf prediction histograms are
measured with the rest, ε(β−1)/β, through the ``leaves`` plan with L1 sensitivity l⊤
(Thm. 4.2), and every internal histogram is the sum of its leaves'. The paper then resets
negative counts to zero node by node, which leaves a parent unequal to the sum of its
children; here ``nonneg`` (the default) gives the closest consistent non-negative
histograms instead. With only the leaves measured, that least-squares problem separates
by leaf: it *is* "clip the leaves at zero, then sum", so every internal histogram equals
the sum of its children's. ``histograms="clamp"`` reproduces the paper's variant.

The result (:class:`SequenceResult`) answers string frequencies (Eq. 12), top-k frequent
strings and draws synthetic sequences, all post-processing of the released histograms.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from hierdp import rules
from hierdp.accounting import pure_epsilon
from hierdp.accounting.session import Session
from hierdp.decompositions.suffix_tree import MAX_CELLS, Corpus, SuffixStructure, SuffixTree
from hierdp.errors import BudgetError, DataError, expected_one_of
from hierdp.frontends.base import (
    PLAN_DEFAULT,
    admit_private_structure,
    canonical_keywords,
    door_rng,
    release_path,
    take,
)
from hierdp.plans.leaves import Leaves
from hierdp.result import ReleaseResult

__all__ = ["SequenceResult", "release_sequences"]

HISTOGRAMS = ("nonneg", "clamp")
#: the closest consistent non-negative histograms (the global least squares; with only
#: the leaves measured, the clipped leaves): ``nonneg``'s default is the top-down method
_NONNEG = {"name": "nonneg", "method": "global"}


@dataclass(repr=False)
class SequenceResult(ReleaseResult):
    """A private prediction suffix tree: a :class:`ReleaseResult` over the PST's nodes
    (values ``(n_nodes, |I| + 1)``: the next symbol, then ``&``) plus the ``structure``
    and the histograms the uses read (``hist``: non-negative; consistent unless
    ``histograms="clamp"``)."""

    structure: SuffixStructure | None = None
    hist: np.ndarray | None = None
    histograms: str = "nonneg"
    strings: bool = True

    @property
    def _st(self) -> SuffixStructure:
        if self.structure is None:
            raise DataError("this SequenceResult has no suffix tree; make it with release_sequences(...)")
        return self.structure

    @property
    def _h(self) -> np.ndarray:
        if self.hist is None:
            raise DataError("this SequenceResult has no histograms; make it with release_sequences(...)")
        return self.hist

    # ------------------------------------------------------------------ model lookups
    @cached_property
    def _mass(self) -> np.ndarray:
        return self._h.sum(axis=1)

    @cached_property
    def _effective(self) -> np.ndarray:
        """Each node, or its deepest ancestor whose histogram is not empty (a node whose
        released histogram is all zero predicts nothing: the prediction backs off)."""
        tree = self.tree
        eff = np.arange(tree.n_nodes)
        empty = self._mass <= 0
        depth, parent = tree.depth, tree.parent
        for d in range(1, tree.n_levels):  # parents precede children: one step per depth
            ids = np.flatnonzero((depth == d) & empty)
            eff[ids] = eff[parent[ids]]
        return eff

    def _match(self, ctx: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """For contexts ``ctx[starts[j]:ends[j] + 1]`` (prepend codes: 0..m−1 symbols, m the
        start marker), the node whose string is their longest suffix in the PST (backing
        off past empty histograms). One vectorised step per depth."""
        fc = self._st.first_child
        node = np.zeros(starts.size, np.int64)
        act = np.arange(starts.size)
        d = 0
        while act.size:
            pos = ends[act] - d
            ok = pos >= starts[act]
            act, pos = act[ok], pos[ok]
            child = fc[node[act]]
            go = child >= 0
            act = act[go]
            node[act] = child[go] + ctx[pos[go]]
            d += 1
        return self._effective[node]

    def _codes(self, strings: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(codes, starts, lengths)`` of query strings; a symbol outside the alphabet is
        code −1."""
        if isinstance(strings, str):
            raise DataError("pass a list of query strings (e.g. ['AB']), not a single string")
        items = list(strings)
        lengths = np.fromiter((len(s) for s in items), np.int64, len(items))
        alphabet = self._st.alphabet
        flat = [x for s in items for x in s]
        codes = alphabet.get_indexer(pd.Index(flat, dtype=object)) if flat else np.zeros(0, np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else np.zeros(0, np.int64)
        return np.asarray(codes, np.int64), starts, lengths

    # ------------------------------------------------------------------ uses
    def frequency(self, strings: Sequence[Any]) -> np.ndarray:
        """Estimated number of occurrences of each query string in the sequences (Eq. 12).

        For ``x₁…x_l``: ``hist(root)[x₁] · Π_{i≥2} hist(v_i)[x_i] / ‖hist(v_i)‖₁`` where
        ``v_i`` is the node whose string is the longest suffix of ``x₁…x_{i−1}`` (backing off
        to its nearest ancestor when its released histogram is empty). Strings are over the
        alphabet (a string holding another symbol has frequency 0); vectorised over all
        queries and positions.

        Parameters
        ----------
        strings : sequence of str or of sequences of symbols
            The query strings (each of at least one symbol).

        Returns
        -------
        numpy.ndarray
            One estimated frequency per query string (float; post-processing of the release).
        """
        codes, starts, lengths = self._codes(strings)
        if np.any(lengths == 0):
            raise DataError("a query string is empty; frequencies are defined for strings of at least one symbol")
        out = np.zeros(lengths.size)
        if lengths.size == 0 or not self._mass[0] > 0:  # an empty model predicts no occurrence
            return out
        known = np.ones(lengths.size, bool)
        if np.any(codes < 0):
            q_of = np.repeat(np.arange(lengths.size), lengths)
            known[np.unique(q_of[codes < 0])] = False
        safe = np.where(codes < 0, 0, codes)
        first = self._h[0, safe[starts]]
        # predictions i = 1..l−1 of every query: context [start, start + i − 1], target start + i
        n_pred = lengths - 1
        q = np.repeat(np.arange(lengths.size), n_pred)
        rank = np.arange(int(n_pred.sum())) - np.repeat(np.cumsum(n_pred) - n_pred, n_pred)
        ends = starts[q] + rank
        node = self._match(safe, starts[q], ends)
        p = self._h[node, safe[ends + 1]] / self._mass[node]
        with np.errstate(divide="ignore"):
            logp = np.bincount(q, weights=np.log(p), minlength=lengths.size)
        out = np.where(known, first * np.exp(logp), 0.0)
        return out

    def top_k(self, k: int, length: int | None = None) -> pd.DataFrame:
        """The ``k`` strings with the largest estimated frequency (Eq. 12), optionally only
        strings of exactly ``length`` symbols, best first: ``string``, ``length``, ``estimate``.

        Search (the paper leaves it open): best-first over the tree of strings, where the
        children of ``s`` are ``s·a`` for every symbol ``a``. Eq. 12 multiplies by a
        probability at each appended symbol, so ``f(s·a) ≤ f(s)``: a string's estimate is
        an upper bound on every extension's. A max-heap seeded with the single symbols
        (``f(a) = hist(root)[a]``) therefore pops strings in non-increasing order of
        estimate; the first ``k`` popped (of the requested length) are exactly the top k
        under the model. Each pop costs one longest-suffix lookup and pushes |I| children
        (vectorised over the alphabet). Strings with estimate 0 are never returned.

        Parameters
        ----------
        k : int
            How many strings to return.
        length : int, optional
            Only strings of exactly this many symbols (default: any length).

        Returns
        -------
        pandas.DataFrame
            Columns ``string``, ``length``, ``estimate``; best first, at most ``k`` rows.
        """
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise DataError(f"k must be a positive integer, got {k!r}")
        if length is not None and (isinstance(length, bool) or int(length) != length or length < 1):
            raise DataError(f"length must be a positive integer or None, got {length!r}")
        k = int(k)
        m = self._st.m
        heap: list[tuple[float, tuple[int, ...]]] = [(-float(self._h[0, a]), (a,)) for a in range(m)
                                                      if self._h[0, a] > 0]
        heapq.heapify(heap)
        found: list[tuple[tuple[int, ...], float]] = []
        while heap and len(found) < k:
            negf, s = heapq.heappop(heap)
            if length is None or len(s) == length:
                found.append((s, -negf))
            if length is not None and len(s) >= length:
                continue
            ctx = np.asarray(s, np.int64)
            v = int(self._match(ctx, np.array([0]), np.array([ctx.size - 1]))[0])
            f = -negf * self._h[v, :m] / self._mass[v]
            for a in np.flatnonzero(f > 0):
                heapq.heappush(heap, (-float(f[a]), s + (int(a),)))
        alphabet = self._st.alphabet
        strs = [self._render(np.asarray(s, np.int64), alphabet) for s, _ in found]
        return pd.DataFrame({"string": pd.Series(strs, dtype=object),
                             "length": np.array([len(s) for s, _ in found], np.int64),
                             "estimate": np.array([f for _, f in found], np.float64)})

    def _render(self, codes: np.ndarray, alphabet: pd.Index) -> Any:
        syms = alphabet[codes]
        return "".join(syms) if self.strings else tuple(syms)

    def sample_codes(self, n: int, seed: int | None = None, *, max_length: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """``n`` synthetic sequences as codes ``(n, max_length)`` (−1 after the end) and
        their lengths; see :meth:`sample`.

        Parameters
        ----------
        n : int
            Number of sequences.
        seed : int, optional
            Makes the draws reproducible (numpy's generator; post-processing only).
        max_length : int, optional
            Longest sequence drawn (default l⊤, the release's truncation length).

        Returns
        -------
        codes : numpy.ndarray
            ``(n, max_length)`` symbol codes (indices into the alphabet), −1 after each end.
        lengths : numpy.ndarray
            The number of symbols of each sequence.
        """
        if isinstance(n, bool) or int(n) != n or n < 0:
            raise DataError(f"n must be a non-negative integer, got {n!r}")
        cap = self._st.l_top if max_length is None else int(max_length)
        if cap < 1:
            raise DataError(f"max_length must be a positive integer, got {max_length!r}")
        if not self._mass[0] > 0:
            raise DataError("the released model is empty (every histogram count is 0): nothing to sample from")
        n = int(n)
        m = self._st.m
        gen = np.random.default_rng(seed)
        width = cap + 1
        ctx = np.full((n, width), -1, np.int64)
        ctx[:, 0] = m                                   # the start marker
        lengths = np.full(n, cap, np.int64)
        act = np.arange(n)
        cdf = np.cumsum(self._h, axis=1) / np.where(self._mass > 0, self._mass, 1.0)[:, None]
        flat = ctx.reshape(-1)
        for t in range(cap):
            if not act.size:
                break
            node = self._match(flat, act * width, act * width + t)
            u = gen.random(act.size)
            sym = np.minimum((cdf[node] <= u[:, None]).sum(axis=1), m)
            done = sym == m                             # the end marker
            lengths[act[done]] = t
            act, sym = act[~done], sym[~done]
            ctx[act, t + 1] = sym
        return ctx[:, 1:], lengths

    def sample(self, n: int, seed: int | None = None, *, max_length: int | None = None) -> pd.Series:
        """``n`` synthetic sequences drawn from the PST (§4.1): start from ``$``, draw the
        next symbol from the histogram of the longest matching suffix of what is drawn so
        far, stop at ``&``. A sequence reaching ``max_length`` symbols (default l⊤) stops
        there (the data were truncated at l⊤ too). Post-processing: ``seed`` only makes the
        draws reproducible (numpy's generator). Strings if the data were strings, else tuples.

        Parameters
        ----------
        n : int
            Number of sequences.
        seed : int, optional
            Makes the draws reproducible (post-processing only: no privacy is spent).
        max_length : int, optional
            Longest sequence drawn (default l⊤).

        Returns
        -------
        pandas.Series
            ``n`` synthetic sequences (name ``sequence``).
        """
        codes, lengths = self.sample_codes(n, seed, max_length=max_length)
        alphabet = self._st.alphabet
        return pd.Series([self._render(codes[i, :lengths[i]], alphabet) for i in range(codes.shape[0])],
                         dtype=object, name="sequence")

    # ------------------------------------------------------------------ tables
    @cached_property
    def frame(self) -> pd.DataFrame:
        """One row per node and next symbol: ``node``, ``depth``, ``context`` (the predictor
        string, ``$`` the start), ``leaf``, ``next`` (a symbol or ``&``), ``estimate`` (the
        histogram the uses read)."""
        st = self._st
        n, k = self._h.shape
        ctx = st.contexts()
        if self.strings:
            ctx = np.array(["".join(c) for c in ctx], dtype=object)
        rep = np.repeat(np.arange(n), k)
        return pd.DataFrame({"node": rep, "depth": np.repeat(self.tree.depth, k),
                             "context": pd.Series(ctx[rep], dtype=object), "leaf": np.repeat(st.is_leaf, k),
                             "next": pd.Categorical.from_codes(np.tile(np.arange(k), n), categories=st.cells),
                             "estimate": self._h.reshape(-1)})

    def to_frame(self, noisy: bool = False) -> pd.DataFrame:  # type: ignore[override]
        """:attr:`frame`, with the raw noisy leaf measurements (``noisy``, NaN for internal nodes).

        Parameters
        ----------
        noisy : bool, default False
            Add the ``noisy`` column.

        Returns
        -------
        pandas.DataFrame
            One row per (node, next symbol) of the released suffix tree.
        """
        out = self.frame.copy()
        if noisy:
            var = np.asarray(self.measurements.variance, dtype=np.float64)
            vals = np.asarray(self.measurements.values, dtype=np.float64)
            out["noisy"] = np.where(np.isinf(var)[:, None], np.nan, vals).reshape(-1)
        return out

    def __repr__(self) -> str:
        base = super().__repr__()
        return base.replace("<ReleaseResult:", f"<SequenceResult (PST, {self.histograms}):", 1)


def release_sequences(data: Any, column: str | None = None, epsilon: float | None = None, *,
                      max_length: int | None = None, alphabet: Any = None, delta: float | None = None,
                      rho: float | None = None, session: Session | None = None, seed: int | None = None,
                      neighbours: str = "add_remove", invariants: Any = None, postprocess: Any = PLAN_DEFAULT,
                      epsilon_share: float | None = None, theta: float = 0.0, max_depth: int | None = None,
                      max_cells: int = MAX_CELLS, histograms: str = "nonneg", mechanism: Any = "discrete_laplace",
                      notes: Sequence[str] = (),
                      _door: str = "release_sequences()", **older: Any) -> SequenceResult:
    """Privately build a prediction suffix tree over sequences and release its histograms.

    ``data``: a DataFrame (with ``column``), a Series or a list of sequences — strings
    (one character per symbol) or lists/tuples of hashable symbols; one sequence is one
    privacy unit. ``alphabet``: the public symbols (a list; a string lists characters) or
    ``"observed"`` (your assertion that the symbols seen in the data are public).
    ``max_length``: l⊤ (§4.2), public: a sequence makes at most l⊤ predictions (its
    symbols and the end marker), so one of up to l⊤ − 1 symbols is kept whole and a longer
    one keeps its first l⊤ symbols without its end; the ledger's ``max_contributions``.
    ``epsilon_share`` of ``epsilon`` pays for the PST (default 1/β, §4.2), the rest for the
    leaf histograms (``mechanism``, discrete Laplace, sensitivity l⊤: Thm. 4.2).
    ``histograms`` is the post-processing: ``"nonneg"`` (consistent, non-negative: the
    leaves clipped at 0 and summed) or ``"clamp"`` (the paper: sums of the noisy leaves,
    negative counts reset to 0 node by node; not consistent); ``postprocess`` takes no other
    value. ``theta``, ``max_depth``, ``max_cells``: see :class:`~hierdp.decompositions.suffix_tree.SuffixTree`.
    ``session``: checked against the whole spend before the structure's noise is drawn.
    ``neighbours``/``invariants``: refused (the structure is private). Older spelling:
    ``structure_share``.

    Parameters
    ----------
    data : DataFrame, Series or list
        The sequences (one per privacy unit).
    column : str, optional
        The column of a DataFrame holding them.
    epsilon, delta, rho : float, optional
        The total privacy loss (structure and counts), as in :func:`hierdp.release`.
    session : Session, optional
        Draw the spend from this :class:`hierdp.Session` (checked before any noise).
    seed : int, optional
        Reproducible noise for tests (NOT FOR PUBLICATION).
    neighbours, invariants : optional
        Only ``"add_remove"`` and no invariants (the structure is private).
    postprocess : str, sequence or None, optional
        Post-processing of the counts (default: the plan's, ``["blue"]``).
    max_length : int, optional
        l⊤ (§4.2).
    alphabet : list, str or "observed", optional
        The public symbols.
    epsilon_share : float, optional
        The share of ``epsilon`` that builds the PST (default 1/β).
    theta, max_depth, max_cells : optional
        Limits of the :class:`~hierdp.decompositions.suffix_tree.SuffixTree`.
    histograms : {"nonneg", "clamp"}, default "nonneg"
        The post-processing of the histograms.
    mechanism : str or Mechanism, default "discrete_laplace"
        The noise on the leaf histograms.
    notes : sequence of str, default ()
        Public notes for the ledger.
    **older
        ``structure_share``, the older name of ``epsilon_share``.

    Returns
    -------
    SequenceResult
        The release plus ``frequency(strings)``, ``top_k(k)`` and ``sample(n)``.

    Examples
    --------
    >>> import hierdp, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    ...     r = hierdp.release_sequences(["ab", "abc", "b"] * 50, epsilon=1.0, max_length=4,
    ...                                  alphabet="abc", seed=1)
    >>> r.ledger.guarantee
    'pure'
    """
    given = canonical_keywords(_door, older, ("epsilon_share",), release_sequences)
    structure_share = take(_door, given, "epsilon_share", epsilon_share)
    if postprocess is not PLAN_DEFAULT:
        raise DataError(f"{_door}: the suffix tree's post-processing is histograms='nonneg' (default) or 'clamp'; "
                        "leave postprocess out")
    eps = pure_epsilon(epsilon)
    if histograms not in HISTOGRAMS:
        raise DataError(expected_one_of("histograms", histograms, HISTOGRAMS))
    decomp = SuffixTree(alphabet=alphabet, max_length=max_length, theta=theta, max_depth=max_depth, column=column,
                        max_cells=max_cells)
    corpus: Corpus = decomp.corpus(data)
    beta = corpus.m + 1
    decomp.size_cap(beta)  # the alphabet's fan-out against max_cells: public, refused before the door pays
    share = 1.0 / beta if structure_share is None else structure_share
    rules.enforce(rules.share_problem(share), BudgetError)
    paid = admit_private_structure(_door, "suffix_tree", epsilon=eps, delta=delta, rho=rho, session=session, seed=seed,
                                   neighbours=neighbours, invariants=invariants, mechanism=mechanism)
    rng = door_rng(seed, 54321)
    structure = decomp.decompose(corpus, budget=eps * float(share), rng=rng)
    tree = structure.tree
    values = structure.node_histograms(corpus)
    strings = _all_strings(data, column)
    result = release_path(tree, values, epsilon=eps, delta=delta, rho=rho, session=paid, plan=Leaves(mechanism),
                          postprocess=(_NONNEG,) if histograms == "nonneg" else (), seed=seed,
                          privacy_unit="one sequence", max_contributions=corpus.l_top, structure=structure,
                          notes=list(notes) + [
                              f"suffix_tree: the PST (which contexts are split) is a private output paid from the "
                              f"budget; sequences are truncated to l⊤ = {corpus.l_top} predictions (public)",
                              f"alphabet ({corpus.m} symbols): {corpus.provenance}",
                              f"histograms: {histograms}"])
    if histograms == "nonneg":
        hist = np.asarray(result.estimate.values, dtype=np.float64)
    else:  # the paper: internal = sum of the noisy leaves, then negative counts reset to 0
        noisy = np.asarray(result.measurements.values, dtype=np.float64)
        hist = np.maximum(tree.aggregate(noisy[tree.leaves]), 0.0)
    meta = dict(result.meta)
    meta["cells"] = {"next": structure.cells}
    return SequenceResult(tree=result.tree, estimate=result.estimate, measurements=result.measurements,
                          ledger=result.ledger, meta=meta, structure=structure, hist=hist, histograms=histograms,
                          strings=strings)


def _all_strings(data: Any, column: str | None) -> bool:
    if isinstance(data, pd.DataFrame):
        data = data[column]
    if isinstance(data, Corpus):
        return False
    return all(isinstance(s, str) for s in data)
