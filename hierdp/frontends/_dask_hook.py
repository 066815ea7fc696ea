"""Register ``.dptree`` on Dask and Polars frames without importing them at ``import hierdp``.

Importing ``dask.dataframe`` costs about a second (and ``polars`` a fraction of one),
which users without them should not pay. If the library is already imported,
:func:`install` (Dask) and :func:`install_polars` register its front-end at once;
otherwise they add a finder to ``sys.meta_path`` that lets the normal finders locate the
module and runs the registration right after that module has executed (the post-import
hook pattern), then removes itself.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

__all__ = ["install", "install_polars"]

_TARGET = "dask.dataframe"
_FRONTEND = "hierdp.frontends.dask"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Import ``frontend`` right after ``target`` has executed (once)."""

    def __init__(self, target: str, frontend: str) -> None:
        self.target = target
        self.frontend = frontend

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.target:
            return None
        sys.meta_path.remove(self)  # once, and not for the lookup below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module
        frontend = self.frontend

        def exec_module(module: Any) -> None:
            run(module)
            importlib.import_module(frontend)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install(target: str, frontend: str, package: str) -> None:
    if target in sys.modules:
        importlib.import_module(frontend)
    elif importlib.util.find_spec(package) is not None and not any(
            isinstance(f, _AfterImport) and f.target == target for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(target, frontend))


def install() -> None:
    """Make ``.dptree`` available on Dask DataFrames whenever dask.dataframe is (or gets) imported."""
    _install(_TARGET, _FRONTEND, "dask")


def install_polars() -> None:
    """Make ``.dptree`` available on Polars DataFrames and LazyFrames whenever polars is (or gets) imported."""
    _install("polars", "hierdp.frontends.polars", "polars")
