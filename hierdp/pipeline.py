"""One private release: plan → measurements → post-processing → ledger.

The flow of the design: true node counts → a *plan* measures them within the budget
(``per_level`` by default: one mechanism call per level, basic composition over levels,
parallel within a level) → :class:`~hierdp.measurements.Measurements` (noisy values,
exact variances, spends) → the post-processing chain on noisy data only →
:class:`~hierdp.result.ReleaseResult` with the ledger the accountant builds from every
spend (the plan's and, for a data-dependent structure, the decomposition's).

:func:`release` runs named steps, each usable on its own (a release cut into subtree
tasks calls :func:`measure` per task and :func:`post_process` per subtree):

1. :func:`resolve` — keywords → :class:`Resolved` (plan, :class:`~hierdp.accounting.PrivacyLoss`
   built and validated once, the plan's total and guarantee, sensitivity, invariants, chain);
2. :func:`check` — refusals that need no randomness (a session overspend first);
3. :func:`open_account` then :func:`measure` — a private structure is paid first, then
   the plan measures with what is left;
4. :func:`account` — the plan's spends composed, the guarantee stated;
5. :func:`post_process` — the chain on the measurements only;
6. :func:`build_ledger` — the ledger.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hierdp import registry, rules, subtrees
from hierdp._kernels.jit import release_finished, reusing
from hierdp.accounting import PrivacyLoss, structure_total
from hierdp.accounting.ledger import Ledger
from hierdp.decompositions.base import Structure
from hierdp.errors import DataError, NotForPublicationWarning, warn
from hierdp.execution.counts import check_values, count_problem
from hierdp.execution.driver import CallbackSink, StageContext, run_split, settle_split
from hierdp.execution.executors import close_executor, resolve_executor
from hierdp.execution.stages import split_setup
from hierdp.execution.steps import (
    PLAN_DEFAULT,
    Resolved,
    account,
    build_ledger,
    check,
    check_invariants_kept,
    external_estimate,
    measure,
    noise_key,
    open_account,
    post_process,
    reserve,
    resolve,
    resolve_invariants,
    resolve_plan,
    unmeasured_missing,
)
from hierdp.execution.stores import MemoryStore, SpillStore
from hierdp.keyed_noise import tiebreak_seed
from hierdp.measurements import Estimate, Measurements
from hierdp.plans.marginals import Marginals
from hierdp.postprocessors.base import node_values, node_variance
from hierdp.postprocessors.chain import run_chain
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

if TYPE_CHECKING:
    from hierdp.accounting.session import Reservation, Session
    from hierdp.mechanisms.base import Sensitivity

__all__ = ["release", "postprocess", "resolve_plan", "external_estimate", "resolve_invariants", "Resolved",
           "resolve", "check", "open_account", "measure", "account", "post_process", "build_ledger",
           "release_by_subtree", "SplitRun"]


def release(
    tree: Tree,
    values: np.ndarray,
    *,
    epsilon: float | PrivacyLoss | None = None,
    delta: float | None = None,
    rho: float | None = None,
    plan: Any = "per_level",
    mechanism: Any = None,
    budget: Any = None,
    postprocess: Any = PLAN_DEFAULT,
    seed: int | None = None,
    sensitivity: Sensitivity | None = None,
    privacy_unit: str = "one row = one individual",
    max_contributions: int | None = None,
    session: Session | Reservation | None = None,
    notes: Sequence[str] = (),
    private_notes: Mapping[str, Any] | None = None,
    structure: Structure | None = None,
    neighbours: str = "add_remove",
    invariants: Any = None,
    allow_invariants_with_add_remove: bool = False,
    invariants_cover: str = "total",
    check_counts: bool | str = True,
    split: Any = None,
    executor: Any = None,
) -> ReleaseResult:
    """Release the node counts ``values`` (external order) of ``tree`` privately.

    The privacy loss is ``epsilon`` (pure ε-DP; with ``delta`` (ε, δ)-DP) or ``rho``
    (ρ-zCDP; with ``delta`` the ledger also states the (ε, δ) it converts to), or a ready
    :class:`~hierdp.accounting.PrivacyLoss` passed as ``epsilon``.

    ``plan`` decides how the counts are measured (default ``per_level`` with
    ``mechanism`` — default ``discrete_laplace`` — and ``budget`` — default ``equal``);
    the noisy values and their exact variances then go through ``postprocess`` in order.
    The sensitivity is what one privacy unit can change per level (one row, or
    ``max_contributions`` rows); a larger one may be declared, never a smaller one. With
    ``session`` the spend is drawn from a :class:`hierdp.Session`, which refuses to
    overspend.

    ``neighbours``: ``"add_remove"`` (default) or ``"substitute"`` (bounded DP; the
    sensitivity floor becomes ``2c`` in L1 and ``sqrt(2) c`` in L2,
    :meth:`Sensitivity.for_neighbours`); the ledger states it. ``invariants``: level names,
    node ids or label paths published exactly, at no budget and without protection; every
    estimator keeps them (BLUE/GMC as exact constraints, ``nonneg``, ``round``) and their
    std is 0. They need ``neighbours="substitute"`` (the guarantee then holds for
    substitutions that leave them unchanged) unless ``allow_invariants_with_add_remove=True``.
    With histogram cells (values ``(n, k)``), ``invariants_cover="total"`` (default) fixes
    each invariant node's total over its cells (census practice: state populations; plan
    ``marginals``), ``"cells"`` every cell of it.

    ``check_counts``: ``True`` (default) refuses negative node values (counts cannot be)
    and internal nodes that are not the sum of their leaves (cell by cell for ``(n, k)``
    values; floats to 1e-9 relative): pass ``tree.aggregate(leaf_counts)``. ``"strict"``
    is accepted as the same. ``False`` releases the values as given and the ledger says so.

    With ``seed`` the randomness is reproducible: a
    :class:`~hierdp.errors.NotForPublicationWarning` is raised and the ledger and written
    tables are marked NOT FOR PUBLICATION.

    ``split``: run the release by subtree (:mod:`hierdp.subtrees`): a level name or depth
    (``"county"``: one subtree per county, in blocks), ``"auto"`` or ``{"memory": "4GiB"}``
    (the level and blocks chosen so that the largest task fits), or ``{"level": ...,
    "memory": ...}``. Each task is measured, then solved bottom-up; the levels above the
    split are solved in memory; then each task top-down. The estimate equals the in-memory
    one of the same measurements (``blue``, ``gmc``, ``postprocess=[]`` with plan
    ``per_level``; plan ``marginals``' own GLS, then top-down ``nonneg``/``round`` after
    either), the ledger is the same plus a note of the split. Streaming:
    :func:`release_by_subtree`.

    ``structure``: the :class:`~hierdp.decompositions.base.Structure` ``tree`` came from.
    A data-dependent one (e.g. ``privtree``) already spent ``structure.spends`` choosing the
    tree: they are paid from the total first (the plan measures with what is left), the
    ledger composes both and records the structure as a private output.

    Parameters
    ----------
    tree : Tree
        The public tree (:class:`hierdp.Tree`); its levels name the budget's keys.
    values : numpy.ndarray
        True node counts, shape ``(n,)`` or ``(n, k)`` with ``k`` histogram cells, in the
        tree's external order, internal nodes the sums of their leaves
        (``tree.aggregate(leaf_counts)``). Private: never shown in errors or the ledger.
    epsilon : float or PrivacyLoss, optional
        Total ε (pure ε-DP, or (ε, δ)-DP with ``delta``), or a ready
        :class:`~hierdp.accounting.PrivacyLoss`. Give ``epsilon`` or ``rho``.
    delta : float, optional
        δ of (ε, δ)-DP; with ``rho``, the δ at which the ledger also states the (ε, δ) the
        ρ-zCDP guarantee converts to (Canonne, Kamath & Steinke 2020).
    rho : float, optional
        Total ρ of ρ-zCDP (Bun & Steinke 2016); for Gaussian mechanisms.
    plan : str, dict or MeasurementPlan, default "per_level"
        How the counts are measured: ``"per_level"`` (one mechanism call per level),
        ``"marginals"`` (histogram marginals per level), ``"ghazi"`` (deep trees, Ghazi et
        al. 2023), a registered name, ``{"name": ..., **params}`` or a plan object.
    mechanism : str, dict or Mechanism, optional
        The noise: ``"discrete_laplace"`` (default under ε), ``"discrete_gaussian"``
        (default under ρ), ``"laplace"``, ``"gaussian"``, a registered name,
        ``{"name": ..., **params}`` or a mechanism object.
    budget : str, dict, list or BudgetStrategy, optional
        How the total splits over the levels (plan ``per_level``). One of: a strategy name,
        ``"equal"`` (default), ``"leaves"`` (all on the deepest level), ``"greedy"`` or
        ``"optimal"`` (minimum expected tree error from the public noise law, Dawson et al.
        2023 §3.2), ``"greedy_oracle"``/``"optimal_oracle"`` (read the true counts:
        NON-PRIVATE, for evaluation only); ``{"strategy": name, **params}``; explicit
        per-level amounts ``{"state": 0.2, "county": 0.3, "tract": 0.5}`` (in the unit of
        the total, ε or ρ; levels left out get 0; they must add up to the total); a list
        of amounts, one per level, the root level first; or a
        :class:`~hierdp.budgets.base.BudgetStrategy` object.
    postprocess : str, sequence or None, optional
        Post-processors applied in order to the noisy values and their exact variances:
        ``"blue"`` (the plan ``per_level``'s default; best linear unbiased and consistent,
        Dawson et al. 2023, Alg. 2), ``"gmc"`` (Cai et al.), ``"nonneg"``, ``"round"``,
        registered names or ``{"name": ..., **params}``; ``[]`` for the raw measurements.
    seed : int, optional
        Reproducible randomness for tests and examples: raises
        :class:`~hierdp.errors.NotForPublicationWarning` and marks the ledger NOT FOR
        PUBLICATION. Without it, noise comes from the operating system's secure source.
    sensitivity : Sensitivity, optional
        What one privacy unit changes per level; at least the floor that
        ``max_contributions`` and ``neighbours`` imply.
    privacy_unit : str, default "one row = one individual"
        The privacy unit, as the ledger states it.
    max_contributions : int, optional
        Rows one privacy unit may contribute (the sensitivity floor scales with it).
    session : Session or Reservation, optional
        A :class:`hierdp.Session` (or a reservation of one) to draw the spend from; it
        refuses to overspend before any noise is drawn.
    notes : sequence of str, default ()
        Public notes, written into the ledger.
    private_notes : mapping, optional
        Private diagnostics, kept out of the ledger's public text.
    structure : Structure, optional
        The decomposition ``tree`` came from; a data-dependent one's spends are paid first.
    neighbours : {"add_remove", "substitute"}, default "add_remove"
        The neighbour relation of the guarantee.
    invariants : str, sequence or None, optional
        Level names, node ids or label paths published exactly (not protected).
    allow_invariants_with_add_remove : bool, default False
        Accept invariants under ``neighbours="add_remove"`` (the guarantee then excludes them).
    invariants_cover : {"total", "cells"}, default "total"
        With histogram cells: fix each invariant node's total, or every cell of it.
    check_counts : bool or "strict", default True
        Refuse negative values and inconsistent internal nodes; ``False`` releases the
        values as given and the ledger says so.
    split : str, int, dict or None, optional
        Run the release by subtree: a level name or depth, ``"auto"``, ``{"memory":
        "4GiB"}`` or ``{"level": ..., "memory": ...}``.
    executor : str, object or None, optional
        With ``split``: where the subtree tasks run (:mod:`hierdp.execution`): a registered
        executor name (``"inline"``, the default, ``"threads"``, or a plugin's) or an object
        whose ``map(function, tasks)`` yields results in task order. The release is the
        same bit for bit whatever the executor.

    Returns
    -------
    ReleaseResult
        The estimate (``.frame``, ``.estimate``, ``.std``, ``.intervals()``), the noisy
        measurements and the :class:`~hierdp.accounting.ledger.Ledger` of the release.

    Examples
    --------
    >>> import numpy as np, hierdp, warnings
    >>> t = hierdp.Tree.complete(fanout=2, height=2)
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    ...     r = hierdp.release(t, np.array([5, 2, 3]), epsilon=1.0, seed=1)
    >>> r.ledger.guarantee, r.ledger.for_publication
    ('pure', False)
    """
    vals = check_values(tree, values)
    rules.enforce(count_problem(tree, vals, check_counts), DataError)
    if executor is not None and split is None:
        raise ValueError("executor= runs the tasks of a release by subtree: give split= as well (e.g. split='auto'), "
                         "or leave executor out")
    if split is not None:
        return _release_split(tree, vals, split, structure=structure, session=session, check_counts=check_counts,
                              executor=executor,
                              epsilon=epsilon, delta=delta, rho=rho, plan=plan, mechanism=mechanism, budget=budget,
                              postprocess=postprocess, seed=seed, sensitivity=sensitivity, privacy_unit=privacy_unit,
                              max_contributions=max_contributions, notes=notes, private_notes=private_notes,
                              neighbours=neighbours, invariants=invariants,
                              allow_invariants_with_add_remove=allow_invariants_with_add_remove,
                              invariants_cover=invariants_cover)
    r = resolve(tree, n_cells=vals.shape[1] if vals.ndim == 2 else 1, epsilon=epsilon, delta=delta, rho=rho,
                plan=plan, mechanism=mechanism, budget=budget, postprocess=postprocess, seed=seed,
                sensitivity=sensitivity, privacy_unit=privacy_unit, max_contributions=max_contributions, notes=notes,
                private_notes=private_notes, neighbours=neighbours, invariants=invariants,
                allow_invariants_with_add_remove=allow_invariants_with_add_remove, invariants_cover=invariants_cover)
    if structure is not None and structure.spends:  # a structure's pure-ε spends are not Gaussian noise
        total, guarantee = structure_total(r.loss, r.guarantee, len(structure.spends)) \
            if r.plan.budget_unit == "rho" else (r.total, r.guarantee)
        r = replace(r, total=total, guarantee=guarantee)
    check(r, session)  # before any randomness: a refused release draws no noise
    rng = make_rng(seed)
    vals_internal = tree.to_internal(vals)
    acc, decomposition = open_account(r, tree, structure)  # a private structure is paid first
    # charged from here on, whatever happens: a release refused after drawing noise is not free to retry
    ticket, session = reserve(session, r)
    with reusing(seed is None):  # the secure key never repeats: the path taken cannot show in the values
        meas = measure(r, tree, vals_internal, total=r.total - acc.total, rng=rng, key=noise_key(seed))
        guarantee = account(r, acc, meas)
        est = post_process(r, tree, meas, vals_internal[r.invariants] if r.invariant_names else None)
    ledger = build_ledger(r, tree, meas, guarantee, structure=structure, decomposition=decomposition, rng=rng)
    if check_counts is False:
        ledger.notes.append("node values released as given (check_counts=False): they were not checked to be "
                            "non-negative counts that add up from the leaves")
    if session is not None:
        session.settle(cast(int, ticket), ledger)
    if seed is not None:
        warn(f"release with seed={seed}: reproducible randomness is for tests and benchmarks; the "
             "ledger and written tables say NOT FOR PUBLICATION", NotForPublicationWarning)
    release_finished()  # later small releases of this process may take cached compiled kernels
    return ReleaseResult(
        tree=tree,
        estimate=external_estimate(tree, est),
        measurements=external_estimate(tree, Estimate(meas.values, meas.variance, dict(meas.info),
                                                      tiebreak=meas.tiebreak)),
        ledger=ledger,
    )


def postprocess(name: str, tree: Tree, values: Any, variance: Any = None, **params: Any) -> Estimate:
    """Run the post-processor ``name`` on external-order node ``values`` (and ``variance``).

    Parameters
    ----------
    name : str
        A registered post-processor: ``"blue"`` (Dawson et al. 2023, Alg. 2), ``"gmc"``
        (Cai et al., formula 39), ``"nonneg"``, ``"round"``, ``"boosting"``, ``"privtrie"``, ...
    tree : Tree
        The public tree.
    values : array_like
        Noisy node values, ``(n,)`` or ``(n, k)``, external order (already noisy: this is
        post-processing).
    variance : array_like, optional
        Their variances (per node, or per level broadcast); needed by ``blue``.
    **params
        Parameters of the post-processor.

    Returns
    -------
    Estimate
        ``.values`` and, where the post-processor knows it, ``.variance``.

    Examples
    --------
    >>> import numpy as np, hierdp
    >>> t = hierdp.Tree.complete(fanout=2, height=2)
    >>> est = hierdp.postprocess("blue", t, np.array([10., 4., 5.]), variance=np.ones(3))
    >>> np.round(est.values, 6).tolist()
    [9.666667, 4.333333, 5.333333]
    """
    pp = registry.create("postprocessor", name, **params)
    raw = node_values(tree, values)
    vals = tree.to_internal(raw)
    var = None if variance is None else tree.to_internal(node_variance(tree, variance, raw.shape))
    if var is None and pp.requires_variance:
        var = np.ones(tree.n_nodes)
    est = run_chain(tree, Measurements(vals, var), [pp])
    return external_estimate(tree, est)


@dataclass(frozen=True, eq=False)
class SplitRun:
    """What :func:`release_by_subtree` returns: the release's ledger (the in-memory one plus
    a note of the split) and the :class:`~hierdp.subtrees.Partition` its tasks came from."""

    ledger: Ledger
    partition: subtrees.Partition






def _release_split(tree: Tree, vals: np.ndarray, split: Any, *, structure: Structure | None,
                   session: Session | Reservation | None, check_counts: Any, executor: Any = None,
                   **keywords: Any) -> ReleaseResult:
    """:func:`release` with ``split``: the result assembled in memory from the tasks."""
    n_cells = vals.shape[1] if vals.ndim == 2 else 1
    ex = resolve_executor(executor)
    r, part, step, tail = split_setup(tree, n_cells, split, keywords)
    check(r, session)
    rng = make_rng(r.seed)
    vals_internal = tree.to_internal(vals).reshape(tree.n_nodes, n_cells)
    acc, decomposition = open_account(r, tree, structure)
    ticket, session = reserve(session, r)
    marg = isinstance(r.plan, Marginals)
    integer = bool(r.plan.mechanism.integer) and np.issubdtype(vals_internal.dtype, np.integer)  # type: ignore
    store = MemoryStore(part, n_cells, np.float64 if marg or not integer else np.int64, per_cell=marg)
    # the estimate's values, made at the first part in that part's dtype (the top-down steps'
    # integers), not a float array cast at the end
    full: dict[str, np.ndarray] = {}
    v_full = np.empty((tree.n_nodes, n_cells) if marg else tree.n_nodes)
    # marginals: the measurements are the plan's GLS estimate (as in memory), not the store's rotated columns
    mx_full = np.empty((tree.n_nodes, n_cells)) if marg else None
    last: list[Estimate] = []

    def sink(task: subtrees.SubtreeTask, est: Estimate, meas: Measurements) -> None:
        x = full.get("x")
        if x is None:
            x = full["x"] = np.empty((tree.n_nodes, n_cells), est.values.dtype)
        elif not np.can_cast(est.values.dtype, x.dtype, "safe"):  # parts that differ: never one lost digit
            x = full["x"] = x.astype(np.result_type(x.dtype, est.values.dtype))
        x[task.nodes] = est.values
        v_full[task.nodes] = est.variance
        if mx_full is not None:
            mx_full[task.nodes] = meas.values
        last[:] = [est]

    key = noise_key(r.seed)
    ctx = StageContext(r, part, step, tail, n_cells, total=r.total - acc.total, key=key,
                       check_counts=False, store=store, sink=CallbackSink(sink),
                       counts_of=lambda task: vals_internal[task.nodes])  # checked whole
    try:
        meas = run_split(ctx, ex)
    finally:
        store.close()
        if ex is not executor:  # made here (from a name or None): closed here; a user's own executor is theirs
            close_executor(ex)
    guarantee = account(r, acc, meas)
    noisy, var = store.noisy, store.var
    x_full = full["x"] if "x" in full else np.empty((tree.n_nodes, n_cells))
    if marg:
        noisy, var = cast(np.ndarray, mx_full), v_full.copy()
        est = Estimate(x_full.astype(last[0].values.dtype, copy=False), v_full, dict(last[0].info), var,
                       last[0].linear, True)
    elif step is None:
        est = unmeasured_missing(Estimate(noisy, var, dict(meas.info), var, True, False), [])
    elif tail:  # the top-down steps' values, info and flags (as every part's)
        est = Estimate(x_full.astype(last[0].values.dtype, copy=False), v_full, dict(last[0].info), var,
                       last[0].linear, True)
    else:
        est = Estimate(x_full, v_full, subtrees.gls_info(step, var), var, True, True)
    if vals.ndim == 1:
        def cell0(a: Any) -> Any:  # marginals' variances are per cell
            return a[:, 0] if marg and a is not None else a

        est = Estimate(est.values[:, 0], cell0(est.variance), est.info, cell0(est.measurement_variance),
                       est.linear, est.consistent)
        noisy, var = noisy[:, 0], cell0(var)
    if r.invariant_names:
        est = check_invariants_kept(est, vals_internal[r.invariants].reshape(
            (-1,) + vals.shape[1:]), r.invariants, r.postprocessors, r.cover)
    meas_full = Measurements(noisy, var, meas.spends, meas.levels, meas.info)
    ledger = build_ledger(r, tree, meas_full, guarantee, structure=structure, decomposition=decomposition, rng=rng)
    settle_split(r, ledger, part, check_counts, session, ticket)
    return ReleaseResult(
        tree=tree,
        estimate=external_estimate(tree, est),
        measurements=external_estimate(tree, Estimate(noisy, var, dict(meas.info), tiebreak=tiebreak_seed(key))),
        ledger=ledger,
    )


def release_by_subtree(
    tree: Tree,
    counts_of: Callable[[subtrees.SubtreeTask], Any],
    sink: Callable[[subtrees.SubtreeTask, Estimate, Measurements], None],
    *,
    split: Any,
    n_cells: int = 1,
    workdir: str | os.PathLike[str] | None = None,
    session: Session | Reservation | None = None,
    check_counts: bool | str = True,
    workers: int = 1,
    executor: Any = None,
    **keywords: Any,
) -> SplitRun:
    """A release streamed by subtree: memory grows with the largest task, not the tree.

    ``counts_of(task)`` returns the true counts of ``task.nodes`` (the full tree's internal
    ids, in that order; ``(m,)`` or ``(m, n_cells)``); it is called once per task and once
    for the top part (``task.index == -1``: the nodes above the split level). ``sink(task,
    estimate, measurements)`` receives each part's final estimate (values, variances; in
    ``task.nodes`` order, ``task.external_nodes`` are their external ids) and noisy
    measurements (plan ``marginals``: its GLS estimate with per-cell variances, as in
    memory): the top part first, then every task. The ledger is returned, not sunk.

    Tasks are independent once the top is solved. Noise is keyed per node (release key,
    node, cell), so the streamed release equals the in-memory one with the same key bit for
    bit, whatever the split; a call draws a fresh key (or the seed's) and spends the budget. Between a task's
    pass up and its pass down its noisy measurements wait in ``workdir`` (a temporary
    folder by default); they are removed at the end. ``keywords``: those of :func:`release`
    (``epsilon``, ``plan``, ``postprocess``, ``invariants``, ``seed``, ...); ``split`` as there.

    ``workers``: tasks run on this many threads at once (default 1: one after another,
    each task's kernels using every thread). With more, ``counts_of`` is called from
    several threads at once and must be safe to; ``sink`` is still called from this
    thread, in task order; memory holds up to ``workers + 1`` tasks. The numbers do not
    change with ``workers``. ``executor``: where the tasks run instead (:mod:`hierdp.execution`:
    a registered name such as ``"inline"`` or ``"threads"``, built with ``workers``, or an object
    with a ``map(function, tasks)`` method yielding results in task order); the numbers do not
    change with it either.
    """
    ex = resolve_executor(executor, workers)
    r, part, step, tail = split_setup(tree, n_cells, split, keywords)
    check(r, session)
    rng = make_rng(r.seed)
    acc, decomposition = open_account(r, tree, None)
    ticket, session = reserve(session, r)
    store = SpillStore(part, n_cells, workdir)
    ctx = StageContext(r, part, step, tail, n_cells, total=r.total - acc.total, key=noise_key(r.seed),
                       check_counts=check_counts, store=store, sink=CallbackSink(sink), counts_of=counts_of)
    try:
        meas = run_split(ctx, ex)
    finally:
        store.close()
        if ex is not executor:  # made here (from a name or workers): closed here; a user's own executor is theirs
            close_executor(ex)
    guarantee = account(r, acc, meas)
    ledger = build_ledger(r, tree, meas, guarantee, decomposition=decomposition, rng=rng)
    settle_split(r, ledger, part, check_counts, session, ticket)
    return SplitRun(ledger=ledger, partition=part)


