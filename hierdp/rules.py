"""Every privacy (and chain) rule of hierdp, once.

The runtime (:func:`hierdp.release`, the plans, the front-ends) and spec validation
(:mod:`hierdp.spec.validate`) both call these functions, so a rule cannot drift between
the two. Each ``*_problem`` function returns ``None`` when the rule holds and otherwise a
one-line message naming the problem and the fix; :func:`enforce` raises it with the
error class the runtime uses. Messages name the Python keyword and, in brackets, the
spec key where the two differ.

Rules (design, "Privacy rules"):

* the privacy loss (:class:`hierdp.PrivacyLoss`): ε and ρ are finite and positive, δ in
  (0, 1); ε or ρ is given (:func:`no_budget_text`), never both (:func:`privacy_loss_problem`);
* budgets: totals are finite and positive, δ in (0, 1); per-level budgets add up to the
  total (relative tolerance :data:`SUM_RTOL`) and a split never composes to more than
  the total (:func:`trim_to_total`);
* a mechanism's budget unit decides which totals it accepts (pure ε, ρ, (ε, δ));
* ρ per level: with ε + δ the total ρ is derived, so per-level values need ``rho``;
* the privacy unit and its contribution bound come together, never with pre-aggregated
  counts; the bound is a positive integer;
* sensitivity: a release may declare a larger sensitivity than one privacy unit can
  cause (conservative), never a smaller one (:func:`sensitivity_problem`);
* post-processing order: a step that needs a consistent input follows a consistent one;
* neighbours: ``add_remove`` (default) or ``substitute``; the sensitivity floor follows the
  relation (:func:`sensitivity_floor`, :meth:`Sensitivity.for_neighbours`), and a guarantee
  converts only from add/remove to substitution, never back (:func:`convert_guarantee`);
* invariants (published exactly) need substitution neighbours, or an explicit opt-in
  (:func:`invariants_problem`), and cost no budget because they are not protected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hierdp.errors import BudgetError, PluginError, PrivacyError
from hierdp.mechanisms.base import NEIGHBOURS, Sensitivity

__all__ = ["SUM_RTOL", "enforce", "positive_problem", "delta_problem", "no_budget_text", "privacy_loss_problem",
           "budget_sum_problem", "trim_to_total", "mechanism_unit_problem",
           "rho_per_level_problem", "unit_bound_problem", "max_contributions_problem", "sensitivity_problem",
           "chain_order_problems", "check_chain", "check_budget_values", "delta_mechanism_problem",
           "MAX_EXACT_COUNT", "finite_float", "value_range_problem", "seed_problem", "share_problem", "NEIGHBOURS",
           "neighbours_problem", "sensitivity_floor", "invariants_problem", "convert_guarantee",
           "neighbours_text", "invariants_text", "marginal_sensitivity"]

#: the largest integer every step of a release handles exactly: post-processing (BLUE, GMC)
#: and the continuous mechanisms compute in float64, whose 53-bit significand holds every
#: integer up to 2**53 and no odd one above it (one person could then move a count by 2)
MAX_EXACT_COUNT = 2 ** 53

#: relative tolerance of "per-level budgets add up to the total"
SUM_RTOL = 1e-9


def enforce(problem: str | None, error: type[Exception]) -> None:
    """Raise ``error(problem)`` when a rule reported a problem."""
    if problem is not None:
        raise error(problem)


# ------------------------------------------------------------------------ numbers
def finite_float(x: Any) -> float | None:
    """``x`` as a finite float, or None when it is not a real number, is NaN/infinite, or is
    too large for a float (a 400-digit int would otherwise raise OverflowError)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def value_range_problem(max_abs: float, what: str = "a node value") -> str | None:
    """Counts and totals must stay within :data:`MAX_EXACT_COUNT` (computed exactly); the
    message never shows the (private) value."""
    if max_abs > MAX_EXACT_COUNT:
        return (f"{what} exceeds 2**53 = {MAX_EXACT_COUNT:,} in magnitude, the largest integer a release "
                "handles exactly (post-processing computes in float64); count in larger units (e.g. "
                "thousands) or release parts of the data separately")
    return None


#: seeds are below this: the noise key is SHA-256 of the seed as 32 bytes (``NoiseKey.from_seed``)
SEED_LIMIT = 1 << 256


