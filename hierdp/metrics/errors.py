"""Error metrics for hierarchical releases, as the papers define them.

All metrics compare estimates with TRUE counts: they are evaluation tools, not private
outputs. Arrays are indexed like the tree's external numbering: ``true`` has shape
``(n,)`` (or ``(n, k)`` for histograms per node) and ``estimate`` has the same shape (one
release) or an extra leading axis of repetitions ``(R, n[, k])``; expectations in the
definitions are taken over the repetitions (and cells are averaged like nodes).

Every metric has ``summary(true, estimate, tree=None, **params) -> float`` (one number
for the whole tree) and, where meaningful, ``by_level(...) -> array`` (one per depth);
metrics with a closed form under unbiased noise also have ``from_variance``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from hierdp.errors import DataError, HierarchyError
from hierdp.metrics.base import Metric
from hierdp.postprocessors.base import Estimate

__all__ = ["RMSRE", "TreeRMSRE", "AlphaRMSE", "AlphaMRMSE", "AlphaEtaAccuracy", "RMSENode", "RMSERange",
           "ConsistencyBias", "RelativeError", "BUILTIN_METRICS"]


def _values(x: Any) -> np.ndarray:
    """An array from an array, a Series, an ``Estimate`` or a ``ReleaseResult`` (external order)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, pd.DataFrame):
        raise DataError("pass node arrays in the tree's node order (e.g. result.values), not a DataFrame")
    if hasattr(x, "ledger") and hasattr(x, "estimate"):  # ReleaseResult
        x = x.estimate
    if isinstance(x, Estimate):
        x = x.values
    if isinstance(x, pd.Series):
        x = x.to_numpy()
    return np.asarray(x, dtype=np.float64)


def _arrays(true: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray]:
    """``true`` as float (n, ...) and ``estimate`` as float (R, n, ...)."""
    t = np.asarray(_values(true), dtype=np.float64)
    e = np.asarray(_values(estimate), dtype=np.float64)
    if t.ndim == 0:
        raise DataError("true counts must be an array with one entry per node")
    if e.shape == t.shape:
        e = e[None]
    elif e.shape[1:] != t.shape:
        raise DataError(
            f"estimate must have the shape of the true counts {t.shape} or a stack of repetitions "
            f"(R,) + {t.shape}, got {e.shape}"
        )
    return t, e


def _per_node(x: np.ndarray) -> np.ndarray:
    """Mean over repetitions (axis 0) and cells (axes 2+): one value per node."""
    axes = (0,) + tuple(range(2, x.ndim))
    return x.mean(axis=axes)


def _node_variance(variance: Any, shape: tuple) -> np.ndarray:
    """Variances broadcast to ``shape`` (n,) or (n, k): a per-node (n,) variance is shared
    by the node's cells (lined up on the node axis, not the cell axis)."""
    v = np.asarray(variance, dtype=np.float64)
    if 0 < v.ndim < len(shape):
        v = v.reshape(v.shape + (1,) * (len(shape) - v.ndim))
    try:
        return np.broadcast_to(v, shape)
    except ValueError:
        raise DataError(f"variance of shape {np.shape(variance)} does not fit values of shape {shape}") from None


def _per_node_cells(x: np.ndarray) -> np.ndarray:
    """Mean over cells (axes 1+) of a per-node array."""
    return x.reshape(x.shape[0], -1).mean(axis=1) if x.ndim > 1 else x


def _depth(tree: Any, n: int, who: str) -> np.ndarray:
    if tree is None:
        raise HierarchyError(f"metric {who!r} needs the tree: pass tree=...")
    if tree.n_nodes != n:
        raise HierarchyError(f"the arrays have {n} nodes but the tree has {tree.n_nodes}")
    return tree.depth


def _level_mean(values: np.ndarray, depth: np.ndarray, n_levels: int) -> np.ndarray:
    s = np.bincount(depth, weights=values, minlength=n_levels)
    c = np.bincount(depth, minlength=n_levels)
    with np.errstate(invalid="ignore", divide="ignore"):
        return s / c


