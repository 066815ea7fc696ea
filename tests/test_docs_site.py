"""The built documentation shows instead of tells (issue 33 item 3).

The site is built once per test session (``sphinx-build -W``, as ``.ci/lint-and-docs`` does,
into a temporary folder; :func:`built_site`, shared with ``tests/test_docs_browser.py``);
``.ci/lint-and-docs`` runs these tests again on the site it built (``HIERDP_DOCS_SITE``), so
they run in CI even where the test install lacks Sphinx; where they ran already in CI's test
run, it reuses that build (``HIERDP_DOCS_BUILD_INTO``) instead.
The notebooks come executed (docs/_nbcache.py: the copies ``tests/test_notebooks.py``
stored when current, else the build executes them), so every notebook page and the
landing page carry at least one figure (an ``<img>`` or an inline ``<svg>``).
"""

from __future__ import annotations

import atexit
import functools
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
FIGURE = re.compile(r"<img\b|<svg\b", flags=re.I)
#: text that names the machine that built a page: a home, root or temporary folder, an installed
#: package's folder (issue 53: notebook pages showed the builder's cache and kernel paths)
MACHINE = re.compile(r"/root/|/home/|/tmp/|/var/folders/|site-packages|\b[A-Z]:\\{1,2}Users\b")
#: with this variable naming a folder, :func:`built_site` builds the site there and keeps it,
#: marked with :data:`BUILT_MARK` once the build passed; ``.ci/run`` sets it so that
#: ``.ci/lint-and-docs`` reuses that site (and these tests' results) instead of building twice
KEEP_ENV = "HIERDP_DOCS_BUILD_INTO"
BUILT_MARK = ".built-by-tests"

pytest.importorskip("sphinx", reason="the docs site needs the docs extra (pip install -e '.[docs]')")
pytest.importorskip("myst_nb", reason="the docs site needs the docs extra (pip install -e '.[docs]')")
pytest.importorskip("nbclient")


