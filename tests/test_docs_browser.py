"""The docs in a real browser: headless Chromium renders the built pages (built once per
session, tests/test_docs_site.py).

The landing page (issue 33 item 2) shows a figure that has loaded, nothing overflows
horizontally at 1280 px, and no request leaves the site; a screenshot is saved as a test
artefact (``HIERDP_ARTEFACTS`` keeps it in a folder of your choice). The guide pages and
the notebooks (issue 53) each show a figure that has loaded, every image they hold loads,
nothing overflows at 1280 px, and no text on them names the machine that built them (a
home, root or temporary folder, site-packages). Skips, saying why, where no Chromium is
found (tests/test_report_browser.py).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from tests.test_docs_site import MACHINE, NOTEBOOKS, built_site
from tests.test_report_browser import _chromium, _png_size, artefacts, dump_dom, proxy, requests_made

__all__ = ["artefacts", "proxy"]  # the harness's fixtures, used here by name

# layout and loads as the browser sees them once the page has loaded: the document's width,
# elements reaching past the right edge (outside boxes that scroll or clip on purpose, such
# as code blocks), every load the page started (Resource Timing lists failed ones too), and
# the images and inline SVGs with their rendered size
_PROBE = """<script>window.addEventListener('load', function () {
var d = document.documentElement, out = document.createElement('div'); out.id = 'probe';
function clipped(el) { for (var p = el.parentElement; p; p = p.parentElement) {
  var o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return true; }
  return false; }
var wide = []; document.querySelectorAll('body *').forEach(function (el) {
  var r = el.getBoundingClientRect(); if (r.width > 0 && r.right > d.clientWidth + 0.5 && !clipped(el))
  wide.push(el.tagName + (el.className ? '.' + el.className : '')); });
var figs = []; document.querySelectorAll('img, svg').forEach(function (el) {
  var r = el.getBoundingClientRect();
  figs.push([el.tagName, Math.round(r.width), Math.round(r.height), el.tagName !== 'IMG' || el.naturalWidth]); });
out.setAttribute('data-m', JSON.stringify({scroll: d.scrollWidth, client: d.clientWidth, wide: wide.slice(0, 20),
  figs: figs, resources: performance.getEntriesByType('resource').map(function (e) { return e.name; }),
  text: document.body.textContent}));
document.body.appendChild(out); });
</script>"""


#: the guide pages and every notebook page (issue 53's acceptance: figures present, nothing
#: overflowing, no machine paths in any page)
GUIDE = ["scale", "privtree", "spec", "security", "comparison", "census", "report",
         *[f"_notebooks/{p.stem}" for p in NOTEBOOKS]]


@pytest.fixture(scope="module")
def landing() -> Path:
    return built_site() / "index.html"


@pytest.fixture(scope="module")
def guide(tmp_path_factory):
    """``guide(name)``: what the probe saw on the built page ``name`` at 1280 px, measured once."""
    seen: dict[str, dict] = {}
    tmp = tmp_path_factory.mktemp("guide")

    def measure(name: str) -> dict:
        if name not in seen:
            page = built_site() / f"{name}.html"
            assert page.is_file(), f"{name}.html is not in the built site"
            seen[name] = _measure(tmp, page)
        return seen[name]

    return measure


def _measure(tmp: Path, page: Path, width: int = 1280) -> dict:
    """Load a copy of ``page`` beside it (its styles and images resolve as on the site) with
    the probe, and return what the probe saw."""
    copy = page.with_name(f"probe-{width}-{page.name}")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    try:
        dom = dump_dom(tmp, copy, "--host-resolver-rules=MAP * ~NOTFOUND", width=width)
    finally:
        copy.unlink()
    m = re.search(r'<div id="probe" data-m="([^"]*)"', dom)
    assert m, "the probe did not run"
    return json.loads(html.unescape(m.group(1)))


def test_the_probe_sees_overflow_and_broken_images(tmp_path):
    trap = tmp_path / "trap.html"
    trap.write_text('<html><body><div style="width:3000px">wide</div><img src="missing.png" width="10" '
                    'height="10"><pre style="overflow-x:auto"><span style="display:inline-block;width:4000px">'
                    'scrolls</span></pre></body></html>', encoding="utf-8")
    m = _measure(tmp_path, trap)
    assert m["scroll"] > m["client"] and m["wide"] == ["DIV"]        # the scrolling <pre> is not flagged
    assert m["figs"] == [["IMG", 10, 10, 0]]                          # a broken image has no natural width


def test_the_probe_reads_the_text_a_machine_path_hides_in(tmp_path):
    trap = tmp_path / "trap.html"
    trap.write_text('<html><body><p>cached in <code>~/.cache/hierdp</code></p><details><summary>more</summary>'
                    '<pre>compiling kernels ... /root/.cache/hierdp/kernels-1</pre></details></body></html>',
                    encoding="utf-8")
    text = _measure(tmp_path, trap)["text"]
    assert MACHINE.findall(text) == ["/root/"]                        # in a closed <details> too; ~ is no path
    assert not MACHINE.search("specs/data/pl94_counts.csv, out/pl94/, /tmp (sticky)")
    assert MACHINE.search(r"C:\Users\ann") and MACHINE.search(r"'C:\\Users\\ann'")
    assert MACHINE.search("/usr/lib/python3/site-packages/x")


def test_the_landing_page_renders_with_a_loaded_figure(landing, tmp_path):
    m = _measure(tmp_path, landing)
    loaded = [f for f in m["figs"] if f[1] >= 200 and f[2] >= 150 and f[3]]
    assert loaded, f"no figure of a visible size loaded on the landing page: {m['figs']}"


def test_nothing_overflows_horizontally_at_1280px(landing, tmp_path):
    m = _measure(tmp_path, landing)
    assert m["client"] <= 1280 and m["scroll"] <= m["client"], m
    assert m["wide"] == [], m["wide"]


def test_no_request_leaves_the_site(landing, tmp_path, proxy):
    m = _measure(tmp_path, landing)
    outside = [r for r in m["resources"] if not r.startswith("file:")]
    assert outside == [], outside
    assert requests_made(tmp_path, landing, proxy) == []


def test_screenshot_at_1280px(landing, tmp_path, artefacts):
    shot = artefacts / "docs-landing.png"
    _chromium(tmp_path, landing, f"--screenshot={shot}", height=2000)
    assert _png_size(shot) == (1280, 2000)
    assert shot.stat().st_size > 20_000                               # a rendered page, not a blank one
    print(f"landing page screenshot: {shot}")


@pytest.mark.parametrize("name", GUIDE)
def test_the_guide_page_shows_its_figures_loaded(name, guide):
    """A figure of a visible size that has loaded, and no broken image anywhere on the page."""
    m = guide(name)
    loaded = [f for f in m["figs"] if f[1] >= 200 and f[2] >= 120 and f[3]]
    assert loaded, f"{name}: no figure of a visible size loaded: {m['figs']}"
    broken = [f for f in m["figs"] if f[0] == "IMG" and not f[3]]
    assert broken == [], f"{name}: images that did not load: {broken}"


@pytest.mark.parametrize("name", GUIDE)
def test_the_guide_page_fits_1280px(name, guide):
    m = guide(name)
    assert m["client"] <= 1280 and m["scroll"] <= m["client"], {k: m[k] for k in ("scroll", "client", "wide")}
    assert m["wide"] == [], f"{name}: elements reach past the right edge: {m['wide']}"


@pytest.mark.parametrize("name", GUIDE)
def test_the_guide_page_names_no_machine_path(name, guide):
    text = guide(name)["text"]
    found = [text[max(0, m.start() - 60):m.end() + 60].replace("\n", " ") for m in MACHINE.finditer(text)]
    assert found == [], f"{name} shows the machine that built it: {found[:5]}"
