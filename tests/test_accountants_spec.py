"""The spec key ``privacy.accountant`` (issue 34): validated, and carried to the release."""

from __future__ import annotations

import pytest

import hierdp
from hierdp.accounting.accountants import ANALYTIC, ZCDP, bs16_rho
from hierdp.errors import SpecError
from hierdp.spec import validate

pytestmark = pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")

HEAD = ("hierdp: 1\nsource: {demo: census}\nhierarchy: {levels: [{name: state, domain: observed}, "
        "{name: county, domain: observed}]}\nmechanism: gaussian\noutput: {path: out.csv}\n")


def test_accountant_is_read_from_the_privacy_section():
    assert validate(HEAD + "privacy: {epsilon: 1, delta: 1.0e-6}\n").accountant == "tight"
    assert validate(HEAD + "privacy: {epsilon: 1, delta: 1.0e-6, accountant: zcdp}\n").accountant == "zcdp"


@pytest.mark.parametrize("privacy,match", [
    ("{epsilon: 1, delta: 1.0e-6, accountant: renyi}", r"privacy\.accountant.*'tight'.*'zcdp'"),
    ("{epsilon: 1, accountant: zcdp}", r"privacy\.accountant: privacy\.accountant chooses how an \(ε, δ\) request "
                                       r"is met; it needs privacy\.epsilon and privacy\.delta"),
    ("{rho: 0.1, accountant: tight}", r"it needs privacy\.epsilon and privacy\.delta"),
])
def test_a_wrong_accountant_is_one_clear_error(privacy, match):
    with pytest.raises(SpecError, match=match) as info:
        validate((HEAD if "delta" in privacy or "rho" in privacy else HEAD.replace("gaussian", "discrete_laplace"))
                 + f"privacy: {privacy}\n")
    assert len(info.value.errors) == 1


def test_the_release_is_calibrated_by_the_accountant_the_spec_names():
    tight = hierdp.run_spec(HEAD + "privacy: {epsilon: 1, delta: 1.0e-6}\n", seed=1, write=False).ledger
    old = hierdp.run_spec(HEAD + "privacy: {epsilon: 1, delta: 1.0e-6, accountant: zcdp}\n", seed=1,
                          write=False).ledger
    assert tight.certified_by == ANALYTIC and old.certified_by == ZCDP
    assert old.rho == pytest.approx(bs16_rho(1.0, 1e-6), rel=1e-12) and tight.rho > 1.5 * old.rho
    assert (old.epsilon, old.delta) == (tight.epsilon, tight.delta) == (1.0, 1e-6)
