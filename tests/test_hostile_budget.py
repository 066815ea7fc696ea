"""Releases outside the budget (issue 35, item 3): what an analyst trying to spend more than
a session holds, or to publish with less noise than the ledger says, sees.

Before the fix: a Ghazi release refused after drawing its noisy root bound was charged to
nobody and could be retried until the noise let it through; ``s.epsilon = 100`` and
``s.releases.clear()`` refilled a session; a ``Sensitivity`` subclass whose ``covers()``
said True published the true counts under an ε = 1 ledger; a session could not be
pickled or deep-copied (``TypeError: cannot pickle '_thread.lock'``)."""

from __future__ import annotations

import copy
import inspect
import math
import pickle
import threading
import warnings

import numpy as np
import pytest

import hierdp
from hierdp.errors import BudgetError, DataError, PrivacyError
from hierdp.mechanisms.base import Sensitivity
from hierdp.plans.ghazi import composed_epsilon, ghazi_schedule

T = hierdp.Tree.complete(fanout=2, height=2)
X = np.array([5, 2, 3])
HUGE = 2 ** 52  # the Ghazi plan refuses this root count after drawing its noisy bound
EPS_GHAZI = composed_epsilon(ghazi_schedule(1.0, 1e-6, 0.5, 0.05, T.n_levels))  # what a release certifies


