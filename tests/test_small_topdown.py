"""Top-down ``nonneg`` and ``round`` on small trees: the numpy passes
(``postprocessors/_topdown_small.py``) against the compiled kernels of
``postprocessors/_topdown_kernels.py`` (issue 30 item 5).

``round`` must give the kernel's integers exactly (ties included: half-integer inputs with
equal variances, where the kernel's heap breaks ties by the lowest child index), ``nonneg``
its values to round-off; on trees of many shapes, k = 1 and k > 1 cells, variances per node
and per cell, exact (0) and unmeasured (inf) nodes, ``fixed_root`` and ``totals``. A brute
force over every integer split checks the integer step on its own.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import hierdp
from hierdp._kernels import jit
from hierdp.errors import DataError
from hierdp.postprocessors import _topdown_small as TS
from hierdp.postprocessors import topdown as TD
from tests.helpers import random_parent


def _shapes():
    rng = np.random.default_rng(5)
    yield "one node", hierdp.Tree.from_parent([-1])
    yield "root and leaf", hierdp.Tree.from_parent([-1, 0])
    yield "chain of 12", hierdp.Tree.from_parent(np.arange(-1, 11))
    yield "star of 70", hierdp.Tree.from_parent(np.r_[-1, np.zeros(69, np.int64)])
    yield "complete 3-ary, depth 6", hierdp.Tree.complete(3, 6)
    for i, n in enumerate((9, 60, 300)):
        yield f"random {n}", hierdp.Tree.from_parent(random_parent(np.random.default_rng(20 + i), n))
    # unequal fan-out: one parent of 40 children, others of 1 to 5, leaves at many depths
    par = np.r_[-1, 0, 0, 0, np.ones(40, np.int64), rng.integers(2, 44, 30)]
    yield "unequal fan-out", hierdp.Tree.from_parent(par)


SHAPES = list(_shapes())


def _compiled(monkeypatch, fn, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(jit, "SMALL_INPUT", -1)
        m.setattr(TD, "SMALL_NUMPY", False)
        return fn(*args, **kw)


def _numpy(monkeypatch, fn, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(jit, "SMALL_INPUT", 1 << 14)
        m.setattr(TD, "SMALL_NUMPY", True)
        m.setattr(TD, "SMALL_NUMPY_MIN", 0)
        calls = []
        real = TS.project_small if fn is TD.topdown_nonneg else TS.integer_small
        m.setattr(TS, real.__name__, lambda *a: calls.append(1) or real(*a))
        out = fn(*args, **kw)
        tree = args[0]
        assert calls or tree.n_nodes == 1, "the numpy path did not run"
        return out


def _inputs(rng, tree, k, kind, per_cell):
    n = tree.n_nodes
    kv = k if per_cell else 1
    var = rng.choice([0.5, 1.0, 2.0, 7.0], (n, kv)) if kind != "equal" else np.ones((n, kv))
    if kind == "inf":
        var[rng.random((n, kv)) < 0.3] = np.inf
    y = rng.normal(3.0, 4.0, (n, k))
    if kind == "equal":  # half-integers and equal variances: ties everywhere
        y = np.round(y * 2) / 2
    return y, var


CASES = [(k, kind, pc) for k in (1, 3) for kind in ("mixed", "inf", "equal") for pc in (False, True)]


@pytest.mark.parametrize("name,tree", SHAPES, ids=[s[0] for s in SHAPES])
@pytest.mark.parametrize("k,kind,per_cell", CASES)
def test_nonneg_and_round_equal_the_compiled_kernels(monkeypatch, name, tree, k, kind, per_cell) -> None:
    rng = np.random.default_rng(abs(hash((name, k, kind, per_cell))) % 2**32)
    y, var = _inputs(rng, tree, k, kind, per_cell)
    shape = (tree.n_nodes,) if k == 1 else (tree.n_nodes, k)
    y, var = y.reshape(shape) if k == 1 else y, var.reshape(-1) if (k == 1 or not per_cell) else var
    want = _compiled(monkeypatch, TD.topdown_nonneg, tree, y, var)
    got = _numpy(monkeypatch, TD.topdown_nonneg, tree, y, var)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * (1 + np.abs(want).max()))
    zw = _compiled(monkeypatch, TD.topdown_round, tree, want, var)
    zg = _numpy(monkeypatch, TD.topdown_round, tree, want, var)
    np.testing.assert_array_equal(zg, zw)
    # the raw, inconsistent input too (round projects it)
    np.testing.assert_array_equal(_numpy(monkeypatch, TD.topdown_round, tree, y, var),
                                  _compiled(monkeypatch, TD.topdown_round, tree, y, var))


@pytest.mark.parametrize("name,tree", SHAPES[3:], ids=[s[0] for s in SHAPES[3:]])
@pytest.mark.parametrize("k", (1, 2))
def test_exact_nodes_and_fixed_root(monkeypatch, name, tree, k) -> None:
    """Known nodes (variance 0, integer, consistent) are kept; ``fixed_root`` is honoured."""
    rng = np.random.default_rng(7)
    n = tree.n_nodes
    truth = tree.aggregate(rng.poisson(4, (tree.n_leaves, k)))
    ti = tree.to_internal(truth).reshape(n, k).astype(float)
    y = ti + rng.normal(0, 2.0, (n, k))
    var = rng.uniform(0.5, 3.0, (n, k))
    ex = rng.random(n) < 0.25
    ex[0] = False
    par = tree.internal.parent
    nkids = np.bincount(par[1:], minlength=n)
    for _ in range(n):  # a parent needs a free child, or is known itself
        more = ex | ((nkids > 0) & (np.bincount(par[1:][~ex[1:]], minlength=n) == 0))
        if (more == ex).all():
            break
        ex = more
    var[ex] = 0.0
    y[ex] = ti[ex]
    root = ti[0] + 5.0  # one per cell, above the known mass
    for kw in ({}, {"fixed_root": root}) if not ex[0] else ({},):
        want = _compiled(monkeypatch, TD.topdown_nonneg, tree, y, var, **kw)
        got = _numpy(monkeypatch, TD.topdown_nonneg, tree, y, var, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(got[ex], ti[ex], atol=1e-9)
        np.testing.assert_array_equal(_numpy(monkeypatch, TD.topdown_round, tree, want, var, **kw),
                                      _compiled(monkeypatch, TD.topdown_round, tree, want, var, **kw))
    # known values above their parent's: refused alike
    bad = y.copy()
    bad[ex] += 1000.0
    if ex[1:].any():
        for path in (_compiled, _numpy):
            with pytest.raises(DataError, match="exceed"):
                path(monkeypatch, TD.topdown_nonneg, tree, bad, var, fixed_root=1.0)


def test_totals_equal_the_compiled_kernels(monkeypatch) -> None:
    """Node-total invariants on the first two levels (as tests/test_topdown_totals.py)."""
    from hierdp.postprocessors.blue import blue

    rng = np.random.default_rng(3)
    t = hierdp.Tree.from_parent(np.r_[-1, 0, 0, 0, rng.integers(1, 4, 20), rng.integers(4, 24, 60)])
    vals = t.aggregate(rng.poisson(3, (t.n_leaves, 4)))
    y = t.to_internal(vals + rng.normal(0, 2.0, vals.shape))
    d = t.internal.depth
    tot = np.where(d <= 1, t.to_internal(vals).sum(axis=1).astype(float), np.nan)
    b = blue(t, y, np.full(t.n_nodes, 4.0))
    want = _compiled(monkeypatch, TD.topdown_nonneg, t, b.values, b.variance, totals=tot)
    got = _numpy(monkeypatch, TD.topdown_nonneg, t, b.values, b.variance, totals=tot)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    zw = _compiled(monkeypatch, TD.topdown_round, t, want, b.variance, totals=tot)
    zg = _numpy(monkeypatch, TD.topdown_round, t, want, b.variance, totals=tot)
    np.testing.assert_array_equal(zg, zw)
    np.testing.assert_array_equal(zg[d <= 1].sum(axis=1), tot[d <= 1].astype(np.int64))


@pytest.mark.parametrize("seed", range(40))
def test_integer_rows_against_brute_force(seed: int) -> None:
    """The integer step of one parent: the minimum of ``sum (z - a)^2 / v`` over every
    non-negative integer split of S, found by enumeration (exact rationals are not needed:
    the inputs are multiples of 1/4 and the variances powers of 2)."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 5))
    a = rng.integers(-8, 24, m) / 4.0
    v = 2.0 ** rng.integers(-1, 3, m).astype(float)
    S = int(rng.integers(0, 9))
    z, missed = TS._integer_rows(a[None, :], v[None, :], np.array([S]))
    assert missed[0] == 0 and z.sum() == S and (z >= 0).all()
    best = min(float(np.sum((np.array(c) - a) ** 2 / v))
               for c in itertools.product(range(S + 1), repeat=m) if sum(c) == S)
    assert float(np.sum((z[0] - a) ** 2 / v)) == best


def test_large_unit_counts_take_the_kernel_step(monkeypatch) -> None:
    """A row whose |D| x width exceeds MAX_UNITS runs the kernel's own step (here every
    row with D != 0): the same integers."""
    from types import SimpleNamespace

    from hierdp.postprocessors import _topdown_kernels as TK

    calls = []

    def step(*a):
        calls.append(1)
        return TK.integer_group.py_func(*a)

    monkeypatch.setattr(TS, "MAX_UNITS", 0)
    monkeypatch.setattr(TS, "TK", SimpleNamespace(BIG_VAR=TK.BIG_VAR, integer_group=SimpleNamespace(py_func=step)))
    rng = np.random.default_rng(4)
    for name, tree in SHAPES[3:]:
        y, var = _inputs(rng, tree, 2, "mixed", True)
        np.testing.assert_array_equal(_numpy(monkeypatch, TD.topdown_round, tree, y, var),
                                      _compiled(monkeypatch, TD.topdown_round, tree, y, var), err_msg=name)
    assert calls
