import numpy as np
import pytest

import hierdp


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def small_tree():
    return hierdp.Tree.from_parent([-1, 0, 0, 1, 1, 2, 2, 2])