def seed_problem(seed: Any) -> str | None:
    """A seed is None (secure randomness) or an integer in ``0 <= seed < 2**256``."""
    if seed is None:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        return (f"seed must be a non-negative integer (tests only) or None for secure randomness, got {seed!r:.60} "
                f"({type(seed).__name__})")
    if int(seed) >= SEED_LIMIT:
        return (f"seed must be below 2**256 (about 1.2e77; tests only), got a {len(str(int(seed)))}-digit "
                "number; use a smaller seed, or no seed for secure randomness")
    return None


# ------------------------------------------------------------------ privacy loss
def positive_problem(x: Any, name: str) -> str | None:
    """A budget (ε, ρ, a spend, a share) is a finite number > 0 that fits a float."""
    f = finite_float(x)
    if f is not None and f > 0:
        return None
    if isinstance(x, int) and not isinstance(x, bool) and f is None:  # too large for a float
        return f"{name} must be a finite number > 0 that fits a float; got a {len(str(x))}-digit number"
    return f"{name} must be a finite number > 0, got {x!r:.60}"


def share_problem(share: Any, name: str = "epsilon_share") -> str | None:
    """A share of the budget (``epsilon_share``, the part paying for a private structure) is
    a number strictly between 0 and 1; text such as ``"0.5"`` is refused, not converted."""
    f = finite_float(share)
    if f is not None and 0 < f < 1:
        return None
    if isinstance(share, str):
        return (f"{name} must be a number strictly between 0 and 1, got the string {share!r:.40}; "
                f"pass a number, e.g. {name}=0.5")
    return f"{name} must be a number strictly between 0 and 1, got {share!r:.40}"


#: the smallest δ accepted: a public floor far below any δ used in practice (1/δ and the
#: δ/2^i of Ghazi's steps would overflow float64 in the conversions below it)
DELTA_MIN = 1e-100


def delta_problem(delta: Any) -> str | None:
    """δ is a number strictly between 0 and 1, and at least :data:`DELTA_MIN`."""
    if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, (int, float, np.integer, np.floating)) \
            or finite_float(delta) is None or not (0 < delta < 1):
        return f"delta must be a number strictly between 0 and 1 (e.g. 1e-9), got {delta!r}"
    if delta < DELTA_MIN:
        return (f"delta must be at least {DELTA_MIN:g} (smaller ones overflow the accounting's arithmetic and "
                f"protect no more in practice), got {float(delta):g}")
    return None


def no_budget_text(unit: str = "epsilon", who: str = "") -> str:
    """The one message for a release given no privacy loss, by the budget unit of what
    measures (``who``, e.g. ``"mechanism 'gaussian'"`` or ``"plan 'ghazi'"``)."""
    if unit == "rho":
        return f"no privacy budget given for {who or 'this mechanism'}: pass rho=... or epsilon=... with delta=..."
    if unit == "approx":
        return f"no privacy budget given: {who or 'this release'} is (ε, δ)-DP; pass epsilon= and delta="
    return "no privacy budget given: pass epsilon=<positive number>"


def privacy_loss_problem(epsilon: Any, delta: Any, rho: Any) -> str | None:
    """A privacy loss is pure ε, (ε, δ) or ρ-zCDP (with δ: the (ε, δ) it converts to is
    stated too): each given value valid, ε and ρ not both. Missing ε and ρ is
    :func:`no_budget_text`'s case (its wording depends on what measures)."""
    for value, name in ((epsilon, "epsilon"), (rho, "rho")):
        if value is not None and (problem := positive_problem(value, name)) is not None:
            return problem
    if delta is not None and (problem := delta_problem(delta)) is not None:
        return problem
    if epsilon is not None and rho is not None:
        return "give either rho=... or epsilon=... with delta=..., not both"
    return None


# ------------------------------------------------------------------------ budgets
def budget_sum_problem(total_spent: float, total: float, *, key: str = "the total budget") -> str | None:
    """Per-level budgets must add up to the declared total (levels left out get 0)."""
    if not math.isclose(total_spent, total, rel_tol=SUM_RTOL, abs_tol=0.0):
        return (f"per-level budgets sum to {total_spent:g} but {key} is {total:g}; make them add up to the "
                "total (levels left out are not measured)")
    if total_spent <= 0:
        return "every level has budget 0; give at least one level a positive budget"
    return None


