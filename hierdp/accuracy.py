"""The accuracy of the released values, by post-processing alone (issue 53 item 1).

After ``nonneg``/``round`` the error of a released value has no closed form: it depends on
the unknown counts. :func:`release_accuracy` estimates it by a parametric bootstrap on the
released table (Efron & Tibshirani 1993, §6.5), reading nothing but the release itself:

1. the released values x̂ stand in for the truth x*;
2. R fresh noise vectors z are drawn from the release's *public noise law* — the
   mechanism, each level's budget and sensitivity, as the ledger records them — with the
   sampler :mod:`hierdp.uncertainty` uses for the intervals;
3. the release's own post-processing chain runs on y* = x* + z (measured nodes only;
   unmeasured ones keep the placeholder 0 and infinite variance, as in the release);
4. the errors of the re-post-processed *unit totals* (a node's total over its cells)
   against x* give, per level (and size band of the released total), the mean absolute
   error and the ``confidence`` quantile of the absolute error (the margin of error).

No true count is read, so the result is post-processing (no privacy cost) and may be
published with the release. It is the error the release would have if the truth were its
released values: close to the real error where the released table resembles the truth in
the features that drive the chain's error (e.g. where the zeros are), as the acceptance
test (tests/test_accuracy.py: 40 releases of a sparse tree) measures.

The chain is the one the ledger names. The ledger keeps step names, not their parameters,
so the parameters are taken from the release's spec when it has one, else from the last
step's report (e.g. ``round``'s ``mode: topdown``), else the defaults; the chain found is
then checked on the release's own measurements — it must give back the released values —
and a release whose chain cannot be reproduced is refused with one line.

Cost: R chain passes over ``(n, k·B)`` arrays in batches of B repetitions, O(R·n·k) sampler
draws; memory O(n·k·B) plus at most :data:`QUANTILE_CAP` kept errors per row of the table.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hierdp.errors import DataError, HierDPError
from hierdp.measurements import Estimate, Measurements
from hierdp.postprocessors.base import PostProcessor
from hierdp.postprocessors.chain import ledger_chain, resolve_postprocessors, run_chain, run_chain_replicates
from hierdp.uncertainty import _batch, _check_confidence, _noise, _noise_law, _sources

if TYPE_CHECKING:
    from hierdp.accounting.ledger import Ledger
    from hierdp.tree import Tree

__all__ = ["release_accuracy", "accuracy_tables", "SIZE_BANDS", "QUANTILE_CAP", "METHOD_TEXT"]

#: size bands of the released unit totals: (label, low, high), low <= total < high; a
#: total below 0.5 (0 for integer counts) is band "0"
SIZE_BANDS: tuple[tuple[str, float, float], ...] = (
    ("0", -np.inf, 0.5), ("1-9", 0.5, 9.5), ("10-99", 9.5, 99.5), ("100-999", 99.5, 999.5),
    ("1000+", 999.5, np.inf))
#: at most this many simulated errors are kept per row of the table for its margin of error
#: (units drawn at random when a row has more units x repetitions); the mean uses them all
QUANTILE_CAP = 1 << 20
#: how the table is computed, as the returned frame's ``attrs["method"]`` says
METHOD_TEXT = ("parametric bootstrap, {r} repetitions, the release's noise law and post-processing "
               "({chain}); the released values as the truth. No true count is read.")
#: the steps whose parameter ``method`` changes their output: tried when the ledger's names
#: with the recorded parameters do not give back the released values
_METHOD_STEPS = {"nonneg": ("topdown", "global"), "round": ("topdown", "remainder")}


def _candidates(ledger: Ledger, estimate: Estimate, meta: Mapping[str, Any]) -> list[list[Any]]:
    """Chains to try, most likely first: the spec's (names and parameters), the ledger's
    names with the last step's reported mode, then every method of nonneg/round."""
    names = list(ledger.postprocess)
    out: list[list[Any]] = []
    if len(ledger.postprocess_params) == len(names):  # the chain as recorded, parameters and all
        out.append(ledger_chain(names, ledger.postprocess_params))
    spec = meta.get("spec")
    spec_pp = getattr(spec, "postprocess", None)
    if spec_pp:
        try:
            spec_chain = [{"name": n, **dict(p or {})} for n, p in spec_pp]
        except (TypeError, ValueError):
            spec_chain = []
        if [c["name"] for c in spec_chain] == names:
            out.append(spec_chain)
    hinted: list[Any] = list(names)
    mode = estimate.info.get("mode")
    if names and names[-1] in _METHOD_STEPS and mode in _METHOD_STEPS[names[-1]]:
        hinted[-1] = {"name": names[-1], "method": mode}
    out.append(hinted)
    out.append(list(names))
    slots = [i for i, n in enumerate(names) if n in _METHOD_STEPS]
    for combo in itertools.product(*(_METHOD_STEPS[names[i]] for i in slots)):
        chain = list[Any](names)
        for i, m in zip(slots, combo):
            chain[i] = {"name": names[i], "method": m}
        out.append(chain)
    return out


