"""The package's imports run one way: no module imports, even for types, one that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import streamseq

ROOT = Path(streamseq.__file__).parent


def module_name(path: Path) -> str:
    """``streamseq.a.b`` for ``a/b.py``, ``streamseq.a`` for ``a/__init__.py``."""
    parts = ("streamseq", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere: at the top, in a function, or
    for types only. ``from p import m`` is an import of module ``p.m`` when there is one,
    else of ``p`` (a package's ``__init__``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    found.add(f"{source}.{alias.name}")
                elif source in modules:
                    found.add(source)
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_circles_finds_a_loop_and_only_loops():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_is_in_an_import_circle():
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in files}
    graph = {module_name(p): imports(p, modules) for p in files}
    assert "streamseq.gather.writer" in graph["streamseq.gather"]  # (the reading works)
    assert circles(graph) == []


def test_no_module_below_the_loader_imports_it():
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in files}
    above = {"streamseq"}  # the package's face
    for path in files:
        name = module_name(path)
        if name in above or name.startswith("streamseq.loader"):
            continue
        assert not {m for m in imports(path, modules) if m.startswith("streamseq.loader")}, name
