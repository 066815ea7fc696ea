"""The ``privacy`` section: the privacy loss (and its accountant), the unit and its bound, neighbours, invariants."""

from __future__ import annotations

from typing import Any

from hierdp import rules
from hierdp.accounting.accountants import ACCOUNTANTS
from hierdp.errors import did_you_mean
from hierdp.spec.validate.context import Context, get, num

__all__ = ["PrivacyChecks"]


class PrivacyChecks(Context):
    """Checks of ``privacy`` (every rule from :mod:`hierdp.rules`)."""

    def privacy(self) -> dict[str, Any]:
        """The privacy loss (ε, (ε, δ) or ρ), the unit and its bound, neighbours and invariants."""
        p = self.data.get("privacy")
        out: dict[str, Any] = {}
        if not isinstance(p, dict):
            return out
        eps, delta, rho = num(p.get("epsilon")), p.get("delta"), num(p.get("rho"))
        delta = delta if isinstance(delta, float) and 0 < delta < 1 else None
        if "epsilon" in p and "rho" in p:
            self.err(("privacy", "rho"), "give either privacy.epsilon (with optional delta) or privacy.rho, "
                                         "not both", prefer_key=True)
        elif "epsilon" not in p and "rho" not in p and not any(
                did_you_mean(str(k), ["epsilon", "rho"]) for k in p):
            self.err(("privacy",), "no privacy budget: add `epsilon: <number > 0>` (or `rho:` for zCDP mechanisms)")
        if "delta" in p and "epsilon" not in p:
            self.err(("privacy", "delta"), "delta only goes with epsilon ((ε, δ)-DP); add privacy.epsilon "
                                           "or remove delta", prefer_key=True)
        accountant = p.get("accountant", "tight")
        if "accountant" in p and accountant in ACCOUNTANTS and not ("epsilon" in p and "delta" in p):
            self.err(("privacy", "accountant"), "privacy.accountant chooses how an (ε, δ) request is met; it needs "
                                                "privacy.epsilon and privacy.delta (remove accountant otherwise)",
                     prefer_key=True)
        unit, mc = get(p, "unit", str), get(p, "max_contributions", int)
        src = self.data.get("source")
        problem = rules.unit_bound_problem(unit="unit" in p, max_contributions="max_contributions" in p,
                                           count=isinstance(src, dict) and "count" in src)
        if problem is not None:
            key = "max_contributions" if "max_contributions" in p and "unit" not in p else "unit"
            self.err(("privacy", key), problem, prefer_key=True)
        if unit is not None and self.header is not None and unit not in self.header:
            self.err(("privacy", "unit"), self.missing_col(unit))
        out.update(epsilon=eps, delta=delta if eps is not None else None, rho=rho if "epsilon" not in p else None,
                   unit=unit, max_contributions=mc, accountant=accountant if accountant in ACCOUNTANTS else "tight")
        neighbours = p.get("neighbours", "add_remove")
        valid = rules.neighbours_problem(neighbours) is None  # the schema reports a bad value
        neighbours = neighbours if valid else "add_remove"
        allow = p.get("allow_invariants_with_add_remove", False) is True
        inv = p.get("invariants", [])
        invariants: list[Any] = []
        if isinstance(inv, list):
            for item in inv:
                invariants.append(tuple(item) if isinstance(item, list) else item)
        problem = rules.invariants_problem(neighbours, len(invariants), allow) if valid else None
        if problem is not None:
            self.err(("privacy", "invariants"), problem)
        cover = p.get("invariants_cover")
        if cover is not None and not invariants:
            self.err(("privacy", "invariants_cover"), "invariants_cover says what invariant nodes publish; it needs "
                                                      "privacy.invariants (remove it otherwise)", prefer_key=True)
        out.update(neighbours=neighbours, invariants=invariants, allow_invariants_with_add_remove=allow,
                   invariants_cover=cover if cover in ("total", "cells") else None)
        return out

    def check_invariants(self, priv: dict, level_names: list[str]) -> None:
        """Invariant level names must be levels of the hierarchy (label paths are checked at release)."""
        for i, item in enumerate(priv.get("invariants", [])):
            if isinstance(item, str) and item not in level_names:
                self.err(("privacy", "invariants", i), f"unknown level {item!r}{did_you_mean(item, level_names)}; "
                                                       f"expected one of {', '.join(map(repr, level_names))} "
                                                       "(or a label path such as [CA, Alameda])")

