"""The built-in plan ``per_level``: one mechanism call per level, budgets from a strategy.

Each person changes one node per level by at most the sensitivity, so measuring every
node of a level costs that level's budget once (parallel composition within a level);
levels add up (basic composition). This is the measurement of Dawson et al. (§3, with
budget strategies of §4 / Alg. 3) and of the Generation Matrix paper's experiments.

Invariants (``invariants=`` mask from :func:`hierdp.release`): invariant nodes are
"measured" exactly (their true value, variance 0) and cost nothing; a level whose every
node is invariant gets budget 0 (a strategy's share for it goes to the other levels in
proportion), so BLUE/GMC treat them as exact constraints (Dawson et al. Alg. 2 with
variance 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import registry, rules
from hierdp.accounting import PrivacyLoss, Spend, calibrated_total, parse_budget, split_total, unit_moves
from hierdp.accounting.accountants import discrete_gaussian_delta
from hierdp.accounting.ledger import LevelSpend
from hierdp.budgets.base import BudgetStrategy
from hierdp.errors import BudgetError, DataError, PluginError, PrivacyError, expected_one_of
from hierdp.keyed_noise import NoiseKey
from hierdp.measurements import Measurements
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.plans.base import Plan

if TYPE_CHECKING:
    from hierdp.rng import RandomSource
    from hierdp.tree import Tree

__all__ = ["PerLevel", "resolve_mechanism", "resolve_budget", "measure", "measure_nodes", "node_identities",
           "invariant_levels", "apply_invariants"]


def resolve_mechanism(mechanism: str | Mechanism | Mapping[str, Any]) -> Mechanism:
    """A mechanism instance from a registry name, an instance, or ``{"name": ..., **params}``."""
    if isinstance(mechanism, Mechanism):
        return mechanism
    if isinstance(mechanism, str):
        return registry.create("mechanism", mechanism)
    if isinstance(mechanism, Mapping) and "name" in mechanism:
        params = {k: v for k, v in mechanism.items() if k != "name"}
        params.update(params.pop("params", {}) or {})
        return registry.create("mechanism", mechanism["name"], **params)
    raise PluginError(f"mechanism must be a registered name, a Mechanism or {{'name': ...}}, got {mechanism!r}")


def _is_strategy(budget: Any) -> bool:
    return isinstance(budget, (str, BudgetStrategy)) or (isinstance(budget, Mapping) and "strategy" in budget)


def _strategy(budget: Any) -> BudgetStrategy:
    if isinstance(budget, BudgetStrategy):
        return budget
    if isinstance(budget, str):
        return registry.create("budget", budget)
    params = {k: v for k, v in budget.items() if k not in ("strategy", "params")}
    params.update(budget.get("params") or {})
    return registry.create("budget", budget["strategy"], **params)


def resolve_budget(
    tree: Tree,
    total: float,
    budget: Any,
    *,
    mechanism: Mechanism,
    sensitivity: Sensitivity,
    true_values: np.ndarray | None = None,
    invariant_levels: Sequence[str] = (),
) -> tuple[dict[str, float], str, bool]:
    """Per-level budgets summing to ``total``; returns ``(budgets, description, reads_true_counts)``.

    ``true_values`` (internal or external order: strategies only read them level by level)
    reach only strategies that declare ``reads_true_counts`` (oracles, flagged non-private).
    ``invariant_levels`` (published exactly) get 0: a strategy's share for them goes to the
    other levels in proportion; explicit per-level values must give them 0.
    """
    names = tree.level_names
    reads_true = False
    if _is_strategy(budget):
        strategy = _strategy(budget)
        reads_true = bool(strategy.reads_true_counts)
        alloc = dict(strategy.allocate(tree, total, mechanism=mechanism, sensitivity=sensitivity,
                                       true_values=true_values if reads_true else None))
        desc = strategy.name
        unknown = set(alloc) - set(names)
        if unknown:
            raise BudgetError(f"budget strategy {desc!r} returned unknown levels {sorted(unknown)}")
        alloc = {n: alloc.get(n, 0.0) for n in names}
        if invariant_levels:
            rules.check_budget_values(alloc, desc)
            kept = math.fsum(float(v) for n, v in alloc.items() if n not in invariant_levels)
            if kept <= 0:
                raise BudgetError(f"budget strategy {desc!r} gives budget only to invariant levels "
                                  f"({', '.join(invariant_levels)}); give the other levels per-level values")
            given = math.fsum(float(v) for v in alloc.values())
            alloc = {n: 0.0 if n in invariant_levels else float(v) * given / kept for n, v in alloc.items()}
    elif isinstance(budget, Mapping):
        unknown = [k for k in budget if k not in names]
        if unknown:
            raise BudgetError(expected_one_of("level in budget", unknown[0], names))
        alloc = {n: parse_budget(budget.get(n, 0.0))[0] for n in names}
        desc = "per-level"
    elif isinstance(budget, (Sequence, np.ndarray)) and not isinstance(budget, str):
        vals = list(budget)
        if len(vals) != len(names):
            raise BudgetError(
                f"per-level budget list has {len(vals)} values but the tree has {len(names)} levels "
                f"({', '.join(names)}); give one value per level, the total first"
            )
        alloc = {n: parse_budget(x)[0] for n, x in zip(names, vals)}
        desc = "per-level"
    else:
        raise BudgetError(f"budget must be a strategy name, a list or a dict of per-level values, got {budget!r}")
    rules.check_budget_values(alloc, desc)
    alloc = {k: float(v) for k, v in alloc.items()}
    for lv in invariant_levels:
        if alloc.get(lv, 0.0) > 0:
            raise BudgetError(f"level {lv!r} is an invariant (published exactly, no budget) but the per-level "
                              f"budget gives it {alloc[lv]:g}; give it 0 and the total to the other levels")
    s = math.fsum(alloc.values())
    if desc == "per-level":
        rules.enforce(rules.budget_sum_problem(s, total), BudgetError)
    if s > total * (1 + rules.SUM_RTOL):
        raise BudgetError(f"budget strategy {desc!r} spends {s:g}, more than the total {total:g}")
    if s <= 0:
        raise BudgetError("no level gets any budget; give at least one level a positive budget")
    return rules.trim_to_total(alloc, total), desc, reads_true


#: from this many levels on, a mechanism is told that many calls will follow (``Mechanism.sampler``)
MANY_LEVELS = 256


#: the measurement id (:mod:`hierdp.keyed_noise`) of the node counts measured by ``per_level``
MEASUREMENT = 0


def node_identities(tree: Tree, node_ids: np.ndarray | None) -> np.ndarray:
    """``node_ids`` checked (one non-negative integer per internal-order node of ``tree``,
    all different), or ``arange(n)`` when None: the global identity of each node that keys
    its noise (its index in the full tree's internal order)."""
    n = tree.n_nodes
    if node_ids is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(node_ids)
    if ids.shape != (n,) or not (n == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise DataError(f"node_ids must hold one integer per node of the tree ({n}), in its internal order; got "
                        f"shape {ids.shape} ({ids.dtype})")
    ids = ids.astype(np.int64, copy=False)
    if n and (int(ids.min()) < 0 or np.unique(ids).size != n):
        raise DataError("node_ids must be different non-negative integers (each node's index in the full tree's "
                        "internal order)")
    return ids


def measure(
    tree: Tree, values_internal: np.ndarray, budgets: Mapping[str, float], mechanism: Mechanism,
    sensitivity: Sensitivity, rng: Any, node_ids: np.ndarray | None = None, measurement: int = MEASUREMENT,
) -> tuple[np.ndarray, np.ndarray, list[LevelSpend]]:
    """Noisy values and per-node variances (internal order): one mechanism call per level,
    or, with keyed noise, one per distinct budget.

    ``rng``: a :class:`~hierdp.keyed_noise.NoiseKey` (what releases use) draws noise keyed
    per node (:meth:`Mechanism.sample_keyed`): node ``u``'s noise depends only on the key,
    ``measurement``, ``node_ids[u]`` (default ``u``) and the cell, so measuring a subtree
    (``tree`` the subtree, ``node_ids`` its nodes' identities in the full tree) gives the
    noise the whole tree's measurement gives those nodes. A
    :class:`~hierdp.rng.RandomSource` draws from that one stream instead (older callers).
    """
    keyed = isinstance(rng, NoiseKey)
    ids = node_identities(tree, node_ids) if keyed else None
    n = tree.n_nodes
    shape = values_internal.shape
    out_dtype = np.int64 if (mechanism.integer and np.issubdtype(values_internal.dtype, np.integer)) else np.float64
    # zeros: the rows of unmeasured levels (budget 0); np.zeros maps pages lazily, so an
    # array replaced below by a sample of every node costs nothing
    noisy = np.zeros(shape, dtype=out_dtype)
    variance = np.full(n, np.inf)
    spends: list[LevelSpend] = []
    # by budget: a deep tree has 10⁵ levels and few distinct budgets
    variances: dict[float, float] = {}
    samplers: dict[float, Callable[..., np.ndarray]] = {}
    many = len(tree.level_names) >= MANY_LEVELS
    level_budget = np.zeros(len(tree.level_names))
    for d, name in enumerate(tree.level_names):
        b = float(budgets.get(name, 0.0))
        idx = tree.internal.level_index[d]
        n_level = (idx.stop - idx.start) if isinstance(idx, slice) else int(idx.size)
        if b > 0:
            var = variances.get(b)
            if var is None:
                var = variances[b] = float(mechanism.variance(b, sensitivity))
            if keyed:  # drawn below, all levels of one budget in one call
                level_budget[d] = b
            else:
                if b not in samplers:
                    samplers[b] = mechanism.sampler(b, sensitivity, many_calls=many)
                noisy[idx] = samplers[b](values_internal[idx], rng)
                variance[idx] = var
        else:
            var = math.inf
        spends.append(LevelSpend(level=name, depth=d, budget=b, unit=mechanism.budget_unit,
                                 mechanism=mechanism.name, n_nodes=n_level, noise_variance=var,
                                 sensitivity_l1=sensitivity.l1, sensitivity_l2=sensitivity.l2))
    if keyed and n:
        # Keyed noise depends on (key, measurement, node, cell) only, not on which call draws
        # it: the nodes of every level with one budget are drawn together (a path of 10⁵
        # levels is one call, not 10⁵).
        node_budget = level_budget[tree.internal.depth]
        for b, var in variances.items():
            rows = np.flatnonzero(node_budget == b)
            if not rows.size:
                continue
            sample = mechanism.keyed_sampler(b, sensitivity)
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            if hi - lo == rows.size:  # a range of rows (whole levels): views, not copies of the rows
                got = sample(values_internal[lo:hi], rng, cast(np.ndarray, ids)[lo:hi], measurement)
                if hi - lo == n and got.dtype == out_dtype:  # every node: the sample is the measurement
                    noisy = got.reshape(shape)
                else:
                    noisy[lo:hi] = got
                variance[lo:hi] = var
            else:
                noisy[rows] = sample(values_internal[rows], rng, cast(np.ndarray, ids)[rows], measurement)
                variance[rows] = var
    return noisy, variance, spends


def measure_nodes(
    tree: Tree, values: np.ndarray, node_ids: np.ndarray, budgets: Mapping[str, float], mechanism: Mechanism,
    sensitivity: Sensitivity, key: NoiseKey, measurement: int = MEASUREMENT,
) -> tuple[np.ndarray, np.ndarray]:
    """Keyed noisy values and variances of any subset of the nodes of ``tree`` (the full
    tree), given the budgets allocated on the full tree: row ``r`` of ``values`` (shape
    ``(m,)`` or ``(m, k)``) is node ``node_ids[r]`` (internal order), in any order. Each
    node gets exactly the noise :func:`measure` gives it on the whole tree with ``key``,
    so measuring a partition of the nodes part by part, in any order and on any thread
    count, gives the whole measurement."""
    ids = np.asarray(node_ids)
    if ids.ndim != 1 or ids.shape[0] != np.asarray(values).shape[0] or not (
            ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise DataError("node_ids must hold one integer node (internal order of the full tree) per row of values")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= tree.n_nodes):
        raise DataError(f"node_ids must be nodes of the tree: internal-order indices in [0, {tree.n_nodes})")
    depth = tree.internal.depth[ids]
    out_dtype = np.int64 if (mechanism.integer and np.issubdtype(values.dtype, np.integer)) else np.float64
    noisy = np.zeros(values.shape, dtype=out_dtype)
    variance = np.full(ids.size, np.inf)
    level_budget = np.array([float(budgets.get(name, 0.0)) for name in tree.level_names])
    node_budget = level_budget[depth]
    for b in np.unique(level_budget[level_budget > 0]):  # one call per budget: keyed noise does not
        rows = np.flatnonzero(node_budget == b)          # depend on which call draws it
        if rows.size == 0:
            continue
        noisy[rows] = mechanism.sample_keyed(values[rows], float(b), sensitivity, key, ids[rows], measurement)
        variance[rows] = float(mechanism.variance(float(b), sensitivity))
    return noisy, variance


def exact_budgets(budget: Any, names: Sequence[str]) -> dict[str, str]:
    """The per-level values given as exact rationals (``"1440/4099"`` or a Fraction), by level
    name, in lowest terms (:func:`hierdp.accounting.parse_budget`); empty for a strategy."""
    if isinstance(budget, Mapping):
        given = {n: budget[n] for n in names if n in budget}
    elif isinstance(budget, (Sequence, np.ndarray)) and not isinstance(budget, str) and len(budget) == len(names):
        given = dict(zip(names, budget))
    else:
        return {}
    return {n: e for n, v in given.items() if (e := parse_budget(v)[1])}


def invariant_levels(tree: Tree, invariants: np.ndarray | None) -> list[str]:
    """Names of the levels whose every node is invariant (internal-order boolean mask)."""
    if invariants is None or not invariants.any():
        return []
    out = []
    for d, name in enumerate(tree.level_names):
        if invariants[tree.internal.level_index[d]].all():
            out.append(name)
    return out


def apply_invariants(values: np.ndarray, noisy: np.ndarray, variance: np.ndarray,
                     invariants: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Invariant nodes (internal-order mask) take their exact value with variance 0: a
    measurement without noise, which BLUE/GMC honour as a constraint. It spends nothing and
    protects nothing (the ledger says so)."""
    if invariants is None or not invariants.any():
        return noisy, variance
    noisy = noisy.astype(np.result_type(noisy.dtype, values.dtype), copy=True)
    noisy[invariants] = values[invariants]
    variance = np.array(variance, dtype=np.float64, copy=True)
    variance[invariants] = 0.0
    return noisy, variance


def mechanism_budget_unit(mechanism: Mechanism) -> str:
    """The budget unit of a plan measuring with ``mechanism``: its own, or ``"approx"``
    for an (ε, δ) mechanism (a δ per use)."""
    return "approx" if mechanism.delta_per_use > 0 else mechanism.budget_unit


def mechanism_total(mechanism: Mechanism, loss: PrivacyLoss) -> tuple[float, dict[str, Any]]:
    """Total and guarantee of a plan measuring with ``mechanism`` for the (valid) ``loss``.

    An (ε, δ) mechanism (a δ per use, e.g. truncated Laplace) composes its ε as a pure one
    does and has its δ checked per use when measuring; a pure or ρ mechanism takes the
    total in its own unit, an (ε, δ) request on Gaussian noise calibrated under
    ``loss.accountant`` on the curve the mechanism declares (its ``privacy_curve``:
    :func:`hierdp.accounting.calibrated_total`).
    """
    if mechanism.delta_per_use <= 0:
        return calibrated_total(mechanism.budget_unit, loss, curve=getattr(mechanism, "privacy_curve", None),
                                mechanism=mechanism.name)
    rules.enforce(rules.mechanism_unit_problem("epsilon", mechanism.name, epsilon=loss.epsilon is not None,
                                               delta=False, rho=loss.rho is not None), PrivacyError)
    return cast(float, loss.epsilon), {"guarantee": "approx", "epsilon": loss.epsilon, "delta": loss.delta,
                                       "rho": None}


def key_for(rng: RandomSource, key: NoiseKey | None) -> NoiseKey:
    """``key``, or :meth:`NoiseKey.from_rng` ``(rng)`` for a caller that gives only a random source."""
    if key is None:
        return NoiseKey.from_rng(rng)
    if not isinstance(key, NoiseKey):
        raise PluginError(f"key must be a hierdp.keyed_noise.NoiseKey, got {type(key).__name__:.60}")
    return key


class PerLevel(Plan):
    """One mechanism call per level, budgets from a strategy (basic composition over levels).

    Parameters: ``mechanism`` (name, instance or ``{"name": ..., ...}``; default
    ``discrete_laplace``) and ``budget`` (a strategy name such as ``equal``, a strategy,
    ``{"strategy": ..., "params": ...}``, or per-level values as a dict or a list).
    """

    name = "per_level"
    supports_invariants = True
    keyed_noise = True
    runs_by_subtree = True

    def __init__(self, mechanism: Any = "discrete_laplace", budget: Any = "equal") -> None:
        self.mechanism = resolve_mechanism(mechanism)
        self.budget = budget
        self._strategy = _strategy(budget) if _is_strategy(budget) else None

    @property
    def budget_unit(self) -> str:
        return mechanism_budget_unit(self.mechanism)

    @property
    def budget_owner(self) -> str:
        return f"mechanism {self.mechanism.name!r}"

    def total_for(self, loss: PrivacyLoss) -> tuple[float, dict[str, Any]]:
        mech = self.mechanism
        if mech.delta_per_use <= 0:
            rules.enforce(rules.rho_per_level_problem(mech.budget_unit, rho_given=loss.rho is not None,
                                                      per_level=self._strategy is None and loss.epsilon is not None),
                          BudgetError)
        return mechanism_total(mech, loss)

    def calibrate(self, tree: Tree, loss: PrivacyLoss, total: float, guarantee: dict[str, Any], *,
                  sensitivity: Sensitivity, invariants: np.ndarray | None = None) -> tuple[float, dict[str, Any]]:
        """An (ε, δ) request on the discrete Gaussian met on its own exact curve for this
        tree's split (Canonne, Kamath & Steinke 2020, Thm 7; :func:`hierdp.accounting.split_total`),
        when the split is a public strategy's (not one that reads true counts) and the
        mechanism's σ² is known (its ``params(...).sigma2``): the total is then the largest
        at which the σ² the sampler draws with meet (ε, δ). Otherwise unchanged (the CKS
        2020 bound)."""
        mech, strategy = self.mechanism, self._strategy
        if getattr(mech, "privacy_curve", None) != "discrete_gaussian" or loss.kind != "approx" \
                or loss.accountant != "tight" or strategy is None or strategy.reads_true_counts \
                or mech.delta_per_use > 0:
            return total, guarantee
        params = getattr(mech, "params", None)
        if params is None or not hasattr(params(total, sensitivity), "sigma2"):
            return total, guarantee
        inv = invariant_levels(tree, invariants)
        eps, delta = cast(float, loss.epsilon), cast(float, loss.delta)
        units = unit_moves(sensitivity.l1, sensitivity.l2)

        def alloc(t: float) -> list[float]:
            got = resolve_budget(tree, t, strategy, mechanism=mech, sensitivity=sensitivity, invariant_levels=inv)[0]
            return [b for b in got.values() if b > 0]

        def drawn_delta_ok(t: float) -> bool:  # the σ² the sampler uses at this total (rounded up)
            s2 = [float(params(b, sensitivity).sigma2) for b in alloc(t)]
            d = discrete_gaussian_delta(eps, s2, units, log_tail=math.log(delta) - 25.0)
            return d is not None and d <= delta * (1 - 1e-9)

        shares = [b / total for b in alloc(total)]  # at the CKS total: near the result for a split not linear in it
        return split_total(loss, total, guarantee, shares=shares, l1=sensitivity.l1, l2=sensitivity.l2,
                           check=drawn_delta_ok)

    def measure(self, tree: Tree, values: np.ndarray, *, total: float, delta: float | None,
                sensitivity: Sensitivity, rng: RandomSource, invariants: np.ndarray | None = None,
                key: NoiseKey | None = None, node_ids: np.ndarray | None = None) -> Measurements:
        """Measure every level (see the class); ``key``: noise keyed per node (releases pass
        one; without it a key is drawn from ``rng``), ``node_ids``: the nodes' identities in
        the full tree (:func:`measure`)."""
        mech = self.mechanism
        inv_levels = invariant_levels(tree, invariants)
        alloc, desc, reads_true = resolve_budget(tree, total, self.budget if self._strategy is None
                                                 else self._strategy, mechanism=mech, sensitivity=sensitivity,
                                                 true_values=tree.to_external(values), invariant_levels=inv_levels)
        measured = sum(1 for b in alloc.values() if b > 0)
        rules.enforce(rules.delta_mechanism_problem(mech.name, mech.delta_per_use, measured, delta), BudgetError)
        noisy, variance, levels = measure(tree, values, alloc, mech, sensitivity, key_for(rng, key),
                                          node_ids=node_ids)
        noisy, variance = apply_invariants(values, noisy, variance, invariants)
        exact = exact_budgets(self.budget, tree.level_names) if self._strategy is None else {}
        for i, ls in enumerate(levels):
            if ls.level in inv_levels:
                levels[i] = ls = LevelSpend(**{**ls.__dict__, "noise_variance": 0.0})
            if ls.level in exact:  # given as an exact rational: the ledger states it (issue 34 item 3)
                levels[i] = LevelSpend(**{**ls.__dict__, "budget_exact": exact[ls.level]})
        unit = "epsilon" if mech.budget_unit == "epsilon" else "rho"
        spends = [Spend(ls.budget, unit, label=ls.level, delta=mech.delta_per_use)
                  for ls in levels if ls.measured]
        info: dict[str, Any] = {"budget_strategy": desc}
        if reads_true:
            info["non_private"] = [f"budget strategy {desc!r} chose the split by reading true counts"]
        return Measurements(values=noisy, variance=variance, spends=spends, levels=levels, info=info)

    def ledger_fields(self) -> dict[str, str]:
        desc = self._strategy.name if self._strategy is not None else "per-level"
        return {"mechanism": self.mechanism.name, "budget_strategy": desc}

    def __repr__(self) -> str:
        return f"<plan 'per_level' mechanism={self.mechanism.name!r}>"
