"""The public structure of a hierarchy: :class:`Tree`.

Nodes are held in *descending order of height* (Cai et al., Generation Matrix, Def. 6):
the root first, leaves last, ties broken by depth, then by parent, then by label. So
every parent index is smaller than its children's, each height class is a contiguous
slice and the k-order subtree T^(k) = {i : h_i > k} (Def. 3) is a prefix. Heights follow
Def. 2: a leaf has height 1, so a complete tree with h levels has height h.

All per-node data are numpy arrays; there is no Python object per node. Arrays passed to
and returned from the public methods are indexed like the parent array the tree was built
from ("external" numbering); the internal order is used by kernels and plugins through
:meth:`Tree.to_internal` / :meth:`Tree.to_external` (free when the two coincide).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from functools import cached_property
from typing import Any, cast

import numpy as np
import pandas as pd

from hierdp._kernels import tree_kernels as K
from hierdp.errors import DataError, HierarchyError, did_you_mean, expected_one_of

__all__ = ["Tree", "InternalArrays", "geoid_frame"]

#: cache key of the int32 parent array the threaded aggregation reads (structure only)
_PARENT32_KEY = "hierdp.parent32"


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class InternalArrays:
    """Read-only arrays of a :class:`Tree` in its internal (descending-height) order.

    The public API for kernels, post-processors, plans and plugins (``tree.internal``):
    node ``i`` here is the ``i``-th node of the internal order, so every parent index is
    smaller than its children's, each depth of a level-ordered tree and each height class
    is a contiguous slice. Arrays are shared with the tree and not writeable; convert
    external arrays with :meth:`Tree.to_internal` / :meth:`Tree.to_external`.
    """

    __slots__ = ("_tree",)

    def __init__(self, tree: Tree) -> None:
        self._tree = tree

    @property
    def parent(self) -> np.ndarray:
        """Parent of each node (root -1), int64."""
        return self._tree._parent

    @property
    def depth(self) -> np.ndarray:
        """Depth of each node (root 0)."""
        return self._tree._depth

    @property
    def height(self) -> np.ndarray:
        """Height of each node (Cai et al. Def. 2: leaves 1); non-increasing."""
        return self._tree._height

    @property
    def n_children(self) -> np.ndarray:
        """Number of children of each node."""
        return self._tree._n_children

    @property
    def child_ptr(self) -> np.ndarray:
        """CSR pointers: the children of node v are ``child_idx[child_ptr[v]:child_ptr[v + 1]]``."""
        return self._tree._child_ptr

    @property
    def child_idx(self) -> np.ndarray:
        """CSR child indices (ascending within each parent)."""
        return self._tree._child_idx

    @property
    def leafcount(self) -> np.ndarray:
        """Number of leaves in the subtree of each node (1 for a leaf)."""
        return self._tree._leafcount

    @property
    def level_index(self) -> tuple[slice | np.ndarray, ...]:
        """Per depth, a slice (when the depth is contiguous) or an index array of its nodes."""
        return self._tree._level_index

    def height_slice(self, h: int) -> slice:
        """The contiguous slice of the nodes of height ``h``."""
        return self._tree.height_slice(h)

    @property
    def perm(self) -> np.ndarray | None:
        """External id of each internal node (``None`` when the orders coincide)."""
        return self._tree._perm

    @property
    def inverse_perm(self) -> np.ndarray | None:
        """Internal index of each external node (``None`` when the orders coincide)."""
        return self._tree._inv

    @property
    def codes(self) -> np.ndarray | None:
        """Per node, the code of its label in ``tree.level_labels(depth)`` (``None`` if unlabelled)."""
        return self._tree._codes

    @property
    def parent_index(self) -> np.ndarray:
        """The values of :attr:`parent` as compiled passes read them: int32 when the tree
        fits (else int64), read-only, one copy per tree, starting at an offset in its page
        that keeps it from aliasing the arrays a pass adds into (4 KiB aliasing)."""
        return self._tree._parent_index()

    def sum_up(self, values: np.ndarray, consume: bool = False) -> np.ndarray:
        """Subtree sums of internal-order node values (one bottom-up pass; shape (n,) or (n, k)).

        ``consume=True`` hands ``values`` over: on large trees it is overwritten with the
        sums and returned (no new array), so pass it only when it is not used again."""
        return self._tree._sum_up(values, consume)


class Tree:
    """Immutable public structure of a hierarchy.

    Build with :meth:`from_parent`, :meth:`complete` or :meth:`from_frame`; do not call
    the constructor directly.
    """

    __slots__ = ("_parent", "_perm", "_inv", "_level_names", "_level_labels", "_codes",
                 "_provenance", "_cache", "__dict__")

    def __init__(
        self,
        parent: np.ndarray,
        *,
        perm: np.ndarray | None = None,
        level_names: Sequence[str] | None = None,
        level_labels: Sequence[pd.Index] | None = None,
        codes: np.ndarray | None = None,
        provenance: dict[str, str] | None = None,
        _check: bool = True,
    ) -> None:
        parent = np.ascontiguousarray(parent, dtype=np.int64)
        if _check:
            _check_internal_order(parent)
        self._parent = _readonly(parent)
        self._perm = None if perm is None else _readonly(np.ascontiguousarray(perm, dtype=np.int64))
        self._inv = None
        if self._perm is not None:
            inv = np.empty_like(self._perm)
            inv[self._perm] = np.arange(self._perm.size)
            self._inv = _readonly(inv)
        max_depth = int(self._depth.max()) if parent.size else 0
        if level_names is None:
            level_names = ["total"] + [f"level_{d}" for d in range(1, max_depth + 1)]
        level_names = [str(x) for x in level_names]
        if len(level_names) != max_depth + 1:
            raise HierarchyError(
                f"{len(level_names)} level names given for a tree with {max_depth + 1} levels (depths 0..{max_depth})"
            )
        if len(set(level_names)) != len(level_names):
            dup = sorted({x for x in level_names if level_names.count(x) > 1})
            raise HierarchyError(f"duplicate level names {dup}; every level needs its own name")
        self._level_names = tuple(level_names)
        self._level_labels = None if level_labels is None else tuple(level_labels)
        self._codes = None if codes is None else _readonly(np.ascontiguousarray(codes, dtype=np.int64))
        self._provenance = dict(provenance or {})
        self._cache: dict[str, Any] = {}

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_parent(cls, parent: Sequence[int] | np.ndarray, labels: Sequence[Hashable] | None = None,
                    level_names: Sequence[str] | None = None) -> Tree:
        """A tree from any parent array (``parent[i]`` is the parent of node i, the root has -1).

        Validates that there is exactly one root, that every index is in range and that
        there is no cycle. ``labels`` (one per node) name the nodes; ``level_names`` name
        the depths (default ``total, level_1, ...``).

        Parameters
        ----------
        parent : sequence of int or numpy.ndarray
            ``parent[i]`` is node i's parent; the root's is -1.
        labels : sequence, optional
            One label per node.
        level_names : sequence of str, optional
            One name per depth, the root's first.

        Returns
        -------
        Tree

        Examples
        --------
        >>> import hierdp
        >>> hierdp.Tree.from_parent([-1, 0, 0, 1, 1]).n_leaves
        3
        """
        try:
            arr = np.asarray(parent)
        except Exception as exc:  # pragma: no cover - defensive
            raise HierarchyError(f"parent must be a 1-D integer array: {exc}") from None
        if arr.ndim != 1 or arr.size == 0:
            raise HierarchyError(f"parent must be a non-empty 1-D array, got shape {arr.shape}")
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or
                                     (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)))):
            raise HierarchyError(f"parent must hold integer node indices, got dtype {arr.dtype}")
        p = arr.astype(np.int64)
        n = p.size
        bad = np.flatnonzero((p < -1) | (p >= n))
        if bad.size:
            raise HierarchyError(f"parent[{bad[0]}] = {p[bad[0]]} is out of range; indices must be in [-1, {n - 1}]")
        roots = np.flatnonzero(p == -1)
        if roots.size != 1:
            what = "no root" if roots.size == 0 else f"{roots.size} roots (nodes {roots[:5].tolist()})"
            raise HierarchyError(f"parent array has {what}; exactly one node must have parent -1")
        selfloop = np.flatnonzero(p == np.arange(n))
        if selfloop.size:
            raise HierarchyError(f"node {selfloop[0]} is its own parent; the parent array has a cycle")
        depth, on_cycle = K.tree_depths(p)
        if on_cycle >= 0:
            raise HierarchyError(f"parent array has a cycle through node {on_cycle}; a tree cannot contain cycles")
        height = K.tree_heights(p, depth)
        order = _descending_height_order(p, depth, height)
        identity = bool(np.array_equal(order, np.arange(n)))
        if identity:
            parent_int = p
            perm = None
        else:
            rank = np.empty(n, np.int64)
            rank[order] = np.arange(n)
            po = p[order]
            parent_int = np.where(po >= 0, rank[np.maximum(po, 0)], -1)
            perm = order
        codes = level_labels = None
        if labels is not None:
            lab = np.asarray(labels, dtype=object) if not isinstance(labels, pd.Index) else labels.to_numpy()
            if lab.shape != (n,):
                raise HierarchyError(f"labels must have one entry per node ({n}), got shape {lab.shape}")
            lab_int = lab if perm is None else lab[perm]
            d_int = depth if perm is None else depth[perm]
            codes = np.empty(n, np.int64)
            level_labels = []
            for d in range(int(d_int.max()) + 1):
                sel = np.flatnonzero(d_int == d)
                c, uniq = pd.factorize(pd.Index(lab_int[sel]), sort=False)
                codes[sel] = c
                level_labels.append(pd.Index(uniq))
        return cls(parent_int, perm=perm, level_names=level_names, level_labels=level_labels,
                   codes=codes, _check=False)

    @classmethod
    def complete(cls, fanout: int, height: int, level_names: Sequence[str] | None = None) -> Tree:
        """The complete ``fanout``-ary tree with ``height`` levels (SynData: fanout 2, height 24).

        Nodes are numbered breadth-first: the root is 0 and the children of node i are
        ``fanout*i + 1 ... fanout*i + fanout``; this is already descending-height order.

        Parameters
        ----------
        fanout : int
            Children per internal node.
        height : int
            Levels, the root's included.
        level_names : sequence of str, optional
            One name per level, the root's first.

        Returns
        -------
        Tree

        Examples
        --------
        >>> import hierdp
        >>> hierdp.Tree.complete(fanout=2, height=3).n_nodes
        7
        """
        for name, v, lo in (("fanout", fanout, 1), ("height", height, 1)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise HierarchyError(f"{name} must be an integer >= {lo}, got {v!r}")
        fanout, height = int(fanout), int(height)
        n = height if fanout == 1 else (fanout**height - 1) // (fanout - 1)
        if n > 2**31:
            raise HierarchyError(f"a complete tree with fanout {fanout} and height {height} has {n} nodes; too large")
        parent = np.empty(n, np.int64)
        parent[0] = -1
        parent[1:] = (np.arange(1, n, dtype=np.int64) - 1) // fanout
        return cls(parent, level_names=level_names, _check=False)

    @classmethod
    def from_geoids(cls, geoids: Any, levels: Mapping[str, int], *, root: str = "total") -> Tree:
        """The geography that a public list of unit codes defines by prefix lengths.

        Census files identify a unit by a GEOID whose prefixes are its ancestors' codes
        (2020: State 2 digits, County 5, Tract 11, Block group 12, Block 15). The list of
        the finest units (every block, empty ones included: it is public) defines the tree;
        a node at each level is one distinct prefix of that length, labelled by it.

        Parameters
        ----------
        geoids : sequence of str
            The codes of the finest units, as text (a number loses its leading zeros), all
            of the last level's length, each once.
        levels : mapping of str to int
            Level name to prefix length, top-down, strictly increasing; the last is the
            codes' full length.
        root : str, default "total"
            The root level's name (its one node is labelled with it).

        Returns
        -------
        Tree
            Labelled by the prefixes; levels ``[root, *levels]``.

        Examples
        --------
        >>> import hierdp
        >>> t = hierdp.Tree.from_geoids(["56001", "56003", "01001"], {"state": 2, "county": 5})
        >>> t.n_nodes, list(t.level_labels(1))
        (6, ['01', '56'])
        """
        codes, names, lengths = _geoid_codes(geoids, levels)
        parent: list[np.ndarray] = [np.full(1, -1, np.int64)]
        labels: list[Any] = [np.array([root], dtype=object)]
        above = np.zeros(codes.size, np.int64)  # each unit's ancestor at the level above (its node id)
        start = 1
        for n in lengths:
            uniq, inv = np.unique(codes.str[:n].to_numpy(dtype=object), return_inverse=True)
            par = np.zeros(uniq.size, np.int64)
            par[inv] = above
            parent.append(par)
            labels.append(uniq)
            above = start + inv.astype(np.int64)
            start += uniq.size
        return cls.from_parent(np.concatenate(parent), labels=list(np.concatenate(labels)),
                               level_names=[root, *names])

    @classmethod
    def from_frame(cls, df: pd.DataFrame, levels: Sequence[str], domains: Any = None, *,
                   root: str = "total") -> Tree:
        """The public structure of ``levels`` with their declared ``domains``.

        The structure comes from the ``declared`` decomposition (see
        :mod:`hierdp.decompositions.declared` for the domain forms), looked up in the plugin
        registry. Only the structure is returned; counts are computed by ``df.dptree(...)``.

        Parameters
        ----------
        df : pandas.DataFrame
            Read only for levels whose domain is ``"observed"``.
        levels : sequence of str
            The level columns, top-down.
        domains : mapping, DataFrame or "observed", optional
            The public structure, as in ``df.dptree``.
        root : str, default "total"
            The root level's name.

        Returns
        -------
        Tree
        """
        from hierdp import registry

        tree: Tree = registry.create("decomposition", "declared", levels=levels, domains=domains,
                                     root=root).decompose(df).tree
        return tree

    # ------------------------------------------------------------------ internal arrays
    @cached_property
    def internal(self) -> InternalArrays:
        """The read-only internal-order arrays (parent, depth, children, levels, ...) for
        kernels and plugins; see :class:`InternalArrays`."""
        return InternalArrays(self)

    @cached_property
    def _depth(self) -> np.ndarray:
        return _readonly(K.internal_depths(self._parent))

    @cached_property
    def _height(self) -> np.ndarray:
        return _readonly(K.internal_heights(self._parent))

    @cached_property
    def _n_children(self) -> np.ndarray:
        return _readonly(np.bincount(self._parent[1:], minlength=self.n_nodes).astype(np.int64))

    @cached_property
    def _child_ptr(self) -> np.ndarray:
        ptr = np.zeros(self.n_nodes + 1, np.int64)
        np.cumsum(self._n_children, out=ptr[1:])
        return _readonly(ptr)

    @cached_property
    def _child_idx(self) -> np.ndarray:
        """Children of internal node v: ``_child_idx[_child_ptr[v]:_child_ptr[v+1]]`` (ascending)."""
        order = np.argsort(self._parent[1:], kind="stable") + 1
        return _readonly(order.astype(np.int64))

    @cached_property
    def _leafcount(self) -> np.ndarray:
        """Number of leaves in the subtree of each internal node."""
        leaf = (self._n_children == 0).astype(np.int64)
        return _readonly(K.subtree_sums(self._parent, self._depth, leaf))

    @cached_property
    def _height_ptr(self) -> np.ndarray:
        """Height class h occupies internal slice ``[_height_ptr[h+1], _height_ptr[h])``... see height_slice."""
        h = self._height
        # h is non-increasing; boundaries where it changes
        H = int(h[0])
        starts = np.searchsorted(-h, -np.arange(H, 0, -1), side="left")
        return _readonly(np.append(starts, self.n_nodes).astype(np.int64))

    def height_slice(self, h: int) -> slice:
        """Internal slice of the nodes of height ``h`` (1 = leaves that are... of height 1)."""
        H = self.height
        if not 1 <= h <= H:
            raise HierarchyError(f"height must be in 1..{H}, got {h}")
        ptr = self._height_ptr
        return slice(int(ptr[H - h]), int(ptr[H - h + 1]))

    @cached_property
    def _level_index(self) -> tuple[slice | np.ndarray, ...]:
        """For each depth, a slice (when contiguous) or an index array of internal nodes."""
        d = self._depth
        out = []
        order = None
        if np.all(d[1:] >= d[:-1]):
            bounds = np.searchsorted(d, np.arange(self.n_levels + 1), side="left")
            return tuple(slice(int(bounds[i]), int(bounds[i + 1])) for i in range(self.n_levels))
        order = np.argsort(d, kind="stable")
        bounds = np.searchsorted(d[order], np.arange(self.n_levels + 1), side="left")
        for i in range(self.n_levels):
            out.append(_readonly(order[bounds[i]:bounds[i + 1]]))
        return tuple(out)

    def level_nodes(self, level: int | str, internal: bool = False) -> np.ndarray:
        """Node ids at a level (depth or level name); external ids unless ``internal``."""
        d = self.level_depth(level)
        idx = self._level_index[d]
        ids = np.arange(idx.start, idx.stop) if isinstance(idx, slice) else np.asarray(idx)
        if internal or self._perm is None:
            return ids
        return np.sort(self._perm[ids])

    def level_depth(self, level: int | str) -> int:
        """Depth of a level given by name or depth."""
        if isinstance(level, (int, np.integer)) and not isinstance(level, bool):
            if 0 <= level < self.n_levels:
                return int(level)
            raise HierarchyError(f"level depth {level} out of range 0..{self.n_levels - 1}")
        try:
            return self._level_names.index(str(level))
        except ValueError:

            raise HierarchyError(expected_one_of("level", level, self._level_names)) from None

    # ------------------------------------------------------------------ numbering
    @property
    def is_internal_order(self) -> bool:
        """True when the external numbering already is descending-height order."""
        return self._perm is None

    def to_internal(self, values: np.ndarray) -> np.ndarray:
        """Reorder an external-indexed array (first axis) to internal order (no copy if identical)."""
        values = np.asarray(values)
        self._check_len(values)
        return values if self._perm is None else values[self._perm]

    def to_external(self, values: np.ndarray) -> np.ndarray:
        """Reorder an internal-indexed array (first axis) to external order (no copy if identical)."""
        values = np.asarray(values)
        self._check_len(values)
        return values if self._inv is None else values[self._inv]

    def _check_len(self, values: np.ndarray) -> None:
        if values.ndim == 0 or values.shape[0] != self.n_nodes:

            raise DataError(
                f"expected an array with one row per node ({self.n_nodes}), got shape {values.shape}"
            )

    def _ext(self, internal_ids: np.ndarray) -> np.ndarray:
        return internal_ids if self._perm is None else self._perm[internal_ids]

    def _int(self, external_ids: np.ndarray) -> np.ndarray:
        return external_ids if self._inv is None else self._inv[external_ids]

    # ------------------------------------------------------------------ public properties
    @property
    def n_nodes(self) -> int:
        return int(self._parent.size)

    @cached_property
    def n_leaves(self) -> int:
        return int(np.count_nonzero(self._n_children == 0))

    @property
    def height(self) -> int:
        """Height of the root (leaves have height 1): the number of levels of a complete tree."""
        return int(self._height[0])

    @property
    def n_levels(self) -> int:
        """Number of depths (max depth + 1)."""
        return len(self._level_names)

    @property
    def level_names(self) -> tuple[str, ...]:
        return self._level_names

    @property
    def provenance(self) -> dict[str, str]:
        """Where each level's domain came from (declared list, per-parent, observed, ...)."""
        return dict(self._provenance)

    @cached_property
    def parent(self) -> np.ndarray:
        """Parent of each node (external numbering; the root has -1)."""
        if self._perm is None:
            return self._parent
        p = self._parent[self._inv]
        return _readonly(np.where(p >= 0, self._perm[np.maximum(p, 0)], -1))

    @cached_property
    def depth(self) -> np.ndarray:
        return _readonly(self.to_external(self._depth).copy()) if self._perm is not None else self._depth

    @cached_property
    def heights(self) -> np.ndarray:
        """Height of each node (Def. 2: leaves 1)."""
        return _readonly(self.to_external(self._height).copy()) if self._perm is not None else self._height

    @cached_property
    def n_children(self) -> np.ndarray:
        return _readonly(self.to_external(self._n_children).copy()) if self._perm is not None else self._n_children

    @cached_property
    def leaves(self) -> np.ndarray:
        """Leaf node ids (external), ascending."""
        return _readonly(np.sort(self._ext(np.flatnonzero(self._n_children == 0))))

    @property
    def root(self) -> int:
        return int(self._ext(np.array([0]))[0])

    def children(self, node: int) -> np.ndarray:
        """Children of ``node`` (external ids, ascending)."""
        v = self._int_node(node)
        kids = self._child_idx[self._child_ptr[v]:self._child_ptr[v + 1]]
        return np.sort(self._ext(kids))

    def _int_node(self, node: int) -> int:
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)) or not 0 <= node < self.n_nodes:
            raise HierarchyError(f"node must be an integer in 0..{self.n_nodes - 1}, got {node!r}")
        return int(self._int(np.array([node]))[0])

    # ------------------------------------------------------------------ labels
    @property
    def has_labels(self) -> bool:
        return self._codes is not None

    @property
    def _labels(self) -> tuple[pd.Index, ...]:
        # the per-level label indexes of a labelled tree (set whenever _codes is; a cast, no check)
        return cast("tuple[pd.Index, ...]", self._level_labels)

    def level_labels(self, level: int | str) -> pd.Index:
        """The label values (domain) of a level; the root level has ``[root name]``."""
        d = self.level_depth(level)
        if self._level_labels is None:
            return cast(pd.Index, pd.Index(self.level_nodes(d)))
        return self._labels[d]

    def path(self, node: int) -> tuple[Hashable, ...]:
        """Labels from depth 1 down to ``node`` (external id); ``()`` for the root."""
        v = self._int_node(node)
        out: list[Hashable] = []
        while v > 0:
            d = int(self._depth[v])
            out.append(self._labels[d][self._codes[v]] if self._codes is not None
                       else int(self._ext(np.array([v]))[0]))
            v = int(self._parent[v])
        return tuple(reversed(out))

    def node_id(self, *path: Hashable) -> int:
        """External id of the node reached by following ``path`` labels from the root."""
        if len(path) == 1 and isinstance(path[0], tuple):
            path = path[0]
        v = 0
        for d, lab in enumerate(path, start=1):
            if d >= self.n_levels:
                raise HierarchyError(f"path {path!r} is deeper than the tree "
                                     f"({self.n_levels - 1} levels below the root)")
            kids = self._child_idx[self._child_ptr[v]:self._child_ptr[v + 1]]
            if self._codes is None:
                match = kids[self._ext(kids) == lab]
            else:
                idx = self._labels[d]
                code = idx.get_indexer(cast(Any, [lab]))[0]  # a list, as pandas takes it (the stubs want an Index)
                match = kids[self._codes[kids] == code] if code >= 0 else kids[:0]
            if match.size != 1:

                names = (list(self._labels[d][self._codes[kids]]) if self._codes is not None
                         else list(self._ext(kids)))
                raise HierarchyError(
                    f"no node {lab!r} at level {self._level_names[d]!r} under {path[:d - 1]!r}"
                    f"{did_you_mean(str(lab), map(str, names))}"
                )
            v = int(match[0])
        return int(self._ext(np.array([v]))[0])

    def label_columns(self) -> dict[str, pd.Categorical | np.ndarray]:
        """Per level (depth >= 1), each node's ancestor label at that level, ``<NA>`` below
        the node's level; internal order. Unlabelled trees get a single ``node`` column."""
        cols: dict[str, Any] = {}
        if self._codes is None:
            return {"node": self._ext(np.arange(self.n_nodes))}
        for d in range(1, self.n_levels):
            codes = K.ancestor_codes_at(self._parent, self._depth, self._codes, d)
            cols[self._level_names[d]] = pd.Categorical.from_codes(codes, categories=self._labels[d])
        return cols

    # ------------------------------------------------------------------ values
    def aggregate(self, leaf_values: np.ndarray) -> np.ndarray:
        """Node values (external order) from values on ``tree.leaves`` (in that order).

        ``leaf_values`` has shape ``(n_leaves,)`` or ``(n_leaves, k)``; every node gets the
        sum over the leaves of its subtree (one bottom-up pass).
        """
        lv = np.asarray(leaf_values)
        if lv.ndim not in (1, 2) or lv.shape[0] != self.n_leaves:
            raise HierarchyError(
                f"leaf_values must have shape ({self.n_leaves},) or ({self.n_leaves}, k), got {lv.shape}"
            )
        dtype = (np.result_type(lv.dtype, np.int64) if np.issubdtype(lv.dtype, np.integer) or lv.dtype == bool
                 else np.float64)
        if dtype == np.float64 and lv.dtype != np.float64 and not np.issubdtype(lv.dtype, np.floating) \
                and lv.dtype != bool:  # uint64 mixed with int64: no exact common integer type
            raise HierarchyError(f"leaf_values of dtype {lv.dtype} cannot be summed exactly; pass int64 values")
        if np.issubdtype(dtype, np.integer) and lv.size:
            # no subtree sum overflows int64 when the sum of magnitudes fits (checked exactly near the edge)
            mag = float(np.sum(np.abs(lv.astype(np.float64))))
            if mag >= 2.0 ** 62 and sum(abs(int(x)) for x in lv.ravel().tolist()) > np.iinfo(np.int64).max:
                raise HierarchyError("the sums of leaf_values overflow int64 (the largest integer is 2**63 - 1); "
                                     "pass smaller values or floats")
        full = np.zeros((self.n_nodes,) + lv.shape[1:], dtype=dtype)
        full[self._int(self.leaves)] = lv
        return self.to_external(self._sum_up(full, consume=True))

    def _sum_up(self, values: np.ndarray, consume: bool = False) -> np.ndarray:
        """Internal-order subtree sums of internal-order node values (leaf values elsewhere 0).

        Large trees sum one height class at a time, each cut into pieces at parent
        boundaries that ``hierdp.get_threads()`` threads add up at once (the same sums,
        in the same order per parent, as the one-thread loop). With ``consume`` the
        caller hands ``values`` over: a large C-contiguous, writeable array is summed in
        place and returned, with no new output (whose fresh pages the OS would zero) and
        no copy, so the leaves are only read."""
        from hierdp._kernels.tree_pieces import PARALLEL_MIN, PIECE, block_groups, tree_pieces

        if self.n_nodes < PARALLEL_MIN:
            return K.subtree_sums(self._parent, self._depth, values)
        from hierdp._kernels.memory import large_empty
        from hierdp._kernels.threads import get_threads, prefault, run_pieces, spans

        pieces = tree_pieces(self)
        values = np.ascontiguousarray(values)
        in_place = consume and values.flags.writeable
        parent = self._parent_index()
        if in_place:
            out = values
        else:
            out = prefault(large_empty(values.shape, values.dtype))  # then the copy in pieces (a serial copy: 1.2x)
            run_pieces(lambda r: K.copy_range(values, out, r[0], r[1]), spans(pieces.n1, PIECE))
        copy = not in_place  # the leaves' rows: copied as they are added, or already there
        classes = pieces.classes  # the last one is the root alone: it adds into no parent
        bounds = pieces.block_bounds
        if values.ndim == 1 and pieces.long_runs:
            starts, pars = pieces.run_starts, pieces.run_parents
            run_pieces(lambda r: K.copy_sum_up_runs(starts, pars, values, out, r[0], r[1], copy), pieces.run_cuts)
        elif values.ndim == 1 and bounds is not None:  # subtree blocks, leaves up to below block_height
            run_pieces(lambda g: K.sum_up_blocks(parent, values, out, bounds, g[0], g[1], copy),
                       block_groups(pieces, get_threads()))
            classes = pieces.above_blocks
        else:
            run_pieces(lambda r: K.sum_up_range(parent, values, out, r[0], r[1], copy), pieces.leaves)
        for cls in classes[:-1]:
            run_pieces(lambda r: K.sum_up_range(parent, out, out, r[0], r[1], False), cls)
        return out

    def _parent_index(self) -> np.ndarray:
        """The internal parents as the compiled passes read them: int32 when the tree fits,
        staggered in its page (:func:`hierdp._kernels.memory.narrow_index`: fewer bytes, and no
        4 KiB aliasing with the values a pass adds into); read-only, one copy per tree,
        shared by aggregation, BLUE and GMC."""
        parent = self._cache.get(_PARENT32_KEY)
        if parent is None:
            from hierdp._kernels.memory import narrow_index

            parent = self._cache[_PARENT32_KEY] = narrow_index(self._parent, 37)
        return parent

    def is_consistent(self, values: np.ndarray, rtol: float = 1e-9, atol: float = 1e-6) -> bool:
        """Whether every internal node equals the sum of its children (external order)."""
        v = self.to_internal(np.asarray(values, dtype=np.float64))
        s = np.zeros_like(v)
        np.add.at(s, self._parent[1:], v[1:])
        internal = self._n_children > 0
        return bool(np.allclose(s[internal], v[internal], rtol=rtol, atol=atol))

    def generation_matrix(self, *args: Any, **kwargs: Any) -> Any:
        """The Generation Matrix (Cai et al., Def. 7) as ``scipy.sparse``; see :mod:`hierdp.generation_matrix`."""
        from hierdp import generation_matrix as gm

        return gm.generation_matrix(self, *args, **kwargs)

    # ------------------------------------------------------------------ misc
    @property
    def cache(self) -> dict[str, Any]:
        """Per-tree cache for structure-only quantities (e.g. GMC weights); never private data."""
        return self._cache

    def __len__(self) -> int:
        return self.n_nodes

    def __repr__(self) -> str:
        names = [str(n) for n in self._level_names]
        lv = " > ".join(names) if len(names) <= 8 else (
            " > ".join(names[:3]) + " > … > " + " > ".join(names[-2:]) + f" ({len(names):,} levels)")
        return f"<Tree: {self.n_nodes:,} nodes, {self.n_leaves:,} leaves, height {self.height}; levels {lv}>"

    def __eq__(self, other: object) -> bool:
        """Same structure, node numbering, level names and node labels (so that arrays
        indexed by one tree mean the same nodes in the other)."""
        if not isinstance(other, Tree):
            return NotImplemented
        if self is other:
            return True
        if (self.n_nodes != other.n_nodes or self._level_names != other._level_names
                or not np.array_equal(self.parent, other.parent) or self.has_labels != other.has_labels):
            return False
        if not self.has_labels:
            return True
        return (all(a.equals(b) for a, b in zip(self._labels, other._labels))
                and np.array_equal(self.to_external(cast(np.ndarray, self._codes)),
                                   other.to_external(cast(np.ndarray, other._codes))))

    def __hash__(self) -> int:  # consistent with __eq__: equal trees share size and level names
        return hash((self.n_nodes, self._level_names))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_rebuild, (self._parent, self._perm, self._level_names, self._level_labels, self._codes,
                           self._provenance))


