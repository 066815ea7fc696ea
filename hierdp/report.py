"""The release report: what a privacy officer signs off and a data user reads.

``result.report("release.html")`` writes one self-contained HTML page (styles and SVG
figures inline; no script, no font, no URL: it opens offline and its Content-Security-
Policy refuses any network request); ``result.report("release.yaml")`` writes the same
facts as a draft record of the OpenDP deployments registry. ``hierdp report
LEDGER.json`` writes either from a saved ledger alone (what the ledger holds).

:mod:`hierdp._report_facts` computes what the report says (guarantee, budget, accuracy,
provenance, the chain with its parameters) and from where, :mod:`hierdp._report_plain` the
plain-language part that opens the page; this module renders it with the mechanism, plan, chain,
randomness source and seed status, the accuracy of the released values (a parametric
bootstrap on the released table, :mod:`hierdp.accuracy`: in words, per level and by size),
the **invariants in bold as not protected**, a NOT FOR PUBLICATION banner on a seeded or
non-private release and, for a points release, the map of its decomposition shaded by the
released density.

Nothing is computed from the true counts: the report reads the ledger (public), the
released estimates and their variances (post-processing), the public structure and the
spec's public files. The private source file is not hashed: a hash is an exact function
of the private data (anyone holding a guess of the data could test it), so it would not be
differentially private; the report says so. ``ledger.private_notes`` are never read.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from hierdp._report_facts import (
    _frac,
    _g,
    _level_runs,
    _neighbours,
    _now,
    _num,
    _provenance_kind,
    _sensitivity,
    _structure_runs,
    _unit_bound,
    _variant,
    accuracy_rows,
    budget_rows,
    chain_steps,
    exact_rational,
    guarantee_text,
    level_accuracy,
    query_rows,
    released_accuracy,
    released_rows,
    spec_files,
)
from hierdp._report_plain import plain_language
from hierdp._version import __version__
from hierdp.accounting.ledger import Ledger
from hierdp.errors import DataError
from hierdp.io import write_text

__all__ = ["write_report", "report_html", "registry_record", "registry_yaml", "report_kind", "exact_rational",
           "level_accuracy", "REPORT_SUFFIXES", "REGISTRY_SCHEMA"]

#: the report formats by file ending
REPORT_SUFFIXES = {".html": "html", ".htm": "html", ".yaml": "yaml", ".yml": "yaml"}
#: where the YAML record's field names come from
REGISTRY_SCHEMA = ("opendp/deployments-registry-data, schemas/deployments-schema.yaml "
                   "(commit 3e9c812a924cf01d228f26f6c462c59c391c3f2a, 2026-07-15)")
#: the decomposition map draws at most this many leaf cells (each ~90 bytes of SVG)
MAP_MAX_CELLS = 20_000
#: the accuracy chart draws at most this many rows
CHART_MAX_ROWS = 60
_TODO = "TO BE COMPLETED by the curator"


def report_kind(path: str | Path) -> str:
    """``"html"`` or ``"yaml"`` from the ending of ``path``; :class:`DataError` otherwise."""
    suffix = Path(str(path)).suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise DataError(f"cannot tell the report format from {str(path)!r}; end it in .html (the report page) or "
                        ".yaml (the OpenDP deployments-registry record)")
    return REPORT_SUFFIXES[suffix]


# -- HTML ---------------------------------------------------------------------------------
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


_CSS = """
:root{--ink:#1d2330;--muted:#5b6472;--line:#d9dde3;--bg:#fff;--warn:#9b1c1c;--accent:#1f5fae}
*{box-sizing:border-box}
html{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:var(--ink);
background:var(--bg);line-height:1.45}
body{margin:0}
main{max-width:1200px;margin:0 auto;padding:24px 20px 48px}
h1{font-size:1.6rem;margin:.2rem 0 .4rem}
h2{font-size:1.2rem;margin:2rem 0 .6rem;border-bottom:2px solid var(--line);padding-bottom:.2rem}
h3{font-size:1rem;margin:1.2rem 0 .4rem}
p,li,dd,dt{overflow-wrap:anywhere}
td,th{overflow-wrap:break-word}
.muted{color:var(--muted)}
.banner{border:3px solid var(--warn);color:var(--warn);background:#fdf1f1;padding:12px 16px;margin:12px 0;
font-weight:700}
.banner ul{margin:.3rem 0 0 1.2rem;font-weight:400}
.invariant{color:var(--warn);font-weight:700}
dl.facts{display:grid;grid-template-columns:minmax(10rem,16rem) 1fr;gap:.3rem 1rem;margin:0}
dl.facts dt{font-weight:600}
dl.facts dd{margin:0}
.chart-note{margin:.6rem 0}
#plain-language p{max-width:52rem}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.88rem;margin:.4rem 0}
th,td{border:1px solid var(--line);padding:4px 5px;text-align:left;vertical-align:top}
th{background:#f3f5f8}
td.num{font-variant-numeric:tabular-nums;text-align:right;white-space:nowrap}
tfoot td{font-weight:700}
details summary{cursor:pointer;color:var(--accent)}
svg{max-width:100%;height:auto;display:block}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em}
footer{margin-top:2.5rem;font-size:.85rem;color:var(--muted)}
@media print{main{max-width:none;padding:0}.scroll{overflow:visible}h2{break-after:avoid}
table{break-inside:auto}tr{break-inside:avoid}}
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def _facts(items: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already escaped by the caller."""
    return '<dl class="facts">' + "".join(f"<dt>{_e(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], *, ident: str = "", numeric: Sequence[int] = (),
           foot: Sequence[str] | None = None) -> str:
    """A table in a horizontally scrolling box; cells are HTML already escaped by the caller."""
    num = set(numeric)
    out = [f'<div class="scroll"><table{f" id={chr(34)}{ident}{chr(34)}" if ident else ""}><thead><tr>']
    out += [f"<th>{_e(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>")
    out.append("</tbody>")
    if foot is not None:
        out.append("<tfoot><tr>" + "".join(f"<td>{c}</td>" for c in foot) + "</tr></tfoot>")
    out.append("</table></div>")
    return "".join(out)


def _how_often(c: float) -> str:
    """``0.9`` -> "9 times in 10", ``0.95`` -> "95 times in 100"."""
    for base in (10, 100, 1000):
        if abs(c * base - round(c * base)) < 1e-9:
            return f"{round(c * base)} times in {base}"
    return f"with probability {c:g}"


def _amount(x: float) -> str:
    """A count as a reader of a table reads it: whole numbers without decimals."""
    if not math.isfinite(x):
        return "—"
    if abs(x - round(x)) < 1e-9:
        return f"{round(x):,}"
    return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"


def _released_accuracy_html(by_level: Any, by_band: Any, ledger: Ledger) -> str:
    """The accuracy of the released values (:meth:`ReleaseResult.accuracy`), in words first,
    then per level and per size of the published total, and how it was computed."""
    c = float(by_level.attrs["confidence"])
    pct = f"{c * 100:g} %"
    people = " people" if any(w in (ledger.privacy_unit or "").lower() for w in ("individual", "person")) else ""
    out = ['<p>How far the published figures are from the true ones (after all post-processing, as '
           "published):</p><ul id=\"accuracy-words\">"]
    for r in by_level.itertuples(index=False):
        what = "the published grand total is" if str(r.level) == "total" and r.units == 1 else \
            f"a {_e(r.level)}'s published total is"
        lead = "On average " + what
        out.append(f"<li>{lead} off by about {_amount(r.mae)}{people}; {_how_often(c)} by at most "
                   f"{_amount(r.moe)}{people}.</li>")
    out.append("</ul>")
    out.append(_table(["Level", "Units", "Mean absolute error", f"{pct} margin of error"],
                      [[_e(r.level), _e(f"{r.units:,}"), _e(_g(r.mae)), _e(_g(r.moe))]
                       for r in by_level.itertuples(index=False)], ident="released-accuracy", numeric=(1, 2, 3)))
    if by_band is not None and len(by_band) > len(by_level):
        out.append("<p>By size of the published total (units grouped by their published total):</p>")
        out.append(_table(["Level", "Published total", "Units", "Mean absolute error", f"{pct} margin of error"],
                          [[_e(r.level), _e(r.size), _e(f"{r.units:,}"), _e(_g(r.mae)), _e(_g(r.moe))]
                           for r in by_band.itertuples(index=False)], ident="released-accuracy-by-size",
                          numeric=(2, 3, 4)))
    reps = int(by_level.attrs["repetitions"])
    out.append(f'<p class="muted" id="accuracy-method">How this was computed: a parametric bootstrap, {reps} '
               "repetitions. The published values were taken as if they were the truth; fresh noise was drawn "
               "from the same public noise law as the release (mechanism, budget and sensitivity of each level), "
               f"the same post-processing ({_e(by_level.attrs['chain'])}) was run again, and the published totals "
               "of each unit (a place's total over all its cells) were compared. The mean absolute error is the "
               f"average distance; the {pct} margin of error is the distance not exceeded {_how_often(c)}. "
               "No true count was read: this is post-processing of the release and costs no privacy. It is the "
               "error the release would have if the truth were the published table.</p>")
    return "".join(out)


def _names_list(names: Sequence[str], most: int = 6) -> str:
    """``a, b and c``; ``the 12 levels a … l`` when there are more than ``most``."""
    names = [str(n) for n in names]
    if len(names) > most:
        return f"the {len(names)} levels {names[0]} … {names[-1]}"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _equal_split(measured: Sequence[dict[str, Any]], unit_sym: dict[str, str]) -> str:
    """The sentence that replaces the budget chart when every measured entry has the same
    budget (its bars would all be equal)."""
    first = measured[0]
    sym = unit_sym.get(first["unit"], first["unit"])
    names = [n for r in measured for n in (r["names"] if r["kind"] == "run" else [r["name"]])]
    b, rat = float(first["budget"]), first["rational"]
    if float(f"{b:.6g}") == b:
        amount = f"{sym} = {b:g}"
    elif rat.denominator <= 1000:
        amount = f"{sym} = {_frac(rat)} ≈ {b:.4g}"
    else:
        amount = f"{sym} ≈ {b:.6g}"
    if len(names) == 1:
        return f"The whole budget, {amount}, goes to {names[0]}; no chart is drawn."
    share = "" if first["share"] is None else f" ({_frac(first['share'])} of the total)"
    return (f"The budget is split equally: {amount}{share} each for {_names_list(names)}; no chart is drawn, "
            "its bars would all be equal.")


def _names_cell(row: dict[str, Any]) -> str:
    if row["kind"] != "run":
        return _e(row["name"])
    names = row["names"]
    return (f"{_e(row['name'])}<details><summary>the {len(names)} levels</summary>"
            f"{_e(', '.join(names))}</details>")


#: the smallest font size (px, at the chart's own width) of any text in an SVG chart
CHART_MIN_FONT = 12


def _constant(values: Sequence[float | None]) -> bool:
    """Whether every value is finite and equal to the first (to 12 digits)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    return bool(values) and len(finite) == len(values) and all(math.isclose(v, finite[0], rel_tol=1e-12)
                                                               for v in finite)


def _bar_chart(title: str, labels: Sequence[str], series: Sequence[tuple[str, str, Sequence[float | None]]],
               unit: str = "", *, same: str = "") -> str:
    """A horizontal grouped bar chart as inline SVG (log scale when the values span more
    than a factor 50); every text is escaped and at least :data:`CHART_MIN_FONT` px.

    When every series has one value for all labels (an equal split draws identical bars that
    say nothing) and ``same`` is given, ``same`` is returned as one sentence instead."""
    if same and labels and all(_constant(vs) for _, _, vs in series):
        return f'<p class="chart-note">{_e(same)}</p>'
    vals = [v for _, _, vs in series for v in vs if v is not None and math.isfinite(v) and v > 0]
    if not labels or not vals:
        return ""
    log = max(vals) / min(vals) > 50
    lo = math.log10(min(vals)) - 0.3 if log else 0.0
    hi = math.log10(max(vals)) + 0.1 if log else max(vals) * 1.08

    def pos(v: float) -> float:
        x = (math.log10(v) - lo) / (hi - lo) if log else v / hi
        return max(0.0, min(1.0, x))

    # 760 px wide: drawn at its own size (never scaled down) in a page at least 800 px wide
    font = CHART_MIN_FONT
    width, left, right, bar, gap = 760, 190, 80, 17, 12
    per = bar * len(series) + gap
    top = 44
    height = top + per * len(labels) + 16
    plot_w = width - left - right
    out = [f'<svg role="img" aria-label="{_e(title)}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" font-size="{font}" font-family="system-ui,sans-serif">',
           f'<text x="0" y="16" font-size="{font + 2}" font-weight="600">{_e(title)}'
           f'{_e(" (log scale)" if log else "")}</text>']
    lx = left
    for name, color, _ in series:  # legend
        out.append(f'<rect x="{lx}" y="26" width="12" height="12" fill="{color}"/>'
                   f'<text x="{lx + 16}" y="37">{_e(name)}</text>')
        lx += 16 + round(0.62 * font * len(name)) + 20
    for i, lab in enumerate(labels):
        y0 = top + 8 + i * per
        short = lab if len(lab) <= 26 else lab[:25] + "…"
        out.append(f'<text x="{left - 8}" y="{y0 + (per - gap) / 2 + font / 3:.1f}" text-anchor="end">'
                   f"{_e(short)}</text>")
        for j, (_, color, vs) in enumerate(series):
            v = vs[i]
            y = y0 + j * bar
            if v is None or not math.isfinite(v):
                continue
            w = pos(v) * plot_w if v > 0 else 0.0
            out.append(f'<rect x="{left}" y="{y:.1f}" width="{w:.1f}" height="{bar - 3}" fill="{color}"/>'
                       f'<text x="{left + w + 4:.1f}" y="{y + bar - 5:.1f}">{_e(_g(v))}{_e(unit)}</text>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - 8}" stroke="#888"/>')
    out.append("</svg>")
    return "".join(out)


_VIRIDIS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))


