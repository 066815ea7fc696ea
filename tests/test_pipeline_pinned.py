"""Seeded releases are bit-identical across the pipeline refactoring (issue 29).

The digests below were computed on the code *before* ``pipeline.release`` was split into
steps and the privacy loss became one value (commit 24fd4fe): a sha256 over the released
arrays (estimate values and variances, measurements) and the ledger's guarantee and
per-level spends. A change in any bit of any of them changes the digest.
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
    return hierdp.release(t, v, rho=0.5, delta=1e-6, mechanism="discrete_gaussian", budget="optimal",
                          postprocess=["blue", "nonneg", "round"], seed=4)


def _approx_gaussian() -> hierdp.ReleaseResult:
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
                 "d0158ef2124261e3a1e412214696cd00050e7ff9df4818f875f088c0701d6a24"),
    "per_level_gaussian_chain": (_per_level_gaussian_chain,
                                "a1c0dc71f7bca4d9b831b8f071533ddeabc449ff58cb30b31c2d5a4cafb86b72"),
    "approx_gaussian": (_approx_gaussian,
                       "7731c89d5d0ddbb05abc1d80b0efb4ccaddd30ba2e2d6b55617bf9124a27b3bc"),
    "ghazi": (_ghazi,
             "b3313f62eaa5382488dd298c3037cff68f013531b3adf3e77602e44a16a8c025"),
    # re-pinned when nonneg's default became the top-down method (issue 30 item 3): the same
    # measurements and variances; {"name": "nonneg", "method": "global"} still gives the
    # original digest 4adc9e9b38ff78221a5c87698e8271b5fa2f58afdaf6a95323aba02cf6d4341f
    "invariants": (_invariants,
                  "5389597fa4c6ac8322417034e6b146f106d961f69d4b9a34822ae8fa1d40c76f"),
    "marginals_cells": (_marginals_cells,
                       "cb9f2c932aca4f34ed448fe8336d757bf59047ef61cc61797d329e687825a0e7"),
    "frame_cells_session": (_frame_cells_session,
                           "815d1aefbf1f3d7f1d0e39a5d1e4c47fc16dd9aa0879496e395550b04471f4c8"),
    "leaves": (_leaves_structure,
              "b8e68fe3909e794f21e6466b7caae8430b5a1f86f53b8567fdd497dddf167623"),
    # deep paths (issue 35 item 8): digests computed on c7312cc, before the per-level loop was made cheap
    "path_blue": (_path_blue, "dbcea96d03b1f3039a77bc1eea03ee4f06409afcbbcff3efb8bc340158f7fc18"),
    "path_nonneg_round": (_path_nonneg_round, "7ea58805ed94c3a39e0bd810f5d69dcb7a61dc5550f2996e54b874a905d8abb9"),
    "path_gmc": (_path_gmc, "b2fecdd646a4d2bb190a08be1a4895307761a5399319485ff63a2d131ae51348"),
    "path_discrete_gaussian": (_path_discrete_gaussian, "4161caf25e03081f0352f85f7865c4f264e25b02e5c665fe47d4276179746046"),
    "path_laplace": (_path_laplace, "8e51b347da3c84b842fe76bae4086c7afcd5979b80cf201625e8c1fe59e52c99"),
    "privtree_structure": (_privtree_structure,
                          "018a0c8c05990449b5307d70f88548e88f2b5bf683ceae82b685bfabbf17758d"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_seeded_release_is_bit_identical_to_the_original_code(name):
    make, expected = CASES[name]
    assert _digest(make()) == expected
