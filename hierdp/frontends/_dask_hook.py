"""Register ``ddf.dptree`` without importing dask at ``import hierdp``.

Importing ``dask.dataframe`` costs about a second, which users without Dask should not
pay. If it is already imported, :func:`install` registers the Dask front-end at once;
otherwise it adds a finder to ``sys.meta_path`` that lets the normal finders locate
``dask.dataframe`` and runs the registration right after that module has executed (the
post-import hook pattern), then removes itself.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

__all__ = ["install"]

_TARGET = "dask.dataframe"
_FRONTEND = "hierdp.frontends.dask"


class _AfterDaskDataFrame(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # once, and not for the lookup below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            importlib.import_module(_FRONTEND)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Make ``.dptree`` available on Dask DataFrames whenever dask.dataframe is (or gets) imported."""
    if _TARGET in sys.modules:
        importlib.import_module(_FRONTEND)
    elif importlib.util.find_spec("dask") is not None and not any(
            isinstance(f, _AfterDaskDataFrame) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDaskDataFrame())
