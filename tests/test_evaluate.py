"""The evaluation harness and its plots."""

from __future__ import annotations

import io
import sys

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import Tree, release
from hierdp.errors import DataError, MissingDependencyError, SpecError
from hierdp.evaluation import COLUMNS, NON_PRIVATE_NOTE


@pytest.fixture(scope="module")
def setup():
    t = Tree.complete(3, 4)
    rng = np.random.default_rng(0)
    return t, t.aggregate(rng.poisson(6, t.n_leaves))


CONFIGS = {
    "equal": {"budget": "equal", "postprocess": ()},
    "equal+blue": {"budget": "equal", "postprocess": ["blue"]},
    "leaves+blue": {"budget": "leaves"},
    "oracle": {"budget": "greedy_oracle"},
}


def test_columns_rows_and_non_private_marking(setup):
    t, v = setup
    df = hierdp.evaluate(t, CONFIGS, values=v, epsilons=[0.5, 2.0], repetitions=4,
                         metrics=[("tree_rmsre", {"tau": 5}), "consistency_bias"], by_level=True, seed=7)
    assert list(df.columns) == COLUMNS
    # 4 configs x 2 eps x 2 metrics x (all + 4 levels)
    assert len(df) == 4 * 2 * 2 * 5
    assert df["non_private"].all() and df.attrs["non_private"] == NON_PRIVATE_NOTE
    assert set(df["level"]) == {"all", *t.level_names}
    assert df.loc[df.config == "oracle", "oracle_budget"].all()
    assert not df.loc[df.config != "oracle", "oracle_budget"].any()
    assert (df["repetitions"] == 4).all()
    # post-processed releases are consistent, raw ones are not
    cb = df[(df.metric == "consistency_bias") & (df.level == "all")].set_index(["config", "epsilon"])["mean"]
    assert cb.loc[("equal+blue", 0.5)] < 1e-6 and cb.loc[("equal", 0.5)] > 1.0
    # higher epsilon, lower error; std_error is a standard error of the mean over 4 repetitions
    tr = df[(df.metric == "tree_rmsre(tau=5)") & (df.level == "all")].set_index(["config", "epsilon"])
    for cfg in CONFIGS:
        assert tr.loc[(cfg, 2.0), "mean"] < tr.loc[(cfg, 0.5), "mean"]
    assert (tr["std_error"] > 0).all()


def test_mean_value_and_analytic_agree_with_direct_metric_calls(setup):
    t, v = setup
    df = hierdp.evaluate(t, {"b": {"budget": "equal", "epsilon": 1.0}}, values=v, repetitions=3,
                         metrics=[("tree_rmsre", {"tau": 5})], seed=11)
    row = df.iloc[0]
    seeds = (np.random.SeedSequence(11).generate_state(3, dtype=np.uint64).astype(np.int64) & ((1 << 62) - 1))
    ests = [release(t, v, epsilon=1.0, budget="equal", seed=int(s)) for s in seeds]
    per = [hierdp.metric("tree_rmsre")(v, r.values, tree=t, tau=5) for r in ests]
    assert row["mean"] == pytest.approx(np.mean(per))
    assert row["std_error"] == pytest.approx(np.std(per, ddof=1) / np.sqrt(3))
    stack = np.array([r.values for r in ests], dtype=float)
    assert row["value"] == pytest.approx(hierdp.metric("tree_rmsre")(v, stack, tree=t, tau=5))
    assert row["analytic"] == pytest.approx(
        hierdp.metric("tree_rmsre").from_variance(v, ests[0].estimate.variance, tree=t, tau=5))


def test_seeded_runs_are_reproducible_and_configs_validated(setup):
    t, v = setup
    kw = dict(values=v, epsilons=1.0, repetitions=2, metrics="rmse_node", seed=3)
    a = hierdp.evaluate(t, [{"name": "x", "budget": "equal"}], **kw)
    b = hierdp.evaluate(t, [{"name": "x", "budget": "equal"}], **kw)
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(SpecError, match="unknown keys"):
        hierdp.evaluate(t, {"x": {"bugdet": "equal"}}, **kw)
    with pytest.raises(SpecError, match="no epsilon"):
        hierdp.evaluate(t, {"x": {"budget": "equal"}}, values=v, metrics="rmse_node")
    with pytest.raises(DataError, match="needs values"):
        hierdp.evaluate(t, {"x": {"epsilon": 1.0}})


