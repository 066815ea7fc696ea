import numpy as np
import pytest

import hierdp
import hierdp._kernels.jit

# The suite exercises the compiled kernels on inputs of every size (small releases run
# them interpreted by default, see hierdp._kernels.jit.for_size; tests/test_interpreted_kernels.py
# holds the interpreted runs equal to the compiled ones, and the CLI tests run in
# subprocesses with the default). Tests of the small-input paths (numpy passes, interpreted
# kernels) set SMALL_INPUT back; REUSE off keeps the kernels this suite loads from taking
# those paths' place (tests/test_kernel_reuse.py turns it on).
hierdp._kernels.jit.SMALL_INPUT = 0
hierdp._kernels.jit.REUSE = False


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def restore_threads():
    """The thread count set before the test (an explicit count, or None), set again after it."""
    old = hierdp.set_threads(None)
    hierdp.set_threads(old)
    yield
    hierdp.set_threads(old)


@pytest.fixture
def small_tree():
    return hierdp.Tree.from_parent([-1, 0, 0, 1, 1, 2, 2, 2])
