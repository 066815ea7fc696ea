"""Plugin parameters: declared once by the plugin, checked the same way for Python and specs.

A plugin declares its parameters in one of two ways:

* the typed signature of its constructor (the default): keyword parameters along the
  ``__init__`` chain, following ``**params`` that a subclass passes on to its parent
  (``Greedy(*, prior, **params)`` takes ``prior`` and the parameters of
  ``_GreedyBase``), or a ``__signature__`` the class sets for itself;
* ``params_schema``, a JSON-schema dict of the ``params`` mapping (see
  ``docs/plugins.md``).

:func:`problems` lists what is wrong with a set of parameters before the plugin is
built: an unknown name (with a "did you mean" over the declared names), a missing
required one, a value of the wrong type (int, float, str, bool and their optional and
union forms; other annotations are the plugin's own business). :func:`build` checks and
then constructs. :func:`hierdp.registry.create` builds every plugin through :func:`build`,
and spec validation reports the same :class:`Problem` texts at the spec's dotted path, so
a mistake reads the same from Python, from a spec and from the command line.

>>> from hierdp.plugins.params import problems
>>> from hierdp.postprocessors.gmc import GMC
>>> [p.message for p in problems("postprocessor", "gmc", GMC, {"fromula": 36})]
["postprocessor 'gmc' has no parameter 'fromula'; did you mean 'formula'?; its parameters: formula"]
"""

from __future__ import annotations

import inspect
import numbers
import types
import typing
import weakref
from dataclasses import dataclass
from typing import Any

from hierdp.errors import PluginError, did_you_mean

__all__ = ["Param", "Declaration", "Problem", "declaration", "problems", "type_problems", "check", "build",
           "trial", "CLOSED_BASES"]

#: The base classes of the plugin kinds whose ``__init__(**params)`` refuses every parameter
#: (module-qualified names, so that this module imports none of them: the kinds' modules
#: import the registry). ``hierdp.metrics.base.Metric`` is absent: it keeps what it is given.
CLOSED_BASES = frozenset({
    "hierdp.mechanisms.base.Mechanism",
    "hierdp.postprocessors.base.PostProcessor",
    "hierdp.budgets.base.BudgetStrategy",
    "hierdp.plans.base.Plan",
    "hierdp.decompositions.base.Decomposition",
})

