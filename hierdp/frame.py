"""From pandas to a public tree and private node counts.

Privacy rule 1 (design): the structure is public. Each level declares its domain:

* a list / array / ``pd.Index`` — the level's values, under *every* parent (a product,
  e.g. every day under every location);
* a dict ``{parent_label: [values]}`` — values per parent (e.g. counties per state); keys
  may also be full label paths (tuples) when parent labels repeat;
* a ``DataFrame`` of public paths (e.g. a published geography file) with the columns of
  this level and of every level above it;
* ``"observed"`` — the user's explicit assertion that the values seen in the data are
  public knowledge (the "known attributes" of Dawson et al.).

``domains="observed"`` applies the assertion to all levels; a DataFrame applies to every
level whose column it has. Declared values absent from the data become zero-count nodes;
data outside a declared domain raise (or, with ``unknown="drop"``, are dropped and the
number kept out of the public ledger).
"""

from __future__ import annotations

import math

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from hierdp.errors import DataError, HierarchyError, expected_one_of
from hierdp.tree import Tree

__all__ = ["Structure", "build_structure", "DPTree", "NO_DOMAIN_MESSAGE", "RESERVED_COLUMNS"]

#: Output columns of a release table; levels cannot use these names.
RESERVED_COLUMNS = frozenset({"level", "node", "cell", "estimate", "std", "noisy", "ci_low", "ci_high"})

NO_DOMAIN_MESSAGE = (
    "no domain declared for level {level!r}: the tree's structure must be public, so declare "
    "each level's values (e.g. domains={{{level!r}: [...]}}, a per-parent dict, or a DataFrame of public paths), "
    "or pass domains='observed' (or {{{level!r}: 'observed'}}) to assert that the values seen in the data are public"
)


@dataclass
class _Level:
    name: str
    index: pd.Index  # label values; codes index into it
    keys: np.ndarray  # sorted parent_ext * ncodes + code of the nodes of this depth
    offset: int  # external id of the first node of this depth
    provenance: str


