"""hierdp.plot figures show inline in Jupyter (issue 33 item 3).

A figure made without pyplot has no display formatter in IPython until pyplot's inline
backend is loaded, so ``ax.figure`` at the end of a cell printed ``<Figure size 600x600
with 1 Axes>`` (notebooks 06, 07). These tests run tiny notebooks in a real kernel
(nbclient) and look for the picture among the cell's outputs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]

DRAW = """\
import numpy as np, pandas as pd, hierdp, warnings
warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
rng = np.random.default_rng(1)
df = pd.DataFrame({"x": rng.random(400), "y": rng.random(400)})
r = df.dptree.privtree(["x", "y"], epsilon=1.0, bounds=[(0, 1), (0, 1)], seed=1)
ax = hierdp.plot.decomposition(r)
"""


def _run(cells: list[str], tmp_path: Path, monkeypatch) -> list[dict]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel picks its inline backend itself
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells for o in c.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    return outputs


def _mimes(outputs: list[dict]) -> set[str]:
    return {m for o in outputs if o.get("output_type") in ("execute_result", "display_data") for m in o.get("data", {})}


def test_a_figure_drawn_without_pyplot_shows_as_an_image(tmp_path, monkeypatch):
    outputs = _run([DRAW + "ax.figure"], tmp_path, monkeypatch)
    mimes = _mimes(outputs)
    assert mimes & {"image/png", "image/svg+xml"}, f"no picture among the outputs, only {sorted(mimes)}"
    png = next(o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {}))
    import base64

    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_users_inline_choice_stands(tmp_path, monkeypatch):
    """With pyplot's inline backend set to SVG first, the figure comes as SVG (no PNG added)."""
    outputs = _run(["%matplotlib inline\n%config InlineBackend.figure_formats = ['svg']\n"
                    "import matplotlib.pyplot as plt", DRAW + "ax.figure"], tmp_path, monkeypatch)
    mimes = _mimes(outputs)
    assert "image/svg+xml" in mimes and "image/png" not in mimes, sorted(mimes)


def test_outside_ipython_nothing_is_registered():
    from matplotlib.figure import Figure

    from hierdp.plot import _register_inline_display

    assert _register_inline_display(Figure) is False


def test_the_shaded_decomposition_fills_its_leaves_by_density():
    """``shade=True`` colours every leaf by its released density (a fixed face colour
    "none" would win over the colour map and leave outlines only)."""
    import io

    import numpy as np
    import pandas as pd

    import hierdp

    rng = np.random.default_rng(3)
    pts = pd.DataFrame(np.clip(np.r_[rng.normal(0.25, 0.03, (3000, 2)), rng.uniform(0, 1, (300, 2))], 0, 1),
                       columns=["x", "y"])
    with pytest.warns(hierdp.NotForPublicationWarning):
        r = pts.dptree.privtree(["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=4)
    ax = hierdp.plot.decomposition(r)
    ax.figure.savefig(io.BytesIO(), format="png")              # draw: the colour map is applied
    faces = ax.collections[0].get_facecolors()
    n = r.tree.n_leaves
    assert faces.shape == (n, 4) and np.all(faces[:, 3] > 0)
    assert len({tuple(f) for f in np.round(faces, 3)}) > 1     # dense and sparse leaves differ
    outlines = hierdp.plot.decomposition(r, shade=False).collections[0].get_facecolors()
    assert outlines.shape[0] <= 1 and np.all(outlines[:, 3] == 0)