def trim_to_total(alloc: dict[str, float], total: float) -> dict[str, float]:
    """A split whose float sum exceeds ``total`` by rounding (e.g. total/11 eleven times)
    loses the excess from its largest level, so it never composes to more than declared."""
    alloc = dict(alloc)
    s = math.fsum(alloc.values())
    if s > total:
        big = max(alloc, key=alloc.__getitem__)
        alloc[big] -= s - total
        while math.fsum(alloc.values()) > total:
            alloc[big] = math.nextafter(alloc[big], 0.0)
    return alloc


def mechanism_unit_problem(unit: str, name: str, *, epsilon: bool, delta: bool, rho: bool,
                           kind: str = "mechanism") -> str | None:
    """Which totals a mechanism (or plan) budgeted in ``unit`` accepts (which were given: flags)."""
    if unit == "approx" and (rho or not (epsilon and delta)):
        return (f"{kind} {name!r} is (ε, δ)-DP: give privacy.epsilon and privacy.delta (epsilon= and delta=, "
                "e.g. 1e-6)" + (", not rho" if rho else ""))
    if unit == "epsilon" and (rho or delta):
        which = "privacy.rho (rho=)" if rho else "privacy.delta (delta=)"
        return (f"{kind} {name!r} is pure ε-DP and is budgeted by epsilon alone: remove {which} and give "
                "epsilon, or choose a zCDP mechanism such as 'gaussian'")
    if unit == "rho" and epsilon and not delta and not rho:
        return (f"mechanism {name!r} (Gaussian noise) cannot give pure ε-DP: give privacy.rho, or privacy.epsilon "
                "together with privacy.delta (rho=, or epsilon= with delta=, e.g. 1e-9), "
                "or use a Laplace mechanism such as 'discrete_laplace'")
    return None


def rho_per_level_problem(unit: str, *, rho_given: bool, per_level: bool) -> str | None:
    """Per-level values are in the mechanism's unit; with ε + δ for a ρ mechanism the
    total ρ is derived, so explicit per-level values would be guesses."""
    if unit == "rho" and per_level and not rho_given:
        return ("per-level values are in the mechanism's unit, rho; with epsilon + delta the total rho is "
                "derived, so give privacy.rho (rho=) with per-level rho values, or a budget strategy such as "
                "'equal'")
    return None


def delta_mechanism_problem(name: str, delta_per_use: float, uses: int, delta: float | None) -> str | None:
    """A mechanism with a δ of its own (e.g. truncated Laplace) costs δ per use; the uses
    add up (basic composition) and must fit the declared δ."""
    if delta_per_use <= 0:
        return None
    need = delta_per_use * uses
    if delta is None:
        return (f"mechanism {name!r} is (ε, δ)-DP with δ = {delta_per_use:g} per measured level "
                f"({uses} levels: δ = {need:g}); pass delta= at least that, or use a pure ε mechanism")
    if need > delta * (1 + SUM_RTOL):
        return (f"mechanism {name!r} spends δ = {delta_per_use:g} on each of {uses} measured levels "
                f"(δ = {need:g}), more than delta = {delta:g}; lower the mechanism's delta or raise delta")
    return None


# -------------------------------------------------------------- units and bounds
def max_contributions_problem(max_contributions: Any) -> str | None:
    """The contribution bound is a positive integer."""
    if isinstance(max_contributions, (bool, np.bool_)) or not isinstance(max_contributions, (int, np.integer)) \
            or max_contributions < 1:
        return f"max_contributions must be a positive integer, got {max_contributions!r:.60}"
    if max_contributions > MAX_EXACT_COUNT:
        return (f"max_contributions must be at most 2**53 = {MAX_EXACT_COUNT:,}; "
                f"got a {len(str(max_contributions))}-digit number")
    return None


def unit_bound_problem(*, unit: bool, max_contributions: bool, count: bool) -> str | None:
    """A privacy-unit column and its bound come together, and never with pre-aggregated counts."""
    if unit and count:
        return ("a privacy unit (unit=, privacy.unit) cannot be combined with pre-aggregated counts "
                "(count=, source.count); bound contributions on the record-level data")
    if max_contributions and not unit:
        return ("max_contributions needs privacy.unit (unit=), the column that identifies a person; without it "
                "each row is its own unit")
    if unit and not max_contributions:
        return ("a privacy unit (unit=, privacy.unit) needs max_contributions=<c>: the rows of one unit must "
                "be bounded (e.g. max_contributions: 1)")
    return None


