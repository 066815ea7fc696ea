"""Plugin references in a spec (``plan``, ``mechanism``, ``postprocess``, budget strategies,
metrics): names resolved through :mod:`hierdp.registry`, parameters checked by the very
check that :func:`hierdp.registry.create` runs (:mod:`hierdp.plugins.params`), so a
mistake reads the same here as from Python."""

from __future__ import annotations

from typing import Any

from hierdp import registry, rules
from hierdp.errors import HierDPError, did_you_mean
from hierdp.spec.validate.context import Context

__all__ = ["PluginChecks", "mechanism_unit"]


class PluginChecks(Context):
    """Resolution of plugin references and the rules between plugins and privacy."""

    def plugin(self, path: tuple, ref: Any, kind: str, name_key: str = "name") -> tuple[str, dict[str, Any]] | None:
        """Resolve ``name`` or ``{name, params}`` through the registry and check the params."""
        if isinstance(ref, str):
            name, params, npath = ref, {}, path
        elif isinstance(ref, dict) and isinstance(ref.get(name_key), str):
            name, params, npath = ref[name_key], ref.get("params", {}), path + (name_key,)
            if not isinstance(params, dict):
                return None
        else:
            return None
        try:
            known = registry.names(kind)
        except HierDPError as exc:
            self.err(npath, f"cannot list the installed {kind}s: {exc}")
            return None
        if name not in known:
            self.err(npath, f"unknown {kind} {name!r}{did_you_mean(name, known)} (installed: "
                            f"{', '.join(known) or 'none'}; see `hierdp plugins`, a plugin package may be missing)")
            return None
        self.check_params(kind, name, params, path + ("params",))
        return name, dict(params)

    def check_plan(self, plan: tuple | None, priv: dict) -> None:
        """A plan other than ``per_level`` takes its parameters in ``plan.params``, and its
        budget unit decides which privacy totals it accepts (rules.mechanism_unit_problem)."""
        if plan is None:
            return
        for key in ("mechanism", "budget"):
            if key in self.data:
                self.err((key,), f"`{key}` is a parameter of the plan 'per_level'; plan {plan[0]!r} takes its "
                                 "parameters in plan.params", prefer_key=True)
        try:
            unit = registry.create("plan", plan[0], **plan[1]).budget_unit
        except HierDPError:
            return  # bad parameters were reported by check_params
        p = self.data.get("privacy", {})
        path = ("plan",) if isinstance(self.data.get("plan"), str) else ("plan", "name")
        problem = rules.mechanism_unit_problem(unit, plan[0], epsilon="epsilon" in p, delta="delta" in p,
                                               rho="rho" in p, kind="plan")
        if problem is not None:
            self.err(path, problem)

    def check_postprocess_order(self, pps: list) -> None:
        """A post-processor that needs a consistent input must follow a consistent one."""
        if any(ref is None for ref in pps):
            return  # an unknown name was reported already
        classes = [registry.get("postprocessor", ref[0]) for ref in pps]
        for i, message in rules.chain_order_problems(classes):
            self.err(("postprocess", i), message)

    def check_params(self, kind: str, name: str, params: dict, path: tuple,
                     extra: tuple[str, ...] = ()) -> Any:
        """Report what :func:`hierdp.registry.create` would refuse in ``params`` at ``path``
        (the ``params`` mapping); returns the plugin built from them, or ``None``.

        The plugin is built with the spec's public values only (a budget ``prior`` given
        as a table is left out: the release reads it); ``extra`` names the spec accepts
        besides the plugin's own."""
        trial = {k: (None if k == "prior" and isinstance(v, dict) else v) for k, v in params.items()}
        obj, problems = registry.trial(kind, name, trial, extra)
        for p in problems:
            self.err(path + p.path, p.message, prefer_key=p.at_key)
        return obj if not problems else None

    def check_mechanism_unit(self, mech: tuple | None, priv: dict) -> None:
        """The privacy definition must fit the mechanism's budget unit (rules.mechanism_unit_problem)."""
        if mech is None or not priv:
            return
        p_raw = self.data.get("privacy", {})
        if "epsilon" in p_raw and "rho" in p_raw:
            return  # already reported: give one of them
        unit = getattr(registry.get("mechanism", mech[0]), "budget_unit", "epsilon")
        p = self.data.get("privacy", {})
        path = ("mechanism",) if isinstance(self.data.get("mechanism"), str) else ("mechanism", "name")
        problem = rules.mechanism_unit_problem(unit, mech[0], epsilon="epsilon" in p, delta="delta" in p,
                                               rho="rho" in p)
        if problem is not None:
            self.err(path, problem)


def mechanism_unit(mech: tuple) -> str:
    """The budget unit of a spec's mechanism ``(name, params)``."""
    return getattr(registry.get("mechanism", mech[0]), "budget_unit", "epsilon")
