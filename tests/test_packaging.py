"""What an installed hierdp needs: the kernel cache folder, the bundled examples by name,
the package data globs and the sdist manifest."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from hierdp import data
from hierdp._kernels import jit as _jit
from hierdp.cli import EXIT_OK, EXIT_USER, main

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hierdp"
ENV = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "HIERDP_CACHE_DIR", "XDG_CACHE_HOME")}
ENV["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")


# ------------------------------------------------------------------ kernel cache --
def test_cache_folder_precedence():
    assert _jit.preferred_cache_dir({"HIERDP_CACHE_DIR": "/a", "XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/a")
    assert _jit.preferred_cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/hierdp")
    assert _jit.preferred_cache_dir({"HOME": "/h"}) == Path("/h/.cache/hierdp")
    assert _jit.preferred_cache_dir({"HIERDP_CACHE_DIR": "", "HOME": "/h"}) == Path("/h/.cache/hierdp")


def test_unwritable_cache_folder_falls_back_to_a_temp_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")  # unwritable even for root
    got = _jit.cache_dir({"HIERDP_CACHE_DIR": str(blocker / "cache")})
    import tempfile

    assert got.parent == Path(tempfile.gettempdir()) and got.name.startswith("hierdp-cache")
    assert _jit.cache_dir({"HIERDP_CACHE_DIR": str(tmp_path / "c")}) == tmp_path / "c"
    assert (tmp_path / "c").is_dir()


def _probe(env: dict[str, str], code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_numba_is_pointed_at_the_cache_folder_before_it_is_imported(tmp_path):
    code = "import hierdp._kernels.jit, numba; print(numba.config.CACHE_DIR)"
    assert Path(_probe({**ENV, "HIERDP_CACHE_DIR": str(tmp_path / "h")}, code)).parent == tmp_path / "h"
    # the user's own NUMBA_CACHE_DIR always wins
    assert _probe({**ENV, "HIERDP_CACHE_DIR": str(tmp_path / "h"), "NUMBA_CACHE_DIR": str(tmp_path / "n")},
                  code) == str(tmp_path / "n")
    # numba imported first (by the user): hierdp still moves the cache out of site-packages
    assert Path(_probe({**ENV, "HIERDP_CACHE_DIR": str(tmp_path / "h")},
                       "import numba, hierdp._kernels.jit; print(numba.config.CACHE_DIR)")).parent == tmp_path / "h"


def test_no_writable_home_still_imports_and_runs(tmp_path):
    """HOME is a file (no ~/.cache can exist, even for root), no XDG, no HIERDP_CACHE_DIR:
    import hierdp, --version and --help work and the cache goes to the temp folder."""
    env = {**ENV, "HOME": "/etc/passwd"}
    out = _probe(env, "import hierdp, numba; print(numba.config.CACHE_DIR)")
    import tempfile

    assert out.startswith(tempfile.gettempdir()) and "site-packages" not in out
    for args in (["--version"], ["--help"]):
        proc = subprocess.run([sys.executable, "-m", "hierdp", *args], capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr


def test_first_large_release_compiles_into_the_cache_folder_and_says_so_once(tmp_path):
    """Small releases run their kernels interpreted (tests/test_interpreted_kernels.py); a
    tree above hierdp._kernels.jit.SMALL_INPUT nodes compiles them, says so once, into the cache."""
    import numpy as np

    rng = np.random.default_rng(0)
    n = 120 * 150  # region x district leaves: more nodes than SMALL_INPUT
    assert n > _jit.SMALL_INPUT
    rows = pd.DataFrame({"region": np.repeat([f"r{i:03d}" for i in range(120)], 150),
                         "district": [f"d{j:03d}" for j in range(150)] * 120})
    rows = rows.loc[rng.integers(0, n, 50_000)]
    rows.to_csv(tmp_path / "persons.csv", index=False)
    (tmp_path / "spec.yaml").write_text(
        "hierdp: 1\nsource: {path: persons.csv}\nhierarchy:\n  levels:\n"
        f"    - {{name: region, domain: {[f'r{i:03d}' for i in range(120)]}}}\n"
        f"    - {{name: district, domain: {[f'd{j:03d}' for j in range(150)]}}}\n"
        "privacy: {epsilon: 1.0}\noutput: {path: out.csv}\n")
    cache = tmp_path / "cache"
    env = {**ENV, "HIERDP_CACHE_DIR": str(cache)}
    demo = subprocess.run([sys.executable, "-m", "hierdp", "release", "demo", "--seed", "1", "-o", "demo.csv"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert demo.returncode == 0 and "compiling kernels" not in demo.stderr, demo.stderr
    cmd = [sys.executable, "-m", "hierdp", "release", "spec.yaml", "--seed", "1"]
    cold = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert cold.returncode == 0, cold.stderr
    notes = [ln for ln in cold.stderr.splitlines() if ln.startswith("compiling kernels for first use")]
    assert len(notes) == 1 and str(cache) in notes[0]
    assert list(cache.rglob("*.nbi")), "numba wrote no cache into HIERDP_CACHE_DIR"
    warm = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert warm.returncode == 0 and "compiling kernels" not in warm.stderr
    assert (tmp_path / "out.csv").exists() and (tmp_path / "out.ledger.json").exists()
    assert len(pd.read_csv(tmp_path / "out.csv")) == 1 + 120 + n


# ------------------------------------------------------------------ examples --
def test_examples_by_name_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert {"demo", "census", "attribution"} <= set(data.example_names())
    assert data.resolve_spec("demo") == str(data.example_path("demo"))
    assert data.resolve_spec("demo.yaml") == str(data.example_path("demo"))
    assert main(["examples"]) == EXIT_OK
    listing = capsys.readouterr().out
    assert listing.startswith("attribution ") and "\ndemo " in listing
    assert main(["validate", "census", "-q"]) == EXIT_OK
    assert main(["release", "demo", "--seed", "1", "-q"]) == EXIT_OK
    assert (tmp_path / "out" / "demo.csv").exists() and (tmp_path / "out" / "demo.ledger.json").exists()
    # a file of that name in the working folder wins over the example
    (tmp_path / "demo").write_text("hierdp: 1\n")
    assert data.resolve_spec("demo") == "demo"


def test_unknown_example_name_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["release", "dmeo"]) == EXIT_USER
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean 'demo'?" in err and "neither a spec file" in err
    assert list(tmp_path.iterdir()) == []


def test_specs_folder_is_the_packaged_examples():
    """In git specs/ is a symlink to hierdp/examples; an unpacked sdist has a copy."""
    specs, examples = ROOT / "specs", PKG / "examples"
    if specs.is_symlink():
        assert specs.resolve() == examples.resolve()
    files = sorted(p.relative_to(examples) for p in examples.rglob("*") if p.is_file() and "__pycache__" not in str(p))
    assert files and all((specs / f).read_bytes() == (examples / f).read_bytes() for f in files)


# ------------------------------------------------------------------ wheel and sdist --
def _package_data() -> list[str]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return conf["tool"]["setuptools"]["package-data"]["hierdp"]


@pytest.mark.parametrize("folder", ["data", "examples", "spec"])
def test_every_non_python_file_of_the_package_is_package_data(folder):
    globs = _package_data()
    for f in sorted((PKG / folder).rglob("*")):
        rel = f.relative_to(PKG).as_posix()
        if f.is_dir() or "__pycache__" in rel or (f.suffix == ".py" and (f.parent / "__init__.py").exists()):
            continue
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} would be missing from the wheel"


def test_sdist_manifest_carries_the_test_suite():
    manifest = (ROOT / "MANIFEST.in").read_text().split()
    for folder in ("tests", "specs", "notebooks", "docs", "examples"):
        assert folder in manifest, f"MANIFEST.in does not graft {folder}/"
    for needed in ("tests/conftest.py", "tests/helpers.py"):
        assert (ROOT / needed).exists()


def test_runtime_dependencies_cover_what_the_demo_imports():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = " ".join(conf["project"]["dependencies"])
    assert "cryptography" in deps  # the secure source's ChaCha20
    for dev_only in ("pytest", "matplotlib", "nbclient"):
        assert dev_only not in deps


@pytest.mark.parametrize("inlined", ["_kernels/kernel_common.py", "mechanisms/_sampler_kernel.py"])
def test_the_kernel_cache_folder_follows_the_shared_inlined_kernels(monkeypatch, tmp_path, inlined):
    """Editing a file whose kernels other files' kernels inline (kernel_common; the samplers'
    state machine, which the keyed kernels call) must not leave callers on stale cached
    machine code: the cache folder is keyed by their source."""
    import hierdp._kernels.jit as jit

    assert inlined in jit.INLINED_KERNELS
    package = Path(jit.__file__).resolve().parent.parent
    for name in jit.INLINED_KERNELS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((package / name).read_bytes())
    monkeypatch.setattr(jit, "__file__", str(tmp_path / "_kernels" / "jit.py"))
    before = jit.shared_kernels_tag()
    assert before != "unknown"
    (tmp_path / inlined).write_bytes((package / inlined).read_bytes() + b"\n# an edit\n")
    assert jit.shared_kernels_tag() != before
    assert f"kernels-{jit.shared_kernels_tag()}" not in str(jit.CACHE_DIR)  # the live folder is this install's


def test_every_kernel_called_across_modules_keys_the_cache_folder():
    # numba keys a cached kernel by its own file: a kernel that calls a compiled kernel of
    # another module keeps the callee's old machine code after an edit of the callee unless
    # the callee's file keys the cache folder (the whole-US run of 2026-11-29 ran the top-down
    # passes with a stale two-margin solver this way). Every numba dispatcher that a kernel
    # body names, imported from another hierdp module, must come from a file of INLINED_KERNELS.
    import ast
    import importlib

    import hierdp._kernels.jit as jit

    package = Path(jit.__file__).resolve().parent.parent

    def is_kernel(fn: ast.AST) -> bool:
        return isinstance(fn, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in fn.decorator_list)

    missing, seen = [], 0
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        kernels = [fn for fn in ast.walk(tree) if is_kernel(fn)]
        if not kernels:
            continue
        imported: dict[str, tuple[str, str | None]] = {}  # local name -> (module, attribute or None)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hierdp"):
                for a in node.names:
                    imported[a.asname or a.name] = (node.module, a.name)
        used: set[tuple[str, str | None]] = set()
        for fn in kernels:
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported:
                    mod, attr = imported[node.value.id]
                    used.add((f"{mod}.{attr}", node.attr))
                elif isinstance(node, ast.Name) and node.id in imported:
                    used.add(imported[node.id])
        for mod_name, attr in used:
            try:
                obj = getattr(importlib.import_module(mod_name), attr) if attr else importlib.import_module(mod_name)
            except (ImportError, AttributeError):
                try:  # "from hierdp.x import module" then module.kernel
                    obj = importlib.import_module(mod_name)
                    obj = getattr(obj, attr) if attr else obj
                except (ImportError, AttributeError):
                    continue
            if not hasattr(obj, "py_func"):
                continue
            seen += 1
            src = Path(obj.py_func.__code__.co_filename).resolve()
            rel = src.relative_to(package).as_posix()
            if src != path.resolve() and rel not in jit.INLINED_KERNELS:
                missing.append(f"{path.relative_to(package)} calls {obj.py_func.__name__} of {rel}")
    assert seen >= 5  # the scan finds the cross-module calls there are (kernel_common, samplers, margins)
    assert not missing, missing
