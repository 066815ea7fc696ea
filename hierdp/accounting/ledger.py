"""The privacy ledger: what a release spent, where, on whom, and on which structure.

The ledger is public: it is written next to every output.  It never holds a true
count; facts about the private data that a user may want to see (e.g. how many rows
were dropped as out of domain) live in ``private_notes`` and are only rendered on
request (``include_private=True``).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, cast

from hierdp._version import __version__
from hierdp.accounting import Accountant, PrivacyLoss, certified_epsilon, check_delta
from hierdp.accounting.accountants import (
    ANALYTIC,
    BASIC,
    DISCRETE,
    GRID_DELTA_MARGIN,
    MIXED,
    PLD,
    ZCDP,
    Measured,
    gaussian_epsilon,
    mixed_epsilon,
    pld_epsilon,
)
from hierdp.errors import PrivacyError

__all__ = ["LevelSpend", "Ledger", "compose", "compose_parts", "discrete_laplace_levels", "pld_parts"]


@dataclass
class LevelSpend:
    """Spend on one level of the tree (one measurement of all its nodes; parallel composition within the level)."""

    level: str
    depth: int
    budget: float  # in the mechanism's unit (epsilon or rho)
    unit: str  # "epsilon" | "rho"
    mechanism: str
    n_nodes: int
    noise_variance: float  # per cell; inf when the level is not measured
    sensitivity_l1: float = 1.0
    sensitivity_l2: float = 1.0
    delta: float = 0.0  # δ of an (ε, δ) measurement (e.g. truncated Laplace); 0 for pure ε / ρ
    #: the budget as the exact rational it was given as (e.g. "1440/4099"); "" when given as a number
    budget_exact: str = ""

    @property
    def measured(self) -> bool:
        return self.budget > 0


#: consecutive levels that differ only in name and depth are written as one run from this length on
RUN_MIN = 8


def _compact_levels(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Levels as written to JSON/YAML: a run of >= RUN_MIN consecutive levels with the same
    spend (budget, unit, mechanism, node count, variance, sensitivity) and consecutive
    depths becomes one entry ``{"run": {"names": [...], "first_depth": d, <shared fields>}}``
    (a 10,000-level chain: ~100 kB instead of 2.7 MB); shorter runs stay one entry per level."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(levels):
        shared = {k: v for k, v in levels[i].items() if k not in ("level", "depth")}
        j = i + 1
        while j < len(levels) and levels[j]["depth"] == levels[j - 1]["depth"] + 1 and \
                {k: v for k, v in levels[j].items() if k not in ("level", "depth")} == shared:
            j += 1
        if j - i >= RUN_MIN:
            out.append({"run": {"names": [lv["level"] for lv in levels[i:j]], "first_depth": levels[i]["depth"],
                                **shared}})
        else:
            out.extend(levels[i:j])
        i = j
    return out


def _expand_levels(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inverse of :func:`_compact_levels`."""
    out: list[dict[str, Any]] = []
    for entry in levels:
        if "run" in entry:
            run = dict(entry["run"])
            names, d0 = run.pop("names"), run.pop("first_depth")
            out.extend({"level": n, "depth": d0 + k, **run} for k, n in enumerate(names))
        else:
            out.append(entry)
    return out