def _describe(steps: list[PostProcessor]) -> str:
    parts = []
    for s in steps:
        m = getattr(s, "method", None)
        parts.append(f"{s.name} ({m})" if isinstance(m, str) and s.name in _METHOD_STEPS else s.name)
    return " -> ".join(parts) or "no post-processing"


def _reproduce_chain(tree: Tree, estimate: Estimate, measurements: Estimate, ledger: Ledger,
                     meta: Mapping[str, Any]) -> list[PostProcessor]:
    """The post-processing chain of the release: the first candidate that maps the release's
    measurements to its released values (a deterministic function of the noisy values)."""
    y = np.asarray(tree.to_internal(measurements.values), dtype=np.float64)
    var = None if measurements.variance is None else np.asarray(tree.to_internal(measurements.variance), float)
    x = np.asarray(tree.to_internal(estimate.values), dtype=np.float64)
    known = np.isfinite(x)
    meas = Measurements(y, var, info=dict(measurements.info), tiebreak=measurements.tiebreak)
    tried: set[str] = set()
    for chain in _candidates(ledger, estimate, meta):
        try:
            steps = resolve_postprocessors(chain)
        except HierDPError:
            continue
        label = repr([(s.name, sorted(vars(s).items())) for s in steps])
        if label in tried:
            continue
        tried.add(label)
        try:
            out = np.asarray(run_chain(tree, meas, steps).values, dtype=np.float64)
        except HierDPError:
            continue
        if out.shape == x.shape and np.allclose(out[known], x[known], rtol=1e-9, atol=1e-6):
            return steps
    raise DataError(f"accuracy() cannot re-run this release's post-processing: the ledger's chain "
                    f"({' -> '.join(ledger.postprocess) or 'none'}) does not give back the released values from "
                    "its measurements with any parameters it can try (e.g. invariants on cell totals); "
                    "use intervals() instead")


def _band_codes(totals: np.ndarray) -> np.ndarray:
    """Index into :data:`SIZE_BANDS` of each released unit total."""
    edges = np.array([b[2] for b in SIZE_BANDS[:-1]])
    return np.searchsorted(edges, totals, side="right")


