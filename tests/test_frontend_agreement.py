"""The front-ends (pandas with and without cells, xarray, Dask, specs) say the same thing
the same way: one out-of-domain error, one private note for dropped rows, the exactness
rule of :mod:`hierdp.rules` for huge counts, zero-count rows never out of domain."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import hierdp  # noqa: F401  (registers the accessors)
from hierdp import rules
from hierdp.errors import DataError

LEVELS = ["state", "county"]
DOMAINS = {"state": ["A", "B"], "county": {"A": ["x", "y"], "B": ["z"]}}
CELLS = {"sex": ["F", "M"]}


@pytest.fixture
def people() -> pd.DataFrame:
    # county 'q' (not declared under A) holds 3 people in 2 cells: two F, one M
    return pd.DataFrame({"state": ["A", "A", "B", "A", "A", "A", "B"],
                         "county": ["x", "y", "z", "q", "q", "q", "z"],
                         "sex": ["F", "M", "F", "F", "F", "M", "M"]})


def _error(fn) -> str:
    with pytest.raises(DataError) as info:
        fn()
    return str(info.value)


def test_one_out_of_domain_error_across_front_ends(people):
    plain = _error(lambda: people.dptree(levels=LEVELS, domains=DOMAINS).true_counts())
    cells = _error(lambda: people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts())
    series = _error(lambda: people.groupby(LEVELS + ["sex"]).size().dptree(DOMAINS, cells=CELLS).true_counts())
    da = people.groupby(LEVELS + ["sex"]).size().to_xarray()
    array = _error(lambda: da.dptree(DOMAINS, cells=CELLS).true_counts())
    assert plain.startswith("the data have 'county' values outside the declared domain of their parent")
    assert "hierarchy.unknown: drop" in plain and "df.dptree(...).out_of_domain() lists them" in plain
    assert cells == plain and series == plain
    assert array == plain.replace("df.dptree", "da.dptree")


def test_one_out_of_domain_error_with_dask(people):
    dask = pytest.importorskip("dask")
    dd = pytest.importorskip("dask.dataframe")
    want = _error(lambda: people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts())
    with dask.config.set(scheduler="synchronous"):
        got = _error(lambda: dd.from_pandas(people, npartitions=2).dptree(levels=LEVELS, domains=DOMAINS,
                                                                           cells=CELLS).true_counts())
    assert got == want


def test_one_out_of_domain_error_with_polars(people):
    pl = pytest.importorskip("polars")
    want = _error(lambda: people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts())
    frame = pl.from_pandas(people)
    for data in (frame, frame.lazy()):
        assert _error(lambda d=data: d.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()) == want


def test_dropped_rows_have_one_private_note_name_and_meaning(people):
    # pandas pre-aggregated rows, and xarray (path, cell) entries, are the same rows of counts:
    # (A, q, F) and (A, q, M) -> 2 rows dropped, whichever container they came in
    counts = people.groupby(LEVELS + ["sex"]).size()
    r_pd = counts.dptree(DOMAINS, cells=CELLS, unknown="drop").release(epsilon=1.0, seed=3)
    t_xr = counts.to_xarray().dptree(DOMAINS, cells=CELLS, unknown="drop")
    r_xr = t_xr.release(epsilon=1.0, seed=3)
    assert r_pd.ledger.private_notes["rows_dropped_out_of_domain"] == 2
    assert r_xr.ledger.private_notes["rows_dropped_out_of_domain"] == 2 == len(t_xr.out_of_domain())
    np.testing.assert_array_equal(r_xr.values, r_pd.values)
    # a cell label outside its domain on an in-domain path: one more entry per path holding it
    extra = xr.concat([counts.to_xarray(), counts.to_xarray().isel(sex=[0]).assign_coords(sex=["X"])], "sex")
    t = extra.dptree(DOMAINS, cells=CELLS, unknown="drop")
    n_bad = len(t.out_of_domain())
    assert t.release(epsilon=1.0, seed=3).ledger.private_notes["rows_dropped_out_of_domain"] == n_bad == 2 + 3


def test_zero_count_rows_are_never_out_of_domain_with_cells(people):
    counts = people[people.county != "q"].groupby(LEVELS + ["sex"]).size().rename("n").reset_index()
    with_zero = pd.concat([counts, pd.DataFrame({"state": ["A"], "county": ["y"], "sex": ["X"], "n": [0]})],
                          ignore_index=True)  # e.g. groupby(observed=False) over a wider label set
    want = counts.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, count="n").true_counts()
    got = with_zero.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, count="n").true_counts()
    np.testing.assert_array_equal(got, want)
    # with one count in it, the same row is the out-of-domain error
    with_zero.loc[len(with_zero) - 1, "n"] = 1
    with pytest.raises(DataError, match="'sex' values outside the declared cell domain"):
        with_zero.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, count="n").true_counts()


@pytest.mark.parametrize("value, dtype", [(2.0 ** 53 + 2, np.float64), (1e19, np.float64), (1e300, np.float64),
                                          (2 ** 53 + 1, np.int64), (2 ** 63 + 5, np.uint64)])
def test_counts_above_2_53_in_an_array_get_the_exactness_message(people, value, dtype):
    da = people[people.county != "q"].groupby(LEVELS + ["sex"]).size().to_xarray().fillna(0).astype(dtype)
    da.loc[{"state": "A", "county": "x", "sex": "M"}] = value
    want = rules.value_range_problem(value, "a count in variable 'count'")
    assert want is not None
    with pytest.raises(DataError) as info:
        da.dptree(DOMAINS, cells=CELLS).true_counts()
    assert str(info.value) == want
    # the pandas route of the same count gives the same rule's message
    frame = da.to_dataframe(name="n").reset_index()
    with pytest.raises(DataError, match=r"a count in column 'n' exceeds 2\*\*53"):
        frame.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, count="n").true_counts()


def test_2_53_itself_is_still_a_count(people):
    da = people[people.county != "q"].groupby(LEVELS + ["sex"]).size().to_xarray().fillna(0) * 0
    da.loc[{"state": "A", "county": "x", "sex": "M"}] = 2.0 ** 53
    assert rules.value_range_problem(2.0 ** 53) is None
    assert da.dptree(DOMAINS, cells=CELLS).true_counts()[0].tolist() == [0, 2 ** 53]


def test_a_total_above_2_53_is_refused_alike_and_never_wraps_around():
    # 2048 rows of 2**53 add up to 2**64: int64 sums would wrap around to 0 and pass every
    # later check; each count alone is allowed, their total is not
    n = 2048
    frame = pd.DataFrame({"state": ["A"] * n, "county": ["x"] * n, "sex": ["F"] * n, "n": [2 ** 53] * n})
    want = rules.value_range_problem(n * 2 ** 53, "the total of the counts")
    for kw in ({}, {"cells": CELLS}):
        with pytest.raises(DataError) as info:
            frame.dptree(levels=LEVELS, domains=DOMAINS, count="n", **kw).true_counts()
        assert str(info.value) == want
    # xarray: 1024 paths of 2**53 each, one dimension per level
    counties = [f"x{j}" for j in range(n // 2)]
    da = pd.Series(2.0 ** 53, index=pd.MultiIndex.from_product([["A"], counties], names=LEVELS)).to_xarray()
    with pytest.raises(DataError) as info:
        da.dptree({"state": ["A"], "county": counties}).true_counts()
    assert str(info.value) == rules.value_range_problem((n // 2) * 2 ** 53, "the total of the counts")


def test_a_total_above_2_53_is_refused_by_polars_too():
    pl = pytest.importorskip("polars")
    n = 2048
    frame = pl.DataFrame({"state": ["A"] * n, "county": ["x"] * n, "sex": ["F"] * n, "n": [2 ** 53] * n})
    want = rules.value_range_problem(n * 2 ** 53, "the total of the counts")
    for data in (frame, frame.lazy()):  # int64 sums in Polars wrap around to 0: the float total catches it
        with pytest.raises(DataError) as info:
            data.dptree(levels=LEVELS, domains=DOMAINS, count="n", cells=CELLS).true_counts()
        assert str(info.value) == want


def test_a_total_above_2_53_is_refused_by_dask_too():
    dask = pytest.importorskip("dask")
    dd = pytest.importorskip("dask.dataframe")
    n = 2048
    frame = pd.DataFrame({"state": ["A"] * n, "county": ["x"] * n, "sex": ["F"] * n, "n": [2 ** 53] * n})
    with dask.config.set(scheduler="synchronous"), pytest.raises(DataError) as info:
        dd.from_pandas(frame, npartitions=4).dptree(levels=LEVELS, domains=DOMAINS, count="n",
                                                    cells=CELLS).true_counts()
    assert "the total of the counts exceeds 2**53" in str(info.value)
