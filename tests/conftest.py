import numpy as np
import pytest

import hierdp
import hierdp._engine.jit

# The suite exercises the compiled kernels on inputs of every size (small releases run
# them interpreted by default, see hierdp._engine.jit.for_size; tests/test_interpreted_kernels.py
# holds the interpreted runs equal to the compiled ones, and the CLI tests run in
# subprocesses with the default).
hierdp._engine.jit.SMALL_INPUT = 0


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def small_tree():
    return hierdp.Tree.from_parent([-1, 0, 0, 1, 1, 2, 2, 2])
