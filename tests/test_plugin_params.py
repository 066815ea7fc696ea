"""Plugins check their own parameters (issue 29, scope 4): each plugin kind declares its
parameters once (the constructor's typed signature, or ``params_schema``), and the same
check serves Python and specs: the same mistake gives the same sentence, with the same
"did you mean", whether the plugin is built from Python, from a spec or on the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import hierdp
from hierdp import registry
from hierdp.budgets.greedy import Greedy
from hierdp.errors import PluginError, SpecError
from hierdp.metrics.base import Metric
from hierdp.metrics.sequences import LengthTVD
from hierdp.plugins import hookimpl
from hierdp.plugins.params import declaration, problems
from hierdp.postprocessors.base import PostProcessor
from hierdp.postprocessors.gmc import GMC
from hierdp.spec import validate
from hierdp.tree import Tree

T = Tree.from_parent(np.array([-1, 0, 0]))
V = np.array([5, 2, 3])
HEAD = "hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}]}\n"


def _spec_issue(text: str, path: tuple) -> str:
    """The message of the one spec problem at ``path``."""
    with pytest.raises(SpecError) as info:
        validate(text)
    found = [i for i in info.value.issues if tuple(i.path) == path]
    assert len(found) == 1, [(i.path, i.message) for i in info.value.issues]
    return found[0].message


def _python_error(fn) -> str:
    with pytest.raises(PluginError) as info:
        fn()
    assert "\n" not in str(info.value)
    return str(info.value)


def _points_release(**kw):
    pts = pd.DataFrame({"x": [0.1, 0.5, 0.9], "y": [0.2, 0.4, 0.6]})
    return pts.dptree.privtree(columns=["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, seed=1, **kw)


#: kind, registered name, the wrong parameter, the spec text, where the spec reports it,
#: the same mistake from Python, and what the message must suggest
CASES = [
    ("mechanism", "discrete_laplace", "scale",
     HEAD + "privacy: {epsilon: 1}\nmechanism: {name: discrete_laplace, params: {scale: 3}}\n",
     ("mechanism", "params", "scale"),
     lambda: hierdp.release(T, V, epsilon=1.0, seed=1, mechanism={"name": "discrete_laplace", "params": {"scale": 3}}),
     "takes no parameters; remove `scale`"),
    ("postprocessor", "gmc", "fromula",
     HEAD + "privacy: {epsilon: 1}\npostprocess: [{name: gmc, params: {fromula: 36}}]\n",
     ("postprocess", 0, "params", "fromula"),
     lambda: hierdp.release(T, V, epsilon=1.0, seed=1, postprocess=[{"name": "gmc", "params": {"fromula": 36}}]),
     "did you mean 'formula'?"),
    ("plan", "ghazi", "alfa",
     HEAD + "privacy: {epsilon: 1, delta: 1.0e-6}\nplan: {name: ghazi, params: {alfa: 0.5}}\n",
     ("plan", "params", "alfa"),
     lambda: hierdp.release(T, V, epsilon=1.0, delta=1e-6, seed=1, plan={"name": "ghazi", "params": {"alfa": 0.5}}),
     "did you mean 'alpha'?"),
    ("budget", "greedy", "taux",
     HEAD + "privacy: {epsilon: 1}\nbudget: {strategy: greedy, params: {taux: 5}}\n",
     ("budget", "params", "taux"),
     lambda: hierdp.release(T, V, epsilon=1.0, seed=1, budget={"strategy": "greedy", "params": {"taux": 5}}),
     "did you mean 'tau'?"),
    ("metric", "rmsre", "taux",
     HEAD + "privacy: {epsilon: 1}\nevaluate: {metrics: [{name: rmsre, params: {taux: 10}}]}\n",
     ("evaluate", "metrics", 0, "params", "taux"),
     lambda: hierdp.metric("rmsre", taux=10),
     "did you mean 'tau'?"),
    ("decomposition", "privtree", "thta",
     "hierdp: 1\nsource: {path: PTS}\nprivacy: {epsilon: 1}\ndecomposition:\n  name: privtree\n"
     "  params: {columns: [x, y], bounds: [[0, 1], [0, 1]], thta: 1}\n",
     ("decomposition", "params", "thta"),
     lambda: _points_release(thta=1),
     "did you mean 'theta'?"),
]


@pytest.mark.parametrize("kind,name,key,spec,path,python,hint", CASES, ids=[c[0] for c in CASES])
def test_the_same_mistake_reads_the_same_from_python_and_from_a_spec(tmp_path, kind, name, key, spec, path,
                                                                      python, hint):
    (tmp_path / "pts.csv").write_text("x,y\n0.1,0.2\n0.5,0.4\n")
    spec_message = _spec_issue(spec.replace("PTS", str(tmp_path / "pts.csv")), path)
    assert spec_message.startswith(f"{kind} {name!r} ") and repr(key) in spec_message or f"`{key}`" in spec_message
    assert hint in spec_message
    # from Python (through the release door, which builds the plugin with registry.create):
    # the same sentence, after the name of what could not be built
    if kind == "decomposition":
        # a door that takes the decomposition's parameters as its own keywords refuses an
        # unknown one itself, before building anything, with the same suggestion
        with pytest.raises(hierdp.UnknownKeywordError) as info:
            python()
        assert f"unknown keyword {key!r}" in str(info.value) and hint in str(info.value)
    else:
        assert _python_error(python) == f"bad parameters for {kind} {name!r}: {spec_message}"
    # and from the registry itself
    params = {"columns": ["x", "y"], "bounds": [[0, 1], [0, 1]]} if kind == "decomposition" else {}
    assert _python_error(lambda: registry.create(kind, name, **params, **{key: 1})) == \
        f"bad parameters for {kind} {name!r}: {spec_message}"


def test_a_mistyped_parameter_reads_the_same_from_python_and_from_a_spec():
    spec = HEAD + "privacy: {epsilon: 1}\nevaluate: {metrics: [{name: rmsre, params: {tau: ten}}]}\n"
    message = _spec_issue(spec, ("evaluate", "metrics", 0, "params", "tau"))
    assert message == "metric 'rmsre': parameter 'tau' must be a number, got 'ten' (a string)"
    assert _python_error(lambda: hierdp.metric("rmsre", tau="ten")) == f"bad parameters for metric 'rmsre': {message}"


def test_the_plugins_own_check_comes_before_the_type_check():
    """A constructor that checks a value says it in its own words (and exception class)."""
    from hierdp.errors import BudgetError

    with pytest.raises(BudgetError, match="tau must be a positive number"):
        registry.create("budget", "greedy", tau="ten")
    spec = HEAD + "privacy: {epsilon: 1}\nbudget: {strategy: greedy, params: {tau: ten}}\n"
    assert _spec_issue(spec, ("budget", "params")) == \
        "bad parameters for budget 'greedy': tau must be a positive number, got 'ten'"


class _Needy(PostProcessor):
    """A post-processor with a required, typed parameter (a plugin's)."""

    name = "test_needy"

    def __init__(self, *, level: int) -> None:
        self.level = level

    def apply(self, tree, estimate):  # pragma: no cover - never run
        return estimate


class _NeedyPlugin:
    @hookimpl
    def hierdp_register_postprocessors(self):
        return [_Needy]


@pytest.fixture
def needy():
    plugin = _NeedyPlugin()
    registry.register(plugin, name="test-needy")
    yield
    registry.unregister(plugin)


def test_a_missing_parameter_reads_the_same_from_python_and_from_a_spec(needy):
    spec = HEAD + "privacy: {epsilon: 1}\npostprocess: [blue, {name: test_needy, params: {}}]\n"
    message = _spec_issue(spec, ("postprocess", 1, "params"))
    assert message == "postprocessor 'test_needy' needs the parameter 'level'; add it"
    assert _python_error(lambda: hierdp.release(T, V, epsilon=1.0, seed=1, postprocess=["blue", "test_needy"])) \
        == f"bad parameters for postprocessor 'test_needy': {message}"
    # and a mistyped one
    spec = HEAD + "privacy: {epsilon: 1}\npostprocess: [blue, {name: test_needy, params: {level: 1.5}}]\n"
    message = _spec_issue(spec, ("postprocess", 1, "params", "level"))
    assert message == "postprocessor 'test_needy': parameter 'level' must be an integer, got 1.5 (float)"
    assert _python_error(lambda: registry.create("postprocessor", "test_needy", level=1.5)) == \
        f"bad parameters for postprocessor 'test_needy': {message}"


def test_the_cli_prints_the_same_sentence(tmp_path, capsys):
    from hierdp.cli import main

    (tmp_path / "s.yaml").write_text(CASES[1][3])
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert "postprocess[0].params.fromula: postprocessor 'gmc' has no parameter 'fromula'; did you mean " \
           "'formula'?; its parameters: formula" in err


# ------------------------------------------------------------------ declarations
def test_parameters_are_read_along_the_constructor_chain():
    """Greedy(*, prior, **params) passes the rest on to its base: both count."""
    assert declaration(Greedy).names == ["prior", "tau", "phases", "gamma", "postprocessed", "max_levels"]
    assert not declaration(Greedy).open
    d = declaration(GMC)
    assert d.names == ["formula"] and d.params["formula"].annotation is int and not d.params["formula"].required


def test_a_kind_base_that_refuses_parameters_declares_none():
    from hierdp.mechanisms.discrete_laplace import DiscreteLaplace

    assert declaration(DiscreteLaplace).names == [] and not declaration(DiscreteLaplace).open


def test_metrics_declare_their_defaults_and_an_undeclared_metric_is_open():
    d = declaration(registry.get("metric", "rmse_range"))
    assert d.names == ["q", "seed"] and not d.open
    assert declaration(LengthTVD).open  # Metric keeps what it is given: left to the metric
    assert problems("metric", "length_tvd", LengthTVD, {"anything": 1}) == []
    assert declaration(Metric).open


def test_params_schema_is_a_declaration():
    class Schema(Metric):
        name = "test_schema_metric"
        params_schema = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"],
                         "additionalProperties": False}

        def __call__(self, true, estimate, *, tree=None, **params):  # pragma: no cover
            return 0.0

    d = declaration(Schema)
    assert d.names == ["q"] and d.params["q"].required and not d.open and d.schema is not None
    assert [p.message for p in problems("metric", "x", Schema, {"q": 1})] == []
    found = problems("metric", "x", Schema, {"q": "a", "r": 1})
    assert any("unknown key 'r'" in p.message for p in found) and any(p.path == ("q",) for p in found)