def _positive(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{name} must be a positive number, got {value!r}") from None
    if not (np.isfinite(v) and v > 0):
        raise DataError(f"{name} must be a positive number, got {value!r}")
    return v


class _Metric(Metric):
    """Shared plumbing: default parameters from the constructor, per-level breakdown."""

    #: "node": __call__ returns one value per node; "scalar": one number
    kind: ClassVar[str] = "scalar"
    needs_tree: ClassVar[bool] = False
    higher_is_better: ClassVar[bool] = False
    has_levels: ClassVar[bool] = True
    defaults: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # declare the parameters (``defaults``) as the constructor's signature, which
        # hierdp.plugins.params reads to check them where the metric is built
        super().__init_subclass__(**kwargs)
        cls.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
            inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v,
                              annotation=type(v) if type(v) in (int, float) else inspect.Parameter.empty)
            for k, v in cls.defaults.items()])

    def _params(self, params: dict[str, Any]) -> dict[str, Any]:
        out = dict(self.defaults)
        out.update(self.params)
        out.update(params)
        unknown = set(out) - set(self.defaults)
        if unknown:
            raise TypeError(f"metric {self.name!r} got unknown parameters {sorted(unknown)}; "
                            f"it takes {sorted(self.defaults) or 'none'}")
        return out

    def summary(self, true, estimate, *, tree=None, **params) -> float:
        """One number for the whole tree."""
        return float(self(true, estimate, tree=tree, **params))

    def by_level(self, true, estimate, *, tree, **params) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError(f"metric {self.name!r} has no per-level breakdown")


class RMSRE(_Metric):
    """RMS relative error at threshold τ per node (Dawson et al. 2023, Def. 7):
    RMSRE_τ(c, ĉ) = sqrt(E[(|ĉ − c| / max(τ, c))²]). Returns one value per node;
    ``summary``/``by_level`` are root-mean-squares over all nodes / each level."""

    name = "rmsre"
    kind = "node"
    defaults = {"tau": 10.0}

    def _ms(self, true, estimate, tau):
        t, e = _arrays(true, estimate)
        den = np.maximum(_positive("tau", tau), t)
        return t, _per_node(((e - t) / den) ** 2)

    def __call__(self, true, estimate, *, tree=None, **params):
        p = self._params(params)
        return np.sqrt(self._ms(true, estimate, p["tau"])[1])

    def summary(self, true, estimate, *, tree=None, **params):
        p = self._params(params)
        return float(np.sqrt(np.mean(self._ms(true, estimate, p["tau"])[1])))

    def by_level(self, true, estimate, *, tree, **params):
        p = self._params(params)
        t, ms = self._ms(true, estimate, p["tau"])
        return np.sqrt(_level_mean(ms, _depth(tree, t.shape[0], self.name), tree.n_levels))

    def from_variance(self, true, variance, *, tree=None, **params):
        """Analytic RMSRE_τ of unbiased estimates with the given variances (Dawson et al.
        App. B): sqrt(var̂_v) / max(τ, c_v), per node."""
        p = self._params(params)
        t = np.asarray(true, dtype=np.float64)
        v = _node_variance(variance, t.shape)
        return np.sqrt(_per_node_cells(v / np.maximum(_positive("tau", p["tau"]), t) ** 2))


class TreeRMSRE(_Metric):
    """Tree error RMSRE_τ(T) (Dawson et al. 2023, §3.2): the root of the mean over the
    d+1 levels of the mean over each level's nodes of RMSRE_τ(c_v, ĉ_v)²."""

    name = "tree_rmsre"
    needs_tree = True
    defaults = {"tau": 10.0}

    def by_level(self, true, estimate, *, tree, **params):
        return RMSRE(**self._params(params)).by_level(true, estimate, tree=tree)

    def __call__(self, true, estimate, *, tree=None, **params):
        lv = self.by_level(true, estimate, tree=tree, **params)
        return float(np.sqrt(np.mean(lv**2)))

    def from_variance(self, true, variance, *, tree=None, **params):
        """Analytic RMSRE_τ(T) from BLUE (or raw) variances (Dawson et al. App. B)."""
        p = self._params(params)
        per_node = RMSRE(**p).from_variance(true, variance)
        d = _depth(tree, per_node.shape[0], self.name)
        return float(np.sqrt(np.mean(_level_mean(per_node**2, d, tree.n_levels))))