@dataclass
class Ledger:
    """Privacy accounting of one release (basic composition over levels)."""

    guarantee: str  # "pure" | "zcdp" | "approx"
    epsilon: float | None
    delta: float | None = None
    rho: float | None = None
    privacy_unit: str = "one row = one individual"
    max_contributions: int | None = None
    mechanism: str = ""
    budget_strategy: str = ""
    plan: str = "per_level"
    levels: list[LevelSpend] = field(default_factory=list)
    structure: dict[str, str] = field(default_factory=dict)  # level -> where its domain came from
    postprocess: list[str] = field(default_factory=list)
    #: each post-processing step's parameters as given (``{}``: its defaults), beside ``postprocess``
    postprocess_params: list[dict[str, Any]] = field(default_factory=list)
    seed: int | None = None
    secure_randomness: bool = True
    randomness: str = ""  # the source, e.g. "SecureRandom(method='chacha20')"
    notes: list[str] = field(default_factory=list)
    non_private: list[str] = field(default_factory=list)  # reasons this release is not DP (e.g. oracle budget)
    private_notes: dict[str, Any] = field(default_factory=dict, repr=False)  # true counts: never rendered
    #: a data-dependent structure (e.g. PrivTree): name, private_structure, its spends and their composed cost
    decomposition: dict[str, Any] = field(default_factory=dict)
    # provenance: which release this is, by what, when, under which trust model and accounting
    release_id: str = field(default_factory=lambda: str(uuid.uuid4()))  # also in the table file's metadata
    created: str = field(default_factory=lambda: _utc_now())  # UTC, ISO 8601
    hierdp_version: str = field(default_factory=lambda: _hierdp_version())
    trust_model: str = "central"  # a trusted curator holds the true counts and adds the noise
    accounting: str = ""  # how the levels' spends compose; filled from ``guarantee`` when empty
    # the neighbour relation the guarantee is stated for: "add_remove" (one unit added or
    # removed; every ledger written before this field existed) or "substitute" (bounded DP)
    neighbours: str = "add_remove"
    # nodes published exactly (not protected, no budget): level names or node descriptions
    invariants: list[str] = field(default_factory=list)
    # the accountant that certifies the guarantee (``certified_by``) (issue 34): "basic composition", "zCDP",
    # "analytic Gaussian (Balle & Wang 2018)" or "PLD (dp-accounting)"; derived from
    # ``guarantee`` when empty (ledgers written before this field existed)
    certified_by: str = ""

    def __post_init__(self) -> None:
        if not self.certified_by:
            self.certified_by = default_accountant(self.guarantee, self.rho)
        if not self.accounting:
            self.accounting = accounting_method(self.guarantee, self.rho)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without ``private_notes`` (facts about the true data, e.g. how many rows
        were dropped): a pickle leaves the process (a cache, a worker, a colleague), the
        notes stay with the release that made them. ``copy.deepcopy`` keeps them."""
        state = dict(self.__dict__)
        state["private_notes"] = {}
        return state

    def __copy__(self) -> Ledger:  # in-process copies keep the notes (not through __getstate__)
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Ledger:
        import copy

        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update({k: copy.deepcopy(v, memo) for k, v in self.__dict__.items()})
        return new

    @property
    def for_publication(self) -> bool:
        """False when a seed made the release reproducible (and therefore not private)."""
        return self.seed is None and self.secure_randomness and not self.non_private

    def not_for_publication_reasons(self) -> list[str]:
        """Why this release must not be published (empty when it may be).

        Returns
        -------
        list of str
            One reason per line: seeded randomness, or a step that is not private (e.g. a
            budget chosen on the true counts).
        """
        out = []
        if self.seed is not None or not self.secure_randomness:
            out.append(f"seeded randomness (seed={self.seed})")
        out.extend(f"not private: {r}" for r in self.non_private)
        return out

    @property
    def spent(self) -> float:
        """Total spend in the mechanism's unit (sum over levels and the structure's cost:
        basic composition)."""
        return float(math.fsum([ls.budget for ls in self.levels] + [self.decomposition.get("spent", 0.0)]))

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """The guarantee this ledger states, as the :class:`~hierdp.accounting.PrivacyLoss`
        a release would be given for it: ε (``pure``), (ε, δ) (``approx``; a Gaussian
        release's derived ρ is not part of it) or ρ, with δ when the ledger also states the
        (ε, δ) it converts to (``zcdp``)."""
        if self.guarantee == "zcdp":
            return PrivacyLoss(rho=self.rho, delta=self.delta)
        return PrivacyLoss(epsilon=self.epsilon, delta=self.delta if self.guarantee == "approx" else None)

    def epsilon_at(self, delta: float) -> float:
        """The ε this ledger certifies at ``delta``: its privacy curve, point by point.

        A Gaussian release accounted by the analytic Gaussian gives its exact curve
        (μ = sqrt(2ρ), Balle & Wang 2018); a ρ-zCDP one the CKS 2020 conversion; a pure
        one its ε at any δ; an (ε, δ) one only its own point (smaller δ: an error).

        Parameters
        ----------
        delta : float
            The δ in (0, 1) to state the guarantee at.

        Returns
        -------
        float
            The certified ε at ``delta``.

        Raises
        ------
        PrivacyError
            For an (ε, δ) ledger asked at a δ below its own.
        """
        check = check_delta(delta)
        if self.guarantee == "pure":
            return float(cast(float, self.epsilon))
        if self.certified_by == DISCRETE and self.rho is not None and self.delta is not None:
            # its own exact curve at the δ it was calibrated to; elsewhere the ρ-zCDP bound
            # (CKS 2020 Thm 14: the discrete Gaussian with σᵢ² = Δ²/(2ρᵢ) is Σρᵢ-zCDP)
            cks = certified_epsilon(self.guarantee, rho=self.rho, delta=check, accountant=ZCDP)
            return min(cks, float(cast(float, self.epsilon))) if check >= self.delta else cks
        if self.rho is not None and (self.guarantee == "zcdp" or self.certified_by in (ANALYTIC, ZCDP)):
            return certified_epsilon(self.guarantee, rho=self.rho, delta=check, accountant=self.certified_by)
        if self.delta is not None and check >= self.delta:
            return float(cast(float, self.epsilon))
        raise PrivacyError(f"this release certifies (ε={self.epsilon:g}, δ={self.delta:g}) by {self.certified_by}; "
                           f"it states no ε at the smaller δ={check:g}")

    def by_level(self) -> dict[str, float]:
        """The budget of each level, in the mechanism's unit (ε or ρ).

        Returns
        -------
        dict of str to float
            Level name to its budget (0 for a level not measured).
        """
        return {ls.level: ls.budget for ls in self.levels}

    # -- serialisation -------------------------------------------------------------
    def to_dict(self, include_private: bool = False) -> dict[str, Any]:
        """The ledger as plain JSON-safe data, with the derived ``for_publication``,
        ``spent`` and, for a release not to publish, ``status``.

        Parameters
        ----------
        include_private : bool, default False
            Also write ``private_notes``: facts about the true data (e.g. how many rows were
            dropped as out of domain). They are not protected: keep such a copy private.

        Returns
        -------
        dict
            Public fields only unless ``include_private``; :meth:`from_dict` reads it back.
        """
        d = asdict(self)
        d["for_publication"] = self.for_publication
        if not self.for_publication:
            d["status"] = "NOT FOR PUBLICATION: " + "; ".join(self.not_for_publication_reasons())
        d["spent"] = self.spent
        for lv in d["levels"]:  # written only when given (ledgers without it read back the same)
            if not lv.get("budget_exact"):
                lv.pop("budget_exact", None)
        d["levels"] = _compact_levels(d["levels"])
        if not include_private:
            d.pop("private_notes")
        out: dict[str, Any] = _json_safe(d)
        return out

    def to_json(self, include_private: bool = False, **kwargs: Any) -> str:
        """The ledger as JSON text (:meth:`to_dict`, indented by 2 unless told otherwise).

        Parameters
        ----------
        include_private : bool, default False
            Also write ``private_notes`` (facts about the true data; not for publication).
        **kwargs
            Passed to :func:`json.dumps` (e.g. ``indent=None`` for one line).

        Returns
        -------
        str
            The JSON document; :meth:`from_json` reads it back.

        Examples
        --------
        >>> import hierdp, numpy as np, warnings
        >>> t = hierdp.Tree.complete(fanout=2, height=2)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # a seeded release warns: not for publication
        ...     r = hierdp.release(t, np.array([5, 2, 3]), epsilon=1.0, seed=0)
        >>> text = r.ledger.to_json()
        >>> again = hierdp.Ledger.from_json(text)
        >>> again.guarantee, again.epsilon, again.for_publication
        ('pure', 1.0, False)
        >>> again.to_json() == text
        True
        """
        kwargs.setdefault("indent", 2)
        return json.dumps(self.to_dict(include_private=include_private), **kwargs)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ledger:
        """Read back a ledger written by :meth:`to_dict` (older ledgers too: fields they
        lack take their defaults; derived keys are recomputed, not trusted).

        Parameters
        ----------
        d : dict
            The mapping :meth:`to_dict` gave.

        Returns
        -------
        Ledger
        """
        d = _json_restore(dict(d))
        d.pop("for_publication", None)
        d.pop("status", None)
        d.pop("spent", None)
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        for k in ("release_id", "created", "hierdp_version"):  # a ledger written before these existed
            kwargs.setdefault(k, "")
        kwargs["levels"] = [LevelSpend(**ls) for ls in _expand_levels(kwargs.get("levels", []))]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> Ledger:
        """Read back a ledger written by :meth:`to_json` (see :meth:`from_dict`).

        Parameters
        ----------
        text : str
            The JSON document, e.g. a ``*.ledger.json`` file's text.

        Returns
        -------
        Ledger

        Examples
        --------
        >>> import hierdp
        >>> L = hierdp.Ledger.from_json('{"guarantee": "pure", "epsilon": 0.5}')
        >>> L.privacy_loss.epsilon, L.for_publication
        (0.5, True)
        """
        return cls.from_dict(json.loads(text))

    def to_yaml(self, include_private: bool = False) -> str:
        """YAML rendering (same content as :meth:`to_json`; key order kept).

        Parameters
        ----------
        include_private : bool, default False
            Also write ``private_notes`` (facts about the true data; not for publication).

        Returns
        -------
        str
            The YAML document; :meth:`from_yaml` reads it back.
        """
        import yaml

        return yaml.safe_dump(self.to_dict(include_private=include_private), sort_keys=False,
                              allow_unicode=True)

    @classmethod
    def from_yaml(cls, text: str) -> Ledger:
        """Read back a ledger written by :meth:`to_yaml` (see :meth:`from_dict`).

        Parameters
        ----------
        text : str
            The YAML document.

        Returns
        -------
        Ledger
        """
        import yaml

        return cls.from_dict(yaml.safe_load(text))

    def accountant(self) -> Accountant:
        """An :class:`hierdp.accounting.Accountant` holding one spend per measured level
        (levels compose basically: the total equals :attr:`spent`).

        Returns
        -------
        hierdp.accounting.Accountant
            In the levels' unit (ε or ρ).

        Raises
        ------
        ValueError
            When the levels are budgeted in several units.
        """
        units = {ls.unit for ls in self.levels if ls.measured}
        if len(units) > 1:
            raise ValueError(f"levels are budgeted in several units {sorted(units)}")
        acc = Accountant(unit=units.pop() if units else ("rho" if self.guarantee != "pure" else "epsilon"))
        for s in self.decomposition.get("spends", []):
            acc.spend(s["amount"], label=s["label"], unit=s["unit"])
        for ls in self.levels:
            if ls.measured:
                acc.spend(ls.budget, label=ls.level, delta=ls.delta)
        return acc

    def __str__(self) -> str:
        if self.guarantee == "pure":
            head = f"ε-DP, ε = {self.epsilon:g}"
        elif self.guarantee == "zcdp":
            head = f"ρ-zCDP, ρ = {self.rho:g}"
            if self.epsilon is not None and self.delta is not None:
                head += f" (⇒ ({self.epsilon:g}, {self.delta:g})-DP)"
        else:
            head = f"(ε, δ)-DP, ε = {self.epsilon:g}, δ = {self.delta:g}"
            if self.rho is not None and self.certified_by == ANALYTIC:
                head += f" (exact Gaussian curve, μ = {math.sqrt(2 * self.rho):.6g}, ρ = {self.rho:.6g})"
            elif self.rho is not None and self.certified_by == DISCRETE:
                head += f" (exact discrete Gaussian curve, ρ = {self.rho:.6g})"
            elif self.rho is not None:
                head += f" (via ρ-zCDP, ρ = {self.rho:.6g})"
        lines = [f"Privacy ledger: {head}", f"  privacy unit: {self.privacy_unit}"]
        lines.append("  neighbours: " + ("substitute one unit's records by another's (bounded DP)"
                                         if self.neighbours == "substitute" else "add/remove one unit"))
        if self.invariants:
            lines.append(f"  INVARIANTS (published exactly, NOT protected, no budget): {', '.join(self.invariants)}; "
                         "the guarantee holds only for neighbours that leave them unchanged")
        if self.max_contributions is not None:
            lines.append(f"  max contributions per unit: {self.max_contributions}")
        lines.append(f"  mechanism: {self.mechanism}; budget: {self.budget_strategy}")
        if self.decomposition:
            kind = "private output" if self.decomposition.get("private_structure") else "public"
            what = self.decomposition.get("description") or self.decomposition.get("name", "")
            lines.append(f"  structure ({kind}): {what}")
            lines.extend(f"  - {s['label']}: {s['unit']} = {s['amount']:.6g}"
                         for s in self.decomposition.get("spends", []))
        lines.extend(self._level_lines())
        if self.postprocess:
            params = self.postprocess_params if len(self.postprocess_params) == len(self.postprocess) else \
                [{}] * len(self.postprocess)
            steps = [n + (f"({', '.join(f'{k}={v!r}' for k, v in p.items())})" if p else "")
                     for n, p in zip(self.postprocess, params)]
            lines.append(f"  post-processing (no extra cost): {' -> '.join(steps)}")
        if self.seed is not None or not self.secure_randomness:
            lines.append(f"  NOT FOR PUBLICATION: seeded randomness (seed={self.seed})")
        lines.extend(f"  NOT PRIVATE: {r}" for r in self.non_private)
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.accounting:
            lines.append(f"  certified by: {self.certified_by}; accounting: {self.accounting}; "
                         f"trust model: {self.trust_model}")
        if self.release_id:
            lines.append(f"  release {self.release_id}, {self.created or 'time unknown'}, "
                         f"hierdp {self.hierdp_version or 'version unknown'}")
        return "\n".join(lines)

    def _level_lines(self) -> list[str]:
        """One line per level; a run of >= RUN_MIN consecutive levels whose lines differ only
        in name and depth is one line (a 10⁵-level chain: one line, not 10⁵; issue 35 item 8)."""
        rows = []
        for ls in self.levels:
            spend = f"{ls.unit} = {ls.budget:.6g}" if ls.measured else \
                ("published exactly (invariant), no budget" if ls.noise_variance == 0 else "not measured")
            if ls.delta:
                spend += f", δ = {ls.delta:.6g}"
            src = self.structure.get(ls.level, "")
            src = f"; domain: {src}" if src else ""
            rows.append((ls, (ls.n_nodes, spend + src)))
        lines: list[str] = []
        i = 0
        while i < len(rows):
            j = i + 1
            while j < len(rows) and rows[j][1] == rows[i][1] and rows[j][0].depth == rows[j - 1][0].depth + 1:
                j += 1
            first, (n_nodes, what) = rows[i][0], rows[i][1]
            if j - i >= RUN_MIN:
                last = rows[j - 1][0]
                lines.append(f"  - {j - i} levels {first.level} ... {last.level} (depths {first.depth}-{last.depth}, "
                             f"{n_nodes} nodes each): {what} each")
            else:
                lines.extend(f"  - {ls.level} (depth {ls.depth}, {ls.n_nodes} nodes): {w}" for ls, (_, w) in rows[i:j])
            i = j
        return lines

    def _repr_html_(self) -> str:  # pragma: no cover - notebook nicety
        import html

        return f"<pre>{html.escape(str(self))}</pre>"


def accounting_method(guarantee: str, rho: float | None = None) -> str:
    """How a release with ``guarantee`` composes its per-level spends, in words (an (ε, δ)
    release without ρ, e.g. the Ghazi plan's, composes its measurements basically)."""
    if guarantee == "approx" and rho is None:
        return "basic composition ((ε, δ) measurements): their ε add up and their δ add up"
    return {
        "pure": "basic composition (pure ε): per-level ε add up; parallel within a level",
        "zcdp": "zCDP (Bun & Steinke 2016): per-level ρ add up; parallel within a level; "
                "ε at δ, when shown, by the Canonne-Kamath-Steinke 2020 conversion",
        "approx": "zCDP (Bun & Steinke 2016): per-level ρ add up; the (ε, δ) target converted "
                  "to ρ with Bun & Steinke 2016 Prop. 1.3",
    }.get(guarantee, "")


def default_accountant(guarantee: str, rho: float | None = None) -> str:
    """The accountant of a ledger that does not name one: basic composition for pure ε
    and for (ε, δ) measurements without ρ (e.g. the Ghazi plan), zCDP for ρ releases and
    for (ε, δ) requests calibrated through ρ before issue 34."""
    if guarantee == "pure" or (guarantee == "approx" and rho is None):
        return BASIC
    return ZCDP if guarantee in ("zcdp", "approx") else ""


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _hierdp_version() -> str:
    return __version__


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return "inf" if obj > 0 else ("-inf" if obj < 0 else "nan")
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _json_safe(obj.item())
    return obj


def _json_restore(obj: Any) -> Any:
    if obj in ("inf", "-inf", "nan") and isinstance(obj, str):
        return float(obj)
    if isinstance(obj, dict):
        return {k: _json_restore(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_restore(v) for v in obj]
    return obj


def _unit_shifts(ls: LevelSpend) -> int:
    """How many independent one-count moves one privacy unit makes in the level: 1 (one
    row added or removed, L1 = L2 = 1) or 2 (one row substituted: -1 in one cell, +1 in
    another, L1 = 2, L2 = sqrt(2)); 0 when the sensitivity allows other moves."""
    if ls.sensitivity_l1 == 1 and ls.sensitivity_l2 == 1:
        return 1
    if ls.sensitivity_l1 == 2 and math.isclose(ls.sensitivity_l2, math.sqrt(2), rel_tol=1e-12):
        return 2
    return 0


def pld_parts(ledger: Ledger) -> list[Measured]:
    """The measurements of ``ledger`` as :class:`~hierdp.accounting.accountants.Measured` for PLD
    accounting (:func:`compose`): one per measured level (its nodes compose in parallel).

    ``gaussian`` levels are Gaussian with σ = Δ₂/sqrt(2ρ) (any sensitivity: the Gaussian's
    curve depends on the L2 norm only); ``discrete_laplace`` and ``discrete_gaussian``
    levels need unit moves (one row per unit, add/remove or substitution: the neighbouring
    outputs then differ by ±1 in one or two cells, each an independent one-dimensional
    mechanism). Any other level, and a data-dependent structure's spends, enter as a generic
    (ε, δ)-DP mechanism (its worst-case PLD), which is sound for any mechanism with that
    guarantee. The sampler's rounding (scales and σ² rounded up) only adds privacy.
    """
    stated = ledger.rho if ledger.guarantee != "pure" and ledger.rho is not None else ledger.epsilon
    if stated is None or not math.isclose(ledger.spent, float(stated), rel_tol=1e-9) or \
            any(ls.measured and ls.unit not in ("epsilon", "rho") for ls in ledger.levels):
        raise PrivacyError(f"the ledger's measurements (spending {ledger.spent:g}) do not make up the release's "
                           f"whole budget ({stated}) (e.g. the Ghazi plan's sparse vector steps are not levels): "
                           "PLD accounting needs every measurement; compose this release with accountant='basic'")
    parts: list[Measured] = []
    for s in ledger.decomposition.get("spends", []):
        if s["unit"] != "epsilon":
            raise PrivacyError(f"PLD accounting of a structure spend in {s['unit']!r} is not supported; "
                               "compose this release with accountant='tight'")
        parts.append(Measured("approx", scale=float(s["amount"])))
    for ls in ledger.levels:
        if not ls.measured:
            continue
        shifts = _unit_shifts(ls)
        if ls.mechanism == "gaussian" and ls.unit == "rho":
            parts.append(Measured("gaussian", ls.sensitivity_l2 / math.sqrt(2 * ls.budget), ls.sensitivity_l2))
        elif ls.mechanism == "discrete_gaussian" and ls.unit == "rho" and shifts:
            parts.append(Measured("discrete_gaussian", ls.sensitivity_l2 / math.sqrt(2 * ls.budget), 1.0, count=shifts))
        elif ls.mechanism == "discrete_laplace" and ls.unit == "epsilon" and shifts and not ls.delta:
            parts.append(Measured("discrete_laplace", ls.sensitivity_l1 / ls.budget, 1.0, count=shifts))
        elif ls.unit == "epsilon":
            parts.append(Measured("approx", scale=ls.budget, delta=ls.delta))
        else:
            raise PrivacyError(f"level {ls.level!r}: PLD accounting of mechanism {ls.mechanism!r} in ρ with this "
                               "sensitivity is not supported; compose with accountant='tight'")
    return parts


def discrete_laplace_levels(ledger: Ledger) -> list[tuple[float, int, int]] | None:
    """The discrete Laplace measurements of a pure-ε ``ledger``, for their exact curve.

    Parameters
    ----------
    ledger : Ledger
        A release's ledger (public fields only are read).

    Returns
    -------
    list of (a, Δ, count) or None
        Per measured level (a = ε_level / Δ₁, Δ = 1, the unit moves) for
        :func:`~hierdp.accounting.accountants.mixed_epsilon`; None when the ledger is not made of them
        entirely (another mechanism, a structure's spends, a level with δ, a budget its
        levels do not make up, or a sensitivity other than unit moves).
    """
    if ledger.guarantee != "pure" or ledger.epsilon is None or ledger.decomposition.get("spends") or \
            not math.isclose(ledger.spent, float(ledger.epsilon), rel_tol=1e-9):
        return None
    out = []
    for ls in ledger.levels:
        if not ls.measured:
            continue
        shifts = _unit_shifts(ls)
        if ls.mechanism != "discrete_laplace" or ls.unit != "epsilon" or ls.delta or not shifts or ls.budget <= 0:
            return None
        out.append((ls.budget / ls.sensitivity_l1, 1, shifts))  # P ∝ e^{-a|z|}, a = ε_level / Δ₁
    return out or None


def compose_parts(delta: float, *, basic: Sequence[tuple[float, float]] = (), mu2: float = 0.0,
                  laplace: Sequence[tuple[float, Sequence[tuple[float, int, int]]]] = ()) -> dict[str, Any]:
    """The tight composition of releases given by their parts, at ``delta`` (what
    :func:`compose` and :class:`hierdp.Session` compute).

    Parameters
    ----------
    delta : float
        The δ the composition is stated at.
    basic : sequence of (ε, δ)
        Releases composed basically (pure ε with δ = 0; (ε, δ) releases).
    mu2 : float
        Σ μ² of the Gaussian releases on their exact curve (μ² = 2ρ each; Balle & Wang 2018).
    laplace : sequence of (ε, levels)
        Pure-ε releases made of discrete Laplace levels (:func:`discrete_laplace_levels`).

    Returns
    -------
    dict
        ``epsilon`` (``inf`` when the (ε, δ) releases leave no δ for the Gaussian part),
        ``delta`` (the δ stated; without Gaussian noise Σ δⱼ, ``None`` when 0),
        ``accountant`` and, with Gaussian noise, ``gaussian_mu``.

    Notes
    -----
    Without Gaussian noise: basic composition (Dwork & Roth 2014, Thm 3.16). With it: the
    Gaussian releases are one Gaussian mechanism (μ² adds up) met at what δ the others
    leave, times 1 - :data:`~hierdp.accounting.accountants.GRID_DELTA_MARGIN` (the ``gaussian``
    mechanism's lattice term), the others added basically; the discrete Laplace releases
    join the Gaussian part on their exact joint curve
    (:func:`~hierdp.accounting.accountants.mixed_epsilon`) when that is smaller.
    """
    d = check_delta(delta)
    eps = [float(e) for e, _ in basic]
    spent_delta = math.fsum(float(x) for _, x in basic)
    lap_eps = [float(e) for e, _ in laplace]
    if not mu2:
        return {"epsilon": math.fsum(eps + lap_eps), "delta": spent_delta if spent_delta else None,
                "accountant": BASIC}
    mu = math.sqrt(mu2)
    if spent_delta >= d:
        return {"epsilon": math.inf, "delta": d, "accountant": ANALYTIC, "gaussian_mu": mu}
    left = (d - spent_delta) * (1.0 - GRID_DELTA_MARGIN)
    total = math.fsum(eps + lap_eps) + gaussian_epsilon(mu, left)
    out = {"epsilon": total, "delta": d, "accountant": f"{ANALYTIC} + {BASIC}" if eps or lap_eps else ANALYTIC,
           "gaussian_mu": mu}
    if laplace:
        joint = math.fsum(eps) + mixed_epsilon([lv for _, lvs in laplace for lv in lvs], mu, left)
        if joint < total:
            out.update(epsilon=joint, accountant=f"{MIXED} + {BASIC}" if eps else MIXED)
    return out


def compose(ledgers: Sequence[Ledger], delta: float, *, accountant: str = "tight") -> dict[str, Any]:
    """The (ε, δ) that several releases (their ledgers) certify together, at ``delta``.

    * ``"basic"``: ε and δ add up (Dwork & Roth 2014, Thm 3.16); each release at its own
      (ε, δ) (a ρ-zCDP one at the CKS 2020 conversion of its ρ at ``delta``/n... not
      supported: give it (ε, δ)).
    * ``"tight"`` (no extra package; :func:`compose_parts`): releases whose noise is Gaussian
      (``gaussian`` mechanism, any calibration) are one Gaussian mechanism with μ² = 2 Σ ρ
      (Balle & Wang 2018); the others compose with it basically: ε = Σ εⱼ + ε_G(μ; δ - Σ δⱼ).
      When there is Gaussian noise, pure-ε releases made of discrete Laplace levels join it
      on their exact joint curve (:func:`~hierdp.accounting.accountants.mixed_epsilon`, accountant
      ``MIXED``) if that ε is smaller; pure-ε releases alone compose basically, as before.
      (ε, δ) releases enter at the ε their ledger certifies (the Ghazi plan's: the optimal
      composition of its steps).
    * ``"pld"``: privacy-loss distributions of every measured level (:func:`pld_parts`)
      composed by ``dp-accounting`` (``pip install "hierdp[accounting]"``).

    Returns ``{"epsilon", "delta", "accountant"}``. Reads public ledger fields only.
    """
    d = check_delta(delta)
    if accountant == "pld":
        parts = [p for led in ledgers for p in pld_parts(led)]
        return {"epsilon": pld_epsilon(parts, d), "delta": d, "accountant": PLD}
    if accountant not in ("tight", "basic"):
        raise PrivacyError(f"accountant must be 'tight', 'basic' or 'pld', got {accountant!r:.40}")
    basic: list[tuple[float, float]] = []
    mu2: list[float] = []
    laplace: list[tuple[float, list[tuple[float, int, int]]]] = []
    for led in ledgers:
        gaussian = led.rho is not None and all(ls.mechanism == "gaussian" for ls in led.levels if ls.measured) \
            and not led.decomposition.get("spends")
        if accountant == "tight" and gaussian:
            mu2.append(2.0 * float(led.rho))  # type: ignore[arg-type]
        elif led.guarantee == "pure":
            lap = discrete_laplace_levels(led) if accountant == "tight" else None
            if lap is not None:
                laplace.append((float(cast(float, led.epsilon)), lap))
            else:
                basic.append((float(cast(float, led.epsilon)), 0.0))
        elif led.epsilon is not None and led.delta is not None:
            basic.append((float(led.epsilon), float(led.delta)))
        else:
            raise PrivacyError("a ρ-zCDP release without δ states no (ε, δ) to compose basically; "
                               "give the release delta=, or compose with accountant='tight'")
    spent_delta = math.fsum(x for _, x in basic)
    if spent_delta > d or (mu2 and spent_delta >= d):
        raise PrivacyError(f"the releases spend δ = {spent_delta:g} by themselves, not below delta = {d:g}")
    out = compose_parts(d, basic=basic, mu2=math.fsum(mu2), laplace=laplace)
    out.pop("gaussian_mu", None)
    return out