def _ramp(t: np.ndarray) -> list[str]:
    t = np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0) * (len(_VIRIDIS) - 1)
    i = np.minimum(t.astype(np.int64), len(_VIRIDIS) - 2)
    f = t - i
    a, b = np.asarray(_VIRIDIS)[i], np.asarray(_VIRIDIS)[i + 1]
    c = (a + (b - a) * f[:, None]).round().astype(np.int64)
    return [f"#{r:02x}{g:02x}{bb:02x}" for r, g, bb in c]


def decomposition_svg(result: Any) -> str:
    """The leaf cells of a points release over its public box (two first coordinates),
    shaded by released density (estimate / area, clipped at 0, log scale); ``""`` when the
    result has no spatial structure, a note when it has too many cells to draw."""
    st = getattr(result, "structure", None)
    if st is None or getattr(st, "lows", None) is None or getattr(st, "bounds", None) is None:
        return ""
    leaves = np.flatnonzero(np.asarray(st.is_leaf))
    if leaves.size > MAP_MAX_CELLS:
        return f'<p class="muted">The map is not drawn: {leaves.size:,} leaf cells (more than {MAP_MAX_CELLS:,}).</p>'
    bounds = np.asarray(st.bounds, dtype=np.float64)
    d = bounds.shape[0]
    lo = np.asarray(st.lows, dtype=np.float64)[leaves]
    hi = np.asarray(st.highs, dtype=np.float64)[leaves]
    jx, jy = 0, (1 if d > 1 else None)
    size = 560.0
    bx0, bx1 = bounds[jx]
    sx = size / (bx1 - bx0)
    x0 = (lo[:, jx] - bx0) * sx
    w = (hi[:, jx] - lo[:, jx]) * sx
    if jy is None:
        y0, h = np.zeros_like(x0), np.full_like(x0, size)
    else:
        by0, by1 = bounds[jy]
        sy = size / (by1 - by0)
        y0 = size - (hi[:, jy] - by0) * sy   # y grows upwards on the map
        h = (hi[:, jy] - lo[:, jy]) * sy
    area = np.prod(hi - lo, axis=1)
    est = np.asarray(result.estimate.values, dtype=np.float64)
    est = est.reshape(est.shape[0], -1).sum(axis=1)[leaves]
    dens = np.log1p(np.clip(est, 0, None) / np.where(area > 0, area, np.inf))
    top = float(dens.max()) if dens.size and dens.max() > 0 else 1.0
    colors = _ramp(dens / top)
    cells = "".join(f'<rect x="{a:.2f}" y="{b:.2f}" width="{c:.2f}" height="{e:.2f}" fill="{f}"/>'
                    for a, b, c, e, f in zip(x0, y0, w, h, colors))
    cols = list(getattr(st, "columns", [])) or ["x", "y"]
    ylab = cols[jy] if jy is not None and jy < len(cols) else ""
    title = f"{getattr(st, 'method', '') or 'decomposition'}: {leaves.size:,} leaf cells"
    return (f'<svg role="img" aria-label="{_e(title)}" viewBox="-50 -30 {size + 70:.0f} {size + 80:.0f}" '
            f'width="{size + 120:.0f}" height="{size + 110:.0f}" font-size="12" font-family="system-ui,sans-serif">'
            f'<text x="0" y="-12" font-weight="600">{_e(title)}</text>'
            f'<g stroke="#ffffff" stroke-width="0.3">{cells}</g>'
            f'<rect x="0" y="0" width="{size:.0f}" height="{size:.0f}" fill="none" stroke="#333"/>'
            f'<text x="{size / 2:.0f}" y="{size + 22:.0f}" text-anchor="middle">{_e(cols[jx])} '
            f'[{_e(_g(bx0))}, {_e(_g(bx1))}]</text>'
            f'<text x="-12" y="{size / 2:.0f}" text-anchor="middle" transform="rotate(-90 -12 {size / 2:.0f})">'
            f'{_e(ylab)}</text></svg>'
            '<p class="muted">Shade: log(1 + released count / area), from the released (noisy) estimates; '
            "the cells themselves are a private output paid from the budget.</p>")


