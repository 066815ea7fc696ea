"""Output formats are known in one place, :data:`hierdp.io.TABLE_FORMATS`: the command line,
specs and :mod:`hierdp.io` read it, so a new format is one entry."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hierdp import io as hio
from hierdp.cli import EXIT_OK, EXIT_USER, _parser, main
from hierdp.spec import load_schema


def test_the_spec_schema_offers_exactly_the_table_formats():
    schema = load_schema()

    def resolve(node: dict) -> dict:
        while "$ref" in node:
            node = schema[node["$ref"].split("/")[1]][node["$ref"].split("/")[2]]
        return node

    fmt = resolve(resolve(schema["properties"]["output"])["properties"]["format"])
    assert set(fmt["enum"]) == set(hio.TABLE_FORMATS)


def test_the_command_line_offers_exactly_the_table_formats():
    release = next(a for a in _parser()._subparsers._group_actions[0].choices["release"]._actions  # type: ignore[union-attr]
                   if "--format" in a.option_strings)
    assert list(release.choices) == list(hio.TABLE_FORMATS)


@pytest.mark.parametrize("entry", list(hio.TABLE_FORMATS.values()), ids=list(hio.TABLE_FORMATS))
def test_every_extension_names_its_format_and_its_ledger(entry):
    assert entry.extensions and all(e == e.lower() and e.startswith(".") for e in entry.extensions)
    for ext in entry.extensions:
        assert hio.format_for(f"out/r{ext.upper()}") == entry.name
        assert hio.ledger_path_for(Path("out") / f"r{ext}") == Path("out") / "r.ledger.json"
    assert entry.ledger_inside == (entry.read_release_id is not None) == (entry.ledger_where is not None)


def test_unknown_formats_are_named_with_the_known_ones():
    with pytest.raises(hio.DataError, match=r"unknown table format 'jsn'; expected one of .*did you mean 'json'"):
        hio.format_for("a.csv", "jsn")
    with pytest.raises(hio.DataError, match=r"end it in \.csv or \.parquet or \.json, or pass the format"):
        hio.format_for("a.xlsx")


def _tsv(frame: pd.DataFrame, gzip: bool, ledger_json: str | None):
    def write(dest):
        text = frame.to_csv(sep="\t", index=False)
        if ledger_json is not None:
            text = f"# ledger: {json.dumps(json.loads(ledger_json))}\n" + text
        if isinstance(dest, (str, Path)):
            Path(dest).write_text(text, encoding="utf-8")
        else:
            dest.write(text.encode("utf-8"))
    return write


def _tsv_release_id(path: Path) -> str | None:
    first = Path(path).read_text(encoding="utf-8").splitlines()[0]
    return json.loads(first.removeprefix("# ledger: "))["release_id"]


@pytest.fixture
def tsv_format(monkeypatch):
    """A format added the way Zarr or netCDF would be: one entry of the table."""
    entry = hio.TableFormat("tsv", "TSV", (".tsv",), _tsv, ledger_inside=True, ledger_where="a '# ledger:' line",
                            read_release_id=_tsv_release_id)
    monkeypatch.setitem(hio.TABLE_FORMATS, "tsv", entry)
    return entry


def test_a_new_format_is_one_entry(tsv_format, tmp_path, capsys):
    out = tmp_path / "r.tsv"
    assert main(["release", "demo", "--seed", "1", "-q", "-o", str(out)]) == EXIT_OK
    ledger = json.loads((tmp_path / "r.ledger.json").read_text())
    assert hio.table_release_id(out) == ledger["release_id"]
    assert pd.read_csv(out, sep="\t", comment="#").shape[0] > 1
    # standard output: the format carries its ledger, so no --ledger is needed
    assert main(["release", "demo", "--seed", "1", "-q", "-o", "-", "--format", "tsv"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("# ledger: ")
    # help texts name it
    assert main(["release", "--help"]) == EXIT_OK
    assert "TSV tables also carry the ledger inside" in " ".join(capsys.readouterr().out.split())


def test_a_format_that_cannot_carry_the_ledger_needs_a_ledger_file_on_stdout(capsys):
    assert main(["release", "demo", "--seed", "1", "-q", "-o", "-", "--format", "csv"]) == EXIT_USER
    assert "-o - with --format csv writes no ledger" in capsys.readouterr().err


def test_a_spec_can_write_every_format(tmp_path):
    from hierdp.data import example_path
    from hierdp.spec import run_spec

    text = example_path("demo").read_text(encoding="utf-8").split("output:")[0]
    for name, entry in hio.TABLE_FORMATS.items():
        if entry.requires is not None:
            pytest.importorskip(entry.requires[0])
        dest = tmp_path / f"r-{name}.out"
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(text + f"output: {{path: '{dest}', format: {name}}}\n", encoding="utf-8")
        run_spec(str(spec), seed=1)
        assert dest.exists() and (tmp_path / f"r-{name}.out.ledger.json").exists()
        rid = json.loads((tmp_path / f"r-{name}.out.ledger.json").read_text())["release_id"]
        if entry.read_release_id is not None:
            assert entry.read_release_id(dest) == rid
