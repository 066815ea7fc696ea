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
``dask.dataframe`` is imported, on Polars DataFrames and LazyFrames once ``polars`` is).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any


def _started_as_command() -> bool:
    """Whether this process is the ``hierdp`` command (``python -m hierdp`` or the console
    script) importing its own package: then the library loads after the arguments are
    parsed (:func:`hierdp.cli.main`), so ``--version``, ``--help`` and usage errors answer
    at once instead of importing numpy, pandas, numba and xarray first."""
    argv = getattr(sys, "orig_argv", None) or []
    if sys.argv[:1] == ["-m"] and "-m" in argv:  # runpy is locating the module to run
        after = argv[argv.index("-m") + 1:]
        return after[:1] == ["hierdp"]
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script in ("hierdp", "hierdp.exe", "hierdp-script.py")  # the console script


#: how the ``hierdp`` command answers Ctrl-C (SIGINT), and whether it was pressed; see :func:`_on_interrupt`
_interrupts: dict[str, Any] = {"phase": "off", "raised": False}


def _on_interrupt(signum: int, frame: Any) -> None:
    """SIGINT handler of the ``hierdp`` command, installed before anything else is imported.

    ``"starting"`` (imports, argument parsing, loading the library: nothing written yet):
    one line on stderr and exit 130 at once, wherever the interpreter is. ``"working"``
    (a command runs): ``KeyboardInterrupt``, which the command's clean-up and
    :func:`hierdp.cli.main` turn into exit 130 without partial output. ``"done"`` (the
    command has finished or an interrupt is already being handled): ignored, so that no
    later interrupt can break the clean-up or the interpreter's exit with a traceback.
    The raised interrupt is recorded (``_interrupts["raised"]``): a library that turns it
    into an error of its own (pandas' CSV reader reports "Calling read(nbytes) on source
    failed") still ends the command as an interruption.
    """
    phase = _interrupts["phase"]
    if phase == "done":
        return
    _interrupts["phase"] = "done"
    if phase == "starting":
        os.write(2, b"interrupted while starting; no output was written\n")
        os._exit(130)
    _interrupts["raised"] = True
    raise KeyboardInterrupt


def _interrupt_phase(phase: str) -> None:
    """Enter ``phase`` ("working" or "done") when this process is the ``hierdp`` command
    (never back from "done", which an interrupt being handled has set)."""
    if _interrupts["phase"] in ("starting", "working"):
        _interrupts["phase"] = phase
    if _interrupts["phase"] == "done":
        # The interpreter's finalization puts a Python-level SIGINT handler back to the
        # default action (the process would die by SIGINT, exit -2, while it tears down
        # its modules after a complete release); an ignored signal stays ignored.
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _on_interrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if _started_as_command():
    import signal

    # not when SIGINT is ignored (started in the background or under nohup): keep it ignored
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        _interrupts["phase"] = "starting"
        signal.signal(signal.SIGINT, _on_interrupt)

