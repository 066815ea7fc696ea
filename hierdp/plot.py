"""Plots of :func:`hierdp.evaluate` results, drawn as the papers draw them.

* :func:`error_vs_epsilon` — one line per configuration, error against the total budget
  on log axes (Dawson et al. 2023, Figures 4-5: RMSRE_τ(T) vs ε);
* :func:`error_by_level` — one line per configuration across the levels of the tree;
* :func:`decomposition` — the leaf cells of a private spatial decomposition (PrivTree,
  SimpleTree, grid) over the public box, shaded by estimated density (Zhang et al. 2016).

matplotlib is optional (``pip install 'hierdp[plot]'``) and imported only when a plot is
drawn. Without ``ax`` a new figure is made without pyplot (no global state); the axes
are returned, ``ax.figure.savefig("plot.png")`` writes them, and ``ax.figure`` as the last
line of a Jupyter cell shows them inline (a figure made without pyplot has no display
formatter in IPython until pyplot's inline backend is loaded; drawing a plot here registers
a PNG one when none is, see :func:`_register_inline_display`).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pandas as pd

from hierdp.errors import DataError, MissingDependencyError, expected_one_of

__all__ = ["error_vs_epsilon", "error_by_level", "decomposition"]


def _axes(ax: Any, figsize: tuple[float, float]):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("matplotlib", "plot") from None
    if ax is not None:
        return ax
    _register_inline_display(Figure)
    fig = Figure(figsize=figsize, layout="constrained")
    return fig.add_subplot()


def _register_inline_display(figure_type: type) -> bool:
    """In a running IPython kernel, show matplotlib figures as PNG when nothing else does.

    A :class:`matplotlib.figure.Figure` made without pyplot has no ``_repr_png_``: IPython
    shows one only through a formatter that matplotlib's inline backend registers when
    pyplot is imported. A notebook that draws only through this module never imports pyplot,
    so ``ax.figure`` printed as ``<Figure size 600x600 with 1 Axes>``. Registers the same PNG
    formatter the inline backend would (``IPython.core.pylabtools.print_figure``), and only
    when none is registered for figures, so a user's ``%matplotlib`` choice (SVG, retina)
    stands. Outside IPython (scripts, tests) nothing happens. Returns whether it registered.
    """
    ipython = sys.modules.get("IPython")  # never imported here: only a running IPython has it
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if not formatters or "image/png" not in formatters:
        return False
    png = formatters["image/png"]
    if any(_has_formatter(formatters[m], figure_type) for m in ("image/png", "image/svg+xml", "image/jpeg")
           if m in formatters):
        return False
    from IPython.core.pylabtools import print_figure

    png.for_type(figure_type, lambda fig: print_figure(fig, "png", bbox_inches="tight"))
    return True


def _has_formatter(formatter: Any, figure_type: type) -> bool:
    try:
        formatter.lookup_by_type(figure_type)
    except KeyError:
        return False
    return True


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _pick_metric(results: pd.DataFrame, metric: str | None) -> str:
    if not isinstance(results, pd.DataFrame) or "metric" not in results.columns:
        raise DataError("expected the DataFrame returned by hierdp.evaluate(...)")
    metrics = list(dict.fromkeys(results["metric"]))
    if metric is None:
        if len(metrics) != 1:
            raise DataError(f"the results hold several metrics {metrics}; choose one with metric=...")
        return metrics[0]
    if metric not in metrics:

        raise DataError(expected_one_of("metric", metric, metrics))
    return metric


def _ycol(y: str) -> str:
    if y not in ("mean", "value", "analytic"):

        raise DataError(expected_one_of("y column", y, ["mean", "value", "analytic"]))
    return y


def error_vs_epsilon(results: pd.DataFrame, metric: str | None = None, *, level: str = "all", ax: Any = None,
                     y: str = "mean", logx: bool = True, logy: bool = True, errorbars: bool = True,
                     title: str | None = None) -> Any:
    """Error against ε, one line per configuration.

    ``y``: ``"mean"`` (mean of the per-repetition values, ± one standard error),
    ``"value"`` (the metric of all repetitions together, i.e. with the expectation of the
    definition inside the root) or ``"analytic"`` (closed form from the variances).

    Parameters
    ----------
    results : pandas.DataFrame
        What :func:`hierdp.evaluate` returns.
    metric : str, optional
        The metric to draw (needed when the results hold several).
    level : str, default "all"
        The level whose error is drawn (``"all"``: the whole tree).
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; default a new figure (made without pyplot).
    y : {"mean", "value", "analytic"}, default "mean"
        Which column is drawn.
    logx, logy : bool, default True
        Logarithmic axes (Dawson et al. 2023, Figures 4-5).
    errorbars : bool, default True
        ± one standard error (with ``y="mean"``).
    title : str, optional
        The title (default: metric vs ε).

    Returns
    -------
    matplotlib.axes.Axes
        The axes; ``ax.figure`` shows in Jupyter, ``ax.figure.savefig(...)`` writes it.
    """
    y = _ycol(y)
    metric = _pick_metric(results, metric)
    ax = _axes(ax, (6.0, 4.0))
    sub = results[(results["metric"] == metric) & (results["level"] == level)]
    if sub.empty:
        raise DataError(f"no rows for metric {metric!r} at level {level!r}")
    xcol = "epsilon" if sub["epsilon"].notna().any() else "rho"
    markers = "osD^vP*X"
    for i, (cfg, g) in enumerate(sub.groupby("config", sort=False)):
        g = g.sort_values(xcol)
        yerr = g["std_error"].to_numpy(dtype=float) if (errorbars and y == "mean") else None
        if yerr is not None and np.all(np.isnan(yerr)):
            yerr = None
        ax.errorbar(g[xcol].to_numpy(dtype=float), g[y].to_numpy(dtype=float), yerr=yerr,
                    marker=markers[i % len(markers)], capsize=3, label=str(cfg))
    if logx:
        ax.set_xscale("log")
        xs = np.sort(sub[xcol].dropna().unique())
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_locator(_null_locator())  # label the ε that were run, plainly
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("ε" if xcol == "epsilon" else "ρ")
    ax.set_ylabel(metric)
    ax.set_title(title if title is not None else f"{metric} vs {'ε' if xcol == 'epsilon' else 'ρ'}")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)
    return ax


def error_by_level(results: pd.DataFrame, metric: str | None = None, *, epsilon: float | None = None,
                   ax: Any = None, y: str = "mean", logy: bool = True, title: str | None = None) -> Any:
    """Error at each level of the tree, one line per configuration (needs ``by_level=True``);
    ``y`` as in :func:`error_vs_epsilon` (``"mean"`` or ``"value"``).

    Parameters
    ----------
    results : pandas.DataFrame
        What ``hierdp.evaluate(..., by_level=True)`` returns.
    metric : str, optional
        The metric to draw (needed when the results hold several).
    epsilon : float, optional
        The ε to draw (needed when the results hold several).
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; default a new figure.
    y : {"mean", "value"}, default "mean"
        Which column is drawn.
    logy : bool, default True
        Logarithmic error axis.
    title : str, optional
        The title.

    Returns
    -------
    matplotlib.axes.Axes
    """
    y = _ycol(y)
    metric = _pick_metric(results, metric)
    ax = _axes(ax, (6.0, 4.0))
    sub = results[(results["metric"] == metric) & (results["level"] != "all")]
    if sub.empty:
        raise DataError(f"no per-level rows for {metric!r}; run hierdp.evaluate(..., by_level=True)")
    if epsilon is None:
        eps = sub["epsilon"].dropna().unique()
        if len(eps) > 1:
            raise DataError(f"the results hold several ε {sorted(eps.tolist())}; choose one with epsilon=...")
    else:
        sub = sub[np.isclose(sub["epsilon"].to_numpy(dtype=float), float(epsilon))]
        if sub.empty:
            raise DataError(f"no rows at epsilon={epsilon}")
    levels = list(dict.fromkeys(sub["level"]))
    x = np.arange(len(levels))
    for cfg, g in sub.groupby("config", sort=False):
        g = g.set_index("level").reindex(levels)
        se = g["std_error"].to_numpy(dtype=float)
        ax.errorbar(x, g[y].to_numpy(dtype=float), yerr=None if (y != "mean" or np.all(np.isnan(se))) else se,
                    marker="o", capsize=3, label=str(cfg))
    ax.set_xticks(x, levels)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("level")
    ax.set_ylabel(metric)
    ax.set_title(title if title is not None else f"{metric} by level")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return ax


def decomposition(result: Any, *, dims: tuple[int, int] = (0, 1), ax: Any = None, shade: bool = True,
                  cmap: str = "viridis", figsize: tuple[float, float] = (6.0, 6.0)) -> Any:
    """The leaf regions of a points release (:class:`hierdp.frontends.points.PointsResult`)
    over its public box: cell outlines, shaded by released density (estimate / area, clipped
    at 0) when ``shade``. Two of the coordinates (``dims``) are drawn. Public: the regions
    and estimates are the release's output (Zhang, Xiao & Xie 2016, Figure 1 style).

    Parameters
    ----------
    result : PointsResult
        A points release (``df.dptree.privtree(...)``, :func:`hierdp.release_points`).
    dims : (int, int), default (0, 1)
        The two coordinates drawn.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; default a new figure.
    shade : bool, default True
        Fill each leaf by ``log(1 + density)``; else outlines only.
    cmap : str, default "viridis"
        The colour map.
    figsize : (float, float), default (6.0, 6.0)
        The size of a new figure, in inches.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import numpy as np, pandas as pd, hierdp, warnings
    >>> pts = pd.DataFrame(np.random.default_rng(0).random((2000, 2)), columns=["x", "y"])
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
    ...     r = pts.dptree.privtree(["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1)
    >>> ax = hierdp.plot.decomposition(r)
    >>> ax.get_xlabel()
    'x'
    """
    st = getattr(result, "structure", None)
    if st is None or getattr(st, "lows", None) is None:
        raise DataError("plot.decomposition needs the result of a points release (e.g. df.dptree.privtree(...))")
    from matplotlib.collections import PolyCollection

    ax = _axes(ax, figsize)
    i, j = dims
    leaves = np.flatnonzero(st.is_leaf)
    lo, hi = st.lows[leaves], st.highs[leaves]
    boxes = np.stack([np.c_[lo[:, i], lo[:, j]], np.c_[hi[:, i], lo[:, j]], np.c_[hi[:, i], hi[:, j]],
                      np.c_[lo[:, i], hi[:, j]]], axis=1)
    # a fixed face colour ("none") would win over the colour map in matplotlib >= 3.10: the
    # outlines-only map is drawn only when not shading
    coll = PolyCollection(boxes, edgecolors="0.3", linewidths=0.2, **({} if shade else {"facecolors": "none"}))
    if shade:
        area = np.prod(hi - lo, axis=1)
        dens = np.clip(np.asarray(result.estimate.values, dtype=float)[leaves], 0, None) / area
        coll.set_array(np.log1p(dens))
        coll.set_cmap(cmap)
    ax.add_collection(coll)
    ax.set_xlim(*st.bounds[i])
    ax.set_ylim(*st.bounds[j])
    ax.set_xlabel(st.columns[i])
    ax.set_ylabel(st.columns[j])
    ax.set_title(f"{st.method}: {leaves.size:,} leaves")
    return ax
