"""Every public door and function documents its parameters (numpydoc), issue 33 item 3.

Walks ``hierdp.__all__`` (and the functions of ``hierdp.plot``), the ``.dptree`` accessors
(pandas, xarray, Dask), the door's public methods, the public methods of the objects a
release hands back (``ReleaseResult``, ``PointsResult``, ``Ledger``, ``Session``) and of the other doors
(xarray, Dask, dataset; ``CountedDataset``), and ``hierdp.outofcore.release_to_dataset``:
each callable that takes parameters has a numpydoc
``Parameters`` section naming every one of them (``a, b : ...`` may share an entry;
``*args``/``**kwargs`` are named with their stars), and each function that returns
something has a ``Returns`` section. The API reference (docs/api, autodoc + napoleon)
renders these sections as the parameter tables a user reads.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest

import hierdp
import hierdp.outofcore
from hierdp.accounting.ledger import Ledger
from hierdp.accounting.session import Session
from hierdp.frontends.dask import DaskDPTree, DPTreeDaskAccessor
from hierdp.frontends.dataset import CountedDataset, DatasetDPTree
from hierdp.frontends.pandas import DPTree, DPTreeFrameAccessor, DPTreeSeriesAccessor
from hierdp.frontends.points import PointsResult
from hierdp.frontends.sequences import SequenceResult
from hierdp.frontends.xarray import ArrayDPTree, DPTreeDataArrayAccessor, DPTreeDatasetAccessor
from hierdp.measurements import Measurements
from hierdp.result import ReleaseResult

#: classes the library builds and hands back (a release's results, the door ``df.dptree``
#: returns): users never call their constructors, so those take no Parameters section
BUILT_BY_THE_LIBRARY = {"ReleaseResult", "Ledger", "Estimate", "Measurements", "PointsResult", "SequenceResult",
                        "RegionsResult", "DPTree"}
#: classes whose constructor is private ("build with from_parent, complete or from_frame")
#: and whose public constructors are checked instead
PUBLIC_CONSTRUCTORS = {"Tree": ("from_parent", "complete", "from_frame")}
#: the door methods a user calls on ``df.dptree(...)``
DOOR_METHODS = ("release", "privtree_taxonomy", "privtree", "node_values", "true_counts", "out_of_domain",
                "release_defaults", "spent_text")

#: classes whose every public method (no leading underscore, defined in hierdp, inherited
#: ones included; properties are attributes, not callables) is held to the rule: what a
#: release hands back, the session, and the doors other than pandas
METHOD_CLASSES = (ReleaseResult, PointsResult, SequenceResult, Measurements, Ledger, Session, ArrayDPTree, DaskDPTree,
                  DatasetDPTree, CountedDataset)

_ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::|$)")


def _section(doc: str, title: str) -> list[str] | None:
    lines = doc.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].strip() == title and set(lines[i + 1].strip()) == {"-"}:
            out = []
            for line in lines[i + 2:]:
                if line.strip() and set(line.strip()) == {"-"}:   # the next section's underline
                    out.pop()
                    break
                out.append(line)
            return out
    return None


def documented_names(doc: str) -> set[str] | None:
    """The parameter names a numpydoc ``Parameters`` section lists (``None``: no section)."""
    section = _section(doc, "Parameters")
    if section is None:
        return None
    names: set[str] = set()
    for line in section:
        if line and not line[0].isspace():
            m = _ENTRY.match(line)
            if m:
                names.update(n.strip() for n in m.group(1).split(","))
    return names


def signature_names(func: Callable[..., Any]) -> list[str]:
    out = []
    for p in inspect.signature(func).parameters.values():
        if p.name in ("self", "cls") or p.name.startswith("_"):
            continue
        stars = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append(stars + p.name)
    return out


def _returns_something(func: Callable[..., Any]) -> bool:
    ret = inspect.signature(func).return_annotation
    return ret not in (None, "None", inspect.Signature.empty) or ret is inspect.Signature.empty


def public_methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """``(name, function)`` for the public methods of ``cls`` defined in hierdp."""
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        func = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
        if inspect.isfunction(func) and func.__module__.split(".")[0] == "hierdp":
            yield name, func


def public_callables() -> Iterator[tuple[str, Callable[..., Any], bool]]:
    """``(name, callable, is_function)`` for everything the test holds to the rule."""
    for name in hierdp.__all__:
        obj = getattr(hierdp, name)
        if inspect.ismodule(obj):
            for sub in getattr(obj, "__all__", ()):
                f = getattr(obj, sub)
                if inspect.isfunction(f) and obj is hierdp.plot:
                    yield f"hierdp.{name}.{sub}", f, True
            continue
        if inspect.isclass(obj):
            if issubclass(obj, (Exception, Warning)) or name in BUILT_BY_THE_LIBRARY:
                continue
            if name in PUBLIC_CONSTRUCTORS:
                for meth in PUBLIC_CONSTRUCTORS[name]:
                    yield f"hierdp.{name}.{meth}", getattr(obj, meth), True
                continue
            yield f"hierdp.{name}", obj, False
        elif callable(obj):
            yield f"hierdp.{name}", obj, True
    yield "DataFrame.dptree(...)", DPTreeFrameAccessor.__call__, True
    yield "Series.dptree(...)", DPTreeSeriesAccessor.__call__, True
    for meth in ("privtree", "suffix_tree", "privtree_mixed"):
        yield f"DataFrame.dptree.{meth}", getattr(DPTreeFrameAccessor, meth), True
    for meth in DOOR_METHODS:
        yield f"df.dptree(...).{meth}", getattr(DPTree, meth), True
    yield "DataArray.dptree(...)", DPTreeDataArrayAccessor.__call__, True
    yield "Dataset.dptree(...)", DPTreeDatasetAccessor.__call__, True
    yield "dask.DataFrame.dptree(...)", DPTreeDaskAccessor.__call__, True
    for cls in METHOD_CLASSES:
        for meth, func in public_methods(cls):
            yield f"{cls.__name__}.{meth}", func, True
    yield "hierdp.outofcore.release_to_dataset", hierdp.outofcore.release_to_dataset, True


CALLABLES = list(public_callables())


def problems(name: str, obj: Callable[..., Any], is_function: bool) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    params = signature_names(obj)
    out = []
    if params:
        listed = documented_names(doc)
        if listed is None:
            out.append(f"{name}: no numpydoc 'Parameters' section (it takes {', '.join(params)})")
        else:
            missing = [p for p in params if p not in listed]
            if missing:
                out.append(f"{name}: 'Parameters' does not name {', '.join(missing)}")
    if is_function and _returns_something(obj) and _section(doc, "Returns") is None:
        out.append(f"{name}: no numpydoc 'Returns' section")
    return out


def test_the_walk_covers_the_doors():
    names = {n for n, _, _ in CALLABLES}
    assert {"hierdp.release", "hierdp.dptree", "DataFrame.dptree(...)", "df.dptree(...).release",
            "hierdp.Session", "hierdp.plot.decomposition", "hierdp.Tree.from_parent"} <= names


def test_the_walk_covers_what_a_release_hands_back():
    names = {n for n, _, _ in CALLABLES}
    assert {"ReleaseResult.report", "ReleaseResult.intervals", "ReleaseResult.to_frame",
            "ReleaseResult.to_xarray", "PointsResult.query", "Ledger.to_json", "Ledger.from_json", "Ledger.epsilon_at",
            "Session.reserve", "Session.settle", "ArrayDPTree.node_values", "DaskDPTree.out_of_domain",
            "DatasetDPTree.counted", "DatasetDPTree.release_inputs", "CountedDataset.counts_of",
            "DataArray.dptree(...)", "dask.DataFrame.dptree(...)",
            "hierdp.outofcore.release_to_dataset"} <= names
    # properties are attributes (no Parameters to list), private helpers are not public
    assert not names & {"ReleaseResult.values", "Ledger.spent", "Session.remaining", "ReleaseResult._frame"}


def test_the_checker_finds_a_missing_or_incomplete_section():
    def bare(a: int, *, b: str = "x") -> int:
        """Does something."""
        return a

    def partial(a: int, b: int, **more: Any) -> int:
        """Does something.

        Parameters
        ----------
        a : int
            The first.
        more
            Not starred.

        Returns
        -------
        int
        """
        return a

    def complete(a: int, b: int, **more: Any) -> None:
        """Does something.

        Parameters
        ----------
        a, b : int
            Two numbers.
        **more
            Anything else.
        """

    assert problems("bare", bare, True) == ["bare: no numpydoc 'Parameters' section (it takes a, b)",
                                             "bare: no numpydoc 'Returns' section"]
    assert problems("partial", partial, True) == ["partial: 'Parameters' does not name b, **more"]
    assert problems("complete", complete, True) == []


@pytest.mark.parametrize("name,obj,is_function", CALLABLES, ids=[n for n, _, _ in CALLABLES])
def test_every_public_callable_documents_its_parameters(name, obj, is_function):
    assert problems(name, obj, is_function) == []


def test_the_accessor_is_the_one_pandas_calls():
    assert type(pd.DataFrame({"a": [1]}).dptree) is DPTreeFrameAccessor
    assert type(pd.Series([1]).dptree) is DPTreeSeriesAccessor
