"""The README's examples run: its Python blocks execute and its commands exist."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks
    for block in blocks:
        ns: dict = {}
        exec(compile(block, "README.md", "exec"), ns)
        result = ns.get("result")
        if result is None:
            continue
        # what the README says of the release it shows: consistent (every parent the sum of
        # its children), the tidy table's columns, a ledger of what was spent, publishable
        assert result.tree.is_consistent(result.values)
        comment = re.search(r"result\.frame\s+# tidy table: ([\w, ]+)", block)
        if comment:
            listed = [c.strip() for c in comment.group(1).split(",")]
            assert listed == [c for c in result.frame.columns if c in listed]
        eps = re.search(r"epsilon=([\d.]+)", block)
        if eps:
            assert abs(result.ledger.spent - float(eps.group(1))) < 1e-9
        assert result.ledger.for_publication


def test_named_builtins_are_registered():
    import hierdp

    table = README[README.index("## What is inside"):README.index("## Release plans")]
    for kind, row in (("mechanism", "mechanisms"), ("postprocessor", "post-processors"), ("metric", "metrics"),
                      ("plan", "plans"), ("decomposition", "decompositions")):
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| {row} "))
        for name in re.findall(r"`([a-z_]+)`", line):
            if name not in ("hierdp",):
                assert name in hierdp.registry.names(kind), (kind, name)


def test_commands_and_files_exist():
    from hierdp.cli import main

    shell = "\n".join(re.findall(r"```bash\n(.*?)```", README, flags=re.S))
    cmds = re.findall(r"(?:^|&& )hierdp (\w+)", shell, flags=re.M)
    assert "release" in cmds
    for cmd in cmds:
        assert cmd in {"release", "validate", "schema", "plugins", "evaluate", "compile"}
    for path in re.findall(r"`((?:specs|docs|notebooks)/[\w./-]+)`", README):
        assert (ROOT / path).exists(), path
    assert main(["validate", str(ROOT / "specs" / "demo.yaml")]) == 0
