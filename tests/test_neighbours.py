"""Neighbour relations: add/remove (default) and substitution (bounded DP).

Sensitivities are checked against hand-computed values and a brute-force enumeration of
every substitution of one unit; the ledger states the relation; an empirical audit of a
substitution release stays within its claim, and catches add/remove calibration used for
a substitution claim.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import rules
from hierdp.accounting.audit import audit
from hierdp.accounting.ledger import Ledger
from hierdp.errors import PrivacyError
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.per_level import PerLevel
from hierdp.rng import make_rng

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

SQ2 = math.sqrt(2.0)


def test_substitution_sensitivity_hand_values():
    s = Sensitivity().for_neighbours("substitute")
    assert (s.l1, s.l2, s.linf) == (2.0, SQ2, 1.0)
    s3 = Sensitivity.bounded(3).for_neighbours("substitute")
    assert (s3.l1, s3.l2, s3.linf) == (6.0, 3 * SQ2, 3.0)
    assert Sensitivity.bounded(3).for_neighbours("add_remove") == Sensitivity.bounded(3)
    assert rules.sensitivity_floor(None, "substitute")[0] == Sensitivity(2.0, SQ2, 1.0)
    floor, how = rules.sensitivity_floor(2, "substitute")
    assert (floor.l1, floor.l2) == (4.0, 2 * SQ2) and "substitution" in how


@pytest.mark.parametrize("c", [1, 2, 3])
def test_substitution_sensitivity_is_the_worst_case_by_enumeration(c):
    """Every unit holding c rows over 3 nodes of a level, substituted by every other: the
    largest L1 and L2 change is 2c and sqrt(2) c, as Sensitivity.for_neighbours states."""
    nodes = 3
    contribs = set()
    for rows in range(c + 1):
        for placement in itertools.combinations_with_replacement(range(nodes), rows):
            contribs.add(tuple(np.bincount(np.array(placement, dtype=int), minlength=nodes)))
    vecs = np.array(sorted(contribs), dtype=float)
    diff = vecs[:, None, :] - vecs[None, :, :]
    l1 = np.abs(diff).sum(-1).max()
    l2 = np.sqrt((diff ** 2).sum(-1)).max()
    s = Sensitivity.bounded(c).for_neighbours("substitute")
    assert l1 == pytest.approx(s.l1) and l2 == pytest.approx(s.l2)
    # and add/remove (one side empty) gives c, c
    add = vecs[np.abs(vecs).sum(1) > 0]
    assert np.abs(add).sum(1).max() == Sensitivity.bounded(c).l1
    assert np.sqrt((add ** 2).sum(1)).max() == Sensitivity.bounded(c).l2


def test_marginal_sensitivity_covers_every_marginal_by_enumeration():
    """2 x 2 cells, c = 2 rows per unit: summing cells can raise L2 above the histogram's
    declared l2 but never above the bound of rules.marginal_sensitivity."""
    c = 2
    cells = 4
    vecs = []
    for rows in range(c + 1):
        for placement in itertools.combinations_with_replacement(range(cells), rows):
            vecs.append(np.bincount(np.array(placement, dtype=int), minlength=cells).astype(float))
    vecs = np.array(vecs)
    A_rows = vecs.reshape(-1, 2, 2).sum(axis=2)  # marginal over the 2nd dimension
    A_tot = vecs.sum(axis=1, keepdims=True)
    for neighbours in ("add_remove", "substitute"):
        level = Sensitivity(l1=float(c), l2=1.0).for_neighbours(neighbours)  # a (too) small declared l2
        m = rules.marginal_sensitivity(level, neighbours)
        for marg in (A_rows, A_tot):
            if neighbours == "add_remove":
                d = marg
            else:
                d = (marg[:, None, :] - marg[None, :, :]).reshape(-1, marg.shape[1])
            assert np.sqrt((d ** 2).sum(1)).max() <= m.l2 + 1e-12
            assert np.abs(d).sum(1).max() <= m.l1 + 1e-12


def _release(neighbours="substitute", **kw):
    t = hierdp.Tree.complete(fanout=2, height=3)
    vals = t.aggregate(np.array([3, 1, 4, 1]))
    return hierdp.release(t, vals, epsilon=1.0, seed=3, neighbours=neighbours, **kw)


def test_release_calibrates_and_the_ledger_states_the_relation():
    r = _release(budget={"total": 0.2, "level_1": 0.3, "level_2": 0.5})
    led = r.ledger
    assert led.neighbours == "substitute"
    assert "substitute one unit's records" in str(led)
    for ls in led.levels:
        assert (ls.sensitivity_l1, ls.sensitivity_l2) == (2.0, SQ2)
        # discrete Laplace with scale t = L1 / eps: variance 2 e^{-1/t} / (1 - e^{-1/t})^2
        a = math.exp(-ls.budget / 2.0)
        # (the exact sampler rounds the scale to a rational: agreement to 1e-6)
        assert ls.noise_variance == pytest.approx(2 * a / (1 - a) ** 2, rel=1e-6)
    default = _release(neighbours="add_remove")
    assert default.ledger.neighbours == "add_remove" and default.ledger.levels[0].sensitivity_l1 == 1.0


def test_gaussian_substitution_variance_hand_value():
    t = hierdp.Tree.complete(fanout=2, height=2)
    r = hierdp.release(t, np.array([2.0, 1.0, 1.0]), rho=0.5, mechanism="gaussian", seed=1,
                       neighbours="substitute", budget={"total": 0.25, "level_1": 0.25})
    # continuous Gaussian: sigma^2 = L2^2 / (2 rho) with L2 = sqrt(2): 2 / 0.5 = 4
    assert [ls.noise_variance for ls in r.ledger.levels] == pytest.approx([4.0, 4.0])


def test_declared_sensitivity_below_the_substitution_floor_is_refused():
    with pytest.raises(PrivacyError, match="smaller than one privacy unit can change"):
        _release(sensitivity=Sensitivity(l1=1.0, l2=1.0))
    ok = _release(sensitivity=Sensitivity(l1=2.0, l2=1.5))
    assert ok.ledger.levels[0].sensitivity_l1 == 2.0


def test_unknown_relation_is_refused():
    with pytest.raises(PrivacyError, match="neighbours must be 'add_remove'"):
        _release(neighbours="swap")


def test_ledger_json_round_trip_and_old_ledgers():
    led = _release().ledger
    back = Ledger.from_json(led.to_json())
    assert back.neighbours == "substitute"
    d = json.loads(led.to_json())
    d.pop("neighbours")
    d.pop("invariants")
    assert Ledger.from_dict(d).neighbours == "add_remove"  # written before the field existed


def test_conversions_are_conservative_one_way():
    assert rules.convert_guarantee({"epsilon": 1.0}, "add_remove", "substitute") == {"epsilon": 2.0}
    assert rules.convert_guarantee({"rho": 0.5}, "add_remove", "substitute") == {"rho": 2.0}
    g = rules.convert_guarantee({"epsilon": 1.0, "delta": 1e-6}, "add_remove", "substitute")
    assert g["epsilon"] == 2.0 and g["delta"] == pytest.approx((1 + math.e) * 1e-6)
    with pytest.raises(PrivacyError, match="implies none under add/remove"):
        rules.convert_guarantee({"epsilon": 1.0}, "substitute", "add_remove")


def test_dptree_bound_scales_with_the_relation():
    df = pd.DataFrame({"state": ["A", "A", "B", "B"], "pid": [1, 1, 2, 3]})
    dpt = df.dptree(levels=["state"], domains="observed", unit="pid", max_contributions=2)
    r = dpt.release(epsilon=1.0, seed=2, neighbours="substitute")
    assert (r.ledger.levels[1].sensitivity_l1, r.ledger.levels[1].sensitivity_l2) == (4.0, 2 * SQ2)
    assert r.ledger.neighbours == "substitute"
    with pytest.raises(PrivacyError, match="smaller than one privacy unit"):
        dpt.release(epsilon=1.0, seed=2, neighbours="substitute", sensitivity=Sensitivity(l1=2, l2=2))


def _laplace_llr(noisy, x0, x1, scale):
    """Log-likelihood ratio of x1 over x0 for Laplace-type noise (per-node scales)."""
    return ((np.abs(noisy - x0) - np.abs(noisy - x1)) / scale).sum(axis=1)


@pytest.mark.parametrize("calibration,violates", [("substitute", False), ("add_remove", True)])
def test_audit_of_a_substitution_release(calibration, violates):
    """One person moves from one leaf to a leaf of another branch (every measured level
    changes by 2 in L1). Calibrated for substitution the audit stays within ε; calibrated
    for add/remove (sensitivity 1) the true loss is 2ε and the audit catches it."""
    eps = 1.0
    t = hierdp.Tree.complete(fanout=2, height=3)
    x0 = t.aggregate(np.array([5, 0, 0, 2]))
    x1 = t.aggregate(np.array([4, 0, 0, 3]))  # substitution: same total
    plan = PerLevel(mechanism="discrete_laplace", budget={"total": 0.0, "level_1": 0.5, "level_2": 0.5})
    sens = Sensitivity().for_neighbours(calibration)
    scale = np.array([np.inf, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]) ** -1 * sens.l1  # Laplace scales per node

    def sample(x, m, rng):
        vals = np.ascontiguousarray(np.broadcast_to(t.to_internal(x)[:, None], (t.n_nodes, m)))
        meas = plan.measure(t, vals, total=eps, delta=None, sensitivity=sens, rng=rng)
        return t.to_external(meas.values).T[:, 1:]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = audit(sample, x0, x1, statistic=lambda out: _laplace_llr(out, x0[1:], x1[1:], scale[1:]),
                    n=60_000, claimed=eps, rng=make_rng(11))
    assert res.violates is violates, str(res)
