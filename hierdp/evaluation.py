"""Evaluation harness: which release configuration should I publish?

Runs release configurations (mechanism × budget × post-processing × ε) R times each on
the same data and scores them with error metrics. NOT PRIVATE: the harness reads the
true counts to measure errors (and passes them to oracle budget strategies); every row
of its output says so in the ``non_private`` column and in ``DataFrame.attrs``. Use it
on public, synthetic or earlier data to choose a configuration, then release once.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp import registry
from hierdp.accounting import PrivacyLoss
from hierdp.budgets.base import BudgetStrategy
from hierdp.errors import DataError, NotForPublicationWarning, SpecError
from hierdp.mechanisms.base import Sensitivity
from hierdp.pipeline import release
from hierdp.plans.per_level import mechanism_total, resolve_budget, resolve_mechanism

__all__ = ["evaluate", "COLUMNS", "NON_PRIVATE_NOTE"]

#: Columns of the tidy result, in order.
COLUMNS = ["config", "epsilon", "rho", "metric", "level", "mean", "std_error", "value", "analytic",
           "repetitions", "oracle_budget", "non_private"]

NON_PRIVATE_NOTE = ("evaluation reads the true counts: these error figures are not differentially private "
                    "and must not be published as part of a release")

_RELEASE_KEYS = {"mechanism", "budget", "postprocess", "epsilon", "delta", "rho", "sensitivity"}


def _norm_configs(configs: Any) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(configs, Mapping):
        items = [(str(k), dict(v)) for k, v in configs.items()]
    elif isinstance(configs, Sequence) and not isinstance(configs, str):
        items = []
        for i, c in enumerate(configs):
            c = dict(c)
            items.append((str(c.pop("name", f"config_{i}")), c))
    else:
        raise SpecError("configs must be a dict name -> release keywords or a list of dicts, "
                        f"got {type(configs).__name__}")
    if not items:
        raise SpecError("configs is empty; give at least one release configuration")
    names = [n for n, _ in items]
    if len(set(names)) != len(names):
        raise SpecError(f"duplicate configuration names {sorted({n for n in names if names.count(n) > 1})}")
    for name, c in items:
        bad = set(c) - _RELEASE_KEYS
        if bad:
            raise SpecError(f"configuration {name!r} has unknown keys {sorted(bad)}; "
                            f"expected some of {sorted(_RELEASE_KEYS)}")
    return items


def _norm_metrics(metrics: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    one_pair = (isinstance(metrics, tuple) and len(metrics) == 2 and isinstance(metrics[0], str)
                and (metrics[1] is None or isinstance(metrics[1], Mapping)))
    if isinstance(metrics, (str, Mapping)) or one_pair:  # a single metric; other tuples are lists
        metrics = [metrics]
    out = []
    for m in metrics:
        if isinstance(m, str):
            name, params = m, {}
        elif isinstance(m, tuple) and len(m) == 2 and isinstance(m[0], str):
            name, params = m[0], dict(m[1] or {})
        elif isinstance(m, Mapping) and "name" in m:
            params = {k: v for k, v in m.items() if k != "name"}
            name = m["name"]
        else:
            raise SpecError(f"cannot use {m!r} as a metric; give a name, (name, params) or {{'name': ..., ...}}")
        inst = registry.create("metric", name, **params)
        label = name if not params else name + "(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")"
        out.append((label, inst, params))
    return out


def _grid(name: str, cfg: dict[str, Any], epsilons: Any) -> list[dict[str, Any]]:
    """One release-keyword dict per total budget of a configuration."""
    cfg = dict(cfg)
    if "rho" in cfg:
        key = "rho"
    else:
        key = "epsilon"
        if epsilons is not None and "epsilon" not in cfg:
            cfg["epsilon"] = epsilons
    if key not in cfg:
        raise SpecError(f"configuration {name!r} has no epsilon (or rho); give one or pass epsilons=[...]")
    vals = cfg.pop(key)
    vals = [vals] if np.ndim(vals) == 0 else list(vals)
    return [{**cfg, key: float(v)} for v in vals]


def _fixed_budget(strategy: BudgetStrategy, alloc: dict[str, float]) -> BudgetStrategy:
    """A strategy that returns a precomputed split under the original name and flags."""
    cls = type(f"Fixed_{strategy.name}", (BudgetStrategy,), {
        "name": strategy.name,
        "reads_true_counts": strategy.reads_true_counts,
        "allocate": lambda self, tree, total, **kw: dict(alloc),
        "__doc__": f"The split chosen once by {strategy.name!r} (reused across repetitions).",
    })
    return cast(BudgetStrategy, cls())


def _progress(total: int, progress: bool | None) -> Any:
    if progress is False or (progress is None and not (total >= 50 and sys.stderr.isatty())):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # a plain counter on stderr
        class _Counter:
            def __init__(self) -> None:
                self.n = 0

            def update(self, k: int = 1) -> None:
                self.n += k
                print(f"\r{self.n}/{total} releases", end="", file=sys.stderr)

            def close(self) -> None:
                print(file=sys.stderr)

        return _Counter()
    return tqdm(total=total, desc="releases", unit="release")


def evaluate(
    data: Any,
    configs: Mapping[str, Mapping[str, Any]] | Sequence[Mapping[str, Any]],
    *,
    values: np.ndarray | None = None,
    epsilons: Sequence[float] | float | None = None,
    repetitions: int = 10,
    metrics: Any = "tree_rmsre",
    by_level: bool = False,
    seed: int | None = None,
    progress: bool | None = None,
) -> pd.DataFrame:
    """Score release configurations by repeated releases. NON-PRIVATE (reads true counts).

    Parameters
    ----------
    data : Tree or DPTree
        A :class:`~hierdp.Tree` with ``values`` (true node counts, external order), or what
        ``df.dptree(...)`` returns (its true counts are read).
    values : numpy.ndarray, optional
        The true node counts when ``data`` is a Tree (NON-PRIVATE: evaluation only).
    configs : dict or list
        ``{name: release keywords}`` (``mechanism``, ``budget``, ``postprocess``,
        ``epsilon`` (number or list), ``delta``, ``rho``, ``sensitivity``), or a list of
        such dicts with a ``name`` key. A budget strategy is run once per (config, ε) and
        its split reused for the repetitions; oracle strategies receive the true counts.
    epsilons : list, optional
        ε grid for configurations that do not give their own.
    repetitions : int
        Releases per (configuration, ε).
    metrics : names, ``(name, params)`` pairs or dicts
        E.g. ``[("tree_rmsre", {"tau": 5}), "rmse_node"]``.
    by_level : bool
        Also report each level (metrics that have a per-level breakdown).
    seed : int, optional
        Reproducible runs (tests, benchmarks); None uses secure randomness.
    progress : bool, optional
        Show a progress bar (tqdm if installed); default: on for ≥ 50 releases on a terminal.

    Returns
    -------
    pandas.DataFrame
        Columns ``config, epsilon, rho, metric, level, mean, std_error, value,
        analytic, repetitions, oracle_budget, non_private``: ``mean`` and ``std_error`` over the
        per-repetition values; ``value`` the metric of the whole stack (expectations over
        repetitions inside the definition, e.g. the RMS in RMSRE_τ); ``analytic`` the closed
        form from the released variances where the metric has one (e.g. RMSRE_τ(T) from
        BLUE variances, Dawson et al. App. B); ``level`` is ``"all"`` or a level name;
        ``non_private`` is always True.
    """
    tree = getattr(data, "tree", data)
    # how rows count (e.g. the sensitivity of unit-bounded data) applies to every release
    defaults = data.release_defaults() if hasattr(data, "release_defaults") else {}
    if values is None:
        if not hasattr(data, "true_counts"):
            raise DataError("evaluate(tree, ...) needs values=<true node counts>; or pass df.dptree(...)")
        values = data.true_counts()
    values = np.asarray(values)
    if values.shape[:1] != (tree.n_nodes,):
        raise DataError(f"values must have one row per node ({tree.n_nodes}), got shape {values.shape}")
    if isinstance(repetitions, bool) or not isinstance(repetitions, (int, np.integer)) or repetitions < 1:
        raise DataError(f"repetitions must be a positive integer, got {repetitions!r}")
    cfgs = [(name, kw) for name, c in _norm_configs(configs) for kw in _grid(name, c, epsilons)]
    mets = _norm_metrics(metrics)
    seeds = (np.random.SeedSequence(seed).generate_state(len(cfgs) * repetitions, dtype=np.uint64)
             .astype(np.int64) & ((1 << 62) - 1)) if seed is not None else None
    bar = _progress(len(cfgs) * repetitions, progress)
    rows: list[dict[str, Any]] = []
    try:
        for ci, (name, kw) in enumerate(cfgs):
            kw = dict(kw)
            budget = kw.pop("budget", "equal")
            mech = resolve_mechanism(kw.pop("mechanism", "discrete_laplace"))
            kw = {**{k: v for k, v in defaults.items() if k != "max_contributions"}, **kw}
            sens = kw.get("sensitivity") or Sensitivity()
            # the total a release of this mechanism takes (the tight accountant's, issue 34)
            total, _ = mechanism_total(mech, PrivacyLoss.of(kw.get("epsilon"), kw.get("delta"), kw.get("rho"),
                                                            unit=mech.budget_unit, who=f"mechanism {mech.name!r}"))
            alloc, desc, reads_true = resolve_budget(tree, total, budget, mechanism=mech, sensitivity=sens,
                                                     true_values=values)
            fixed = alloc if desc == "per-level" else _fixed_budget(
                budget if isinstance(budget, BudgetStrategy) else registry.get("budget", desc)(), alloc)
            ests, var = [], None
            for r in range(repetitions):
                with warnings.catch_warnings():  # evaluation is non-private by nature (NON_PRIVATE_NOTE)
                    warnings.simplefilter("ignore", NotForPublicationWarning)
                    res = release(tree, values, mechanism=mech, budget=fixed,
                                  seed=None if seeds is None else int(seeds[ci * repetitions + r]), **kw)
                ests.append(np.asarray(res.estimate.values, dtype=np.float64))
                var = res.estimate.variance
                if bar is not None:
                    bar.update(1)
            stack = np.stack(ests)
            base = {"config": name, "epsilon": kw.get("epsilon", np.nan), "rho": kw.get("rho", np.nan),
                    "repetitions": repetitions, "oracle_budget": bool(reads_true), "non_private": True}
            for label, m, _ in mets:
                per = np.array([m.summary(values, e, tree=tree) for e in stack])
                analytic = np.nan
                if hasattr(m, "from_variance") and var is not None and getattr(m, "kind", "scalar") == "scalar":
                    analytic = float(m.from_variance(values, var, tree=tree))
                rows.append({**base, "metric": label, "level": "all", **_stats(per),
                             "value": m.summary(values, stack, tree=tree), "analytic": analytic})
                if by_level and getattr(m, "has_levels", False) and hasattr(m, "by_level"):
                    per_l = np.array([m.by_level(values, e, tree=tree) for e in stack])
                    pooled = m.by_level(values, stack, tree=tree)
                    for d, lvl in enumerate(tree.level_names):
                        rows.append({**base, "metric": label, "level": lvl, **_stats(per_l[:, d]),
                                     "value": float(pooled[d]), "analytic": np.nan})
    finally:
        if bar is not None:
            bar.close()
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["non_private"] = NON_PRIVATE_NOTE
    return df


def _stats(x: np.ndarray) -> dict[str, float]:
    x = np.asarray(x, dtype=np.float64)
    mean = float(np.mean(x))
    se = float(np.std(x, ddof=1) / np.sqrt(x.size)) if x.size > 1 else np.nan
    return {"mean": mean, "std_error": se}
