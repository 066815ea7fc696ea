"""Contract tests every noise mechanism must pass (built-in or plugin).

Subclass :class:`BaseMechanismTests` in your test module and provide a ``mechanism``
fixture returning an instance::

    import pytest
    from hierdp.testing import BaseMechanismTests

    class TestMine(BaseMechanismTests):
        @pytest.fixture
        def mechanism(self):
            return MyMechanism()

Optional fixture: ``budget`` (default 1.0 for ε mechanisms, 0.5 for ρ ones). What is
checked (each test takes about a second):

- class attributes: a non-empty snake_case ``name``, ``budget_unit`` in
  {"epsilon", "rho"}, boolean ``integer``;
- ``variance`` is positive and finite, ``inf`` at budget 0 (an unmeasured level),
  decreasing in the budget, larger at a larger sensitivity, and (unless the class sets
  ``scale_family = False``) *calibrated to sensitivity/budget*: the variance at
  sensitivity 2 equals the variance at sensitivity 1 with budget/2 (ε) or budget/4 (ρ);
- invalid budgets (negative, NaN, inf, a string) raise :class:`hierdp.BudgetError`;
- ``sample`` keeps the shape of ``(m,)`` and ``(m, k)`` values, returns integers for
  integer input when ``integer`` is set and floats otherwise, and does not modify its input;
- the noise is unbiased and its empirical variance matches the declared one
  (400 000 draws, within 6 standard errors, using the sample fourth moment);
- the same seeded source reproduces the same output, different seeds differ, and the
  default secure source works;
- a quick privacy audit (:func:`hierdp.accounting.audit.audit_mechanism`, 300 000 draws per input)
  gives a lower bound on ε below the mechanism's claim.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from hierdp.accounting.audit import audit_mechanism
from hierdp.errors import BudgetError
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.rng import SeededRandom, make_rng

__all__ = ["BaseMechanismTests"]


class BaseMechanismTests:
    """Contract suite for :class:`hierdp.mechanisms.Mechanism` implementations."""

    @pytest.fixture
    def mechanism(self) -> Mechanism:  # pragma: no cover - provided by subclasses
        raise NotImplementedError("provide a `mechanism` fixture returning an instance")

    @pytest.fixture
    def budget(self, mechanism: Mechanism) -> float:
        return 1.0 if mechanism.budget_unit == "epsilon" else 0.5

    # -- declaration ------------------------------------------------------------------
    def test_class_attributes(self, mechanism):
        assert isinstance(mechanism, Mechanism)
        assert isinstance(mechanism.name, str) and re.fullmatch(r"[a-z][a-z0-9_]*", mechanism.name)
        assert mechanism.budget_unit in ("epsilon", "rho")
        assert isinstance(mechanism.integer, bool)

    def test_variance_positive_and_decreasing(self, mechanism, budget):
        s = Sensitivity()
        v = [mechanism.variance(b, s) for b in (budget / 4, budget / 2, budget, 2 * budget)]
        assert all(math.isfinite(x) and x > 0 for x in v)
        assert v[0] > v[1] > v[2] > v[3]
        assert mechanism.variance(0.0, s) == math.inf

    def test_variance_calibrated_to_sensitivity(self, mechanism, budget):
        v2 = mechanism.variance(budget, Sensitivity(2.0, 2.0, 2.0))
        assert v2 > mechanism.variance(budget, Sensitivity())
        if not getattr(mechanism, "scale_family", True):
            return  # e.g. truncation ranges that depend on ε itself, not only on Δ/ε
        factor = 2.0 if mechanism.budget_unit == "epsilon" else 4.0
        v1 = mechanism.variance(budget / factor, Sensitivity())
        assert v2 == pytest.approx(v1, rel=1e-5)

    @pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "1"])
    def test_invalid_budget_raises(self, mechanism, bad):
        with pytest.raises(BudgetError, match="budget"):
            mechanism.variance(bad, Sensitivity())
        with pytest.raises(BudgetError, match="budget"):
            mechanism.sample(np.zeros(3, dtype=np.int64), bad, Sensitivity(), SeededRandom(0))

    # -- sampling -----------------------------------------------------------------------
    @pytest.mark.parametrize("shape", [(7,), (5, 3), (0,)])
    def test_shape_and_dtype(self, mechanism, budget, shape):
        vals = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
        before = vals.copy()
        out = np.asarray(mechanism.sample(vals, budget, Sensitivity(), SeededRandom(1)))
        assert out.shape == shape
        np.testing.assert_array_equal(vals, before)
        if mechanism.integer:
            assert np.issubdtype(out.dtype, np.integer)
        else:
            assert np.issubdtype(out.dtype, np.floating)
            fv = vals.astype(np.float64) + 0.25
            outf = np.asarray(mechanism.sample(fv, budget, Sensitivity(), SeededRandom(1)))
            assert outf.shape == shape and np.all(np.isfinite(outf))

    def test_noise_unbiased_with_declared_variance(self, mechanism, budget):
        n = 400_000
        vals = np.full((n // 4, 4), 1000, dtype=np.int64)
        out = np.asarray(mechanism.sample(vals, budget, Sensitivity(), SeededRandom(2)))
        z = (out.astype(np.float64) - 1000.0).ravel()
        declared = mechanism.variance(budget, Sensitivity())
        assert abs(z.mean()) < 6 * math.sqrt(declared / n)
        m2 = np.mean(z * z)
        m4 = np.mean(z ** 4)
        se = math.sqrt(max(m4 - m2 * m2, 0.0) / n)
        assert abs(m2 - declared) < 6 * se + 1e-12 * declared, (m2, declared, se)

    def test_reproducible_with_seed(self, mechanism, budget):
        vals = np.arange(200, dtype=np.int64)
        a = mechanism.sample(vals, budget, Sensitivity(), SeededRandom(7))
        b = mechanism.sample(vals, budget, Sensitivity(), SeededRandom(7))
        c = mechanism.sample(vals, budget, Sensitivity(), SeededRandom(8))
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)

    def test_secure_source_default(self, mechanism, budget):
        rng = make_rng(None)
        assert rng.secure
        out = mechanism.sample(np.zeros(50, dtype=np.int64), budget, Sensitivity(), rng)
        assert np.asarray(out).shape == (50,)

    # -- privacy --------------------------------------------------------------------------
    def test_quick_audit_below_claim(self, mechanism, budget):
        res = audit_mechanism(mechanism, budget, n=300_000, seed=11)
        assert res.epsilon_lb <= res.claimed, str(res)
