"""Validation of release specs: every problem at once, each with its path, line and fix.

:func:`validate` runs three passes and raises one :class:`~hierdp.errors.SpecError`
listing every problem found (``SpecError.errors`` holds the rendered lines, and
``SpecError.issues`` the :class:`~hierdp.spec.loader.Issue` objects):

1. YAML syntax (with the loader's positions; tabs, duplicate keys, an empty file);
2. the JSON Schema shipped in ``hierdp/spec/schema.json`` (unknown keys with the
   closest valid key, types, ranges, finiteness);
3. meaning, one module per section of the spec: :mod:`~hierdp.spec.validate.source`,
   :mod:`~hierdp.spec.validate.hierarchy` (levels and domains),
   :mod:`~hierdp.spec.validate.cells`, :mod:`~hierdp.spec.validate.privacy`,
   :mod:`~hierdp.spec.validate.plugins` (plan, mechanism, post-processing: names
   resolved through :mod:`hierdp.registry`, parameters checked by the check
   :func:`hierdp.registry.create` runs), :mod:`~hierdp.spec.validate.budget`,
   :mod:`~hierdp.spec.validate.decomposition` and :mod:`~hierdp.spec.validate.output`
   (output and evaluate). Only the *header* of a CSV source and the *schema* of a
   Parquet source are read — never a private value.

Unusual but valid settings (e.g. ε > 10, ``observed`` domains) produce warnings in
``ReleaseSpec.warnings`` rather than errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hierdp import registry, rules
from hierdp.errors import DataError, SpecError, did_you_mean
from hierdp.spec.loader import Issue, LoadedSpec, Marks, load_file, load_text
from hierdp.spec.schema import check_against_schema, load_schema
from hierdp.spec.validate.budget import BudgetChecks
from hierdp.spec.validate.cells import CellChecks
from hierdp.spec.validate.context import KNOWN_EXTENSIONS, get, kind_of
from hierdp.spec.validate.decomposition import RELEASE_CHAINS, DecompositionChecks
from hierdp.spec.validate.hierarchy import HierarchyChecks
from hierdp.spec.validate.labels import labels_as_text
from hierdp.spec.validate.model import CellSpec, LevelSpec, ReleaseSpec
from hierdp.spec.validate.output import OutputChecks
from hierdp.spec.validate.privacy import PrivacyChecks
from hierdp.spec.validate.source import SourceChecks
from hierdp.subtrees import parse_memory

__all__ = ["ReleaseSpec", "LevelSpec", "CellSpec", "validate", "raise_issues", "KNOWN_EXTENSIONS"]

_LARGE_EPSILON = 10.0


def raise_issues(issues: list[Issue], filename: str | None) -> None:
    """Raise one :class:`SpecError` listing ``issues`` (no-op when empty)."""
    if not issues:
        return
    lines = [i.render(filename) for i in issues]
    head = lines[0] if len(lines) == 1 else f"{len(lines)} problems in the spec:\n  " + "\n  ".join(lines)
    err = SpecError(head, lines)
    err.issues = list(issues)  # type: ignore[attr-defined]
    raise err


def _load(source: Any) -> LoadedSpec:
    if isinstance(source, LoadedSpec):
        return source
    if isinstance(source, dict):
        return LoadedSpec(source, Marks(), None, Path.cwd())
    if isinstance(source, (str, Path)):
        s = str(source)
        if "\n" in s or (isinstance(source, str) and s.lstrip().startswith(("hierdp:", "{"))):
            return load_text(s, filename=None, base_dir=Path.cwd())
        return load_file(source)
    raise SpecError(f"cannot read a spec from {type(source).__name__}; give a path, YAML text or a dict")


def validate(source: Any, *, check_files: bool = True) -> ReleaseSpec:
    """Validate a spec (a path, YAML text, a :class:`LoadedSpec` or a dict).

    Returns the normalised :class:`ReleaseSpec`; raises :class:`SpecError` listing every
    problem. With ``check_files`` the source header, domain files and output format are
    checked too (nothing but column names is read from the private source).
    """
    loaded = _load(source)
    fname = loaded.filename
    raise_issues(loaded.issues, fname)
    data, marks = loaded.data, loaded.marks
    if not isinstance(data, dict):
        raise_issues([Issue((), f"the spec must be a mapping of sections (hierdp, source, hierarchy, privacy, ...), "
                               f"got {kind_of(data)}; start the file with `hierdp: 1`", 1, 1)], fname)
    if "hierdp" in data and data["hierdp"] != 1:
        raise_issues([marks.issue(("hierdp",), f"unsupported spec version {data['hierdp']!r}; "
                                               "this hierdp reads `hierdp: 1`")], fname)
    issues: list[Issue] = []
    data = labels_as_text(data, marks, issues)
    issues += check_against_schema(data, load_schema(), marks)
    ctx = _Checker(data, marks, loaded.base_dir or Path.cwd(), issues, check_files)
    spec = ctx.run(fname)
    issues.sort(key=lambda i: (i.line if i.line is not None else 0, i.column or 0))
    raise_issues(issues, fname)
    assert spec is not None
    return spec


class _Checker(SourceChecks, HierarchyChecks, CellChecks, PrivacyChecks, DecompositionChecks, BudgetChecks,
               OutputChecks):
    """The semantic pass: each section's checks (one module each) append to ``issues``;
    :meth:`run` builds the normalised spec."""

    def split(self, levels: Any, root: Any, per_level: bool) -> Any:
        """``split:`` (a level name, ``auto``, or ``{level, memory}``): checked against the
        hierarchy's levels and the memory text; only a plan that runs by subtree (``per_level``,
        ``marginals``: :attr:`hierdp.plans.base.Plan.runs_by_subtree`) on a declared
        hierarchy runs by subtree (the schema checks the shape)."""
        raw = self.data.get("split")
        if raw is None:
            return None
        if not per_level:
            self.err(("split",), "split runs a release on a declared hierarchy by subtree with plan per_level or "
                                 "marginals; a decomposition or another plan cannot: remove split")
            return None
        names = [root] + [lv.name for lv in levels if lv is not None] if isinstance(levels, list) else []
        level = raw.get("level") if isinstance(raw, dict) else (None if raw == "auto" else raw)
        if isinstance(level, str) and names and level not in names:
            self.err(("split",) + (("level",) if isinstance(raw, dict) else ()),
                     f"unknown split level {level!r}; expected one of {', '.join(names)}{did_you_mean(level, names)}")
        for key in ("memory", "task_memory"):
            memory = raw.get(key) if isinstance(raw, dict) else None
            if memory is not None and not (memory == "auto" and key == "memory"):
                try:
                    parse_memory(memory, f"split {key}")
                except DataError as exc:
                    self.err(("split", key), str(exc))
        return raw

    def execution(self, levels: Any, root: Any, per_level: bool, split: Any) -> dict[str, Any] | None:
        """``execution:`` (``split``, ``workers``, ``engine``, ``workdir``, ``memory``): the out-of-core
        run (:func:`hierdp.outofcore.release_to_dataset`). Its split is checked as ``split:``
        (one of the two, not both); ``memory`` sizes the tasks (``{level, memory}``); the work
        folder is relative to the spec."""
        raw = self.data.get("execution")
        if not isinstance(raw, dict):
            return None
        if not per_level:
            self.err(("execution",), "execution runs a release on a declared hierarchy by subtree with plan "
                                     "per_level or marginals; a decomposition or another plan cannot: remove execution")
            return None
        if "split" in raw and split is not None:
            self.err(("execution", "split"), "give the split once: in execution.split or in split, not both")
            return None
        chosen = raw.get("split", split)
        if "split" in raw:  # the same checks as split:
            saved = self.data.get("split")
            self.data["split"] = raw["split"]
            try:
                chosen = self.split(levels, root, per_level)
            finally:
                if saved is None:
                    self.data.pop("split")
                else:
                    self.data["split"] = saved
        memory = raw.get("memory")
        if memory is not None:
            try:
                parse_memory(memory)
            except DataError as exc:
                self.err(("execution", "memory"), str(exc))
            if isinstance(chosen, dict) and "memory" in chosen:
                self.err(("execution", "memory"), "give the memory once: in execution.memory or in the split")
            chosen = ({**chosen, "memory": memory} if isinstance(chosen, dict)
                      else {"memory": memory} if chosen in (None, "auto") else {"level": chosen, "memory": memory})
        if chosen is None:
            chosen = "auto"
        workdir = raw.get("workdir")
        engine = raw.get("engine", "local")
        source = self.data.get("source")
        engines = ["local", "spark", *registry.names("executor")]
        if engine not in engines:
            self.err(("execution", "engine"), f"execution.engine must be one of {', '.join(engines)} (local: threads; "
                                              f"the others: registered executors), got {engine!r:.40}")
        elif engine == "spark" and not (isinstance(source, dict) and source.get("engine") == "spark"):
            self.err(("execution", "engine"), "execution.engine: spark runs the subtree tasks on the records Spark "
                                              "reads: set source.engine: spark too")
        out = {"split": chosen, "workers": int(raw.get("workers", 2)),
               "workdir": None if workdir is None else (self.base_dir / workdir)}
        if "engine" in raw:  # where the subtree tasks run: local threads (default), Dask tasks or Spark tasks
            out["engine"] = engine
        return out

    def run(self, fname: str | None) -> ReleaseSpec | None:
        """Every section in order; the normalised spec, or ``None`` when a problem was found."""
        d = self.data
        src = self.source()
        levels, root, paths, unknown = self.hierarchy()
        cells = self.cells(levels, root)
        priv = self.privacy()
        if isinstance(root, str) and isinstance(levels, list):
            self.check_invariants(priv, [root] + [lv.name for lv in levels if lv is not None])
        decomposition = self.decomposition()
        plan = self.plugin(("plan",), d.get("plan", "per_level"), "plan")
        per_level = (plan is None or plan[0] == "per_level") and "decomposition" not in d
        # split and execution: a plan that runs by subtree, on a declared hierarchy
        by_subtree = "decomposition" not in d and (plan is None or bool(getattr(
            registry.get("plan", plan[0]), "runs_by_subtree", False)))
        if per_level:
            mech = self.plugin(("mechanism",), d.get("mechanism", "discrete_laplace"), "mechanism")
            self.check_mechanism_unit(mech, priv)
        elif "decomposition" in d:  # the leaves plan, with the spec's mechanism
            mech = self.plugin(("mechanism",), d.get("mechanism", "discrete_laplace"), "mechanism")
            self.check_mechanism_unit(mech, priv)
        else:
            mech = None
            self.check_plan(plan, priv)
        default_chain = list(getattr(registry.get("plan", plan[0]), "default_postprocess", ("blue",))) \
            if plan is not None else ["blue"]
        pps_raw = d.get("postprocess", default_chain)
        pps = []
        if isinstance(pps_raw, list):
            for i, item in enumerate(pps_raw):
                pps.append(self.plugin(("postprocess", i), item, "postprocessor"))
            self.check_postprocess_order(pps)
        if decomposition is not None and decomposition[0] in RELEASE_CHAINS:  # the release chooses its own
            pps = list(RELEASE_CHAINS[decomposition[0]](decomposition[1]))
        budget = self.budget(levels, root, priv, mech) if per_level else None
        split = self.split(levels, root, by_subtree)
        execution = self.execution(levels, root, by_subtree, split)
        output = self.output()
        evaluate = self.evaluate(priv)
        eps = priv.get("epsilon")
        if eps is not None and eps > _LARGE_EPSILON:
            self.warnings.append(f"privacy.epsilon = {eps:g} is unusually large (> {_LARGE_EPSILON:g}): "
                                 "the release protects individuals only weakly")
        if src["engine"] in ("duckdb", "polars"):
            self.check_dataset_engine(levels, cells, decomposition, src["engine"])
        if isinstance(d.get("seed"), int) and (problem := rules.seed_problem(d["seed"])) is not None:
            self.err(("seed",), problem)  # the schema says integer >= 0; the upper bound is the noise key's
        if self.issues:
            return None
        spec = ReleaseSpec(
            data=d, filename=fname, base_dir=self.base_dir, source_files=src["files"], source_demo=src["demo"],
            source_format=src["format"], source_columns=src["columns"], count=src["count"],
            filters=src["filter"], root=root, levels=levels, paths=paths, unknown=unknown,
            unit=priv.get("unit"), max_contributions=priv.get("max_contributions"),
            epsilon=priv.get("epsilon"), delta=priv.get("delta"), rho=priv.get("rho"), budget=budget,
            mechanism=mech or ("discrete_laplace", {}), postprocess=[p for p in pps if p is not None],
            plan=plan if plan is not None and not per_level and "decomposition" not in d else None,
            decomposition=decomposition,
            output=output, evaluate=evaluate, seed=get(d, "seed", int),
            description=get(d, "description", str, ""), warnings=self.warnings,
            cells=cells, engine=src["engine"],
            neighbours=priv.get("neighbours", "add_remove"), invariants=list(priv.get("invariants", [])),
            accountant=priv.get("accountant", "tight"),
            allow_invariants_with_add_remove=bool(priv.get("allow_invariants_with_add_remove", False)),
            invariants_cover=priv.get("invariants_cover"),
            split=split, execution=execution,
        )
        self.check_outputs_spare_inputs(spec)
        return None if self.issues else spec

