"""Contribution bounding: at most c rows per unit, chosen uniformly at random."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from hierdp.errors import DataError
from hierdp.frontends._contributions import bound_contributions
from hierdp.rng import SeededRandom, make_rng


def _frame(sizes):
    unit = np.repeat(np.arange(len(sizes)), sizes)
    pos = np.concatenate([np.arange(s) for s in sizes]) if len(sizes) else np.array([], int)
    return pd.DataFrame({"person": unit, "pos": pos, "v": np.arange(unit.size)})


def test_keeps_at_most_c_per_unit_and_counts_drops():
    sizes = [1, 2, 3, 5, 8, 2, 1]
    df = _frame(sizes).sample(frac=1.0, random_state=0)  # shuffled rows, non-trivial index
    out, dropped = bound_contributions(df, "person", 2, SeededRandom(1))
    per = out.groupby("person").size()
    assert per.max() <= 2
    expected_kept = {u: min(s, 2) for u, s in enumerate(sizes)}
    assert per.to_dict() == expected_kept
    assert dropped == sum(max(0, s - 2) for s in sizes) == len(df) - len(out)
    # rows are kept whole, with their index, in the original order
    pd.testing.assert_frame_equal(out, df.loc[out.index])
    assert list(out.index) == [i for i in df.index if i in set(out.index)]


def test_choice_is_uniform_within_unit():
    # 60 000 units of 4 rows, c = 1: the kept row's position must be uniform on {0,1,2,3}
    df = _frame([4] * 60_000)
    out, dropped = bound_contributions(df, "person", 1, SeededRandom(2))
    assert dropped == 3 * 60_000
    counts = np.bincount(out["pos"].to_numpy(), minlength=4)
    assert stats.chisquare(counts).pvalue > 1e-4
    # pairs for c = 2 uniform over the 6 subsets
    out2, _ = bound_contributions(df, "person", 2, SeededRandom(3))
    pos = out2.sort_values(["person", "pos"])["pos"].to_numpy().reshape(-1, 2)
    code = pos[:, 0] * 4 + pos[:, 1]
    pairs = np.bincount(code, minlength=16)[[1, 2, 3, 6, 7, 11]]
    assert pairs.sum() == 60_000 and stats.chisquare(pairs).pvalue > 1e-4


def test_reproducible_with_seed_and_secure_by_default():
    df = _frame([5] * 200)
    a, _ = bound_contributions(df, "person", 2, SeededRandom(9))
    b, _ = bound_contributions(df, "person", 2, SeededRandom(9))
    c, _ = bound_contributions(df, "person", 2, SeededRandom(10))
    pd.testing.assert_frame_equal(a, b)
    assert not a.index.equals(c.index)
    s, n = bound_contributions(df, "person", 2, make_rng(None))
    assert len(s) == 400 and n == 600


def test_string_units_and_empty_frame():
    df = pd.DataFrame({"hh": ["a", "b", "a", "c", "a"], "x": range(5)})
    out, n = bound_contributions(df, "hh", 1, SeededRandom(0))
    assert sorted(out["hh"]) == ["a", "b", "c"] and n == 2
    e, n0 = bound_contributions(df.iloc[:0], "hh", 1, SeededRandom(0))
    assert len(e) == 0 and n0 == 0


@pytest.mark.parametrize("c,match", [(0, "integer >= 1"), (-2, "integer >= 1"), (1.5, "integer >= 1"),
                                     ("2", "integer >= 1"), (True, "integer >= 1")])
def test_bad_max_contributions(c, match):
    with pytest.raises(DataError, match=match):
        bound_contributions(_frame([2]), "person", c, SeededRandom(0))


def test_missing_or_incomplete_unit_column():
    with pytest.raises(DataError, match="unknown privacy-unit column 'persn'.*did you mean 'person'"):
        bound_contributions(_frame([2]), "persn", 1, SeededRandom(0))
    df = pd.DataFrame({"person": [1.0, None, 2.0]})
    with pytest.raises(DataError, match="missing values"):
        bound_contributions(df, "person", 1, SeededRandom(0))