def _plain_html(ledger: Ledger, result: Any) -> str:
    """The plain-language part (:func:`hierdp._report_plain.plain_language`) as a section."""
    out = ['<section id="plain-language"><h2>In plain words</h2>']
    for p in plain_language(ledger, result):
        body = _e(p.text).replace("e^ε", "e<sup>ε</sup>")
        cls = ' class="invariant"' if p.ident == "plain-caution" else ""
        out.append(f"<h3>{_e(p.heading)}</h3><p id=\"{p.ident}\"{cls}>{body}</p>")
    out.append("</section>")
    return "".join(out)


def _registry_defaults(ledger: Ledger, title: str | None, curator: str | None, intended_use: str | None,
                       region: str | None, authors: Sequence[str] | None) -> dict[str, Any]:
    return {"title": title or f"hierdp release {ledger.release_id or '(no id)'}",
            "curator": curator or _TODO, "intended_use": intended_use or _TODO, "region": region or _TODO,
            "authors": list(authors) if authors else [f"generated by hierdp {__version__}"]}


def report_html(ledger: Ledger, result: Any = None, *, title: str | None = None, curator: str | None = None,
                intended_use: str | None = None, region: str | None = None) -> str:
    """The report page (one self-contained HTML document) of ``ledger`` and, when given,
    its release ``result`` (per-query budgets, released-value accuracy, decomposition map,
    spec hashes). Every string from the ledger or the data is HTML-escaped."""
    meta = _registry_defaults(ledger, title, curator, intended_use, region, None)
    parts: list[str] = []
    add = parts.append
    add(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="hierdp {_e(__version__)}">'
        f"<title>{_e(meta['title'])}</title><style>{_CSS}</style></head><body><main>")
    add(f"<h1>{_e(meta['title'])}</h1>")
    add(f'<p class="muted">Differential-privacy release report · release <code>{_e(ledger.release_id or "—")}</code>'
        f" · {_e(ledger.created or 'time unknown')} · hierdp {_e(ledger.hierdp_version or 'version unknown')}</p>")
    reasons = ledger.not_for_publication_reasons()
    if reasons:
        add('<div class="banner" id="not-for-publication">NOT FOR PUBLICATION<ul>'
            + "".join(f"<li>{_e(r)}</li>" for r in reasons) + "</ul></div>")

    add(_plain_html(ledger, result))

    # 1. guarantee
    add('<h2 id="guarantee">1. Guarantee</h2>')
    if ledger.invariants:
        inv = ('<ul class="invariants">' + "".join(
            f'<li><strong class="invariant">NOT PROTECTED (published exactly, no noise, no budget): {_e(i)}</strong>'
            "</li>" for i in ledger.invariants)
            + "</ul><strong class=\"invariant\">The guarantee holds only for neighbouring data sets that leave "
              "these invariants unchanged.</strong>")
    else:
        inv = "none: every published value carries noise"
    facts = [("Guarantee", _e(guarantee_text(ledger))), ("Neighbouring data sets", _e(_neighbours(ledger))),
             ("Privacy unit", _e(ledger.privacy_unit)), ("Bound per unit", _e(_unit_bound(ledger))),
             ("Invariants", inv), ("Composition", _e(ledger.accounting or "—")),
             ("Trust model", _e(ledger.trust_model or "—"))]
    add(_facts(facts))
    add("<h3>Where the structure came from</h3>")
    srows = [[_e(name), _e(_provenance_kind(text)), _e(text)] for name, text in _structure_runs(ledger.structure)]
    if ledger.decomposition:
        d = ledger.decomposition
        kind = "private output" if d.get("private_structure") else "public"
        srows.insert(0, [_e("(decomposition)"), _e(kind), _e(d.get("description") or d.get("name", ""))])
    add(_table(["Level", "Source", "As recorded"], srows, ident="structure") if srows
        else '<p class="muted">The ledger records no structure provenance.</p>')

    # 2. budget
    add('<h2 id="budget-allocation">2. Budget allocation</h2>')
    rows = budget_rows(ledger)
    unit_sym = {"epsilon": "ε", "rho": "ρ"}
    body = [[_names_cell(r), _e(r["depth"]), _e(r["nodes"]), _e(unit_sym.get(r["unit"], r["unit"])),
             _e(_num(r["budget"])), _e(_frac(r["rational"])),
             _e("" if r["share"] is None else f"{_frac(r['share'])} ({100 * float(r['share']):.4g} %)"),
             _e(_num(r["delta"]) if r["delta"] else ""), _e(r["mechanism"]).replace("_", "_<wbr>"),
             _e("" if r["l1"] is None else f"{_sensitivity(r['l1'])} / {_sensitivity(r['l2'])}"),
             _e("" if r["variance"] is None else _g(float(r["variance"]), 6)),
             _e(r["implied"])] for r in rows]
    total_unit = {"pure": "ε", "zcdp": "ρ"}.get(ledger.guarantee, "ρ")
    add(_table(["Level", "Depth", "Nodes", "Unit", "Budget (as recorded)", "Exact rational", "Share of total", "δ",
                "Mechanism", "Sensitivity L1 / L2", "Noise variance per cell", "Loss implied alone"],
               body, ident="budget", numeric=(2, 4, 5, 6, 7, 9, 10),
               foot=["Total", "", "", _e(total_unit), _e(_num(ledger.spent)),
                     _e(_frac(sum((r["rational"] * (len(r["names"]) if r["kind"] == "run" else 1) for r in rows),
                                  Fraction(0)))), "1", "", "", "", "", ""]))
    add('<p class="muted">Budget (as recorded): the number in the ledger, digit for digit. Exact rational: the '
        "simplest fraction (denominator up to 10⁶) whose nearest double is that number, else the double's exact "
        "binary fraction. Levels compose by basic composition (the budgets add up); the nodes of one level are "
        "disjoint (parallel composition). A run of identical levels is one row.</p>")
    q = query_rows(result) if result is not None else []
    if q:
        add("<h3>Budget per query (plan marginals)</h3>")
        add(_table(["Level", "Query (marginal)", "Share of the level", "Budget", "Exact rational",
                    "Noise variance per cell"],
                   [[_e(r["level"]), _e(r["query"]), _e(_num(r["share"])), _e(_num(r["budget"])),
                     _e(_frac(exact_rational(r["budget"]))), _e(_num(r["variance"]))] for r in q],
                   ident="queries", numeric=(2, 3, 4, 5)))
    measured = [r for r in rows if r["budget"] > 0]
    if measured and len({r["unit"] for r in measured}) == 1 and len({r["rational"] for r in measured}) == 1:
        add(f'<p class="chart-note" id="budget-equal">{_e(_equal_split(measured, unit_sym))}</p>')
    elif measured and len(measured) <= CHART_MAX_ROWS:
        add(_bar_chart("Budget per level", [r["name"] for r in measured],
                       [(f"budget ({unit_sym.get(measured[0]['unit'], measured[0]['unit'])})", "#1f5fae",
                         [r["budget"] for r in measured])]))

    # 3. mechanism
    add('<h2 id="mechanism">3. Mechanism, plan and processing</h2>')
    steps = chain_steps(ledger)
    chain = " → ".join(steps) or "none"
    info = getattr(getattr(result, "estimate", None), "info", None) or {}
    if isinstance(info.get("method"), str) and info["method"] and info["method"] not in ledger.postprocess:
        chain += f" (the plan's own estimate: {info['method']})"
    seeded = ledger.seed is not None or not ledger.secure_randomness
    mfacts = [("Mechanism", _e(ledger.mechanism or "—")), ("Plan", _e(ledger.plan or "—")),
              ("Budget strategy", _e(ledger.budget_strategy or "—")),
              ("Post-processing (no privacy cost)", _e(chain) + (
                  '<br><span class="muted">Each step with the parameters it ran with: those given at release '
                  "(recorded in the ledger), the rest its defaults.</span>"
                  if steps != [str(n) for n in ledger.postprocess] else "")),
              ("Randomness", _e(ledger.randomness or ("secure" if ledger.secure_randomness else "not secure"))),
              ("Seed", f'<strong class="invariant">seeded (seed = {_e(ledger.seed)}): NOT FOR PUBLICATION</strong>'
               if seeded else "none: a cryptographically secure source")]
    if ledger.non_private:
        mfacts.append(("NOT PRIVATE", "<br>".join(f'<strong class="invariant">{_e(r)}</strong>'
                                                  for r in ledger.non_private)))
    add(_facts(mfacts))
    if ledger.notes:
        add("<h3>Notes recorded with the release</h3><ul>" + "".join(f"<li>{_e(n)}</li>" for n in ledger.notes)
            + "</ul>")

    # 4. accuracy
    add('<h2 id="accuracy">4. Expected accuracy (from the public noise law)</h2>')
    acc = accuracy_rows(ledger, rows)
    if acc:
        add('<p class="muted">Computed from each level\'s mechanism, budget and sensitivity only — never from the '
            "data. One measurement's error: its standard deviation (= its RMSE, the noise being unbiased), the "
            "half-width h of the interval [x − h, x + h] holding the truth with probability at least 90 % and "
            "95 %, and the mean absolute error.</p>")
        add(_table(["Level", "Std = RMSE", "90 % half-width", "95 % half-width", "MAE", "Law"],
                   [[_e(r["name"]), _e(_g(r["std"])), _e(_g(r["hw"].get(0.9))), _e(_g(r["hw"].get(0.95))),
                     _e(_g(r["mae"])), _e(r["law"])] for r in acc], ident="accuracy", numeric=(1, 2, 3, 4)))
        shown = [r for r in acc if r["std"] is not None]
        if len(shown) <= CHART_MAX_ROWS:
            add(_bar_chart("Expected error of one measurement per level", [r["name"] for r in shown],
                           [("std", "#1f5fae", [r["std"] for r in shown]),
                            ("90 % half-width", "#e69f00", [r["hw"].get(0.9) for r in shown]),
                            ("95 % half-width", "#b2182b", [r["hw"].get(0.95) for r in shown])],
                           same=(f"Every level's measurement has the same expected error (std {_g(shown[0]['std'])}, "
                                 f"90 % half-width {_g(shown[0]['hw'].get(0.9))}, 95 % half-width "
                                 f"{_g(shown[0]['hw'].get(0.95))}), so no chart is drawn."
                                 if shown else "")))
    else:
        add('<p class="muted">No level was measured with noise.</p>')
    if result is not None:
        rel, why = released_rows(result)
        add("<h3>Released values</h3>")
        by_level, by_band, why_acc = released_accuracy(result)
        if by_level is not None:
            add(_released_accuracy_html(by_level, by_band, ledger))
        elif why_acc and not rel:
            why = f"{why}; the simulated accuracy: {why_acc}"
        if rel:
            add('<p class="muted">Expected RMSE of the released (post-processed) values per level: the square root '
                "of their mean variance, which the public noise law and the public chain fix (the chain is "
                "linear and unbiased).</p>")
            add(_table(["Level", "Nodes", "Expected RMSE", "Nodes left undetermined"],
                       [[_e(name), _e(nodes), _e(rmse), _e(und)] for name, nodes, rmse, und in _level_runs(rel)],
                       ident="released", numeric=(1, 2, 3)))
            if len(rel) <= CHART_MAX_ROWS:
                add(_bar_chart("Expected RMSE of the released values per level", [r["level"] for r in rel],
                               [("RMSE", "#21918c", [r["rmse"] for r in rel])],
                               same=f"The released values of every level have the same expected RMSE, "
                                    f"{_g(rel[0]['rmse'])}, so no chart is drawn."))
        elif by_level is None:
            add(f'<p class="muted">Not shown: {_e(why)}.</p>')
        m = decomposition_svg(result)
        if m:
            add('<h2 id="decomposition">Decomposition map</h2>' + m)

    # 5. provenance
    add('<h2 id="provenance">5. Provenance</h2>')
    pfacts = [("Release id", f"<code>{_e(ledger.release_id or '—')}</code>"),
              ("Released", _e(ledger.created or "—")),
              ("Released with", _e(f"hierdp {ledger.hierdp_version or 'version unknown'}")),
              ("Report written", _e(f"{_now()} by hierdp {__version__}")),
              ("Curator", _e(meta["curator"]))]
    if result is not None:
        hashed, private = spec_files(result)
        for role, name, digest in hashed:
            pfacts.append((f"{role.capitalize()}: {name}", f"sha256 <code>{_e(digest)}</code> (at report time)"))
        for name in private:
            pfacts.append((f"Private source: {name}", "not hashed: a hash is an exact function of the private data "
                                                      "and would let anyone test a guess of it"))
    add(_facts(pfacts))
    add("<h2 id=\"evaluation\">6. Evaluation</h2><p class=\"muted\">None: this report holds no value computed from the "
        "true counts.</p>")
    add(f'<footer>Generated by hierdp {_e(__version__)}. Self-contained: no script, font or network request. '
        "Print to PDF from the browser for a signed copy.</footer></main></body></html>\n")
    return "".join(parts)