def test_progress_bar_reports_the_releases(setup, capsys):
    t, v = setup
    hierdp.evaluate(t, {"e": {"epsilon": [1.0, 2.0]}}, values=v, repetitions=3, metrics="rmse_node", seed=0,
                    progress=True)
    err = capsys.readouterr().err
    assert "6/6" in err and "release" in err


def test_evaluate_reads_a_dptree():
    df = pd.DataFrame({"state": list("AAABBC"), "county": ["x", "y", "y", "z", "z", "w"]})
    dpt = df.dptree(levels=["state", "county"], domains="observed")
    out = hierdp.evaluate(dpt, {"eq": {"epsilon": [1.0, 4.0]}}, repetitions=2, metrics="rmse_node", seed=0)
    assert len(out) == 2 and out["non_private"].all()


def test_plots_render_png(setup):
    pytest.importorskip("matplotlib")
    t, v = setup
    df = hierdp.evaluate(t, CONFIGS, values=v, epsilons=[0.5, 1.0, 2.0], repetitions=2,
                         metrics=[("tree_rmsre", {"tau": 5})], by_level=True, seed=1)
    for ax in (hierdp.plot.error_vs_epsilon(df),
               hierdp.plot.error_by_level(df, epsilon=1.0)):
        buf = io.BytesIO()
        ax.figure.savefig(buf, format="png")
        assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n" and len(buf.getvalue()) > 5000
        assert len(ax.get_legend().get_texts()) == len(CONFIGS)
    with pytest.raises(DataError, match="several"):
        hierdp.plot.error_by_level(df)
    with pytest.raises(DataError, match="unknown metric"):
        hierdp.plot.error_vs_epsilon(df, "rmsre_tree")


def test_plot_without_matplotlib_names_the_extra(setup, monkeypatch):
    t, v = setup
    df = hierdp.evaluate(t, {"e": {"epsilon": 1.0}}, values=v, repetitions=1, metrics="rmse_node", seed=0)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingDependencyError, match=r"hierdp\[plot\]"):
        hierdp.plot.error_vs_epsilon(df)


def test_unit_bounded_data_keep_their_sensitivity_in_evaluations():
    """With unit=/max_contributions=c the harness noises at sensitivity c, as the release does."""
    import pandas as pd

    import hierdp

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"g": rng.choice(["a", "b", "c"], 300), "person": rng.integers(0, 100, 300)})
    cfg = {"eq": {"epsilon": 1.0, "postprocess": []}}
    per_row = hierdp.evaluate(df.dptree(levels=["g"], domains="observed"), cfg, repetitions=2,
                              metrics=[("tree_rmsre", {"tau": 1})], seed=0)
    bounded = hierdp.evaluate(df.dptree(levels=["g"], domains="observed", unit="person", max_contributions=3),
                              cfg, repetitions=2, metrics=[("tree_rmsre", {"tau": 1})], seed=0)
    # RMSRE from variances scales with the noise scale, i.e. with the sensitivity
    a, b = per_row["analytic"].iloc[0], bounded["analytic"].iloc[0]
    assert b > 2.5 * a


def test_default_metric_and_metric_tuples(setup):
    """The default metric is tree_rmsre; a tuple of names is a list, a (name, params) pair one metric."""
    t, v = setup
    df = hierdp.evaluate(t, {"c": {"epsilon": 1.0}}, values=v, repetitions=2, seed=1)
    assert set(df["metric"]) == {"tree_rmsre"}
    df = hierdp.evaluate(t, {"c": {"epsilon": 1.0}}, values=v, repetitions=2, seed=1,
                         metrics=("rmsre", "tree_rmsre"))
    assert set(df["metric"]) == {"rmsre", "tree_rmsre"}
    df = hierdp.evaluate(t, {"c": {"epsilon": 1.0}}, values=v, repetitions=2, seed=1, metrics=("rmsre", {"tau": 3}))
    assert set(df["metric"]) == {"rmsre(tau=3)"}
