"""The front door: what every input type provides, and the one release path they all take.

A *door* turns one kind of input (a pandas DataFrame or Series, an xarray DataArray or
Dataset, a Dask DataFrame, a Polars DataFrame or LazyFrame, a Parquet/CSV dataset path, points,
sequences, a taxonomy, mixed attributes; Spark next) into true counts on a structure, and releases them through
:func:`release_path`. Every door speaks the same release language:

* ``epsilon`` / ``delta`` / ``rho`` — the privacy loss (pure ε, (ε, δ) or ρ-zCDP);
* ``session`` — a :class:`hierdp.Session` the spend is drawn from, checked before any noise
  is drawn (the noise that chooses a private structure included);
* ``seed`` — reproducible randomness, for tests only: the ledger says NOT FOR PUBLICATION;
* ``neighbours`` — ``"add_remove"`` (default) or ``"substitute"``;
* ``invariants`` — nodes published exactly (not protected);
* ``postprocess`` — the post-processing chain (default :data:`PLAN_DEFAULT`: the plan's
  own, ``("blue",)`` for ``per_level`` and ``leaves``);
* ``unit`` / ``max_contributions`` — how rows count: the privacy-unit column and the most
  rows (or leaves) one unit contributes;
* ``epsilon_share`` — the share of ``epsilon`` that pays for a private structure.

Doors on a public tree (pandas, xarray, Dask) also take ``split`` (:data:`TREE_RELEASE_KEYWORDS`):
the release cut into subtree tasks at a level (``split="county"``), or at a level and in
blocks chosen from a memory budget (``"auto"``, ``{"memory": "4GiB"}``), with the in-memory
estimate and ledger (:mod:`hierdp.subtrees`). Doors whose structure is private do not: their
tree is chosen from the data and measured leaf by leaf (and ``release_points`` already names
PrivTree's fan-out ``split``).

``epsilon`` may be given by position (after the door's own data arguments); every other
release keyword is keyword-only. The documented way to build a door names ``levels=`` and
``domains=`` by keyword on every input (the DataFrame and Dask doors also take ``levels``
by position, the Series and xarray doors ``domains``, as they always did).

Older spellings stay accepted (:data:`ALIASES`: ``structure_share``, ``contributions``);
any other unknown keyword is refused by name with a "did you mean" (:func:`check_keywords`).
A door that cannot honour ``neighbours``/``invariants`` refuses them with one message
(:func:`refuse`).

Doors on a public tree (pandas, xarray, Dask) share
:class:`hierdp.frontends.tree_door.TreeDoor`, which declares what such a door provides
(levels, public structure, cells, node values, out-of-domain report, how rows count) and
implements its release on this path.
:func:`dptree` is the functional form: it dispatches on the input type through a small
table (:func:`register_door`), so inputs without an accessor API get the same door.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np

from hierdp import rules
from hierdp.accounting.session import Reservation, Session
from hierdp.errors import DataError, PrivacyError, UnknownKeywordError
from hierdp.pipeline import release as _pipeline_release
from hierdp.pipeline import resolve_plan
from hierdp.plans.leaves import Leaves
from hierdp.result import ReleaseResult
from hierdp.rng import make_rng
from hierdp.tree import Tree

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = ["RELEASE_KEYWORDS", "TREE_RELEASE_KEYWORDS", "ROWS_KEYWORDS", "ALIASES", "PLAN_DEFAULT", "check_keywords",
           "parameter_names", "suggest_keywords",
           "canonical_keywords", "refuse", "take", "admit", "admit_private_structure", "release_path", "door_rng",
           "releases_of",
           "record_release", "spent_text", "register_door", "dptree", "RELEASES_BY_OBJECT"]

#: The release keywords every door accepts, with the same meaning everywhere.
RELEASE_KEYWORDS: tuple[str, ...] = ("epsilon", "delta", "rho", "session", "seed", "neighbours", "invariants",
                                     "postprocess")
#: The release keywords of the doors on a public tree, beyond :data:`RELEASE_KEYWORDS`.
TREE_RELEASE_KEYWORDS: tuple[str, ...] = ("split",)
#: How rows count: the privacy-unit column and the most rows (or leaves) one unit contributes.
ROWS_KEYWORDS: tuple[str, ...] = ("unit", "max_contributions")
#: Older spellings still accepted (without a warning) -> the one documented name.
ALIASES: dict[str, str] = {"structure_share": "epsilon_share", "contributions": "max_contributions"}


class _PlanDefault:
    """The default ``postprocess=``: the plan's own ``default_postprocess``."""

    def __repr__(self) -> str:
        return "<the plan's default>"


