"""Executed copies of the notebooks, shared by the test suite and the docs build.

The notebooks are stored without outputs. ``tests/test_notebooks.py`` executes every one of
them (its cells assert the notebook's claims); the docs build needs them executed too, so
that every output and figure appears on the site. Executing them twice would double the
slowest part of CI, so whoever executes a notebook first stores the executed copy here,
under ``docs/_build/notebooks/`` (git-ignored; ``.ci/lint-and-docs`` clears only
``docs/_build/html``), stamped with a key, and the other reuses it while the key matches.

The key is a SHA-256 over the notebook file, every source and data file of the code it
runs (``hierdp/`` and ``benchmarks/``, whose tree builders notebook 02 imports) and this
file (its :data:`KERNEL_SETUP` shapes the outputs): change a cell, a kernel, a plot or a
default and the copy is stale, and the docs build executes the notebook again.

Both executors (this module's and ``tests/test_notebooks.py``) start their kernels through
:func:`client`, with :data:`KERNEL_SETUP`: a page shows what the notebook computes, not
the machine that built the site. Matplotlib or numpy upgrades do not change the key; delete the folder to
force a fresh run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
NOTEBOOKS = ROOT / "notebooks"
CACHE = DOCS / "_build" / "notebooks"
STAMP = "hierdp_executed_key"  # the notebook-level metadata entry holding the key
_CODE = ("hierdp", "benchmarks")
_SKIP = {"__pycache__", ".ipynb_checkpoints", "out", "results"}

#: Python lines every kernel that executes a notebook for the site runs before the first cell
#: (IPython's ``IPKernelApp.exec_lines``: no execution count, no name left in the notebook's
#: namespace). Without them the pages showed the builder's machine, not the notebook:
KERNEL_SETUP = (
    # hierdp's one-line notice before its kernels first compile ("compiling kernels for first
    # use ... caches them in /root/.cache/hierdp/...") comes from a cold cache on the machine
    # that builds the site and names its home folder; it goes through the documented
    # ``hierdp.compile`` logger (README), quietened here as a user would quieten it
    '__import__("logging").getLogger("hierdp.compile").setLevel("ERROR")',
    # a warning prints as "<file>:<line>: Category: message" and its source line; in a kernel the
    # file is the temporary one IPython runs each cell from (/tmp/ipykernel_<pid>/<hash>.py):
    # the category and the message are what the reader needs (e.g. NotForPublicationWarning)
    '__import__("warnings").formatwarning = lambda message, category, *_, **__: f"{category.__name__}: {message}\\n"',
)


def _code_digest() -> bytes:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes() + b"\0")  # KERNEL_SETUP and how a notebook runs
    for top in _CODE:
        base = ROOT / top
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = path.relative_to(ROOT)
            if _SKIP & set(rel.parts) or path.suffix in (".pyc", ".nbi", ".nbc"):
                continue
            h.update(str(rel.as_posix()).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.digest()


def key(notebook: Path, code_digest: bytes | None = None) -> str:
    """The key of ``notebook`` with the code as it is now (``code_digest`` to reuse one)."""
    h = hashlib.sha256(code_digest if code_digest is not None else _code_digest())
    h.update(Path(notebook).read_bytes())
    return h.hexdigest()


def cached(notebook: Path, code_digest: bytes | None = None) -> Path | None:
    """The stored executed copy of ``notebook`` if it is current, else ``None``."""
    import json

    copy = CACHE / Path(notebook).name
    if not copy.is_file():
        return None
    try:
        stamp = json.loads(copy.read_text(encoding="utf-8")).get("metadata", {}).get(STAMP)
    except (OSError, ValueError):
        return None
    return copy if stamp == key(notebook, code_digest) else None


def store(notebook: Path, executed: Any, stamp: str) -> Path | None:
    """Store ``executed`` (an nbformat notebook, outputs in) as the copy of ``notebook``,
    stamped with ``stamp`` (the key taken *before* execution, so that a file changed while it
    ran leaves a stale copy). Returns the path, or ``None`` where the folder is not writable
    (an installed, read-only checkout: the docs build then executes the notebook itself)."""
    import nbformat

    executed = nbformat.from_dict(executed)
    executed.metadata[STAMP] = stamp
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=CACHE, suffix=".ipynb.part")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            nbformat.write(executed, f)
        target = CACHE / Path(notebook).name
        os.replace(tmp, target)  # atomic: a concurrent reader sees the old copy or the new one
    except OSError:
        return None
    return target


def client(nb: Any, cwd: str | Path, timeout: int = 600) -> Any:
    """An ``nbclient.NotebookClient`` that executes ``nb`` (an nbformat notebook, filled in
    place) in a fresh ``python3`` kernel working in ``cwd``, the kernel started with
    :data:`KERNEL_SETUP`."""
    import nbclient

    return nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                   resources={"metadata": {"path": str(cwd)}},
                                   extra_arguments=[f"--IPKernelApp.exec_lines={line}" for line in KERNEL_SETUP])


def execute(notebook: Path, timeout: int = 600) -> Any:
    """Execute ``notebook`` in a fresh kernel (:func:`client`), in an empty temporary folder;
    returns the executed notebook (a failing cell raises). The kernel inherits the
    environment: put this checkout first on ``PYTHONPATH`` (as :func:`executed_copies` does)."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    with tempfile.TemporaryDirectory(prefix="hierdp-nb-") as cwd:
        client(nb, cwd, timeout).execute()
    return nb


def executed_copies(target: Path, workers: int = 2) -> dict[str, str]:
    """Write an executed copy of every notebook into ``target``: the stored one where it is
    current, else a fresh run (stored for next time). Returns ``{name: "cached" | "executed"}``."""
    from concurrent.futures import ThreadPoolExecutor

    import nbformat

    digest = _code_digest()
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    how: dict[str, str] = {}
    todo = []
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        copy = cached(nb, digest)
        if copy is not None:
            shutil.copy2(copy, target / nb.name)
            how[nb.name] = "cached"
        else:
            todo.append(nb)

    def run(nb: Path) -> None:
        stamp = key(nb, digest)
        executed = execute(nb)
        stored = store(nb, executed, stamp)
        if stored is not None:
            shutil.copy2(stored, target / nb.name)
        else:
            nbformat.write(executed, target / nb.name)
        how[nb.name] = "executed"

    if not todo:
        return how
    env_path = os.environ.get("PYTHONPATH")  # the kernels document this checkout, not an installed copy
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), env_path]) if env_path else str(ROOT)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            list(pool.map(run, todo))  # a failing notebook raises here: the build stops with its error
    finally:
        if env_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_path
    return how


def stored_copies(target: Path) -> dict[str, str]:
    """Copy the notebooks as stored (no outputs) into ``target``: a quick build of the text."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        shutil.copy2(nb, target / nb.name)
    return {nb.name: "as stored (no outputs)" for nb in sorted(NOTEBOOKS.glob("*.ipynb"))}
