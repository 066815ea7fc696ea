"""A release by subtree of many node-cells runs every kernel compiled, however small a call
(``hierdp._kernels.jit.large_job``, opened by the split driver in every task's thread): the
thousands of small noise requests of such a release each cost milliseconds interpreted.
The values do not change: the same release with the small calls interpreted is equal bit
for bit."""

from __future__ import annotations

import warnings

import numpy as np

import hierdp
from hierdp._kernels import jit
from tests.test_split import random_tree


def _release(executor: str = "threads"):
    t = random_tree(3000, 4, seed=8)
    vals = t.aggregate(np.random.default_rng(1).integers(0, 4, size=(t.n_leaves, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hierdp.NotForPublicationWarning)
        return hierdp.release(t, vals, split={"level": "L2", "memory": "64MiB", "task_memory": 120_000},
                              executor=executor, rho=1.0, seed=4,
                              plan={"name": "marginals", "strategy": {("a",): 0.5, (): 0.5},
                                    "cells": {"a": 2, "b": 3}, "mechanism": "discrete_gaussian"},
                              postprocess=["nonneg", {"name": "round", "method": "topdown"}])


def test_a_large_split_release_runs_its_small_calls_compiled_with_the_same_values(monkeypatch) -> None:
    monkeypatch.setattr(jit, "SMALL_INPUT", 1 << 14)  # the library's rule (the test session forces compiling)
    monkeypatch.setattr(jit, "REUSE", False)
    interpreted: list[str] = []
    real = jit._small_call

    def spy(kernel, *args):
        interpreted.append(kernel.__name__)
        return real(kernel, *args)

    monkeypatch.setattr(jit, "_small_call", spy)
    monkeypatch.setattr(jit, "LARGE_JOB", 1 << 40)  # not large: small calls run interpreted
    small = _release()
    assert interpreted  # e.g. each task's noise requests of a few hundred draws
    interpreted.clear()
    monkeypatch.setattr(jit, "LARGE_JOB", 1000)  # large: every call compiled, in every task's thread
    large = _release()
    assert interpreted == []
    for a, b in ((small.estimate.values, large.estimate.values), (small.measurements.values,
                                                                   large.measurements.values)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
