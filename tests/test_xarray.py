"""The xarray front-end: ``.dptree`` on DataArray and Dataset, both layouts, Dask-backed arrays.

The reference is the pandas route on the records the arrays were made from: same seed,
identical release.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import hierdp  # noqa: F401  (registers the accessors)
from hierdp.errors import DataError, HierarchyError

LEVELS = ["state", "county"]
DOMAINS = {"state": ["A", "B", "C"], "county": {"A": ["x", "y"], "B": ["x", "z"], "C": ["w"]}}
CELLS = {"age": [0, 1, 2], "sex": ["F", "M"]}


@pytest.fixture
def people() -> pd.DataFrame:
    rng = np.random.default_rng(8)
    n = 300
    state = rng.choice(["A", "B"], n)  # state C (declared) has no records
    county = np.where(state == "A", rng.choice(["x", "y"], n), rng.choice(["x", "z"], n))
    return pd.DataFrame({"state": state, "county": county, "age": rng.choice([0, 1], n),  # age 2 never seen
                         "sex": rng.choice(["F", "M"], n)})


def _pandas(people, seed=5, **kw):
    kw.setdefault("domains", DOMAINS)
    kw.setdefault("cells", CELLS)
    return people.dptree(levels=LEVELS, **kw).release(epsilon=1.0, seed=seed)


def _array(people) -> xr.DataArray:
    return people.groupby(LEVELS + ["age", "sex"]).size().to_xarray()  # NaN where a path has no record


@pytest.mark.parametrize("layout", ["dims", "stacked", "stacked_cells_first"])
def test_both_layouts_give_the_pandas_release(people, layout):
    ref = _pandas(people)
    da = _array(people)
    if layout == "stacked":
        da = da.stack(leaf=LEVELS)
    elif layout == "stacked_cells_first":
        da = da.stack(leaf=LEVELS).transpose("sex", "leaf", "age")  # the dimension order does not matter
    assert da.isnull().any()  # missing paths really are NaN here
    r = da.dptree(DOMAINS, cells=CELLS).release(epsilon=1.0, seed=5)
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)
    assert r.tree == ref.tree


def test_observed_domains_are_the_paths_and_labels_with_counts(people):
    people = people[~((people.county == "y") & ((people.sex == "M") | (people.age == 1)))]  # one cell of (A, y)
    ref = _pandas(people, domains="observed", cells={"age": "observed", "sex": ["F", "M"]})
    t = _array(people).dptree("observed", cells={"age": "observed", "sex": ["F", "M"]})
    assert t.cells["age"].tolist() == [0, 1]
    r = t.release(epsilon=1.0, seed=5)
    np.testing.assert_array_equal(r.values, ref.values)
    assert r.tree.n_nodes == ref.tree.n_nodes == 1 + 2 + 4


def test_dataset_with_a_named_count_variable(people):
    ref = _pandas(people)
    da = _array(people)
    ds = xr.Dataset({"n": da, "other": da * 2.5})
    r = ds.dptree(DOMAINS, count="n", cells=CELLS).release(epsilon=1.0, seed=5)
    np.testing.assert_array_equal(r.values, ref.values)
    assert "counted in column 'n'" in " ".join(r.ledger.notes)
    with pytest.raises(DataError, match="holds 2 data variables; name the counts with count="):
        ds.dptree(DOMAINS, cells=CELLS)
    with pytest.raises(DataError, match="missing count variable 'm'; expected one of 'n', 'other'"):
        ds.dptree(DOMAINS, count="m", cells=CELLS)


def test_levels_only_array_is_a_one_dimensional_release(people):
    ref = people.dptree(levels=LEVELS, domains=DOMAINS).release(epsilon=1.0, seed=2)
    da = people.groupby(LEVELS).size().to_xarray()
    r = da.dptree(DOMAINS).release(epsilon=1.0, seed=2)
    np.testing.assert_array_equal(r.values, ref.values)
    assert r.values.ndim == 1


def test_nonzero_count_outside_the_declared_domains_is_the_pandas_error(people):
    da = _array(people).fillna(0)
    small = {"state": ["A", "B"], "county": {"A": ["x", "y"], "B": ["x"]}}  # (B, z) has records
    with pytest.raises(DataError) as pandas_err:
        people.dptree(levels=LEVELS, domains=small, cells=CELLS).true_counts()
    with pytest.raises(DataError) as xr_err:
        da.dptree(small, cells=CELLS).true_counts()
    want = "the data have 'county' values outside the declared domain of their parent (values not shown"
    assert str(pandas_err.value).startswith(want) and str(xr_err.value).startswith(want)
    # a zero count outside the domains is no record: fine
    np.testing.assert_array_equal(
        da.where(~((da.state == "B") & (da.county == "z")), 0).dptree(small, cells=CELLS).true_counts(),
        people[~((people.state == "B") & (people.county == "z"))].dptree(
            levels=LEVELS, domains=small, cells=CELLS).true_counts())
    # unknown="drop" drops the same records as pandas
    t = da.dptree(small, cells=CELLS, unknown="drop")
    keep = people[~((people.state == "B") & (people.county == "z"))]
    np.testing.assert_array_equal(t.true_counts(), keep.dptree(levels=LEVELS, domains=small, cells=CELLS).true_counts())
    bad = t.out_of_domain()
    assert set(bad["county"]) == {"z"} and bad["count"].sum() == (people.county == "z").sum()


def test_cell_labels_outside_the_cell_domain(people):
    da = _array(people)
    with pytest.raises(DataError, match="the data have 'sex' values outside the declared cell domain"):
        da.dptree(DOMAINS, cells={"age": [0, 1, 2], "sex": ["F"]}).true_counts()
    only_f = da.dptree(DOMAINS, cells={"age": [0, 1, 2], "sex": ["F"]}, unknown="drop").true_counts()
    ref = people[people.sex == "F"].dptree(levels=LEVELS, domains=DOMAINS,
                                           cells={"age": [0, 1, 2], "sex": ["F"]}).true_counts()
    np.testing.assert_array_equal(only_f, ref)
    with pytest.raises(HierarchyError, match="dimension 'sex' is neither a level nor a declared cell dimension"):
        da.dptree(DOMAINS, levels=LEVELS, cells={"age": [0, 1, 2]})
    with pytest.raises(DataError, match="missing cell dimension 'agex'"):
        da.dptree(DOMAINS, levels=LEVELS, cells={"age": [0, 1], "sex": ["F", "M"], "agex": [1]})


@pytest.mark.parametrize("value, match", [(-1.0, "negative counts"), (0.5, "non-integer counts"),
                                          (np.inf, "non-integer counts")])
def test_bad_counts(people, value, match):
    da = _array(people).fillna(0)
    da[0, 0, 0, 0] = value
    with pytest.raises(DataError, match=match):
        da.dptree(DOMAINS, cells=CELLS).true_counts()


def test_text_counts_are_refused(people):
    da = _array(people).fillna(0).astype(int).astype(str)
    with pytest.raises(DataError, match="must hold non-negative integers, got dtype"):
        da.dptree(DOMAINS, cells=CELLS)


def test_dask_backed_arrays_are_reduced_lazily_in_few_passes(people):
    dask = pytest.importorskip("dask")
    ref = _pandas(people, domains="observed")
    da = _array(people).chunk({"state": 1, "age": 1})
    calls = []

    def counting_scheduler(dsk, keys, **kwargs):
        calls.append(len(keys) if isinstance(keys, list) else 1)
        return dask.get(dsk, keys, **kwargs)

    with dask.config.set(scheduler=counting_scheduler):
        t = da.dptree("observed", cells=CELLS)
        r = t.release(epsilon=1.0, seed=5)
    assert isinstance(da.data, dask.array.Array)  # the input stays lazy
    assert len(calls) == 2  # one pass for the observed paths, one for the counts and checks
    np.testing.assert_array_equal(r.values, ref.values)
