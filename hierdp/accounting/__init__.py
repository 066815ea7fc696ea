"""Privacy accounting: guarantees, conversions and composition.

Three kinds of guarantee are tracked:

* **pure ε-DP** — Laplace-type mechanisms. Basic composition adds ε; mechanisms on
  disjoint parts of the data (the nodes of one tree level) compose in parallel: max.
* **ρ-zCDP** (Bun & Steinke 2016, Def. 1.1) — Gaussian-type mechanisms. Composition
  adds ρ (BS16 Lemma 2.3); parallel composition takes the max. ε-DP implies
  (ε²/2)-zCDP (BS16 Prop. 1.4).
* **(ε, δ)-DP** — reported for zCDP releases on request, via one of two conversions:

  - ``"bs16"``  (Bun & Steinke 2016, Prop. 1.3):  ε = ρ + 2·sqrt(ρ·ln(1/δ));
  - ``"cks20"`` (Canonne, Kamath & Steinke 2020, Cor. 13), tighter:
    ε = min over α > 1 of  αρ + (ln(1/δ) + (α-1)·ln(1 - 1/α) - ln α) / (α - 1).

  :func:`total_budget` uses ``bs16`` to turn an (ε, δ) target into a ρ budget because
  it inverts in closed form: ρ = (sqrt(ln(1/δ) + ε) - sqrt(ln(1/δ)))².

A plan measuring with a mechanism calibrates through :func:`calibrated_total` instead
(issue 34): with the default ``PrivacyLoss(accountant="tight")`` an (ε, δ) request on the
``gaussian`` mechanism is met exactly on the analytic Gaussian curve (Balle & Wang 2018),
on other ρ mechanisms by the inverted CKS20 conversion; ``accountant="zcdp"`` keeps
``bs16``. The curves themselves live in :mod:`hierdp.accounting.accountants`.

Per-level spend is recorded in :class:`hierdp.accounting.ledger.Ledger`; :class:`Accountant`
composes arbitrary measurements (levels, SVT calls, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, cast

from hierdp import rules
from hierdp.accounting.accountants import (
    ACCOUNTANTS,
    ANALYTIC,
    DISCRETE,
    GRID_DELTA_MARGIN,
    ZCDP,
    accounting_text,
    cks_epsilon,
    cks_rho,
    discrete_gaussian_rho,
    gaussian_epsilon,
    gaussian_mu,
)
from hierdp.errors import BudgetError, PrivacyError

__all__ = ["PrivacyLoss", "pure_epsilon", "total_budget", "loss_total", "check_epsilon", "check_rho", "check_delta",
           "zcdp_to_approx_dp", "approx_dp_to_zcdp", "pure_to_zcdp", "zcdp_delta", "Accountant", "Spend",
           "calibrated_total", "certified_epsilon", "structure_total", "unit_moves", "split_total", "RATIONAL",
           "parse_budget"]

_CONVERSIONS = ("bs16", "cks20")


#: a budget written as an exact rational: "1440/4099" (non-negative integers, a positive denominator)
RATIONAL = re.compile(r"^\s*(\d+)\s*/\s*(\d*[1-9]\d*)\s*$")


def parse_budget(value: Any) -> tuple[Any, str]:
    """A per-level budget as the number a mechanism uses and, when it was given as an exact
    rational (a :class:`fractions.Fraction` or a string such as ``"1440/4099"``), that rational
    in lowest terms (``""`` otherwise), for the ledger to state exactly (issue 34 item 3).
    Anything else is returned as it is (for the budget checks to refuse with their message)."""
    if isinstance(value, Fraction):
        return (float(value), str(value)) if value >= 0 else (value, "")
    if isinstance(value, str):
        m = RATIONAL.match(value)
        if m:
            f = Fraction(int(m.group(1)), int(m.group(2)))
            return float(f), str(f)
    return value, ""


def _positive(x: object, name: str) -> float:
    rules.enforce(rules.positive_problem(x, name), BudgetError)
    return float(cast(float, x))


def check_epsilon(epsilon: object, name: str = "epsilon") -> float:
    """Validate ε: a finite number > 0 (:func:`hierdp.rules.positive_problem`)."""
    return _positive(epsilon, name)


def check_rho(rho: object) -> float:
    """Validate ρ: a finite number > 0 (:func:`hierdp.rules.positive_problem`)."""
    return _positive(rho, "rho")


#: the smallest δ accepted (:data:`hierdp.rules.DELTA_MIN`, re-exported)
DELTA_MIN = rules.DELTA_MIN


def check_delta(delta: object) -> float:
    """Validate δ: a number strictly between 0 and 1 (:func:`hierdp.rules.delta_problem`)."""
    rules.enforce(rules.delta_problem(delta), BudgetError)
    return float(cast(float, delta))


@dataclass(frozen=True)
class PrivacyLoss:
    """One privacy-loss value, validated where it is made and then only carried.

    In the spirit of OpenDP's ``loss_of(epsilon=, delta=, rho=)``: exactly one kind of
    guarantee a release is asked to meet,

    * **pure ε-DP** — ``PrivacyLoss(epsilon=1.0)``;
    * **(ε, δ)-DP** — ``PrivacyLoss(epsilon=1.0, delta=1e-9)``;
    * **ρ-zCDP** (Bun & Steinke 2016, Def. 1.1) — ``PrivacyLoss(rho=0.5)``; with ``delta``
      the ledger also states the (ε, δ) it converts to (Canonne, Kamath & Steinke 2020,
      Cor. 13).

    Every rule is in :mod:`hierdp.rules` (:func:`~hierdp.rules.privacy_loss_problem`,
    :func:`~hierdp.rules.no_budget_text`); an invalid value never exists, so plans, the
    accountant and the ledger read its fields without checking them again. Which kinds a
    release accepts depends on what measures (a pure mechanism refuses ρ, Gaussian noise
    refuses pure ε): :meth:`hierdp.plans.base.Plan.total_for` decides.

    Parameters
    ----------
    epsilon : float, optional
        ε > 0 (pure, or with ``delta`` approximate DP).
    delta : float, optional
        δ in (0, 1).
    rho : float, optional
        ρ > 0 (zCDP); not together with ``epsilon``.
    accountant : {"tight", "zcdp"}
        How an (ε, δ) request is met by Gaussian noise (issue 34): ``"tight"`` (default) on
        the exact curve of the noise where it is known (the analytic Gaussian, Balle & Wang
        2018, for ``gaussian``), else with the tighter Canonne-Kamath-Steinke 2020 zCDP
        conversion (``discrete_gaussian`` and other ρ mechanisms); ``"zcdp"``: the Bun &
        Steinke 2016 conversion hierdp used before (more noise). Pure ε and ρ requests are
        accounted as before whichever is chosen (:mod:`hierdp.accounting.accountants`).

    Raises
    ------
    BudgetError
        when neither ε nor ρ is given, a value is invalid, or both ε and ρ are given.

    Examples
    --------
    >>> import hierdp
    >>> hierdp.PrivacyLoss(epsilon=1.0, delta=1e-9).kind
    'approx'
    >>> hierdp.PrivacyLoss(rho=0.5)
    PrivacyLoss(rho=0.5)
    """

    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None
    accountant: str = "tight"

    def __post_init__(self) -> None:
        if self.epsilon is None and self.rho is None:
            raise BudgetError(rules.no_budget_text())
        rules.enforce(rules.privacy_loss_problem(self.epsilon, self.delta, self.rho), BudgetError)
        if self.accountant not in ACCOUNTANTS:
            raise BudgetError(f"accountant must be one of {', '.join(map(repr, ACCOUNTANTS))}, got "
                              f"{self.accountant!r:.40}: 'tight' calibrates Gaussian noise on its exact curve, "
                              "'zcdp' through the Bun & Steinke 2016 conversion")
        for name in ("epsilon", "delta", "rho"):  # numpy scalars and ints become plain floats
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    @classmethod
    def of(cls, epsilon: float | PrivacyLoss | None = None, delta: float | None = None, rho: float | None = None,
           *, unit: str = "epsilon", who: str = "") -> PrivacyLoss:
        """The privacy loss of release keywords: ``epsilon``/``delta``/``rho``, or a ready
        :class:`PrivacyLoss` passed as ``epsilon`` (returned as it is).

        ``unit`` and ``who`` (the budget unit of what measures, e.g. ``"rho"`` and
        ``"mechanism 'gaussian'"``) only word the error when no budget is given
        (:func:`hierdp.rules.no_budget_text`).
        """
        if isinstance(epsilon, PrivacyLoss):
            if delta is not None or rho is not None:
                raise BudgetError("give the privacy loss once: a PrivacyLoss, or epsilon=/delta=/rho=, not both")
            return epsilon
        if epsilon is None and rho is None:
            raise BudgetError(rules.no_budget_text(unit, who))
        return cls(epsilon=epsilon, delta=delta, rho=rho)

    @property
    def kind(self) -> str:
        """``"pure"``, ``"approx"`` ((ε, δ)) or ``"zcdp"`` (the ledger's ``guarantee``)."""
        if self.rho is not None:
            return "zcdp"
        return "pure" if self.delta is None else "approx"

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={getattr(self, k)!r}" for k in ("epsilon", "delta", "rho")
                          if getattr(self, k) is not None)
        if self.accountant != "tight":
            given += f", accountant={self.accountant!r}"
        return f"PrivacyLoss({given})"


