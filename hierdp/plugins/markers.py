"""pluggy markers for the ``hierdp`` project."""

import pluggy

PROJECT_NAME = "hierdp"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
