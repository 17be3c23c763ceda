"""The gradguard package's imports, read from the AST: the module-level import graph has no cycle; a function
imports a gradguard module only where listed below with its reason; and counting those function-level imports
too, there is no cycle either (``HIDDEN_CYCLES`` stays empty).  Counting the imports for type checkers too
(``if TYPE_CHECKING:``), there is no cycle at all.

The language server loads a few of its modules on first use, by name (``gradguard.lsp.on_demand``): each of
those is counted as an import of ``on_demand`` in every graph here, and no other module of the server imports
anything by name."""

from __future__ import annotations

import ast
from pathlib import Path

import gradguard
from gradguard.lsp.on_demand import MODULES as ON_DEMAND

PACKAGE = Path(gradguard.__file__).resolve().parent

# Importing modules (by prefix) whose functions may import gradguard modules, and why.
DEFERRED = {
    "gradguard.cli": "start-up: each command imports what it runs (`gradguard lsp` needs pygls, optional; the "
                     "analysis after the server's generated-code cache, lsp/test_start.py)",
    "gradguard.probe.cli": "start-up of the CLI: the probe's modules load only when a probe runs",
    "gradguard.probe.worker": "the sandboxed child imports torch and the tracer after its guard is in place",
    "gradguard.probe.runner": "the file walker only when a directory is probed",
    "gradguard.output": "the rule registry pulls in the engine: only output formats that list rules load it",
    "gradguard.docs": "the rule registry pulls in the engine: only when rule docs are generated",
    "gradguard.result_cache": "the knowledge table and jedi only when a cache key needs them",
    "gradguard.api": "the fix planner only when an editor's quick fix is checked (the server's start needs none)",
}

# Cycles that function-level imports hide: none (api <-> notebooks and cli <-> probe.cli were the last; keep it so).
HIDDEN_CYCLES: list[list[str]] = []

# Counting every import, ``TYPE_CHECKING`` ones included, there is no cycle either.  The last were the language
# server's (server <-> probe_support, server <-> workspace: those modules take the server as a ``Protocol``) and
# config -> output -> probe -> probe.runner -> files -> config (output takes a probe run as ``output.ProbeRun``).
LOADER = "gradguard.lsp.on_demand"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(module: str, is_package: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The gradguard modules an import statement names (``from . import x`` names module ``x`` if it is one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "gradguard"]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    if target.split(".")[0] != "gradguard":
        return []
    names = [f"{target}.{a.name}" for a in node.names]
    return [n for n in names if n in MODULES] or [target]


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or \
        isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"


def imports(path: Path, type_checking: bool = False) -> tuple[set[str], set[str]]:
    """(modules imported at module level, modules imported inside functions) of one file; ``type_checking``: with
    those imported for type checkers only (``if TYPE_CHECKING:``) among the first."""
    module, is_package = module_name(path), path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    deferred: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child) and not type_checking:
                continue  # for type checkers only: never run
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (deferred if in_function else top).update(resolve(module, is_package, child))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    if module == LOADER:  # what it loads by name on first use
        top.update(name for names in ON_DEMAND.values() for name in names)
    return top, deferred


FILES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
MODULES = set(FILES)


def _edges(module: str, targets: set[str]) -> set[str]:
    """The modules importing ``targets`` from ``module`` runs: importing a.b.c runs a and a.b first."""
    edges = set()
    for target in targets:
        parts = target.split(".")
        edges.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return {t for t in edges if t in MODULES and t != module and not module.startswith(t + ".")}


def module_graph(type_checking: bool = False) -> dict[str, set[str]]:
    return {module: _edges(module, imports(path, type_checking)[0]) for module, path in FILES.items()}


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles ``find_cycle`` finds one after another, each broken at its last edge before the next search."""
    graph = {m: set(e) for m, e in graph.items()}
    cycles = []
    while (cycle := find_cycle(graph)) is not None:
        cycles.append(cycle)
        graph[cycle[-2]].discard(cycle[-1])
    return cycles


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := dfs(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := dfs(node)):
            return found
    return None


def test_the_module_level_import_graph_has_no_cycle() -> None:
    assert find_cycle(module_graph()) is None


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _deferred() -> set[tuple[str, str]]:
    return {(module, target) for module, path in FILES.items() for target in imports(path)[1]}


def test_no_function_imports_a_gradguard_module_unless_listed() -> None:
    found = _deferred()
    assert sorted((m, t) for m, t in found if not any(m.startswith(p) for p in DEFERRED)) == []
    assert sorted(p for p in DEFERRED if not any(m.startswith(p) for m, _ in found)) == []  # no stale entry


def test_function_level_imports_hide_no_cycle_but_the_listed_ones() -> None:
    graph = module_graph()
    for module, target in _deferred():
        graph[module] |= _edges(module, {target})
    assert sorted(all_cycles(graph)) == sorted(HIDDEN_CYCLES)


def test_counting_type_checking_and_function_level_imports_there_is_no_cycle() -> None:
    graph = module_graph(type_checking=True)
    for module, target in _deferred():
        graph[module] |= _edges(module, {target})
    assert all_cycles(graph) == []


def test_the_language_server_has_no_deferred_import() -> None:
    assert sorted((m, t) for m, t in _deferred() if m.startswith("gradguard.lsp")) == []


def test_the_language_server_imports_by_name_only_in_its_loader() -> None:
    """Only ``on_demand`` imports a module by name (so every edge of the server is in the graphs above), and each
    module it names is one of the package's, not importing ``server.py`` (whose imports would close a cycle)."""
    def imports_by_name(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "importlib" for a in node.names) \
                    or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "importlib" \
                    or isinstance(node, ast.Name) and node.id == "__import__":
                return True
        return False

    by_name = sorted(m for m, path in FILES.items() if m.startswith("gradguard.lsp") and imports_by_name(path))
    assert by_name == [LOADER]
    loaded = {name for names in ON_DEMAND.values() for name in names}
    assert loaded <= MODULES
    assert sorted(m for m in loaded if "gradguard.lsp.server" in imports(FILES[m], type_checking=True)[0]) == []