def _rebuild(parent: np.ndarray, perm: np.ndarray | None, level_names: Any, level_labels: Any,
             codes: np.ndarray | None, provenance: dict[str, str] | None) -> Tree:
    return Tree(parent, perm=perm, level_names=level_names, level_labels=level_labels, codes=codes,
                provenance=provenance, _check=False)


def _check_internal_order(parent: np.ndarray) -> None:
    n = parent.size
    if n == 0 or parent[0] != -1:
        raise HierarchyError("internal parent array must start with the root (-1)")
    if n > 1 and (np.any(parent[1:] >= np.arange(1, n)) or np.any(parent[1:] < 0)):
        raise HierarchyError("internal parent array must number every parent before its children")
    h = K.internal_heights(parent)
    if np.any(h[1:] > h[:-1]):
        raise HierarchyError("internal parent array is not in descending order of height")


def _descending_height_order(parent: np.ndarray, depth: np.ndarray, height: np.ndarray) -> np.ndarray:
    """Permutation (internal -> external) sorting by (-height, depth, rank of parent, id)."""
    n = parent.size
    ids = np.arange(n)
    coarse = np.lexsort((ids, depth, -height))
    h_sorted = height[coarse]
    # fast path: parents already in increasing rank within the coarse order
    rank = np.empty(n, np.int64)
    rank[coarse] = ids
    pr = np.where(parent >= 0, rank[np.maximum(parent, 0)], -1)
    key_ok = True
    if n > 1:
        pc = pr[coarse]
        same = (h_sorted[1:] == h_sorted[:-1]) & (depth[coarse][1:] == depth[coarse][:-1])
        key_ok = not np.any(same & (pc[1:] < pc[:-1]))
    if key_ok:
        return coarse
    # refine class by class (parents live in earlier classes, so their ranks are final)
    bounds = np.flatnonzero(np.diff(h_sorted)) + 1
    starts = np.concatenate(([0], bounds))
    stops = np.concatenate((bounds, [n]))
    order = coarse.copy()
    for a, b in zip(starts, stops):
        nodes = order[a:b]
        par = parent[nodes]
        prank = np.where(par >= 0, rank[np.maximum(par, 0)], -1)
        sub = nodes[np.lexsort((nodes, prank, depth[nodes]))]
        order[a:b] = sub
        rank[sub] = np.arange(a, b)
    return order


