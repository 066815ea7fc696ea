"""Reading a YAML spec with the line and column of every node.

The loader is PyYAML's safe loader (no Python objects can be built from a spec) with the
implicit types of the **YAML 1.2 core schema** instead of YAML 1.1's: only
``true``/``false`` are booleans (``NO``, ``yes``, ``off`` stay strings: Norway, not
False), integers are decimal (``010`` is 10, never octal 8; ``1_000`` is 1000) or ``0o``/``0x``, floats
include ``1e3``, and dates stay strings. Every mapping value, sequence item and mapping
key gets its position recorded in a :class:`Marks` table keyed by its path (a tuple of
keys and indices), and the source text of every plain scalar that was read as a number,
boolean or null, so a *label* can be taken exactly as written (``01`` stays ``"01"``).
Duplicate keys, which PyYAML silently collapses, are reported. Aliases may expand the
document by at most :data:`MAX_ALIAS_NODES` nodes (a "billion laughs" spec is refused
before anything walks it).

Compared with ruamel.yaml 0.19.1 (YAML 1.2) on ``[NO, yes, off, 010, 1e3, 0o10, 1_000, .inf,
2024-01-02]``: the resolver below gives the same types, except that dates stay strings
here (ruamel makes them ``datetime.date``), and keeps this module's line/column marks and
duplicate-key reports without a new dependency. Alias expansion is bounded here before the
document is walked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Issue", "Marks", "LoadedSpec", "load_text", "load_file", "format_path"]

PathT = tuple[Any, ...]


@dataclass(frozen=True)
class Issue:
    """One problem found in a spec: where it is, what is wrong, how to fix it."""

    path: PathT
    message: str
    line: int | None = None
    column: int | None = None

    def render(self, filename: str | None = None) -> str:
        where = filename or "<spec>"
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        dotted = format_path(self.path)
        return f"{where}: {dotted}: {self.message}" if dotted else f"{where}: {self.message}"


def format_path(path: PathT) -> str:
    """Dotted path: ``('hierarchy', 'levels', 1, 'domain')`` -> ``hierarchy.levels[1].domain``."""
    out = ""
    for p in path:
        if isinstance(p, int) and not isinstance(p, bool):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


@dataclass
class Marks:
    """1-based (line, column) of spec nodes, by path; ``key`` marks are those of mapping keys."""

    value: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    key: dict[PathT, tuple[int, int]] = field(default_factory=dict)
    #: source text of plain scalars read as non-strings (numbers, booleans, null), by path;
    #: ``raw_key`` the same for mapping keys (path of the entry)
    raw: dict[PathT, str] = field(default_factory=dict)
    raw_key: dict[PathT, str] = field(default_factory=dict)

    def at(self, path: PathT, prefer_key: bool = False) -> tuple[int | None, int | None]:
        """Position of ``path``, or of its nearest recorded ancestor."""
        path = tuple(path)
        while True:
            if prefer_key and path in self.key:
                return self.key[path]
            if path in self.value:
                return self.value[path]
            if path in self.key:
                return self.key[path]
            if not path:
                return None, None
            path = path[:-1]

    def issue(self, path: PathT, message: str, prefer_key: bool = False) -> Issue:
        line, col = self.at(path, prefer_key=prefer_key)
        return Issue(tuple(path), message, line, col)


@dataclass
class LoadedSpec:
    """A parsed spec: the plain data, the positions of its nodes and where it came from."""

    data: Any
    marks: Marks
    filename: str | None = None
    base_dir: Path | None = None
    issues: list[Issue] = field(default_factory=list)  # problems found while loading


#: how many nodes aliases may add to a spec when expanded (a real spec needs a few hundred)
MAX_ALIAS_NODES = 100_000


class _CoreResolver(yaml.resolver.BaseResolver):
    """Implicit tags of the YAML 1.2 core schema (no yes/no/on/off booleans, no octal
    ``010``, no sexagesimal numbers, no timestamps)."""


_CoreResolver.yaml_implicit_resolvers = {}
for _tag, _regex, _first in (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+0123456789."),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
):
    _CoreResolver.add_implicit_resolver(_tag, re.compile(_regex), list(_first))


class _CoreConstructor(yaml.constructor.SafeConstructor):
    """SafeConstructor with the core schema's integers (decimal; ``0o``/``0x`` prefixes)."""

    def construct_yaml_int(self, node: yaml.Node) -> int:
        value = self.construct_scalar(node).replace("_", "")  # 1_000 = 1000, as before
        if value.startswith("0o"):
            return int(value[2:], 8)
        if value.startswith("0x"):
            return int(value[2:], 16)
        return int(value, 10)


_CoreConstructor.add_constructor("tag:yaml.org,2002:int", _CoreConstructor.construct_yaml_int)


