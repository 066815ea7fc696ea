"""What the release report says, from public facts only (:mod:`hierdp.report` renders it).

* the guarantee (ε / ρ / (ε, δ)), the neighbour relation, the privacy unit and its bound,
  the invariants (not protected), and where each level's structure came from (declared,
  observed, private output) — the ledger;
* the budget per level (and per structure spend, and per marginal query of plan
  ``marginals``) as recorded, as an exact rational and as a share of the total, and the
  loss each level implies alone (ρ converted to ε at the release's δ with Canonne,
  Kamath & Steinke 2020, Cor. 13, as :func:`hierdp.accounting.zcdp_to_approx_dp`);
* the expected accuracy of each level's measurement **from the public noise law only**:
  standard deviation, the half-widths of the 90 % and 95 % intervals, the expected RMSE
  and MAE. Discrete Laplace with ``P(z) ∝ q^|z|``, ``q = exp(-1/t)`` (Dawson et al. 2023,
  §2; Canonne, Kamath & Steinke 2020): ``E|Z| = 2q / (1 - q²)`` and
  ``P(|Z| <= k) = 1 - 2q^(k+1) / (1+q)``; discrete Gaussian ``N_Z(0, σ²)`` (Canonne, Kamath
  & Steinke 2020, Def. 1): its pmf summed; continuous Laplace of scale b: half-width
  ``b·ln(1/(1-c))``, ``E|Z| = b``; Gaussian σ: ``σ·Φ⁻¹((1+c)/2)``, ``E|Z| = σ·√(2/π)``.
  With a release, the expected RMSE of the released (post-processed) values per level,
  from their variances (a linear unbiased chain: RMSE² = mean variance);
* the post-processing chain, each step with the parameters it ran with (the ledger's
  ``postprocess_params``, then the step's constructor defaults);
* provenance: the SHA-256 of a spec and of its public input files (never of the private
  source: a hash is an exact function of the private data, so it would not be
  differentially private).

Nothing here reads the true counts or ``ledger.private_notes``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from dataclasses import fields
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from hierdp import registry, rules
from hierdp._version import __version__
from hierdp.accounting import zcdp_to_approx_dp
from hierdp.accounting.ledger import Ledger, LevelSpend, _compact_levels
from hierdp.accuracy import accuracy_tables
from hierdp.errors import HierDPError
from hierdp.mechanisms.base import Mechanism, Sensitivity
from hierdp.mechanisms.continuous import Gaussian, Laplace
from hierdp.mechanisms.discrete_gaussian import DiscreteGaussian
from hierdp.mechanisms.discrete_laplace import DiscreteLaplace
from hierdp.uncertainty import exact_halfwidth

#: confidence levels of the accuracy table
LEVELS_CI = (0.9, 0.95)
#: the largest denominator tried when the recorded decimal is read back as a simple fraction
_MAX_DENOMINATOR = 10**6


# -- numbers ------------------------------------------------------------------------------
def exact_rational(x: float) -> Fraction:
    """The rational a recorded budget stands for: the simplest fraction (denominator up to
    10⁶) whose nearest double is ``x`` (``1/3`` for ``0.3333333333333333``), else the exact
    binary fraction of the double itself. Equal to ``x`` when converted back to a float."""
    f = Fraction(float(x))
    simple = f.limit_denominator(_MAX_DENOMINATOR)
    return simple if float(simple) == float(x) else f


def _frac(f: Fraction) -> str:
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def _num(x: Any) -> str:
    """A recorded number exactly as the ledger's JSON writes it (``repr`` of the float)."""
    if x is None:
        return ""
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return repr(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _sensitivity(x: Any) -> str:
    """A sensitivity as a reader writes it: ``2``, ``√2``, ``2√2`` when its square is a whole
    number (the L2 sensitivities of counts are square roots of whole numbers), else four
    significant digits; the exact value stays in the ledger's JSON and the report's YAML."""
    if x is None:
        return ""
    f = float(x)
    if not math.isfinite(f) or f <= 0:
        return _num(x)
    if f == round(f) and f < 1e15:
        return str(int(f))
    k = round(f * f)
    if 0 < k < 10**12 and abs(f * f - k) <= 1e-9 * k:
        a = next(a for a in range(math.isqrt(k), 0, -1) if k % (a * a) == 0)
        b = k // (a * a)
        return str(a) if b == 1 else (f"√{b}" if a == 1 else f"{a}√{b}")
    return f"{f:.4g}"


def _g(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if math.isinf(x):
        return "∞"
    return f"{x:.{digits}g}"


# -- the guarantee ------------------------------------------------------------------------
def _variant(ledger: Ledger) -> str:
    return {"pure": "Pure DP", "zcdp": "Zero-concentrated DP", "approx": "Approximate DP"}.get(ledger.guarantee,
                                                                                             "Custom")


def guarantee_text(ledger: Ledger) -> str:
    """The guarantee in one line, e.g. ``ε-DP with ε = 1``."""
    if ledger.guarantee == "pure":
        return f"ε-differential privacy with ε = {_num(ledger.epsilon)}"
    if ledger.guarantee == "zcdp":
        out = f"ρ-zero-concentrated differential privacy with ρ = {_num(ledger.rho)}"
        if ledger.epsilon is not None and ledger.delta is not None:
            out += f", which implies (ε, δ)-DP with ε = {_num(ledger.epsilon)}, δ = {_num(ledger.delta)}"
        return out
    out = f"(ε, δ)-differential privacy with ε = {_num(ledger.epsilon)}, δ = {_num(ledger.delta)}"
    if ledger.rho is not None:
        out += f" (accounted as ρ-zCDP, ρ = {_num(ledger.rho)})"
    return out


def _unit_bound(ledger: Ledger) -> str:
    if ledger.max_contributions is None:
        return "one row per privacy unit"
    return f"at most {ledger.max_contributions} rows per privacy unit (contributions bounded before the noise)"


def _neighbours(ledger: Ledger) -> str:
    try:
        return rules.neighbours_text(ledger.neighbours)
    except KeyError:
        return str(ledger.neighbours)


def _structure_runs(structure: dict[str, str]) -> list[tuple[str, str]]:
    """``(levels, provenance)`` with consecutive levels of the same provenance (three or
    more) as one entry ``"a … z (n levels)"``."""
    items = list(structure.items())
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(items):
        j = i + 1
        while j < len(items) and items[j][1] == items[i][1]:
            j += 1
        if j - i >= 3:
            out.append((f"{items[i][0]} … {items[j - 1][0]} ({j - i} levels)", items[i][1]))
        else:
            out.extend(items[i:j])
        i = j
    return out


def _provenance_kind(text: str) -> str:
    low = text.lower()
    if "private output" in low:
        return "private (chosen from the data, paid from the budget)"
    if "observed" in low:
        return "observed (values seen in the data, asserted public by the user)"
    return "declared (public)"


# -- the post-processing chain -------------------------------------------------------------
def _param_value(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, int, float)) or v is None:
        return _num(v) if isinstance(v, float) else str(v)
    try:
        return json.dumps(v, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(v)


def _defaults(name: str) -> dict[str, Any]:
    """The parameters a registered post-processor takes and their defaults (its constructor's
    signature); ``{}`` when it takes none or is not installed here."""
    try:
        cls = registry.get("postprocessor", name)
        sig = inspect.signature(cls)
    except (HierDPError, TypeError, ValueError):
        return {}
    return {p.name: p.default for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty}


def chain_steps(ledger: Ledger) -> list[str]:
    """Each post-processing step of ``ledger`` as the report shows it: its name and the
    parameters it ran with, ``round (method: topdown, ordering: total, atol: 1e-07)``.

    The parameters given at release come from ``ledger.postprocess_params``, in the order
    given; the others are the step's defaults, read from its constructor when the ledger was
    written by this version of hierdp, else named as that version's defaults. A step that
    takes no parameters shows its name alone, and so does every step of a ledger written
    before the parameters were recorded.

    Parameters
    ----------
    ledger : Ledger
        The release's ledger.

    Returns
    -------
    list of str
        One text per step, in chain order (empty for no post-processing).
    """
    names = [str(n) for n in ledger.postprocess]
    params = ledger.postprocess_params
    if len(params) != len(names) or not all(isinstance(p, dict) for p in params):
        return names                       # an older ledger: the names are all it holds
    same_version = (ledger.hierdp_version or "") == __version__
    out = []
    for name, given in zip(names, params):
        defaults = _defaults(name)
        shown = {str(k): v for k, v in given.items()}
        rest = [k for k in defaults if k not in shown]
        if same_version:
            shown.update((k, defaults[k]) for k in rest)
        text = ", ".join(f"{k}: {_param_value(v)}" for k, v in shown.items())
        if rest and not same_version:
            text += ("; " if text else "") + f"the defaults of hierdp {ledger.hierdp_version or '(version unknown)'}"
        out.append(f"{name} ({text})" if text else name)
    return out


# -- the budget ---------------------------------------------------------------------------
def _implied(ledger: Ledger, unit: str, budget: float, delta: float) -> str:
    """The loss one level implies alone."""
    if budget <= 0:
        return "none"
    if unit == "epsilon":
        return f"ε = {_g(budget, 6)}" + (f", δ = {_g(delta, 6)}" if delta else "")
    text = f"ρ = {_g(budget, 6)}"
    if ledger.delta:  # the (ε, δ) this ρ alone would give at the release's δ
        try:
            text += f"; alone ⇒ ε = {_g(zcdp_to_approx_dp(budget, float(ledger.delta)), 6)} at δ = {_num(ledger.delta)}"
        except (HierDPError, ValueError, OverflowError):
            pass
    return text


def _level_rational(body: dict[str, Any]) -> Fraction:
    """A level's budget as the exact rational it was given as (``budget_exact``, issue 34),
    else the rational its recorded number stands for (:func:`exact_rational`)."""
    given = body.get("budget_exact")
    return Fraction(given) if given else exact_rational(float(body["budget"]))


def budget_rows(ledger: Ledger) -> list[dict[str, Any]]:
    """One row per structure spend and per ledger level entry (a run of identical levels is
    one row, as in ``ledger.to_dict()``), with the recorded number, its exact rational and
    its share of the total."""
    total = Fraction(0)
    # the ledger's own compaction of runs of identical levels, on plain dicts (ledger.to_dict()
    # deep-copies the whole ledger: seconds for a 10⁵-level chain)
    names = [f.name for f in fields(LevelSpend)]
    entries = _compact_levels([{k: getattr(ls, k) for k in names} for ls in ledger.levels])
    spends = list(ledger.decomposition.get("spends", []))
    for s in spends:
        total += exact_rational(float(s["amount"]))
    for e in entries:
        body = e.get("run", e)
        count = len(body["names"]) if "run" in e else 1
        total += _level_rational(body) * count
    rows = []
    for s in spends:
        amount = float(s["amount"])
        rows.append({"kind": "structure", "name": str(s["label"]), "names": [str(s["label"])], "depth": "",
                     "nodes": "", "unit": str(s["unit"]), "budget": amount, "rational": exact_rational(amount),
                     "share": exact_rational(amount) / total if total else None, "delta": 0.0,
                     "mechanism": str(ledger.decomposition.get("name", "")), "l1": None, "l2": None,
                     "variance": None, "implied": _implied(ledger, str(s["unit"]), amount, 0.0)})
    for e in entries:
        run = "run" in e
        body = e["run"] if run else e
        names = [str(n) for n in body["names"]] if run else [str(body["level"])]
        budget = float(body["budget"])
        depth = f"{body['first_depth']}–{body['first_depth'] + len(names) - 1}" if run else str(body["depth"])
        rat = _level_rational(body)
        var = body["noise_variance"]
        rows.append({"kind": "run" if run else "level", "name": names[0] if not run else
                     f"{len(names)} levels {names[0]} … {names[-1]}", "names": names, "depth": depth,
                     "nodes": body["n_nodes"], "unit": str(body["unit"]), "budget": budget, "rational": rat,
                     "share": rat / total if total else None, "delta": float(body.get("delta", 0.0) or 0.0),
                     "mechanism": str(body["mechanism"]), "l1": body.get("sensitivity_l1"),
                     "l2": body.get("sensitivity_l2"), "variance": var,
                     "implied": ("published exactly (invariant), no budget" if budget <= 0 and var == 0 else
                                 "not measured" if budget <= 0 else
                                 _implied(ledger, str(body["unit"]), budget,
                                          float(body.get("delta", 0.0) or 0.0)))})
    return rows


def query_rows(result: Any) -> list[dict[str, Any]]:
    """Per-query budgets of plan ``marginals`` (its public strategy), from the release."""
    info = getattr(getattr(result, "estimate", None), "info", None) or {}
    marg = info.get("marginals") or {}
    rows: list[dict[str, Any]] = []
    if not isinstance(marg, dict):
        return rows
    for level, queries in marg.items():
        for q in queries or []:
            dims = q.get("dims", [])
            rows.append({"level": str(level), "query": " × ".join(map(str, dims)) if dims else "total",
                         "share": float(q.get("share", float("nan"))), "budget": float(q.get("budget", 0.0)),
                         "variance": q.get("noise_variance")})
    return rows


# -- accuracy from the public noise law ----------------------------------------------------
def _mechanism(name: str, cache: dict[str, Mechanism | None]) -> Mechanism | None:
    if name not in cache:
        try:
            cache[name] = registry.create("mechanism", name)
        except (HierDPError, TypeError):
            cache[name] = None
    return cache[name]


def _dgauss_mae(sigma2: float) -> float:
    sigma = math.sqrt(sigma2)
    if sigma > 2.0**18:
        return sigma * math.sqrt(2.0 / math.pi)
    kmax = int(math.ceil(12.0 * sigma)) + 2
    y = np.arange(1, kmax + 1, dtype=np.float64)
    w = np.exp(-(y * y) / (2.0 * sigma2))
    return float(2.0 * np.sum(y * w) / (1.0 + 2.0 * np.sum(w)))


def level_accuracy(mechanism: str, budget: float, l1: float, l2: float, variance: float,
                   cache: dict[str, Mechanism | None] | None = None) -> dict[str, Any]:
    """Expected error of one measurement from the public noise law: ``std``, ``rmse``,
    ``mae``, ``hw`` (confidence -> half-width) and ``law`` (which law, in words).

    The mechanism is recreated by name and its variance at ``budget`` and the sensitivity
    compared with the recorded ``variance``; when they agree the exact law gives the
    half-widths (the smallest integer k with ``P(|Z| <= k) >= c`` for integer noise) and the
    MAE; otherwise a normal law with the recorded variance is used and says so."""
    cache = {} if cache is None else cache
    var = float(variance)
    out: dict[str, Any] = {"std": math.sqrt(var) if var >= 0 else float("nan"), "hw": {}, "mae": None, "law": ""}
    out["rmse"] = out["std"]
    if var == 0:
        out.update(mae=0.0, hw={c: 0.0 for c in LEVELS_CI}, law="exact (published without noise)")
        return out
    if not math.isfinite(var) or budget <= 0:
        out.update(std=None, rmse=None, law="no single per-cell noise law recorded for this level")
        return out
    mech = _mechanism(mechanism, cache)
    sens = Sensitivity(l1=float(l1), l2=float(l2), linf=min(float(l1), float(l2)))
    matches = False
    if mech is not None:
        try:
            matches = math.isclose(float(mech.variance(budget, sens)), var, rel_tol=1e-9)
        except (HierDPError, ValueError, ZeroDivisionError):
            matches = False
    if matches and isinstance(mech, DiscreteLaplace):
        scale = float(mech.scale(budget, sens))
        q = math.exp(-1.0 / scale)
        out["mae"] = 2.0 * q / -math.expm1(-2.0 / scale)
        out["hw"] = {c: exact_halfwidth(mech, budget, sens, c) for c in LEVELS_CI}
        out["law"] = f"discrete Laplace, scale {scale:.6g} (exact)"
    elif matches and isinstance(mech, DiscreteGaussian):
        sigma2 = float(mech.params(budget, sens).sigma2)
        out["mae"] = _dgauss_mae(sigma2)
        out["hw"] = {c: exact_halfwidth(mech, budget, sens, c) for c in LEVELS_CI}
        out["law"] = f"discrete Gaussian, σ² = {sigma2:.6g} (exact)"
    elif matches and isinstance(mech, Laplace):
        b = math.sqrt(var / 2.0)
        out["mae"] = b
        out["hw"] = {c: b * math.log(1.0 / (1.0 - c)) for c in LEVELS_CI}
        out["law"] = f"Laplace, scale {b:.6g} (continuous law; the noise lies on a fine grid)"
    elif matches and isinstance(mech, Gaussian):
        from scipy.stats import norm

        s = math.sqrt(var)
        out["mae"] = s * math.sqrt(2.0 / math.pi)
        out["hw"] = {c: s * float(norm.ppf(0.5 + c / 2.0)) for c in LEVELS_CI}
        out["law"] = f"Gaussian, σ = {s:.6g} (continuous law; the noise lies on a fine grid)"
    else:
        from scipy.stats import norm

        s = math.sqrt(var)
        out["mae"] = s * math.sqrt(2.0 / math.pi)
        out["hw"] = {c: s * float(norm.ppf(0.5 + c / 2.0)) for c in LEVELS_CI}
        out["law"] = ("normal approximation from the recorded variance (the law of "
                      f"{mechanism!r} at this budget is not rebuilt here)")
    return out


def accuracy_rows(ledger: Ledger, budget: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Expected error per measured ledger entry (levels and runs of levels); ``budget``:
    :func:`budget_rows` of ``ledger`` when already computed."""
    cache: dict[str, Mechanism | None] = {}
    rows = []
    for r in budget_rows(ledger) if budget is None else budget:
        if r["kind"] == "structure" or r["budget"] <= 0 and r["variance"] != 0:
            continue
        var = r["variance"]
        var = float("inf") if var in ("inf", None) else float(var)
        acc = level_accuracy(r["mechanism"], r["budget"], r["l1"] or 1.0, r["l2"] or 1.0, var, cache)
        rows.append({"name": r["name"], "names": r["names"], **acc})
    return rows


def released_rows(result: Any) -> tuple[list[dict[str, Any]], str]:
    """Expected RMSE of the released values per level of the tree (a linear, unbiased
    chain: the square root of the mean variance over the level's nodes and cells), or
    ``([], why not)``."""
    est = getattr(result, "estimate", None)
    tree = getattr(result, "tree", None)
    if est is None or tree is None or est.variance is None:
        return [], "the post-processing chain does not track the variances of the released values"
    if not est.linear:
        return [], ("the chain ends in a non-linear step (e.g. nonneg, round): the released values' error has no "
                    "closed form; result.intervals() gives intervals with their coverage")
    var = np.asarray(est.variance, dtype=np.float64)
    var = var.reshape(var.shape[0], -1)
    depth = np.asarray(tree.depth, dtype=np.int64)
    names = list(tree.level_names)
    k = var.shape[1]
    finite = np.asarray(np.isfinite(var).all(axis=1), dtype=bool)
    cnt = np.bincount(depth, minlength=len(names))
    ok = np.bincount(depth, weights=finite.astype(np.float64), minlength=len(names))
    s = np.bincount(depth, weights=np.where(finite.reshape(-1, 1), var, 0.0).sum(axis=1), minlength=len(names))
    rows = []
    for d, name in enumerate(names):
        if cnt[d] == 0:
            continue
        rmse = math.sqrt(s[d] / (ok[d] * k)) if ok[d] else float("inf")
        rows.append({"level": str(name), "nodes": int(cnt[d]), "rmse": rmse,
                     "undetermined": int(cnt[d] - ok[d])})
    return rows, ""


#: the report simulates the released values' accuracy (:meth:`ReleaseResult.accuracy`) for
#: releases of at most this many node-cells; larger ones say how to compute it
REPORT_ACCURACY_MAX_CELLS = 250_000
#: repetitions of that simulation in the report
REPORT_ACCURACY_REPETITIONS = 100


def released_accuracy(result: Any, confidence: float = 0.9) -> tuple[Any, Any, str]:
    """The accuracy of the released values by a parametric bootstrap on the released table
    (:func:`hierdp.accuracy.accuracy_tables`: the release's noise law and chain, the released
    values as the truth; no true count read): ``(per level, per level and size band, "")``
    or ``(None, None, why not)``. Secure randomness; a seeded release gets a seed derived
    from its own, so that its report is reproducible."""
    tree, est, meas = getattr(result, "tree", None), getattr(result, "estimate", None), \
        getattr(result, "measurements", None)
    if tree is None or est is None or meas is None:
        return None, None, "the report was made from a ledger alone"
    cells = tree.n_nodes * int(np.prod(np.shape(est.values)[1:], dtype=np.int64))
    if cells > REPORT_ACCURACY_MAX_CELLS:
        return None, None, (f"not simulated in the report for a release of {cells:,} node-cells (more than "
                            f"{REPORT_ACCURACY_MAX_CELLS:,}); result.accuracy() computes it")
    ledger = result.ledger
    seed = None
    if ledger.seed is not None:
        seed = int.from_bytes(hashlib.sha256(f"hierdp.accuracy:{ledger.seed}".encode()).digest()[:8], "little")
    try:
        by_level, by_band = accuracy_tables(tree, est, meas, ledger, confidence=confidence,
                                            repetitions=REPORT_ACCURACY_REPETITIONS, seed=seed,
                                            meta=getattr(result, "meta", None))
    except HierDPError as exc:
        return None, None, str(exc)
    return by_level, by_band, ""


def _level_runs(rows: list[dict[str, Any]], run_min: int = 8) -> list[tuple[str, str, str, str]]:
    """Rows of the released-values table as shown: ``run_min`` or more consecutive levels
    whose shown values (nodes, RMSE to 4 digits, undetermined) are equal are one row (a
    10⁵-level chain is not 10⁵ rows)."""
    shown = [(r["level"], str(r["nodes"]), _g(r["rmse"]), str(r["undetermined"])) for r in rows]
    out: list[tuple[str, str, str, str]] = []
    i = 0
    while i < len(shown):
        j = i + 1
        while j < len(shown) and shown[j][1:] == shown[i][1:]:
            j += 1
        if j - i >= run_min:
            out.append((f"{j - i} levels {shown[i][0]} … {shown[j - 1][0]}", *shown[i][1:]))
        else:
            out.extend(shown[i:j])
        i = j
    return out


# -- provenance ---------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def spec_files(result: Any) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``([(role, file name, sha256)], [private file names])`` for a release made from a
    spec (``result.meta["spec"]``): the spec and its public inputs are hashed, the private
    source is named only."""
    spec = (getattr(result, "meta", None) or {}).get("spec")
    if spec is None or not hasattr(spec, "input_files"):
        return [], []
    private = {Path(p).resolve() for p in getattr(spec, "source_files", [])}
    spec_file = Path(spec.filename).resolve() if getattr(spec, "filename", None) else None
    rows = []
    for p in spec.input_files():
        if p in private or not p.is_file():
            continue
        role = "spec" if p == spec_file else "public input"
        try:
            rows.append((role, p.name, _sha256(p)))
        except OSError:
            rows.append((role, p.name, "unreadable at report time"))
    return rows, sorted(p.name for p in private)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
