"""The worked plugin example of docs/architecture.md runs as written, and its plan and
decomposition pass the contract suites."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hierdp.testing import BaseDecompositionTests, BasePlanTests

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def _namespace() -> dict:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 2
    ns: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), ns)  # noqa: S102 - the documentation's own example
    return ns | {"_second": blocks[1]}


def test_the_worked_example_runs():
    ns = _namespace()
    exec(compile(ns["_second"], str(DOC), "exec"), ns)  # noqa: S102
    assert "root_and_leaves" not in __import__("hierdp").registry.names("plan")  # unregistered again


class TestTheExamplePlan(BasePlanTests):
    @pytest.fixture
    def plan(self):
        return _namespace()["RootAndLeaves"]()


class TestTheExampleDecomposition(BaseDecompositionTests):
    @pytest.fixture
    def decomposition(self):
        return _namespace()["Dyadic"](height=3)

    @pytest.fixture
    def data(self):
        return None
