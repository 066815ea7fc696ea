"""Seeded releases are bit-identical across the pipeline refactoring (issue 29).

The digests below were computed on the code *before* ``pipeline.release`` was split into
steps and the privacy loss became one value (commit 24fd4fe): a sha256 over the released
arrays (estimate values and variances, measurements) and the ledger's guarantee and
per-level spends. A change in any bit of any of them changes the digest.

Re-pinned once on purpose (issue 30 item 2, noise keyed per node): releases of the
``per_level``, ``leaves`` and ``marginals`` plans now draw their noise from keyed streams
(:mod:`hierdp.keyed_noise`, key SHA-256(tag, seed)) instead of the seeded PCG64 stream.
Before re-pinning, every case was checked to differ in the noise only: the same tree,
the same estimate and measurement variances and the same ledger text (release id and
time aside) as before; ``ghazi`` (plain stream) kept its digest.

``marginals_cells`` re-pinned once more (issue 30, the Helmert rotation compiled): the
rotation now takes O(m) cumulative sums with reciprocal norms instead of BLAS products
with the Helmert matrix, so the GLS estimate moved in its last bits (at most 3e-14
relative, checked before re-pinning); the noise, the measurement variances and the ledger
are unchanged.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

import hierdp

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _digest(r: hierdp.ReleaseResult) -> str:
    h = hashlib.sha256()
    for a in (r.estimate.values, r.estimate.variance, r.measurements.values, r.measurements.variance):
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    led = r.ledger
    h.update(json.dumps([led.guarantee, led.epsilon, led.delta, led.rho, led.plan, led.postprocess,
                         led.invariants, led.neighbours,
                         [(lv.level, lv.budget, lv.unit, lv.noise_variance, lv.delta) for lv in led.levels]],
                        default=repr).encode())
    return h.hexdigest()


def _tree_and_values() -> tuple[hierdp.Tree, np.ndarray]:
    tree = hierdp.Tree.complete(fanout=3, height=4)
    leaves = np.random.default_rng(0).integers(0, 20, tree.n_leaves)
    return tree, tree.aggregate(leaves)


def _per_level() -> hierdp.ReleaseResult:
    t, v = _tree_and_values()
    return hierdp.release(t, v, epsilon=1.0, seed=3)


def _per_level_gaussian_chain() -> hierdp.ReleaseResult:
    t, v = _tree_and_values()
    return hierdp.release(t, v, rho=0.5, delta=1e-6, mechanism="discrete_gaussian", budget="greedy",
                          postprocess=["blue", "nonneg", {"name": "round", "method": "remainder"}], seed=4)


def _approx_gaussian() -> hierdp.ReleaseResult:
    # the calibration before issue 34 (Bun & Steinke 2016): still bit-identical when asked for
    t, v = _tree_and_values()
    return hierdp.release(t, v, epsilon=hierdp.PrivacyLoss(epsilon=1.0, delta=1e-6, accountant="zcdp"),
                          mechanism="gaussian", seed=5)


def _approx_gaussian_tight() -> hierdp.ReleaseResult:
    # issue 34: the default accountant calibrates on the analytic Gaussian (less noise, same seed)
    t, v = _tree_and_values()
    return hierdp.release(t, v, epsilon=1.0, delta=1e-6, mechanism="gaussian", seed=5)


def _ghazi() -> hierdp.ReleaseResult:
    t, v = _tree_and_values()
    return hierdp.release(t, v * 50, plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-6, seed=6)


def _invariants() -> hierdp.ReleaseResult:
    t, v = _tree_and_values()
    return hierdp.release(t, v, epsilon=0.7, seed=7, neighbours="substitute", invariants=["total", "level_1"],
                          postprocess=["blue", "nonneg"])


def _marginals_cells() -> hierdp.ReleaseResult:
    t = hierdp.Tree.complete(fanout=2, height=3)
    cells = np.random.default_rng(1).integers(0, 9, (t.n_leaves, 6))
    v = t.aggregate(cells)
    plan = {"name": "marginals", "cells": {"age": 3, "sex": 2},
            "strategy": {(): 0.3, ("age",): 0.2, ("age", "sex"): 0.5}}
    return hierdp.release(t, v, plan=plan, epsilon=2.0, seed=8, neighbours="substitute", invariants=["total"])


def _frame_cells_session() -> hierdp.ReleaseResult:
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"state": rng.choice(["A", "B"], 300), "county": rng.choice(["x", "y", "z"], 300),
                       "sex": rng.choice(["F", "M"], 300)})
    s = hierdp.Session(epsilon=2.0)
    dpt = df.dptree(levels=["state", "county"], domains="observed", cells={"sex": ["F", "M"]})
    return dpt.release(epsilon=1.0, seed=9, session=s, budget={"total": 0.2, "state": 0.3, "county": 0.5})


def _leaves_structure() -> hierdp.ReleaseResult:
    t, v = _tree_and_values()
    return hierdp.release(t, v, plan={"name": "leaves", "mechanism": "laplace"}, epsilon=0.9, seed=10)


def _privtree_structure() -> hierdp.ReleaseResult:
    rng = np.random.default_rng(3)
    pts = pd.DataFrame(np.vstack([rng.normal([0.3, 0.3], 0.02, (600, 2)), rng.uniform(0, 1, (200, 2))]).clip(0, 1),
                       columns=["x", "y"])
    return pts.dptree.privtree(columns=["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=11)


def _path_and_values() -> tuple[hierdp.Tree, np.ndarray]:
    """A path of 10³ levels (one node each): many levels, the per-level loop's worst case."""
    tree = hierdp.Tree.from_parent(np.arange(-1, 999))
    return tree, tree.aggregate(np.random.default_rng(1).integers(0, 20, tree.n_leaves))


