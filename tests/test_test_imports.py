"""The README's test command on a fresh machine: every test imports only what
``pip install -e ".[test]"`` installs (issue 48).

A package that happens to be on a developer's machine must never stand in for a missing
declaration: five test modules once imported ``mpmath``, which no extra installed, and stopped
``pytest`` at collection on a fresh venv. This test reads every test file's imports (with
:mod:`ast`, anywhere in the file) and checks each third-party module against the packages that
``[test]`` brings in: the ``dependencies`` and the ``test`` extra of ``pyproject.toml``, and what
those require in turn (read from the installed packages' metadata). A module needed beyond that
must be guarded: ``pytest.importorskip`` with a ``reason=`` that gives the install line, or an
import under ``try: ... except ImportError``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements install, transitively (normalised names)."""
    seen: set[str] = set()
    todo = [(Requirement(r), frozenset()) for r in requirements]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, _ = todo.pop()
        name = _norm(req.name)
        extras = frozenset(req.extras)
        if (name, extras) in done:
            continue
        done.add((name, extras))
        seen.add(name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # declared but absent here: its own requirements cannot be read (and cannot be imported)
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is None:
                todo.append((sub, frozenset()))
                continue
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if any(sub.marker.evaluate(env) for env in envs):
                todo.append((sub, frozenset()))
    return seen


def _test_install() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return _closure(list(project["dependencies"]) + list(project["optional-dependencies"]["test"]))


def _local_modules() -> set[str]:
    """Top-level names that resolve to the repository's own files (tests/, benchmarks/, examples/ ...)."""
    out = {"hierdp", "tests"}
    for path in REPO.rglob("*.py"):
        rel = path.relative_to(REPO)
        if rel.parts[0] in {"docs", "build", "dist"} or any(p.startswith(".") for p in rel.parts):
            continue
        out.add(path.stem if path.name != "__init__.py" else path.parent.name)
    return out


def _guarded_nodes(tree: ast.Module) -> set[int]:
    """ids of import nodes inside ``try`` blocks that catch ImportError (or a parent of it)."""
    guarded: set[int] = set()
    catches = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        names: set[str] = set()
        for h in node.handlers:
            if h.type is None:
                names.add("BaseException")
            for t in ([h.type] if not isinstance(h.type, ast.Tuple) else h.type.elts) if h.type else []:
                if isinstance(t, ast.Name):
                    names.add(t.id)
        if names & catches:
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Import | ast.ImportFrom):
                        guarded.add(id(sub))
    return guarded


def _importorskips(tree: ast.Module) -> list[tuple[str, str | None, int]]:
    """Each ``pytest.importorskip(name, reason=...)``: (top-level module, reason or None, line)."""
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "importorskip"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            reason = None
            for kw in node.keywords:
                if kw.arg == "reason" and isinstance(kw.value, ast.Constant):
                    reason = str(kw.value.value)
            if reason is None and len(node.args) > 2 and isinstance(node.args[2], ast.Constant):
                reason = str(node.args[2].value)
            out.append((node.args[0].value.split(".")[0], reason, node.lineno))
    return out


def _module_dists() -> dict[str, set[str]]:
    return {mod: {_norm(d) for d in dists} for mod, dists in metadata.packages_distributions().items()}


def undeclared_imports(files: list[Path], installed: set[str], local: set[str],
                       dists_of: dict[str, set[str]], root: Path = REPO) -> list[str]:
    """Every unguarded import of a module ``[test]`` does not install, and every importorskip of such a
    module without an install line: ``file:line: message``."""
    problems = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        guarded = _guarded_nodes(tree)
        skips = _importorskips(tree)
        skipped = {mod for mod, _, _ in skips}

        def declared(mod: str) -> bool:
            if mod in sys.stdlib_module_names or mod in local or mod == "__future__":
                return True
            dists = dists_of.get(mod)
            return bool(dists) and bool(dists & installed)

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module.split(".")[0]]
            else:
                continue
            for mod in mods:
                if declared(mod) or id(node) in guarded or mod in skipped:
                    continue
                problems.append(f"{path.relative_to(root)}:{node.lineno}: imports {mod!r}, which "
                                "pip install -e '.[test]' does not install: declare it in the test extra, or "
                                "guard it with pytest.importorskip(..., reason=\"... pip install ...\")")
        for mod, reason, line in skips:
            if not declared(mod) and (reason is None or "pip install" not in reason):
                problems.append(f"{path.relative_to(root)}:{line}: pytest.importorskip({mod!r}) of a package "
                                "beyond the test extra gives no reason with the install line")
    return problems


#: scripts a test runs in a subprocess only after its own importorskip of the same packages
SUBPROCESS_SCRIPTS = {"_spark_connect_check.py"}  # test_spark.py: importorskip("pyspark"), ("grpc")


def _test_files() -> list[Path]:
    return sorted(p for p in (REPO / "tests").rglob("*.py") if p.name not in SUBPROCESS_SCRIPTS)


def test_every_test_import_is_installed_by_the_test_extra():
    problems = undeclared_imports(_test_files(), _test_install(), _local_modules(), _module_dists())
    assert not problems, "\n".join(problems)


def test_the_check_finds_an_undeclared_import(tmp_path):
    """The checker itself, on a planted module: an unguarded import of a package outside [test] (mpmath's
    case), a bare importorskip of one, and the guarded forms that are fine."""
    bad = tmp_path / "test_planted.py"
    bad.write_text("import numpy\nimport os\nimport mpmath\n"
                   "def test_x():\n    import pytest\n    pytest.importorskip('dp_accounting')\n"
                   "try:\n    import sphinx\nexcept ImportError:\n    sphinx = None\n", encoding="utf-8")
    good = tmp_path / "test_fine.py"
    good.write_text("import pytest\nfsspec = pytest.importorskip('fsspec', reason=\"pip install 'hierdp[remote]'\")\n"
                    "import fsspec.core\n", encoding="utf-8")
    installed = {"numpy", "pytest"}
    dists = {"numpy": {"numpy"}, "pytest": {"pytest"}, "mpmath": {"mpmath"}, "dp_accounting": {"dp-accounting"},
             "sphinx": {"sphinx"}, "fsspec": {"fsspec"}}
    problems = undeclared_imports([bad, good], installed, set(), dists, root=tmp_path)
    assert len(problems) == 2, problems
    assert "test_planted.py:3: imports 'mpmath'" in problems[0]
    assert "test_planted.py:6: pytest.importorskip('dp_accounting')" in problems[1]


def test_the_closure_follows_requirements_and_their_extras():
    """``dask[dataframe]`` brings pandas through dask's ``dataframe`` extra; ``pytest`` brings ``pluggy``
    (read from the installed metadata, so this runs where both are installed: the test extra's)."""
    assert {"pytest", "pluggy", "iniconfig"} <= _closure(["pytest>=8"])
    assert "pandas" in _closure(["dask[dataframe]"])
    assert "pandas" not in _closure(["dask"])


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git checkout (not an sdist)")
def test_every_tracked_test_file_is_checked():
    tracked = subprocess.run(["git", "ls-files", "tests/*.py"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert {REPO / t for t in tracked} - {REPO / "tests" / s for s in SUBPROCESS_SCRIPTS} <= set(_test_files())