class AlphaRMSE(_Metric):
    """α-multiplicative RMSE per node (Ghazi et al. 2023, Def. 4):
    RMSE_α(z̃, z) = sqrt(E[max(|z̃ − z| − α·z, 0)²]); α = 0 is the plain RMSE.
    ``summary``/``by_level`` are root-mean-squares over nodes."""

    name = "alpha_rmse"
    kind = "node"
    defaults = {"alpha": 0.1}

    def _ms(self, true, estimate, alpha):
        alpha = float(alpha)
        if not (np.isfinite(alpha) and alpha >= 0):
            raise DataError(f"alpha must be a number >= 0, got {alpha!r}")
        t, e = _arrays(true, estimate)
        return t, _per_node(np.maximum(np.abs(e - t) - alpha * t, 0.0) ** 2)

    def __call__(self, true, estimate, *, tree=None, **params):
        return np.sqrt(self._ms(true, estimate, self._params(params)["alpha"])[1])

    def summary(self, true, estimate, *, tree=None, **params):
        return float(np.sqrt(np.mean(self._ms(true, estimate, self._params(params)["alpha"])[1])))

    def by_level(self, true, estimate, *, tree, **params):
        t, ms = self._ms(true, estimate, self._params(params)["alpha"])
        return np.sqrt(_level_mean(ms, _depth(tree, t.shape[0], self.name), tree.n_levels))


class AlphaMRMSE(_Metric):
    """α-mRMSE (Ghazi et al. 2023, Def. 4): the maximum over nodes of RMSE_α
    (for the one input at hand; the paper also maximises over inputs)."""

    name = "alpha_mrmse"
    defaults = {"alpha": 0.1}

    def __call__(self, true, estimate, *, tree=None, **params):
        return float(np.max(AlphaRMSE(**self._params(params))(true, estimate)))

    def by_level(self, true, estimate, *, tree, **params):
        per = AlphaRMSE(**self._params(params))(true, estimate)
        d = _depth(tree, per.shape[0], self.name)
        out = np.full(tree.n_levels, np.nan)
        for lvl in range(tree.n_levels):
            sel = per[d == lvl]
            out[lvl] = sel.max() if sel.size else np.nan
        return out


class AlphaEtaAccuracy(_Metric):
    """(α, η)-accuracy (Ghazi et al. 2023, Problem 18, eq. 1): the fraction of nodes with
    |w̃_u − w_u| ≤ α·max(w_u, τ_u) (averaged over repetitions, i.e. the mean empirical
    success probability). With ``eta``, the fraction of nodes whose empirical success
    probability is at least 1 − η (1.0 means (α, η)-accurate on this input). ``tau``
    is a number or one threshold per node."""

    name = "alpha_eta_accuracy"
    kind = "scalar"
    higher_is_better = True
    defaults = {"alpha": 0.1, "tau": 0.0, "eta": None}

    def _prob(self, true, estimate, p):
        t, e = _arrays(true, estimate)
        alpha = float(p["alpha"])
        if not (np.isfinite(alpha) and alpha >= 0):
            raise DataError(f"alpha must be a number >= 0, got {p['alpha']!r}")
        tau = np.asarray(p["tau"], dtype=np.float64)
        if tau.ndim and tau.shape[0] != t.shape[0]:
            raise DataError(f"tau must be a number or one threshold per node ({t.shape[0]}), got shape {tau.shape}")
        if tau.ndim == 1 and t.ndim > 1:
            tau = tau.reshape((-1,) + (1,) * (t.ndim - 1))
        ok = np.abs(e - t) <= alpha * np.maximum(t, tau)
        return t, _per_node(ok.astype(np.float64))

    def _reduce(self, prob, eta):
        if eta is None:
            return prob
        eta = float(eta)
        if not 0 <= eta < 1:
            raise DataError(f"eta must be in [0, 1), got {eta!r}")
        return (prob >= 1 - eta - 1e-12).astype(np.float64)

    def __call__(self, true, estimate, *, tree=None, **params):
        p = self._params(params)
        _, prob = self._prob(true, estimate, p)
        return float(np.mean(self._reduce(prob, p["eta"])))

    def by_level(self, true, estimate, *, tree, **params):
        p = self._params(params)
        t, prob = self._prob(true, estimate, p)
        return _level_mean(self._reduce(prob, p["eta"]), _depth(tree, t.shape[0], self.name), tree.n_levels)


