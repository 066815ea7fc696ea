"""Privacy accounting: the total budget of a release and the guarantee it gives.

Pure ε-DP mechanisms compose by adding ε over levels (basic composition; nodes of one
level are disjoint, so a level costs its own ε by parallel composition).
"""

from __future__ import annotations

import math

from hierdp.errors import BudgetError, PrivacyError

__all__ = ["total_budget", "check_epsilon"]


def check_epsilon(epsilon: object, name: str = "epsilon") -> float:
    """Validate a privacy parameter: a finite number > 0."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) \
            or epsilon <= 0:
        raise BudgetError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def total_budget(unit: str, *, epsilon: float | None = None, delta: float | None = None,
                 rho: float | None = None, mechanism: str = "") -> tuple[float, dict]:
    """The total budget in the mechanism's ``unit`` and the guarantee fields of the ledger.

    Returns ``(total, {"guarantee": ..., "epsilon": ..., "delta": ..., "rho": ...})``.
    """
    if unit == "epsilon":
        if rho is not None:
            raise PrivacyError(f"mechanism {mechanism!r} is pure ε-DP; give epsilon, not rho")
        if epsilon is None:
            raise BudgetError("no privacy budget given: pass epsilon=<positive number>")
        eps = check_epsilon(epsilon)
        if delta is not None:
            raise PrivacyError(f"mechanism {mechanism!r} is pure ε-DP; delta is not used (remove it)")
        return eps, {"guarantee": "pure", "epsilon": eps, "delta": None, "rho": None}
    raise PrivacyError(f"mechanism {mechanism!r} budgets in {unit!r}, which this version cannot account for")
