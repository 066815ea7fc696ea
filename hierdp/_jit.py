"""numba, with its on-disk cache in a per-user folder that works on any install.

numba caches compiled kernels beside the source (site-packages) by default; that fails
on a read-only install ("cannot cache function ... no locator available") and leaves
files behind on uninstall. Importing this module *before* numba points numba's cache at
:func:`cache_dir` through ``NUMBA_CACHE_DIR`` — unless the user has set that variable,
which always wins. Kernel modules get numba from here::

    from hierdp._jit import numba as nb

The folder is, first that is set: ``$HIERDP_CACHE_DIR``, ``$XDG_CACHE_HOME/hierdp``,
``~/.cache/hierdp``; when it cannot be created or written, a folder in the system's
temporary directory (per user) is used instead. Never site-packages.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["numba", "cache_dir", "preferred_cache_dir", "shared_kernels_tag", "cache_is_cold", "mark_cache_warm",
           "CACHE_ENV"]

CACHE_ENV = "HIERDP_CACHE_DIR"


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
    """A hash of the kernels every other kernel module inlines (``hierdp/_kernel_common.py``).

    numba keys a cached function by its own file only, so a kernel that inlines a helper
    from another module would keep running the helper's old machine code after an edit;
    keying the cache folder by the helper's source makes such an edit start a fresh cache.
    """
    import hashlib

    src = Path(__file__).resolve().parent / "_kernel_common.py"
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


def _marker() -> Path | None:
    if CACHE_DIR is None:
        return None
    import hashlib

    here = str(Path(__file__).resolve().parent)
    tag = hashlib.sha1(f"{here}|{numba.__version__}|{sys.version_info[:2]}".encode()).hexdigest()[:12]
    return CACHE_DIR / f".hierdp-warm-{tag}"


def cache_is_cold() -> bool:
    """True until a release has run with this install, numba and cache folder: its
    kernels still have to be compiled (the CLI says so once)."""
    marker = _marker()
    return marker is None or not marker.exists()


def mark_cache_warm() -> None:
    """Record that this install's kernels are compiled and cached (best effort)."""
    marker = _marker()
    if marker is not None:
        try:
            marker.touch()
        except OSError:
            pass
