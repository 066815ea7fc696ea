"""numba, with its on-disk cache in a per-user folder that works on any install.

numba caches compiled kernels beside the source (site-packages) by default; that fails
on a read-only install ("cannot cache function ... no locator available") and leaves
files behind on uninstall. Importing this module *before* numba points numba's cache at
:func:`cache_dir` through ``NUMBA_CACHE_DIR`` — unless the user has set that variable,
which always wins. Kernel modules get numba from here::

    from hierdp._kernels.jit import numba as nb

The folder is, first that is set: ``$HIERDP_CACHE_DIR``, ``$XDG_CACHE_HOME/hierdp``,
``~/.cache/hierdp``; when it cannot be created or written, a folder in the system's
temporary directory (per user) is used instead. Never site-packages.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["numba", "cache_dir", "preferred_cache_dir", "shared_kernels_tag", "notify_first_compile", "CACHE_ENV",
           "SMALL_INPUT", "REUSE", "interpreted", "for_size", "ready", "prefer_compiled", "release_finished",
           "LARGE_JOB", "large_job",
           "reusing", "INLINED_KERNELS",
           "COMPILE_SECONDS", "compile_logger", "compile_notice"]

CACHE_ENV = "HIERDP_CACHE_DIR"

#: CPU seconds the first release of a large tree (default chain: discrete Laplace, BLUE) spends
#: compiling on a cold cache, as the first-compile notice states it; a busy machine takes longer in wall time
COMPILE_SECONDS = 15

#: the logger of the one line said before the first kernel compiles (``logging`` prints a
#: warning with no configuration at all, so Python users see it too; the CLI routes it to stderr)
compile_logger = logging.getLogger("hierdp.compile")


def preferred_cache_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """The per-user cache folder hierdp asks for (it may not exist or be writable)."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "hierdp"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".cache" / "hierdp"


