"""The import graph of the ``faultlab`` package, built statically: no import cycles,
and ``faultlab.nodes`` (the bottom layer: hosts and how to run commands on them)
never imports the fault types (``faultlab.injectors``) or the workload
(``faultlab.benchmarks``).

Every module file of the package is parsed (``ast``) and every import counts, also
one inside a function or under ``TYPE_CHECKING``: a lazy import hides a cycle from
the interpreter, not from the design. An edge runs from a module to the module it
names (``from faultlab.x import y`` names ``faultlab.x.y`` when that is a module,
else ``faultlab.x``); importing a submodule is not an edge to its parent package.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_dirs() -> dict[str, Path]:
    """Package name -> folder, from pyproject's ``package-dir`` (``faultlab.injectors``
    lives in ``./injectors``)."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: ROOT / folder for name, folder in conf["package-dir"].items()}


def module_files() -> dict[str, Path]:
    """Every module of the ``faultlab`` package by dotted name."""
    mods: dict[str, Path] = {}
    for pkg, folder in package_dirs().items():
        for f in sorted(folder.rglob("*.py")):
            parts = list(f.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = f
    return mods


def _target(name: str, mods: dict[str, Path]) -> str | None:
    """The module of ``mods`` that ``name`` (a module or a name inside one) is."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The modules of ``mods`` that ``module`` imports anywhere in its file."""
    out: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(t for a in node.names if (t := _target(a.name, mods)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: None if is_pkg else -1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for a in node.names:
                full = f"{source}.{a.name}"
                t = full if full in mods else _target(source, mods)
                if t:
                    out.add(t)
    out.discard(module)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    mods = module_files()
    return {m: _imported(m, p, mods) for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each
    sorted: every import cycle lies inside one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _describe(comp: list[str], graph: dict[str, set[str]]) -> str:
    edges = "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(comp)))}" for m in comp)
    return f"{len(comp)} modules: {edges}"


def test_the_graph_sees_every_module():
    graph = import_graph()
    assert "faultlab.cli" in graph and "faultlab.injectors.base" in graph and "faultlab.lifecycle.lease" in graph
    assert "faultlab.nodes.base" in graph["faultlab.nodes.local"]


def test_nodes_import_neither_fault_types_nor_workload():
    graph = import_graph()
    bad = sorted(f"{m} -> {t}" for m, ts in graph.items() if m == "faultlab.nodes" or m.startswith("faultlab.nodes.")
                 for t in ts if t.startswith(("faultlab.injectors", "faultlab.benchmarks")))
    assert not bad, "faultlab.nodes imports upward: " + "; ".join(bad)


def test_no_module_asks_a_node_for_a_remote_flag():
    """Where a node's leases live is the node's answer (``node.lease_host()``), never
    a guessed attribute: no ``getattr(x, "remote", ...)`` in the package."""
    found = []
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "remote"):
                found.append(f"{module}:{node.lineno}")
    assert not found, "asks for a remote flag: " + ", ".join(found)


def test_no_import_cycles():
    """No cycle in the package's import graph, function-level imports included."""
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, graph) for c in found)
