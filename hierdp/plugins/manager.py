"""The plugin-manager factory."""

from __future__ import annotations

import importlib
import os
import sys

import pluggy

from hierdp.plugins import hookspecs
from hierdp.plugins.markers import PROJECT_NAME

__all__ = ["DEFAULT_PLUGINS", "ENTRY_POINT_GROUP", "get_plugin_manager"]

ENTRY_POINT_GROUP = "hierdp"

#: Modules whose hook implementations provide the built-ins.
DEFAULT_PLUGINS = (
    "hierdp.mechanisms",
    "hierdp.postprocessors",
    "hierdp.metrics",
    "hierdp.budgets",
    "hierdp.plans",
    "hierdp.decompositions",
    "hierdp.execution",
)

#: Set to 1 to skip third-party plugins found through entry points.
DISABLE_AUTOLOAD_ENV = "HIERDP_DISABLE_PLUGIN_AUTOLOAD"
#: Set to 1 to print every hook call to stderr (debugging plugins).
TRACE_ENV = "HIERDP_TRACE_HOOKS"


def get_plugin_manager(load_entrypoints: bool | None = None) -> pluggy.PluginManager:
    """A new plugin manager with hierdp's hooks, the built-ins and installed plugins.

    Parameters
    ----------
    load_entrypoints
        Load third-party plugins from the ``hierdp`` entry-point group. Defaults to true
        unless the environment variable ``HIERDP_DISABLE_PLUGIN_AUTOLOAD`` is set.
    """
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for modname in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(modname), name=modname)
    if load_entrypoints is None:
        load_entrypoints = not os.environ.get(DISABLE_AUTOLOAD_ENV)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    if os.environ.get(TRACE_ENV):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return pm
