"""Every registered post-processor (built-in or plugin) passes the public contract suite."""

import pytest

from hierdp import registry
from hierdp.postprocess.baselines import BoostingWarning
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
import numpy as np  # noqa: E402

from hierdp.postprocess.base import Estimate, PostProcessor  # noqa: E402
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