# -- the OpenDP deployments-registry record --------------------------------------------------
def _bullets(lines: Sequence[str]) -> str:
    return "\n".join(f"- {x}" for x in lines)


def registry_record(ledger: Ledger, result: Any = None, *, title: str | None = None, curator: str | None = None,
                    intended_use: str | None = None, region: str | None = None,
                    authors: Sequence[str] | None = None) -> dict[str, Any]:
    """The release as a draft record of the OpenDP deployments registry (field names from
    :data:`REGISTRY_SCHEMA`): ``status: Draft``, ``tier: 3``; what the ledger cannot know
    (curator, intended use, region) is marked to be completed unless given."""
    meta = _registry_defaults(ledger, title, curator, intended_use, region, authors)
    rows = budget_rows(ledger)
    levels = " > ".join(r["name"] for r in rows if r["kind"] != "structure")
    params: dict[str, Any] = {}
    if ledger.epsilon is not None:
        params["epsilon"] = float(ledger.epsilon)
    if ledger.delta is not None:
        params["delta"] = float(ledger.delta)
    if ledger.rho is not None:
        params["rho"] = float(ledger.rho)
    budget_lines = [f"{r['name']}: {r['unit']} = {_num(r['budget'])} (exact {_frac(r['rational'])}"
                    + (f", {_frac(r['share'])} of the total" if r["share"] is not None else "")
                    + f"); loss implied alone: {r['implied']}" for r in rows]
    budget_lines += [f"query {q['level']} / {q['query']}: budget {_num(q['budget'])} "
                     f"(exact {_frac(exact_rational(q['budget']))})" for q in query_rows(result)]
    structure = [f"{lv}: {_provenance_kind(t)}; {t}" for lv, t in ledger.structure.items()]
    notes = []
    if ledger.not_for_publication_reasons():
        notes.append("NOT FOR PUBLICATION: " + "; ".join(ledger.not_for_publication_reasons()))
    notes += [f"hierdp release id {ledger.release_id}, released {ledger.created} with hierdp "
              f"{ledger.hierdp_version}", *ledger.notes]
    mechanisms = [f"mechanism: {ledger.mechanism}; plan: {ledger.plan}; budget strategy: {ledger.budget_strategy}",
                  f"implementation: hierdp {ledger.hierdp_version} (exact integer samplers; the noise of real "
                  "values on a fine integer grid)",
                  f"randomness: {ledger.randomness or 'unknown'}"
                  + ("; SEEDED: reproducible, not private" if ledger.seed is not None or not ledger.secure_randomness
                     else "; cryptographically secure source")]
    if result is not None:
        hashed, private = spec_files(result)
        mechanisms += [f"{role} {name}: sha256 {digest}" for role, name, digest in hashed]
        mechanisms += [f"private source {name}: not hashed (a hash of private data is not private)"
                       for name in private]
    pre = [f"contributions: {_unit_bound(ledger)}"]
    pre += [f"NOT PRIVATE: {r}" for r in ledger.non_private]
    record = {
        "url_slug": f"hierdp-release-{ledger.release_id}" if ledger.release_id else "hierdp-release",
        "status": "Draft",
        "tier": 3,
        "deployment": {
            "basic": {
                "name": meta["title"],
                "data_curators": [meta["curator"]],
                "intended_use": meta["intended_use"],
                "data_product_type": "Summary statistics",
                "data_product_region": meta["region"],
                "description": f"Hierarchical counts ({levels}) released with differential privacy by hierdp: "
                               f"{guarantee_text(ledger)}.",
                "publication_date": (ledger.created or _now())[:10],
            },
            "dp_variant": {
                "variant_name": _variant(ledger),
                "data_domain": _bullets(structure) if structure else "the release's declared tree",
                "unprotected_quantities": _bullets([f"{i}: published exactly, NOT protected"
                                                    for i in ledger.invariants]) if ledger.invariants else "None",
            },
            "privacy_loss": {
                "privacy_unit": ledger.privacy_unit,
                "privacy_unit_details": f"Neighbouring data sets: {_neighbours(ledger)}. Bound: "
                                        f"{_unit_bound(ledger)}.",
                "privacy_parameters": params,
                "privacy_parameters_details": _bullets(budget_lines),
            },
            "deployment_model": {
                "model_name": "Central" if (ledger.trust_model or "central") == "central" else "Varies",
                "release_type": "One release",
                "release_type_details": "This record describes one hierdp release (one ledger); releases drawing on "
                                        "the same data compose, and their budgets add up.",
                "data_source_type": "Static",
                "access_type": "Non-interactive",
            },
            "accounting": {
                "post_processing": " -> ".join(chain_steps(ledger)) or "none",
                "composition": ledger.accounting or "basic composition",
            },
            "implementation": {
                "preprocessing_and_hyperparameter_tuning": _bullets(pre),
                "mechanisms": _bullets(mechanisms),
            },
            "administrative": {
                "notes": _bullets(notes),
                "registry_authors": meta["authors"],
            },
        },
    }
    return record


