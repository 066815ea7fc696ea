"""The empirical privacy auditor: correct mechanisms audit below their claims, broken
ones (Laplace with half the scale, PrivTree's "binary SVT") are caught."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hierdp
from hierdp.accounting.audit import audit, audit_mechanism, clopper_pearson, epsilon_lower_bound
from hierdp.mechanisms import DiscreteLaplace, Laplace, Sensitivity, TruncatedLaplace
from hierdp.mechanisms.svt import TOP, sparse
from hierdp.rng import RandomSource
from hierdp.tree import Tree


def test_clopper_pearson_closed_forms():
    # k = 0: upper = 1 - (α/2)^(1/n); k = n: lower = (α/2)^(1/n)
    lo, hi = clopper_pearson(0, 10, 0.05)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1, rel=1e-9)
    lo, hi = clopper_pearson(10, 10, 0.05)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** 0.1, rel=1e-9)


def test_epsilon_lower_bound_formula():
    k1, k0, n = 5000, 1000, 100_000
    lo1 = clopper_pearson(k1, n, 0.1)[0]
    hi0 = clopper_pearson(k0, n, 0.1)[1]
    assert epsilon_lower_bound(k1, k0, n, 0.1) == pytest.approx(math.log(lo1 / hi0))
    assert epsilon_lower_bound(k1, k0, n, 0.1, delta=0.01) == pytest.approx(math.log((lo1 - 0.01) / hi0))
    assert epsilon_lower_bound(k1, k0, n) < math.log(5)  # below the point estimate
    assert epsilon_lower_bound(10, 1000, n, delta=0.5) == -math.inf


@pytest.mark.parametrize("name", hierdp.registry.names("mechanism"))
def test_builtin_mechanisms_audit_below_claim_and_close_to_it(name):
    m = hierdp.registry.create("mechanism", name)
    budget = 1.0 if m.budget_unit == "epsilon" else 0.5
    res = audit_mechanism(m, budget, n=1_000_000, seed=21)
    assert res.epsilon_lb <= res.claimed, str(res)
    if m.budget_unit == "epsilon":
        # the optimal event for Laplace noise attains ε: the audit is sharp
        assert res.epsilon_lb > 0.9 * res.claimed, str(res)


def test_per_level_composition_on_a_tree_audits_below_total_epsilon():
    """One person added to one leaf changes that leaf and its ancestors by 1; each level
    is measured by discrete Laplace with its own ε; the total claim is Σ ε_l = 1."""
    tree = Tree.complete(2, 4)
    leaves0 = np.array([3, 0, 5, 2, 7, 1, 0, 4])
    leaves1 = leaves0.copy()
    leaves1[5] += 1
    x0, x1 = tree.aggregate(leaves0), tree.aggregate(leaves1)
    depth = np.asarray(tree.depth)
    eps = {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}
    mech = DiscreteLaplace()

    def sample(x, m, rng):
        out = np.empty((m, x.size), dtype=np.int64)
        for d, e in eps.items():
            cols = np.flatnonzero(depth == d)
            out[:, cols] = mech.sample(np.broadcast_to(x[cols], (m, cols.size)).copy(), e, Sensitivity(), rng)
        return out

    w = np.array([eps[d] for d in depth])

    def llr(out):  # log-likelihood ratio of x1 vs x0 (the optimal statistic)
        return (np.abs(out - x0) - np.abs(out - x1)) @ w

    res = audit(sample, x0, x1, statistic=llr, n=300_000, seed=5, claimed=sum(eps.values()))
    assert res.epsilon_lb <= 1.0, str(res)
    assert res.epsilon_lb > 0.85, str(res)


def test_truncated_laplace_audits_below_claim_with_its_delta():
    m = TruncatedLaplace(delta=0.02)
    res = audit_mechanism(m, 1.0, n=600_000, seed=8)
    assert res.delta == 0.02 and res.epsilon_lb <= 1.0, str(res)
    # ignoring δ, the truncation is visible: outputs x1 can give and x0 cannot
    res0 = audit_mechanism(m, 1.0, n=600_000, seed=8, delta=0.0)
    assert res0.epsilon_lb > 1.5, str(res0)


def _qa_qb(k):
    """Lemma 5.1's queries: k/2 copies of q_a, k/2 of q_b, on D1 = {a, b} and D2 = {a, b, b}."""
    x0 = np.r_[np.ones(k // 2), np.ones(k // 2)].astype(np.int64)
    x1 = np.r_[np.ones(k // 2), 2 * np.ones(k // 2)].astype(np.int64)
    w = np.r_[np.ones(k // 2), -np.ones(k // 2)]
    return x0, x1, w


def test_sparse_vector_audits_below_claim():
    k, c, eps = 12, 2, 1.0
    x0, x1, w = _qa_qb(k)

    def sample(x, m, rng):
        return sparse(np.broadcast_to(x, (m, k)), threshold=1, cutoff=c, epsilon=eps, rng=rng)

    # the statistic that refutes the binary SVT below
    res = audit(sample, x0, x1, statistic=lambda o: (o == TOP) @ w, n=150_000, seed=13, claimed=eps)
    assert res.epsilon_lb <= eps, str(res)
    # all queries shifted by one (the AboveThreshold worst case)
    res = audit(sample, x0, x0 + 1, statistic=lambda o: (o == TOP).sum(axis=1).astype(float),
                n=150_000, seed=14, claimed=eps)
    assert 0.05 < res.epsilon_lb <= eps, str(res)


# -- broken mechanisms (live only here) ------------------------------------------------
class HalfScaleLaplace(Laplace):
    """Claims ε but adds Laplace noise of scale Δ/(2ε): really 2ε-DP."""

    name = "broken_half_scale_laplace"

    def sample(self, values, budget, sensitivity, rng):
        return super().sample(values, 2 * budget, sensitivity, rng)


def test_half_scale_laplace_is_caught():
    res = audit_mechanism(HalfScaleLaplace(), 1.0, n=600_000, seed=3)
    assert res.violates and res.epsilon_lb > 1.8, str(res)


def binary_svt(q: np.ndarray, m: int, rng: RandomSource, lam: float) -> np.ndarray:
    """PrivTree Algorithm 3 ("binary SVT"): one noisy threshold θ̂ = θ + Lap(λ) with θ = 1,
    every query answered 1 iff q_i + Lap(λ) > θ̂, never halting."""
    g = np.random.default_rng(int(rng.words(1)[0] >> np.uint64(1)))
    theta_hat = 1 + g.laplace(0.0, lam, (m, 1))
    return (q[None, :] + g.laplace(0.0, lam, (m, q.size)) > theta_hat).astype(np.int8)


def test_binary_svt_is_caught():
    """Claim 1 (λ = 2/ε gives ε-DP) is false (PrivTree Lemma 5.1: violated for λ <= k/(4ε)).
    With ε = 1, λ = 2 and k = 20 queries (k/(4ε) = 5 >= λ) the audit refutes the claim."""
    k, eps = 20, 1.0
    x0, x1, w = _qa_qb(k)
    res = audit(lambda x, m, rng: binary_svt(x, m, rng, 2.0 / eps), x0, x1,
                statistic=lambda o: o @ w, n=400_000, seed=3, claimed=eps)
    assert res.violates and res.epsilon_lb > 2 * eps, str(res)


def test_audit_argument_errors():
    with pytest.raises(hierdp.BudgetError, match="alpha"):
        audit(lambda x, m, r: np.zeros(m), 0, 1, alpha=1.5)
    with pytest.raises(hierdp.BudgetError, match="at least 20"):
        audit(lambda x, m, r: np.zeros(m), 0, 1, n=10)


@pytest.mark.parametrize("name,total", [("discrete_laplace", 1.0), ("discrete_gaussian", 0.5)])
def test_release_measurement_path_audits_below_total_claim(name, total):
    """The release's own measurement step (``hierdp.plans.per_level.measure``: one mechanism call
    per level, equal split) on neighbouring trees; the replicates are the columns of a
    ``(n, m)`` value array, so one call makes m independent releases."""
    from hierdp.accounting.audit import claimed_epsilon
    from hierdp.plans.per_level import measure

    tree = Tree.complete(3, 3)
    leaves0 = np.array([4, 0, 2, 9, 1, 1, 0, 3, 5])
    leaves1 = leaves0.copy()
    leaves1[4] += 1
    x0, x1 = tree.to_internal(tree.aggregate(leaves0)), tree.to_internal(tree.aggregate(leaves1))
    mech = hierdp.registry.create("mechanism", name)
    budgets = {lv: total / tree.n_levels for lv in tree.level_names}
    diff = (x1 - x0).astype(np.float64)

    def sample(x, m, rng):
        noisy, _, spends = measure(tree, np.repeat(x[:, None], m, axis=1), budgets, mech, Sensitivity(), rng)
        assert math.isclose(sum(s.budget for s in spends), total)
        return noisy.T

    if name == "discrete_laplace":
        eps_l = total / tree.n_levels

        def stat(out):  # log-likelihood ratio
            return (np.abs(out - x0) - np.abs(out - x1)) @ np.full(x0.size, eps_l)
    else:
        def stat(out):  # Gaussian log-likelihood ratio is linear in the output
            return out @ diff

    claimed = claimed_epsilon(mech, total, 1e-6 if name == "discrete_gaussian" else 0.0)
    res = audit(sample, x0, x1, statistic=stat, n=300_000, seed=17,
                delta=1e-6 if name == "discrete_gaussian" else 0.0, claimed=claimed)
    assert res.epsilon_lb <= claimed, str(res)
    assert res.epsilon_lb > 0.3 * min(claimed, 1.0), str(res)
