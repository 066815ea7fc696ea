"""Bundled demo data (synthetic, CC0; see ``_generate.py`` for how they were made) and
the example release specs (``hierdp/examples/*.yaml``, the repository's ``specs/``).

>>> from hierdp import data
>>> people = data.load_demo("census")
>>> people.columns.tolist()
['person_id', 'state', 'county', 'tract', 'age_group']
>>> "demo" in data.example_names()
True
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

from hierdp.errors import DataError, expected_one_of
from hierdp.io.readers import read_table

__all__ = ["DEMOS", "load_demo", "demo_geography", "demo_path", "example_names", "example_path",
           "example_description", "resolve_spec"]

DEMOS = {
    "census": ("census_demo.csv.gz", "census_demo_geography.csv"),
}
_CODES = {"state": "string", "county": "string", "tract": "string", "age_group": "string"}


def _check(name: str) -> tuple[str, str]:
    if name not in DEMOS:
        raise DataError(expected_one_of("demo dataset", name, DEMOS))
    return DEMOS[name]


def demo_path(name: str = "census", geography: bool = False):
    """Filesystem path of a bundled demo file."""
    files = _check(name)
    return resources.files("hierdp.data").joinpath(files[1] if geography else files[0])


def load_demo(name: str = "census") -> pd.DataFrame:
    """Record-level demo population: one row per (synthetic) person.

    ``census``: ~60k people with ``person_id, state, county, tract, age_group`` on a
    6-state, 44-county, 174-tract geography (FIPS-like string codes).
    """
    with resources.as_file(demo_path(name)) as path:
        return read_table(path, "csv", label_columns=list(_CODES))


def demo_geography(name: str = "census") -> pd.DataFrame:
    """The public geography of a demo: every declared (state, county, tract) path,
    including tracts where nobody lives."""
    with resources.as_file(demo_path(name, geography=True)) as path:
        return read_table(path, "csv", label_columns=[*_CODES, "state_name"])


# ------------------------------------------------------------------ example specs
def _examples_dir() -> Path:
    return Path(str(resources.files("hierdp").joinpath("examples")))


def example_names() -> list[str]:
    """Names of the bundled example specs (``hierdp release NAME`` runs one)."""
    folder = _examples_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def example_path(name: str) -> Path:
    """Path of the bundled example spec ``name`` (with or without ``.yaml``)."""
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    names = example_names()
    if stem not in names:
        raise DataError(expected_one_of("example spec", stem, names))
    return _examples_dir() / f"{stem}.yaml"


def example_description(name: str) -> str:
    """One line about an example: its ``description:``, else its first comment line."""
    first_comment = ""
    for line in example_path(name).read_text(encoding="utf-8").splitlines():
        if line.startswith("description:"):
            return line.split(":", 1)[1].strip()
        if line.startswith("#") and not first_comment:
            first_comment = line.lstrip("# ").strip()
    return first_comment


def resolve_spec(arg: str) -> str:
    """What a command-line SPEC argument names: an existing file as given, else the
    bundled example of that name (``demo`` or ``demo.yaml``); anything else unchanged,
    so that reading it reports the missing file."""
    if Path(arg).exists():
        return arg
    stem = arg[: -len(".yaml")] if arg.endswith(".yaml") else arg
    if "/" not in stem and "\\" not in stem and stem in example_names():
        return str(example_path(stem))
    return arg
