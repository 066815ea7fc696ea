"""Small releases on compiled kernels when that costs no compile (issue 30 item 5).

A process's first release of a small tree takes the numpy passes (nothing to compile or
load); from its second release on, a release drawing its noise from the secure key takes
the compiled kernels when they are loaded already or in numba's on-disk cache
(``hierdp._kernels.jit.ready``). A cache miss must never compile, and a seeded release
(or a post-processor called directly) must never depend on what the process ran before.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading

import numpy as np
import pytest

import hierdp
from hierdp._kernels import jit
from hierdp.postprocessors import _blue_small
from hierdp.postprocessors import _topdown_small as TS


@pytest.fixture
def reuse(monkeypatch):
    """The defaults of a user's process: small inputs up to 2^14, reuse on, no release
    finished yet, no kernel known missing."""
    monkeypatch.setattr(jit, "SMALL_INPUT", 1 << 14)
    monkeypatch.setattr(jit, "REUSE", True)
    monkeypatch.setattr(jit, "_WARM", False)
    monkeypatch.setattr(jit, "_MISSED", set())
    monkeypatch.setattr(jit, "_INDEXED", {})


@pytest.fixture
def cached_module(tmp_path, monkeypatch):
    """A module with a ``cache=True`` kernel in a folder of its own, and a cache folder
    of its own; returns a function that imports it afresh (a new dispatcher with nothing
    loaded, as in a new process, over the same on-disk cache)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "reuse_probe_kernels.py").write_text(textwrap.dedent("""
        from hierdp._kernels.jit import numba as nb

        @nb.njit(cache=True)
        def twice(x):
            return x * 2.0
    """))
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setattr(jit.numba.config, "CACHE_DIR", str(tmp_path / "cache"))

    def fresh():
        sys.modules.pop("reuse_probe_kernels", None)
        return importlib.import_module("reuse_probe_kernels")

    yield fresh
    sys.modules.pop("reuse_probe_kernels", None)


def test_a_cached_kernel_is_loaded_after_a_first_release_and_nothing_compiles(reuse, cached_module):
    x = np.arange(4.0)
    first = cached_module()
    assert first.twice(x)[3] == 6.0  # compiled once: now on disk
    mod = cached_module()
    k = mod.twice
    assert not k.overloads
    compiled = []
    with jit.reusing():
        assert not jit.ready(k, x)  # no release finished in this process yet: loads nothing
        assert not k.overloads
        jit.release_finished()
        with jit.notify_first_compile(lambda: compiled.append(1)):
            assert jit.ready(k, x)
        assert len(k.overloads) == 1
        assert sum(k.stats.cache_hits.values()) == 1 and not k.stats.cache_misses
        assert jit.for_size(k, 4)(x)[3] == 6.0
        k2 = cached_module().twice  # the call itself finds the kernel in the cache
        with jit.notify_first_compile(lambda: compiled.append(1)):
            assert jit.for_size(k2, 4)(x)[3] == 6.0
        assert sum(k2.stats.cache_hits.values()) == 1 and not k2.stats.cache_misses
    assert compiled == []


def test_a_cache_miss_compiles_nothing_says_nothing_and_is_not_tried_again(reuse, caplog):
    k = jit.numba.njit(cache=False)(lambda x: x + 1.0)
    x = np.zeros(3)
    said = []
    jit.release_finished()
    with jit.reusing(), jit.notify_first_compile(lambda: said.append(1)):
        assert not jit.ready(k, x)
        assert not k.overloads  # stopped before the compiler ran
        assert k in jit._MISSED
        assert not jit.prefer_compiled(k)
        assert jit.for_size(k, 3)(x)[0] == 1.0  # interpreted
        assert not k.overloads
        k2 = jit.numba.njit(cache=False)(lambda x: x + 2.0)
        assert jit.for_size(k2, 3)(x)[0] == 2.0  # the call itself misses: interpreted
        assert not k2.overloads and k2 in jit._MISSED
    assert said == [] and "compiling kernels" not in caplog.text
    assert k(x)[0] == 1.0 and len(k.overloads) == 1  # outside ready(), numba compiles as usual


def test_the_guard_stops_only_the_thread_that_asks(reuse):
    """While one thread asks the cache, another compiling its own kernel is not stopped."""
    k = jit.numba.njit(cache=False)(lambda x: x - 1.0)
    jit._LOAD_ONLY.on = True
    try:
        out = []
        t = threading.Thread(target=lambda: out.append(k(np.ones(2))[0]))
        t.start()
        t.join()
    finally:
        jit._LOAD_ONLY.on = False
    assert out == [0.0]


def test_no_reuse_outside_a_release_or_with_reuse_off(reuse, monkeypatch):
    k = jit.numba.njit(cache=False)(lambda x: x * 3.0)
    x = np.ones(2)
    k(x)  # loaded in this process
    jit.release_finished()
    assert not jit.ready(k, x) and not jit.prefer_compiled(k)  # not inside reusing()
    with jit.reusing(False):
        assert not jit.ready(k, x)
    with jit.reusing():
        assert jit.ready(k, x) and jit.prefer_compiled(k)
        monkeypatch.setattr(jit, "REUSE", False)
        assert not jit.ready(k, x) and not jit.prefer_compiled(k)


