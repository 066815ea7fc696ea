"""An explicit privacy budget that several releases draw from (:class:`Session`).

In the spirit of OpenDP's ``Context`` and Tumult's ``Session``: the user states the total
budget once; every release made with ``session=`` is checked against what is left
*before* any noise is drawn, refused with a :class:`~hierdp.errors.BudgetError` when it
would overspend, and recorded. Composition is basic (Dwork & Roth, Thm. 3.16): pure ε
adds up, δ adds up, ρ adds up (Bun & Steinke 2016, Lemma 2.3); a pure ε-DP release in a
ρ session costs ρ = ε²/2 (ibid., Prop. 1.4). Unlike the per-object note on repeated
releases of one DataFrame, a session counts whatever data the releases read: it is the
honest way to account several releases of the same population.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

from hierdp.accounting import check_delta, check_epsilon, check_rho, pure_to_zcdp
from hierdp.errors import BudgetError, PrivacyError

__all__ = ["Session"]

_RTOL = 1e-12


@dataclass
class Session:
    """A total privacy budget for several releases.

    Give ``epsilon`` (pure ε-DP releases; with ``delta`` also (ε, δ) releases, whose ε and
    δ both add up) or ``rho`` (ρ-zCDP releases, and pure ones at ρ = ε²/2).

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

    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None
    releases: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.epsilon is None) == (self.rho is None):
            raise BudgetError("a Session needs its total budget: epsilon=... (optionally with delta=...) or rho=...")
        if self.epsilon is not None:
            self.epsilon = check_epsilon(self.epsilon)
            if self.delta is not None:
                self.delta = check_delta(self.delta)
        else:
            if self.delta is not None:
                raise BudgetError("delta goes with epsilon in a Session; a rho session converts on request")
            self.rho = check_rho(self.rho)

    # ---------------------------------------------------------------- accounting
    def _cost(self, guarantee: dict[str, Any]) -> dict[str, float]:
        """What a release with this guarantee costs in the session's units."""
        kind = guarantee["guarantee"]
        if self.rho is not None:
            if kind == "zcdp":
                return {"rho": float(guarantee["rho"])}
            if kind == "pure":
                return {"rho": pure_to_zcdp(guarantee["epsilon"])}
            raise PrivacyError("an (ε, δ)-DP release cannot draw from a rho session (it has no ρ-zCDP "
                               "equivalent); open the session with epsilon= and delta=")
        if kind == "pure":
            return {"epsilon": float(guarantee["epsilon"])}
        if kind == "approx" and self.delta is not None:
            return {"epsilon": float(guarantee["epsilon"]), "delta": float(guarantee["delta"] or 0.0)}
        if kind == "approx":
            raise PrivacyError("an (ε, δ)-DP release needs a session with delta=...; this one is pure ε-DP")
        raise PrivacyError("a ρ-zCDP release cannot draw from a pure ε session; open the session with rho=... "
                           "(or with epsilon= and delta=, and release with epsilon= and delta=)")

    def _spent(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in self.releases:
            for k, v in r["cost"].items():
                out[k] = math.fsum([out.get(k, 0.0), v])
        return out

    @property
    def spent(self) -> dict[str, float]:
        """What the releases so far spend together (basic composition)."""
        return self._spent()

    @property
    def remaining(self) -> dict[str, float]:
        """What is left, per unit."""
        spent = self._spent()
        return {k: max(0.0, getattr(self, k) - spent.get(k, 0.0)) for k in ("epsilon", "delta", "rho")
                if getattr(self, k) is not None}

    def check(self, guarantee: dict[str, Any]) -> None:
        """Refuse (BudgetError) a release that would overspend; called before any noise is drawn."""
        cost = self._cost(guarantee)
        spent = self._spent()
        for k, v in cost.items():
            total = getattr(self, k)
            left = total - spent.get(k, 0.0)
            if v > left * (1 + _RTOL) + 1e-15:
                raise BudgetError(f"this release needs {k}={v:g} but the session has {max(left, 0.0):g} left of "
                                  f"{k}={total:g}; lower the release's budget or open a new session for new data")

    def charge(self, ledger: Any) -> None:
        """Record a release (its ledger) against the budget; refuses an overspend."""
        g = {"guarantee": ledger.guarantee, "epsilon": ledger.epsilon, "delta": ledger.delta, "rho": ledger.rho}
        with self._lock:
            self.check(g)
            self.releases.append({"guarantee": dict(g), "cost": self._cost(g)})
            n = len(self.releases)
            spent = ", ".join(f"{k}={v:.6g}" for k, v in self._spent().items())
            total = ", ".join(f"{k}={getattr(self, k):g}" for k in ("epsilon", "delta", "rho")
                              if getattr(self, k) is not None)
        ledger.notes.append(f"release {n} of a session with total {total}: the session's releases spend "
                            f"{spent} together (basic composition)")

    def __repr__(self) -> str:
        total = ", ".join(f"{k}={getattr(self, k):g}" for k in ("epsilon", "delta", "rho")
                          if getattr(self, k) is not None)
        return f"<Session {total}: {len(self.releases)} releases, remaining {self.remaining}>"