def _ghazi_huge(session):
    return hierdp.release(T, np.array([HUGE, HUGE // 2, HUGE - HUGE // 2]), plan={"name": "ghazi", "alpha": 0.5},
                          epsilon=1.0, delta=1e-6, session=session)


def test_a_release_refused_after_drawing_noise_is_charged():
    """The refusal depends on the noisy root count: each retry is a fresh look at the data."""
    s = hierdp.Session(epsilon=2.5, delta=1e-5)
    with pytest.raises(DataError, match="root count is too large"):
        _ghazi_huge(s)
    # charged the plan's certified ε (issue 34: its steps composed optimally, 0.98… < 1)
    assert s.spent["epsilon"] == pytest.approx(EPS_GHAZI) and len(s.releases) == 1
    assert s.releases[0]["outcome"] == "drew noise, not released"
    with pytest.raises(DataError, match="root count is too large"):
        _ghazi_huge(s)
    with pytest.raises(BudgetError, match=r"needs epsilon=0\.98\d* but the session has 0\.5\d* left"):
        _ghazi_huge(s)  # the third try is refused before any noise is drawn
    assert len(s.releases) == 2


def test_a_release_refused_before_drawing_noise_is_free():
    s = hierdp.Session(epsilon=1.0)
    with pytest.raises(BudgetError):
        hierdp.release(T, X, epsilon=2.0, session=s)
    with pytest.raises(hierdp.PluginError):
        hierdp.release(T, X, epsilon=0.5, plan="no_such_plan", session=s)
    assert s.spent == {} and s.releases == ()


def test_released_ones_say_so():
    s = hierdp.Session(epsilon=1.0)
    r = hierdp.release(T, X, epsilon=0.25, session=s)
    assert [dict(x["cost"]) for x in s.releases] == [{"epsilon": 0.25}]
    assert s.releases[0]["outcome"] == "released"
    assert any("release 1 of a session with total epsilon=1" in n for n in r.ledger.notes)


def test_a_session_cannot_be_edited_into_a_larger_budget_or_a_shorter_history():
    s = hierdp.Session(epsilon=1.0)
    hierdp.release(T, X, epsilon=1.0, session=s)
    for attack in (lambda: setattr(s, "epsilon", 100.0), lambda: setattr(s, "rho", 1.0),
                   lambda: setattr(s, "releases", []), lambda: setattr(s, "_records", []),
                   lambda: delattr(s, "_epsilon")):
        with pytest.raises(AttributeError, match="read-only"):
            attack()
    with pytest.raises(AttributeError):
        s.releases.clear()  # a tuple
    with pytest.raises(TypeError):
        s.releases[0]["cost"]["epsilon"] = 0.0  # read-only records
    with pytest.raises(TypeError):
        s.releases[0]["cost"] = {}  # type: ignore[index]
    s.spent["epsilon"] = 0.0  # a fresh dict each time: changes nothing
    assert s.epsilon == 1.0 and s.remaining == {"epsilon": 0.0}
    with pytest.raises(BudgetError, match="0 left"):
        hierdp.release(T, X, epsilon=0.1, session=s)


def test_a_copy_of_a_session_is_the_session_and_pickling_is_refused():
    """A copy holding the same remaining budget would double it; a deep copy of a structure
    holding a session shares the session; a pickle (a worker process) is one clear error."""
    s = hierdp.Session(epsilon=1.0)
    assert copy.copy(s) is s and copy.deepcopy(s) is s and copy.deepcopy({"s": s})["s"] is s
    with pytest.raises(PrivacyError, match="cannot be pickled.*spend it again"):
        pickle.dumps(s)
    hierdp.release(T, X, epsilon=0.75, session=copy.deepcopy(s))
    assert s.remaining["epsilon"] == pytest.approx(0.25)


def test_threads_cannot_overspend_between_check_and_charge():
    s = hierdp.Session(epsilon=1.0)
    ok: list[int] = []
    barrier = threading.Barrier(8)

    def go():
        barrier.wait()
        try:
            hierdp.release(T, X, epsilon=0.3, session=s)
            ok.append(1)
        except BudgetError:
            pass

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ok) == 3 and s.spent["epsilon"] == pytest.approx(0.9)


# ----------------------------------------------------------------------------- sensitivity
class _Liar(Sensitivity):
    def covers(self, other):  # noqa: ARG002 - the attack
        return True


class _Shifty(Sensitivity):
    """Large when checked, small when the mechanism calibrates."""

    @property
    def l1(self):  # type: ignore[override]
        return 1e9 if any(f.function in ("sensitivity_problem", "covers") for f in inspect.stack()) else 1e-9

    @l1.setter
    def l1(self, value):
        pass


@pytest.mark.parametrize("sens", [_Liar(l1=1e-9, l2=1e-9), _Shifty(l1=1.0, l2=1.0, linf=1.0)],
                         ids=["covers() says True", "l1 depends on who asks"])
def test_a_custom_sensitivity_cannot_lower_the_floor(sens):
    """Before the fix the liar published the true counts (noise of scale 1e-9) under ε = 1."""
    with pytest.raises(PrivacyError, match="a hierdp Sensitivity itself, not a subclass"):
        hierdp.release(T, X, epsilon=1.0, sensitivity=sens)


def test_a_sensitivity_below_the_floor_is_refused_by_the_numbers():
    with pytest.raises(PrivacyError, match="smaller than one privacy unit"):
        hierdp.release(T, X, epsilon=1.0, sensitivity=Sensitivity(l1=0.5, l2=2.0))
    with pytest.raises(PrivacyError, match="smaller than one privacy unit"):
        hierdp.release(T, X, rho=1.0, mechanism="discrete_gaussian",
                       sensitivity=Sensitivity(l1=2.0, l2=math.nextafter(1, 0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = hierdp.release(T, X, epsilon=1.0, sensitivity=Sensitivity(l1=3.0, l2=3.0), seed=1)
    assert r.ledger.levels[0].sensitivity_l1 == 3.0


def test_a_private_structure_door_is_charged_even_when_the_release_fails_after_the_structure(monkeypatch):
    """An attacker whose PrivTree release fails after its structure's noise was drawn (here:
    the release step after the decomposition raises) must not get that noise for free: the
    door reserves the whole release's cost before drawing the structure."""
    import pandas as pd

    from hierdp.frontends import points as P

    rng = np.random.default_rng(3)
    pts = pd.DataFrame({"x": rng.random(200), "y": rng.random(200)})
    s = hierdp.Session(epsilon=1.5)

    def boom(*args, **kwargs):
        raise RuntimeError("the release failed after the structure was drawn")

    monkeypatch.setattr(P, "release_path", boom)
    with pytest.raises(RuntimeError):
        pts.dptree.privtree(columns=["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, session=s, seed=1)
    assert s.spent["epsilon"] == pytest.approx(1.0)
    with pytest.raises(hierdp.BudgetError):  # 0.5 left: a retry of the same release is refused
        pts.dptree.privtree(columns=["x", "y"], bounds=[(0, 1), (0, 1)], epsilon=1.0, session=s, seed=1)


def test_a_reservation_serves_one_release_only():
    from hierdp.errors import BudgetError

    s = hierdp.Session(epsilon=2.0)
    paid = s.reserve_for({"guarantee": "pure", "epsilon": 1.0})
    tree = hierdp.Tree.complete(fanout=2, height=2)
    hierdp.release(tree, np.array([5, 2, 3]), epsilon=1.0, session=paid, seed=1)
    assert s.spent["epsilon"] == pytest.approx(1.0)  # the release settled its reservation, no second charge
    with pytest.raises(BudgetError, match="already used"):
        hierdp.release(tree, np.array([5, 2, 3]), epsilon=1.0, session=paid, seed=1)
    with pytest.raises(AttributeError):
        paid.ticket = 0
