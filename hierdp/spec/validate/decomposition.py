"""The ``decomposition`` section: a structure chosen privately from the data (points on a
PrivTree, SimpleTree or grid; sequences on a suffix tree) instead of a declared hierarchy.

The parameters are the decomposition's own, read from its class through the registry
(:mod:`hierdp.plugins.params`: unknown, missing and mistyped ones, with the messages
:func:`hierdp.registry.create` gives from Python), plus the keywords of the release that
the spec passes beside them (:data:`RELEASE_PARAMS`). Parameters named ``column`` or
``columns`` name source columns and are checked against the source header; ``bounds``
(the public box) must give one finite ``[low, high]`` pair per column with low < high.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hierdp import registry
from hierdp.decompositions.privtree import schedule
from hierdp.errors import HierDPError
from hierdp.spec.schema import load_schema
from hierdp.spec.validate.context import Context, num

__all__ = ["DecompositionChecks", "RELEASE_PARAMS", "RELEASE_CHAINS", "releasable"]

#: keywords a spec's ``decomposition.params`` gives the release rather than the
#: decomposition (the runner takes them out before building it), by decomposition name;
#: every decomposition takes ``epsilon_share``, its share of ε
RELEASE_PARAMS: dict[str, tuple[str, ...]] = {"suffix_tree": ("epsilon_share", "separator", "histograms")}
_DEFAULT_RELEASE_PARAMS = ("epsilon_share",)


def _sequence_chain(params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("nonneg", {})] if params.get("histograms", "nonneg") == "nonneg" else []


#: the post-processing a decomposition's release chooses itself (``postprocess`` does not
#: apply), from the spec's parameters: what the validated spec reports
RELEASE_CHAINS: dict[str, Callable[[dict[str, Any]], list[tuple[str, dict[str, Any]]]]] = {
    "suffix_tree": _sequence_chain}


def releasable() -> list[str]:
    """The decompositions a spec can release (the schema's list; the runner knows how)."""
    return list(load_schema()["$defs"]["decomposition"]["properties"]["name"]["enum"])


def _privtree_plan(obj: Any) -> None:
    schedule(len(obj.columns), obj.split, obj.max_depth)
    obj.parameters(1.0, len(obj.columns))  # theta, contributions


def _simpletree_plan(obj: Any) -> None:
    schedule(len(obj.columns), obj.split, obj.height - 1)


#: checks of parameters that the class's constructor leaves to ``decompose`` (the split
#: schedule, θ and the contributions), run on the instance built from the spec's values
_LATER_CHECKS: dict[str, Callable[[Any], None]] = {"privtree": _privtree_plan, "simpletree": _simpletree_plan}


class DecompositionChecks(Context):
    """Checks of ``decomposition`` and of the sections that do not apply beside it."""

    def decomposition(self) -> tuple[str, dict[str, Any]] | None:
        """``decomposition: {name, params}``: the sections that do not apply, the columns
        against the source header, the bounds, and the method's parameters."""
        d = self.data
        if "decomposition" not in d:
            if "hierarchy" not in d:
                self.err((), "the spec says nothing about what to count: add `hierarchy:` (a declared tree of "
                             "categories) or `decomposition:` (a private spatial decomposition of coordinates)")
            return None
        dec = d["decomposition"]
        name = dec.get("name") if isinstance(dec, dict) else None
        self.not_with_a_decomposition(name)
        if not isinstance(dec, dict) or not isinstance(dec.get("params"), dict) or name not in releasable():
            return None  # the schema reported it
        here = ("decomposition", "params")
        params = dict(dec["params"])
        if any(i.path in (("decomposition",), here) for i in self.issues):
            return None  # a required parameter is missing: the schema reported it
        broken = {i.path[2] for i in self.issues if len(i.path) > 2 and tuple(i.path[:2]) == here}
        ok = not broken
        cols = params.get("columns")
        if "columns" not in broken and isinstance(cols, list) and self.header is not None:
            for i, c in enumerate(cols):
                if isinstance(c, str) and c not in self.header:
                    ok = False
                    self.err(here + ("columns", i), self.missing_col(c))
        col = params.get("column")
        if "column" not in broken and isinstance(col, str) and self.header is not None and col not in self.header:
            ok = False
            self.err(here + ("column",), self.missing_col(col))
        if not {"columns", "bounds"} & broken and isinstance(cols, list) and isinstance(params.get("bounds"), list):
            ok = self.check_bounds(params["bounds"], cols) and ok
        extra = RELEASE_PARAMS.get(name, _DEFAULT_RELEASE_PARAMS)
        if not ok:  # report unknown names still, but build nothing from broken values
            for p in registry.problems("decomposition", name, params, extra):
                if p.at_key:
                    self.err(here + p.path, p.message, prefer_key=True)
            return None
        obj, problems = registry.trial("decomposition", name, params, extra)
        for p in problems:
            self.err(here + p.path, p.message, prefer_key=p.at_key)
        if obj is None or problems:
            return None
        later = _LATER_CHECKS.get(name)
        if later is not None:
            try:
                later(obj)
            except (HierDPError, TypeError, ValueError) as exc:
                self.err(here, f"bad parameters for decomposition {name!r}: {exc}")
                return None
        return name, params

    def check_bounds(self, bounds: list, cols: list) -> bool:
        """One finite ``[low, high]`` pair per column with low < high (the box is public)."""
        here = ("decomposition", "params", "bounds")
        if len(bounds) != len(cols):
            self.err(here, f"{len(bounds)} bound pair(s) for {len(cols)} column(s); give one [low, high] per column")
            return False
        ok = True
        for i, pair in enumerate(bounds):
            vals = [num(v) for v in pair] if isinstance(pair, list) and len(pair) == 2 else [None]
            lo, hi = (vals + [None])[:2]
            if lo is None or hi is None:
                ok = False  # the schema reported the type or finiteness
            elif not lo < hi:
                ok = False
                self.err(here + (i,), f"bounds of {cols[i]!r} must have low < high, got {pair}; the box is public: "
                                      "declare it, wider than the data")
        return ok

    def not_with_a_decomposition(self, name: Any) -> None:
        """The sections and keys a decomposition release does not take."""
        d = self.data
        if "hierarchy" in d:
            self.err(("hierarchy",), "give either hierarchy (declared categories) or decomposition (points), "
                                     "not both", prefer_key=True)
        for key, why in (("plan", "the leaves of a decomposition are measured by the plan 'leaves'"),
                         ("budget", "the split is decomposition.params.epsilon_share"),
                         ("evaluate", "evaluation of point releases is not supported in specs; use "
                                      "benchmarks/bench_privtree.py"),
                         ("cells", "a decomposition releases one count per region, not histograms")):
            if key in d:
                self.err((key,), f"`{key}` does not apply with a decomposition: {why}; remove it", prefer_key=True)
        seqs = name == "suffix_tree"
        if seqs and "postprocess" in d:
            self.err(("postprocess",), "`postprocess` does not apply to suffix_tree: its histograms are made "
                                       "non-negative by decomposition.params.histograms (nonneg or clamp); remove it",
                     prefer_key=True)
        p = d.get("privacy")
        if isinstance(p, dict):
            for key in ("delta", "rho"):
                if key in p:
                    self.err(("privacy", key), f"a decomposition release is pure ε-DP (its structure is): give "
                                               f"privacy.epsilon alone and remove {key}", prefer_key=True)
            for key in ("unit", "max_contributions"):
                if key in p and seqs:
                    self.err(("privacy", key), "for suffix_tree one row is one sequence is one privacy unit and "
                                               "decomposition.params.max_length bounds its contribution; remove "
                                               f"{key}", prefer_key=True)
                elif key in p:
                    self.err(("privacy", key), "rows are not grouped by unit for a decomposition: bound each "
                                               "unit to x rows beforehand and set decomposition.params."
                                               f"contributions: x (PrivTree); remove {key}", prefer_key=True)
        src = d.get("source")
        if isinstance(src, dict) and "count" in src:
            self.err(("source", "count"), "a decomposition counts rows (one point each); pre-aggregated counts "
                                          "are not supported: remove source.count", prefer_key=True)
        o = d.get("output")
        if isinstance(o, dict) and isinstance(o.get("columns"), list) and "ci" in o["columns"]:
            self.err(("output", "columns"), "intervals (`ci`) are not written for a decomposition; use estimate, "
                                            "std and noisy")