@dataclass
class Structure:
    """A public tree built from declared domains, plus what is needed to place rows in it."""

    tree: Tree
    levels: list[str]
    _levels: list[_Level] = field(repr=False)
    n_ext: int = 0

    def locate(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """External node id of each row (the deepest node its path reaches), a mask of rows
        outside the declared domains, and the kinds of problem found per level (for error
        messages; they name levels, never values, which come from the private data)."""
        return _locate(self, df, self.levels)


def _as_index(values: Any, level: str) -> pd.Index:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise HierarchyError(f"domain of level {level!r} must be a list of values, 'observed', a dict or a DataFrame; "
                             f"got {values!r}")
    idx = pd.Index(list(values) if not isinstance(values, (pd.Index, np.ndarray, pd.Series)) else values)
    if len(idx) == 0:
        raise HierarchyError(f"domain of level {level!r} is empty; declare at least one value")
    if idx.hasnans:
        raise HierarchyError(f"domain of level {level!r} contains a missing value; remove it")
    if not idx.is_unique:
        dup = idx[idx.duplicated()].unique()[:3].tolist()
        raise HierarchyError(f"domain of level {level!r} lists {dup} more than once; list each value once")
    _no_blank_labels(idx, level)
    return idx


def _no_blank_labels(idx: pd.Index, level: str) -> None:
    """An empty or blank label would print like a missing value in the output (and read
    back as one), so its row could not be told from its parent's."""
    if idx.dtype == object or pd.api.types.is_string_dtype(idx.dtype):
        if any(isinstance(v, str) and not v.strip() for v in idx):
            raise HierarchyError(f"level {level!r} has an empty label ''; give every value a visible name "
                                 "(empty cells read back as missing)")


def _normalize_domains(domains: Any, levels: Sequence[str]) -> dict[str, Any]:
    if domains is None:
        raise HierarchyError(NO_DOMAIN_MESSAGE.format(level=levels[0]))
    if isinstance(domains, str):
        if domains != "observed":
            raise HierarchyError(f"domains must be 'observed', a dict per level or a DataFrame; got {domains!r}")
        return {lv: "observed" for lv in levels}
    if isinstance(domains, pd.DataFrame):
        missing = [lv for lv in levels if lv not in domains.columns]
        if missing:
            raise HierarchyError(NO_DOMAIN_MESSAGE.format(level=missing[0])
                                 + f" (the domains DataFrame has no column {missing[0]!r})")
        return {lv: domains for lv in levels}
    if isinstance(domains, Mapping):
        unknown = [k for k in domains if k not in levels]
        if unknown:
            raise HierarchyError(expected_one_of("level in domains", unknown[0], levels))
        out = {}
        for lv in levels:
            if lv not in domains:
                raise HierarchyError(NO_DOMAIN_MESSAGE.format(level=lv))
            out[lv] = domains[lv]
        return out
    raise HierarchyError(f"domains must be 'observed', a dict per level or a DataFrame; got {type(domains).__name__}")


def _codes_for(index: pd.Index, column: pd.Series) -> np.ndarray:
    try:
        return np.asarray(index.get_indexer(pd.Index(column)), dtype=np.int64)
    except Exception:  # unhashable or incomparable values
        return np.asarray(pd.Index(column, dtype=object).map(lambda x: index.get_loc(x) if x in index else -1),
                          dtype=np.int64)


def _find(level: _Level, parent_ext: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """External node ids for (parent, code) pairs at this level; -1 where absent."""
    n = len(level.index)
    key = parent_ext * n + codes
    pos = np.searchsorted(level.keys, key)
    pos_c = np.minimum(pos, max(level.keys.size - 1, 0))
    ok = (codes >= 0) & (parent_ext >= 0) & (level.keys.size > 0)
    if level.keys.size:
        ok &= level.keys[pos_c] == key
    return np.where(ok, level.offset + pos_c, -1)


def build_structure(df: pd.DataFrame | None, levels: Sequence[str], domains: Any, *, root: str = "total") -> Structure:
    """Build the public tree of ``levels`` from declared ``domains`` (see module docstring).

    ``df`` is read only for levels declared ``"observed"`` (and to check columns exist).
    """
    levels = _check_levels(levels, root)
    specs = _normalize_domains(domains, levels)
    if df is not None:
        missing = [lv for lv in levels if lv not in df.columns]
        if missing:
            raise DataError(expected_one_of("level column", missing[0], [str(c) for c in df.columns]).replace(
                "unknown level column", "missing level column"))
    parents_ext = [np.array([-1], np.int64)]
    codes_ext = [np.array([0], np.int64)]
    lv_objs: list[_Level] = []
    n_prev_start, n_prev = 0, 1  # external id range of the previous depth
    data_nodes = None  # per data row: external node id at the previous depth
    if df is not None and any(isinstance(s, str) and s == "observed" for s in specs.values()):
        data_nodes = np.zeros(len(df), np.int64)
    for d, lv in enumerate(levels, start=1):
        spec = specs[lv]
        prev_ids = np.arange(n_prev_start, n_prev_start + n_prev)
        if isinstance(spec, str) and spec == "observed":
            if df is None:
                raise HierarchyError(f"level {lv!r} is declared 'observed' but no data were given")
            col = df[lv]
            vals = col[(data_nodes >= 0) & col.notna().to_numpy()]
            uniq = pd.unique(vals.to_numpy())
            idx = pd.Index(uniq)
            _no_blank_labels(idx, lv)
            try:
                idx = idx.sort_values()
            except TypeError:
                pass
            codes = _codes_for(idx, col)
            ok = (data_nodes >= 0) & (codes >= 0)
            pairs_p, pairs_c = data_nodes[ok], codes[ok]
            provenance = "observed in the data (asserted public by the user)"
        elif isinstance(spec, pd.DataFrame):
            need = list(levels[:d])
            miss = [c for c in need if c not in spec.columns]
            if miss:
                raise HierarchyError(f"the public paths given for level {lv!r} lack column {miss[0]!r}; "
                                     "a paths DataFrame needs the columns of the level and every level above it")
            paths = spec[need].drop_duplicates()
            if paths[lv].isna().any():
                raise HierarchyError(f"the public paths for level {lv!r} contain missing values; remove those rows")
            idx = _as_index(pd.unique(paths[lv].to_numpy()), lv)
            node = np.zeros(len(paths), np.int64)
            for dd, (plv, lobj) in enumerate(zip(levels[:d - 1], lv_objs), start=1):
                node = _find(lobj, node, _codes_for(lobj.index, paths[plv]))
                if np.any(node < 0):
                    bad = paths.iloc[int(np.flatnonzero(node < 0)[0])][need[:dd]].tolist()
                    raise HierarchyError(f"public path {bad} for level {lv!r} is not under any declared "
                                         f"{plv!r} node; fix the paths or the domain of {plv!r}")
            pairs_p, pairs_c = node, _codes_for(idx, paths[lv])
            provenance = f"declared public paths ({len(idx)} distinct values)"
        elif isinstance(spec, Mapping):
            if d == 1:
                idx = None
                raise HierarchyError(f"level {lv!r} is the first level: its domain cannot be per parent; give a list")
            plv = lv_objs[-1]
            plab = plv.index[codes_ext[-1]]
            keys = list(spec.keys())
            all_vals: list[Any] = []
            for v in spec.values():
                if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                    raise HierarchyError(f"per-parent domain of {lv!r} must map each parent to a list of values; "
                                         f"got {v!r}")
                all_vals.extend(list(v))
            idx = pd.Index(pd.unique(pd.Index(all_vals).to_numpy())) if all_vals else pd.Index([])
            if idx.hasnans:
                raise HierarchyError(f"per-parent domain of {lv!r} contains a missing value; remove it")
            paths_prev = _paths_of(lv_objs, parents_ext, codes_ext, d - 1)
            pp, pc = [], []
            unique_labels = not plab.duplicated().any()
            used = set()
            for j, (lab, path) in enumerate(zip(plab, paths_prev)):
                if path in spec:
                    key = path
                elif lab in spec:
                    if not unique_labels and (plab == lab).sum() > 1:
                        raise HierarchyError(
                            f"per-parent domain of {lv!r} is keyed by {lab!r}, which names several {plv.name!r} "
                            "nodes; key it by the full path tuple instead")
                    key = lab
                else:
                    raise HierarchyError(f"per-parent domain of {lv!r} has no entry for {plv.name} {lab!r}; "
                                         "add one (in Python, an empty list makes that node a leaf; "
                                         "a YAML domain list needs at least one value)")
                used.add(key)
                vals = list(spec[key])
                if len(set(vals)) != len(vals):
                    raise HierarchyError(f"per-parent domain of {lv!r} lists a value twice under {lab!r}")
                c = idx.get_indexer(vals)
                pp.append(np.full(len(c), prev_ids[j]))
                pc.append(c)
            extra = [k for k in keys if k not in used]
            if extra:
                raise HierarchyError(f"per-parent domain of {lv!r} has entries for unknown {plv.name} values "
                                     f"{extra[:3]}; remove them or declare them in {plv.name!r}")
            pairs_p = np.concatenate(pp) if pp else np.zeros(0, np.int64)
            pairs_c = np.concatenate(pc) if pc else np.zeros(0, np.int64)
            provenance = f"declared per parent ({len(idx)} distinct values)"
        else:
            idx = _as_index(spec, lv)
            pairs_p = np.repeat(prev_ids, len(idx))
            pairs_c = np.tile(np.arange(len(idx)), n_prev)
            provenance = f"declared list ({len(idx)} values, under every parent)"
        ncode = max(len(idx), 1)
        keys = np.unique(pairs_p.astype(np.int64) * ncode + pairs_c.astype(np.int64))
        start = n_prev_start + n_prev
        level = _Level(name=lv, index=idx, keys=keys, offset=start, provenance=provenance)
        lv_objs.append(level)
        parents_ext.append(keys // ncode)
        codes_ext.append(keys % ncode)
        if data_nodes is not None:
            codes = _codes_for(idx, df[lv])
            found = _find(level, data_nodes, codes)
            data_nodes = np.where(data_nodes >= 0, found, -1)
        n_prev_start, n_prev = start, keys.size
        if n_prev == 0:
            raise HierarchyError(f"level {lv!r} has no nodes: its domain is empty under every parent")
    parent = np.concatenate(parents_ext)
    codes_all = np.concatenate(codes_ext)
    shape = Tree.from_parent(parent)
    codes_int = codes_all if shape._perm is None else codes_all[shape._perm]
    level_labels = [pd.Index([root])] + [lo.index for lo in lv_objs]
    provenance = {root: "the root (always present)"}
    provenance.update({lo.name: lo.provenance for lo in lv_objs})
    tree = Tree(shape._parent, perm=shape._perm, level_names=[root, *levels], level_labels=level_labels,
                codes=codes_int, provenance=provenance, _check=False)
    return Structure(tree=tree, levels=list(levels), _levels=lv_objs, n_ext=parent.size)


def _paths_of(lv_objs: list[_Level], parents_ext: list[np.ndarray], codes_ext: list[np.ndarray], depth: int) -> list:
    """Label-path tuples of the nodes at ``depth`` (>= 1), in external order."""
    offsets = [0] + [lo.offset for lo in lv_objs]
    cols = []
    node = np.arange(parents_ext[depth].size)
    d = depth
    while d >= 1:
        lo = lv_objs[d - 1]
        cols.append(lo.index[codes_ext[d][node]])
        parent_ids = parents_ext[d][node]
        node = parent_ids - offsets[d - 1]
        d -= 1
    cols.reverse()
    return list(zip(*cols))


def _check_levels(levels: Any, root: str) -> list[str]:
    if isinstance(levels, str) or not isinstance(levels, Sequence) or len(levels) == 0:
        raise HierarchyError(f"levels must be a non-empty list of column names, e.g. ['state', 'county']; got {levels!r}")
    levels = list(levels)
    if len(set(levels)) != len(levels):
        dup = sorted({x for x in levels if levels.count(x) > 1})
        raise HierarchyError(f"levels {dup} appear more than once; each level needs its own column")
    if root in levels:
        raise HierarchyError(f"a level is named {root!r}, the name of the root level; rename it or pass root=")
    clash = [lv for lv in levels if lv in RESERVED_COLUMNS]
    if clash:
        raise HierarchyError(f"level {clash[0]!r} has the name of an output column ({', '.join(sorted(RESERVED_COLUMNS))}); "
                             "rename the column first, e.g. df.rename(columns={...})")
    return levels


def _locate(st: Structure, df: pd.DataFrame, levels: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    node = np.zeros(len(df), np.int64)
    bad = np.zeros(len(df), bool)
    examples: list[str] = []
    tree = st.tree
    n_children_ext = tree.n_children
    for lo in st._levels:
        col = df[lo.name]
        isna = col.isna().to_numpy()
        codes = _codes_for(lo.index, col)
        found = _find(lo, node, codes)
        # rows that stop early: allowed only where the node reached is a leaf (ragged trees)
        stop_here = isna & ~bad & (n_children_ext[np.maximum(node, 0)] == 0)
        miss = ~bad & ~stop_here & (found < 0)
        if miss.any():
            what = f"missing {lo.name!r} values" if isna[miss].all() else (
                f"{lo.name!r} values outside the declared domain" + ("" if lo.offset == 1 else " of their parent"))
            if what not in examples:
                examples.append(what)
        bad |= miss
        node = np.where(bad, -1, np.where(stop_here, node, found))
    return node, bad, examples


def _check_counts(df: pd.DataFrame, count: str) -> np.ndarray:
    if count not in df.columns:
        raise DataError(expected_one_of("count column", count, [str(c) for c in df.columns]).replace(
            "unknown count column", "missing count column"))
    c = df[count]
    if not pd.api.types.is_numeric_dtype(c) or pd.api.types.is_bool_dtype(c):
        raise DataError(f"count column {count!r} must hold non-negative integers, got dtype {c.dtype}")
    arr = c.to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(arr).any():
        raise DataError(f"count column {count!r} has missing values; fill or drop them")
    if (arr < 0).any():
        raise DataError(f"count column {count!r} has negative counts; counts must be >= 0")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
        raise DataError(f"count column {count!r} has non-integer counts; counts must be whole numbers")
    return arr.astype(np.int64)


class DPTree:
    """Private data placed on a public tree; what ``df.dptree(...)`` returns.

    Holds the frame (not copied), the declared structure and how rows count. Building it
    reads the data only to check the columns and the count column, and for levels whose
    domain is declared ``"observed"``; counts are computed at :meth:`release` (or by the
    non-private :meth:`true_counts`).
    """

    def __init__(
        self,
        df: pd.DataFrame,
        levels: Sequence[str],
        domains: Any = None,
        *,
        count: str | None = None,
        unit: str | None = None,
        max_contributions: int | None = None,
        unknown: str = "raise",
        root: str = "total",
        spent: list[dict[str, Any]] | None = None,
    ) -> None:
        if not isinstance(df, pd.DataFrame):
            raise DataError(f"expected a pandas DataFrame, got {type(df).__name__}")
        if unknown not in ("raise", "drop"):
            raise DataError(f"unknown={unknown!r}: expected 'raise' (default) or 'drop'")
        if count is not None and unit is not None:
            raise DataError("count= (pre-aggregated rows) and unit= (record-level rows) cannot be combined; "
                            "bound contributions on the record-level data")
        if max_contributions is not None and unit is None:
            raise DataError("max_contributions needs unit=<privacy-unit column>; without unit= each row is its own unit")
        if unit is not None and max_contributions is None:
            raise DataError(f"unit={unit!r} needs max_contributions=<c>: the rows of a unit must be bounded")
        if unit is not None and unit not in df.columns:
            raise DataError(expected_one_of("privacy-unit column", unit, [str(c) for c in df.columns]).replace(
                "unknown privacy-unit column", "missing privacy-unit column"))
        self._df = df
        self.levels = _check_levels(levels, root)
        self.count = count
        self.unit = unit
        self.max_contributions = max_contributions
        self.unknown = unknown
        # the public guarantee of each release of this data so far; the .dptree accessor
        # passes one list per DataFrame, so every DPTree built from it shares the count
        self._spent: list[dict[str, Any]] = [] if spent is None else spent
        self._structure = build_structure(df, self.levels, domains, root=root)
        if count is not None:
            _check_counts(df, count)

    @property
    def tree(self) -> Tree:
        """The public tree."""
        return self._structure.tree

    @property
    def structure(self) -> Structure:
        return self._structure

    def _node_values(self, rng: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        """True node counts (external order) and private diagnostics. Reads private data."""
        df = self._df
        notes: dict[str, Any] = {}
        if self.unit is not None:
            from hierdp.contributions import bound_contributions
            from hierdp.rng import make_rng

            df, n_dropped = bound_contributions(df, self.unit, self.max_contributions, rng or make_rng(None))
            notes["rows_dropped_by_contribution_bound"] = int(n_dropped)
        node, bad, examples = self._structure.locate(df)
        if bad.any():
            if self.unknown == "raise":
                raise DataError(
                    "the data have " + "; ".join(examples) + " (values not shown: they are private; in Python, "
                    "df.dptree(...).out_of_domain() lists the rows). Fix the domains, or pass unknown='drop' to drop such rows"
                )
            notes["rows_dropped_out_of_domain"] = int(bad.sum())
        weights = _check_counts(df, self.count) if self.count is not None else None
        keep = ~bad
        n = self._structure.n_ext
        w = None if weights is None else weights[keep]
        leaf_counts = np.bincount(node[keep], weights=w, minlength=n)
        leaf_counts = np.rint(leaf_counts).astype(np.int64) if w is not None else leaf_counts.astype(np.int64)
        tree = self.tree
        internal = tree.to_internal(leaf_counts)
        # every row sits at a leaf (or stops at a leaf of a ragged tree): sum up the subtrees
        if np.any(internal[tree._n_children > 0] != 0):
            raise DataError("some rows stop above the leaf level; every row needs a value for every level")
        return tree.to_external(tree._sum_up(np.ascontiguousarray(internal))), notes

    def release_defaults(self) -> dict[str, Any]:
        """Release keywords implied by how rows count: the sensitivity (``Sensitivity.bounded(c)``
        with ``unit=``/``max_contributions=c``), the privacy-unit text and the bound."""
        from hierdp.mechanisms.base import Sensitivity

        if self.unit is not None:
            return {"sensitivity": Sensitivity.bounded(self.max_contributions),
                    "privacy_unit": f"one value of column {self.unit!r}",
                    "max_contributions": self.max_contributions}
        if self.count is not None:
            return {"privacy_unit": f"one individual counted in column {self.count!r}"}
        return {}

    def out_of_domain(self) -> pd.DataFrame:
        """NON-PRIVATE diagnostics: the rows of the data that fall outside the declared domains
        (or lack a level value), for fixing the domains. Never publish them."""
        _, bad, _ = self._structure.locate(self._df)
        return self._df[bad]

    def true_counts(self) -> np.ndarray:
        """NON-PRIVATE: the exact node counts (external order), for evaluation only."""
        return self._node_values()[0]

    def _check_release_keywords(self, kwargs: dict[str, Any]) -> None:
        """How rows count is fixed when the DPTree is built: a release may declare a larger
        sensitivity (conservative), never a smaller one, and may not restate the bound or
        the privacy unit (PrivacyError)."""
        from hierdp.errors import PrivacyError
        from hierdp.mechanisms.base import Sensitivity

        implied = self.release_defaults()
        how = (f"df.dptree(..., unit={self.unit!r}, max_contributions={self.max_contributions})"
               if self.unit is not None else "df.dptree(...)")
        floor = implied.get("sensitivity", Sensitivity())  # one row (or one counted individual) = 1
        s = kwargs.get("sensitivity")
        if s is not None:
            if not isinstance(s, Sensitivity):
                raise PrivacyError(f"sensitivity must be a hierdp Sensitivity, got {type(s).__name__}")
            if not s.covers(floor):
                raise PrivacyError(f"sensitivity {s} is smaller than one privacy unit can change a level "
                                   f"({floor}, fixed by {how}); pass a larger one or none")
        for key in ("max_contributions", "privacy_unit"):
            if key in kwargs and kwargs[key] != implied.get(key):
                fix = ("bound rows per unit with df.dptree(..., unit='column', max_contributions=c)"
                       if key == "max_contributions" else f"it follows from {how}")
                raise PrivacyError(f"{key} is not a release() option for a DPTree: {fix}")

    def release(self, epsilon: float | None = None, **kwargs: Any):
        """Release the counts privately; keywords as :func:`hierdp.release.release`.

        >>> import pandas as pd, hierdp
        >>> df = pd.DataFrame({"state": ["A", "A", "B"], "county": ["x", "y", "z"]})
        >>> r = df.dptree(levels=["state", "county"], domains="observed").release(epsilon=1.0, seed=7)
        >>> r.frame.columns.tolist()
        ['level', 'state', 'county', 'estimate', 'std']
        """
        from hierdp.release import release
        from hierdp.rng import make_rng

        seed = kwargs.get("seed")
        bound_rng = make_rng(None if seed is None else (int(seed) * 2654435761 + 97) % (1 << 63))
        values, private_notes = self._node_values(bound_rng)
        notes = list(kwargs.pop("notes", ()))
        if self.unknown == "drop":
            # stated whatever the data: whether any row was dropped is itself private
            notes.append("rows outside the declared domains, if any, were dropped (unknown='drop'); "
                         "whether and how many is not public")
        self._check_release_keywords(kwargs)
        for key, value in self.release_defaults().items():
            kwargs.setdefault(key, value)
        result = release(self.tree, values, epsilon=epsilon, notes=notes, private_notes=private_notes, **kwargs)
        led = result.ledger
        self._spent.append({"guarantee": led.guarantee, "epsilon": led.epsilon, "delta": led.delta, "rho": led.rho})
        if len(self._spent) > 1:
            led.notes.append(f"release {len(self._spent)} of the same data (this DataFrame): together they "
                             f"spend {self.spent_text()} under basic composition")
        return result

    @property
    def releases(self) -> list[dict[str, Any]]:
        """The public guarantee (epsilon, delta, rho) of each release made from this data
        (every DPTree built with ``df.dptree`` on the same DataFrame object counts)."""
        return [dict(r) for r in self._spent]

    def spent_text(self) -> str:
        """What the releases of this data spend together (basic composition), as text."""
        parts = []
        for key in ("epsilon", "delta", "rho"):
            # zCDP releases are counted in rho (the epsilon they state is a conversion)
            vals = [r[key] for r in self._spent
                    if r[key] is not None and not (key == "epsilon" and r["guarantee"] == "zcdp")]
            if vals:
                parts.append(f"{key}={math.fsum(vals):.6g}")
        return ", ".join(parts) if parts else "nothing"

    def __repr__(self) -> str:
        t = self.tree
        doms = "; ".join(f"{k}: {v}" for k, v in t.provenance.items() if k in self.levels)
        kind = f"pre-aggregated (count={self.count!r})" if self.count else (
            f"record-level, unit={self.unit!r} (≤{self.max_contributions} rows)" if self.unit else
            "record-level (one row = one individual)")
        return (f"<DPTree {' > '.join(self.levels)}: {t.n_nodes:,} public nodes, {t.n_leaves:,} leaves; "
                f"{kind}; domains: {doms}>")