def sensitivity_problem(declared: Any, floor: Any, how: str) -> str | None:
    """A release may declare a sensitivity at least as large as ``floor`` (what one privacy
    unit can change, fixed by ``how``), never a smaller one: a smaller one would calibrate
    too little noise and publish under a guarantee that does not hold."""
    if declared is None:
        return None
    if not isinstance(declared, Sensitivity):
        return (f"sensitivity must be a hierdp Sensitivity, e.g. sensitivity=hierdp.Sensitivity(l1=2, l2=2), "
                f"got {type(declared).__name__}")
    if type(declared) is not Sensitivity:  # a subclass could override covers() or the norms themselves
        return (f"sensitivity must be a hierdp Sensitivity itself, not a subclass (got {type(declared).__name__}): "
                "the floor check compares its numbers, which a subclass could redefine; pass "
                "hierdp.Sensitivity(l1=..., l2=...)")
    if not (float(declared.l1) >= float(floor.l1) and float(declared.l2) >= float(floor.l2)):  # not covers(): ours
        return (f"sensitivity {declared} is smaller than one privacy unit can change a level ({floor}, fixed "
                f"by {how}); pass a larger one or none")
    return None


# ------------------------------------------------------------------ neighbours
def neighbours_problem(neighbours: Any) -> str | None:
    """The neighbour relation is ``"add_remove"`` (default) or ``"substitute"``."""
    if neighbours in NEIGHBOURS:
        return None
    return (f"neighbours must be 'add_remove' (one privacy unit added or removed, the default) or 'substitute' "
            f"(one unit's records replaced by another's), got {neighbours!r:.60}")


def neighbours_text(neighbours: str) -> str:
    """The neighbour relation in words, for the ledger."""
    return {"add_remove": "add/remove one privacy unit (unbounded DP)",
            "substitute": "substitute one privacy unit's records by another's (bounded DP; the number of units "
                          "is fixed)"}[neighbours]


def sensitivity_floor(max_contributions: int | None, neighbours: str = "add_remove") -> tuple[Sensitivity, str]:
    """What one privacy unit can change per level, and how that is fixed: one row (``l1 = l2
    = 1``) or ``max_contributions = c`` rows (``c``, ``c``) under add/remove; under
    substitution ``2c`` and ``sqrt(2) c`` (derivation: :meth:`Sensitivity.for_neighbours`).
    This is the one place a release's sensitivity floor is computed."""
    enforce(neighbours_problem(neighbours), PrivacyError)
    if max_contributions is None:
        floor, how = Sensitivity(), "one row per privacy unit"
    else:
        enforce(max_contributions_problem(max_contributions), BudgetError)
        floor, how = Sensitivity.bounded(int(max_contributions)), f"max_contributions={max_contributions}"
    if neighbours == "substitute":
        how += ", substitution neighbours"
    return floor.for_neighbours(neighbours), how


def marginal_sensitivity(level: Sensitivity, neighbours: str = "add_remove") -> Sensitivity:
    """Sensitivity of one marginal (cells summed over some dimensions, the node total included)
    of a level's histogram whose sensitivity is ``level``.

    A unit's contribution to a level is a non-negative vector ``u`` with ``|u|_1 <= c``
    (``c`` = the add/remove L1); summing cells maps it to a non-negative ``A u`` with
    ``|A u|_1 = |u|_1``, so a marginal keeps the level's L1. Its L2 may exceed the
    histogram's (two rows in two cells become 2 in one): ``|A u|_2 <= |A u|_1 <= c`` under
    add/remove and ``|A v - A u|_2 <= sqrt(2) c`` under substitution (as in
    :meth:`Sensitivity.for_neighbours`), i.e. ``l1`` and ``l1 / sqrt(2)``. The marginal's L2
    is the larger of the level's and that bound (the floors hierdp computes already have it).
    """
    enforce(neighbours_problem(neighbours), PrivacyError)
    bound = level.l1 if neighbours == "add_remove" else level.l1 / math.sqrt(2.0)
    if level.l2 >= bound:
        return level
    return Sensitivity(l1=level.l1, l2=bound, linf=level.linf)


