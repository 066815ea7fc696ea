"""glibc told to keep freed memory (``hierdp._kernels.malloc.keep_freed_memory``): a thread
that allocates and frees a large array again and again then reuses the pages instead of
faulting fresh ones in each time (the census run's third of CPU in the kernel), and the
``hierdp`` command sets it up before numpy loads. Linux with glibc only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")

PROBE = r'''
import sys, threading, resource
from hierdp._kernels.malloc import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else None
import numpy as np
faults = []
def work():
    a = np.ones(1 << 24)  # 128 MiB, first touch
    del a
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        a = np.ones(1 << 24)
        del a
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
t = threading.Thread(target=work)
t.start(); t.join()
print(took, faults[0])
'''


def _probe(mode: str, **env: str) -> tuple[str, int]:
    run = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), **env), check=True)
    took, faults = run.stdout.split()
    return took, int(faults)


def test_a_thread_reuses_freed_large_arrays_instead_of_faulting_them_in():
    """Five 128 MiB arrays made and freed on a thread after a first one: with glibc as it
    is, each comes from a fresh mapping (about 32k page faults of 4 KiB each, or 64 huge
    ones); kept, the first one's pages serve them all (a few dozen faults)."""
    libc = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout
    if "GLIBC" not in libc.upper() and "GNU" not in libc.upper():
        pytest.skip("not glibc")
    took, kept = _probe("keep")
    _, plain = _probe("plain")
    assert took == "True"
    assert kept < 300, kept
    assert plain > 5 * 60, plain  # at least one fault per fresh 2 MiB, five times 64
    off, _ = _probe("keep", HIERDP_MALLOC="system")
    assert off == "False"


def test_the_command_keeps_freed_memory_before_numpy_loads():
    """``hierdp`` calls it first thing (the arena limit binds only threads without an arena
    yet, and numpy starts threads as it loads): when ``mallopt`` is looked up, numpy is not
    loaded yet."""
    code = ("import sys\n"
            "seen = []\n"
            "def hook(event, args):\n"
            "    if event == 'ctypes.dlsym' and args[1] == 'mallopt':\n"
            "        seen.append('numpy' in sys.modules)\n"
            "sys.addaudithook(hook)\n"
            "sys.argv = ['hierdp', 'validate', 'nonexistent.yaml']  # the console script\n"
            "from hierdp.cli import main\n"
            "code = main(sys.argv[1:])\n"
            "print('RESULT', seen, code)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "RESULT [False] 2" in run.stdout, (run.stdout, run.stderr[-2000:])
