"""hierdp's plugin system (pluggy, project name ``hierdp``, entry-point group ``hierdp``).

* :mod:`hierdp.plugins.hookspecs` — every hook, with its contract.
* :data:`hookimpl` — the marker plugins decorate their hook implementations with.
* :func:`get_plugin_manager` — a fresh manager with the built-ins and installed plugins.

Built-in mechanisms, post-processors, metrics, budget strategies, plans and decompositions are registered through
these very hooks (see ``DEFAULT_PLUGINS``); there is no second path.
"""

from hierdp.plugins.manager import DEFAULT_PLUGINS, ENTRY_POINT_GROUP, get_plugin_manager
from hierdp.plugins.markers import hookimpl, hookspec

__all__ = ["hookimpl", "hookspec", "get_plugin_manager", "DEFAULT_PLUGINS", "ENTRY_POINT_GROUP"]