#: ``postprocess=PLAN_DEFAULT`` (the default): the plan's own chain (``("blue",)`` for
#: ``per_level`` and ``leaves``).
PLAN_DEFAULT: Any = _PlanDefault()


# ---------------------------------------------------------------------------- keywords
def check_keywords(where: str, given: Iterable[str], allowed: Iterable[str]) -> None:
    """Refuse the first keyword of ``given`` not in ``allowed``: one line naming it and the
    closest allowed name ("did you mean"), else what ``where`` takes."""
    names = sorted(set(allowed))
    for key in given:
        if key not in names:
            match = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            if match:
                raise UnknownKeywordError(f"{where} got an unknown keyword {key!r}; did you mean {match[0]!r}?")
            raise UnknownKeywordError(f"{where} got an unknown keyword {key!r}; it takes: {', '.join(names)}")


def suggest_keywords(where: str) -> Callable[[_F], _F]:
    """Decorate a door whose signature lists its keywords: an unknown keyword is refused by
    :func:`check_keywords` (``df.dptree(level=...)``: "did you mean 'levels'?") instead of
    Python's plain ``TypeError``; the signature seen by ``help`` and ``inspect`` is kept."""

    def wrap(fn: _F) -> _F:
        names = parameter_names(fn)

        @functools.wraps(fn)
        def door(*args: Any, **kwargs: Any) -> Any:
            unknown = [k for k in kwargs if k not in names]
            if unknown:
                check_keywords(where, unknown, names)
            return fn(*args, **kwargs)

        return cast(_F, door)

    return wrap


def parameter_names(fn: Callable[..., Any]) -> list[str]:
    """The keywords ``fn`` names in its signature (not ``*args``/``**kwargs``, not ``_private``)."""
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and not p.name.startswith("_") and p.name != "self"]


def canonical_keywords(where: str, extra: Mapping[str, Any], allowed: Iterable[str],
                       door: Callable[..., Any] | None = None) -> dict[str, Any]:
    """``extra`` (the keywords a door caught with ``**``) with older spellings renamed to
    their one name (:data:`ALIASES`); an unknown keyword is refused (:func:`check_keywords`:
    the suggestion is drawn from ``allowed`` and the parameters of ``door``), and so is a
    concept given under both names."""
    allowed = set(allowed)
    out: dict[str, Any] = {}
    for key, value in extra.items():
        name = ALIASES.get(key, key)
        if name in out:
            raise UnknownKeywordError(f"{where} got both {key!r} and {name!r}, two names of one keyword: "
                                      f"give {name!r} only")
        out[name] = value
    unknown = [k for k in out if k not in allowed]
    if unknown:
        check_keywords(where, unknown, allowed | set(parameter_names(door) if door is not None else ()))
    return out


def refuse(door: str, keyword: str, value: Any) -> None:
    """The one refusal of a release keyword a door cannot honour (``neighbours`` other than
    add/remove, ``invariants``, ...): a :class:`~hierdp.errors.PrivacyError` naming the door."""
    raise PrivacyError(f"{door} cannot honour {keyword}={value!r:.60}: its structure is chosen privately from the "
                       f"data, so no node is public and its noise is calibrated for add/remove neighbours; leave "
                       f"{keyword} out or release on a declared tree (df.dptree(levels=..., domains=...))")


def take(where: str, extra: dict[str, Any], name: str, value: Any, default: Any = None) -> Any:
    """Keyword ``name``: ``value`` as given to the signature or, under an older spelling,
    as renamed into ``extra`` by :func:`canonical_keywords` (popped); both is refused."""
    if name not in extra:
        return value
    if value is not default:
        raise UnknownKeywordError(f"{where} got {name!r} twice (once under an older name); give {name!r} only")
    return extra.pop(name)


