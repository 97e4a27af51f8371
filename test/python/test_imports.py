"""No module of the kiln package imports one that imports it back (at any
depth of the import graph, lazy imports inside functions included): each
layer reads only those below it (docs/design.md, "The Python package")."""

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "kiln"


def module_name(path: Path) -> str:
    """`path`'s module, dotted below the package ("runtime", "jax.ffi";
    a subpackage's `__init__` is the subpackage, the package's own
    "__init__")."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


def resolve(parts: List[str]) -> str:
    """The package's module that dotted `parts` name: the module itself, or,
    for an attribute of one (`from . import name`), the module holding it."""
    while parts:
        if (PACKAGE.joinpath(*parts).with_suffix(".py").exists()
                or (PACKAGE.joinpath(*parts) / "__init__.py").exists()):
            return ".".join(parts)
        parts = parts[:-1]
    return "__init__"


def imports_of(path: Path) -> Set[str]:
    """The package's modules `path` imports, lazy imports included."""
    found: Set[str] = set()
    here = list(path.relative_to(PACKAGE).parent.parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level >= 1:
                base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                module = base + (node.module.split(".") if node.module else [])
                if node.module:
                    found.add(resolve(module))
                else:
                    for alias in node.names:
                        found.add(resolve(module + [alias.name]))
            elif node.module and node.module.split(".")[0] == "kiln":
                found.add(resolve(node.module.split(".")[1:]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "kiln":
                    found.add(resolve(parts[1:]))
    return found - {module_name(path)}


def graph() -> Dict[str, Set[str]]:
    return {module_name(path): imports_of(path)
            for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts}


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """One cycle through each module that reaches itself."""
    found = []
    for start in edges:
        stack = [(start, [start])]
        seen: Set[str] = set()
        while stack:
            node, path = stack.pop()
            for target in edges.get(node, ()):
                if target == start:
                    found.append(path + [start])
                    stack.clear()
                    break
                if target not in seen:
                    seen.add(target)
                    stack.append((target, path + [target]))
    return found


def test_the_scan_sees_imports():
    edges = graph()
    assert "runtime" in edges["__init__"]
    assert "capi" in edges["runtime"]
    assert "torch_ops" in edges["dynamo"]  # a lazy import, inside a function
    # Subpackages: relative imports one and two levels up.
    assert "jax.ffi" in edges["jax"] and "site_cache" in edges["jax.ffi"]


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) != []
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(graph()) == []
