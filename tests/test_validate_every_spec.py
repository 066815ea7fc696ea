"""`hierdp validate` on every spec a user meets (issue 29, acceptance): exit 0 on every
bundled spec and on every spec the README and docs show; exit 2 with one clear line and no
traceback on every bad spec of ``tests/test_hostile_inputs.py``. The command line runs
in-process (``hierdp.cli.main``), as a user would call it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from hierdp import data, registry
from hierdp.cli import main
from tests.test_hostile_inputs import SPEC_CASES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = Path(data.example_path("demo")).parent
PLUGIN_DIR = ROOT / "examples" / "hierdp-example-plugin"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def example_plugin():
    """The example plugin (specs/plugin-mechanism.yaml names its mechanism), in-process."""
    sys.path.insert(0, str(PLUGIN_DIR))
    try:
        import hierdp_example_plugin
    finally:
        sys.path.remove(str(PLUGIN_DIR))
    registered = "example_geometric" not in registry.names("mechanism")
    if registered:
        registry.register(hierdp_example_plugin, name="hierdp-example-plugin-validate-test")
    yield
    if registered:
        registry.unregister(hierdp_example_plugin)


# ------------------------------------------------------------------ bundled specs
@pytest.mark.parametrize("name", data.example_names())
def test_validate_accepts_every_bundled_spec(capsys, example_plugin, name):
    code, out, err = _cli(capsys, "validate", name)
    assert code == 0, err
    assert out.startswith(f"{name}: valid (") and "Traceback" not in err and "error" not in err


def test_a_suffix_tree_example_is_bundled_and_released(capsys, tmp_path):
    """The bundled sequences example: validate names its column, release writes the PST."""
    code, out, err = _cli(capsys, "validate", "sequences")
    assert code == 0, err
    assert "suffix_tree on trip" in out and "post-processing nonneg" in out  # histograms: nonneg, not blue
    code, out, err = _cli(capsys, "release", "sequences", "--seed", "1", "-q", "-o", str(tmp_path / "o.csv"))
    assert code == 0, err
    head = (tmp_path / "o.csv").read_text().splitlines()[0]
    assert head.startswith("node,depth,context,leaf,next,estimate")


# --------------------------------------------------------------- documented specs
def _yaml_blocks() -> list[tuple[str, str]]:
    out = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        for m in re.finditer(r"^```ya?ml\n(.*?)^```", text, re.S | re.M):
            line = text[:m.start()].count("\n") + 1
            out.append((f"{md.relative_to(ROOT)}:{line}", m.group(1)))
    return out


def _is_spec(block: str) -> bool:
    """A block that is a spec: the version line, or a source and what to count (a spec
    shown without its version line); other blocks show one section."""
    d = yaml.safe_load(block)
    return isinstance(d, dict) and ("hierdp" in d or ("source" in d and ("hierarchy" in d or "decomposition" in d)))


DOC_SPECS = [(where, block) for where, block in _yaml_blocks() if _is_spec(block)]


def test_the_docs_show_specs():
    assert {"docs/spec.md"} <= {where.split(":")[0] for where, _ in DOC_SPECS}
    assert any("suffix_tree" in block for _, block in DOC_SPECS)


@pytest.mark.parametrize("where,block", DOC_SPECS, ids=[w for w, _ in DOC_SPECS])
def test_validate_accepts_every_documented_spec(tmp_path, capsys, where, block):
    """Each documented spec, as a file in the documentation's folder would be: paths
    relative to it (``../specs/data/...``) or, for specs shown beside the examples
    (``data/checkins.csv``), relative to ``specs/``."""
    md_dir = (ROOT / where.split(":")[0]).parent.relative_to(ROOT)
    home = tmp_path / "repo"
    (home / md_dir).mkdir(parents=True, exist_ok=True)
    (home / "specs").symlink_to(EXAMPLES, target_is_directory=True)
    if not (home / md_dir / "data").exists():
        (home / md_dir / "data").symlink_to(EXAMPLES / "data", target_is_directory=True)
    spec = home / md_dir / "documented.yaml"
    spec.write_text(block if "hierdp:" in block else "hierdp: 1\n" + block, encoding="utf-8")
    code, out, err = _cli(capsys, "validate", str(spec))
    assert code == 0, f"{where}:\n{err}"
    assert "Traceback" not in err and "error" not in err


# ------------------------------------------------------------------------ bad specs
def _alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "hierdp: 1\n" + "\n".join(lines) + "\n"


BAD = [(name, text if "\n" in text else text + "\n", match) for name, text, match in SPEC_CASES] + [
    ("alias bomb", _alias_bomb(), "aliases expand"),
]


@pytest.mark.parametrize("name,text,match", BAD, ids=[b[0] for b in BAD])
def test_validate_refuses_every_bad_spec_in_one_line(tmp_path, capsys, name, text, match):
    (tmp_path / "bad.yaml").write_bytes(text.encode("utf-8"))
    code, out, err = _cli(capsys, "validate", str(tmp_path / "bad.yaml"))
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], err
    assert out == ""
