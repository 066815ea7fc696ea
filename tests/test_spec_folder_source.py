"""A folder of Parquet (or CSV) parts is a ``source.path`` with the default engine (issue
51 item 5), as with ``engine: duckdb``: every part in it is read by the one reader; the
release equals the one from a glob over the same files. An empty folder, or one of mixed
formats, is one line naming the folder."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hierdp.errors import SpecError
from hierdp.spec import run_spec, validate

SPEC = """hierdp: 1
source: {{path: '{path}'}}
hierarchy:
  levels:
    - {{name: state, domain: ['01', '02']}}
    - {{name: county, domain: [a, b]}}
privacy: {{epsilon: 1}}
seed: 4
"""


def _spec(tmp_path, path) -> object:
    f = tmp_path / "s.yaml"
    f.write_text(SPEC.format(path=path))
    return f


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(9)
    d = tmp_path / "parts"
    d.mkdir()
    for i in range(3):
        pd.DataFrame({"state": rng.choice(["01", "02"], 50), "county": rng.choice(["a", "b"], 50)}).to_parquet(
            d / f"part-{i}.parquet", index=False)
    return d


def test_a_folder_of_parquet_parts_is_a_source_with_the_default_engine(tmp_path, folder):
    import warnings

    import hierdp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        a = run_spec(_spec(tmp_path, folder), write=False)
        b = run_spec(_spec(tmp_path, f"{folder}/*.parquet"), write=False)
    assert np.array_equal(np.asarray(a.estimate.values), np.asarray(b.estimate.values))
    root = a.to_frame().query("level == 'root'")["estimate"].iloc[0] if "root" in set(a.to_frame()["level"]) \
        else a.to_frame()["estimate"].iloc[0]
    assert abs(float(root) - 150) < 30  # every part's 50 records counted (noise of scale ~3 at ε = 1)


def test_an_empty_folder_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="empty"):
        validate(_spec(tmp_path, tmp_path / "empty"))
