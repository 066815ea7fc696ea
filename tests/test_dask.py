"""The Dask DataFrame front-end on a real multi-process cluster (2 worker processes, 4+ partitions).

The reference is the pandas route on the same records: identical releases for the same
seed where no random choice happens on workers; the pandas errors for bad partitions.
One module-scoped cluster keeps the module to a few seconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

import hierdp  # noqa: E402
from hierdp.errors import DataError  # noqa: E402

pytestmark = pytest.mark.cluster  # one 2-process LocalCluster for the module: a few seconds

LEVELS = ["state", "county"]
DOMAINS = {"state": ["A", "B", "C"], "county": {"A": ["x", "y"], "B": ["x", "z"], "C": ["w"]}}
CELLS = {"age": [0, 1, 2], "sex": ["F", "M"]}


@pytest.fixture(scope="module")
def client():
    # forked workers inherit the imported hierdp (spawned ones would spend seconds importing it)
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                                     silence_logs=50) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    rng = np.random.default_rng(21)
    n = 2000
    state = rng.choice(["A", "B"], n)
    county = np.where(state == "A", rng.choice(["x", "y"], n), rng.choice(["x", "z"], n))
    return pd.DataFrame({"state": state, "county": county, "age": rng.choice([0, 1, 2], n),
                         "sex": rng.choice(["F", "M"], n), "pid": rng.integers(0, 300, n),
                         "n": rng.integers(0, 5, n)})


@pytest.mark.parametrize("kw", [dict(domains=DOMAINS, cells=CELLS),
                                dict(domains="observed", cells={"age": "observed", "sex": ["F", "M"]}),
                                dict(domains=DOMAINS, cells=CELLS, count="n"),
                                dict(domains=DOMAINS),
                                dict(domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=2),
                                dict(domains="observed", unit="pid", max_contributions=1)],
                         ids=["declared", "observed", "count", "no-cells", "bound-2", "bound-1-observed"])
def test_dask_release_is_the_pandas_release(client, people, kw):
    ddf = dd.from_pandas(people, npartitions=5)
    ref = people.dptree(levels=LEVELS, **kw).release(epsilon=1.0, seed=9, postprocess=["blue", "nonneg", "round"])
    r = ddf.dptree(levels=LEVELS, **kw).release(epsilon=1.0, seed=9, postprocess=["blue", "nonneg", "round"])
    assert r.tree == ref.tree
    np.testing.assert_array_equal(r.values, ref.values)
    pd.testing.assert_frame_equal(r.frame, ref.frame)


def _partitions(people: pd.DataFrame, broken: pd.DataFrame) -> dd.DataFrame:
    """Four partitions, the third one ``broken`` (the meta says every column is there)."""
    parts = [people.iloc[:500], people.iloc[500:1000], broken, people.iloc[1500:]]
    return dd.from_delayed([dask.delayed(p) for p in parts], meta=people.iloc[:0], verify_meta=False)


def test_an_out_of_domain_value_in_one_partition_is_the_pandas_error(client, people):
    broken = people.iloc[1000:1500].copy()
    broken.iloc[7, broken.columns.get_loc("sex")] = "X"
    with pytest.raises(DataError) as pandas_err:
        pd.concat([people.iloc[:1000], broken]).dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()
    with pytest.raises(DataError) as dask_err:
        _partitions(people, broken).dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).release(epsilon=1.0, seed=0)
    assert str(dask_err.value) == str(pandas_err.value)
    assert "'sex' values outside the declared cell domain" in str(dask_err.value)
    dropped = _partitions(people, broken).dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unknown="drop")
    assert len(dropped.out_of_domain().compute()) == 1
    r = dropped.release(epsilon=1.0, seed=0)
    assert r.ledger.private_notes["rows_dropped_out_of_domain"] == 1


def test_a_missing_column_in_one_partition_is_the_pandas_error(client, people):
    broken = people.iloc[1000:1500].drop(columns=["county"])
    with pytest.raises(DataError) as pandas_err:
        broken.dptree(levels=LEVELS, domains=DOMAINS)
    with pytest.raises(DataError) as dask_err:
        _partitions(people, broken).dptree(levels=LEVELS, domains=DOMAINS).true_counts()
    assert str(dask_err.value) == str(pandas_err.value)
    assert str(dask_err.value).startswith("missing level column 'county'")


def test_contribution_bounding_runs_on_workers(client, people):
    ddf = dd.from_pandas(people, npartitions=4)
    t = ddf.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=3)
    values, notes = t._node_values(hierdp.rng.make_rng(None))  # a secure bounding key
    per_unit = people.groupby("pid").size()
    assert values[0].sum() == np.minimum(per_unit, 3).sum()  # each unit keeps min(rows, c), whatever the cells
    assert notes["rows_dropped_by_contribution_bound"] == (per_unit - 3).clip(lower=0).sum()
    # the kept rows are a subset of each unit's rows: no leaf-cell gains counts
    assert (values <= people.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS).true_counts()).all()
    r = t.release(epsilon=1.0)
    assert r.ledger.for_publication and r.ledger.secure_randomness
    assert all(ls.sensitivity_l1 == 3 for ls in r.ledger.levels)
    # a seeded release is the same whatever the partitioning and the rows' order
    a = t.release(epsilon=1.0, seed=4).values
    other = dd.from_pandas(people.sample(frac=1.0, random_state=2), npartitions=7)
    b = other.dptree(levels=LEVELS, domains=DOMAINS, cells=CELLS, unit="pid", max_contributions=3) \
        .release(epsilon=1.0, seed=4).values
    np.testing.assert_array_equal(a, b)


def test_a_bad_value_in_a_row_the_bound_drops_still_raises_whatever_the_key(client):
    from hierdp.frontends.base import door_rng
    from tests.test_contributions import BAD_KW, _one_bad_row_in_a_big_unit

    ddf = dd.from_pandas(_one_bad_row_in_a_big_unit(), npartitions=2)
    for seed in range(4):
        with pytest.raises(DataError, match="'sex' values outside the declared cell domain"):
            ddf.dptree(**BAD_KW).node_values(door_rng(seed, 97))
