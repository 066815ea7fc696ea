"""The ``budget`` section: a strategy (with its parameters and a prior) or per-level budgets."""

from __future__ import annotations

import math
from typing import Any

from hierdp import registry, rules
from hierdp.accounting import parse_budget
from hierdp.errors import HierDPError, did_you_mean
from hierdp.spec.validate.context import get, kind_of, num
from hierdp.spec.validate.model import LevelSpec
from hierdp.spec.validate.plugins import PluginChecks, mechanism_unit

__all__ = ["BudgetChecks"]


class BudgetChecks(PluginChecks):
    """Checks of ``budget`` (the per_level plan's split of the total)."""

    def budget(self, levels: list[LevelSpec], root: str, priv: dict, mech: tuple | None = None) -> Any:
        """A strategy name, ``{strategy, params}`` (and its prior table) or ``{per_level}`` summing to the total."""
        b = self.data.get("budget", "equal")
        names = [root] + [lv.name for lv in levels]
        total = priv.get("rho") if priv.get("rho") is not None else priv.get("epsilon")
        problem = None if mech is None or priv.get("delta") is None else rules.rho_per_level_problem(
            mechanism_unit(mech), rho_given=priv.get("rho") is not None,
            per_level=isinstance(b, dict) and "per_level" in b)
        if problem is not None:
            self.err(("budget", "per_level"), problem, prefer_key=True)
            return None
        if isinstance(b, str):
            r = self.plugin(("budget",), b, "budget")
            self.warn_oracle(b)
            return r[0] if r else None
        if not isinstance(b, dict):
            return None
        if "strategy" in b and "per_level" in b:
            self.err(("budget", "per_level"), "give either budget.strategy or budget.per_level, not both",
                     prefer_key=True)
            return None
        if "params" in b and "strategy" not in b:
            self.err(("budget", "params"), "budget.params needs budget.strategy; remove params or name a strategy",
                     prefer_key=True)
            return None
        if isinstance(b.get("strategy"), str):
            r = self.plugin(("budget",), b, "budget", name_key="strategy")
            prior = b.get("params", {}).get("prior") if isinstance(b.get("params"), dict) else None
            if isinstance(prior, dict):
                self.check_prior(prior, names)
            elif prior is not None:
                self.err(("budget", "params", "prior"), f"in a spec the prior is a table: give {{file: <csv>, "
                                                        f"column: estimate}}, got {kind_of(prior)}")
            self.warn_oracle(b["strategy"])
            return {"strategy": r[0], "params": r[1]} if r else None
        per = get(b, "per_level", dict)
        if per is None:
            return None
        ok = True
        for k, v in per.items():
            if k not in names:
                ok = False
                self.err(("budget", "per_level", k), f"{k!r} is not a level{did_you_mean(str(k), names)}; "
                                                     f"levels: {', '.join(names)}", prefer_key=True)
            if num(parse_budget(v)[0]) is None or parse_budget(v)[0] < 0:
                ok = False
        if ok and total is not None:
            s = math.fsum(float(parse_budget(v)[0]) for v in per.values())
            unit = "rho" if priv.get("rho") is not None else "epsilon"
            problem = rules.budget_sum_problem(s, total, key=f"privacy.{unit}")
            if problem is not None:
                self.err(("budget", "per_level"), problem)
        return {"per_level": dict(per)}

    def check_prior(self, prior: dict, names: list[str]) -> None:
        """``budget.params.prior: {file, column}``: a public table of node values (e.g. an earlier release)."""
        here = ("budget", "params", "prior")
        extra = [k for k in prior if k not in ("file", "column")]
        for k in extra:
            self.err(here + (k,), f"unknown key {k!r}{did_you_mean(str(k), ['file', 'column'])} "
                                  "(valid keys here: file, column)", prefer_key=True)
        if not isinstance(prior.get("file"), str):
            self.err(here, "the prior needs `file:` (a CSV with the level columns and a value column, "
                           "e.g. the output of an earlier release)")
            return
        if "column" in prior and not isinstance(prior["column"], str):
            self.err(here + ("column",), f"must be a string, got {kind_of(prior['column'])}")
            return
        if any(ch in prior["file"] for ch in "*?["):
            self.err(here + ("file",), f"the prior is one file; give its name, not a pattern ({prior['file']!r})")
            return
        files = self.resolve_glob(prior["file"], here + ("file",))
        if files and self.check_files:
            hdr = self.read_header(files[:1], "csv", here + ("file",))
            if hdr is not None:
                need = names[1:] + [prior.get("column", "estimate")]
                for c in need:
                    if c not in hdr:
                        self.err(here + ("file",), f"the prior file has no column {c!r}{did_you_mean(c, hdr)}; "
                                                   f"it needs the level columns and the value column")

    def warn_oracle(self, name: str) -> None:
        """Warn that a strategy reading the true counts makes the release non-private."""

        try:
            cls = registry.get("budget", name)
        except HierDPError:
            return
        if getattr(cls, "reads_true_counts", False):
            self.warnings.append(f"budget strategy {name!r} reads the TRUE counts: the release is not "
                                 "differentially private and the ledger says so (evaluation only)")