# after the handler: an interrupt while these (and everything after) import is answered by it
from hierdp._version import __version__ as __version__  # noqa: E402  (re-exported)
from hierdp.errors import (  # noqa: E402
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

if TYPE_CHECKING:  # the names _load() binds (mypy and readers see them here)
    from hierdp import plot, registry
    from hierdp._kernels.threads import get_threads, set_threads
    from hierdp.accounting import PrivacyLoss
    from hierdp.accounting.ledger import Ledger
    from hierdp.accounting.session import Session
    from hierdp.evaluation import evaluate
    from hierdp.frontends.base import dptree
    from hierdp.frontends.pandas import DPTree
    from hierdp.frontends.points import PointsResult, release_points
    from hierdp.frontends.sequences import SequenceResult, release_sequences
    from hierdp.frontends.taxonomy import RegionsResult, release_mixed, release_taxonomy
    from hierdp.measurements import Estimate, Measurements
    from hierdp.mechanisms.base import Sensitivity
    from hierdp.pipeline import postprocess, release
    from hierdp.result import ReleaseResult
    from hierdp.tree import Tree

__all__ = ["Tree", "release", "postprocess", "metric", "evaluate", "run_spec", "Session", "Sensitivity",
           "DPTree", "ReleaseResult", "Ledger", "Estimate", "Measurements", "PrivacyLoss", "registry", "plot",
           "HierDPError", "SpecError", "HierarchyError", "BudgetError", "PluginError", "PrivacyError",
           "DataError", "NonPrivateWarning", "NotForPublicationWarning", "set_threads", "get_threads",
           "dptree", "release_points", "release_sequences", "release_taxonomy", "release_mixed", "PointsResult",
           "SequenceResult", "RegionsResult", "UnknownKeywordError"]

#: the names :func:`_load` binds
_LOADED_NAMES = frozenset({"Tree", "release", "postprocess", "evaluate", "Session", "Sensitivity", "DPTree",
                           "ReleaseResult", "Ledger", "Estimate", "Measurements", "PrivacyLoss", "registry",
                           "plot", "set_threads", "get_threads",
                           "dptree", "release_points", "release_sequences", "release_taxonomy", "release_mixed",
                           "PointsResult", "SequenceResult", "RegionsResult"})
_state = {"loaded": False, "loading": False}


def _load() -> None:
    """Import the library: its public names, ``.dptree`` on pandas and xarray objects, and
    ``ddf.dptree`` once dask.dataframe is imported (``.dptree`` on Polars frames once polars
    is). ``import hierdp`` runs it, except when
    the process is the ``hierdp`` command (see :func:`_started_as_command`)."""
    if _state["loaded"] or _state["loading"]:
        return
    _state["loading"] = True
    try:
        import hierdp.plot  # noqa: F401  (matplotlib is imported only when a plot is drawn)
        import hierdp.registry  # noqa: F401
        from hierdp._kernels.threads import get_threads, set_threads
        from hierdp.accounting import PrivacyLoss
        from hierdp.accounting.ledger import Ledger
        from hierdp.accounting.session import Session
        from hierdp.evaluation import evaluate
        from hierdp.frontends._dask_hook import install as install_dask_frontend
        from hierdp.frontends._dask_hook import install_polars as install_polars_frontend
        from hierdp.frontends.base import dptree
        from hierdp.frontends.pandas import DPTree
        from hierdp.frontends.points import PointsResult, release_points
        from hierdp.frontends.sequences import SequenceResult, release_sequences
        from hierdp.frontends.taxonomy import RegionsResult, release_mixed, release_taxonomy
        from hierdp.frontends.xarray import ArrayDPTree  # noqa: F401  (registers .dptree on xarray objects)
        from hierdp.measurements import Estimate, Measurements
        from hierdp.mechanisms.base import Sensitivity
        from hierdp.pipeline import postprocess, release
        from hierdp.result import ReleaseResult
        from hierdp.tree import Tree

        install_dask_frontend()  # .dptree on Dask DataFrames once dask.dataframe is imported (not before)
        install_polars_frontend()  # .dptree on Polars frames once polars is imported (not before)
        globals().update(get_threads=get_threads, set_threads=set_threads, evaluate=evaluate, DPTree=DPTree,
                         Ledger=Ledger, Sensitivity=Sensitivity, postprocess=postprocess, release=release,
                         Estimate=Estimate, Measurements=Measurements, ReleaseResult=ReleaseResult,
                         Session=Session, Tree=Tree, PrivacyLoss=PrivacyLoss, dptree=dptree,
                         release_points=release_points, release_sequences=release_sequences,
                         release_taxonomy=release_taxonomy, release_mixed=release_mixed,
                         PointsResult=PointsResult, SequenceResult=SequenceResult, RegionsResult=RegionsResult)
        _state["loaded"] = True
    finally:
        _state["loading"] = False


def __getattr__(name: str) -> Any:
    """The library's names, imported on first use when ``import hierdp`` deferred them."""
    if name in _LOADED_NAMES and not _state["loading"]:
        _load()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'hierdp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LOADED_NAMES)


def metric(name: str, **params: Any) -> Any:
    """The registered error metric ``name`` (callable), with default ``params``.

    Metrics read true counts: evaluation only, never part of a release.

    Parameters
    ----------
    name : str
        A registered metric: ``"rmse_node"``, ``"rmse_range"``, ``"rmsre"`` and
        ``"tree_rmsre"`` (Dawson et al. 2023's relative error with floor τ),
        ``"relative_error"``, ``"alpha_mrmse"``, ... (``hierdp plugins`` lists them).
    **params
        Default parameters of the metric (e.g. ``tau=10``).

    Returns
    -------
    callable
        ``metric(true, estimate, **params)``, per node.

    Examples
    --------
    >>> import numpy as np, hierdp
    >>> float(hierdp.metric("rmsre")(np.array([20.0]), np.array([22.0]), tau=10)[0])
    0.1
    """
    _load()
    return registry.create("metric", name, **params)


def run_spec(path: str | os.PathLike[str], **overrides: Any) -> ReleaseResult:
    """Validate and run the YAML release spec at ``path``; returns a ``ReleaseResult``.

    ``overrides``: ``seed=``, ``output=``, ``write=``, ``progress=`` or spec sections
    deep-merged over the file's (e.g. ``privacy={"epsilon": 2}``); see :mod:`hierdp.spec`.

    Parameters
    ----------
    path : str or os.PathLike
        The spec file (docs/spec.md); YAML text, a dict or a validated spec are accepted
        too (:func:`hierdp.spec.runner.run_spec`).
    **overrides
        ``seed=``, ``output=``, ``write=``, ``progress=``, or spec sections deep-merged
        over the file's.

    Returns
    -------
    ReleaseResult
        The release, as :func:`hierdp.release` returns it; with ``write`` the table and its
        ledger are also written where the spec's ``output`` says.
    """
    from hierdp.spec.runner import run_spec as _run_spec

    result: ReleaseResult = _run_spec(path, **overrides)
    return result



if not _started_as_command():
    _load()
