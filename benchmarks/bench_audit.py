"""A larger privacy audit than the test suite runs: every registered mechanism, the
truncated Laplace, and the two broken mechanisms of the tests, with more draws.

    python benchmarks/bench_audit.py            # 4M draws per input
    python benchmarks/bench_audit.py --quick    # 400k draws per input

Prints the (95%) lower bound ε̂ next to the claimed ε, and the time taken.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hierdp
from hierdp.accounting.audit import audit, audit_mechanism
from hierdp.mechanisms import Laplace, TruncatedLaplace


class _HalfScaleLaplace(Laplace):
    name = "broken_half_scale_laplace"

    def sample(self, values, budget, sensitivity, rng):
        return super().sample(values, 2 * budget, sensitivity, rng)


def _binary_svt(q, m, rng, lam):
    g = np.random.default_rng(int(rng.words(1)[0] >> np.uint64(1)))
    th = 1 + g.laplace(0.0, lam, (m, 1))
    return (q[None, :] + g.laplace(0.0, lam, (m, q.size)) > th).astype(np.int8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    n = 400_000 if ap.parse_args().quick else 4_000_000
    rows = []
    for name in hierdp.registry.names("mechanism"):
        m = hierdp.registry.create("mechanism", name)
        rows.append((name, lambda m=m: audit_mechanism(m, 1.0 if m.budget_unit == "epsilon" else 0.5, n=n, seed=1)))
    rows.append(("truncated_laplace(δ=1e-3)", lambda: audit_mechanism(TruncatedLaplace(1e-3), 1.0, n=n, seed=1)))
    rows.append(("BROKEN half-scale laplace", lambda: audit_mechanism(_HalfScaleLaplace(), 1.0, n=n, seed=1)))
    k = 20
    x0 = np.ones(k, dtype=np.int64)
    x1 = np.r_[np.ones(k // 2), 2 * np.ones(k // 2)].astype(np.int64)
    w = np.r_[np.ones(k // 2), -np.ones(k // 2)]
    rows.append(("BROKEN binary SVT (k=20, λ=2/ε)",
                 lambda: audit(lambda x, m, r: _binary_svt(x, m, r, 2.0), x0, x1, statistic=lambda o: o @ w,
                               n=n // 4, seed=1, claimed=1.0)))
    print(f"draws per input: {n:,}")
    for label, run in rows:
        t0 = time.perf_counter()
        res = run()
        print(f"{label:34s} ε̂ >= {res.epsilon_lb:7.4f}   claimed {res.claimed:7.4f}   "
              f"{'VIOLATION' if res.violates else 'ok':9s} {time.perf_counter() - t0:6.1f} s")


if __name__ == "__main__":
    main()
