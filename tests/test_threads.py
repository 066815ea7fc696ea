"""The thread setting, and results that do not depend on it (issue: census scale, scope 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hierdp
from hierdp import _threads
from hierdp.mechanisms import _samplers as S
from hierdp.rng import SeededRandom


@pytest.fixture
def restore_threads():
    old = hierdp.set_threads(None)
    hierdp.set_threads(old)
    yield
    hierdp.set_threads(old)


def test_setting_precedence(monkeypatch, restore_threads):
    hierdp.set_threads(None)
    monkeypatch.delenv("HIERDP_THREADS", raising=False)
    assert hierdp.get_threads() == _threads._cores() >= 1
    monkeypatch.setenv("HIERDP_THREADS", "3")
    assert hierdp.get_threads() == 3
    assert hierdp.set_threads(2) is None
    assert hierdp.get_threads() == 2  # the call wins over the environment
    assert hierdp.set_threads(None) == 2
    assert hierdp.get_threads() == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, "two", "", True, "2.0"])
def test_bad_settings_are_one_line_errors(monkeypatch, restore_threads, bad):
    with pytest.raises(ValueError, match="whole number of threads >= 1") as e:
        hierdp.set_threads(bad)
    assert "\n" not in str(e.value)
    if isinstance(bad, str) and bad:
        hierdp.set_threads(None)
        monkeypatch.setenv("HIERDP_THREADS", bad)
        with pytest.raises(ValueError, match="HIERDP_THREADS"):
            hierdp.get_threads()


def test_pieces_keep_their_order_and_errors_surface(restore_threads):
    hierdp.set_threads(3)
    assert _threads.run_pieces(lambda x: x * x, list(range(50))) == [x * x for x in range(50)]

    def boom(x):
        if x == 7:
            raise KeyError("piece 7")
        return x

    with pytest.raises(KeyError, match="piece 7"):
        _threads.run_pieces(boom, list(range(20)))


SIZE = 3 * S._CHUNK_DRAWS + 17  # three whole chunks and a short one


@pytest.mark.parametrize("draw", [
    lambda rng: S.discrete_laplace(2.5, SIZE, rng),
    lambda rng: S.discrete_gaussian(40.0, SIZE, rng),
    lambda rng: S.sample_discrete_gaussian(S.dgauss_params(7.0), SIZE, rng, method="cks"),
], ids=["laplace", "gaussian", "gaussian-cks"])
def test_draws_are_the_same_whatever_the_thread_count(monkeypatch, restore_threads, draw):
    """Each chunk has its own stream of words, taken from the source in chunk order; small
    batches of words make chunks stop and ask for more in the middle of draws."""
    monkeypatch.setattr(S, "_CHUNK_GROUP", 3)  # groups of chunks too
    runs = []
    for threads, batch in ((1, 1 << 21), (2, 1 << 21), (4, 1 << 21), (2, 64), (3, 64)):
        hierdp.set_threads(threads)
        monkeypatch.setattr(S, "_WORD_BATCH", batch)
        runs.append(draw(SeededRandom(11)))
    for r in runs[1:3]:
        np.testing.assert_array_equal(r, runs[0])
    np.testing.assert_array_equal(runs[4], runs[3])  # small batches: another stream use, same across threads
    assert np.count_nonzero(runs[0]) > SIZE // 2


def test_chunked_draws_have_the_exact_distribution(restore_threads):
    """Chunks (each on fresh words, the tail of a chunk's words unused) keep the discrete
    Laplace law: P(0) and the two tails against (1-q)/(1+q) and q^k/(1+q), q = e^{-1/b}."""
    hierdp.set_threads(2)
    b = 3.0
    x = S.discrete_laplace(b, 40 * S._CHUNK_DRAWS, SeededRandom(5))
    p = S.dlap_params(b)
    q = math.exp(-p.s / p.t)
    n = x.size
    for k, prob in ((0, (1 - q) / (1 + q)), (1, (1 - q) / (1 + q) * q), (-3, (1 - q) / (1 + q) * q**3)):
        got = np.count_nonzero(x == k)
        assert abs(got - n * prob) < 5 * math.sqrt(n * prob * (1 - prob))
    first = x[: S._CHUNK_DRAWS]
    second = x[S._CHUNK_DRAWS: 2 * S._CHUNK_DRAWS]
    assert not np.array_equal(first, second)
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.02
