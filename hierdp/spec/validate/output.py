"""The ``output`` and ``evaluate`` sections: what is written, and never over an input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hierdp.io import ledger_path_for
from hierdp.spec.validate.context import format_of, get
from hierdp.spec.validate.model import ReleaseSpec
from hierdp.spec.validate.plugins import PluginChecks

__all__ = ["OutputChecks"]


class OutputChecks(PluginChecks):
    """Checks of ``output`` and ``evaluate`` (metrics are plugins)."""

    def check_outputs_spare_inputs(self, spec: ReleaseSpec) -> None:
        """No output file (table, ledger, evaluation table and plot) may be an input file."""

        inputs = set(spec.input_files())
        outs: list[tuple[tuple, Path]] = []
        o = spec.output or {}
        if o.get("path"):
            outs.append((("output", "path"), Path(o["path"])))
            led = o.get("ledger")
            outs.append((("output", "ledger") if led else ("output", "path"),
                         Path(led) if led else ledger_path_for(o["path"])))
        e = spec.evaluate or {}
        if e.get("output"):
            outs += [(("evaluate", "output"), Path(e["output"])),
                     (("evaluate", "output"), Path(e["output"]).with_suffix(".png"))]
        nul: set[tuple] = set()
        for where, out in outs:
            if "\x00" in str(out):  # pathlib would raise ValueError('embedded null byte')
                if where not in nul:
                    self.err(where, "the path holds a NUL character, which no file name can")
                nul.add(where)
                continue
            if out.resolve() in inputs:
                self.err(where, f"{str(out)!r} is one of this spec's input files; writing it would replace that "
                                "input; choose another output path")

    def output(self) -> dict[str, Any] | None:
        """The output table: path and format, columns, interval level, ledger path."""
        o = self.data.get("output")
        if not isinstance(o, dict):
            return None
        out = {"path": get(o, "path", str), "format": get(o, "format", str),
               "columns": get(o, "columns", list, ["estimate", "std"]), "ci_level": get(o, "ci_level", float, 0.95),
               "ledger": get(o, "ledger", str)}
        if out["path"] is not None and out["format"] is None:
            fmt = format_of(Path(out["path"]))
            if fmt is None or Path(out["path"]).suffix.lower() in (".txt", ".tsv"):
                self.err(("output", "path"), f"cannot tell the output format from {out['path']!r}; end it in "
                                             ".csv or .parquet, or add `format:`")
            out["format"] = fmt
        if out["format"] == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                self.err(("output", "format"), "writing Parquet needs pyarrow: pip install 'hierdp[parquet]'")
        if out["path"] is not None and out["ledger"] is not None \
                and Path(out["ledger"]).resolve() == Path(out["path"]).resolve():
            self.err(("output", "ledger"), "output.ledger is the same file as output.path: the ledger would be "
                                           "overwritten by the table; give it its own name, or drop it for "
                                           "the default <name>.ledger.json")
        if "ci_level" in o and "ci" not in out["columns"]:
            self.warnings.append("output.ci_level is set but output.columns has no 'ci'; no interval is written")
        return out

    # ---------------------------------------------------------------- evaluate
    def evaluate(self, priv: dict) -> dict[str, Any] | None:
        """The NON-PRIVATE evaluation: metrics (plugins), repetitions, ε grid, output."""
        e = self.data.get("evaluate")
        if not isinstance(e, dict):
            return None
        metrics = []
        for i, m in enumerate(get(e, "metrics", list, [])):
            r = self.plugin(("evaluate", "metrics", i), m, "metric")
            if r:
                metrics.append(r)
        if "epsilons" in e and priv.get("rho") is not None:
            self.err(("evaluate", "epsilons"), "evaluate.epsilons sweeps ε, but this spec is budgeted in rho; "
                                               "remove epsilons", prefer_key=True)
        return {"metrics": metrics, "repetitions": get(e, "repetitions", int, 10),
                "epsilons": get(e, "epsilons", list), "output": get(e, "output", str)}

