"""Architecture rules of the core (design: "Public names", conventions: "Code").

* no import cycle among hierdp's modules, counting imports inside functions and, in a
  second check, imports under ``if TYPE_CHECKING:`` too (a cycle there is a knot in the
  design even though it never runs);
* no import from a lower layer (the private kernels, the tree, the random source, the
  mechanisms, the Generation Matrix) up to a higher one (post-processors, plans, budgets,
  decompositions, front-ends, the pipeline, specs, the CLI), even under ``TYPE_CHECKING``;
* no module outside ``hierdp/tree.py`` reads a private attribute of a ``Tree``
  (plugins and kernels use ``tree.internal`` and the public API);
* no module is named like a public function of the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hierdp

PKG = Path(hierdp.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for sub in node.body:
                    for n in ast.walk(sub):
                        if hasattr(n, "lineno"):
                            lines.add(n.lineno)
    return lines


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> hierdp modules it imports (anywhere but under TYPE_CHECKING, unless
    ``type_checking``)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = set() if type_checking else _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in skip:
                graph[mod].update(_import_targets(mods, mod, path, node))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_level_imports():
    g = import_graph()
    # hierdp.run_spec imports the spec runner inside the function
    assert "hierdp.spec.runner" in g["hierdp"]


def test_no_import_cycle_among_hierdp_modules():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles (counting imports inside functions): " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_no_import_cycle_even_counting_type_checking_imports():
    cycles = _cycles(import_graph(type_checking=True))
    assert not cycles, "import cycles (counting imports under TYPE_CHECKING): " + "; ".join(
        " <-> ".join(c) for c in cycles)


#: the layers, lowest first; a module may import its own layer and those below it only
LOWER = ("hierdp._kernels", "hierdp.errors", "hierdp._version", "hierdp.tree", "hierdp.rng", "hierdp.keyed_noise",
         "hierdp.mechanisms", "hierdp.generation_matrix")
HIGHER = ("hierdp.postprocessors", "hierdp.plans", "hierdp.budgets", "hierdp.decompositions",
          "hierdp.frontends", "hierdp.pipeline", "hierdp.spec", "hierdp.cli", "hierdp.accounting.session",
          "hierdp.result", "hierdp.subtrees", "hierdp.report", "hierdp.outofcore", "hierdp.execution")


def _in(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, ts in graph.items() if _in(m, LOWER)
                  for t in ts if _in(t, HIGHER))


def test_the_layer_check_finds_an_upward_import():
    assert _upward({"hierdp.tree": {"hierdp.postprocessors.gmc"}, "hierdp.plans.x": {"hierdp.tree"}}) == [
        "hierdp.tree -> hierdp.postprocessors.gmc"]


def test_no_import_from_a_lower_layer_up_to_a_higher_one():
    up = _upward(import_graph(type_checking=True))
    assert not up, "imports from a lower layer up to a higher one:\n" + "\n".join(up)


_PRIVATE_TREE = re.compile(r"\b(?:tree|t|self\.tree|st\.tree|structure\.tree|result\.tree|shape|other)\."
                           r"_(?!_)[a-z]\w*")


def test_no_private_tree_attribute_is_read_outside_tree_py():
    hits = []
    for _mod, path in _modules().items():
        if path.name == "tree.py" and path.parent == PKG:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _PRIVATE_TREE.search(line):
                hits.append(f"{path.relative_to(PKG.parent)}:{i}: {line.strip()}")
    assert not hits, "private Tree attributes read outside hierdp/tree.py:\n" + "\n".join(hits)


def test_the_private_attribute_pattern_catches_a_read():
    assert _PRIVATE_TREE.search("x = tree._parent[1:]")
    assert not _PRIVATE_TREE.search("x = tree.internal.parent")


def test_no_module_is_named_like_a_public_function():
    functions = {name for name in hierdp.__all__ if callable(getattr(hierdp, name)) and
                 not isinstance(getattr(hierdp, name), type)}
    assert {"release", "postprocess", "evaluate", "metric", "run_spec"} <= functions
    clashes = sorted(f for f in functions if f"hierdp.{f}" in _modules())
    assert not clashes, f"modules named like public functions: {clashes}"


# ---------------------------------------------------------------- imports inside functions
#: (importing module, imported module) -> why the import stays inside a function although
#: a top-level import would make no import-time cycle. "*" stands for every imported module.
LAZY_IMPORTS = {
    ("hierdp", "*"): "the package defers its imports when the process is the hierdp command (_load)",
    ("hierdp.cli", "*"): "the command line loads the library after parsing (a fast --version and usage error)",
    ("hierdp.tree", "hierdp.registry"): "the registry loads every plugin, hence every layer above the tree",
    ("hierdp.tree", "hierdp.generation_matrix"): "scipy.sparse loads on first use of the matrix form",
    ("hierdp.tree", "hierdp._kernels.tree_pieces"): "read at call time: the thread tests patch the piece sizes",
    ("hierdp.tree", "hierdp._kernels.threads"): "read at call time: the thread tests patch the piece sizes",
    ("hierdp.tree", "hierdp._kernels.memory"): "read at call time: the thread tests patch the page advice",
    ("hierdp._kernels.threads", "hierdp._kernels.kernel_common"): "compiled kernels load on first use",
    ("hierdp._kernels.kernel_common", "hierdp._kernels.memory"): "compiled kernels load on first use",
    ("hierdp.io", "hierdp.io.readers"): "pandas loads when a table is read, not for the CLI's --version",
    ("hierdp.spec.runner", "hierdp.frontends.dask"): "an optional dependency (dask)",
    ("hierdp.spec.runner", "hierdp.frontends.polars"): "an optional dependency (polars)",
    ("hierdp.spec.runner", "hierdp.frontends.spark"): "an optional dependency (pyspark)",
    ("hierdp.spec.runner", "hierdp.plot"): "an optional dependency (matplotlib)",
    ("hierdp.plugins.params", "hierdp.spec.loader"): "the spec machinery loads only for a params_schema",
    ("hierdp.plugins.params", "hierdp.spec.schema"): "the spec machinery loads only for a params_schema",
    ("hierdp.examples.data.make_attribution_data", "hierdp"): "a data script, run on its own",
}


def _import_targets(mods: dict[str, Path], mod: str, path: Path, node: ast.AST) -> list[str]:
    is_pkg = path.name == "__init__.py"
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            pkg = mod if is_pkg else mod.rpartition(".")[0]
            for _ in range(node.level - 1):
                pkg = pkg.rpartition(".")[0]
            base = f"{pkg}.{base}" if base else pkg
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = []
    for t in names:
        while t and t not in mods:
            t = t.rpartition(".")[0]
        if t and t.startswith("hierdp") and t != mod:
            out.append(t)
    return out


def function_imports() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """The import-time graph (top-level imports only) and every import inside a function
    (importing module, imported module, line)."""
    mods = _modules()
    top: dict[str, set[str]] = {m: set() for m in mods}
    inner: list[tuple[str, str, int]] = []
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in skip:
                for t in _import_targets(mods, mod, path, node):
                    if id(node) in in_function:
                        inner.append((mod, t, node.lineno))
                    else:
                        top[mod].add(t)
    return top, inner


def _reaches(graph: dict[str, set[str]], a: str, b: str) -> bool:
    seen: set[str] = set()
    stack = [a]
    while stack:
        x = stack.pop()
        if x == b:
            return True
        if x not in seen:
            seen.add(x)
            stack.extend(graph.get(x, ()))
    return False


def _needless(top: dict[str, set[str]], inner: list[tuple[str, str, int]]) -> list[str]:
    return sorted(f"{m}:{line} imports {t} inside a function" for m, t, line in inner
                  if not _reaches(top, t, m) and (m, t) not in LAZY_IMPORTS and (m, "*") not in LAZY_IMPORTS)


def test_the_function_import_check_finds_a_needless_one():
    top = {"a": set(), "b": {"c"}, "c": {"a"}}
    assert _needless(top, [("a", "b", 3)]) == []                       # b -> c -> a: a cycle at import time
    assert _needless(top, [("b", "a", 9)]) == ["b:9 imports a inside a function"]  # a imports nothing


def test_imports_inside_functions_only_where_a_top_level_import_would_cycle_or_a_reason_is_given():
    top, inner = function_imports()
    assert inner, "the check sees imports inside functions"
    needless = _needless(top, inner)
    assert not needless, ("move these imports to the top of their module (no import-time cycle needs them "
                          "inside), or add a reason to LAZY_IMPORTS:\n" + "\n".join(needless))
    stale = sorted(k for k in LAZY_IMPORTS if k[1] != "*" and not any((m, t) == k for m, t, _ in inner))
    assert not stale, f"LAZY_IMPORTS names imports that are no longer inside a function: {stale}"