class RMSENode(_Metric):
    """RMSE of node queries (Cai et al., Generation Matrix, §6: rmse_NQ):
    sqrt(1/n Σ_i (v_i^out − v_i)²), averaged over repetitions inside the root."""

    name = "rmse_node"

    def __call__(self, true, estimate, *, tree=None, **params):
        self._params(params)
        t, e = _arrays(true, estimate)
        return float(np.sqrt(np.mean(_per_node((e - t) ** 2))))

    def by_level(self, true, estimate, *, tree, **params):
        self._params(params)
        t, e = _arrays(true, estimate)
        return np.sqrt(_level_mean(_per_node((e - t) ** 2), _depth(tree, t.shape[0], self.name), tree.n_levels))

    def from_variance(self, true, variance, *, tree=None, **params):
        """Analytic rmse_NQ of unbiased estimates: sqrt(mean variance)."""
        v = _node_variance(variance, np.shape(true))
        return float(np.sqrt(np.mean(v)))


def random_ranges(m: int, q: int, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``q`` distinct leaf ranges [a, b] (0 ≤ a ≤ b < m), uniform over all m(m+1)/2
    ranges (all of them when q is at least that many); sorted by (b, a)."""
    total = m * (m + 1) // 2
    if q >= total:
        k = np.arange(total, dtype=np.int64)
    else:
        rng = np.random.default_rng(seed)
        k = np.empty(0, np.int64)
        while k.size < q:
            k = np.unique(np.concatenate([k, rng.integers(0, total, size=2 * (q - k.size), dtype=np.int64)]))
        k = np.sort(rng.permutation(k)[:q])
    b = ((np.sqrt(8.0 * k + 1) - 1) // 2).astype(np.int64)
    b -= (b * (b + 1) // 2) > k  # guard against rounding of the square root
    b += ((b + 1) * (b + 2) // 2) <= k
    a = k - b * (b + 1) // 2
    return a, b


class RMSERange(_Metric):
    """RMSE of range queries (Cai et al., Generation Matrix, §6: rmse_RQ):
    sqrt(1/q Σ_i (Σ_{j=a_i}^{b_i} x_j^out − Σ_{j=a_i}^{b_i} x_j)²) over ``q`` random
    distinct leaf ranges (``seed``), leaves taken in ``tree.leaves`` order; a range is
    answered from the released leaves."""

    name = "rmse_range"
    needs_tree = True
    has_levels = False
    defaults = {"q": 1000, "seed": 0}

    def __call__(self, true, estimate, *, tree=None, **params):
        p = self._params(params)
        t, e = _arrays(true, estimate)
        _depth(tree, t.shape[0], self.name)
        leaves = tree.leaves
        q = int(p["q"])
        if q < 1:
            raise DataError(f"q must be a positive number of ranges, got {p['q']!r}")
        a, b = random_ranges(leaves.size, q, p["seed"])
        diff = (e[:, leaves] - t[leaves]).reshape(e.shape[0], leaves.size, -1)
        cs = np.zeros((diff.shape[0], leaves.size + 1, diff.shape[2]))
        np.cumsum(diff, axis=1, out=cs[:, 1:])
        err = cs[:, b + 1] - cs[:, a]
        return float(np.sqrt(np.mean(err**2)))


class ConsistencyBias(_Metric):
    """Consistency bias (Cai et al., Generation Matrix, formula 42): with Δ = M_Tᵀ v
    (Δ_i = v_i − Σ_{c child of i} v_c for every non-leaf i), bias = sqrt(Σ Δ_i² / n₁).
    Reads only the estimate (``true`` may be None); 0 for a consistent release."""

    name = "consistency_bias"
    needs_tree = True

    def _delta(self, estimate, tree, true=None):
        if tree is None:
            raise HierarchyError(f"metric {self.name!r} needs the tree: pass tree=...")
        e = np.asarray(_values(estimate), dtype=np.float64)
        n = tree.n_nodes
        if true is not None:  # the true counts' shape says whether this is a stack of repetitions
            single = e.ndim == np.ndim(_values(true))
        elif e.ndim >= 2 and e.shape[0] == n and e.shape[1] == n:
            raise DataError(f"an estimate of shape {e.shape} may be one release of {n}-cell histograms or {n} "
                            "repetitions; pass the true counts (or any array of one release's shape) as `true`")
        else:
            single = e.shape[0] == n
        if single:
            e = e[None]
        if e.shape[1] != n:
            raise DataError(f"estimate must have one entry per node ({n}), got shape {e.shape}")
        parent = tree.parent
        child = np.flatnonzero(parent >= 0)
        s = np.zeros_like(e)
        np.add.at(s, (slice(None), parent[child]), e[:, child])
        internal = tree.n_children > 0
        d = (e - s)[:, internal]
        return d.reshape(d.shape[0], d.shape[1], -1), internal

    def __call__(self, true, estimate, *, tree=None, **params):
        self._params(params)
        d, _ = self._delta(estimate, tree, true)
        return float(np.sqrt(np.mean(d**2))) if d.size else 0.0

    def by_level(self, true, estimate, *, tree, **params):
        self._params(params)
        d, internal = self._delta(estimate, tree, true)
        ms = (d**2).mean(axis=(0, 2))
        return np.sqrt(_level_mean(ms, tree.depth[internal], tree.n_levels))


class RelativeError(_Metric):
    """Relative error with smoothing (Zhang et al., PrivTree, §5):
    RE = |q̂ − q| / max(q, Δ), Δ = ``smoothing`` × the dataset cardinality (default 0.1%;
    the cardinality is the true root count when the tree is given, else the largest true
    count), or an absolute ``delta``. The queries are the nodes (one value per node, mean
    over repetitions), or with ``ranges=q`` — as in the paper — ``q`` random distinct leaf
    ranges (``seed``; leaves in ``tree.leaves`` order, answered from the released leaves).
    ``summary`` averages over the queries, ``by_level`` over each level's nodes."""

    name = "relative_error"
    kind = "node"
    defaults = {"smoothing": 0.001, "delta": None, "ranges": None, "seed": 0}

    def _re(self, true, estimate, tree, p):
        t, e = _arrays(true, estimate)
        if p["delta"] is not None:
            delta = _positive("delta", p["delta"])
        else:
            card = float(np.sum(t[tree.root])) if tree is not None else float(np.max(t))
            delta = _positive("smoothing", p["smoothing"]) * card
            if delta <= 0:
                raise DataError("the smoothing Δ is 0 (empty data); pass delta= explicitly")
        if p["ranges"] is None:
            return t, _per_node(np.abs(e - t) / np.maximum(t, delta))
        _depth(tree, t.shape[0], self.name)
        q = int(p["ranges"])
        if q < 1:
            raise DataError(f"ranges must be a positive number of range queries, got {p['ranges']!r}")
        leaves = tree.leaves
        a, b = random_ranges(leaves.size, q, p["seed"])
        tl = t[leaves].reshape(leaves.size, -1)
        el = e[:, leaves].reshape(e.shape[0], leaves.size, -1)
        ct = np.concatenate([np.zeros((1, tl.shape[1])), np.cumsum(tl, axis=0)])
        ce = np.concatenate([np.zeros((el.shape[0], 1, el.shape[2])), np.cumsum(el, axis=1)], axis=1)
        qt = ct[b + 1] - ct[a]
        qe = ce[:, b + 1] - ce[:, a]
        return t, _per_node(np.abs(qe - qt) / np.maximum(qt, delta))

    def __call__(self, true, estimate, *, tree=None, **params):
        return self._re(true, estimate, tree, self._params(params))[1]

    def summary(self, true, estimate, *, tree=None, **params):
        return float(np.mean(self._re(true, estimate, tree, self._params(params))[1]))

    def by_level(self, true, estimate, *, tree, **params):
        p = self._params(params)
        if p["ranges"] is not None:
            raise DataError("relative_error over leaf ranges has no per-level breakdown; drop ranges= for node queries")
        t, re = self._re(true, estimate, tree, p)
        return _level_mean(re, _depth(tree, t.shape[0], self.name), tree.n_levels)


BUILTIN_METRICS = [RMSRE, TreeRMSRE, AlphaRMSE, AlphaMRMSE, AlphaEtaAccuracy, RMSENode, RMSERange,
                   ConsistencyBias, RelativeError]