def release_accuracy(tree: Tree, estimate: Estimate, measurements: Estimate, ledger: Ledger, *,
                     confidence: float = 0.9, repetitions: int = 100, by_size: bool = False,
                     seed: int | None = None, meta: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Per-level accuracy of the released unit totals by a parametric bootstrap on the
    released table (see the module docstring): the release's noise law and post-processing,
    the released values as the truth. Reads no true count (post-processing, no privacy cost).

    Parameters
    ----------
    tree, estimate, measurements, ledger : the parts of a :class:`hierdp.ReleaseResult`
        (``estimate`` and ``measurements`` in external order).
    confidence : float, default 0.9
        The margin of error ``moe`` is this quantile of the absolute error, in (0, 1).
    repetitions : int, default 100
        R, the number of simulated releases (cost R chain passes).
    by_size : bool, default False
        One row per level and size band of the released total (:data:`SIZE_BANDS`) that
        has at least one unit.
    seed : int, optional
        Seed of the simulated noise (public, no privacy role); ``None`` (the default) uses
        the secure source.
    meta : mapping, optional
        The result's ``meta`` (a spec there gives the chain's parameters).

    Returns
    -------
    pandas.DataFrame
        Columns ``level`` (and ``size`` with ``by_size``), ``units`` (units with a released
        value), ``mae`` (mean absolute error of a unit's total) and ``moe`` (the
        ``confidence`` quantile of its absolute error); ``attrs`` say how it was computed.

    Raises
    ------
    DataError
        When the release cannot be re-simulated (a plan without a per-level noise law such
        as ``ghazi``, a structure built from the data, a chain that cannot be reproduced),
        or for bad arguments.
    """
    return accuracy_tables(tree, estimate, measurements, ledger, confidence=confidence, repetitions=repetitions,
                           seed=seed, meta=meta)[1 if by_size else 0]


def accuracy_tables(tree: Tree, estimate: Estimate, measurements: Estimate, ledger: Ledger, *,
                    confidence: float = 0.9, repetitions: int = 100, seed: int | None = None,
                    meta: Mapping[str, Any] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables of :func:`release_accuracy` from one simulation: per level, and per
    level and size band (the same draws, so the two agree). Same parameters and errors."""
    (c,) = _check_confidence(confidence) if np.isscalar(confidence) else (None,)
    if c is None:
        raise DataError(f"confidence must be one number strictly between 0 and 1 (e.g. 0.9), got {confidence!r}")
    if isinstance(repetitions, bool) or not isinstance(repetitions, (int, np.integer)) or repetitions < 1:
        raise DataError(f"repetitions must be a positive integer (e.g. 100), got {repetitions!r}")
    reps = int(repetitions)
    if ledger.decomposition.get("private_structure"):
        raise DataError("accuracy() cannot re-simulate this release: its structure was built from the data "
                        f"({ledger.decomposition.get('name') or 'a private decomposition'}), and a simulation of "
                        "the counts on the released structure would leave out the structure's own error")
    levels, reason = _noise_law(ledger)
    mvar = None if measurements.variance is None else np.asarray(tree.to_internal(measurements.variance), float)
    if levels is not None and (mvar is None or mvar.ndim != 1):
        levels, reason = None, "its measurements carry no per-node variances"
    if levels is None:
        raise DataError(f"accuracy() cannot re-simulate this release: {reason}; it needs plan 'per_level' with a "
                        "registered mechanism (intervals() gives a normal approximation instead)")
    assert mvar is not None
    steps = _reproduce_chain(tree, estimate, measurements, ledger, meta or {})

    n = tree.n_nodes
    x = np.asarray(tree.to_internal(estimate.values), dtype=np.float64)
    x2 = x.reshape(n, -1)
    k = x2.shape[1]
    units = np.isfinite(x2).all(axis=1)
    base = np.where(np.isinf(mvar)[:, None] | ~np.isfinite(x2), 0.0, x2)
    truth = np.where(np.isfinite(x2), x2, 0.0).sum(axis=1)   # x*'s unit totals
    depth = np.asarray(tree.internal.depth, dtype=np.int64)
    nb = len(SIZE_BANDS)
    group = depth * nb + _band_codes(truth)                   # (level, size band)
    n_groups = int(depth.max() + 1) * nb
    ids = np.flatnonzero(units)
    gid = group[ids]
    size = np.bincount(gid, minlength=n_groups)

    rng, key = _sources(n, k, seed)
    # units whose errors are kept for the quantiles: all, or a random subset per group
    # (a generator of their own, so that the simulated noise does not depend on the cap)
    keep_mask = np.ones(ids.size, bool)
    picker = np.random.default_rng(None if seed is None else [int(seed) % 2**64, 2])
    for g in np.flatnonzero(size * reps > QUANTILE_CAP):
        rows = np.flatnonzero(gid == g)
        pick = picker.choice(rows.size, max(1, QUANTILE_CAP // reps), replace=False)
        keep_mask[rows] = False
        keep_mask[rows[pick]] = True
    kept_ids, kept_gid = ids[keep_mask], gid[keep_mask]
    kept_size = np.bincount(kept_gid, minlength=n_groups)

    abs_sum = np.zeros(n_groups)
    kept: list[np.ndarray] = []
    b = _batch(n, k, reps)
    done = 0
    while done < reps:
        m = min(b, reps - done)
        z = _noise(tree, levels, (k, m), rng, key, done, reps)                  # (n, k, m)
        y = (base[:, :, None] + z).reshape(n, k * m)
        out = run_chain_replicates(tree, y, mvar, steps, k, tiebreak=measurements.tiebreak,
                                   info=measurements.info).reshape(n, k, m)
        err = np.abs(out.sum(axis=1) - truth[:, None])                          # unit totals, (n, m)
        abs_sum += np.bincount(gid, weights=err[ids].sum(axis=1), minlength=n_groups)
        kept.append(err[kept_ids].astype(np.float32))
        done += m
    errs = np.concatenate(kept, axis=1) if kept else np.zeros((0, reps), np.float32)
    # each kept error stands for size/kept units of its group (1 unless the group was subsampled)
    weight = size[kept_gid] / np.maximum(kept_size[kept_gid], 1)

    names = list(tree.level_names)
    chain = _describe(steps)

    def table(groups: list[np.ndarray], labels: list[dict[str, Any]]) -> pd.DataFrame:
        rows_out = []
        for gs, label in zip(groups, labels):
            units_g = int(size[gs].sum())
            if units_g == 0:
                continue
            sel = np.isin(kept_gid, gs)
            rows_out.append({**label, "units": units_g, "mae": float(abs_sum[gs].sum() / (units_g * reps)),
                             "moe": _quantile(errs[sel], weight[sel], c)})
        cols = list(labels[0]) if labels else ["level"]
        frame = pd.DataFrame(rows_out, columns=cols + ["units", "mae", "moe"])
        frame["level"] = pd.Categorical(frame["level"], categories=names, ordered=True)
        if "size" in frame:
            frame["size"] = pd.Categorical(frame["size"], categories=[b[0] for b in SIZE_BANDS], ordered=True)
        frame.attrs.update(method=METHOD_TEXT.format(r=reps, chain=chain), confidence=c, repetitions=reps,
                           reads_true_counts=False, chain=chain,
                           units="a unit is a node; its total is the sum of its cells",
                           moe=f"the {c:g} quantile of the absolute error of a unit's total at that level")
        return frame

    n_levels = len(names)
    by_level = table([np.arange(d * nb, (d + 1) * nb) for d in range(n_levels)],
                     [{"level": names[d]} for d in range(n_levels)])
    by_band = table([np.array([g]) for g in range(n_levels * nb)],
                    [{"level": names[g // nb], "size": SIZE_BANDS[g % nb][0]} for g in range(n_levels * nb)])
    return by_level, by_band


def _quantile(errors: np.ndarray, weight: np.ndarray, c: float) -> float:
    """The ``c`` quantile (inverted CDF: the smallest e with weighted P(|error| <= e) >= c)
    of the rows of ``errors`` (R errors each), row i weighted by ``weight[i]``."""
    e = errors.reshape(-1).astype(np.float64)
    w = np.repeat(weight, errors.shape[1]) if errors.ndim == 2 else weight
    order = np.argsort(e, kind="stable")
    cw = np.cumsum(w[order])
    return float(e[order][min(int(np.searchsorted(cw, c * cw[-1] * (1 - 1e-12), side="left")), e.size - 1)])