class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
              _CoreConstructor, _CoreResolver):
    """The safe loader with YAML 1.2 core-schema types."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _CoreConstructor.__init__(self)
        _CoreResolver.__init__(self)


def _alias_issue(root: yaml.Node) -> Issue | None:
    """Refuse a document whose aliases expand it by more than MAX_ALIAS_NODES nodes, or
    that refers to itself, before it is constructed or walked. One linear pass over the
    composed graph (each node's expanded size is memoised)."""
    size: dict[int, int] = {}
    distinct = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = _children(node)
            size[nid] = min(1 + sum(size[id(k)] for k in kids), 1 << 62)
            continue
        if nid in size:
            continue
        if nid in on_path:
            line, col = _pos(node.start_mark)
            return Issue((), "an alias refers to the node that contains it (a recursive structure); "
                             "write the values out instead", line, col)
        distinct += 1
        on_path.add(nid)
        stack.append((node, True))
        for k in _children(node):
            if id(k) not in size:
                stack.append((k, False))
    if size[id(root)] - distinct > MAX_ALIAS_NODES:
        return Issue((), f"YAML aliases expand this spec to {size[id(root)]:,} nodes (more than "
                         f"{MAX_ALIAS_NODES:,} added by aliases); write the values out or use fewer aliases", 1, 1)
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _pos(mark: yaml.Mark) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


def _syntax_issue(exc: yaml.YAMLError, text: str) -> Issue:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, col = _pos(mark) if mark is not None else (None, None)
    problem = str(getattr(exc, "problem", None) or exc).strip()
    if "'\\t'" in problem or "\t" in problem or (
        mark is not None and line is not None and "\t" in _line_of(text, line)[: max(col, 1)]
    ):
        msg = "YAML syntax error: a tab character is used for indentation; indent with spaces only"
    else:
        context = getattr(exc, "context", None)
        detail = f"{context}, {problem}" if context else problem
        msg = f"YAML syntax error: {detail}; check the indentation and quoting on this line"
    return Issue((), msg, line, col)


def _line_of(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def load_text(text: str, filename: str | None = None, base_dir: Path | None = None) -> LoadedSpec:
    """Parse spec ``text``; syntax problems are returned as ``issues`` (nothing raised)."""
    marks = Marks()
    spec = LoadedSpec(None, marks, filename, base_dir)
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # control characters, checked before parsing
        line = text[: exc.position].count("\n") + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        spec.issues.append(Issue((), f"YAML syntax error: the character #x{exc.character:04x} is not allowed in "
                                     "YAML; delete it (save the file as plain UTF-8 text)", line, col))
        return spec
    try:
        node = loader.get_single_node()
        if node is None:
            spec.issues.append(Issue((), "the spec is empty; a spec starts with `hierdp: 1` "
                                         "(see `hierdp schema` or docs/spec.md)", 1, 1))
            return spec
        bomb = _alias_issue(node)
        if bomb is not None:
            spec.issues.append(bomb)
            return spec
        data = loader.construct_document(node)
        _record(loader, node, (), marks, spec.issues)
    except yaml.YAMLError as exc:
        spec.issues.append(_syntax_issue(exc, text))
        return spec
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # e.g. bad timestamps
        spec.issues.append(Issue((), f"YAML value error: {exc}; quote the value to keep it a string", 1, 1))
        return spec
    finally:
        loader.dispose()
    spec.data = data
    return spec


def load_file(path: str | Path) -> LoadedSpec:
    """Read and parse the spec file ``path`` (UTF-8)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        spec = LoadedSpec(None, Marks(), str(path), p.parent)
        spec.issues.append(Issue((), "spec file not found; check the path"))
        return spec
    except IsADirectoryError:
        spec = LoadedSpec(None, Marks(), str(path), p.parent)
        spec.issues.append(Issue((), "is a directory, not a spec file; give the path of a .yaml file"))
        return spec
    except OSError as exc:
        spec = LoadedSpec(None, Marks(), str(path), p.parent)
        spec.issues.append(Issue((), f"cannot read the spec file ({exc.strerror}); check its permissions"))
        return spec
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        spec = LoadedSpec(None, Marks(), str(path), p.parent)
        spec.issues.append(Issue((), f"the spec is not UTF-8 text (byte {exc.start}); save it as UTF-8"))
        return spec
    return load_text(text, filename=str(path), base_dir=p.parent)


def _record(loader: _Loader, node: yaml.Node, path: PathT, marks: Marks, issues: list[Issue],
            _seen: set[int] | None = None) -> None:
    """Walk the composed node graph alongside the data, recording marks and duplicate keys."""
    seen = set() if _seen is None else _seen
    marks.value.setdefault(path, _pos(node.start_mark))
    if isinstance(node, yaml.ScalarNode) and node.style is None and node.tag != "tag:yaml.org,2002:str":
        marks.raw.setdefault(path, node.value)
    if id(node) in seen:  # an alias of an anchored node: positions already recorded
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys_seen: dict[Any, tuple[int, int]] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                try:
                    key = loader.construct_object(key_node, deep=True)
                except yaml.YAMLError:
                    key = key_node.value
            else:
                key = f"<{key_node.id} key>"
            try:
                hash(key)
            except TypeError:
                key = repr(key)
            kpos = _pos(key_node.start_mark)
            if isinstance(key_node, yaml.ScalarNode) and key_node.style is None \
                    and key_node.tag != "tag:yaml.org,2002:str":
                marks.raw_key.setdefault(path + (key,), key_node.value)
            if key in keys_seen:
                first = keys_seen[key]
                issues.append(Issue(path + (key,), f"duplicate key {key!r} (first given on line {first[0]}); "
                                    "keep only one", *kpos))
            keys_seen[key] = kpos
            marks.key.setdefault(path + (key,), kpos)
            _record(loader, value_node, path + (key,), marks, issues, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record(loader, item, path + (i,), marks, issues, seen)
