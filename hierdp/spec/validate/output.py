"""The ``output`` and ``evaluate`` sections: what is written, and never over an input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hierdp.io import ledger_path_for
from hierdp.report import REPORT_SUFFIXES
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
        if o.get("report"):
            outs.append((("output", "report"), Path(o["report"])))
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
               "ledger": get(o, "ledger", str), "report": get(o, "report", str)}
        dataset = "execution" in self.data or (out["path"] or "").endswith(("/", os.sep))
        if out["path"] is not None and out["format"] is None and dataset:
            out["format"] = "parquet"  # a dataset folder of Parquet parts (hierdp.outofcore)
        elif out["path"] is not None and out["format"] is None:
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
        if out["report"] is not None:
            self._check_report(out)
        if "ci_level" in o and "ci" not in out["columns"]:
            self.warnings.append("output.ci_level is set but output.columns has no 'ci'; no interval is written")
        return out

    def _check_report(self, out: dict[str, Any]) -> None:
        """``output.report``: a local .html or .yaml file, not the table nor the ledger."""
        rep = out["report"]
        if "\x00" in rep:
            return  # said by check_outputs_spare_inputs
        if "://" in rep:
            self.err(("output", "report"), f"the report is written to a local file; {rep!r} is a URL: give a path "
                                           "such as out/release.html")
            return
        if Path(rep).suffix.lower() not in REPORT_SUFFIXES:
            self.err(("output", "report"), f"cannot tell the report format from {rep!r}; end it in .html (the "
                                           "report page) or .yaml (the OpenDP deployments-registry record)")
        others = [("output.path", out["path"]), ("output.ledger", out["ledger"] or (
            str(ledger_path_for(out["path"])) if out["path"] and "://" not in out["path"] else None))]
        for key, other in others:
            if other is not None and "://" not in other and "\x00" not in other \
                    and Path(rep).resolve() == Path(other).resolve():
                self.err(("output", "report"), f"output.report is the same file as {key}: one would overwrite the "
                                               "other; give the report its own name, e.g. release.html")

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

