"""Bundled demo data (synthetic, CC0; see ``_generate.py`` for how they were made).

>>> from hierdp import data
>>> people = data.load_demo("census")
>>> people.columns.tolist()
['person_id', 'state', 'county', 'tract', 'age_group']
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

from hierdp.errors import DataError, expected_one_of
from hierdp.readers import read_table

__all__ = ["DEMOS", "load_demo", "demo_geography", "demo_path"]

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