def _geoid_codes(geoids: Any, levels: Mapping[str, int]) -> tuple[pd.Index, list[str], list[int]]:
    """The checked GEOID list (text, one length, each once) and the levels' names and prefix
    lengths (positive, strictly growing, the last the codes' length): one line per problem."""
    names = list(levels) if isinstance(levels, Mapping) else []
    if not names:
        raise HierarchyError("levels must map each level's name to its prefix length, e.g. "
                             "{'state': 2, 'county': 5}")
    lengths: list[int] = []
    for name in names:
        n = levels[name]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise HierarchyError(f"level {name!r}: a prefix length is a positive integer, got {n!r:.40}")
        if lengths and n <= lengths[-1]:
            raise HierarchyError(f"level {name!r}: prefix length {n} does not nest under the level above "
                                 f"({lengths[-1]}); lengths grow strictly from the top down")
        lengths.append(int(n))
    raw = geoids.tolist() if isinstance(geoids, (np.ndarray, pd.Series, pd.Index)) else list(geoids)
    if not raw:
        raise HierarchyError("the list of GEOIDs is empty; give every unit of the finest level")
    bad = next((c for c in raw if not isinstance(c, str)), None)
    if bad is not None:
        raise HierarchyError(f"GEOIDs must be text, got {type(bad).__name__} {bad!r:.40} (a number loses its "
                             "leading zeros): read the file with dtype=str")
    codes = pd.Index(raw, dtype=object)
    width = codes.str.len()
    wrong = width != lengths[-1]
    if wrong.any():
        raise HierarchyError(f"{int(wrong.sum()):,} GEOID(s) are not {lengths[-1]} characters long (the last "
                             f"level's prefix length), e.g. {codes[wrong][0]!r:.40}")
    dup = codes.duplicated()
    if dup.any():
        raise HierarchyError(f"GEOID {codes[dup][0]!r:.40} appears more than once; give each unit once")
    return codes, names, lengths


def geoid_frame(geoids: Any, levels: Mapping[str, int]) -> pd.DataFrame:
    """The public paths of a GEOID list: one row per code, one column per level holding its
    prefix of that level's length (:meth:`Tree.from_geoids`'s checks, the same errors);
    a door's ``domains=`` and the spec's ``hierarchy.geoid``."""
    codes, names, lengths = _geoid_codes(geoids, levels)
    return pd.DataFrame({name: codes.str[:n].to_numpy(dtype=object) for name, n in zip(names, lengths, strict=True)})
