"""The release report's accuracy of the released values (issue 53 item 1): shown first under
"Released values", in words, per level and size band, with how it was computed."""

from __future__ import annotations

import html
import math
import re
import warnings

import numpy as np

import hierdp

CHAIN = ["blue", "nonneg", {"name": "round", "method": "topdown"}]


def _release(tree, values, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded releases warn: not for publication
        return hierdp.release(tree, values, **kw)


def _sparse():
    gen = np.random.default_rng(7)
    parent = np.concatenate([[-1], np.zeros(4, np.int64), np.repeat(np.arange(1, 5), 6)])
    tree = hierdp.Tree.from_parent(parent)
    leaves = np.where(gen.random(24) < 0.5, 0, gen.poisson(30, 24)).astype(np.int64)
    return tree, tree.aggregate(leaves)


def _released_section(path) -> str:
    text = path.read_text()
    start = text.index("<h3>Released values</h3>")
    end = text.index('<h2 id="provenance">')
    return text[start:end]


def _rows(section: str, ident: str) -> list[list[str]]:
    table = re.search(f'<table id="{ident}">(.*?)</table>', section, re.S)
    assert table, ident
    body = table.group(1).split("<tbody>")[1]
    return [[html.unescape(re.sub("<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr>(.*?)</tr>", body)]


def test_report_states_the_released_values_accuracy_in_words_first(tmp_path):
    tree, values = _sparse()
    r = _release(tree, values, epsilon=1.0, postprocess=CHAIN, seed=4)
    section = _released_section(r.report(tmp_path / "r.html"))
    assert "Not shown" not in section
    # first under the heading: the sentences, then the table
    assert section.index('id="accuracy-words"') < section.index('id="released-accuracy"')
    words = [html.unescape(w) for w in
             re.findall(r"<li>(.*?)</li>", section.split('id="accuracy-words"')[1].split("</ul>")[0])]
    rows = _rows(section, "released-accuracy")
    assert [row[0] for row in rows] == ["total", "level_1", "level_2"] and len(words) == 3
    assert words[0].startswith("On average the published grand total is off by about ")
    assert words[1].startswith("On average a level_1's published total is off by about ")
    for sentence, row in zip(words, rows):
        assert "people; 9 times in 10 by at most " in sentence
        mae, moe = float(row[2]), float(row[3])
        about = float(re.search(r"off by about ([\d.,]+)", sentence).group(1).replace(",", ""))
        most = float(re.search(r"at most ([\d.,]+)", sentence).group(1).replace(",", ""))
        assert about == round(mae, 1) and most == moe
    assert [row[1] for row in rows] == ["1", "4", "24"]
    # by size of the published total: the bands of the released values, their units adding up per level
    bands = _rows(section, "released-accuracy-by-size")
    for level, n in (("total", 1), ("level_1", 4), ("level_2", 24)):
        assert sum(int(b[2]) for b in bands if b[0] == level) == n
    released = np.asarray(r.values)[np.asarray(tree.depth) == 2]
    assert sum(int(b[2]) for b in bands if b[0] == "level_2" and b[1] == "0") == int((released == 0).sum())
    method = re.search(r'<p class="muted" id="accuracy-method">(.*?)</p>', section, re.S).group(1)
    assert "parametric bootstrap, 100 repetitions" in method and "No true count was read" in method
    assert "round (topdown)" in html.unescape(method)


def test_report_accuracy_of_one_measured_root_is_its_noise_law(tmp_path):
    # root measured alone, no chain: the stated MAE is E|Z| of the discrete Laplace (by hand),
    # here over the report's 100 repetitions (tolerance 4 standard errors)
    tree = hierdp.Tree.from_parent(np.array([-1, 0, 0]))
    eps = 0.7
    r = _release(tree, np.array([30, 10, 20]), epsilon=eps, budget={"total": eps, "level_1": 0.0},
                 postprocess=[], seed=3)
    rows = _rows(_released_section(r.report(tmp_path / "r.html")), "released-accuracy")
    q = math.exp(-eps)
    mae = 2 * q / (1 - q * q)
    sd = math.sqrt(2 * q * (1 + q * q) / (1 - q * q) ** 2 - mae * mae)
    assert rows[0][0] == "total" and abs(float(rows[0][2]) - mae) < 4 * sd / 10


def test_report_of_a_seeded_release_is_reproducible_and_a_linear_chain_keeps_its_rmse(tmp_path):
    tree, values = _sparse()
    r = _release(tree, values, epsilon=1.0, postprocess=["blue"], seed=4)
    a = _released_section(r.report(tmp_path / "a.html"))
    b = _released_section(r.report(tmp_path / "b.html"))
    assert a == b
    assert a.index('id="released-accuracy"') < a.index('id="released"')   # accuracy first, then the RMSE


def test_report_says_why_when_it_cannot_simulate(tmp_path):
    tree, values = _sparse()
    r = _release(tree, values, plan={"name": "ghazi", "alpha": 0.5}, epsilon=1.0, delta=1e-6, seed=1,
                 postprocess=[])
    section = _released_section(r.report(tmp_path / "g.html"))
    assert 'id="released-accuracy"' not in section
    assert "Not shown" in section and "plan &#x27;ghazi&#x27;" in section
