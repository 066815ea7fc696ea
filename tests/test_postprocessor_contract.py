"""Every registered post-processor (built-in or plugin) passes the public contract suite."""

import numpy as np
import pytest

import hierdp
from hierdp import registry
from hierdp.postprocessors.baselines import BoostingWarning
from hierdp.testing import BasePostProcessorTests

NAMES = registry.names("postprocessor")


def test_the_consistency_engine_is_registered():
    assert {"blue", "gmc", "none", "boosting", "privtrie", "dense", "nonneg", "round"} <= set(NAMES)


class TestEveryRegisteredPostProcessor(BasePostProcessorTests):
    @pytest.fixture(params=NAMES)
    def postprocessor(self, request):
        return registry.create("postprocessor", request.param)

    @pytest.fixture
    def allowed_warnings(self, postprocessor):
        # boosting is defined for complete k-ary trees only and says so on the others
        return (BoostingWarning,) if postprocessor.name == "boosting" else ()


# ---------------------------------------------------------------- the suite can fail

from hierdp.postprocessors.base import Estimate, PostProcessor  # noqa: E402
from hierdp.testing.postprocessors import contract_trees  # noqa: E402


class _ClaimsConsistentButIsNot(PostProcessor):
    name = "broken_consistent"
    consistent = True

    def apply(self, tree, estimate):
        return Estimate(np.asarray(estimate.values, float) + 1.0, None, {})


class _MutatesInput(PostProcessor):
    name = "broken_mutating"
    consistent = False

    def apply(self, tree, estimate):
        estimate.values[...] = 0.0
        return Estimate(estimate.values, None, {})


def test_suite_detects_an_inconsistent_postprocessor():
    suite = BasePostProcessorTests()
    tree = contract_trees()["ragged"]
    with pytest.raises(AssertionError, match="not consistent"):
        suite.test_consistent_when_declared(_ClaimsConsistentButIsNot(), tree, None, ())


def test_suite_detects_input_mutation():
    suite = BasePostProcessorTests()
    tree = contract_trees()["complete_2x4"]
    with pytest.raises(AssertionError):
        suite.test_does_not_mutate_inputs(_MutatesInput(), tree, None, ())


@pytest.mark.parametrize("name", ["blue", "gmc", "nonneg", "round", "dense", "boosting", "privtrie", "none"])
def test_non_numeric_input_is_a_one_line_data_error(name):
    t = hierdp.Tree.complete(2, 2)
    cases = [
        (np.array(["a", "b", "c"]), np.ones(3), "values must be numbers, got values of type str"),
        (np.array([1 + 1j, 2, 3]), np.ones(3), "values must be real numbers, got complex values"),
        (np.ones(3), np.array(["x", "y", "z"]), "variance must be numbers"),
        (np.ones(3), np.ones((3, 1)), r"variance must have shape \(3,\), got \(3, 1\)$"),
        (np.ones(4), np.ones(3), r"values must have shape \(3,\) or \(3, k\), got \(4,\)"),
    ]
    for values, var, msg in cases:
        with pytest.raises(hierdp.DataError, match=msg):
            hierdp.postprocess(name, t, values, variance=var)


def test_round_checks_variances_and_nonneg_its_parameters():
    t = hierdp.Tree.complete(2, 2)
    with pytest.raises(hierdp.DataError, match="variances must be non-negative"):
        hierdp.postprocess("round", t, np.array([3.0, 1.0, 2.0]), variance=np.array([1.0, np.nan, 1.0]))
    for bad in ({"max_iter": "x"}, {"max_iter": 0}, {"tol": "small"}, {"max_iter": True}):
        with pytest.raises(hierdp.DataError, match="nonneg needs an integer max_iter >= 1"):
            hierdp.registry.create("postprocessor", "nonneg", **bad)