def test_extra_names_only_feed_the_did_you_mean():
    from hierdp.decompositions.privtree import PrivTree

    found = problems("decomposition", "privtree", PrivTree, {"columns": ["x"], "bounds": [[0, 1]],
                                                             "epsilon_shar": 0.5}, extra=("epsilon_share",))
    assert [p.message for p in found] == [
        "decomposition 'privtree' has no parameter 'epsilon_shar'; did you mean 'epsilon_share'?; its parameters: "
        "columns, bounds, theta, split, max_depth, contributions, max_nodes"]
    assert problems("decomposition", "privtree", PrivTree, {"epsilon_share": 0.5}, extra=("epsilon_share",)) == []


def test_the_docs_example_is_what_python_and_validation_print():
    """docs/plugins.md shows one mistake from Python and from `hierdp validate`."""
    import re
    from pathlib import Path

    from hierdp.spec import load_text

    doc = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text(encoding="utf-8")
    shown_spec = re.search(r"^error: (release\.yaml:.*)$", doc, flags=re.M).group(1)
    shown_python = re.search(r"^hierdp\.errors\.PluginError: (.*)$", doc, flags=re.M).group(1)
    text = HEAD.replace("hierarchy: {levels: [{name: state, domain: observed}]}\n",
                        "hierarchy:\n  levels:\n    - {name: state, domain: observed}\n") + \
        "privacy: {epsilon: 1}\npostprocess:\n  - blue\n  - {name: gmc, params: {fromula: 36}}\n"
    with pytest.raises(SpecError) as info:
        validate(load_text(text, "release.yaml"))
    assert info.value.errors == [shown_spec]
    assert _python_error(lambda: registry.create("postprocessor", "gmc", fromula=36)) == shown_python
