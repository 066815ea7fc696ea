"""Contract tests every decomposition must pass (built-in or plugin).

Subclass :class:`BaseDecompositionTests` and provide fixtures ``decomposition`` (an
instance) and ``data`` (an input it decomposes); a data-dependent decomposition also gets
``budget`` (default 1.0)::

    class TestMine(BaseDecompositionTests):
        @pytest.fixture
        def decomposition(self):
            return MyDecomposition(...)

        @pytest.fixture
        def data(self):
            return my_points

What is checked: ``decompose`` returns a :class:`~hierdp.decompositions.base.Structure`
whose ``tree`` is a :class:`~hierdp.tree.Tree` with a name and a provenance for every
level; it does not modify its input; the same seed gives the same tree; a
data-dependent decomposition reports positive spends within its budget and marks the
structure private, a public one reports no spend and does not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from hierdp.accounting import Accountant
from hierdp.decompositions.base import Decomposition, Structure
from hierdp.rng import make_rng
from hierdp.tree import Tree

__all__ = ["BaseDecompositionTests"]


def _copy(data: Any) -> Any:
    if isinstance(data, (pd.DataFrame, pd.Series)):
        return data.copy(deep=True)
    if isinstance(data, np.ndarray):
        return data.copy()
    return data


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, pd.DataFrame):
        return a.equals(b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


class BaseDecompositionTests:
    """Subclass with ``decomposition`` and ``data`` fixtures (``budget`` optional)."""

    @pytest.fixture
    def budget(self) -> float:
        return 1.0

    def _run(self, decomposition: Decomposition, data: Any, budget: float, seed: int) -> Structure:
        b = budget if decomposition.data_dependent else None
        return decomposition.decompose(data, budget=b, rng=make_rng(seed))

    def test_is_a_decomposition(self, decomposition):
        assert isinstance(decomposition, Decomposition)
        assert isinstance(decomposition.name, str) and decomposition.name == decomposition.name.lower()

    def test_returns_a_structure_with_a_tree(self, decomposition, data, budget):
        before = _copy(data)
        st = self._run(decomposition, data, budget, seed=1)
        assert _same(before, data), "decompose modified its input"
        assert isinstance(st, Structure) and isinstance(st.tree, Tree)
        tree = st.tree
        assert tree.n_nodes >= 1 and len(tree.level_names) == tree.n_levels
        assert set(tree.level_names[1:]) <= set(st.provenance), "every level needs a provenance for the ledger"

    def test_same_seed_same_tree(self, decomposition, data, budget):
        a = self._run(decomposition, data, budget, seed=3).tree
        b = self._run(decomposition, data, budget, seed=3).tree
        assert a == b

    def test_spends_match_the_kind(self, decomposition, data, budget):
        st = self._run(decomposition, data, budget, seed=5)
        if decomposition.data_dependent:
            assert st.private_structure, "a structure chosen from private data is a private output"
            assert st.spends, "a data-dependent decomposition must report what it spent"
            acc = Accountant(unit=st.spends[0].unit, budget=budget)
            for s in st.spends:
                assert s.amount > 0
                acc.spend(s.amount, label=s.label, group=s.group, unit=s.unit, delta=s.delta)
        else:
            assert not st.spends and not st.private_structure
