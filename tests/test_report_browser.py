"""The release report in a real browser (issue 33 item 2): headless Chromium renders it.

Checks on the DOM Chromium builds (``--dump-dom``): every level is in the budget table,
the invariants are flagged, a planted true count is absent, a label holding a script
does not run, nothing overflows horizontally at 1280 px, and no request leaves the page
(a recording proxy sees every request Chromium makes; Resource Timing lists every load
the page starts, failed ones too). Each detector is first shown to fire on a page made to
trip it. Screenshots are saved as test artefacts (the folder is printed; set
``HIERDP_ARTEFACTS`` to keep them in a folder of your choice).

Chromium is the Debian package ``chromium`` (``.ci/run`` installs it when it can); the
tests skip with a message when no browser is found (``HIERDP_CHROMIUM`` names one).
"""

from __future__ import annotations

import html
import http.server
import json
import math
import os
import re
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import hierdp
from tests.test_report import PLANTED, PLANTED_NOTE, XSS, _marginals, _parse, _per_level, _privtree

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")


def _find_browser() -> str | None:
    named = os.environ.get("HIERDP_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


BROWSER = _find_browser()
if BROWSER is None:
    pytest.skip("headless Chromium not found (install it: apt-get install chromium; or set HIERDP_CHROMIUM to "
                "its path); the browser tests of the report are skipped", allow_module_level=True)

#: flags that keep Chromium's own background traffic low and the run self-contained
_QUIET = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-default-apps", "--disable-extensions", "--no-pings", "--disable-domain-reliability",
          "--disable-client-side-phishing-detection", "--metrics-recording-only",
          "--safebrowsing-disable-auto-update", "--password-store=basic", "--hide-scrollbars",
          "--disable-features=OptimizationHints,Translate,MediaRouter,NetworkTimeServiceQuerying,"
          "AutofillServerCommunication,CertificateTransparencyComponentUpdater"]
#: hosts Chromium itself contacts at start-up (sign-in, variations), whatever the page: an empty
#: page makes these requests too; a page's own requests go elsewhere
_BROWSER_OWN = {"accounts.google.com", "www.google.com", "clients2.google.com"}


def _chromium(tmp: Path, target: Path, *flags: str, width: int = 1280, height: int = 900) -> str:
    profile = tmp / f"profile-{os.getpid()}-{threading.get_ident()}-{len(list(tmp.iterdir()))}"
    cmd = [BROWSER, *_QUIET, f"--user-data-dir={profile}", f"--window-size={width},{height}", *flags,
           target.resolve().as_uri()]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if run.returncode != 0:
        pytest.fail(f"chromium exited {run.returncode}: {run.stderr[-2000:]}")
    return run.stdout


def dump_dom(tmp: Path, page: Path, *flags: str, width: int = 1280) -> str:
    """The DOM after the page has loaded (scripts run, styles applied)."""
    return _chromium(tmp, page, "--dump-dom", *flags, width=width)


def _without_csp(text: str) -> str:
    return re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text, count=1)


_PROBE = ("<script>window.addEventListener('load', function () {"
          "var d = document.documentElement, out = document.createElement('div'); out.id = 'probe';"
          "out.setAttribute('data-scroll-width', d.scrollWidth); out.setAttribute('data-client-width', d.clientWidth);"
          "out.setAttribute('data-resources', JSON.stringify(performance.getEntriesByType('resource')"
          ".map(function (e) { return e.name; })));"
          "var wide = []; document.querySelectorAll('body *').forEach(function (el) {"
          "var r = el.getBoundingClientRect(); if (r.right > d.clientWidth + 0.5 && !el.closest('.scroll')) "
          "wide.push(el.tagName + (el.id ? '#' + el.id : '')); });"
          "out.setAttribute('data-wide', JSON.stringify(wide.slice(0, 20)));"
          "var scrolled = []; document.querySelectorAll('.scroll').forEach(function (el) {"
          "if (el.scrollWidth > el.clientWidth + 1) scrolled.push(el.firstChild && el.firstChild.id || '?'); });"
          "out.setAttribute('data-scrolled', JSON.stringify(scrolled));"
          "var fonts = []; document.querySelectorAll('svg text').forEach(function (t) {"
          "var m = t.getScreenCTM(), k = m ? Math.sqrt(m.a * m.a + m.b * m.b) : 1;"
          "fonts.push(parseFloat(getComputedStyle(t).fontSize) * k); });"
          "out.setAttribute('data-min-font', fonts.length ? Math.min.apply(null, fonts) : -1);"
          "document.body.appendChild(out); });"
          "</script>")


