"""Sphinx configuration: the user guide (Markdown in docs/), the notebooks (executed, with
every output and figure: the copies the test suite executed when they are current, see
docs/_nbcache.py) and the API reference (autodoc, numpy-style docstrings through napoleon).
Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document the checkout, not an installed copy
sys.path.insert(0, str(DOCS))
# kernels the build starts (the landing page's cells, the notebooks) import this checkout too
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)

import _nbcache  # noqa: E402

import hierdp  # noqa: E402

project = "hierdp"
author = "hierdp developers"
copyright = "hierdp developers"  # noqa: A001
release = hierdp.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_nb",  # Markdown (myst-parser) and notebooks
]

# the notebooks live in notebooks/, stored without outputs; Sphinx reads only its source
# folder, so the build puts executed copies in (docs/_notebooks/ is generated and git-ignored):
# the ones tests/test_notebooks.py stored when they are current, else it executes them here
# (HIERDP_DOCS_NOTEBOOKS=stored: the notebooks as stored, without outputs, for a quick look
# at the text; the figure tests then fail, so CI never sets it)
if os.environ.get("HIERDP_DOCS_NOTEBOOKS") == "stored":
    _how = _nbcache.stored_copies(DOCS / "_notebooks")
else:
    _how = _nbcache.executed_copies(DOCS / "_notebooks")
print("notebooks:", ", ".join(f"{k} {v}" for k, v in _how.items()))

# the guide pages' figures (docs/_figures/: one module per figure, drawn from this checkout's
# code and numbers into docs/_generated/, git-ignored; the pages include them from there)
import _figures  # noqa: E402

_figures.build(DOCS / "_generated")

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

# notebooks: rendered as executed above (myst-nb itself executes nothing)
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "deflist", "colon_fence"]
myst_heading_anchors = 3

# API reference
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
autosummary_generate = False
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = f"hierdp {release}"
# wide enough for the code blocks (88-column lines) on a laptop screen; never wider than the
# window (the browser test checks nothing overflows at 1280 px)
html_theme_options = {"page_width": "min(1200px, 96vw)", "sidebar_width": "220px", "body_max_width": "none"}
html_static_path = ["_static"]
html_css_files = ["hierdp.css"]  # wide tables scroll within the column (docs/_static/hierdp.css)
