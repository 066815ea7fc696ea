"""Contract test-suites that every implementation of a plugin kind must pass.

Subclass a suite in your plugin's tests and provide its fixtures (see each class's
docstring); hierdp's built-ins run the very same suites.
"""

import importlib
from typing import Any

_SUITES = {
    "BaseMechanismTests": "hierdp.testing.mechanisms",
    "BasePostProcessorTests": "hierdp.testing.postprocessors",
    "BasePlanTests": "hierdp.testing.plans",
    "BaseDecompositionTests": "hierdp.testing.decompositions",
    "check_executor": "hierdp.testing.executors",
}

__all__ = sorted(_SUITES)


def __getattr__(name: str) -> Any:
    if name in _SUITES:
        return getattr(importlib.import_module(_SUITES[name]), name)
    raise AttributeError(f"module 'hierdp.testing' has no attribute {name!r}")