class _BlockDumper:
    """A yaml SafeDumper writing multi-line strings as literal blocks (``|``), as the
    registry's own checks ask."""

    @staticmethod
    def make() -> Any:
        import yaml

        class Dumper(yaml.SafeDumper):
            pass

        def text(dumper: Any, data: str) -> Any:
            style = "|" if "\n" in data else None
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

        Dumper.add_representer(str, text)
        return Dumper


def registry_yaml(ledger: Ledger, result: Any = None, **fields: Any) -> str:
    """:func:`registry_record` as YAML, with a header comment naming the schema."""
    import yaml

    record = registry_record(ledger, result, **fields)
    head = (f"# Draft record for the OpenDP deployments registry; field names from {REGISTRY_SCHEMA}.\n"
            f"# Written by hierdp {__version__} from release {ledger.release_id or '(no id)'}; "
            f"fields marked '{_TODO}' need the curator.\n")
    if ledger.not_for_publication_reasons():
        head += "# NOT FOR PUBLICATION: " + "; ".join(ledger.not_for_publication_reasons()) + "\n"
    return head + yaml.dump(record, Dumper=_BlockDumper.make(), sort_keys=False, allow_unicode=True, width=100)


def render(path: str | Path, ledger: Ledger, result: Any = None, **fields: Any) -> str:
    """The text of the report ``path`` names (``.html`` or ``.yaml``)."""
    kind = report_kind(path)
    if kind == "html":
        fields.pop("authors", None)
        return report_html(ledger, result, **fields)
    return registry_yaml(ledger, result, **fields)