_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One declared parameter: its name, default (``inspect.Parameter.empty`` when
    required) and type annotation (``None`` when not given or not resolvable)."""

    name: str
    default: Any = _EMPTY
    annotation: Any = None

    @property
    def required(self) -> bool:
        """Whether the parameter has no default."""
        return self.default is _EMPTY


@dataclass(frozen=True)
class Declaration:
    """The parameters a plugin class declares.

    ``params``: the named parameters in declaration order; ``open``: the class also takes
    keywords it does not name (an undeclared ``**params`` at the end of its ``__init__``
    chain), which are then left to the plugin; ``schema``: the class's ``params_schema``.
    """

    params: dict[str, Param]
    open: bool = False
    schema: dict[str, Any] | None = None

    @property
    def names(self) -> list[str]:
        """The declared parameter names, in order."""
        return list(self.params)


@dataclass(frozen=True)
class Problem:
    """What is wrong with one parameter (``path``: where, inside the ``params`` mapping;
    empty for the mapping as a whole) and the sentence that says it and how to fix it."""

    path: tuple[Any, ...]
    message: str
    #: point at the key rather than its value (an unknown or extra key)
    at_key: bool = False


def _qualname(klass: type) -> str:
    return f"{klass.__module__}.{klass.__qualname__}"


def _hints(func: Any) -> dict[str, Any]:
    """Resolved annotations of ``func``; names that do not resolve (imports under
    ``TYPE_CHECKING``) are left out one by one."""
    try:
        return typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - some forward reference does not resolve; try each alone
        pass
    out: dict[str, Any] = {}
    glob = getattr(func, "__globals__", {})
    for k, ann in getattr(func, "__annotations__", {}).items():
        if isinstance(ann, str):
            try:
                ann = eval(ann, dict(glob))  # noqa: S307 - the plugin's own annotation text
            except Exception:  # noqa: BLE001
                continue
        out[k] = ann
    return out


_DECLARATIONS: weakref.WeakKeyDictionary[type, Declaration] = weakref.WeakKeyDictionary()


def declaration(cls: type) -> Declaration:
    """The parameters ``cls`` declares (its ``params_schema``, else its constructor chain);
    read once per class (a release builds its plugins on every call)."""
    try:
        return _DECLARATIONS[cls]
    except (KeyError, TypeError):
        pass
    decl = _read_declaration(cls)
    try:
        _DECLARATIONS[cls] = decl
    except TypeError:  # not weak-referenceable: read it every time
        pass
    return decl


def _read_declaration(cls: type) -> Declaration:
    schema = getattr(cls, "params_schema", None)
    if isinstance(schema, dict):
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        named = {str(k): Param(str(k), _EMPTY if k in required else None) for k in props}
        return Declaration(named, open=schema.get("additionalProperties", True) is not False, schema=schema)
    params: dict[str, Param] = {}
    passed_on = False  # the last constructor read passes unnamed keywords (``**params``) on
    for klass in cls.__mro__:
        if klass is object:  # object() takes nothing: what reaches it unnamed was kept by the last one
            return Declaration(params, open=passed_on)
        if "__signature__" in klass.__dict__ and isinstance(klass.__dict__["__signature__"], inspect.Signature):
            sig, hints = klass.__dict__["__signature__"], {}
            ps = list(sig.parameters.values())
        elif "__init__" in klass.__dict__:
            init = klass.__dict__["__init__"]
            try:
                ps = list(inspect.signature(init).parameters.values())[1:]
            except (TypeError, ValueError):  # a builtin or C constructor: nothing to read
                return Declaration(params, open=True)
            hints = _hints(init)
        else:
            continue
        for p in ps:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in params:
                ann = p.annotation if p.annotation is not _EMPTY and not isinstance(p.annotation, str) else None
                params[p.name] = Param(p.name, p.default, hints.get(p.name, ann))
        passed_on = any(p.kind is p.VAR_KEYWORD for p in ps)
        if not passed_on or _qualname(klass) in CLOSED_BASES:
            return Declaration(params, open=False)
    return Declaration(params, open=passed_on)  # pragma: no cover - every MRO ends in object


# ----------------------------------------------------------------------------- types
_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "nothing"}


def _simple(tp: Any) -> list[type] | None:
    """The simple types a value of annotation ``tp`` may have, or ``None`` (not checked)."""
    if tp in _WORDS:
        return [tp]
    if tp is None:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        out: list[type] = []
        for arg in typing.get_args(tp):
            sub = _simple(arg)
            if sub is None:
                return None
            out += sub
        return out
    return None


def _fits(value: Any, allowed: list[type]) -> bool:
    for t in allowed:
        if t is bool and isinstance(value, (bool, _np_bool())):
            return True
        if t is int and isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return True
        if t is float and isinstance(value, numbers.Real) and not isinstance(value, (bool, _np_bool())):
            return True
        if t is str and isinstance(value, str):
            return True
        if t is type(None) and value is None:
            return True
    return False


def _np_bool() -> type:
    import numpy as np

    return np.bool_


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return f"{value!r} (true or false)"
    words = {str: "a string", list: "a list", dict: "a mapping", tuple: "a tuple", type(None): "nothing"}
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} ({words.get(type(value), type(value).__name__)})"


# -------------------------------------------------------------------------- checks
def problems(kind: str, name: str, cls: type, params: dict[str, Any], *,
             extra: tuple[str, ...] = (), types: bool = True) -> list[Problem]:
    """Every problem of ``params`` for plugin ``name`` (class ``cls``) of ``kind``, found
    from the class's declaration without building it.

    Parameters
    ----------
    kind, name
        The plugin kind and registered name (they open every message).
    cls
        The plugin class.
    params
        The keyword parameters to check.
    extra
        Names the caller accepts besides the plugin's own (e.g. a spec's
        ``epsilon_share`` beside a decomposition's parameters): not reported, and offered
        in "did you mean" (the list of parameters in a message is the plugin's own, so
        the text is the same wherever the plugin is built).
    types
        Also check the values against the annotated types (else only the names: unknown
        and missing parameters).

    Returns
    -------
    list of Problem
        Empty when the parameters fit the declaration.
    """
    decl = declaration(cls)
    label = f"{kind} {name!r}"
    if decl.schema is not None:
        from hierdp.spec.loader import Marks
        from hierdp.spec.schema import check_against_schema

        own = {k: v for k, v in params.items() if k not in extra}
        return [Problem(tuple(i.path), f"{label}: {i.message}")
                for i in check_against_schema(own, decl.schema, Marks())]
    out: list[Problem] = []
    near = decl.names + [e for e in extra if e not in decl.params]  # what a typo may have meant
    for k in params:
        if k in decl.params or k in extra or decl.open:
            continue
        if not decl.names:
            out.append(Problem((k,), f"{label} takes no parameters{did_you_mean(str(k), near)}; remove `{k}`",
                               at_key=True))
        else:  # the plugin's own parameters only: the text is the same wherever the plugin is built
            out.append(Problem((k,), f"{label} has no parameter {k!r}{did_you_mean(str(k), near)}; "
                                     f"its parameters: {', '.join(decl.names)}", at_key=True))
    for p in decl.params.values():
        if p.required and p.name not in params:
            out.append(Problem((), f"{label} needs the parameter {p.name!r}; add it"))
    return out + (type_problems(kind, name, cls, params) if types else [])


def type_problems(kind: str, name: str, cls: type, params: dict[str, Any]) -> list[Problem]:
    """The values of ``params`` whose type does not fit the annotation of their parameter
    (``int``, ``float``, ``str``, ``bool`` and their optional and union forms; other
    annotations are left to the plugin)."""
    decl = declaration(cls)
    out: list[Problem] = []
    if decl.schema is not None:
        return out  # the schema checked the values with the names
    for p in decl.params.values():
        if p.name in params:
            allowed = _simple(p.annotation)
            value = params[p.name]
            if allowed is not None and not _fits(value, allowed):
                want = " or ".join(dict.fromkeys(_WORDS[t] for t in allowed))
                out.append(Problem((p.name,), f"{kind} {name!r}: parameter {p.name!r} must be {want}, "
                                              f"got {_kind_of(value)}"))
    return out


def _raise(kind: str, name: str, found: list[Problem]) -> None:
    text = found[0].message if len(found) == 1 else "; also ".join(p.message for p in found)
    raise PluginError(f"bad parameters for {kind} {name!r}: {text}")


def check(kind: str, name: str, cls: type, params: dict[str, Any], *, extra: tuple[str, ...] = (),
          types: bool = True) -> None:
    """Raise :class:`~hierdp.errors.PluginError` (``bad parameters for <kind> '<name>': ...``)
    listing every :func:`problems` of ``params``; return quietly when there is none."""
    found = problems(kind, name, cls, params, extra=extra, types=types)
    if found:
        _raise(kind, name, found)


def _construct(kind: str, name: str, cls: type, params: dict[str, Any]) -> Any:
    try:
        return cls(**params)
    except TypeError as exc:
        raise PluginError(f"bad parameters for {kind} {name!r}: {exc}") from None


def build(kind: str, name: str, cls: type, params: dict[str, Any]) -> Any:
    """``cls(**params)``, checked against the class's declaration.

    The names first (an unknown or missing parameter is refused before the class runs),
    then the constructor, whose own checks and messages come before the type check
    (``BudgetError: tau must be a positive number`` stays the plugin's word); a value
    the constructor let through whose type does not fit the annotation is refused after.
    A ``TypeError`` of the constructor becomes the same :class:`~hierdp.errors.PluginError`;
    the plugin's own errors (``BudgetError``, ``DataError``, ...) pass unchanged.
    """
    check(kind, name, cls, params, types=False)
    obj = _construct(kind, name, cls, params)
    found = type_problems(kind, name, cls, params)
    if found:
        _raise(kind, name, found)
    return obj


def trial(kind: str, name: str, cls: type, params: dict[str, Any], *,
          extra: tuple[str, ...] = ()) -> tuple[Any, list[Problem]]:
    """The steps of :func:`build` as problems instead of exceptions, for validation: the
    instance (``None`` when it could not be built) and what is wrong. The constructor
    gets ``params`` without the ``extra`` names; its own error becomes one problem,
    ``bad parameters for <kind> '<name>': <its first line>``."""
    found = problems(kind, name, cls, params, extra=extra, types=False)
    if found:
        return None, found
    own = {k: v for k, v in params.items() if k not in extra}
    try:
        obj = _construct(kind, name, cls, own)
    except PluginError as exc:
        return None, [Problem((), str(exc))]
    except Exception as exc:  # noqa: BLE001 - a plugin's own check (HierDPError, ValueError, ...)
        text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else (str(exc) or repr(exc))
        first = text.splitlines()[0] if text else repr(exc)
        return None, [Problem((), f"bad parameters for {kind} {name!r}: {first}")]
    return obj, type_problems(kind, name, cls, own)