def _path_blue() -> hierdp.ReleaseResult:
    t, v = _path_and_values()
    return hierdp.release(t, v, epsilon=1.0, seed=3)


def _path_nonneg_round() -> hierdp.ReleaseResult:
    t, v = _path_and_values()
    return hierdp.release(t, v, epsilon=1.0, seed=4, postprocess=["blue", "nonneg", "round"])


def _path_gmc() -> hierdp.ReleaseResult:
    t, v = _path_and_values()
    return hierdp.release(t, v, epsilon=1.0, seed=5, postprocess="gmc")


def _path_discrete_gaussian() -> hierdp.ReleaseResult:
    t, v = _path_and_values()
    return hierdp.release(t, v, rho=0.5, delta=1e-6, mechanism="discrete_gaussian",
                          postprocess=["blue", "nonneg", "round"], seed=11)


def _path_laplace() -> hierdp.ReleaseResult:
    t, v = _path_and_values()
    return hierdp.release(t, v, epsilon=1.0, mechanism="laplace", seed=13)


CASES = {
    "per_level": (_per_level,
                 "858f512557a7931294146a0909acdfa15a222b7a5da0f532287404598d97e434"),
    # re-pinned in session 19 with its cause found: the digest followed the CPU through OpenBLAS
    # (OPENBLAS_CORETYPE=Sandybridge on one machine gave another digest than the default kernel):
    # the discrete Gaussian's variance summed with np.dot (BLAS ddot; now math.fsum) and the
    # optimal split's SLSQP (BLAS inside; the split moved in its 4th digit). The case now takes
    # the greedy split; the digest is the same under the Sandybridge, Prescott and default kernels
    "per_level_gaussian_chain": (_per_level_gaussian_chain,
                                "0711a58dbf41152d2362d1093cea6e45c6dcc3cc60ca6733dfe7e6bab6f7468f"),
    "approx_gaussian": (_approx_gaussian,
                       "c14c064322a26f957f9266e7f251be4c2054b717f06a42eeea81663fb46ad889"),
    # pinned on branch tight (issue 34) after checking the ledger's ρ is the analytic Gaussian's;
    # re-pinned at the merge with keyed noise (issue 30): the same ρ, the noise keyed per node
    "approx_gaussian_tight": (_approx_gaussian_tight,
                             "46f1eebb3f9b74cfed714d304b76647ff5851f604d52aa8e146e4e1afc5d002b"),
    # re-pinned on branch acct2 (issue 34): the ledger's ε is the optimal composition of the plan's
    # (ε, δ) steps, 0.98700 instead of 1.0; with ledger.epsilon set back to 1.0 the digest is the
    # original b3313f62… (the same noise, estimates, δ and levels)
    "ghazi": (_ghazi,
             "3a728c7ca26534e1a22f0505e358241d58ba2df457f47248f5e5a8e0f05ee4f5"),
    # re-pinned when nonneg's default became the top-down method (issue 30 item 3): the same
    # measurements and variances; {"name": "nonneg", "method": "global"} gave the original
    # digest 4adc9e9b… before noise was keyed per node (5bee0757… after); re-pinned at that merge
    "invariants": (_invariants,
                  "37c3a08829afadf484e33bd2a0a88c985b6c3a2b8b111209d9987a07049043b7"),
    "marginals_cells": (_marginals_cells,
                       "b94187b921f13275209b3e8526b57eaea11be2501d5918ca4226956a35c5f352"),
    "frame_cells_session": (_frame_cells_session,
                           "8eef4d6d8fc183dfaa5f0c8f19cd5dd16d4ffb3cb17fafb4f206d670e5a88406"),
    "leaves": (_leaves_structure,
              "204ff61308f3ca4b30ce044948d365088800d7c74d42c73c50d8339248b9ed86"),
    # deep paths (issue 35 item 8): digests computed on c7312cc, before the per-level loop was made cheap
    "path_blue": (_path_blue, "5f7d17c8ee33b4789fa545de0ec67f78f7cd99bb6791c6a220a068a4f9eee239"),
    "path_nonneg_round": (_path_nonneg_round, "dc1477f17b79f5d62af24f8aeb6fd7a0eaa33be7076dc2e088ea27b30a4ca20e"),
    "path_gmc": (_path_gmc, "84eb8197a29acd5cb30ca80a756d3448e0a5f45cb2ec6ea7feccb9abcdaed24d"),
    "path_discrete_gaussian": (_path_discrete_gaussian, "352624f2194e9c0a655daeb92fb7d679076556f1d6cca02bf74a4b318acf48f4"),
    "path_laplace": (_path_laplace, "8388a7b81f9546714b629d406d34f2da82acc1f74d6ac10e1f1e366ea4f3edec"),
    "privtree_structure": (_privtree_structure,
                          "86c8cad91df31bd32c8862c04c02679b9089ac6fb062c2dd13cc8033dcc04094"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeded_release_is_bit_identical_to_the_original_code(name):
    make, expected = CASES[name]
    assert _digest(make()) == expected
