"""Best linear unbiased estimation on trees (Dawson et al. 2023, Alg. 1-2, Theorem 8)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hierdp._kernels import jit as _jit
from hierdp._kernels.jit import for_size
from hierdp._kernels.kernel_common import aligned_empty as _aligned_empty
from hierdp._kernels.threads import get_threads, run_pieces, zero_in_pieces
from hierdp._kernels.tree_pieces import PARALLEL_MIN, Pieces, block_groups, paired, tree_pieces
from hierdp.errors import DataError
from hierdp.postprocessors import _blue_kernels as BK
from hierdp.postprocessors import _blue_small
from hierdp.postprocessors.base import Estimate, PostProcessor, node_values, node_variance

if TYPE_CHECKING:
    from hierdp.tree import Tree

__all__ = ["BLUE", "blue"]


_BAD_INPUT = {
    1: "values contain NaN or infinity; mark unmeasured nodes with variance=inf instead",
    2: "variances must be non-negative (inf marks an unmeasured node)",
}
_STRUCT_KEY = "blue.structure"
#: inputs of SMALL_NUMPY_MIN to ``hierdp._kernels.jit.SMALL_INPUT`` values on trees of at most
#: ``_blue_small.MAX_CLASSES`` height classes run as numpy passes (False: the kernels); below
#: SMALL_NUMPY_MIN the interpreted kernel (~10 µs a node) is cheaper than ~0.3 ms of numpy calls
SMALL_NUMPY = True
SMALL_NUMPY_MIN = 32


def _as_2d_pair(tree: Tree, values: np.ndarray, variance: np.ndarray | None):
    """Shape checks; returns ``(y, y2, v2, variance shape)`` with y2, v2 C-contiguous (n, k), (n, kv)."""
    y = node_values(tree, values)
    y2 = np.ascontiguousarray(y.reshape(tree.n_nodes, -1))
    if variance is None:
        raise DataError("BLUE needs per-node variances; pass variance= (inf for unmeasured nodes)")
    v = node_variance(tree, variance, y.shape)
    v2 = np.ascontiguousarray(v.reshape(tree.n_nodes, -1))
    return y, y2, v2, v.shape


#: Use :func:`hierdp.postprocessors._blue_kernels.blue_flat_1d` when more than this
#: fraction of nodes start a fan-out different from the previous internal node's (each change costs the per-parent
#: kernel a branch miss per pass). Measured on this project's 2-core VM (ratios to a numpy
#: pass): random fan-out 2-5 (0.23 changes per node) 9.3x per-parent vs 7.4x flat; binary
#: (0) 6.0x vs 7.2x; census-like (0.03) 5.9x vs 7.7x.
FLAT_IRREGULARITY = 0.1


@dataclass
class _BlueStructure:
    """Structure arrays of the one-histogram kernels (public structure only)."""

    n1: int
    first: np.ndarray                 # see BK.blue_structure
    cidx: np.ndarray
    flat_parent: np.ndarray | None    # int32/64 parents when the flat kernel is chosen
    _pool: list = field(default_factory=list, repr=False)

    def scratch(self) -> np.ndarray:
        """An (n1, 2) work buffer for the flat kernel, re-used across calls (no page faults)."""
        try:
            return self._pool.pop()
        except IndexError:
            return _aligned_empty((self.n1, 2), 13)


def _check_exact(y2: np.ndarray, v2: np.ndarray, x2: np.ndarray) -> None:
    """Nodes known exactly (variance 0) keep their value in a consistent system; if the
    estimate moved one, the exact values contradict each other (e.g. an exact parent that
    is not the sum of its exact children), which no consistent estimate can satisfy."""
    exact = np.broadcast_to(v2 == 0.0, x2.shape)
    yx = np.broadcast_to(y2, x2.shape)[exact]
    tol = 1e-9 * (1.0 + float(np.abs(yx).max(initial=0.0)))
    if np.any(np.abs(x2[exact] - yx) > tol):
        raise DataError("nodes known exactly (variance 0) contradict each other: an exact node differs from "
                        "the sum of the exact nodes below it; correct those values or give them a positive "
                        "variance")


def _structure(tree: Tree) -> _BlueStructure:
    st = tree.cache.get(_STRUCT_KEY)  # immutable structure arrays; a racing rebuild is harmless
    if st is None:
        n1, first, cidx = BK.blue_structure(tree.internal.parent, tree.internal.n_children)
        fan = tree.internal.n_children[:n1]
        changes = int(np.count_nonzero(fan[1:] != fan[:-1])) if n1 > 1 else 0
        flat_parent = None
        # from PARALLEL_MIN nodes on, the flat kernel on every tree it applies to: its passes
        # cut into pieces for threads (the per-parent kernel is one loop)
        if n1 > 0 and (changes > FLAT_IRREGULARITY * tree.n_nodes or tree.n_nodes >= PARALLEL_MIN):
            par = tree.internal.parent_index  # int32 when the tree fits, as ``first``
            leaf_par = par[n1:]
            starts = np.flatnonzero(np.diff(leaf_par, prepend=-1))
            # the flat kernel needs each parent's leaf children adjacent (one run each): true
            # of the order hierdp builds (ties by depth, then parent), not always of one
            # passed in as internal
            if np.bincount(leaf_par[starts], minlength=n1).max() == 1:
                flat_parent = par
        st = _BlueStructure(n1, first, cidx, flat_parent)
        tree.cache[_STRUCT_KEY] = st
    return st


def _blue_flat_pieces(pieces: Pieces, par: np.ndarray, y: np.ndarray, var: np.ndarray, x: np.ndarray,
                      xv: np.ndarray, W: np.ndarray) -> int:
    """:func:`hierdp.postprocessors._blue_kernels.blue_flat_1d`, its passes run piece by
    piece on ``hierdp.get_threads()`` threads (same return codes, same bits)."""
    zero_in_pieces((W,), pieces.above_leaf_parents)  # the leaf pass stores every other node's sums
    runs = pieces.long_runs  # leaf passes run by run of siblings, else leaf by leaf
    starts, pars = pieces.run_starts, pieces.run_parents
    bounds = pieces.block_bounds
    threads = get_threads()
    # by groups of subtree blocks, then the classes above them; on one thread class by
    # class, slightly faster there (the same bits)
    blocks = not runs and bounds is not None and threads > 1
    if blocks:
        groups = block_groups(pieces, threads)
        above = pieces.above_blocks
        flags = run_pieces(lambda g: BK.up_blocks(par, y, var, x, xv, W, bounds, g[0], (g[0] + g[1]) // 2, g[1]),
                           groups)
    elif runs:
        above = pieces.classes
        flags = run_pieces(lambda r: BK.runs_leaves_up(starts, pars, y, var, W, r[0], r[1]), pieces.run_cuts)
    else:
        above = pieces.classes
        flags = run_pieces(lambda r: BK.flat_leaves_up(par, y, var, W, *r), paired(pieces.leaves))
    odd = sum(flags)
    for cls in above:
        odd += sum(run_pieces(lambda r: BK.flat_internal_up(par, y, var, x, xv, W, r[0], r[1]), cls))
    if odd:  # which kind: an error, or nodes the per-parent kernel handles
        return int(BK.odd_code(y, var))
    for cls in reversed(above):
        run_pieces(lambda r: BK.flat_internal_down(par, x, xv, W, r[0], r[1]), cls)
    if blocks:
        run_pieces(lambda g: BK.down_blocks(par, y, var, x, xv, W, bounds, g[0], g[1]), groups)
    elif runs:
        run_pieces(lambda r: BK.runs_leaves_down(starts, pars, y, var, x, xv, W, r[0], r[1]), pieces.run_cuts)
    else:
        run_pieces(lambda r: BK.flat_leaves_down(par, y, var, x, xv, W, r[0], r[1]), pieces.leaves)
    return 0


def _kernels_for(tree: Tree, y2: np.ndarray, v2: np.ndarray) -> tuple:
    """The kernels :func:`blue` runs on these values when it does not take its numpy passes."""
    if y2.shape[1] != 1 or v2.shape[1] != 1:
        return BK.check_values_variances, BK.blue_2d
    return (BK.blue_flat_1d,) if _structure(tree).flat_parent is not None else (BK.blue_1d,)


def blue(tree: Tree, values: np.ndarray, variance: np.ndarray) -> Estimate:
    """Two-pass BLUE over internal-order arrays.

    Returns the weighted least-squares estimate of all node counts subject to
    consistency (parent = sum of children), with inverse-variance weights, and the exact
    variance of each estimate (diagonal of the estimator's covariance). Nodes with
    infinite variance carry no weight; where the data leave a node's value undetermined
    its residual share is split in proportion to leaf counts and its variance is ``inf``.
    Runs in O(n k): two passes of a compiled loop. For one histogram with one variance
    per node the kernels also validate the input: :func:`hierdp.postprocessors._blue_kernels.blue_1d` (loops
    over each parent's children) or, on trees whose fan-out keeps changing,
    :func:`hierdp.postprocessors._blue_kernels.blue_flat_1d` (loops over nodes only).
    """
    y, y2, v2, vshape = _as_2d_pair(tree, values, variance)
    n = tree.n_nodes
    if (SMALL_NUMPY and SMALL_NUMPY_MIN <= y2.size <= _jit.SMALL_INPUT and _blue_small.usable(tree)
            and not _jit.prefer_compiled(*_kernels_for(tree, y2, v2))):
        # a small tree: numpy passes by height class (the kernels would run interpreted)
        if not np.isfinite(y2).all():
            raise DataError(_BAD_INPUT[1])
        if not (v2 >= 0.0).all():
            raise DataError(_BAD_INPUT[2])
        x, xv = _blue_small.blue_small(tree, y2, v2)
        if np.any(v2 == 0.0):
            _check_exact(y2, v2, x)
        return Estimate(values=x.reshape(y.shape), variance=xv.reshape(vshape), info={"method": "blue"})
    if y2.shape[1] != 1 or v2.shape[1] != 1:
        bad = for_size(BK.check_values_variances, y2.size)(y2, v2)  # one fused pass, no temporaries
        if bad:
            raise DataError(_BAD_INPUT[bad])
        x = np.empty_like(y2)
        xv = np.empty_like(v2)
        for_size(BK.blue_2d, y2.size)(tree.internal.parent, tree.internal.n_children, tree.internal.leafcount, y2, v2,
                                      x, xv)
        if np.any(v2 == 0.0):
            _check_exact(y2, v2, x)
        return Estimate(values=x.reshape(y.shape), variance=xv.reshape(vshape), info={"method": "blue"})
    st = _structure(tree)
    y1, v1 = y2.reshape(n), v2.reshape(n)
    x = _aligned_empty((n,), 3)
    xv = _aligned_empty((n,), 7)
    bad = 3
    if st.flat_parent is not None:
        work = st.scratch()
        try:
            if n >= PARALLEL_MIN:
                bad = _blue_flat_pieces(tree_pieces(tree), st.flat_parent, y1, v1, x, xv, work)
            else:
                bad = for_size(BK.blue_flat_1d, n)(st.flat_parent, st.n1, y1, v1, x, xv, work)
        finally:
            st._pool.append(work)
    if bad == 3:  # the per-parent kernel (also handles uninformative or exact children)
        bad = for_size(BK.blue_1d, n)(st.first, st.cidx, tree.internal.leafcount, st.n1, y1, v1, x, xv)
    if bad == 5:
        _check_exact(y2, v2, x.reshape(n, 1))
        bad = 0
    if bad:
        raise DataError(_BAD_INPUT[bad])
    return Estimate(values=x.reshape(y.shape), variance=xv.reshape(vshape), info={"method": "blue"})


class BLUE(PostProcessor):
    """Best linear unbiased estimate (two-pass, Dawson et al. Alg. 2): consistent, minimum variance."""

    name = "blue"
    requires_variance = True
    consistent = True
    linear = True
    split_mode = "gls"  # the weighted least-squares estimate: split exactly (hierdp.subtrees)

    def apply(self, tree: Tree, estimate: Estimate) -> Estimate:
        return blue(tree, estimate.values, estimate.variance)
