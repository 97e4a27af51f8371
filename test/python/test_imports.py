"""No module of the kiln package imports one that imports it back (at any
depth of the import graph, lazy imports inside functions included): each
layer reads only those below it (docs/design.md, "The Python package")."""

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "kiln"


def imports_of(path: Path) -> Set[str]:
    """The package's modules `path` imports (`__init__` for the package)."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    for alias in node.names:
                        name = alias.name
                        found.add(name if (PACKAGE / f"{name}.py").exists()
                                  else "__init__")
            elif node.level == 0 and node.module and node.module.startswith("kiln"):
                parts = node.module.split(".")
                found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "kiln":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return found - {path.stem}


def graph() -> Dict[str, Set[str]]:
    return {path.stem: imports_of(path) for path in sorted(PACKAGE.glob("*.py"))}


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


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) != []
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(graph()) == []