@functools.lru_cache(maxsize=1)
def built_site() -> Path:
    """Build the docs once per process into a temporary folder (removed at exit); with
    ``HIERDP_DOCS_SITE`` naming a site built just before (``.ci/lint-and-docs`` passes its
    own ``docs/_build/html``), test that one instead."""
    given = os.environ.get("HIERDP_DOCS_SITE")
    if given:
        site = Path(given).resolve()
        if not (site / "index.html").is_file():
            pytest.fail(f"HIERDP_DOCS_SITE={given!r} holds no built site (no index.html); build it or unset it")
        return site
    out = Path(tempfile.mkdtemp(prefix="hierdp-docs-site-"))
    atexit.register(shutil.rmtree, out, True)
    keep = os.environ.get(KEEP_ENV)  # .ci/run: build where .ci/lint-and-docs looks, once
    html = Path(keep).resolve() if keep else out / "html"
    if keep:
        shutil.rmtree(html, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                          "-d", str(out / "doctrees"), str(DOCS), str(html)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if run.returncode != 0:
        pytest.fail(f"the docs build failed ({run.returncode}):\n{run.stderr[-4000:]}")
    if keep:
        (html / BUILT_MARK).write_text("sphinx-build -W: no warnings\n", encoding="utf-8")
    return html


@pytest.fixture(scope="module")
def site() -> Path:
    return built_site()


def _figures(page: Path) -> int:
    return len(FIGURE.findall(page.read_text(encoding="utf-8")))


def test_the_figure_counter_counts_figures(tmp_path):
    page = tmp_path / "p.html"
    page.write_text('<p>text</p><pre>&lt;img&gt;</pre>', encoding="utf-8")
    assert _figures(page) == 0                       # escaped markup in a code block is no figure
    page.write_text('<img src="a.png" alt=""><div><SVG viewBox="0 0 1 1"></svg></div>', encoding="utf-8")
    assert _figures(page) == 2


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_page_has_a_figure(notebook, site):
    page = site / "_notebooks" / f"{notebook.stem}.html"
    assert page.is_file(), f"{notebook.name} has no page in the built docs"
    text = page.read_text(encoding="utf-8")
    assert "cell_output" in text, f"{notebook.name}: the page shows no outputs (not executed?)"
    assert _figures(page) >= 1, f"{notebook.name}: no <img> or <svg> on its page"
    assert "&lt;Figure size" not in text and "<Figure size" not in text, \
        f"{notebook.name}: a figure printed as text instead of showing"
    # the notebook's checks run in cells the site omits (tags remove-cell): no assert shown to readers
    assert '<span class="k">assert</span>' not in text, f"{notebook.name}: the page shows an assert"
    assert "the notebook's checks" not in text, f"{notebook.name}: a check cell is shown"


def test_the_landing_page_shows_install_example_and_a_picture(site):
    text = (site / "index.html").read_text(encoding="utf-8")
    assert "pip install" in text
    assert _figures(site / "index.html") >= 1, "no picture on the landing page"
    assert "cell_output" in text, "the example's output is not shown (index.md not executed?)"
    body = text[text.index("<body"):]
    # the user guide opens with Getting started, not Architecture
    guide = [m for m in re.findall(r'href="([^"#]+)\.html"', body)]
    assert guide.index("_notebooks/01_getting_started") < guide.index("architecture")
    assert guide.index("_notebooks/01_getting_started") < guide.index("spec")


def test_the_sidebar_numbers_every_notebook_and_no_guide_page(site):
    """The navigation lists the notebooks as "NN · title" (their files' numbers), whichever
    caption they sit under, and the guide pages without a number (issue 53)."""
    text = (site / "index.html").read_text(encoding="utf-8")
    nav = text[text.index('class="sphinxsidebar'):] if 'class="sphinxsidebar' in text else text
    links = re.findall(r'<a class="reference internal" href="([^"#]+)\.html">(.*?)</a>', nav)
    notebooks = {href: re.sub(r"<[^>]+>", "", label) for href, label in links if href.startswith("_notebooks/")}
    assert set(notebooks) == {f"_notebooks/{p.stem}" for p in NOTEBOOKS}, notebooks
    for href, label in notebooks.items():
        assert label.startswith(f"{href.split('/')[1][:2]} · "), (href, label)
    guide = [re.sub(r"<[^>]+>", "", label) for href, label in links if "/" not in href and href != "index"]
    assert guide and not [g for g in guide if re.match(r"\d", g)], guide


def test_the_testing_page_describes_every_suite_and_check(site):
    """api/testing (issue 53: it was nearly empty): every suite of ``hierdp.testing`` with
    what it checks (its module's list) and every one of its tests by name, and an example
    of a plugin's test module."""
    import inspect

    import hierdp.testing

    text = (site / "api" / "testing.html").read_text(encoding="utf-8")
    body = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text[text.index('<div class="body"'):])).split())
    for name in hierdp.testing.__all__:
        suite = getattr(hierdp.testing, name)
        assert f"hierdp.testing.{suite.__module__.rsplit('.', 1)[1]}.{name}" in text, f"{name} is not documented"
        opening = " ".join((inspect.getmodule(suite).__doc__ or "").split()[:4])  # "Contract tests every noise"
        assert opening and opening in body, f"{name}: its module's description is not on the page"
        for test in (t for t in dir(suite) if t.startswith("test_")):
            assert test in body, f"{name}.{test} is not listed"
    assert body.count("What is checked") >= 4                    # the suites' lists, not only their names
    code = html.unescape(re.sub(r"<[^>]+>", "", text))          # highlighted code: tokens in spans
    assert "class TestMyMechanism(BaseMechanismTests)" in code and "check_executor(MyExecutor" in code


def test_no_page_names_the_machine_that_built_it(site):
    """Every page of the site, the API reference and the search page included, as text."""
    found = {}
    for page in sorted(site.rglob("*.html")):
        body = page.read_text(encoding="utf-8")
        text = html.unescape(re.sub(r"<[^>]+>", "", body[body.find("<body"):]))
        hits = [text[max(0, m.start() - 50):m.end() + 30].replace("\n", " ") for m in MACHINE.finditer(text)]
        if hits:
            found[str(page.relative_to(site))] = hits[:3]
    assert found == {}, found


def test_the_performance_log_is_an_appendix_and_the_summary_is_short(site):
    assert (site / "appendix" / "performance-log.html").is_file()
    summary = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert len(summary.splitlines()) < 120, "docs/performance.md is a one-page summary; details go in the log"
    assert "appendix/performance-log.md" in summary