def _usable(folder: Path) -> bool:
    """Create ``folder`` if needed and check that a file can really be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hierdp-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError:
        return False


def _user_tag() -> str:
    try:
        return str(os.getuid())
    except AttributeError:  # pragma: no cover - Windows
        return os.environ.get("USERNAME", "user")


def cache_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """The folder numba's cache goes to: :func:`preferred_cache_dir` when it is writable,
    else ``<tempdir>/hierdp-cache-<uid>`` (kernels then recompile after a reboot)."""
    preferred = preferred_cache_dir(environ)
    if _usable(preferred):
        return preferred
    fallback = Path(tempfile.gettempdir()) / f"hierdp-cache-{_user_tag()}"
    if _usable(fallback):
        return fallback
    return Path(tempfile.mkdtemp(prefix="hierdp-cache-"))  # a fresh private folder always works


#: the files (from the package's folder) whose kernels kernels of other files inline
INLINED_KERNELS = ("_kernels/kernel_common.py", "mechanisms/_sampler_kernel.py", "postprocessors/_margins.py",
                   "keyed_noise.py")


def shared_kernels_tag() -> str:
    """A hash of the kernels that kernels of other modules inline (:data:`INLINED_KERNELS`).

    numba keys a cached function by its own file only, so a kernel that inlines a helper
    from another module would keep running the helper's old machine code after an edit;
    keying the cache folder by the helpers' source makes such an edit start a fresh cache.
    """
    import hashlib

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha1()
    try:
        for name in INLINED_KERNELS:
            digest.update((root / name).read_bytes())
    except OSError:  # pragma: no cover - a broken install
        return "unknown"
    return digest.hexdigest()[:10]


def _configure() -> Path | None:
    """Point numba at :func:`cache_dir` (a subfolder per version of the shared inlined
    kernels, see :func:`shared_kernels_tag`) unless the user chose ``NUMBA_CACHE_DIR``."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    folder = cache_dir() / f"kernels-{shared_kernels_tag()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = cache_dir()
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    if "numba" in sys.modules:  # numba was imported first: it has read its config already
        sys.modules["numba"].config.CACHE_DIR = str(folder)
    return folder


CACHE_DIR = _configure()

import numba  # noqa: E402  (after NUMBA_CACHE_DIR is set)
import numba.core.event  # noqa: E402


def compile_notice() -> str:
    """The line said before the first compile: what, for how long, and where the result is cached."""
    return (f"compiling kernels for first use, ~{COMPILE_SECONDS} s of CPU (once: hierdp caches them in "
            f"{CACHE_DIR or cache_dir()})")


class _FirstCompile(numba.core.event.Listener):
    """Logs :func:`compile_notice` once per process, when numba starts compiling a hierdp
    kernel (a cache miss), before the compiler runs; other numba users' kernels are not ours."""

    def __init__(self) -> None:
        self.done = False
        self._lock = threading.Lock()

    def on_start(self, event: Any) -> None:
        if getattr(_LOAD_ONLY, "on", False):  # ready(): the cache missed; compile nothing
            raise _WouldCompile
        if self.done:
            return
        data = event.data if isinstance(event.data, dict) else {}
        func = getattr(data.get("dispatcher"), "py_func", None)
        if not str(getattr(func, "__module__", "") or "").startswith("hierdp"):
            return
        with self._lock:
            if self.done:
                return
            self.done = True
        compile_logger.warning(compile_notice())

    def on_end(self, event: Any) -> None:
        pass


_FIRST_COMPILE = _FirstCompile()
numba.core.event.register("numba:compile", _FIRST_COMPILE)


def notify_first_compile(callback):
    """A context manager: while it is open, ``callback()`` runs once, when numba first
    starts compiling a kernel (a cache miss; loading a cached kernel, or running one
    interpreted, does not count). The CLI says "compiling kernels" through it."""
    from numba.core import event

    class _Once(event.Listener):
        fired = False

        def on_start(self, ev) -> None:
            if not self.fired:
                self.fired = True
                callback()

        def on_end(self, ev) -> None:
            pass

    return event.install_listener("numba:compile", _Once())


#: Inputs up to this many items run a kernel interpreted (see :func:`for_size`).
SMALL_INPUT = 1 << 14

#: Small inputs use a compiled kernel when it costs no compile (see :func:`ready`); False:
#: always the numpy passes or the interpreted kernel (the test suite sets it to test those)
REUSE = True

#: A job of at least this many node-cells (a release by subtree) runs every kernel compiled,
#: however small a call (see :func:`large_job`)
LARGE_JOB = 1 << 22

_WARM = False
_HERE: contextvars.ContextVar[bool] = contextvars.ContextVar("hierdp_reuse_kernels", default=False)
_LARGE: contextvars.ContextVar[bool] = contextvars.ContextVar("hierdp_large_job", default=False)
_MISSED: set = set()
_INDEXED: dict = {}
_LOAD_ONLY = threading.local()


class _WouldCompile(Exception):
    """Raised inside numba, before it compiles, while :func:`ready` only asks the cache."""


def release_finished() -> None:
    """Note that a release has finished in this process: from now on small inputs take a
    kernel from the on-disk cache when it is there (:func:`ready`). The first release of
    a process loads nothing (about 0.3 s for a chain's kernels, more than a small release
    costs); a process that releases again is one that will release many times."""
    global _WARM
    _WARM = True


@contextlib.contextmanager
def large_job(on: bool = True) -> Iterator[None]:
    """While open (in this context: a task's thread opens its own), every kernel runs
    compiled, however small the call (:func:`for_size`, :func:`prefer_compiled`): a job of
    many small calls (the thousands of small noise requests of a release by subtree)
    amortises a compile many times over, while running each call interpreted costs it
    milliseconds. The values do not change: an interpreted kernel gives the compiled
    one's bits (tests/test_interpreted_kernels.py), and the keyed samplers' numpy passes
    their draws. Opened by the split driver for a release of at least :data:`LARGE_JOB`
    node-cells, whether its noise is seeded or not (a release's path then depends on the
    release only)."""
    token = _LARGE.set(bool(on))
    try:
        yield
    finally:
        _LARGE.reset(token)


@contextlib.contextmanager
def reusing(on: bool = True):
    """While open (in this context; threads the code starts do not inherit it), small
    inputs may take compiled kernels (:func:`ready`). A release opens it when its noise
    comes from the secure key, which never repeats: the values of a seeded release, or
    of a post-processor called directly, never depend on what the process ran before
    (the numpy passes agree with the kernels only to round-off, and a rounding tie may
    then go the other way)."""
    token = _HERE.set(bool(on))
    try:
        yield
    finally:
        _HERE.reset(token)


def _indexed(kernel) -> bool:
    """Whether numba's on-disk cache holds some compiled version of ``kernel`` (read once
    per process; False on any surprise from numba's cache, which is not public API)."""
    hit = _INDEXED.get(kernel)
    if hit is None:
        try:
            hit = bool(kernel._cache._cache_file._load_index())
        except Exception:  # noqa: BLE001 - a numba without this internal: no reuse, never an error
            hit = False
        _INDEXED[kernel] = hit
    return hit


def prefer_compiled(*kernels) -> bool:
    """Whether a small input should skip its numpy passes for ``kernels``: each is loaded in
    this process already, or, after a first release (:func:`release_finished`), found in
    the on-disk cache and not found missing before. The call itself then goes through
    :func:`for_size`, which checks the exact signature (:func:`ready`)."""
    if _LARGE.get():
        return all(hasattr(k, "py_func") for k in kernels)
    if not (REUSE and _HERE.get()):
        return False
    return all(hasattr(k, "py_func") and (bool(k.overloads) or (_WARM and k not in _MISSED and _indexed(k)))
               for k in kernels)


def ready(kernel, *args) -> bool:
    """Whether ``kernel`` can run compiled on ``args`` without compiling: its version for
    these argument types is loaded in this process, or (after a first release,
    :func:`release_finished`) numba's on-disk cache holds it, and it is loaded now. A
    cache miss is remembered and never compiles: numba is stopped at its compile event
    (:class:`_FirstCompile`), on this thread only."""
    if not (REUSE and _HERE.get()) or not hasattr(kernel, "py_func"):
        return False
    sig = tuple(kernel.typeof_pyval(a) for a in args)
    if sig in kernel.overloads:
        return True
    if not _WARM or kernel in _MISSED:
        return False
    return _without_compiling(kernel, lambda: kernel.compile(sig))[0]


def _without_compiling(kernel, call) -> tuple[bool, Any]:
    """``(True, call())`` with numba stopped before it would compile on this thread, or
    ``(False, None)`` when it would have (``kernel`` is then remembered as missing)."""
    _LOAD_ONLY.on = True
    try:
        return True, call()
    except _WouldCompile:
        _MISSED.add(kernel)
        return False, None
    finally:
        _LOAD_ONLY.on = False


def interpreted(kernel):
    """The plain-Python version of a numba kernel: its ``py_func`` with every other numba
    kernel it calls (a global name or a closure variable) replaced by that kernel's own
    plain-Python version, so that running it compiles nothing. The same source runs either
    way, and the results are the same (tested draw for draw and value for value)."""
    import types

    made = _INTERPRETED.get(kernel)
    if made is not None:
        return made
    f = kernel.py_func
    module = f.__globals__
    names = _NAMESPACES.get(id(module))
    if names is None:  # one namespace per kernel module, shared by all its kernels
        names = _NAMESPACES[id(module)] = dict(module)
        kernels = [(k, v) for k, v in module.items() if isinstance(v, numba.core.dispatcher.Dispatcher)]
        for name, value in kernels:  # first this module's own kernels (they may call each other)
            if value.py_func.__globals__ is module and value.py_func.__closure__ is None:
                names[name] = _INTERPRETED[value] = types.FunctionType(
                    value.py_func.__code__, names, value.py_func.__name__, value.py_func.__defaults__)
        for name, value in kernels:  # then kernels imported from other modules
            if value not in _INTERPRETED:
                names[name] = interpreted(value)
            else:
                names[name] = _INTERPRETED[value]
    made = _INTERPRETED.get(kernel)
    if made is None:  # a kernel defined in a function: its closure may hold other kernels
        cells = None
        if f.__closure__ is not None:
            cells = tuple(types.CellType(interpreted(c.cell_contents))
                          if isinstance(c.cell_contents, numba.core.dispatcher.Dispatcher) else c
                          for c in f.__closure__)
        made = _INTERPRETED[kernel] = types.FunctionType(f.__code__, names, f.__name__, f.__defaults__, cells)
    return made


_INTERPRETED: dict = {}
_NAMESPACES: dict[int, dict] = {}


def for_size(kernel, n: int):
    """``kernel`` itself, or for inputs of at most :data:`SMALL_INPUT` items a callable
    that runs ``kernel`` compiled when that costs no compile (:func:`ready`: loaded, or
    in the on-disk cache after a first release) and :func:`interpreted` ``(kernel)``
    otherwise. A small input costs milliseconds interpreted, while compiling a kernel
    costs 0.5-1.5 s on a fresh install and loading a chain's kernels from the cache about
    0.3 s: a process's first small release (the demo) loads and compiles nothing."""
    if n > SMALL_INPUT or _LARGE.get() or not hasattr(kernel, "py_func"):
        return kernel
    return functools.partial(_small_call, kernel)


def _small_call(kernel, *args):
    """:func:`ready`'s rule without its per-argument typing (~20 µs an argument): numba's
    own dispatch finds a loaded version, else looks in the cache, and the guard stops it
    before it would compile. Before a first release it runs only a kernel loaded already
    (with other argument types only, numba may still load this version from the cache)."""
    if REUSE and _HERE.get() and kernel not in _MISSED and (_WARM or kernel.overloads):
        ran, out = _without_compiling(kernel, lambda: kernel(*args))
        if ran:
            return out
    return interpreted(kernel)(*args)
