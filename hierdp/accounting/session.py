"""An explicit privacy budget that several releases draw from (:class:`Session`).

In the spirit of OpenDP's ``Context`` and Tumult's ``Session``: the user states the total
budget once; every release made with ``session=`` is checked against what is left
*before* any noise is drawn, refused with a :class:`~hierdp.errors.BudgetError` when it
would overspend, and recorded. Composition is basic (Dwork & Roth, Thm. 3.16): pure ε
adds up, δ adds up, ρ adds up (Bun & Steinke 2016, Lemma 2.3); a pure ε-DP release in a
ρ session costs ρ = ε²/2 (ibid., Prop. 1.4). An (ε, δ) session composes its releases
under the same accountant as :func:`hierdp.accounting.ledger.compose` (``"tight"``, issue 34;
:func:`hierdp.accounting.ledger.compose_parts`): the Gaussian releases calibrated on their exact
curve are one Gaussian mechanism (μ² adds up, Balle & Wang 2018), the released discrete
Laplace releases join it on their exact joint curve when that is smaller
(:func:`hierdp.accounting.accountants.mixed_epsilon`), the others add up (an (ε, δ) release at the ε
its ledger certifies); the session holds while that ε at its δ is <= its ε. Without
Gaussian releases this is basic composition, as before. Unlike the per-object note on repeated
releases of one DataFrame, a session counts whatever data the releases read: it is the
honest way to account several releases of the same population.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, cast

from hierdp.accounting import check_delta, check_epsilon, check_rho, pure_to_zcdp
from hierdp.accounting.accountants import ANALYTIC
from hierdp.accounting.ledger import compose_parts, discrete_laplace_levels
from hierdp.errors import BudgetError, PrivacyError

__all__ = ["Session"]

_RTOL = 1e-12
_DREW_NOISE = "drew noise, not released"
_RELEASED = "released"
_CLAIMED = "claimed by a release, not released yet"


class Session:
    """A total privacy budget for several releases.

    Give ``epsilon`` (pure ε-DP releases; with ``delta`` also (ε, δ) releases, whose ε and
    δ both add up) or ``rho`` (ρ-zCDP releases, and pure ones at ρ = ε²/2).

    A release made with ``session=`` is checked before any work and **reserves** its cost
    just before it draws noise; the reservation stands whatever happens next, so a release
    refused after drawing noise (e.g. a Ghazi release whose noisy root count is too large
    for its budget) is charged and cannot be retried for free. The totals (``epsilon``,
    ``delta``, ``rho``) and the history (``releases``, a tuple of read-only records) cannot
    be changed. A session is one budget: ``copy.copy`` and ``copy.deepcopy`` return the
    session itself, and pickling is refused (two unpickled copies could each spend what is
    left). See ``docs/security.md``.

    Parameters
    ----------
    epsilon : float, optional
        The total ε the releases may spend (basic composition).
    delta : float, optional
        The total δ of (ε, δ) releases.
    rho : float, optional
        The total ρ of ρ-zCDP releases (instead of ``epsilon``).

    Examples
    --------

    >>> import hierdp, numpy as np
    >>> s = hierdp.Session(epsilon=1.0)
    >>> t = hierdp.Tree.complete(fanout=2, height=2)
    >>> _ = hierdp.release(t, np.array([5, 2, 3]), epsilon=0.6, session=s)
    >>> round(s.remaining["epsilon"], 6)
    0.4
    >>> hierdp.release(t, np.array([5, 2, 3]), epsilon=0.6, session=s)
    Traceback (most recent call last):
    ...
    hierdp.errors.BudgetError: this release needs epsilon=0.6 but the session has 0.4 left of epsilon=1; ...
    """

    __slots__ = ("_epsilon", "_delta", "_rho", "_records", "_lock")

    _epsilon: float | None
    _delta: float | None
    _rho: float | None
    _records: list[dict[str, Any]]
    _lock: threading.Lock

    def __init__(self, epsilon: float | None = None, delta: float | None = None, rho: float | None = None) -> None:
        if (epsilon is None) == (rho is None):
            raise BudgetError("a Session needs its total budget: epsilon=... (optionally with delta=...) or rho=...")
        if epsilon is not None:
            epsilon = check_epsilon(epsilon)
            if delta is not None:
                delta = check_delta(delta)
        else:
            if delta is not None:
                raise BudgetError("delta goes with epsilon in a Session; a rho session converts on request")
            rho = check_rho(rho)
        for name, value in (("_epsilon", epsilon), ("_delta", delta), ("_rho", rho), ("_records", []),
                            ("_lock", threading.Lock())):
            object.__setattr__(self, name, value)

    # ---------------------------------------------------------------- read-only state
    @property
    def epsilon(self) -> float | None:
        """The total ε (``None`` in a ρ session)."""
        return self._epsilon

    @property
    def delta(self) -> float | None:
        """The total δ of an (ε, δ) session (``None`` otherwise)."""
        return self._delta

    @property
    def rho(self) -> float | None:
        """The total ρ (``None`` in an ε session)."""
        return self._rho

    @property
    def releases(self) -> tuple[Mapping[str, Any], ...]:
        """Every charge so far, in order (read-only): ``guarantee``, ``cost`` (in the
        session's units) and ``outcome`` (``"released"``, or ``"drew noise, not released"``
        for a release that failed or was refused after it drew noise)."""
        with self._lock:
            return tuple(MappingProxyType(dict(r, guarantee=MappingProxyType(dict(r["guarantee"])),
                                               cost=MappingProxyType(dict(r["cost"]))))
                         for r in self._records)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Session is read-only (cannot set {name!r}): its total and history are the "
                             "accounting; open a new Session for a new budget")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Session is read-only (cannot delete {name!r})")

    def __copy__(self) -> Session:
        return self  # one budget: a copy would let two objects spend what is left

    def __deepcopy__(self, memo: dict[int, Any]) -> Session:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise PrivacyError("a Session cannot be pickled: an unpickled copy (in a worker process, or loaded twice) "
                           "would hold the same remaining budget and could spend it again; make the releases in "
                           "the process that holds the session")

    # ---------------------------------------------------------------- accounting
    def _total(self, k: str) -> float:
        return cast(float, {"epsilon": self._epsilon, "delta": self._delta, "rho": self._rho}[k])

    def _totals(self) -> dict[str, float]:
        return {k: v for k, v in (("epsilon", self._epsilon), ("delta", self._delta), ("rho", self._rho))
                if v is not None}

    def _cost(self, guarantee: Mapping[str, Any]) -> dict[str, float]:
        """What a release with this guarantee costs in the session's units."""
        kind = guarantee["guarantee"]
        if self._rho is not None:
            if kind == "zcdp":
                return {"rho": float(guarantee["rho"])}
            if kind == "pure":
                return {"rho": pure_to_zcdp(guarantee["epsilon"])}
            raise PrivacyError("an (ε, δ)-DP release cannot draw from a rho session (it has no ρ-zCDP "
                               "equivalent); open the session with epsilon= and delta=")
        if kind == "pure":
            return {"epsilon": float(guarantee["epsilon"])}
        if kind == "approx" and self._delta is not None:
            if guarantee.get("accountant") == ANALYTIC and guarantee.get("rho"):
                # Gaussian noise on its exact curve: the session composes it with its other
                # Gaussian releases as one Gaussian mechanism, μ² = 2 Σ ρ (issue 34)
                return {"mu2": 2.0 * float(guarantee["rho"])}
            return {"epsilon": float(guarantee["epsilon"]), "delta": float(guarantee["delta"] or 0.0)}
        if kind == "approx":
            raise PrivacyError("an (ε, δ)-DP release needs a session with delta=...; this one is pure ε-DP")
        raise PrivacyError("a ρ-zCDP release cannot draw from a pure ε session; open the session with rho=... "
                           "(or with epsilon= and delta=, and release with epsilon= and delta=)")

    def _spent(self, records: list[dict[str, Any]] | None = None) -> dict[str, float]:
        """Each unit's costs added up (basic composition), over ``records`` (all by default)."""
        out: dict[str, float] = {}
        for r in self._records if records is None else records:
            for k, v in r["cost"].items():
                out[k] = math.fsum([out.get(k, 0.0), v])
        return out

    def _joint(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """:func:`hierdp.accounting.ledger.compose_parts` of ``records`` at the session's δ (there are
        Gaussian releases on their exact curve among them)."""
        basic, laplace = [], []
        for r in records:
            c = r["cost"]
            if "mu2" in c:
                continue
            if r.get("laplace"):
                laplace.append((c["epsilon"], r["laplace"]))
            else:
                basic.append((c.get("epsilon", 0.0), c.get("delta", 0.0)))
        return compose_parts(self._total("delta"), basic=basic, mu2=self._spent(records)["mu2"], laplace=laplace)

    def _composed(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """What ``records`` spend as the session states it: basic composition
        (:meth:`_spent`) unless there are Gaussian releases on their exact curve (``mu2``);
        then ε is :func:`hierdp.accounting.ledger.compose_parts`'s at the session's δ — the Gaussian
        part's exact ε at the δ the others leave, the released discrete Laplace releases on
        their joint curve with it when smaller, the others added — with ``delta`` the
        others' δ and ``gaussian_mu`` the Gaussian part's μ."""
        spent = self._spent(records)
        if "mu2" not in spent:
            return spent
        out = self._joint(records)
        return {"epsilon": out["epsilon"], "delta": spent.get("delta", 0.0), "gaussian_mu": out["gaussian_mu"]}

    def _how(self, records: list[dict[str, Any]]) -> str:
        """The ledger note's account of how the releases compose."""
        if "mu2" not in self._spent(records):
            return "basic composition"
        accountant = self._joint(records)["accountant"]
        if accountant.startswith(ANALYTIC):
            return f"{ANALYTIC} for its Gaussian releases, basic composition with the others"
        return (f"{accountant}: its Gaussian and discrete Laplace releases on their exact joint curve, "
                "basic composition with the others")

    @property
    def spent(self) -> dict[str, float]:
        """What the releases so far spend together (basic composition; with Gaussian
        releases on their exact curve, the session's accountant: see :meth:`_composed`)."""
        with self._lock:
            return self._composed(self._records)

    @property
    def remaining(self) -> dict[str, float]:
        """What is left, per unit."""
        spent = self.spent
        return {k: max(0.0, total - spent.get(k, 0.0)) for k, total in self._totals().items()}

    def _refuse_overspend(self, cost: Mapping[str, float], records: list[dict[str, Any]]) -> None:
        """Refuse a release of ``cost`` beside ``records`` when together they overspend."""
        spent = self._spent(records)
        if "mu2" in cost or "mu2" in spent:
            need = self._composed(records + [{"cost": dict(cost)}])
            if need["epsilon"] > self._total("epsilon") * (1 + _RTOL) or need["delta"] >= self._total("delta"):
                before = self._composed(records) if records else {"epsilon": 0.0}
                raise BudgetError(f"this release would take the session to epsilon={need['epsilon']:.6g} at "
                                  f"delta={self._total('delta'):g} (its Gaussian releases composed on their exact "
                                  f"curve: mu = {need['gaussian_mu']:.6g}; spent so far epsilon="
                                  f"{before['epsilon']:.6g}) but its total is epsilon={self._total('epsilon'):g}; "
                                  "lower the release's budget or open a new session for new data")
            return
        for k, v in cost.items():
            total = self._total(k)
            left = total - spent.get(k, 0.0)
            if v > left * (1 + _RTOL) + 1e-15:
                raise BudgetError(f"this release needs {k}={v:g} but the session has {max(left, 0.0):g} left of "
                                  f"{k}={total:g}; lower the release's budget or open a new session for new data")

    def check(self, guarantee: Mapping[str, Any]) -> None:
        """Refuse (BudgetError) a release that would overspend; records nothing.

        Parameters
        ----------
        guarantee : mapping
            The release's guarantee as its ledger states it: ``"guarantee"`` (``"pure"``,
            ``"approx"`` or ``"zcdp"``) with its ``"epsilon"``, ``"delta"`` and ``"rho"``
            (and ``"accountant"`` for a Gaussian release on its exact curve).

        Raises
        ------
        BudgetError
            When the release would take the session beyond its total.

        Examples
        --------
        >>> import hierdp
        >>> s = hierdp.Session(epsilon=1.0)
        >>> s.check({"guarantee": "pure", "epsilon": 0.5})
        >>> s.check({"guarantee": "pure", "epsilon": 2.0})
        Traceback (most recent call last):
        ...
        hierdp.errors.BudgetError: this release needs epsilon=2 but the session has 1 left of epsilon=1; ...
        """
        cost = self._cost(guarantee)
        with self._lock:
            self._refuse_overspend(cost, self._records)

    def reserve(self, guarantee: Mapping[str, Any]) -> int:
        """Charge a release's cost before it draws noise (refusing an overspend, atomically
        with the check); the charge stands even if the release then fails. Returns the
        ticket :meth:`settle` takes once the release is made.

        Parameters
        ----------
        guarantee : mapping
            The release's guarantee as its ledger states it: ``"guarantee"`` (``"pure"``,
            ``"approx"`` or ``"zcdp"``) with its ``"epsilon"``, ``"delta"`` and ``"rho"``
            (and ``"accountant"`` for a Gaussian release on its exact curve).

        Returns
        -------
        int
            The reservation's ticket.
        """
        cost = self._cost(guarantee)
        with self._lock:
            self._refuse_overspend(cost, self._records)
            self._records.append({"guarantee": dict(guarantee), "cost": cost, "outcome": _DREW_NOISE})
            return len(self._records) - 1

    def reserve_for(self, guarantee: Mapping[str, Any]) -> Reservation:
        """:meth:`reserve`, as a :class:`Reservation` a door hands to
        :func:`hierdp.release` as ``session=``: a door that draws noise of its own before
        the release (a private structure) reserves the whole release's cost first, so the
        charge stands even if the release then fails.

        Parameters
        ----------
        guarantee : mapping
            The release's guarantee as its ledger states it: ``"guarantee"`` (``"pure"``,
            ``"approx"`` or ``"zcdp"``) with its ``"epsilon"``, ``"delta"`` and ``"rho"``
            (and ``"accountant"`` for a Gaussian release on its exact curve).

        Returns
        -------
        Reservation
            To pass as ``session=``; it serves one release.
        """
        return Reservation(self, self.reserve(guarantee))

    def claim(self, ticket: int) -> None:
        """Take reservation ``ticket`` for one release, before it draws noise; a reservation
        serves one release only (a second claim is refused: it would be a free release).

        Parameters
        ----------
        ticket : int
            What :meth:`reserve` returned.
        """
        with self._lock:
            if not 0 <= ticket < len(self._records) or self._records[ticket]["outcome"] != _DREW_NOISE:
                raise BudgetError("this session reservation was already used by a release; reserve again")
            self._records[ticket]["outcome"] = _CLAIMED

    def settle(self, ticket: int, ledger: Any) -> None:
        """Mark reservation ``ticket`` released with ``ledger``'s guarantee, and note the
        session's totals in the ledger. A ledger costing more than was reserved (e.g. a δ
        only known after measuring) is charged the larger cost; beyond the budget that is
        a BudgetError, and the charge stands (noise was drawn).

        Parameters
        ----------
        ticket : int
            What :meth:`reserve` returned.
        ledger : hierdp.Ledger
            The release's ledger; a note on the session's totals is appended to its
            ``notes``.
        """
        g = {"guarantee": ledger.guarantee, "epsilon": ledger.epsilon, "delta": ledger.delta, "rho": ledger.rho,
             "accountant": getattr(ledger, "certified_by", "")}
        cost = self._cost(g)
        # a released discrete Laplace release of an (ε, δ) session: its levels, for the joint curve
        lap = discrete_laplace_levels(ledger) if self._delta is not None and g["guarantee"] == "pure" and \
            hasattr(ledger, "levels") else None
        with self._lock:
            rec = self._records[ticket]
            more = {k: max(v, rec["cost"].get(k, 0.0)) for k, v in cost.items()}
            over = any(v > rec["cost"].get(k, 0.0) for k, v in more.items())
            if over:
                others = [r for i, r in enumerate(self._records) if i != ticket]
                rec["cost"] = dict(rec["cost"], **more)
                self._refuse_overspend(rec["cost"], others)
            rec["guarantee"], rec["outcome"] = g, _RELEASED
            if lap is not None and rec["cost"] == cost:
                rec["laplace"] = tuple(lap)
            n = ticket + 1
            spent = ", ".join(f"{k}={v:.6g}" for k, v in self._composed(self._records).items())
            how = self._how(self._records)
        total = ", ".join(f"{k}={v:g}" for k, v in self._totals().items())
        ledger.notes.append(f"release {n} of a session with total {total}: the session's releases spend "
                            f"{spent} together ({how})")

    def charge(self, ledger: Any) -> None:
        """Record a release (its ledger) against the budget; refuses an overspend. (Prefer
        :meth:`reserve` before drawing noise and :meth:`settle` after.)

        Parameters
        ----------
        ledger : hierdp.Ledger
            The release's ledger (its guarantee is charged; a note is appended to it).

        Examples
        --------
        >>> import hierdp
        >>> s = hierdp.Session(epsilon=1.0)
        >>> s.charge(hierdp.Ledger(guarantee="pure", epsilon=0.25))
        >>> s.spent, s.remaining
        ({'epsilon': 0.25}, {'epsilon': 0.75})
        """
        g = {"guarantee": ledger.guarantee, "epsilon": ledger.epsilon, "delta": ledger.delta, "rho": ledger.rho}
        self.settle(self.reserve(g), ledger)

    def __repr__(self) -> str:
        total = ", ".join(f"{k}={v:g}" for k, v in self._totals().items())
        return f"<Session {total}: {len(self._records)} releases, remaining {self.remaining}>"


class Reservation:
    """A session's charge made before a release draws noise (:meth:`Session.reserve_for`),
    passed to :func:`hierdp.release` as ``session=``: the release claims it instead of
    reserving again, and settles it with its ledger. It serves one release."""

    __slots__ = ("session", "ticket")
    session: Session
    ticket: int

    def __init__(self, session: Session, ticket: int) -> None:
        object.__setattr__(self, "session", session)
        object.__setattr__(self, "ticket", ticket)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Reservation is read-only")

    def __repr__(self) -> str:
        return f"Reservation(ticket={self.ticket})"