def probe(tmp: Path, text: str, name: str, width: int = 1280) -> dict:
    """Load a copy of ``text`` with a measuring script (and without the page's CSP, so the
    script may run and the page's own loads are not blocked) in a window ``width`` px wide:
    its width, the loads it started (Resource Timing lists failed ones too) and the smallest
    size any SVG text is drawn at (its font size times its chart's scale on screen; -1
    without SVG text)."""
    page = tmp / name
    page.write_text(_without_csp(text).replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    dom = dump_dom(tmp, page, "--host-resolver-rules=MAP * ~NOTFOUND", width=width)
    m = re.search(r'<div id="probe" data-scroll-width="(\d+)" data-client-width="(\d+)" '
                  r'data-resources="([^"]*)" data-wide="([^"]*)" data-scrolled="([^"]*)" '
                  r'data-min-font="([-\d.e]+)"', dom)
    assert m, "the probe did not run"
    return {"scroll": int(m.group(1)), "client": int(m.group(2)),
            "resources": json.loads(html.unescape(m.group(3))), "wide": json.loads(html.unescape(m.group(4))),
            "scrolled": json.loads(html.unescape(m.group(5))), "min_font": float(m.group(6))}


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def _any(self) -> None:
        type(self).seen.append(self.path)
        self.send_response(502)
        self.end_headers()

    do_GET = do_POST = do_HEAD = do_CONNECT = do_OPTIONS = _any

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def proxy():
    """A proxy on the loopback that records every request Chromium sends through it and
    answers none (all of Chromium's traffic goes through it, the loopback included)."""
    handler = type("Rec", (_Recorder,), {"seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield handler, srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def requests_made(tmp: Path, page: Path, proxy) -> list[str]:
    handler, port = proxy
    handler.seen.clear()
    dump_dom(tmp, page, f"--proxy-server=http://127.0.0.1:{port}", "--proxy-bypass-list=<-loopback>")
    hosts = []
    for target in handler.seen:
        host = target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        if host not in _BROWSER_OWN:
            hosts.append(target)
    return hosts


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    folder = Path(os.environ["HIERDP_ARTEFACTS"]) if os.environ.get("HIERDP_ARTEFACTS") else \
        tmp_path_factory.mktemp("report-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nreport screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, tuple[hierdp.ReleaseResult, Path]]:
    folder = tmp_path_factory.mktemp("reports")
    out = {}
    for name, result in {"per_level": _per_level(), "marginals": _marginals(), "privtree": _privtree(),
                         "seeded": _per_level(seed=5)}.items():
        out[name] = (result, result.report(folder / f"{name}.html"))
    return out


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


# ------------------------------------------------------------------ the DOM
@pytest.mark.parametrize("kind", ["per_level", "marginals", "privtree", "seeded"])
def test_every_level_is_in_the_rendered_budget_table(kind, pages, tmp_path):
    result, page = pages[kind]
    dom = dump_dom(tmp_path, page)
    table = _parse(dom).tables["budget"]
    shown = [r[0] for r in table["body"]]
    for entry in result.ledger.to_dict()["levels"]:
        names = entry["run"]["names"] if "run" in entry else [entry["level"]]
        assert all(n in shown or n in dom for n in names)
        if "run" not in entry:
            assert entry["level"] in shown
    for s in result.ledger.decomposition.get("spends", []):
        assert s["label"] in shown


def test_the_invariants_are_flagged_in_the_rendered_page(pages, tmp_path):
    result, page = pages["marginals"]
    dom = dump_dom(tmp_path, page)
    flagged = re.findall(r'<strong class="invariant">(NOT PROTECTED[^<]*)</strong>', dom)
    assert len(flagged) == len(result.ledger.invariants) == 2
    assert all(html.escape(inv, quote=True) in f or inv in html.unescape(f)
               for inv, f in zip(result.ledger.invariants, flagged))
    assert "NOT PROTECTED" not in dump_dom(tmp_path, pages["per_level"][1])


def test_the_seeded_release_shows_its_banner(pages, tmp_path):
    assert 'id="not-for-publication"' in dump_dom(tmp_path, pages["seeded"][1])
    assert 'id="not-for-publication"' not in dump_dom(tmp_path, pages["per_level"][1])


@pytest.mark.parametrize("kind", ["per_level", "seeded"])
def test_no_planted_true_count_in_the_rendered_page(kind, pages, tmp_path):
    result, page = pages[kind]
    dom = dump_dom(tmp_path, page)
    leaves = np.arange(result.tree.n_leaves) * 11 + 5
    leaves[4] = PLANTED
    for secret in (PLANTED, PLANTED_NOTE, int(leaves.sum())):
        assert str(secret) not in dom and f"{secret:,}" not in dom


def test_a_script_in_a_label_does_not_run(tmp_path):
    tree = hierdp.Tree.complete(fanout=2, height=3, level_names=XSS)
    result = hierdp.release(tree, tree.aggregate(np.arange(4)), epsilon=1.0, notes=XSS)
    text = result.report(tmp_path / "xss.html", title=XSS[0]).read_text(encoding="utf-8")
    # the escaping alone stops it (the page's CSP removed), and the page as shipped too
    bare = tmp_path / "bare.html"
    bare.write_text(_without_csp(text), encoding="utf-8")
    for page in (tmp_path / "xss.html", bare):
        dom = dump_dom(tmp_path, page)
        assert "<title>pwned</title>" not in dom
        assert not re.search(r"<img\b", dom) and "<b>x</b>" not in dom
        assert "&lt;script&gt;document.title=" in dom                      # shown as text
    # the detector fires: the same payload unescaped runs
    trap = tmp_path / "trap.html"
    trap.write_text(_without_csp(text).replace("</main>", XSS[0] + "</main>"), encoding="utf-8")
    assert "<title>pwned</title>" in dump_dom(tmp_path, trap)


# ------------------------------------------------------------------ no network
def test_no_request_leaves_the_page(pages, tmp_path, proxy):
    control = tmp_path / "control.html"
    control.write_text('<html><body><img src="http://example.test/x.png">'
                       '<link rel="stylesheet" href="https://fonts.example.test/f.css"></body></html>',
                       encoding="utf-8")
    seen = requests_made(tmp_path, control, proxy)                  # the proxy sees a page's requests
    assert any("example.test" in s for s in seen) and any("fonts.example.test" in s for s in seen)
    for kind, (_, page) in pages.items():
        assert requests_made(tmp_path, page, proxy) == [], kind


def test_the_page_starts_no_load_even_without_its_csp(pages, tmp_path):
    trap = probe(tmp_path, '<html><head><style>body{background:url("http://bg.example.test/a.png")}</style></head>'
                           '<body><img src="http://example.test/x.png"></body></html>', "trap.html")
    assert sorted(trap["resources"]) == ["http://bg.example.test/a.png", "http://example.test/x.png"]
    for kind, (_, page) in pages.items():
        assert probe(tmp_path, page.read_text(encoding="utf-8"), f"{kind}-probe.html")["resources"] == [], kind


# ------------------------------------------------------------------ layout
def test_nothing_overflows_horizontally_at_1280px(pages, tmp_path):
    wide = probe(tmp_path, '<html><body><div style="width:3000px">wide</div></body></html>', "wide.html")
    assert wide["scroll"] > wide["client"] and wide["wide"]          # the detector fires
    long_name = "x" * 400
    tree = hierdp.Tree.complete(fanout=2, height=3, level_names=["total", long_name, "y" * 120])
    long = hierdp.release(tree, tree.aggregate(np.arange(4)), epsilon=1.0, notes=["z" * 900])
    texts = {k: p.read_text(encoding="utf-8") for k, (_, p) in pages.items()}
    texts["long labels"] = long.report(tmp_path / "long.html").read_text(encoding="utf-8")
    for kind, text in texts.items():
        m = probe(tmp_path, text, f"{kind.replace(' ', '_')}-w.html")
        assert m["client"] <= 1280 and m["scroll"] <= m["client"], (kind, m)
        assert m["wide"] == [], (kind, m["wide"])
        if kind != "long labels":       # the tables of an ordinary release fit: no box needs scrolling
            assert m["scrolled"] == [], (kind, m["scrolled"])


def test_nothing_overflows_and_no_chart_text_is_under_11px_at_1000px(pages, tmp_path):
    # the detectors fire: a wide block, and a chart whose 12 px text is drawn at half size
    wide = probe(tmp_path, '<html><body><div style="width:1400px">wide</div></body></html>', "wide.html", 1000)
    assert wide["scroll"] > wide["client"] and wide["wide"]
    shrunk = probe(tmp_path, '<html><body><div style="width:450px"><svg viewBox="0 0 900 50" width="900" '
                             'style="max-width:100%;height:auto" font-size="12"><text y="20">x</text></svg></div>'
                             "</body></html>", "shrunk.html", 1000)
    assert 5.5 < shrunk["min_font"] < 6.5
    tree = hierdp.Tree.complete(fanout=3, height=3)
    uneven = hierdp.release(tree, tree.aggregate(np.arange(9) * 4), epsilon=1.0,
                            budget={"total": 0.2, "level_1": 0.3, "level_2": 0.5})
    texts = {k: p.read_text(encoding="utf-8") for k, (_, p) in pages.items()}
    texts["uneven"] = uneven.report(tmp_path / "uneven.html").read_text(encoding="utf-8")
    for kind, text in texts.items():
        m = probe(tmp_path, text, f"{kind}-1000.html", 1000)
        assert m["client"] <= 1000 and m["scroll"] <= m["client"], (kind, m)
        assert m["wide"] == [], (kind, m["wide"])
        assert m["scrolled"] == [], (kind, m["scrolled"])             # the tables fit too: no box scrolls
        assert m["min_font"] >= 11, (kind, m["min_font"])           # every page here draws a chart
    # the uneven split draws its three bar charts (the detector above reads them)
    assert texts["uneven"].count("<svg") == 3


def test_the_plain_language_section_is_rendered_first(pages, tmp_path):
    for kind, (result, page) in pages.items():
        dom = dump_dom(tmp_path, page, width=1000)
        assert dom.index('id="plain-language"') < dom.index('id="guarantee"'), kind
        section = dom[dom.index('id="plain-language"'):dom.index('id="guarantee"')]
        ids = re.findall(r'<p id="(plain-[a-z]+)"', section)
        assert ids[-4:] == ["plain-loss", "plain-neighbours", "plain-published", "plain-exact"], kind
        assert ("plain-caution" in ids) == (not result.ledger.for_publication), kind
        assert f"= {math.exp(result.ledger.epsilon):.3g} times as likely" in html.unescape(section), kind
        assert "e<sup>ε</sup>" in section


def test_screenshots_at_1280px(pages, tmp_path, artefacts):
    for kind, (_, page) in pages.items():
        shot = artefacts / f"report-{kind}.png"
        _chromium(tmp_path, page, f"--screenshot={shot}", height=2400)
        assert _png_size(shot) == (1280, 2400), kind
        assert shot.stat().st_size > 20_000                           # a rendered page, not a blank one
    print(f"screenshots saved: {sorted(p.name for p in artefacts.glob('report-*.png'))} in {artefacts}")
