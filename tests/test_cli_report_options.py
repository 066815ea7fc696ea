"""``hierdp report`` takes the fields a ledger cannot know (issue 53 item 2): the title, the
publisher, the intended use, the region and the authors; left out, the page is titled by the
release id and the registry record marks them to be completed."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import yaml

import hierdp
from hierdp.cli import main


def _ledger(tmp_path: Path) -> Path:
    t = hierdp.Tree.complete(fanout=2, height=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        r = hierdp.release(t, t.aggregate(np.arange(4)), epsilon=1.0, seed=1)
    path = tmp_path / "rel.ledger.json"
    path.write_text(r.ledger.to_json(), encoding="utf-8")
    return path


def test_the_report_command_takes_title_publisher_and_the_record_fields(tmp_path: Path) -> None:
    led = _ledger(tmp_path)
    page, record = tmp_path / "r.html", tmp_path / "r.yaml"
    fields = ["--title", "Population by county, 2020", "--publisher", "State Data Center",
              "--intended-use", "redistricting", "--region", "Wyoming", "--author", "A. Statistician",
              "--author", "B. Analyst"]
    assert main(["report", str(led), "-o", str(page), *fields]) == 0
    html = page.read_text(encoding="utf-8")
    assert "<title>Population by county, 2020" in html and "State Data Center" in html
    assert "hierdp release " + hierdp.Ledger.from_json(led.read_text()).release_id not in html.split("</title>")[0]
    assert main(["report", str(led), "-o", str(record), *fields]) == 0
    text = record.read_text(encoding="utf-8")
    rec = yaml.safe_load(text)
    assert "Population by county, 2020" in text and "State Data Center" in text and "Wyoming" in text
    assert "A. Statistician" in text and "B. Analyst" in text and "redistricting" in text
    def todo(t: str) -> int:  # fields left to the curator (the header line names the marker once)
        return sum("TO BE COMPLETED" in ln for ln in t.splitlines() if not ln.startswith("#"))

    assert rec is not None and todo(text) == 0  # every field the ledger cannot know was given
    assert main(["report", str(led), "-o", str(tmp_path / "bare.yaml"), "-q"]) == 0
    assert todo((tmp_path / "bare.yaml").read_text(encoding="utf-8")) >= 3


def test_without_the_fields_the_page_is_titled_by_the_release(tmp_path: Path) -> None:
    led = _ledger(tmp_path)
    page = tmp_path / "r.html"
    assert main(["report", str(led), "-o", str(page), "-q"]) == 0
    rid = hierdp.Ledger.from_json(led.read_text()).release_id
    assert f"<title>hierdp release {rid}" in page.read_text(encoding="utf-8")
