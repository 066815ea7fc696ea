"""``result.accuracy()``: the error of the released values by a parametric bootstrap on the
released table (hierdp.accuracy; issue 53 item 1).

References: the discrete Laplace law summed by hand (E|Z| = 2q/(1-q^2), P(|Z| <= k) =
1 - 2q^(k+1)/(1+q)) and, for the acceptance criterion, the empirical error of 40 releases
against their known true counts (the test reads them; the method never does).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp.errors import DataError

CHAIN = ["blue", "nonneg", {"name": "round", "method": "topdown"}]


def _release(tree, values, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded releases warn: not for publication
        return hierdp.release(tree, values, **kw)


def _sparse_tree(states: int = 8, counties: int = 12, seed: int = 7):
    """Three levels (total, state, county); 60% of the counties empty, the others Poisson(20)."""
    gen = np.random.default_rng(seed)
    parent = np.concatenate([[-1], np.zeros(states, np.int64), np.repeat(np.arange(1, states + 1), counties)])
    tree = hierdp.Tree.from_parent(parent)
    leaves = np.where(gen.random(states * counties) < 0.6, 0, gen.poisson(20, states * counties)).astype(np.int64)
    return tree, tree.aggregate(leaves)


def test_root_only_without_postprocessing_is_the_noise_law():
    # one measured node, no chain: the released root is truth + Z, Z ~ discrete Laplace(scale 1/ε)
    tree = hierdp.Tree.from_parent(np.array([-1, 0, 0]))
    values = np.array([30, 10, 20])
    eps = 0.7
    r = _release(tree, values, epsilon=eps, budget={"total": eps, "level_1": 0.0}, postprocess=[], seed=3)
    acc = r.accuracy(0.9, repetitions=40_000, seed=11)
    assert list(acc["level"]) == ["total"]          # the leaves were not measured: no released value
    assert acc["units"].tolist() == [1]
    q = math.exp(-eps)
    mae = 2 * q / (1 - q * q)                        # E|Z| = 2 (1-q)/(1+q) * sum_k k q^k
    se = math.sqrt(2 * q * (1 + q * q) / (1 - q * q) ** 2 / 40_000)   # sd(|Z|)/sqrt(R), E Z^2 by hand
    assert abs(acc["mae"].iloc[0] - mae) < 4 * se
    # moe: the smallest k with P(|Z| <= k) >= 0.9 (here P(|Z| <= 2) = 0.836, P(|Z| <= 3) = 0.919)
    k = next(k for k in range(100) if 1 - 2 * q ** (k + 1) / (1 + q) >= 0.9)
    assert k == 3 and acc["moe"].iloc[0] == k
    assert "parametric bootstrap, 40000 repetitions" in acc.attrs["method"]
    assert acc.attrs["reads_true_counts"] is False


@pytest.mark.parametrize("mechanism,loss", [("discrete_laplace", {"epsilon": 1.0}),
                                            ("discrete_gaussian", {"rho": 0.5})])
def test_stated_accuracy_matches_the_empirical_error_over_40_releases(mechanism, loss):
    # the acceptance: stated MAE per level within 30% of the empirical one, and the
    # stated 90% margin covers 85-95% of the units' errors (pooled)
    tree, values = _sparse_tree()
    depth = np.asarray(tree.depth)
    stated, empirical, covered = [], [], []
    for i in range(40):
        r = _release(tree, values, mechanism=mechanism, postprocess=CHAIN, seed=1000 + i, **loss)
        acc = r.accuracy(0.9, repetitions=100, seed=i)
        assert list(acc["level"]) == ["total", "level_1", "level_2"]
        err = np.abs(np.asarray(r.values, np.float64) - values)          # the truth, read by the test only
        stated.append(acc["mae"].to_numpy())
        empirical.append([err[depth == d].mean() for d in range(3)])
        covered.append(err <= acc["moe"].to_numpy()[depth])
    ratio = np.mean(stated, axis=0) / np.mean(empirical, axis=0)
    coverage = float(np.mean(covered))
    print(f"{mechanism}: MAE stated/empirical per level {np.round(ratio, 3).tolist()}, coverage {coverage:.3f}")
    assert np.all(np.abs(ratio - 1) <= 0.30), ratio
    assert 0.85 <= coverage <= 0.95, coverage


def test_by_size_bands_and_the_chain_it_reran():
    tree, values = _sparse_tree()
    r = _release(tree, values, epsilon=1.0, postprocess=CHAIN, seed=5)
    acc = r.accuracy(repetitions=50, by_size=True, seed=2)
    assert list(acc.columns) == ["level", "size", "units", "mae", "moe"]
    assert acc.attrs["chain"] == "blue -> nonneg (topdown) -> round (topdown)"   # method recovered
    # each unit in the band of its released total, every band with at least one unit
    released = np.asarray(r.values)
    depth = np.asarray(tree.depth)
    bands = pd.cut(released, [-np.inf, 0.5, 9.5, 99.5, 999.5, np.inf], right=False,
                   labels=["0", "1-9", "10-99", "100-999", "1000+"])
    expected = pd.crosstab(pd.Series(np.asarray(tree.level_names)[depth]), bands)
    for _, row in acc.iterrows():
        assert row["units"] == expected.loc[row["level"], row["size"]] > 0
    assert acc["units"].sum() == tree.n_nodes
    # the bands split the level: their unit-weighted MAE is the level's (same seed, same draws)
    whole = r.accuracy(repetitions=50, seed=2)
    for level, part in acc.groupby("level", observed=True):
        want = whole.loc[whole["level"] == level, "mae"].iloc[0]
        assert math.isclose((part["mae"] * part["units"]).sum() / part["units"].sum(), want, rel_tol=1e-9)


def test_seed_reproduces_and_default_is_secure():
    tree, values = _sparse_tree()
    r = _release(tree, values, epsilon=1.0, postprocess=CHAIN, seed=5)
    a, b = r.accuracy(repetitions=30, seed=4), r.accuracy(repetitions=30, seed=4)
    pd.testing.assert_frame_equal(a, b)
    c, d = r.accuracy(repetitions=30), r.accuracy(repetitions=30)
    assert not np.array_equal(c["mae"].to_numpy(), d["mae"].to_numpy())


def test_cells_use_the_unit_total():
    # (n, k) cells: the unit is the node, its error that of its total over the cells;
    # all budget on the root, no chain: the root total's error is the sum of k independent draws
    tree = hierdp.Tree.from_parent(np.array([-1, 0, 0]))
    values = np.array([[3, 4], [1, 2], [2, 2]])
    r = _release(tree, values, epsilon=1.0, budget={"total": 1.0, "level_1": 0.0}, postprocess=[], seed=3)
    acc = r.accuracy(0.9, repetitions=40_000, seed=1)
    q = math.exp(-1.0)
    z = np.arange(-60, 61)
    p = (1 - q) / (1 + q) * q ** np.abs(z)
    s = np.convolve(p, p)                        # law of Z1 + Z2 on -120..120
    mae = float(np.dot(np.abs(np.arange(-120, 121)), s))
    assert abs(acc["mae"].iloc[0] - mae) < 0.03


def test_refuses_what_it_cannot_resimulate():
    tree, values = _sparse_tree()
    r = _release(tree, values, plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-6, seed=1,
                 postprocess=[])
    with pytest.raises(DataError, match="cannot re-simulate this release: plan 'ghazi'"):
        r.accuracy()
    ok = _release(tree, values, epsilon=1.0, postprocess=CHAIN, seed=1)
    for bad in (dict(confidence=1.0), dict(confidence=(0.9, 0.95)), dict(repetitions=0), dict(repetitions=True)):
        with pytest.raises(DataError):
            ok.accuracy(**bad)


def test_refuses_a_chain_it_cannot_reproduce():
    # the ledger keeps step names only: a release whose values the named chain does not give
    # back (here: tampered with) is refused instead of simulated with the wrong chain
    tree, values = _sparse_tree()
    r = _release(tree, values, epsilon=1.0, postprocess=CHAIN, seed=1)
    r.estimate.values[0] += 1
    with pytest.raises(DataError, match="cannot re-run this release's post-processing"):
        r.accuracy(repetitions=10)


def test_weighted_quantile_equals_the_repeated_rows():
    # a subsampled row stands for several units: its weight must act as that many copies
    from hierdp.accuracy import _quantile

    gen = np.random.default_rng(0)
    errors = gen.integers(0, 20, (7, 5)).astype(np.float32)
    weight = np.array([1, 3, 1, 2, 5, 1, 4], dtype=np.float64)
    full = np.repeat(errors, weight.astype(int), axis=0).reshape(-1)
    for c in (0.1, 0.5, 0.9, 0.95):
        assert _quantile(errors, weight, c) == np.quantile(full, c, method="inverted_cdf")


def test_subsampled_margin_stays_close(monkeypatch):
    # above QUANTILE_CAP errors a row keeps a random subset of its units for the margin (the
    # mean uses all): with a small cap the margins stay those of the full simulation within a step
    import hierdp.accuracy as A

    tree, values = _sparse_tree()
    r = _release(tree, values, epsilon=1.0, postprocess=CHAIN, seed=5)
    full = r.accuracy(repetitions=200, seed=9)
    monkeypatch.setattr(A, "QUANTILE_CAP", 200 * 30)
    part = r.accuracy(repetitions=200, seed=9)
    np.testing.assert_allclose(part["mae"], full["mae"], rtol=1e-12)      # the mean reads every error
    assert np.all(np.abs(part["moe"].to_numpy() - full["moe"].to_numpy()) <= 1)


def test_the_ledger_records_each_steps_parameters_and_a_rerun_takes_them():
    # the ledger keeps each step's parameters beside its name (and through JSON); the chain
    # rebuilt from it gives back the released integers from the measurements, where the names
    # alone (round's default method, topdown in passes) give other integers
    from hierdp.postprocessors.base import Measurements
    from hierdp.postprocessors.chain import ledger_chain, resolve_postprocessors, run_chain

    tree, values = _sparse_tree()
    r = _release(tree, values, epsilon=0.5, postprocess=["blue", "nonneg", {"name": "round", "method": "remainder"}],
                 seed=5)
    assert r.ledger.postprocess == ["blue", "nonneg", "round"]
    assert r.ledger.postprocess_params == [{}, {}, {"method": "remainder"}]
    again = hierdp.Ledger.from_json(r.ledger.to_json())
    assert again.postprocess_params == r.ledger.postprocess_params
    m = r.measurements
    meas = Measurements(np.asarray(tree.to_internal(m.values), float), np.asarray(tree.to_internal(m.variance), float),
                        info=dict(m.info), tiebreak=m.tiebreak)
    released = np.asarray(tree.to_internal(r.estimate.values))
    rerun = run_chain(tree, meas, resolve_postprocessors(ledger_chain(again.postprocess, again.postprocess_params)))
    np.testing.assert_array_equal(np.asarray(rerun.values), released)
    names_only = run_chain(tree, meas, resolve_postprocessors(again.postprocess))
    assert not np.array_equal(np.asarray(names_only.values), released)
    # a ledger written before the parameters were recorded: the names, as before
    assert ledger_chain(["blue", "round"], []) == ["blue", "round"]
