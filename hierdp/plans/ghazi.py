"""The plan ``ghazi``: (ε, δ)-DP tree counts with α-multiplicative error (Ghazi et al. 2023).

Ghazi, Kamath, Kumar, Manurangsi & Wu, "On Differentially Private Counting on Trees"
(ICALP 2023): Classification (Alg. 1, Lemma 23) on forests (Cor. 25), Reduction over a
geometric sequence of thresholds (Alg. 2, Lemma 26) and Estimation with a private upper
bound M on the root (Cor. 27). Every node u gets an estimate w̃_u and a public threshold
τ_u with, for each node, P[|w̃_u - w_u| <= α·max(w_u, τ_u)] >= 1 - η (Problem 18, eq. 1).

Privacy (exact; the accuracy constants never touch it). With total (ε, δ) and
per-level L1 sensitivity s (an integer; one row per person gives s = 1):

* **M**: truncated Laplace (Lemma 16, the exact integer sampler
  :class:`~hierdp.mechanisms.truncated_laplace.TruncatedLaplace`) on the root at
  (ε_M, δ_M) = ``bound_share``·(ε, δ); M = noisy root + N is an upper bound on the root
  with probability 1 (the noise is bounded by N).
* **step i** (i = ℓ, ..., 1; threshold τ_i = τ_1·r^(i-1)): Classification of the forest
  F_i with (ε_i, δ_i) = (ε_R(1 - 1/ϱ)ϱ^-(i-1), δ_R/2^i), ε_R = ε - ε_M, δ_R = δ - δ_M
  (geometric, Lemma 26: Σ ε_i < ε_R, Σ δ_i < δ_R whatever ℓ is). Per tree of F_i:
  one Sparse (Lemma 17; :class:`~hierdp.mechanisms.svt.SparseBank`, exact discrete
  Laplace) with cutoff c and budget ε_i/(2s), and at most c rounds of truncated Laplace
  at (ε_i/(2c), δ_i/(c·s)) on the unclassified nodes of one depth (disjoint subtrees:
  sensitivity s). The trees of F_i are disjoint subtrees (the unresolved set is closed
  under descendants), so one person's rows reach at most s of them (Cor. 25, parallel
  composition; for s > 1 the δ of each round is divided by s and the ε parts add up to
  at most ε_i because the per-tree shifts add up to s).

What the paper leaves open, and what this implementation does:

1. Alg. 2 hands only the subtrees below transition nodes to F_{i-1}; the ⊥-rooted trees
   of F_i and the ⊥ siblings of ⊤ ancestors would be lost. Here F_{i-1} is *every* node
   of F_i classified ⊥ (each is < (1+a)τ_i when the classification is right, which is all
   the bound M_{i-1} needs).
2. Alg. 2 line 7 sets the ancestors "in T" to M_i, overwriting the larger estimates of
   earlier steps; here it is restricted to the forest component (the ⊤ nodes of F_i).
3. The estimate of a node classified ⊤ at step i lies in [L, U] = [(1-a)τ_i, U_i]
   (U_i = (1+a)τ_{i+1}, U_ℓ = M). Instead of U (Lemma 26's M_i, relative error (U-L)/L)
   the harmonic mean 2LU/(L+U) is released: relative error (U-L)/(U+L) <= α as soon as
   U/L <= (1+α)/(1-α), which lets r grow from about 1+α to about (1+α)/(1-α). Nodes
   never classified ⊤ lie in [0, M_0), M_0 = min((1+a)τ_1, M), and get M_0/2: the
   threshold is τ_u = (1+a)τ_1/(2α) for every node.
4. Thresholds: Cor. 27's constants (324(1+α)²/α⁴ ...) put τ near 10⁶ at α = 0.5, ε = 1.
   Here τ_1 is the *smallest* value for which the proof of Lemma 23 goes through with
   the exact noise used: Δ_i + 2N_i <= a·τ_i for every step, where N_i is the exact
   truncation bound of the integer truncated Laplace and Δ_i the smallest integer margin
   with D·P[ν >= Δ_ν] + c·P[|θ| >= Δ_T] <= η_i (Δ = Δ_ν + Δ_T; ν, θ the exact discrete
   Laplace query and threshold noises of Sparse; D levels; one-sided for ν since a query
   can fail in one direction only, the union over c thresholds for θ) — a tighter union
   bound than Lemma 17's 8c/ε·ln(2d/η). The free constants (a = α_i, r, ϱ) are chosen on
   a grid to minimise τ_u; η_i = η/2^i. This is a proof, not a calibration: the tests
   check the (α, η) claim empirically and the counts of ⊤ per Sparse run. It is not very
   loose: on a heavy-tailed 3-ary tree of depth 6 (α = 0.5, η = 0.1, ε = 1, δ = 1e-6, 40
   runs) the claim still held with every τ_i halved (worst node failing 7.5% of runs) and
   failed with τ_i / 4 (a node failing in every run).

Accounting (issue 34). The ledger's ε at the requested δ is the optimal composition of the
(ε, δ) steps of the *longest* schedule the plan can run (:func:`schedule_steps`; ℓ depends
on the private M, so the public maximum ``max_steps`` is composed, steps not run being
null mechanisms), each step entering by the canonical pair that dominates every
mechanism with its guarantee (Kairouz, Oh & Viswanath 2015;
:func:`hierdp.accounting.accountants.approx_epsilon`): the bound M (ε_M, δ_M); per step i its Sparse
(ε_i/2, 0) and, with s = 1, its c truncated Laplace rounds (ε_i/(2c), δ_i/c) each (one
person is in one tree of F_i, whose Sparse triggers at most c rounds; the rounds of other
trees do not read that person's rows); with s > 1 the step's rounds as one (ε_i/2, δ_i)
step (basic composition over the trees a person reaches). The Sparse runs interleave with
the rounds they trigger: concurrent composition of interactive mechanisms obeys the same
bounds (Vadhan & Zhang 2023). Capped at basic composition (the requested ε); with
``PrivacyLoss(..., accountant="zcdp")`` the ledger states basic composition as before.

The estimator is not linear in the measurements: ``Measurements.variance`` is ``None``,
so chains that need variances (``blue``) refuse; the plan's default chain is empty.
Histograms ((n, k) values) are not supported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp.accounting import PrivacyLoss, Spend
from hierdp.accounting.accountants import APPROX, accounting_text, approx_epsilon
from hierdp.accounting.ledger import LevelSpend
from hierdp.errors import BudgetError, DataError, PrivacyError
from hierdp.measurements import Measurements
from hierdp.mechanisms._samplers import dlap_params
from hierdp.mechanisms.base import Sensitivity
from hierdp.mechanisms.svt import SparseBank
from hierdp.mechanisms.truncated_laplace import TruncatedLaplace
from hierdp.plans.base import Plan

if TYPE_CHECKING:
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["Ghazi", "GhaziSchedule", "ghazi_schedule", "svt_margin", "schedule_steps", "composed_epsilon"]

_MAX_COUNT = 1e19  # thresholds beyond any int64 count are never needed


def _dlap_tail(beta: float, k: np.ndarray) -> np.ndarray:
    """P[X >= k] (k >= 1) for the discrete Laplace with pmf ∝ exp(-β|x|)."""
    return np.exp(-beta * k) / (1.0 + math.exp(-beta))


def svt_margin(beta_threshold: float, beta_query: float, n_queries: int, cutoff: int, eta: float) -> int:
    """Smallest Δ = Δ_ν + Δ_T (integers) with n_queries·P[ν >= Δ_ν] + cutoff·P[|θ| >= Δ_T] <= η.

    Under that event every answer of one Sparse run before its c-th ⊤ is right up to Δ:
    ⊤ ⇒ f >= τ - Δ and ⊥ ⇒ f < τ + Δ (Ghazi et al. Lemma 17, with a tighter union bound).
    ``beta_*`` are the rates (1/scale) of the discrete Laplace threshold and query noises.
    """
    lam = np.linspace(0.02, 0.98, 49)
    # smallest integer k with n·e^{-βk}/(1+e^{-β}) <= λη
    kq = np.ceil(np.log(n_queries / ((1.0 + math.exp(-beta_query)) * lam * eta)) / beta_query)
    kt = np.ceil(np.log(2.0 * cutoff / ((1.0 + math.exp(-beta_threshold)) * (1.0 - lam) * eta)) / beta_threshold)
    return int(np.min(np.maximum(kq, 1) + np.maximum(kt, 1)))


@dataclass(frozen=True)
class GhaziSchedule:
    """Public parameters of one Estimation run (everything but ℓ, which depends on M)."""

    epsilon: float
    delta: float
    alpha: float
    eta: float
    levels: int  # D, the number of levels (queries per Sparse run)
    s: int  # per-level L1 sensitivity
    bound_share: float
    a: float  # α_i of every classification step
    r: float  # τ_{i+1} / τ_i
    rho: float  # ε_i / ε_{i+1}
    c: int  # Sparse cutoff
    tau1: float
    max_steps: int = 0  # steps whose noise scales the exact samplers support (ℓ must not exceed it)

    @property
    def eps_bound(self) -> float:
        return self.bound_share * self.epsilon

    @property
    def delta_bound(self) -> float:
        return self.bound_share * self.delta

    def eps_step(self, i: int) -> float:
        eps_r = self.epsilon - self.eps_bound
        return eps_r * (1.0 - 1.0 / self.rho) * self.rho ** (-(i - 1))

    def delta_step(self, i: int) -> float:
        return (self.delta - self.delta_bound) / 2.0 ** i

    def eta_step(self, i: int) -> float:
        return self.eta / 2.0 ** i

    def tau(self, i: int) -> float:
        return self.tau1 * self.r ** (i - 1)

    @property
    def m0(self) -> float:
        """Upper bound on the nodes never classified ⊤: (1 + a)τ_1."""
        return (1.0 + self.a) * self.tau1

    @property
    def threshold(self) -> float:
        """τ_u of every node: M_0 / (2α)."""
        return self.m0 / (2.0 * self.alpha)

    def n_steps(self, m: float) -> int:
        """ℓ: the fewest steps with (1 + a)·r·τ_ℓ >= M (0 when M <= M_0)."""
        if m <= self.m0:
            return 0
        ell = 1
        while (1.0 + self.a) * self.r * self.tau(ell) < m:
            ell += 1
        if ell > self.max_steps:
            raise DataError(f"plan 'ghazi': the root count is too large for this budget (step {ell} would need noise "
                            "beyond the exact samplers' range); raise epsilon or scale the counts down")
        return ell

    def step_params(self, i: int) -> dict[str, Any]:
        """Exact noise parameters of step i: Sparse ε (per unit sensitivity), truncated
        Laplace mechanism and budget, the margin Δ_i and the truncation bound N_i."""
        eps_i, delta_i = self.eps_step(i), self.delta_step(i)
        svt_eps = eps_i / 2.0 / self.s
        sigma = Fraction(2 * self.c) / Fraction(svt_eps)
        pt, pq = dlap_params(sigma), dlap_params(2 * sigma)
        margin = svt_margin(pt.s / pt.t, pq.s / pq.t, self.levels, self.c, self.eta_step(i))
        tl = TruncatedLaplace(delta=delta_i / (self.c * self.s))
        tl_eps = eps_i / (2.0 * self.c)
        bound = tl.bound(tl_eps, Sensitivity(l1=float(self.s), l2=float(self.s)))
        return {"eps": eps_i, "delta": delta_i, "svt_eps": svt_eps, "tl": tl, "tl_eps": tl_eps,
                "margin": margin, "bound": bound, "tau": self.tau(i), "eta": self.eta_step(i)}


def _requirements(eps_r, delta_r, alpha, eta, levels, s, a, r, rho, c, steps):
    """Float version of max_i (Δ_i + 2N_i)/a / r^(i-1) (the τ_1 needed), vectorised."""
    i = np.arange(1, steps + 1)[None, :]
    a, r, rho, c = (np.asarray(x, float)[:, None] for x in (a, r, rho, c))
    eps_i = eps_r * (1.0 - 1.0 / rho) * rho ** (-(i - 1))
    delta_i = delta_r / 2.0 ** i
    eta_i = eta / 2.0 ** i
    sigma = 2.0 * c * s / (eps_i / 2.0)
    bt, bq = 1.0 / sigma, 1.0 / (2.0 * sigma)
    # Δ with the split λ = 1/2 (the exact schedule optimises it)
    kq = np.log(levels / (0.5 * eta_i)) / bq + 1
    kt = np.log(2.0 * c / (0.5 * eta_i)) / bt + 1
    tl_eps = eps_i / (2.0 * c)
    n_tl = s * np.log1p(np.expm1(tl_eps) / (2.0 * delta_i / (c * s))) / tl_eps + 2
    need = (kq + kt + 2.0 * n_tl) / a
    return np.max(need / r ** (i - 1), axis=1)


@lru_cache(maxsize=256)
def ghazi_schedule(epsilon: float, delta: float, alpha: float, eta: float, levels: int, s: int = 1,
                   bound_share: float = 0.1) -> GhaziSchedule:
    """The public schedule minimising the node threshold τ_u (see the module docstring)."""
    eps_r = epsilon * (1.0 - bound_share)
    delta_r = delta * (1.0 - bound_share)
    cands = []
    for a in alpha * np.array([0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]):
        r_max = (1 + alpha) * (1 - a) / ((1 - alpha) * (1 + a)) * (1 - 1e-9)
        if r_max <= 1.0:
            continue
        rs = {r_max, *(1 + (r_max - 1) * np.array([0.25, 0.5, 0.75]))}
        rs |= {k * (1 - a) / (1 + a) * (1 - 1e-9) for k in range(2, 64)
               if 1.0 < k * (1 - a) / (1 + a) * (1 - 1e-9) <= r_max}
        for r in rs:
            c = math.ceil((1 + a) * r / (1 - a) - 1e-9)
            for f in (0.3, 0.5, 0.7, 0.85):
                cands.append((a, r, 1 + (r - 1) * f, c))
    arr = np.array(cands)
    steps = 120
    t1 = _requirements(eps_r, delta_r, alpha, eta, levels, s, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], steps)
    score = (1 + arr[:, 0]) * t1
    order = np.argsort(score)
    best = None
    for j in order[:5]:  # exact τ_1 for the best few float candidates
        a, r, rho, c = arr[j]
        sch = GhaziSchedule(epsilon, delta, alpha, eta, levels, s, bound_share, float(a), float(r), float(rho),
                            int(c), 0.0)
        tau1, max_steps = _exact_tau1(sch)
        if best is None or (1 + a) * tau1 < (1 + best.a) * best.tau1:
            best = GhaziSchedule(epsilon, delta, alpha, eta, levels, s, bound_share, float(a), float(r),
                                 float(rho), int(c), tau1, max_steps)
    return best


def schedule_steps(sch: GhaziSchedule) -> list[tuple[float, float, int]]:
    """The (ε, δ, count) steps of the longest run of ``sch`` (public: ``max_steps`` steps),
    as one person's data meets them (see the module docstring): the bound M, and per step
    its Sparse and its truncated Laplace rounds (c rounds of (ε_i/(2c), δ_i/c) when s = 1,
    one (ε_i/2, δ_i) block otherwise). Their ε add up to at most ``sch.epsilon`` and their δ
    to at most ``sch.delta`` (basic composition, what the ledger stated before issue 34)."""
    out = [(sch.eps_bound, sch.delta_bound, 1)]
    for i in range(1, sch.max_steps + 1):
        eps_i, delta_i = sch.eps_step(i), sch.delta_step(i)
        out.append((eps_i / 2.0, 0.0, 1))
        if sch.s == 1:
            out.append((eps_i / (2.0 * sch.c), delta_i / sch.c, sch.c))
        else:
            out.append((eps_i / 2.0, delta_i, 1))
    return out


@lru_cache(maxsize=64)
def composed_epsilon(sch: GhaziSchedule) -> float:
    """The ε at ``sch.delta`` that the plan certifies: the optimal composition of
    :func:`schedule_steps` (:func:`hierdp.accounting.accountants.approx_epsilon`, an upper bound),
    never above the requested ``sch.epsilon`` (basic composition)."""
    tight = approx_epsilon(schedule_steps(sch), sch.delta)
    return sch.epsilon if tight is None else min(sch.epsilon, tight)


def _exact_tau1(sch: GhaziSchedule) -> tuple[float, int]:
    """τ_1 = max over the usable steps of (Δ_i + 2N_i)/(a·r^(i-1)) with the exact noises, and the
    number of usable steps (until τ_i passes any int64 count or the noise scale leaves the
    exact samplers' range)."""
    need = 0.0
    i = 1
    while True:
        try:
            p = sch.step_params(i)
        except BudgetError:
            return need, i - 1
        need = max(need, (p["margin"] + 2 * p["bound"]) / sch.a / sch.r ** (i - 1))
        if need * sch.r ** (i - 1) > _MAX_COUNT:
            return need, i
        i += 1


def _integer_sensitivity(sensitivity: Sensitivity) -> int:
    s = sensitivity.l1
    if s != int(s):
        raise BudgetError(f"plan 'ghazi' needs an integer L1 sensitivity (exact integer noise), got {s!r}")
    return int(s)


def _counts(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values)
    if v.ndim != 1:
        raise DataError(f"plan 'ghazi' releases one count per node; got values of shape {v.shape} "
                        "(release each histogram cell separately, or use plan 'per_level')")
    if not np.issubdtype(v.dtype, np.integer):
        if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
            raise DataError("plan 'ghazi' needs integer counts (its sparse vector and truncated Laplace noise "
                            "are exact integer samplers)")
    v = v.astype(np.int64)
    if np.any(v < 0):
        raise DataError("plan 'ghazi' needs non-negative counts (its accuracy argument bounds a subtree by its root)")
    return v


def _classify(tree: Tree, x: np.ndarray, active: np.ndarray, by_depth: list[np.ndarray], p: dict[str, Any],
              c: int, rng: RandomSource, *, _svt_epsilon_factor: float = 1.0) -> tuple[np.ndarray, dict]:
    """Classification (Alg. 1) of the forest ``active`` at threshold ``p['tau']`` (Cor. 25).

    One Sparse per tree of the forest (a :class:`SparseBank` slot per component root),
    depth by depth from the deepest; on ⊤, truncated Laplace estimates of the tree's
    unclassified nodes at that depth; nodes above τ - Δ - N become ⊤ with their ancestors
    in the component. Returns the boolean ⊤ mask and diagnostics (⊤ answers per run).
    ``_svt_epsilon_factor`` exists only for the audit test (a deliberately broken Sparse).
    """
    parent = tree.internal.parent
    n = x.size
    # component of every active node: top-down, a root is an active node with an inactive parent
    comp = np.full(n, -1, dtype=np.int64)
    for nodes in by_depth:
        nd = nodes[active[nodes]]
        if not nd.size:
            continue
        par = parent[nd]
        is_root = (par < 0) | ~active[np.maximum(par, 0)]
        comp[nd] = np.where(is_root, nd, comp[np.maximum(par, 0)])
    roots = np.flatnonzero(active & (comp == np.arange(n)))
    slot = np.full(n, -1, dtype=np.int64)
    slot[roots] = np.arange(roots.size)
    bank = SparseBank(p["tau"], c, p["svt_eps"] * _svt_epsilon_factor, roots.size, rng)
    cut = p["tau"] - p["margin"] - p["bound"]
    tl_sens = Sensitivity(l1=float(p.get("s", 1)), l2=float(p.get("s", 1)))
    unclassified = active.copy()
    top = np.zeros(n, dtype=bool)
    top_child = np.zeros(n, dtype=bool)
    for nodes in reversed(by_depth):
        cand = nodes[unclassified[nodes]]
        if not cand.size:
            continue
        # ancestors of ⊤ nodes (in the same component) are ⊤ and leave S_i (Alg. 1 line 13)
        prop = top_child[cand]
        top[cand[prop]] = True
        unclassified[cand[prop]] = False
        newtop = [cand[prop]]
        cand = cand[~prop]
        if cand.size:
            sl = slot[comp[cand]]
            halted = bank.halted[sl]
            unclassified[cand[halted]] = False  # a halted Sparse answers nothing: ⊥
            cand, sl = cand[~halted], sl[~halted]
        if cand.size:
            usl, inv = np.unique(sl, return_inverse=True)
            fmax = np.full(usl.size, np.iinfo(np.int64).min, dtype=np.int64)
            np.maximum.at(fmax, inv, x[cand])
            ans = bank.query(usl, fmax)
            hit = ans[inv]
            unclassified[cand] = False  # every candidate is decided now
            est_nodes = cand[hit]
            if est_nodes.size:
                noisy = p["tl"].sample(x[est_nodes], p["tl_eps"], tl_sens, rng)
                up = est_nodes[noisy >= cut]
                top[up] = True
                newtop.append(up)
        nt = np.concatenate(newtop)
        if nt.size:
            nt = nt[comp[nt] != nt]  # a component root has no ancestor in its component
            top_child[parent[nt]] = True
    return top, {"top_answers": bank.count}


class Ghazi(Plan):
    """α-multiplicative (ε, δ)-DP counts on deep trees (Ghazi et al. 2023, Thm. 21 / Cor. 27).

    Parameters
    ----------
    alpha : multiplicative error α in (0, 1): above its threshold τ_u a node is within
        a factor 1 ± α of its count with probability >= 1 - η.
    eta : failure probability η in (0, 1/2) per node.
    bound_share : share of (ε, δ) spent on the private upper bound M of the root.

    The released ``info["threshold"]`` is τ_u per node (one value for all nodes; see the
    module docstring for how it is derived). Budgets are (ε, δ) only: the estimator needs
    δ > 0 for its truncated Laplace steps.
    """

    name = "ghazi"
    default_postprocess = ()

    def __init__(self, alpha: float = 0.5, eta: float = 0.05, bound_share: float = 0.1) -> None:
        checks = (("alpha", alpha, 0.0, 1.0), ("eta", eta, 0.0, 0.5), ("bound_share", bound_share, 0.0, 1.0))
        for nm, v, lo, hi in checks:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo < v < hi):
                raise BudgetError(f"plan 'ghazi': {nm} must be a number strictly between {lo:g} and {hi:g}, got {v!r}")
        self.alpha, self.eta, self.bound_share = float(alpha), float(eta), float(bound_share)

    @property
    def budget_unit(self) -> str:
        return "approx"

    def total_for(self, loss: PrivacyLoss) -> tuple[float, dict[str, Any]]:
        why = ("plan 'ghazi' is (ε, δ)-DP: its classification uses the truncated Laplace mechanism "
               "(Ghazi et al. Lemma 16), which needs δ > 0")
        if loss.rho is not None:
            raise PrivacyError(f"{why}; a rho (zCDP) budget cannot be honoured: pass epsilon= and delta=")
        if loss.delta is None:
            raise PrivacyError(f"{why}, so a pure ε budget cannot be honoured: pass delta= (e.g. 1e-6), or use "
                               "plan 'per_level' for pure ε-DP")
        return cast(float, loss.epsilon), {"guarantee": "approx", "epsilon": loss.epsilon, "delta": loss.delta,
                                           "rho": None}

    def calibrate(self, tree: Tree, loss: PrivacyLoss, total: float, guarantee: dict[str, Any], *,
                  sensitivity: Sensitivity, invariants: np.ndarray | None = None) -> tuple[float, dict[str, Any]]:
        """The noise is unchanged (``total`` is the requested ε); the guarantee's ε becomes
        :func:`composed_epsilon` of the public schedule for this tree when it is below the
        requested ε (``certified_by``: the optimal composition of (ε, δ) steps), unless
        ``loss.accountant == "zcdp"`` (basic composition, as before issue 34)."""
        if loss.accountant != "tight" or loss.delta is None:
            return total, guarantee
        sch = self.schedule(tree, total=total, delta=loss.delta, sensitivity=sensitivity)
        eps = composed_epsilon(sch)
        if not eps < total:
            return total, guarantee
        return total, dict(guarantee, epsilon=eps, accountant=APPROX, accounting=accounting_text(APPROX, "approx"))

    def schedule(self, tree: Tree, *, total: float, delta: float, sensitivity: Sensitivity) -> GhaziSchedule:
        """The public parameters (thresholds, budgets per step) for this tree and budget."""
        return ghazi_schedule(float(total), float(delta), self.alpha, self.eta, int(max(tree.n_levels, 1)),
                              _integer_sensitivity(sensitivity), self.bound_share)

    def measure(self, tree: Tree, values: np.ndarray, *, total: float, delta: float | None,
                sensitivity: Sensitivity, rng: RandomSource) -> Measurements:
        if delta is None:
            raise PrivacyError("plan 'ghazi' needs delta > 0 (truncated Laplace); pass delta=")
        x = _counts(values)
        if x.size != tree.n_nodes:
            raise DataError(f"values must have shape ({tree.n_nodes},), got {x.shape}")
        sch = self.schedule(tree, total=total, delta=delta, sensitivity=sensitivity)
        s = sch.s
        sens = Sensitivity(l1=float(s), l2=float(s))
        depth = np.asarray(tree.internal.depth)
        order = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(depth.max(initial=0) + 2))
        by_depth = [order[bounds[k]:bounds[k + 1]] for k in range(len(bounds) - 1)]
        spends: list[Spend] = []
        levels: list[LevelSpend] = []

        def record(label: str, eps: float, dlt: float, mech: str, n_nodes: int, var: float) -> None:
            spends.append(Spend(eps, "epsilon", label=label, delta=dlt))
            levels.append(LevelSpend(level=label, depth=-1, budget=eps, unit="epsilon", mechanism=mech,
                                     n_nodes=n_nodes, noise_variance=var, sensitivity_l1=float(s),
                                     sensitivity_l2=float(s), delta=dlt))

        # Estimation: private upper bound M on the root (truncated Laplace, bounded noise)
        root = int(np.flatnonzero(np.asarray(tree.internal.parent) < 0)[0])
        tl_m = TruncatedLaplace(delta=sch.delta_bound)
        noisy_root = int(tl_m.sample(x[root:root + 1], sch.eps_bound, sens, rng)[0])
        m = float(max(noisy_root + tl_m.bound(sch.eps_bound, sens), 0))
        record("upper bound M: truncated Laplace on the root", sch.eps_bound, sch.delta_bound,
               "truncated_laplace", 1, tl_m.variance(sch.eps_bound, sens))
        ell = sch.n_steps(m)
        est = np.full(x.size, np.nan)
        step_of = np.zeros(x.size, dtype=np.int64)
        active = np.ones(x.size, dtype=bool)
        max_top = []
        for i in range(ell, 0, -1):
            p = sch.step_params(i)
            p["s"] = s
            top, diag = _classify(tree, x, active, by_depth, p, sch.c, rng)
            upper = m if i == ell else (1.0 + sch.a) * sch.tau(i + 1)
            lower = (1.0 - sch.a) * p["tau"]
            est[top] = 2.0 * lower * upper / (lower + upper)
            step_of[top] = i
            active &= ~top
            max_top.append(int(diag["top_answers"].max(initial=0)))
            tag = f"step {i} (τ = {p['tau']:.6g})"
            record(f"{tag}: sparse vector, cutoff {sch.c}", p["eps"] / 2.0, 0.0, "sparse", x.size,
                   2.0 * (4.0 * sch.c / p["svt_eps"]) ** 2)
            record(f"{tag}: truncated Laplace, <= {sch.c} rounds", p["eps"] / 2.0, p["delta"], "truncated_laplace",
                   x.size, p["tl"].variance(p["tl_eps"], sens))
        est[active] = min(sch.m0, m) / 2.0
        info: dict[str, Any] = {
            "threshold": np.full(x.size, sch.threshold),
            "step": step_of,
            "ghazi": {"alpha": sch.alpha, "eta": sch.eta, "a": sch.a, "r": sch.r, "rho": sch.rho, "c": sch.c,
                      "tau1": sch.tau1, "threshold": sch.threshold, "steps": ell, "upper_bound_M": m,
                      "max_top_answers_per_run": max_top},
        }
        return Measurements(values=est, variance=None, spends=spends, levels=levels, info=info)

    def ledger_fields(self) -> dict[str, str]:
        return {"mechanism": "sparse vector + truncated Laplace (Ghazi et al. 2023)",
                "budget_strategy": f"ghazi (alpha={self.alpha:g}, eta={self.eta:g})"}

    def __repr__(self) -> str:
        return f"<plan 'ghazi' alpha={self.alpha:g} eta={self.eta:g}>"
