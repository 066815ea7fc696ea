"""The marginals plan calibrates (ε, δ) requests as plan 'per_level' does (issue 34 item 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hierdp
from hierdp.accounting import PrivacyLoss
from hierdp.accounting.accountants import ANALYTIC, BASIC, ZCDP, bs16_rho, cks_rho
from hierdp.report import query_rows
from tests.test_accounting_tight import _mp_delta, _mp_mu

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _data() -> tuple[hierdp.Tree, np.ndarray]:
    t = hierdp.Tree.complete(fanout=3, height=3)
    return t, t.aggregate(np.random.default_rng(0).integers(0, 5, (t.n_leaves, 4)))


def _plan(mechanism: str) -> dict:
    return {"name": "marginals", "strategy": {("a", "b"): 0.5, ("a",): 0.3, (): 0.2}, "cells": {"a": 2, "b": 2},
            "mechanism": mechanism}


def test_gaussian_marginals_sit_on_the_analytic_curve():
    """Every marginal query's Gaussian noise together is one Gaussian mechanism,
    μ² = Σ_q Δ_q²/σ_q² (Δ_q = 1: one row moves one cell of each marginal), read here from
    the released per-query variances: it meets (1, 1e-6) on Balle & Wang's curve (50 digits)
    and is within 1e-6 of the largest μ that does."""
    t, v = _data()
    led = hierdp.release(t, v, epsilon=1.0, delta=1e-6, seed=2, plan=_plan("gaussian"))
    assert led.ledger.certified_by == ANALYTIC
    mu = math.sqrt(sum(1.0 / q["variance"] for q in query_rows(led)))
    assert _mp_delta(1.0, mu) <= 1e-6
    assert mu == pytest.approx(_mp_mu(1.0, 1e-6), rel=1e-5)


def test_old_calibration_and_other_mechanisms_are_kept():
    t, v = _data()
    old = hierdp.release(t, v, epsilon=PrivacyLoss(epsilon=1.0, delta=1e-6, accountant="zcdp"), seed=2,
                         plan=_plan("gaussian")).ledger
    assert old.certified_by == ZCDP and old.rho == pytest.approx(bs16_rho(1.0, 1e-6), rel=1e-12)
    dg = hierdp.release(t, v, epsilon=1.0, delta=1e-6, seed=2, plan=_plan("discrete_gaussian")).ledger
    assert dg.certified_by == ZCDP and dg.rho == pytest.approx(cks_rho(1.0, 1e-6), rel=1e-12)
    pure = hierdp.release(t, v, epsilon=0.7, seed=2, plan=_plan("laplace")).ledger
    assert (pure.epsilon, pure.guarantee, pure.certified_by) == (0.7, "pure", BASIC)
