"""hierdp: differentially private release of hierarchical counts.

The public names (see ``docs/architecture.md``): :class:`Tree`, :func:`release`,
:func:`postprocess`, :func:`metric`, :func:`evaluate`, :func:`run_spec`, :class:`Session`,
:class:`Sensitivity`, :class:`DPTree`, :class:`ReleaseResult`, :class:`Ledger`,
:class:`Estimate`, :class:`Measurements`, the ``registry`` of plugins and the errors.
The front door: :func:`dptree` (any supported input; the ``.dptree`` accessors on pandas,
xarray and Dask objects are the idiomatic form), the doors without a public tree
(:func:`release_points`, :func:`release_sequences`, :func:`release_taxonomy`,
:func:`release_mixed`) and their results (:class:`PointsResult`, :class:`SequenceResult`,
:class:`RegionsResult`, all :class:`ReleaseResult`). Importing hierdp registers the
``.dptree`` accessor on pandas and xarray objects (and on Dask DataFrames once
``dask.dataframe`` is imported).
"""

import os
from typing import Any

from hierdp import registry
from hierdp._engine.threads import get_threads, set_threads
from hierdp._version import __version__ as __version__  # re-exported
from hierdp.errors import (
    BudgetError,
    DataError,
    HierarchyError,
    HierDPError,
    NonPrivateWarning,
    NotForPublicationWarning,
    PluginError,
    PrivacyError,
    SpecError,
    UnknownKeywordError,
)
from hierdp.evaluation import evaluate
from hierdp.frontends._dask_hook import install as _install_dask_frontend
from hierdp.frontends.base import dptree
from hierdp.frontends.pandas import DPTree
from hierdp.frontends.points import PointsResult, release_points
from hierdp.frontends.sequences import SequenceResult, release_sequences
from hierdp.frontends.taxonomy import RegionsResult, release_mixed, release_taxonomy
from hierdp.frontends.xarray import ArrayDPTree  # noqa: F401  (registers .dptree on xarray objects)
from hierdp.ledger import Ledger
from hierdp.mechanisms.base import Sensitivity
from hierdp.pipeline import postprocess, release
from hierdp.postprocessors.base import Estimate, Measurements
from hierdp.result import ReleaseResult
from hierdp.session import Session
from hierdp.tree import Tree

_install_dask_frontend()  # .dptree on Dask DataFrames once dask.dataframe is imported (not before)

__all__ = ["Tree", "release", "postprocess", "metric", "evaluate", "run_spec", "Session", "Sensitivity",
           "DPTree", "ReleaseResult", "Ledger", "Estimate", "Measurements", "registry", "plot",
           "HierDPError", "SpecError", "HierarchyError", "BudgetError", "PluginError", "PrivacyError",
           "DataError", "NonPrivateWarning", "NotForPublicationWarning", "set_threads", "get_threads",
           "dptree", "release_points", "release_sequences", "release_taxonomy", "release_mixed", "PointsResult",
           "SequenceResult", "RegionsResult", "UnknownKeywordError"]


def metric(name: str, **params: Any) -> Any:
    """The registered error metric ``name`` (callable), with default ``params``.

    Metrics read true counts: evaluation only, never part of a release.

    >>> import numpy as np, hierdp
    >>> float(hierdp.metric("rmsre")(np.array([20.0]), np.array([22.0]), tau=10)[0])
    0.1
    """
    return registry.create("metric", name, **params)


def run_spec(path: str | os.PathLike[str], **overrides: Any) -> ReleaseResult:
    """Validate and run the YAML release spec at ``path``; returns a ``ReleaseResult``.

    ``overrides``: ``seed=``, ``output=``, ``write=``, ``progress=`` or spec sections
    deep-merged over the file's (e.g. ``privacy={"epsilon": 2}``); see :mod:`hierdp.spec`.
    """
    from hierdp.spec.runner import run_spec as _run_spec

    result: ReleaseResult = _run_spec(path, **overrides)
    return result


from hierdp import plot  # noqa: E402  (matplotlib is imported only when a plot is drawn)
