"""hierdp: differentially private release of hierarchical counts."""

from hierdp import accessor as _accessor  # noqa: F401  (registers .dptree)
from hierdp import registry
from hierdp.errors import (BudgetError, DataError, HierarchyError, HierDPError, PluginError,
                           PrivacyError, SpecError)
from hierdp.postprocess.base import Estimate
from hierdp.tree import Tree

__version__ = "0.1.0"

__all__ = ["Tree", "Estimate", "registry", "postprocess", "HierDPError", "SpecError",
           "HierarchyError", "BudgetError", "PluginError", "PrivacyError", "DataError"]


def postprocess(name: str, tree: Tree, values, variance=None, **params) -> Estimate:
    """Run the post-processor ``name`` on external-order node ``values`` (and ``variance``).

    >>> import numpy as np, hierdp
    >>> t = hierdp.Tree.complete(fanout=2, height=2)
    >>> est = hierdp.postprocess("blue", t, np.array([10., 4., 5.]), variance=np.ones(3))
    >>> np.round(est.values, 6).tolist()
    [9.666667, 4.333333, 5.333333]
    """
    import numpy as np

    from hierdp.postprocess.base import node_values, node_variance

    pp = registry.create("postprocessor", name, **params)
    raw = node_values(tree, values)
    vals = tree.to_internal(raw)
    var = None if variance is None else tree.to_internal(node_variance(tree, variance, raw.shape))
    if var is None and pp.requires_variance:
        var = np.ones(tree.n_nodes)
    est = pp.apply(tree, Estimate(vals, var))
    from hierdp.release import _external

    return _external(tree, est)


def metric(name: str, **params):
    """The registered error metric ``name`` (callable), with default ``params``.

    Metrics read true counts: evaluation only, never part of a release.

    >>> import numpy as np, hierdp
    >>> float(hierdp.metric("rmsre")(np.array([20.0]), np.array([22.0]), tau=10)[0])
    0.1
    """
    return registry.create("metric", name, **params)


from hierdp import plot  # noqa: E402  (matplotlib is imported only when a plot is drawn)
from hierdp.evaluate import evaluate  # noqa: E402

__all__ += ["metric", "evaluate", "plot"]


def run_spec(path, **overrides):
    """Validate and run the YAML release spec at ``path``; returns a ``ReleaseResult``.

    ``overrides``: ``seed=``, ``output=``, ``write=``, ``progress=`` or spec sections
    deep-merged over the file's (e.g. ``privacy={"epsilon": 2}``); see :mod:`hierdp.spec`.
    """
    from hierdp.spec.runner import run_spec as _run_spec

    return _run_spec(path, **overrides)


__all__ += ["run_spec"]
