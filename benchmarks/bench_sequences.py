"""Private prediction suffix trees on a generated Markov-chain corpus (Zhang, Xiao & Xie
2016, §4 and §6.2 qualitatively).

    python benchmarks/bench_sequences.py            # 10⁵ sequences, ε in {0.2, 1, 1.6}, 3 repetitions; 10⁶ timed
    python benchmarks/bench_sequences.py --quick    # ε = 1, 2 repetitions

Data: a second-order Markov chain over 8 symbols (each pair of previous symbols has its
own next-symbol law, Dirichlet(0.3): skewed, so contexts of length 2 matter) with an end
probability of 0.15 per step (mean length ≈ 5.7), seed 2016. l⊤ = 20 predictions (about
the 97% quantile of the lengths, as §6.2 takes roughly the 95% one).

Figures: top-k precision |K(D) ∩ A(D)|/k of ``top_k`` against the exact top-k strings of
the (untruncated) data, for k = 10, 50, 100 and for k = 20 strings of length 4; the mean
relative error of ``frequency`` on the true top-100 strings; the total variation distance
between the length distribution of 10⁵ synthetic sequences (``sample``) and the data's
(capped at l⊤ on both sides); ``Truncate`` = the same figures of the non-private
truncated data. ``nonneg`` (hierdp's default) and ``clamp`` (the paper's reset to zero)
are compared on the same noise.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import hierdp
from hierdp.decompositions.suffix_tree import as_corpus
from hierdp.frontends.sequences import release_sequences

ALPHABET = "ABCDEFGH"
L_TOP = 20


def make_corpus(n: int, seed: int = 2016, m: int = 8, p_end: float = 0.15) -> list[str]:
    """``n`` sequences of a second-order Markov chain (vectorised over sequences)."""
    g = np.random.default_rng(seed)
    first = g.dirichlet(np.full(m, 0.3))
    trans = g.dirichlet(np.full(m, 0.3), size=(m + 1, m))  # (previous or 'start', last) -> next
    cap = 60
    seq = np.full((n, cap), -1, np.int64)
    alive = np.ones(n, bool)
    seq[:, 0] = g.choice(m, size=n, p=first)
    prev = np.full(n, m)
    for t in range(1, cap):
        alive &= g.random(n) >= p_end
        idx = np.flatnonzero(alive)
        if not idx.size:
            break
        law = trans[prev[idx], seq[idx, t - 1]]
        cdf = np.cumsum(law, axis=1)
        nxt = np.minimum((cdf < g.random(idx.size)[:, None]).sum(axis=1), m - 1)
        prev[idx] = seq[idx, t - 1]
        seq[idx, t] = nxt
    chars = np.array(list(ALPHABET))
    lengths = (seq >= 0).sum(axis=1)
    flat = chars[seq[seq >= 0]]
    joined = "".join(flat.tolist())
    ends = np.cumsum(lengths)
    return [joined[e - k:e] for e, k in zip(ends.tolist(), lengths.tolist())]


def true_top(seqs: list[str], max_len: int = 8) -> dict[str, int]:
    """NON-PRIVATE exact counts of every substring up to ``max_len`` symbols that occurs
    (n-grams hashed to base-m integers, counted with ``np.unique``)."""
    c = as_corpus(seqs, alphabet=ALPHABET, max_length=10 ** 6)
    m = len(ALPHABET)
    flat = c.flat  # '$' (code m) separates sequences
    out: dict[str, int] = {}
    for n in range(1, max_len + 1):
        if flat.size < n:
            break
        win = np.lib.stride_tricks.sliding_window_view(flat, n)
        ok = (win < m).all(axis=1)
        keys = (win[ok] * (m ** np.arange(n - 1, -1, -1))).sum(axis=1)
        u, cnt = np.unique(keys, return_counts=True)
        top = np.argsort(-cnt)[:300]
        for key, k in zip(u[top], cnt[top]):
            digits = [(int(key) // m ** (n - 1 - i)) % m for i in range(n)]
            out["".join(ALPHABET[d] for d in digits)] = int(k)
    return out


def precision(found: list[str], truth: dict[str, int], k: int, length: int | None = None) -> float:
    pool = {s: v for s, v in truth.items() if length is None or len(s) == length}
    best = set(sorted(pool, key=lambda s: (-pool[s], s))[:k])
    return len(best & set(found[:k])) / k


def evaluate(r, seqs, truth, syn_n: int = 100_000) -> dict[str, float]:
    out = {f"p@{k}": precision(list(r.top_k(k)["string"]), truth, k) for k in (10, 50, 100)}
    out["p@20,len4"] = precision(list(r.top_k(20, length=4)["string"]), truth, 20, length=4)
    top100 = sorted(truth, key=lambda s: -truth[s])[:100]
    t = np.array([truth[s] for s in top100], float)
    out["freq_re"] = float(np.mean(np.abs(r.frequency(top100) - t) / t))
    syn = r.sample_codes(syn_n, seed=0)[1]
    out["len_tvd"] = hierdp.metric("length_tvd")(np.array([len(s) for s in seqs]), syn, max_length=L_TOP)
    return out


def truncate_baseline(seqs, truth) -> dict[str, float]:
    """Non-private: the same figures on the data truncated to l⊤ symbols."""
    cut = [s[:L_TOP] for s in seqs]
    t_cut = true_top(cut)
    out = {f"p@{k}": precision(sorted(t_cut, key=lambda s: (-t_cut[s], s)), truth, k) for k in (10, 50, 100)}
    four = sorted((s for s in t_cut if len(s) == 4), key=lambda s: (-t_cut[s], s))
    out["p@20,len4"] = precision(four, truth, 20, length=4)
    top100 = sorted(truth, key=lambda s: -truth[s])[:100]
    t = np.array([truth[s] for s in top100], float)
    out["freq_re"] = float(np.mean([abs(t_cut.get(s, 0) - v) / v for s, v in zip(top100, t)]))
    out["len_tvd"] = hierdp.metric("length_tvd")([len(s) for s in seqs], [len(s) for s in cut], max_length=L_TOP)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    eps_list = [1.0] if args.quick else [0.2, 1.0, 1.6]
    reps = 2 if args.quick else 3
    t0 = time.perf_counter()
    seqs = make_corpus(100_000)
    lengths = np.array([len(s) for s in seqs])
    print(f"corpus: {len(seqs):,} sequences, mean length {lengths.mean():.2f}, "
          f"{(lengths >= L_TOP).mean():.1%} truncated at l⊤ = {L_TOP} "
          f"(generated in {time.perf_counter() - t0:.1f} s)")
    truth = true_top(seqs)
    base = truncate_baseline(seqs, truth)
    cols = ["p@10", "p@50", "p@100", "p@20,len4", "freq_re", "len_tvd"]
    print(f"{'method':>10} {'ε':>5} " + " ".join(f"{c:>10}" for c in cols))
    print(f"{'truncate':>10} {'-':>5} " + " ".join(f"{base[c]:10.3f}" for c in cols))
    for eps in eps_list:
        for hist in ("nonneg", "clamp"):
            rows = []
            nodes = []
            for rep in range(reps):
                r = release_sequences(seqs, epsilon=eps, max_length=L_TOP, alphabet=ALPHABET, histograms=hist,
                                      seed=100 + rep)
                nodes.append(r.tree.n_nodes)
                rows.append(evaluate(r, seqs, truth))
            mean = {c: float(np.mean([row[c] for row in rows])) for c in cols}
            print(f"{hist:>10} {eps:5.2g} " + " ".join(f"{mean[c]:10.3f}" for c in cols)
                  + f"   ({int(np.mean(nodes)):,} nodes)")
    # timing at 10⁶ sequences, secure randomness (no seed)
    big = make_corpus(1_000_000, seed=7)
    t = time.perf_counter()
    c = as_corpus(big, alphabet=ALPHABET, max_length=L_TOP)
    t_enc = time.perf_counter() - t
    t = time.perf_counter()
    r = release_sequences(c, epsilon=1.0, max_length=L_TOP, alphabet=ALPHABET)
    t_rel = time.perf_counter() - t
    t = time.perf_counter()
    r.top_k(100)
    t_top = time.perf_counter() - t
    t = time.perf_counter()
    r.sample_codes(1_000_000, seed=0)
    t_syn = time.perf_counter() - t
    print(f"10⁶ sequences ({c.target.size:,} predictions): encode {t_enc:.2f} s, structure + histograms + "
          f"nonneg {t_rel:.2f} s ({r.tree.n_nodes:,} nodes, height {r.tree.height}), top_k(100) {t_top:.2f} s, "
          f"10⁶ synthetic sequences {t_syn:.2f} s")


if __name__ == "__main__":
    main()
