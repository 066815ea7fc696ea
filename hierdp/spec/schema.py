"""The JSON Schema of release specs and the translation of its errors into plain English.

The schema ships as ``hierdp/spec/schema.json`` (printed by ``hierdp schema``). It uses
one hierdp extension keyword, ``finite: true`` (the number is not ``.inf``/``.nan``),
which other validators ignore.

Plugin parameters: a plugin class may set ``params_schema`` (a JSON-schema dict describing
the ``params`` mapping of its spec entry); :mod:`hierdp.plugins.params` checks parameters
against it, from Python and from specs alike, with the messages of :func:`check_against_schema`.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema
from jsonschema import validators

from hierdp.errors import did_you_mean
from hierdp.spec.loader import Issue, Marks

__all__ = ["SCHEMA_VERSION", "load_schema", "schema_text", "validator_for", "check_against_schema"]

SCHEMA_VERSION = 1


def _finite(validator, value, instance, schema):
    if value and validator.is_type(instance, "number"):
        try:
            finite = math.isfinite(instance)
        except OverflowError:  # an int beyond float64 (e.g. 400 digits): name its size, not the number
            yield jsonschema.ValidationError(f"a number of {len(str(abs(instance)))} digits is too large "
                                             "(beyond float64)")
            return
        if not finite:
            yield jsonschema.ValidationError(f"{instance!r} is not finite")


_Validator = validators.extend(jsonschema.Draft202012Validator, {"finite": _finite})


def schema_text() -> str:
    """The JSON Schema of version-1 specs, as shipped."""
    return resources.files("hierdp.spec").joinpath("schema.json").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The JSON Schema of version-1 specs as a dict (cached; do not mutate)."""
    return json.loads(schema_text())


def validator_for(schema: dict[str, Any]):
    """A Draft 2020-12 validator (with the ``finite`` keyword) for ``schema``."""
    return _Validator(schema)