def write_report(path: str | Path, ledger: Ledger, result: Any = None, *, title: str | None = None,
                 curator: str | None = None, intended_use: str | None = None, region: str | None = None,
                 authors: Sequence[str] | None = None) -> Path:
    """Write the report of ``ledger`` (and its ``result``, when given) to ``path``,
    atomically (a temporary file beside it, then renamed: never a half-written report).

    Parameters
    ----------
    path : ``.html`` (the report page) or ``.yaml`` (the OpenDP deployments-registry record).
    ledger : the release's :class:`~hierdp.accounting.ledger.Ledger`.
    result : the :class:`~hierdp.result.ReleaseResult`, for what only the release holds
        (per-query budgets, the released values' accuracy, the decomposition map, the spec's
        file hashes).
    title, curator, intended_use, region, authors : the record's descriptive fields (the
        ledger cannot know them); left out, the YAML marks them to be completed.

    Returns
    -------
    Path
        ``path``.
    """
    if not isinstance(ledger, Ledger):
        raise DataError(f"a report needs a hierdp Ledger, got {type(ledger).__name__}")
    text = render(path, ledger, result, title=title, curator=curator, intended_use=intended_use, region=region,
                  authors=authors)
    dest = Path(path)
    if dest.is_dir():
        raise DataError(f"cannot write the report {str(dest)!r}: it is a directory; give a file name such as "
                        "release.html")
    return write_text(dest, text)


