"""The syntax indexes the fixes ask instead of walking the code again for every finding: each scope's names (made
once per scope, ``FixContext.names_in``) and the parents map (filled one top-level statement at a time)."""

from __future__ import annotations

import ast
import bisect
from typing import NamedTuple

from ..parsing import first_line

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class FunctionNames(NamedTuple):
    """The names of one function, or of the module (``FixContext.names_in``), nested code included, each list in
    ``ast.walk`` order."""

    uses: dict[str, list[ast.Name]]  # identifier -> its Name nodes, loads and stores
    declared: frozenset[str]  # global or nonlocal
    declarations: tuple[frozenset[str], ...]  # the names of each `global`/`nonlocal` statement
    arguments: frozenset[str]
    parameters: frozenset[str]  # the parameters of every function and lambda in it, its own included
    attributes: dict[str, list[ast.Attribute]]  # attribute name -> its Attribute nodes (`x.weight`: "weight")
    definitions: dict[str, list[ast.AST]]  # name -> the functions and classes defined with it (itself too)
    imported: frozenset[str]  # the first part of every name an import binds (`import a.b`: "a")
    # names bound but by a ``Name`` or a parameter: `except E as n`, a `match` capture, an import other than `import n.b`
    bound: frozenset[str]

    def of(self, name: str) -> list[ast.Name]:
        return self.uses.get(name, [])

    def attribute(self, attr: str) -> list[ast.Attribute]:
        return self.attributes.get(attr, [])


def function_names(fn: ast.AST) -> FunctionNames:
    uses: dict[str, list[ast.Name]] = {}
    attributes: dict[str, list[ast.Attribute]] = {}
    definitions: dict[str, list[ast.AST]] = {}
    declarations: list[frozenset[str]] = []
    parameters: set[str] = set()
    imported: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            uses.setdefault(node.id, []).append(node)
        elif isinstance(node, ast.Attribute):
            attributes.setdefault(node.attr, []).append(node)
        elif isinstance(node, (*FUNCTIONS, ast.ClassDef)):
            definitions.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declarations.append(frozenset(node.names))
        elif isinstance(node, ast.arg):
            parameters.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
            bound.update(a.asname or a.name for a in node.names if a.asname or isinstance(node, ast.ImportFrom))
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)):
            bound.update(n for n in (getattr(node, "name", None), getattr(node, "rest", None)) if n)
    a = getattr(fn, "args", None)  # its own parameters (not a lambda default's)
    arguments = {p.arg for p in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg) if p} if a else set()
    return FunctionNames(uses, frozenset().union(*declarations), tuple(declarations), frozenset(arguments), frozenset(parameters),
                         attributes, definitions, frozenset(imported), frozenset(bound))


class Parents:
    """node -> parent node, filled one top-level statement at a time: a fix looks at a few statements of a
    file that may have thousands, and a walk of the whole tree costs more than most fixes."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.starts = [first_line(s) for s in tree.body]
        self.map: dict[ast.AST, ast.AST] = {}
        self.filled: set[int] = set()

    def get(self, node: ast.AST, default=None):
        parent = self.map.get(node)
        if parent is None and node is not self.tree:
            self._fill_around(node)
            parent = self.map.get(node)
        return default if parent is None else parent

    def __getitem__(self, node: ast.AST) -> ast.AST:
        parent = self.get(node)
        if parent is None:
            raise KeyError(node)
        return parent

    def _fill_around(self, node: ast.AST) -> None:
        line = getattr(node, "lineno", None)
        if line is None:  # ast.arguments, comprehension, withitem...: no line to look it up by
            indices = range(len(self.tree.body))
        else:
            # The top-level statements that start at or before the line and are not over by then.
            start = bisect.bisect_right(self.starts, line) - 1
            indices = [i for i in range(start, -1, -1) if self.tree.body[i].end_lineno >= line]
        for i in indices:
            if i not in self.filled:
                self.filled.add(i)
                top = self.tree.body[i]
                self.map[top] = self.tree
                for parent in ast.walk(top):
                    for child in ast.iter_child_nodes(parent):
                        self.map[child] = parent
        if node not in self.map and line is not None:
            self._fill_around(_NO_LINE)  # a node whose lines lie: look everywhere


_NO_LINE = ast.AST()