def admit(where: str, *, epsilon: float | None = None, delta: float | None = None, rho: float | None = None,
          session: Session | Reservation | None = None, seed: int | None = None, neighbours: str = "add_remove",
          plan: Any = "per_level", mechanism: Any = None, budget: Any = None,
          reserve: bool = False) -> Reservation | None:
    """Validate the shared release keywords once, before any data are read or noise drawn:
    the seed, the neighbour relation, and (with ``session``) whether the session can pay
    this release's guarantee — a refused release draws no noise at all. With ``reserve``
    the session is charged now (:meth:`hierdp.Session.reserve_for`): for a door that draws
    noise of its own before the release, whose charge must stand even if the release then
    fails; the :class:`~hierdp.accounting.session.Reservation` goes to the release as ``session=``."""
    rules.enforce(rules.seed_problem(seed), DataError)
    rules.enforce(rules.neighbours_problem(neighbours), PrivacyError)
    if isinstance(session, Reservation):  # the caller reserved this release already
        return session if reserve else None
    if session is not None:
        if not isinstance(session, Session):
            raise DataError(f"{where}: session must be a hierdp.Session, got {type(session).__name__}")
        _, guarantee = resolve_plan(plan, mechanism=mechanism, budget=budget).total(epsilon=epsilon, delta=delta,
                                                                                     rho=rho)
        if reserve:
            return session.reserve_for(guarantee)
        session.check(guarantee)
    return None


def release_path(tree: Tree, values: np.ndarray, **keywords: Any) -> ReleaseResult:
    """The one release path: every door's release ends here, in
    :func:`hierdp.pipeline.release` (plan, accountant, post-processing, ledger)."""
    return _pipeline_release(tree, values, **keywords)


def admit_private_structure(where: str, door: str, *, epsilon: float | None, delta: float | None = None,
                            rho: float | None = None, session: Session | Reservation | None = None,
                            seed: int | None = None, neighbours: str = "add_remove", invariants: Any = None,
                            mechanism: Any = "discrete_laplace") -> Reservation | None:
    """:func:`admit` for a door whose structure is chosen privately from the data (points,
    sequences, taxonomy, mixed): it cannot honour ``neighbours="substitute"`` or
    ``invariants`` (:func:`refuse`), and the session is checked against the whole spend
    (structure and counts, measured by the ``leaves`` plan) and charged before the
    structure's noise: the returned :class:`~hierdp.accounting.session.Reservation` (or ``None``
    without a session) is what the door passes to the release as ``session=``, so the
    charge stands even if the release fails after the structure was drawn."""
    rules.enforce(rules.neighbours_problem(neighbours), PrivacyError)
    if neighbours != "add_remove":
        refuse(door, "neighbours", neighbours)
    if invariants is not None and not (isinstance(invariants, (list, tuple)) and len(invariants) == 0):
        refuse(door, "invariants", invariants)
    return admit(where, epsilon=epsilon, delta=delta, rho=rho, session=session, seed=seed,
                 plan=Leaves(mechanism) if session is not None else "per_level", reserve=True)


def door_rng(seed: int | None, salt: int) -> Any:
    """The random source of a door's own randomness (contribution bounds, a private
    structure): secure, or derived from ``seed`` with the door's ``salt``."""
    return make_rng(None if seed is None else (int(seed) * 2654435761 + salt) % (1 << 63))


# ---------------------------------------------------------------------------- releases of one object
#: id(object) -> (weak reference to it, its releases). The weak reference is checked on
#: every lookup, so an id reused by a new object after the old one was collected never
#: inherits the old releases; the entry goes when its object does.
RELEASES_BY_OBJECT: dict[int, tuple[weakref.ref, list[dict[str, Any]]]] = {}


def _forget(key: int, ref: weakref.ref) -> None:
    entry = RELEASES_BY_OBJECT.get(key)
    if entry is not None and entry[0] is ref:
        del RELEASES_BY_OBJECT[key]


def releases_of(obj: Any) -> list[dict[str, Any]]:
    """The public guarantees of the releases made so far from ``obj`` (by identity, for as
    long as it lives): every door built from the same object shares the list, so a
    ledger can state what its releases spend together. (pandas and xarray build a new
    accessor per attribute access, so the accessor cannot hold it.) An object that takes
    no weak reference gets a fresh list (it is not tracked)."""
    key = id(obj)
    entry = RELEASES_BY_OBJECT.get(key)
    if entry is not None and entry[0]() is obj:
        return entry[1]
    spent: list[dict[str, Any]] = []
    try:
        ref = weakref.ref(obj, functools.partial(_forget, key))
    except TypeError:
        return spent
    RELEASES_BY_OBJECT[key] = (ref, spent)
    return spent


