"""Name-based lookup of everything plugins provide.

>>> import hierdp
>>> "discrete_laplace" in hierdp.registry.names("mechanism")
True

The default registry is built on first use from :func:`hierdp.plugins.get_plugin_manager`.
``register``/``unregister`` add or remove an in-process plugin (a module or object with
``@hookimpl`` functions) and rebuild it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pluggy

from hierdp.errors import PluginError, expected_one_of
from hierdp.plugins import params as _params
from hierdp.plugins.manager import get_plugin_manager

__all__ = ["KINDS", "Registry", "names", "get", "create", "problems", "trial", "provider", "register", "unregister",
           "get_registry", "use_plugin_manager", "reset"]

#: kind -> hook that provides it
KINDS: dict[str, str] = {
    "mechanism": "hierdp_register_mechanisms",
    "postprocessor": "hierdp_register_postprocessors",
    "metric": "hierdp_register_metrics",
    "budget": "hierdp_register_budgets",
    "plan": "hierdp_register_plans",
    "decomposition": "hierdp_register_decompositions",
    "executor": "hierdp_register_executors",
}
_ALIASES = {
    "mechanisms": "mechanism",
    "postprocess": "postprocessor",
    "postprocessors": "postprocessor",
    "post-processor": "postprocessor",
    "metrics": "metric",
    "budgets": "budget",
    "budget_strategy": "budget",
    "plans": "plan",
    "decompositions": "decomposition",
    "executors": "executor",
}


def _kind(kind: str) -> str:
    k = _ALIASES.get(kind, kind)
    if k not in KINDS:
        raise PluginError(expected_one_of("plugin kind", kind, KINDS))
    return k


class Registry:
    """One dict per kind, ``name -> class``, collected from a plugin manager's hooks."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._tables: dict[str, dict[str, type]] = {}
        self._providers: dict[str, dict[str, str]] = {}

    def _table(self, kind: str) -> dict[str, type]:
        kind = _kind(kind)
        if kind not in self._tables:
            table: dict[str, type] = {}
            providers: dict[str, str] = {}
            hook = getattr(self.pm.hook, KINDS[kind])
            for impl in hook.get_hookimpls():
                provider = impl.plugin_name
                result = impl.function()
                if result is None:
                    continue
                for cls in result:
                    name = getattr(cls, "name", None)
                    if not isinstance(name, str) or not name:
                        raise PluginError(f"plugin {provider!r} registered a {kind} without a string `name`: {cls!r}")
                    if name in table:
                        raise PluginError(
                            f"{kind} {name!r} is provided twice, by {providers[name]!r} and by {provider!r}; "
                            "uninstall or rename one of them"
                        )
                    table[name] = cls
                    providers[name] = provider
            self._tables[kind] = table
            self._providers[kind] = providers
        return self._tables[kind]

    def names(self, kind: str) -> list[str]:
        return sorted(self._table(kind))

    def get(self, kind: str, name: str) -> type:
        table = self._table(kind)
        if not isinstance(name, str) or name not in table:
            raise PluginError(expected_one_of(_kind(kind), name, table))
        return table[name]

    def create(self, kind: str, name: str, **params: Any) -> Any:
        """An instance of ``name`` built with ``params``, checked first against the
        parameters the class declares (:mod:`hierdp.plugins.params`)."""
        return _params.build(_kind(kind), name, self.get(kind, name), params)

    def problems(self, kind: str, name: str, params: dict[str, Any],
                 extra: tuple[str, ...] = ()) -> list[_params.Problem]:
        """What :meth:`create` would refuse in ``params``, found without building the plugin."""
        return _params.problems(_kind(kind), name, self.get(kind, name), params, extra=extra)

    def trial(self, kind: str, name: str, params: dict[str, Any],
              extra: tuple[str, ...] = ()) -> tuple[Any, list[_params.Problem]]:
        """:meth:`create`'s checks and construction as problems (:func:`hierdp.plugins.params.trial`)."""
        return _params.trial(_kind(kind), name, self.get(kind, name), params, extra=extra)

    def provider(self, kind: str, name: str) -> str:
        self.get(kind, name)
        return self._providers[_kind(kind)][name]

    def table(self) -> list[dict[str, str]]:
        """Rows (kind, name, provider, summary) of everything registered."""
        rows = []
        for kind in KINDS:
            for name in self.names(kind):
                cls = self.get(kind, name)
                doc = (cls.__doc__ or "").strip().splitlines()
                rows.append({"kind": kind, "name": name, "provider": self.provider(kind, name),
                             "summary": doc[0] if doc else ""})
        return rows


_lock = threading.Lock()
_default: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry (built on first use)."""
    global _default
    with _lock:
        if _default is None:
            _default = Registry(get_plugin_manager())
        return _default


def reset() -> None:
    """Forget the default registry; the next lookup rebuilds it (re-reading entry points)."""
    global _default
    with _lock:
        _default = None


def names(kind: str) -> list[str]:
    """Sorted names of the installed implementations of ``kind``
    (``"mechanism"``, ``"postprocessor"``, ``"metric"``, ``"budget"``, ``"plan"`` or ``"decomposition"``)."""
    return get_registry().names(kind)


def get(kind: str, name: str) -> type:
    """The class registered as ``name``; unknown names list the known ones."""
    return get_registry().get(kind, name)


def create(kind: str, name: str, **params: Any) -> Any:
    """An instance of the class registered as ``name``, built with ``params``.

    The parameters are checked against the class's declaration first (its constructor's
    typed signature, or its ``params_schema``): an unknown, missing or mistyped one is a
    :class:`~hierdp.errors.PluginError` whose text is the one spec validation reports.
    """
    return get_registry().create(kind, name, **params)


def problems(kind: str, name: str, params: dict[str, Any], extra: tuple[str, ...] = ()) -> list[_params.Problem]:
    """The :class:`~hierdp.plugins.params.Problem` list of ``params`` for ``name`` (empty
    when :func:`create` would accept them); ``extra`` names the caller accepts besides
    the plugin's own."""
    return get_registry().problems(kind, name, params, extra)


def trial(kind: str, name: str, params: dict[str, Any], extra: tuple[str, ...] = ()) -> tuple[Any, list[Any]]:
    """The instance :func:`create` would build from ``params`` (``None`` if it cannot) and
    the :class:`~hierdp.plugins.params.Problem` list that says why, without raising:
    validation reports the problems at their place in a spec."""
    return get_registry().trial(kind, name, params, extra)


def provider(kind: str, name: str) -> str:
    """Name of the plugin that provides ``name``."""
    return get_registry().provider(kind, name)


def register(plugin: object, name: str | None = None) -> str:
    """Register an in-process plugin with the default registry; returns its name."""
    reg = get_registry()
    registered = reg.pm.register(plugin, name=name)
    if registered is None:
        raise PluginError(f"plugin {name or plugin!r} is already registered or blocked")
    reg._tables.clear()
    reg._providers.clear()
    return registered


def unregister(plugin: object | None = None, name: str | None = None) -> None:
    """Remove a plugin registered with :func:`register`."""
    reg = get_registry()
    reg.pm.unregister(plugin=plugin, name=name)
    reg._tables.clear()
    reg._providers.clear()


@contextlib.contextmanager
def use_plugin_manager(pm: pluggy.PluginManager) -> Iterator[Registry]:
    """Temporarily make a registry over ``pm`` the default (tests, sandboxes)."""
    global _default
    with _lock:
        old, _default = _default, Registry(pm)
    try:
        yield _default
    finally:
        with _lock:
            _default = old