def pure_to_zcdp(epsilon: float) -> float:
    """ρ = ε²/2: an ε-DP mechanism is (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return check_epsilon(epsilon) ** 2 / 2.0


def zcdp_to_approx_dp(rho: float, delta: float, method: str = "cks20") -> float:
    """ε such that ρ-zCDP implies (ε, δ)-DP (formulas in the module docstring)."""
    return _zcdp_to_approx_dp(check_rho(rho), check_delta(delta), method)


def _zcdp_to_approx_dp(rho: float, delta: float, method: str) -> float:
    """:func:`zcdp_to_approx_dp` for values already valid (e.g. a :class:`PrivacyLoss`'s)."""
    L = math.log(1 / delta)
    if method == "bs16":
        return rho + 2.0 * math.sqrt(rho * L)
    if method != "cks20":
        raise BudgetError(f"unknown conversion {method!r}; expected one of 'bs16', 'cks20'")
    return cks_epsilon(rho, delta)  # the golden-section search over α (hierdp.accounting.accountants)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """Smallest δ the CKS20 bound gives for ρ-zCDP at ε:
    min over α > 1 of exp((α-1)(αρ-ε)) / (α-1) · (1 - 1/α)^α (capped at 1)."""
    rho = check_rho(rho)
    eps = check_epsilon(epsilon)
    best = math.inf
    # coarse log-grid then refine: cheap and robust
    la = [x / 50.0 for x in range(-1500, 2001)]
    for x in la:
        a = 1.0 + math.exp(x)
        v = (a - 1) * (a * rho - eps) - math.log(a - 1) + a * math.log1p(-1 / a)
        best = min(best, v)
    return min(1.0, math.exp(best))


def approx_dp_to_zcdp(epsilon: float, delta: float) -> float:
    """Largest ρ whose ``bs16`` conversion gives (ε, δ): ρ = (sqrt(ln(1/δ) + ε) - sqrt(ln(1/δ)))²."""
    return _approx_dp_to_zcdp(check_epsilon(epsilon), check_delta(delta))


def _approx_dp_to_zcdp(epsilon: float, delta: float) -> float:
    """:func:`approx_dp_to_zcdp` for values already valid (e.g. a :class:`PrivacyLoss`'s)."""
    L = math.log(1 / delta)
    return (math.sqrt(L + epsilon) - math.sqrt(L)) ** 2


def pure_epsilon(epsilon: float | PrivacyLoss | None) -> float:
    """ε of a release that is pure ε-DP only (e.g. PrivTree's doors): a number, or a pure
    :class:`PrivacyLoss`; validated by :meth:`PrivacyLoss.of`."""
    loss = PrivacyLoss.of(epsilon)
    if loss.kind != "pure":
        raise PrivacyError(f"this release is pure ε-DP: give epsilon= alone, got {loss!r}")
    return cast(float, loss.epsilon)


def total_budget(unit: str, *, epsilon: float | None = None, delta: float | None = None,
                 rho: float | None = None, mechanism: str = "") -> tuple[float, dict[str, Any]]:
    """The total budget in the mechanism's ``unit`` and the guarantee fields of the ledger,
    from keywords: :func:`loss_total` of ``PrivacyLoss.of(epsilon, delta, rho)``.

    Returns ``(total, {"guarantee": ..., "epsilon": ..., "delta": ..., "rho": ...})``.
    """
    who = f"mechanism {mechanism!r}" if mechanism else ""
    return loss_total(unit, PrivacyLoss.of(epsilon, delta, rho, unit=unit, who=who), mechanism=mechanism)


def loss_total(unit: str, loss: PrivacyLoss, *, mechanism: str = "") -> tuple[float, dict[str, Any]]:
    """The total budget in the mechanism's ``unit`` for the (already valid) ``loss``, and
    the guarantee fields of the ledger.

    Returns ``(total, {"guarantee": ..., "epsilon": ..., "delta": ..., "rho": ...})``.

    * ``unit == "epsilon"`` (pure mechanisms): needs ``epsilon``; ``rho``/``delta`` are errors.
    * ``unit == "rho"`` (Gaussian mechanisms, ρ-zCDP with L2 sensitivity):

      - ``rho`` → guarantee ``"zcdp"`` (with ``delta`` too, the ledger also states the
        (ε, δ) the CKS20 conversion gives);
      - ``epsilon`` + ``delta`` → guarantee ``"approx"`` with the largest ρ whose Bun &
        Steinke conversion ε = ρ + 2·sqrt(ρ ln(1/δ)) meets ε:
        ρ = (sqrt(ln(1/δ) + ε) - sqrt(ln(1/δ)))²;
      - ``epsilon`` alone → :class:`PrivacyError` (Gaussian noise cannot give pure ε-DP).
    """
    who = f"mechanism {mechanism!r}" if mechanism else "this mechanism"
    eps, delta, rho = loss.epsilon, loss.delta, loss.rho
    rules.enforce(rules.mechanism_unit_problem(unit, mechanism or "this mechanism", epsilon=eps is not None,
                                               delta=delta is not None and unit != "epsilon",
                                               rho=rho is not None), PrivacyError)
    if unit == "epsilon":
        eps = cast(float, eps)  # a valid loss without rho has epsilon
        if delta is not None:
            raise PrivacyError(f"{who} is pure ε-DP; delta is not used (remove delta=...)")
        return eps, {"guarantee": "pure", "epsilon": eps, "delta": None, "rho": None}
    if unit == "rho":
        if rho is not None:
            if delta is not None:
                return rho, {"guarantee": "zcdp", "epsilon": _zcdp_to_approx_dp(rho, delta, "cks20"), "delta": delta,
                             "rho": rho}
            return rho, {"guarantee": "zcdp", "epsilon": None, "delta": None, "rho": rho}
        eps, delta = cast(float, eps), cast(float, delta)  # the unit rule above needs both
        r = _approx_dp_to_zcdp(eps, delta)
        return r, {"guarantee": "approx", "epsilon": eps, "delta": delta, "rho": r}
    raise PrivacyError(f"{who} budgets in {unit!r}; expected 'epsilon' or 'rho'")


def calibrated_total(unit: str, loss: PrivacyLoss, *, curve: str | None = None,
                     mechanism: str = "") -> tuple[float, dict[str, Any]]:
    """:func:`loss_total`, with an (ε, δ) request on Gaussian noise met under
    ``loss.accountant`` (issue 34).

    ``curve`` is what the mechanism's noise is known to be (its ``privacy_curve``):

    * ``"gaussian"`` (the ``gaussian`` mechanism): with ``accountant="tight"`` the total
      is ρ = μ²/2 for the largest μ whose analytic Gaussian curve (Balle & Wang 2018,
      Thm 8) meets (ε, δ·(1 - :data:`~hierdp.accounting.accountants.GRID_DELTA_MARGIN`)): however the
      strategy splits ρ over levels, σᵢ² = Δᵢ²/(2ρᵢ) gives sqrt(Σ (Δᵢ/σᵢ)²) <= μ (levels
      sum to at most the total, samplers round σ up), so the release meets (ε, δ) on the
      exact curve of its noise;
    * anything else measured in ρ (``"discrete_gaussian"``, plugins): with ``"tight"`` the
      largest ρ whose Canonne-Kamath-Steinke 2020 (Cor. 13) conversion meets (ε, δ), a
      proven bound for every ρ-zCDP mechanism (the discrete Gaussian's own exact curve is
      *less* private than the continuous one at small σ, so the analytic curve does not
      apply to it). A plan that knows its per-level split then raises it to the exact
      discrete curve's total with :func:`split_total`.

    With ``accountant="zcdp"``, for pure ε or ρ requests, and for ε mechanisms this is
    :func:`loss_total` unchanged (pure-ε releases report the same ε as ever). The
    guarantee fields then carry ``accountant`` and ``accounting`` for the ledger.
    """
    total, g = loss_total(unit, loss, mechanism=mechanism)
    if unit != "rho" or loss.kind != "approx" or loss.accountant != "tight":
        return total, g
    eps, delta = cast(float, loss.epsilon), cast(float, loss.delta)
    if curve == "gaussian":
        mu = gaussian_mu(eps, delta * (1.0 - GRID_DELTA_MARGIN))
        rho, accountant = mu * mu / 2.0, ANALYTIC
    else:
        rho, accountant = cks_rho(eps, delta), ZCDP
    rho = max(rho, total)  # both meet (ε, δ): the one with less noise (the tight one, by construction)
    return rho, dict(g, rho=rho, accountant=accountant, accounting=accounting_text(accountant, "approx"))


def unit_moves(l1: float, l2: float) -> int:
    """How many counts of one level a unit can move by one, when no count can move by more
    (L2 sensitivity below 2): at most ``l2²`` and at most ``l1`` of them; 0 when a count
    can move by 2 or more (or when no integer move fits), which the exact discrete
    Gaussian calibration does not cover."""
    if not (l2 < 2.0):
        return 0
    return max(0, min(int(math.floor(l2 * l2 + 1e-12)), int(math.floor(l1 + 1e-12))))


def split_total(loss: PrivacyLoss, total: float, guarantee: dict[str, Any], *, shares: Sequence[float],
                l1: float, l2: float, check: Any = None) -> tuple[float, dict[str, Any]]:
    """An (ε, δ) request on discrete Gaussian levels, calibrated on their own exact curve
    for the release's per-level ``shares`` of ρ (issue 34).

    ``total``/``guarantee`` are :func:`calibrated_total`'s (the CKS 2020 conversion, a bound
    for every split). With ``accountant="tight"``, a unit that moves each level's counts by at
    most one (:func:`unit_moves`) and a curve that can be summed, the total becomes the
    largest ρ at which levels with ρᵢ = shareᵢ·ρ, σᵢ² = l2²/(2ρᵢ) meet (ε, δ) on the exact
    discrete Gaussian curve (Canonne, Kamath & Steinke 2020, Thm 7;
    :func:`hierdp.accounting.accountants.discrete_gaussian_rho`), and ``check(total)`` (the δ of the
    noise the sampler actually draws at that total) agrees. Otherwise (or if the exact total
    were below the CKS one) ``total``/``guarantee`` are returned as they are.
    """
    if loss.kind != "approx" or loss.accountant != "tight" or guarantee.get("accountant") != ZCDP:
        return total, guarantee
    units = unit_moves(l1, l2)
    if units < 1:
        return total, guarantee
    eps, delta = cast(float, loss.epsilon), cast(float, loss.delta)
    rho = discrete_gaussian_rho(eps, delta, shares, l2=l2, units=units, start=total, check=check)
    if rho is None or not rho > total:
        return total, guarantee
    return rho, dict(guarantee, rho=rho, accountant=DISCRETE, accounting=accounting_text(DISCRETE, "approx"))


def structure_total(loss: PrivacyLoss, guarantee: dict[str, Any], n_spends: int) -> tuple[float, dict[str, Any]]:
    """The total and guarantee of a release that also pays ``n_spends`` spends of a
    data-dependent structure (e.g. PrivTree's, pure ε, paid in ρ = ε²/2) before its
    Gaussian measurements: its noise is then not all Gaussian, so an analytic-Gaussian or
    exact discrete Gaussian total (which assumes it is) is replaced by the CKS 2020 one, valid for the zCDP
    composition of both. Other totals are returned as they are."""
    if not n_spends or guarantee.get("accountant") not in (ANALYTIC, DISCRETE):
        return float(guarantee["rho"]), guarantee
    eps, delta = cast(float, loss.epsilon), cast(float, loss.delta)
    rho = max(cks_rho(eps, delta), _approx_dp_to_zcdp(eps, delta))
    return rho, dict(guarantee, rho=rho, accountant=ZCDP, accounting=accounting_text(ZCDP, "approx"))


def certified_epsilon(guarantee: str, *, rho: float | None, delta: float, accountant: str = "") -> float:
    """The ε a release's ledger certifies at ``delta`` (its curve point by point): for a
    Gaussian release accounted by the analytic Gaussian (μ = sqrt(2ρ)) the exact ε
    (Balle & Wang 2018), for a ρ-zCDP one (and for the discrete Gaussian's exact curve, of
    which ρ-zCDP is a bound: CKS 2020 Thm 14) the CKS 2020 conversion."""
    if rho is None:
        raise BudgetError(f"a {guarantee!r} release without ρ has one (ε, δ) point, not a curve")
    if accountant == ANALYTIC:
        return gaussian_epsilon(math.sqrt(2.0 * rho), check_delta(delta))
    return zcdp_to_approx_dp(rho, delta, "cks20")


@dataclass(frozen=True)
class Spend:
    """One measurement: its cost, unit, label, (optional) parallel group and, for an
    (ε, δ) mechanism (e.g. truncated Laplace), its δ (added up by basic composition)."""

    amount: float
    unit: str
    label: str = ""
    group: str | None = None
    delta: float = 0.0


@dataclass
class Accountant:
    """Composes measurements in one unit (``"epsilon"`` pure DP, or ``"rho"`` zCDP).

    ``spend(x, group=g)``: measurements sharing a group touch disjoint parts of the data
    (e.g. the nodes of one tree level, or disjoint subtrees) and compose in *parallel*
    (the group costs its maximum); groups and ungrouped spends compose *basically* (sum).
    Both rules hold for ε-DP and for ρ-zCDP. Pure-ε spends may be added to a ρ
    accountant with ``spend(eps, unit="epsilon")`` (converted by ρ = ε²/2).
    """

    unit: str = "epsilon"
    budget: float | None = None
    spends: list[Spend] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.unit not in ("epsilon", "rho"):
            raise BudgetError(f"accountant unit must be 'epsilon' or 'rho', got {self.unit!r}")
        if self.budget is not None:
            _positive(self.budget, f"{self.unit} budget")

    def spend(self, amount: float, *, label: str = "", group: str | None = None, unit: str | None = None,
              delta: float = 0.0) -> Spend:
        unit = unit or self.unit
        if delta and self.unit != "epsilon":
            raise PrivacyError("an (ε, δ) spend cannot be added to a zCDP accountant; account it in epsilon")
        if unit == self.unit:
            amt = _positive(amount, self.unit)
        elif unit == "epsilon" and self.unit == "rho":
            amt = pure_to_zcdp(amount)
        else:
            raise PrivacyError(f"cannot add a {unit!r} spend to a {self.unit!r} accountant "
                               "(a zCDP cost has no pure-ε equivalent)")
        s = Spend(amt, self.unit, label, group, float(delta))
        if self.budget is not None and self._total(self.spends + [s]) > self.budget * (1 + 1e-12):
            raise BudgetError(f"spending {amt:g} {self.unit} for {label or 'this measurement'} would exceed "
                              f"the budget {self.budget:g} (already spent {self.total:g})")
        self.spends.append(s)
        return s

    def spend_all(self, spends: Sequence[Spend]) -> None:
        """``spend`` each of ``spends`` in turn (same checks, same errors, same result),
        composing the total once rather than once per spend: a release of 10⁵ levels has
        10⁵ spends, and re-composing all earlier ones at each was quadratic (issue 35 item 8).

        The composed total only grows as spends are added (every amount is positive, a
        group costs its maximum, and ``math.fsum`` is correctly rounded, hence monotone), so
        if all of them fit, each fitted when it was added; if not, they are added one by
        one to refuse the first that does not fit, with ``spend``'s own error."""
        if self.budget is None or len(spends) < 2:
            for s in spends:
                self.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
            return
        checked = Accountant(self.unit)  # no budget: validates and converts each spend, checks nothing else
        try:
            for s in spends:
                checked.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
        except (BudgetError, PrivacyError):
            pass  # one by one below, so that the first spend at fault is refused as spend() refuses it
        else:
            if self._total(self.spends + checked.spends) <= self.budget * (1 + 1e-12):
                self.spends.extend(checked.spends)
                return
        for s in spends:
            self.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)

    @staticmethod
    def _total(spends: list[Spend]) -> float:
        groups: dict[str, float] = {}
        alone = []
        for s in spends:
            if s.group is None:
                alone.append(s.amount)
            else:
                groups[s.group] = max(groups.get(s.group, 0.0), s.amount)
        return math.fsum(alone) + math.fsum(groups.values())

    @property
    def total(self) -> float:
        """Composed cost: sum over groups of the group maximum, plus ungrouped spends."""
        return self._total(self.spends)

    @property
    def delta_total(self) -> float:
        """Composed δ of (ε, δ) spends: basic composition adds them (parallel groups take the max)."""
        groups: dict[str, float] = {}
        alone = []
        for s in self.spends:
            if s.group is None:
                alone.append(s.delta)
            else:
                groups[s.group] = max(groups.get(s.group, 0.0), s.delta)
        return math.fsum(alone) + math.fsum(groups.values())

    @property
    def remaining(self) -> float:
        if self.budget is None:
            return math.inf
        return max(0.0, self.budget - self.total)

    def guarantee(self, delta: float | None = None, method: str = "cks20") -> dict[str, Any]:
        """Ledger fields for the composed cost; for ρ with ``delta``, adds the (ε, δ) conversion."""
        if self.unit == "epsilon":
            if self.delta_total > 0:
                return {"guarantee": "approx", "epsilon": self.total, "delta": self.delta_total, "rho": None}
            return {"guarantee": "pure", "epsilon": self.total, "delta": None, "rho": None}
        out: dict[str, Any] = {"guarantee": "zcdp", "epsilon": None, "delta": None, "rho": self.total}
        if delta is not None and self.total > 0:
            out["delta"] = check_delta(delta)
            out["epsilon"] = zcdp_to_approx_dp(self.total, out["delta"], method)
        return out
