"""Property tests: random mutations of valid specs never crash the validator.

Whatever the mutation, :func:`hierdp.spec.validate` either returns a spec or raises
:class:`hierdp.errors.SpecError` whose every line names a position or the file.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hierdp.errors import SpecError
from hierdp.spec.loader import LoadedSpec, load_file, load_text
from hierdp.spec.validate import ReleaseSpec, validate

SPECS = Path(__file__).resolve().parents[1] / "specs"
VALID = {p.name: p for p in sorted(SPECS.glob("*.yaml")) if p.name != "plugin-mechanism.yaml"}
KEYS = ["hierdp", "source", "path", "demo", "format", "columns", "count", "filter", "column", "op", "value",
        "hierarchy", "root", "levels", "name", "domain", "per_parent", "file", "values", "product", "paths",
        "attribute", "unknown", "privacy", "unit", "max_contributions", "epsilon", "delta", "rho", "budget",
        "strategy", "params", "per_level", "mechanism", "postprocess", "output", "ci_level", "ledger",
        "evaluate", "metrics", "repetitions", "epsilons", "seed", "total", "state", "county", "tract", "prior"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10**6), st.sampled_from([0, 1, -1, 2**70]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(KEYS),
    st.sampled_from(["observed", "blue", "greedy", "equal", "discrete_laplace", "csv", "parquet", "*.csv",
                     "data/census_tracts.csv", "data/missing.csv", "", "in", ">=", "census", "x.xlsx"]),
    st.text(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=5)), inner,
                                                 max_size=4)), max_leaves=8)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def _mutate(data, draw):
    paths = list(_paths(data))
    path = draw(st.sampled_from(paths))
    op = draw(st.sampled_from(["replace", "delete", "rename", "insert"]))
    if not path:
        return draw(values) if op == "replace" else data
    parent, key = _get(data, path[:-1]), path[-1]
    if op == "replace":
        parent[key] = draw(values)
    elif op == "delete":
        del parent[key]
    elif op == "rename" and isinstance(parent, dict):
        new = draw(st.one_of(st.sampled_from(KEYS), st.text(min_size=1, max_size=6), st.integers(0, 5)))
        parent[new] = parent.pop(key)
    elif op == "insert":
        target = _get(data, path)
        if isinstance(target, dict):
            target[draw(st.sampled_from(KEYS))] = draw(values)
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(values))
    return data


def _check(result_or_exc):
    if isinstance(result_or_exc, SpecError):
        assert result_or_exc.errors, "a SpecError must list its problems"
        for line in result_or_exc.errors:
            assert isinstance(line, str) and line.strip()
    else:
        assert isinstance(result_or_exc, ReleaseSpec)
        assert result_or_exc.total is not None and math.isfinite(result_or_exc.total)


def _validate(spec):
    try:
        return validate(spec)
    except SpecError as exc:
        return exc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(VALID)), data=st.data(), n=st.integers(1, 4))
def test_structural_mutations_raise_only_spec_errors(name, data, n):
    loaded = load_file(VALID[name])
    doc = copy.deepcopy(loaded.data)
    for _ in range(n):
        doc = _mutate(doc, data.draw)
    spec = LoadedSpec(doc, loaded.marks, loaded.filename, loaded.base_dir)
    _check(_validate(spec))


_NOISE = st.sampled_from(list(":-[]{}\"'\t\n #&*!|>,?%@`") + ["  ", "\n  ", ": ", "- ", "1e-6", ".inf", "~"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(VALID)), data=st.data(), n=st.integers(1, 3))
def test_text_mutations_raise_only_spec_errors(name, data, n):
    text = VALID[name].read_text()
    for _ in range(n):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 6)))
        text = text[:i] + data.draw(st.one_of(st.just(""), _NOISE, st.text(max_size=3))) + text[j:]
    _check(_validate(load_text(text, filename=name, base_dir=SPECS)))


def test_unmutated_examples_validate():
    for path in VALID.values():
        assert isinstance(_validate(path), ReleaseSpec), path