def convert_guarantee(guarantee: Mapping[str, Any], frm: str, to: str) -> dict[str, Any]:
    """The guarantee a release private under ``frm`` neighbours has under ``to`` neighbours.

    A substitution is a removal followed by an addition (two add/remove steps), so group
    privacy with group size 2 converts add/remove to substitution conservatively:
    ε-DP ⇒ 2ε-DP; ρ-zCDP ⇒ 4ρ-zCDP (Bun & Steinke 2016, Prop. 1.9, k² ρ); (ε, δ)-DP ⇒
    (2ε, (1 + e^ε) δ)-DP. The converse does not hold (substitution says nothing about the
    number of units, which add/remove protects), so ``substitute`` → ``add_remove`` is refused.
    """
    enforce(neighbours_problem(frm), PrivacyError)
    enforce(neighbours_problem(to), PrivacyError)
    g = dict(guarantee)
    if frm == to:
        return g
    if frm == "substitute":
        raise PrivacyError("a guarantee under substitution neighbours implies none under add/remove (the number of "
                           "units is not protected); release with neighbours='add_remove' instead")
    eps, delta, rho = g.get("epsilon"), g.get("delta"), g.get("rho")
    if rho is not None:
        g["rho"] = 4.0 * rho
    if eps is not None:
        g["epsilon"] = 2.0 * eps
        if delta is not None:
            g["delta"] = (1.0 + math.exp(eps)) * delta
    return g


def invariants_problem(neighbours: str, n_invariants: int, allow_add_remove: bool) -> str | None:
    """Invariants are published exactly, so the guarantee holds only for neighbours that leave
    them unchanged: substitution within an invariant's unit. Under add/remove neighbours an
    invariant total changes with every added person, so they need an explicit opt-in."""
    if n_invariants and neighbours == "add_remove" and not allow_add_remove:
        return ("invariants are published exactly and are not protected: the guarantee holds only for neighbours "
                "that leave them unchanged, i.e. substitution within the invariant's unit; pass "
                "neighbours='substitute' (privacy.neighbours: substitute), or allow_invariants_with_add_remove=True "
                "(privacy.allow_invariants_with_add_remove: true) to accept add/remove neighbours that keep them")
    return None


def invariants_text(names: Sequence[str], neighbours: str) -> str:
    """The ledger's plain statement about invariants."""
    rel = ("substitution of one unit's records by another's within the same invariant unit"
           if neighbours == "substitute" else "adding or removing a unit without changing any invariant")
    return (f"invariants published exactly, NOT protected and costing no budget: {', '.join(names)}; the "
            f"guarantee holds only for neighbours that leave them unchanged ({rel})")


# ------------------------------------------------------------------ post-processing
def chain_order_problems(steps: Sequence[Any]) -> list[tuple[int, str]]:
    """``(position, message)`` for each step that needs a consistent input but does not
    follow a consistent step. ``steps`` are post-processor classes or instances."""
    out = []
    for i, step in enumerate(steps):
        if not getattr(step, "requires_consistent_input", False):
            continue
        if i == 0 or not getattr(steps[i - 1], "consistent", False):
            out.append((i, f"{step.name!r} needs a consistent input; put 'blue' (or 'gmc', then 'nonneg' for "
                           "non-negative counts) before it (raw measurements are not consistent, and unmeasured "
                           "levels hold placeholders)"))
    return out


def check_chain(steps: Sequence[Any]) -> None:
    """Raise :class:`PluginError` for the first chain-order problem."""
    problems = chain_order_problems(steps)
    if problems:
        raise PluginError(problems[0][1])


def check_budget_values(alloc: Mapping[str, Any], desc: str) -> None:
    """Each level's budget is a finite number >= 0 (0: not measured)."""
    for level, v in alloc.items():
        f = finite_float(v)
        if f is None or f < 0:
            raise BudgetError(f"budget for level {level!r} must be a finite number >= 0 (or an exact rational such as "
                              f"'1440/4099'), got {v!r:.60}"
                              if desc == "per-level" else f"budget strategy {desc!r} produced an invalid split")