def _tree_and_counts(n_leaves: int = 3000):
    rng = np.random.default_rng(0)
    parent = np.r_[-1, np.zeros(30, np.int64), 1 + rng.integers(0, 30, n_leaves)]
    tree = hierdp.Tree.from_parent(parent)
    return tree, tree.aggregate(rng.poisson(20, tree.n_leaves))


def _spy(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return calls


@pytest.mark.filterwarnings("ignore::hierdp.NotForPublicationWarning")
def test_a_seeded_release_takes_the_numpy_passes_whatever_the_process_ran_before(reuse, monkeypatch):
    """The suite has the kernels loaded; a release has finished. A seeded release still
    takes the numpy passes and gives the values it gives in a fresh process (bit for
    bit); a secure-key release takes the loaded kernels."""
    tree, counts = _tree_and_counts()
    # the cell-by-cell top-down round has numpy passes for small trees (the default ordering
    # runs its kernels interpreted there: tests/test_no_compile_small_work.py)
    chain = ["blue", "nonneg", ("round", {"method": "topdown", "ordering": "cells"})]
    monkeypatch.setattr(jit, "REUSE", False)
    before = hierdp.release(tree, counts, epsilon=1.0, postprocess=chain, seed=7)
    monkeypatch.setattr(jit, "REUSE", True)
    hierdp.release(tree, counts, epsilon=1.0, postprocess=chain)
    assert jit._WARM
    blue_calls = _spy(monkeypatch, _blue_small, "blue_small")
    td_calls = _spy(monkeypatch, TS, "integer_small")
    again = hierdp.release(tree, counts, epsilon=1.0, postprocess=chain, seed=7)
    assert blue_calls and td_calls
    np.testing.assert_array_equal(again.estimate.values, before.estimate.values)
    np.testing.assert_array_equal(again.measurements.values, before.measurements.values)
    blue_calls.clear()
    td_calls.clear()
    secure = hierdp.release(tree, counts, epsilon=1.0, postprocess=chain)
    assert not blue_calls and not td_calls
    v = secure.estimate.values
    assert v.dtype.kind == "i" and v.min() >= 0
    assert v[0] == v[1:31].sum() == v[31:].sum()


_USER = """
import json, sys, warnings
import numpy as np
import hierdp
from hierdp._kernels import jit
from hierdp.mechanisms import _keyed_small
from hierdp.postprocessors import _blue_small, _topdown_small

warnings.simplefilter("ignore")
numpy_calls = []
for mod, name in ((_blue_small, "blue_small"), (_topdown_small, "project_small"),
                  (_topdown_small, "integer_small"), (_keyed_small, "dlap_keyed_small")):
    real = getattr(mod, name)
    setattr(mod, name, lambda *a, _r=real, _n=name, **k: numpy_calls.append(_n) or _r(*a, **k))
rng = np.random.default_rng(0)
tree = hierdp.Tree.from_parent(np.r_[-1, np.zeros(30, np.int64), 1 + rng.integers(0, 30, 3000)])
one = tree.aggregate(rng.poisson(20, tree.n_leaves))
runs = [({"epsilon": 1.0}, ["blue"]), ({"epsilon": 1.0}, ["blue", "nonneg", "round"]),
        ({"epsilon": 1.0}, ["blue", "nonneg", ("round", {"method": "topdown"})]),
        ({"rho": 0.5, "mechanism": "discrete_gaussian"}, ["blue", "nonneg", "round"])]
seen = []
for loss, chain in runs * 2:
    numpy_calls.clear()
    hierdp.release(tree, one, postprocess=chain, **loss)
    seen.append(sorted(set(numpy_calls)))
print(json.dumps({"numpy": seen, "missed": sorted(k.py_func.__name__ for k in jit._MISSED)}))
"""


def _user_process(env_cache=None):
    import json
    import os
    import subprocess

    env = dict(os.environ)
    if env_cache is not None:  # NUMBA_CACHE_DIR (set by hierdp in this process) would win over it
        env["HIERDP_CACHE_DIR"] = str(env_cache)
        env.pop("NUMBA_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", _USER], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_after_hierdp_compile_a_process_takes_the_cached_kernels_from_its_second_release(tmp_path):
    """On an empty cache (about a minute of CPU: the whole compile)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["HIERDP_CACHE_DIR"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "hierdp", "compile"], capture_output=True, text=True, timeout=900,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kernel versions compiled, 0 loaded from the cache" in proc.stdout
    got, err = _user_process(tmp_path / "cache")
    assert got["numpy"][0] == ["blue_small", "dlap_keyed_small"]  # the first release: numpy passes
    assert got["numpy"][4:] == [[], [], [], []]  # a second round of each chain: all compiled
    assert got["missed"] == []
    assert "compiling kernels" not in err


def test_on_an_empty_cache_later_small_releases_compile_nothing(tmp_path):
    got, err = _user_process(tmp_path / "empty-cache")
    assert got["numpy"][4:] == got["numpy"][:4]  # the numpy passes throughout
    assert "_fill_keyed_common" in got["missed"]  # tried for the small levels' draws, and missed
    assert "compiling kernels" not in err
    assert not list((tmp_path / "empty-cache").rglob("*.nbi"))  # nothing was compiled into it