def read_ledger(path: str | Path) -> Ledger:
    """A ledger saved as JSON (``*.ledger.json``) or YAML; one-line :class:`DataError` when
    the file is not a hierdp ledger."""
    import json

    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = yaml.safe_load(text) if p.suffix.lower() in (".yaml", ".yml") else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:   # bad JSON, bad YAML, not UTF-8
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{str(p)!r} is not a hierdp ledger ({first}); give the .ledger.json written beside a "
                        "release") from None
    if not isinstance(data, dict) or "guarantee" not in data or "levels" not in data:
        raise DataError(f"{str(p)!r} is not a hierdp ledger (no guarantee and levels); give the .ledger.json "
                        "written beside a release")
    try:
        ledger = Ledger.from_dict(data)
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise DataError(f"{str(p)!r} is not a readable hierdp ledger ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); give the .ledger.json written beside a "
                        "release") from None
    problem = _ledger_problem(ledger)
    if problem:
        raise DataError(f"{str(p)!r} is not a readable hierdp ledger ({problem}); give the .ledger.json written "
                        "beside a release")
    return ledger


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _ledger_problem(ledger: Ledger) -> str:
    """What makes a ledger read from a file unfit to report (wrong types), or ``""``."""
    if ledger.guarantee not in ("pure", "zcdp", "approx"):
        return f"guarantee {str(ledger.guarantee)!r:.40} is not pure, zcdp or approx"
    for key in ("epsilon", "delta", "rho"):
        v = getattr(ledger, key)
        if v is not None and not _is_number(v):
            return f"{key} is not a number"
    for key in ("structure", "decomposition", "private_notes"):
        if not isinstance(getattr(ledger, key), dict):
            return f"{key} is not a mapping"
    for key in ("postprocess", "notes", "non_private", "invariants"):
        if not isinstance(getattr(ledger, key), list):
            return f"{key} is not a list"
    for ls in ledger.levels:
        for key in ("budget", "noise_variance", "sensitivity_l1", "sensitivity_l2", "delta"):
            if not _is_number(getattr(ls, key)):
                return f"level {str(ls.level)!r:.40}: {key} is not a number"
        if not isinstance(ls.n_nodes, int) or isinstance(ls.n_nodes, bool) or not isinstance(ls.depth, int):
            return f"level {str(ls.level)!r:.40}: n_nodes and depth must be integers"
    for s in ledger.decomposition.get("spends", []) or []:
        if not isinstance(s, dict) or not _is_number(s.get("amount")) or "label" not in s or "unit" not in s:
            return "decomposition spends need a label, a unit and a numeric amount"
    if not _is_number(ledger.decomposition.get("spent", 0.0)):
        return "decomposition spent is not a number"
    return ""
