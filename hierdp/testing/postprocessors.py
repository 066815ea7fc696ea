"""Contract tests every post-processor must pass (built-in or plugin).

Subclass :class:`BasePostProcessorTests` in your test module and provide a
``postprocessor`` fixture returning an instance::

    import pytest
    from hierdp.testing import BasePostProcessorTests

    class TestMine(BasePostProcessorTests):
        @pytest.fixture
        def postprocessor(self):
            return MyPostProcessor()

Optional fixture: ``allowed_warnings`` (a tuple of warning classes the post-processor
may emit on the suite's trees, default none). What is checked, on a complete tree, a
ragged random tree (external numbering shuffled), a path, a star and a single node:

- output shape equals the input's for ``(n,)`` and ``(n, k)`` values, numeric dtype,
  finite values; the variance, when returned, has shape ``(n,)`` or that of the values;
- the inputs (values, variance, info) are not modified;
- when the class declares ``consistent = True``: every non-leaf node equals the sum of
  its children (1-D and 2-D, and each column of 2-D separately);
- *fixed point*: exact counts (consistent, non-negative integers) come back unchanged
  from a consistent post-processor, whatever the variances;
- *idempotence*: applying a consistent post-processor to its own output changes nothing;
- 2-D values are processed column by column: column c of the 2-D result equals the 1-D
  result on column c.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from hierdp.postprocessors.base import Estimate, PostProcessor
from hierdp.tree import Tree

__all__ = ["BasePostProcessorTests", "contract_trees"]


def _random_parent(rng: np.random.Generator, n: int) -> np.ndarray:
    parent = np.empty(n, np.int64)
    parent[0] = -1
    for i in range(1, n):
        lo = max(0, i - 1 - int(rng.integers(0, 4 + i // 2)))
        parent[i] = int(rng.integers(lo, i))
    perm = rng.permutation(n)
    out = np.empty(n, np.int64)
    out[perm] = np.where(parent >= 0, perm[np.maximum(parent, 0)], -1)
    return out


def contract_trees() -> dict[str, Tree]:
    """The trees the suite runs on (small, deterministic)."""
    rng = np.random.default_rng(20240601)
    return {
        "complete_2x4": Tree.complete(2, 4),
        "complete_3x3": Tree.complete(3, 3),
        "ragged": Tree.from_parent(_random_parent(rng, 40)),
        "ragged_deep": Tree.from_parent(_random_parent(rng, 25)),
        "path": Tree.from_parent(np.arange(-1, 5)),
        "star": Tree.from_parent(np.r_[-1, np.zeros(7, np.int64)]),
        "single": Tree.from_parent(np.array([-1])),
    }


_TREES = contract_trees()


def _children_sum(tree: Tree, v: np.ndarray) -> np.ndarray:
    s = np.zeros(v.shape, dtype=np.float64)
    np.add.at(s, tree.internal.parent[1:], v[1:])
    return s


class BasePostProcessorTests:
    """Contract suite for post-processors; subclass and provide ``postprocessor``."""

    @pytest.fixture
    def postprocessor(self) -> PostProcessor:  # pragma: no cover - must be overridden
        raise NotImplementedError("provide a `postprocessor` fixture returning an instance")

    @pytest.fixture
    def allowed_warnings(self) -> tuple[type[Warning], ...]:
        return ()

    @pytest.fixture(params=sorted(_TREES))
    def tree(self, request) -> Tree:
        return _TREES[request.param]

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _noisy(tree: Tree, k: int | None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        shape = (tree.n_nodes,) if k is None else (tree.n_nodes, k)
        leaves = rng.poisson(20.0, size=(tree.n_leaves,) + shape[1:]).astype(np.float64)
        true = tree.to_internal(tree.aggregate(leaves)).astype(np.float64)
        var = np.full(tree.n_nodes, 4.0)
        return true + rng.normal(0.0, 2.0, size=shape), var

    @staticmethod
    def _run(pp: PostProcessor, tree: Tree, est: Estimate, allowed: tuple[Any, ...]) -> Estimate:
        with warnings.catch_warnings():
            for w in allowed:
                warnings.simplefilter("ignore", w)
            return pp.apply(tree, est)

    @staticmethod
    def _assert_consistent(tree: Tree, values: np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64)
        s = _children_sum(tree, v)
        internal = tree.internal.n_children > 0
        scale = 1.0 + np.abs(v).max(initial=0.0)
        np.testing.assert_allclose(v[internal], s[internal], rtol=0, atol=1e-8 * scale,
                                   err_msg="output is not consistent (parent != sum of children)")

    # ------------------------------------------------------------------ tests
    def test_has_registry_attributes(self, postprocessor: PostProcessor) -> None:
        assert isinstance(postprocessor.name, str) and postprocessor.name == postprocessor.name.lower()
        assert isinstance(postprocessor.consistent, bool)
        assert isinstance(postprocessor.requires_variance, bool)

    @pytest.mark.parametrize("k", [None, 3])
    def test_shape_dtype_and_finite(self, postprocessor, tree, k, allowed_warnings) -> None:
        y, var = self._noisy(tree, k)
        out = self._run(postprocessor, tree, Estimate(y, var), allowed_warnings)
        assert isinstance(out, Estimate)
        vals = np.asarray(out.values)
        assert vals.shape == y.shape
        assert np.issubdtype(vals.dtype, np.number) and not np.issubdtype(vals.dtype, np.complexfloating)
        assert np.all(np.isfinite(vals))
        if out.variance is not None:
            assert np.shape(out.variance) in ((tree.n_nodes,), y.shape)
            assert np.all(np.asarray(out.variance) >= 0)
        assert isinstance(out.info, dict)

    @pytest.mark.parametrize("k", [None, 2])
    def test_does_not_mutate_inputs(self, postprocessor, tree, k, allowed_warnings) -> None:
        y, var = self._noisy(tree, k, seed=1)
        y0, var0 = y.copy(), var.copy()
        info = {"marker": 1}
        self._run(postprocessor, tree, Estimate(y, var, info), allowed_warnings)
        np.testing.assert_array_equal(y, y0)
        np.testing.assert_array_equal(var, var0)
        assert info == {"marker": 1}

    @pytest.mark.parametrize("k", [None, 3])
    def test_consistent_when_declared(self, postprocessor, tree, k, allowed_warnings) -> None:
        if not postprocessor.consistent:
            pytest.skip(f"{postprocessor.name!r} does not declare consistent output")
        y, var = self._noisy(tree, k, seed=2)
        out = self._run(postprocessor, tree, Estimate(y, var), allowed_warnings)
        self._assert_consistent(tree, out.values)

    def test_exact_counts_are_a_fixed_point(self, postprocessor, tree, allowed_warnings) -> None:
        if not postprocessor.consistent:
            pytest.skip(f"{postprocessor.name!r} does not declare consistent output")
        rng = np.random.default_rng(3)
        true = tree.to_internal(tree.aggregate(rng.poisson(5.0, tree.n_leaves))).astype(np.float64)
        var = rng.uniform(0.5, 4.0, tree.n_nodes)
        out = self._run(postprocessor, tree, Estimate(true.copy(), var), allowed_warnings)
        np.testing.assert_allclose(np.asarray(out.values, dtype=np.float64), true, rtol=0, atol=1e-8 * (1 + true.max()))

    def test_idempotent(self, postprocessor, tree, allowed_warnings) -> None:
        if not postprocessor.consistent:
            pytest.skip(f"{postprocessor.name!r} does not declare consistent output")
        y, var = self._noisy(tree, None, seed=4)
        once = self._run(postprocessor, tree, Estimate(y, var), allowed_warnings)
        v2 = var if once.variance is None else np.asarray(once.variance, dtype=np.float64)
        info: dict[str, Any] = dict(once.info)
        twice = self._run(postprocessor, tree, Estimate(np.asarray(once.values).copy(), v2, info),
                          allowed_warnings)
        a = np.asarray(once.values, dtype=np.float64)
        np.testing.assert_allclose(np.asarray(twice.values, dtype=np.float64), a, rtol=0,
                                   atol=1e-8 * (1 + np.abs(a).max()))

    def test_columns_are_independent(self, postprocessor, tree, allowed_warnings) -> None:
        if getattr(postprocessor, "couples_cells", False):
            pytest.skip(f"{postprocessor.name!r} declares couples_cells: it solves a node's cells together "
                        "(each unit's total held), so its columns are not independent by design")
        y, var = self._noisy(tree, 3, seed=5)
        both = np.asarray(self._run(postprocessor, tree, Estimate(y, var), allowed_warnings).values, float)
        for c in range(3):
            one = self._run(postprocessor, tree, Estimate(np.ascontiguousarray(y[:, c]), var), allowed_warnings)
            np.testing.assert_allclose(both[:, c], np.asarray(one.values, float), rtol=1e-10,
                                       atol=1e-9 * (1 + np.abs(both).max()))