def check_against_schema(instance: Any, schema: dict[str, Any], marks: Marks, prefix: tuple = ()) -> list[Issue]:
    """Every schema violation of ``instance`` as an :class:`Issue` (paths start at ``prefix``)."""
    v = validator_for(schema)
    issues: list[Issue] = []
    for err in sorted(v.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        issues.extend(_translate(err, v, marks, prefix))
    # de-duplicate (anyOf branches may report the same thing twice)
    out, seen = [], set()
    for i in issues:
        k = (i.path, i.message)
        if k not in seen:
            seen.add(k)
            out.append(i)
    return out


_TYPE_WORDS = {
    "object": "a mapping (key: value lines)",
    "array": "a list",
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "null": "nothing",
}


def _kind_of(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        short = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {short!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _expected(schema: Any) -> str:
    if isinstance(schema, dict) and isinstance(schema.get("description"), str):
        return f"; expected {schema['description']}"
    return ""


def _type_words(t: Any) -> str:
    ts = t if isinstance(t, list) else [t]
    return " or ".join(_TYPE_WORDS.get(x, str(x)) for x in ts)


def _translate(err: jsonschema.ValidationError, v, marks: Marks, prefix: tuple,
               union_desc: str | None = None) -> list[Issue]:
    path = prefix + tuple(err.absolute_path)
    kw = err.validator
    inst = err.instance
    sch = err.schema if isinstance(err.schema, dict) else {}
    val = err.validator_value
    if kw == "additionalProperties" and isinstance(inst, dict):
        allowed = list(sch.get("properties", {}))
        extra = [k for k in inst if k not in allowed]
        if not allowed:  # additionalProperties is a schema: the error is inside a value
            return [marks.issue(path, f"invalid entry: {err.message}")]
        out = []
        for k in extra:
            valid = ", ".join(allowed)
            out.append(marks.issue(path + (k,), f"unknown key {k!r}{did_you_mean(str(k), allowed)} "
                                   f"(valid keys here: {valid})", prefer_key=True))
        return out
    if kw == "required" and isinstance(inst, dict):
        props = sch.get("properties", {})
        extra = [str(x) for x in inst if x not in props]
        # a misspelt key is reported once, as an unknown key with the suggestion
        return [marks.issue(path, f"missing required key {k!r}; add `{k}:`{_expected(props.get(k))}")
                for k in val if k not in inst and not any(did_you_mean(x, [k]) for x in extra)]
    if kw == "type":
        return [marks.issue(path, f"must be {_type_words(val)}, got {_kind_of(inst)}{_expected(sch)}")]
    if kw == "const":
        if path == prefix + ("hierdp",):
            return [marks.issue(path, f"unsupported spec version {inst!r}; this hierdp reads `hierdp: {val}`")]
        hint = did_you_mean(str(inst), [str(val)]) if isinstance(inst, str) else ""
        if union_desc:
            return [marks.issue(path, f"got {_kind_of(inst)}{hint}; expected {union_desc}")]
        return [marks.issue(path, f"must be {val!r}, got {_kind_of(inst)}{hint}")]
    if kw == "enum":
        choices = ", ".join(repr(c) for c in val)
        hint = did_you_mean(str(inst), [str(c) for c in val]) if isinstance(inst, str) else ""
        return [marks.issue(path, f"must be one of {choices}, got {_kind_of(inst)}{hint}")]
    if kw in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[kw]
        rng = _range_words(sch)
        return [marks.issue(path, f"must be {op} {val:g}, got {inst!r}; give a finite number {rng}")]
    if kw == "finite":
        return [marks.issue(path, f"must be a finite number, got {inst!r}; give a finite value{_expected(sch)}")]
    if kw == "minItems":
        return [marks.issue(path, f"must list at least {val} item{'s' if val != 1 else ''}, got {len(inst)}"
                            f"{_expected(sch)}")]
    if kw == "uniqueItems":
        dup = _first_duplicate(inst)
        return [marks.issue(path, f"lists {dup!r} more than once; remove the duplicate")]
    if kw == "minLength":
        return [marks.issue(path, f"must not be empty{_expected(sch)}")]
    if kw in ("minProperties",):
        return [marks.issue(path, f"must not be empty{_expected(sch)}")]
    if kw in ("maxProperties",):
        return [marks.issue(path, f"give only one of {', '.join(sch.get('properties', {}))}")]
    if kw in ("anyOf", "oneOf"):
        return _translate_union(err, v, marks, prefix)
    return [marks.issue(path, f"{err.message}{_expected(sch)}")]


def _range_words(sch: dict) -> str:
    lo = "> " + f"{sch['exclusiveMinimum']:g}" if "exclusiveMinimum" in sch else (
        ">= " + f"{sch['minimum']:g}" if "minimum" in sch else None)
    hi = "< " + f"{sch['exclusiveMaximum']:g}" if "exclusiveMaximum" in sch else (
        "<= " + f"{sch['maximum']:g}" if "maximum" in sch else None)
    parts = [p for p in (lo, hi) if p]
    return " and ".join(parts) if parts else "in range"


def _first_duplicate(items: Any) -> Any:
    seen = []
    for x in items if isinstance(items, list) else []:
        if x in seen:
            return x
        seen.append(x)
    return None


def _translate_union(err: jsonschema.ValidationError, v, marks: Marks, prefix: tuple) -> list[Issue]:
    """Pick the branch of an anyOf whose JSON type matches the value and report its errors."""
    path = prefix + tuple(err.absolute_path)
    branches = err.validator_value if isinstance(err.validator_value, list) else []
    matching = []
    for i, b in enumerate(branches):
        t = b.get("type") if isinstance(b, dict) else None
        ts = t if isinstance(t, list) else [t]
        if t is not None and any(v.is_type(err.instance, x) for x in ts):
            matching.append(i)
    desc = err.schema.get("description") if isinstance(err.schema, dict) else None
    if len(matching) == 1:
        sub = [e for e in err.context if e.relative_schema_path and e.relative_schema_path[0] == matching[0]]
        out: list[Issue] = []
        for e in sub:
            out.extend(_translate(e, v, marks, prefix, union_desc=desc))
        if out:
            return out
    if desc is None:
        kinds = [_type_words(b.get("type")) for b in branches if isinstance(b, dict) and "type" in b]
        desc = " or ".join(kinds) or "a valid value"
    return [marks.issue(path, f"got {_kind_of(err.instance)}; expected {desc}")]
