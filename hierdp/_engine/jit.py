"""numba, with its on-disk cache in a per-user folder that works on any install.

numba caches compiled kernels beside the source (site-packages) by default; that fails
on a read-only install ("cannot cache function ... no locator available") and leaves
files behind on uninstall. Importing this module *before* numba points numba's cache at
:func:`cache_dir` through ``NUMBA_CACHE_DIR`` — unless the user has set that variable,
which always wins. Kernel modules get numba from here::

    from hierdp._engine.jit import numba as nb

The folder is, first that is set: ``$HIERDP_CACHE_DIR``, ``$XDG_CACHE_HOME/hierdp``,
``~/.cache/hierdp``; when it cannot be created or written, a folder in the system's
temporary directory (per user) is used instead. Never site-packages.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["numba", "cache_dir", "preferred_cache_dir", "shared_kernels_tag", "notify_first_compile", "CACHE_ENV",
           "SMALL_INPUT", "interpreted", "for_size", "COMPILE_SECONDS", "compile_logger", "compile_notice"]

CACHE_ENV = "HIERDP_CACHE_DIR"

#: CPU seconds the first release of a large tree (default chain: discrete Laplace, BLUE) spends
#: compiling on a cold cache: 14.0 s measured from Python (a 18,121-node tree, HIERDP_CACHE_DIR
#: empty; 0.8 s warm), about 15 s through the CLI; a busy machine takes longer in wall time
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


def shared_kernels_tag() -> str:
    """A hash of the kernels every other kernel module inlines (``hierdp/_engine/kernel_common.py``).

    numba keys a cached function by its own file only, so a kernel that inlines a helper
    from another module would keep running the helper's old machine code after an edit;
    keying the cache folder by the helper's source makes such an edit start a fresh cache.
    """
    import hashlib

    src = Path(__file__).resolve().parent / "kernel_common.py"
    try:
        return hashlib.sha1(src.read_bytes()).hexdigest()[:10]
    except OSError:  # pragma: no cover - a broken install
        return "unknown"


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
    """``kernel`` itself, or :func:`interpreted` ``(kernel)`` for inputs of at most
    :data:`SMALL_INPUT` items. A small input costs milliseconds interpreted, while
    compiling a kernel costs 0.5-1.5 s on a fresh install and loading it from the cache
    0.1-0.3 s: small releases (the demo) then start in about a second, cold or warm."""
    return interpreted(kernel) if n <= SMALL_INPUT and hasattr(kernel, "py_func") else kernel