def record_release(spent: list[dict[str, Any]], ledger: Any) -> None:
    """Add a release's public guarantee to ``spent`` (see :func:`releases_of`)."""
    spent.append({"guarantee": ledger.guarantee, "epsilon": ledger.epsilon, "delta": ledger.delta,
                  "rho": ledger.rho})


def spent_text(spent: Sequence[Mapping[str, Any]]) -> str:
    """What the releases in ``spent`` spend together (basic composition), as text."""
    parts = []
    for key in ("epsilon", "delta", "rho"):
        # zCDP releases are counted in rho (the epsilon they state is a conversion)
        vals = [r[key] for r in spent
                if r[key] is not None and not (key == "epsilon" and r["guarantee"] == "zcdp")]
        if vals:
            parts.append(f"{key}={math.fsum(vals):.6g}")
    return ", ".join(parts) if parts else "nothing"


# ---------------------------------------------------------------------------- the functional form
#: (name, accepts(data) -> bool, open(data, **keywords) -> door); first match wins.
_DOORS: list[tuple[str, Callable[[Any], bool], Callable[..., Any]]] = []
#: top-level module of an input type -> the hierdp module that registers its door on import
_LAZY_DOORS: dict[str, str] = {"dask": "hierdp.frontends.dask", "xarray": "hierdp.frontends.xarray",
                                "polars": "hierdp.frontends.polars",
                                "pyspark": "hierdp.frontends.spark",
                                # a path (str or pathlib.Path): a Parquet/CSV dataset on disk
                                "builtins": "hierdp.frontends.dataset", "pathlib": "hierdp.frontends.dataset"}


def register_door(name: str, accepts: Callable[[Any], bool], open: Callable[..., Any]) -> None:
    """Register a door for :func:`dptree`: ``accepts(data)`` says whether it reads ``data``,
    ``open(data, **keywords)`` builds it (Spark, Polars and dataset doors register here).
    A name registered again replaces its entry."""
    _DOORS[:] = [d for d in _DOORS if d[0] != name]
    _DOORS.append((name, accepts, open))


def dptree(data: Any, **keywords: Any) -> Any:
    """The door for ``data``, whatever its type: the functional form of the ``.dptree``
    accessors, dispatching on the input type (pandas DataFrame or Series, xarray
    DataArray or Dataset, Dask DataFrame; more doors through :func:`register_door`).

    ``keywords`` are the accessor's (``levels=``, ``domains=``, ``cells=``, ``count=``,
    ``unit=``, ``max_contributions=``, ``unknown=``, ``root=``); the result's
    ``.release(epsilon=..., ...)`` speaks the shared release language.

    Parameters
    ----------
    data : DataFrame, Series, xarray object or Dask DataFrame
        The private data.
    **keywords
        The door's keywords (for a DataFrame those of ``df.dptree``: ``levels``,
        ``domains``, ...).

    Returns
    -------
    DPTree or another door
        The door for ``data``'s type; ``.release(...)`` releases it.

    Examples
    --------

    >>> import pandas as pd, hierdp
    >>> df = pd.DataFrame({"state": ["A", "A", "B"]})
    >>> hierdp.dptree(df, levels=["state"], domains="observed").tree.n_nodes
    3
    """
    if "levels" not in keywords:  # doors that need levels= would only say so: name the slip instead
        for key in keywords:
            if difflib.get_close_matches(str(key), ["levels"], n=1, cutoff=0.6):
                raise UnknownKeywordError(f"hierdp.dptree() got an unknown keyword {key!r}; did you mean 'levels'?")
    for _ in range(2):
        for _name, accepts, open_door in _DOORS:
            if accepts(data):
                return open_door(data, **keywords)
        module = _LAZY_DOORS.get(type(data).__module__.partition(".")[0])
        if module is None:
            break
        importlib.import_module(module)
    kinds = ", ".join(name for name, _, _ in _DOORS)
    raise DataError(f"hierdp.dptree cannot read a {type(data).__module__}.{type(data).__qualname__}; "
                    f"it reads: {kinds}")
