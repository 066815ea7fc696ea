"""Sphinx configuration: the user guide (Markdown in docs/), the notebooks (rendered, not
executed: the test suite executes them) and the API reference (autodoc, numpy-style
docstrings through napoleon). Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document the checkout, not an installed copy

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

# the notebooks live in notebooks/ (the tests run them there); Sphinx reads only its source
# folder, so the build copies them in (docs/_notebooks/ is generated and git-ignored)
_NB = DOCS / "_notebooks"
shutil.rmtree(_NB, ignore_errors=True)
_NB.mkdir()
for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copy2(nb, _NB / nb.name)

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

# notebooks: render as stored, never execute (tests/test_notebooks.py executes them)
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
