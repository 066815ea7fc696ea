"""The report's plain-language part: what a release protects, in words a reader of a census
table understands (:mod:`hierdp.report` renders it near the top of the page).

Four paragraphs, each derived from the ledger alone (the cell dimensions from the release's
public cell labels, when the release is at hand); no count of the data is read:

* what the privacy-loss parameter means for one person, read the standard way: for
  neighbouring data sets D, D' and any set S of outputs, ``P[M(D) ∈ S] <= e^ε P[M(D') ∈ S] + δ``
  (Dwork & Roth 2014, Def. 2.4), so an output changes the odds of D against D' by a factor of
  at most ``e^ε`` (posterior odds <= ``e^ε`` x prior odds; Kasiviswanathan & Smith 2014), and
  a test of D against D' wrong with probability α on D' is right on D with probability at
  most ``e^ε α + δ`` (Wasserman & Zhou 2010, Thm 2.4; Kairouz, Oh & Viswanath 2015). Under
  ρ-zCDP the ε the ledger states at its δ is read the same way;
* what a neighbour is in this release: add/remove or substitute one privacy unit, the unit,
  the bound on its rows;
* what was published: the levels and their rows, the cells of a row, the levels not
  measured, a structure chosen from the data, whether the figures can be negative or
  fractional (from the post-processing chain);
* what was published exactly: the invariants, not protected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from hierdp._report_facts import budget_rows
from hierdp.accounting.ledger import RUN_MIN, Ledger

__all__ = ["Paragraph", "plain_language", "odds_factor", "posterior"]

#: the prior beliefs the loss paragraph turns into the most an observer can believe afterwards
PRIORS = (0.5, 0.1)
#: the false-positive rate of the test the loss paragraph describes (1 in 100)
TEST_ALPHA = 0.01
#: at most this many level entries are named one by one
MAX_NAMED = 8
#: the built-in mechanisms' noise laws in words
_LAWS = {"discrete_laplace": "discrete Laplace", "discrete_gaussian": "discrete Gaussian", "laplace": "Laplace",
         "gaussian": "Gaussian"}


class Paragraph(NamedTuple):
    """One paragraph of the plain-language part: its HTML ``id``, heading and text (plain
    text; the renderer escapes it)."""

    ident: str
    heading: str
    text: str


def odds_factor(epsilon: float) -> float:
    """``e^ε``: the most a release with privacy-loss parameter ``epsilon`` can multiply the
    odds of anything about one person by (``inf`` when it overflows).

    Parameters
    ----------
    epsilon : float
        The ε of the guarantee (>= 0).

    Returns
    -------
    float
        ``exp(epsilon)``; ``e ≈ 2.718`` at ε = 1.
    """
    try:
        return math.exp(epsilon)
    except OverflowError:
        return math.inf


def posterior(prior: float, epsilon: float) -> float:
    """The most an observer can believe something about one person after the release, having
    believed it with probability ``prior`` before: the prior odds times ``e^ε``, as a
    probability (Bayes' rule with a likelihood ratio of at most ``e^ε``).

    Parameters
    ----------
    prior : float
        The belief before, in (0, 1).
    epsilon : float
        The ε of the guarantee.

    Returns
    -------
    float
        ``e^ε p / (1 - p + e^ε p)``; 0.731 for ``p = 0.5``, ε = 1.
    """
    f = odds_factor(epsilon)
    if math.isinf(f):
        return 1.0
    return f * prior / (1.0 - prior + f * prior)


def _num(x: Any) -> str:
    """A parameter as a reader writes it: ``1`` for 1.0, six significant digits."""
    return "not recorded" if x is None else f"{float(x):.6g}"


def _factor(f: float) -> str:
    """``e^ε`` as a reader writes it: 3 significant digits below 100, whole above."""
    if not math.isfinite(f):
        return "unbounded"
    if f < 100:
        return f"{f:.3g}"
    return f"{f:,.0f}" if f < 1e9 else f"{f:.3g}"


def _pct(p: float, prior: float) -> str:
    pct, before = 100.0 * p, 100.0 * prior
    if pct >= 100.0:
        return "100 %"
    if pct >= 99.0:  # as many decimals as it takes not to read 100 %
        d = max(1, math.ceil(-math.log10(100.0 - pct)))
        return f"{pct:.{d}f} %" if d <= 8 else "nearly 100 %"
    if pct - before < 1.0:
        return f"{pct:.1f} %"
    return f"{pct:.0f} %"


def _who(ledger: Ledger) -> tuple[str, str]:
    """The protected unit as a noun, singular and plural: "person"/"people" when the privacy
    unit is an individual, else "unit"/"units"."""
    text = (ledger.privacy_unit or "").lower()
    if any(w in text for w in ("individual", "person", "people", "resident")):
        return "person", "people"
    return "unit", "units"


def _names(names: Sequence[str]) -> str:
    names = [str(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _loss(ledger: Ledger, one: str) -> Paragraph:
    """What the guarantee means for one person."""
    delta = ledger.delta if ledger.guarantee in ("zcdp", "approx") else None
    eps = ledger.epsilon
    if ledger.guarantee == "zcdp":
        head = f"What ρ = {_num(ledger.rho)} means for one {one}"
        lead = f"This release is protected by zero-concentrated differential privacy with ρ = {_num(ledger.rho)}"
        if eps is None or delta is None:
            return Paragraph("plain-loss", head, lead + ". ρ bounds how much the published tables can change what "
                             f"anyone believes about one {one}: the smaller ρ, the smaller the change. The ledger "
                             "states no δ at which to read ρ as an ε, so no single odds factor is given here. "
                             "Each further release from the same data adds its own ρ, and the protection weakens "
                             "as they add up.")
        lead += f", which the ledger states as ε = {_num(eps)} at δ = {_num(delta)}. "
        sym = "ρ"
    else:
        head = f"What ε = {_num(eps)} means for one {one}"
        lead = (f"This release's privacy-loss parameters are ε = {_num(eps)} and δ = {_num(delta)}. "
                if delta is not None else f"This release's privacy-loss parameter is ε = {_num(eps)}. ")
        sym = "ε"
    if eps is None or not math.isfinite(float(eps)):
        return Paragraph("plain-loss", head, lead + f"With this ε the tables give no bound on how much they change "
                         f"what anyone believes about one {one}.")
    eps = float(eps)
    f = odds_factor(eps)
    versions = ("one with the {o}'s records and one without them" if ledger.neighbours == "add_remove" else
                "one with the {o}'s records and one where they are replaced by another {o}'s"
                if ledger.neighbours == "substitute" else "neighbouring in the sense of section 1").format(o=one)
    slack = (f", give or take an extra probability of at most δ = {_num(delta)}" if delta else "")
    text = [lead + f"Take any one {one} in the data and two versions of the data that differ only in that {one}: "
            f"{versions}. Whatever the published tables show is at most e^ε = {_factor(f)} times as likely with one "
            f"version as with the other{slack}."]
    aside = "Leaving δ aside, the" if delta else "So the"
    p50, p10 = (posterior(p, eps) for p in PRIORS)
    text.append(f"{aside} tables change the odds of anything about that {one} by a factor of at most {_factor(f)}: "
                f"something thought to have even odds (50 %) beforehand can be believed at most {_pct(p50, 0.5)} "
                f"after reading them; something thought 10 % likely, at most {_pct(p10, 0.1)}.")
    power = f * TEST_ALPHA + (delta or 0.0)
    question = {"add_remove": f"whether this {one} is in the data",
                "substitute": f"which of two possible sets of records is this {one}'s"}.get(ledger.neighbours)
    if power < 1.0 and question:
        text.append(f"Put another way, any test that uses the tables to decide {question}, and wrongly says “yes” 1 "
                    f"time in 100 when the answer is no, says “yes” at most {100 * power:.3g} times in 100 when the "
                    "answer is yes.")
    text.append(f"The smaller {sym}, the stronger the protection. Each further release from the same data adds its "
                f"own {sym}, and the protection weakens as they add up.")
    return Paragraph("plain-loss", head, " ".join(text))


def _neighbours(ledger: Ledger, one: str, many: str) -> Paragraph:
    """What a neighbour is in this release: the relation, the unit, its bound."""
    text = [f"The protected unit, as the ledger records it: {ledger.privacy_unit or 'not recorded'}."]
    if ledger.neighbours == "add_remove":
        text.append(f"The two versions compared differ by one {one} added or removed, so the tables hide even "
                    f"whether a given {one} is in the data at all.")
    elif ledger.neighbours == "substitute":
        text.append(f"The two versions compared have the same number of {many} and differ in one {one}'s records, "
                    f"replaced by another's: the tables hide what a {one}'s records say (which place, which cells), "
                    f"while the number of {many} in the data is treated as known.")
    else:
        text.append(f"The two versions compared: {ledger.neighbours}.")
    if ledger.max_contributions is None:
        text.append(f"Each {one} is one row of the data, counted once at every level.")
    else:
        text.append(f"Each {one} contributes at most {ledger.max_contributions} rows (capped before the noise was "
                    "added), and the protection covers all of them together.")
    text.append(f"What the tables say about groups (how many {many} a place has, say) is not hidden: that is what "
                f"they are for. What is protected is each {one}'s own contribution.")
    return Paragraph("plain-neighbours", "Who is protected, and from what", " ".join(text))


def _cells(result: Any) -> tuple[int, str]:
    """How many cells a row has and their dimensions, from the release's public cell labels
    (``(1, "")`` without a release or cells)."""
    est = getattr(result, "estimate", None)
    shape = getattr(getattr(est, "values", None), "shape", ())
    k = int(math.prod(shape[1:])) if len(shape) > 1 else 1
    if k <= 1:
        return 1, ""
    cells = (getattr(result, "meta", None) or {}).get("cells") or {}
    dims = []
    for name, labels in cells.items():
        labels = [str(x) for x in labels]
        shown = ", ".join(labels[:5]) + (", …" if len(labels) > 5 else "")
        dims.append(f"{name} ({len(labels)}: {shown})")
    if dims and math.prod(len(v) for v in cells.values()) == k:
        return k, f"{k} cells, " + " × ".join(dims)
    return k, f"{k} cells"


def _rows(n: int) -> str:
    return f"{n:,} row{'' if n == 1 else 's'}"


def _entries(levels: Sequence[tuple[list[str], int]]) -> list[str]:
    """``name (n rows)`` per level; :data:`RUN_MIN` or more consecutive levels of the same
    size as one entry ``the 30 levels a … z (1 row each)``."""
    flat = [(name, n) for names, n in levels for name in names]
    out: list[tuple[str, int]] = []   # (text, levels it names)
    i = 0
    while i < len(flat):
        j = i + 1
        while j < len(flat) and flat[j][1] == flat[i][1]:
            j += 1
        if j - i >= RUN_MIN:
            out.append((f"the {j - i} levels {flat[i][0]} … {flat[j - 1][0]} ({_rows(flat[i][1])} each)", j - i))
        else:
            out += [(f"{name} ({_rows(n)})", 1) for name, n in flat[i:j]]
        i = j
    if len(out) <= MAX_NAMED:
        return [t for t, _ in out]
    rest = sum(k for _, k in out[MAX_NAMED - 2:])
    return [t for t, _ in out[:MAX_NAMED - 2]] + [f"{rest:,} more levels"]


def _published(ledger: Ledger, result: Any, one: str) -> Paragraph:
    """Which tables and cells were published, and in which form."""
    rows = [r for r in budget_rows(ledger) if r["kind"] != "structure"]
    spent = [([str(n) for n in r["names"]], int(r["nodes"]) if isinstance(r["nodes"], int) else 0) for r in rows]
    tree = getattr(result, "tree", None)
    if tree is not None:  # what the release's frame holds: every node of the public structure
        names = [str(n) for n in tree.level_names]
        counts = np.bincount(np.asarray(tree.depth, dtype=np.int64), minlength=len(names))
        levels = [([name], int(c)) for name, c in zip(names, counts)]
    else:
        levels = spent
    text = []
    if levels:
        n_levels = sum(len(names) for names, _ in levels)
        total = sum(n * len(names) for names, n in levels)
        text.append(f"{n_levels} level{' was' if n_levels == 1 else 's were'} published, "
                    f"{'one table' if n_levels == 1 else 'one table each'} with one row per unit of the level: "
                    f"{_names(_entries(levels))}; {total:,} rows in all.")
        k, cells = _cells(result)
        if cells:
            text.append(f"Each row is split into {cells}: {total * k:,} published figures.")
        known = {name for names, _ in levels for name in names}
        measured = [(names, n) for (names, n), r in zip(spent, rows) if r["budget"] > 0]
        if measured and not all(name in known for names, _ in measured for name in names):
            text.append(f"Measured with noise: {_names(_entries(measured))}; the other rows are derived from them "
                        "at no privacy cost.")
        unmeasured = [n for r in rows if r["budget"] <= 0 and r["variance"] != 0 for n in r["names"]]
        if unmeasured:
            which = _names(unmeasured) if len(unmeasured) <= MAX_NAMED else f"{len(unmeasured)} levels"
            its = "its" if len(unmeasured) == 1 else "their"
            text.append(f"Not measured (no budget spent on {'it' if len(unmeasured) == 1 else 'them'}): {which}; "
                        f"{its} figures, where published, come from the measured levels at no privacy cost.")
    if ledger.decomposition.get("private_structure"):
        what = ledger.decomposition.get("name") or "the decomposition"
        text.append(f"The units themselves were chosen from the data ({what}); that choice is paid for from the "
                    "same budget and is protected like the counts.")
    if ledger.mechanism and any(r["budget"] > 0 for r in rows):
        law = _LAWS.get(ledger.mechanism, ledger.mechanism.replace("_", " "))
        text.append(f"Random noise ({law}) was added to the counts of every "
                    "measured level before anything was published; the noise itself is never published.")
    names = [str(n) for n in ledger.postprocess]
    whole, nonneg = "round" in names, "nonneg" in names
    if whole and nonneg:
        text.append("The published figures are whole numbers, none below zero.")
    elif whole:
        text.append("The published figures are whole numbers; some can be below zero.")
    elif nonneg:
        text.append("The published figures are never below zero but need not be whole numbers.")
    else:
        text.append("The published figures can be below zero or fractional (for example −1.7 for a small place): "
                    "the noise is not clipped or rounded away.")
    text.append("Section 4 says how far they can be expected to be from the true counts.")
    return Paragraph("plain-published", "What was published", " ".join(text))


def _exact(ledger: Ledger) -> Paragraph:
    """The figures published exactly: the invariants, not protected."""
    if not ledger.invariants:
        return Paragraph("plain-exact", "What was published exactly", "Nothing: every published figure carries "
                         "noise.")
    return Paragraph("plain-exact", "What was published exactly",
                     f"These figures are published exactly, without noise, and are NOT protected: "
                     f"{'; '.join(str(i) for i in ledger.invariants)}. They equal the true counts; the protection "
                     "described above holds only between versions of the data that leave them unchanged.")


def plain_language(ledger: Ledger, result: Any = None) -> list[Paragraph]:
    """The plain-language part of the report: what the guarantee means for one person, who is
    protected and from what, what was published, and what was published exactly.

    Every sentence is derived from ``ledger``; ``result`` adds only the public cell labels of
    an (n, k) release. Nothing reads a count of the data.

    Parameters
    ----------
    ledger : Ledger
        The release's ledger.
    result : ReleaseResult, optional
        The release, for the names of the cells of a row.

    Returns
    -------
    list of Paragraph
        A caution first when the release is not for publication (``plain-caution``), then
        ``plain-loss``, ``plain-neighbours``, ``plain-published`` and ``plain-exact``.
    """
    one, many = _who(ledger)
    out = []
    reasons = ledger.not_for_publication_reasons()
    if reasons:
        out.append(Paragraph("plain-caution", "Not for publication",
                             f"This release is NOT FOR PUBLICATION ({'; '.join(reasons)}): the protection described "
                             "below does not hold for it as made."))
    out += [_loss(ledger, one), _neighbours(ledger, one, many), _published(ledger, result, one), _exact(ledger)]
    return out
