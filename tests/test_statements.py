"""``gradguard.statements`` is the one place that knows where statements nest: it agrees with ``ast.walk``
on every fixture and on every kind of block, and no other module lists the block fields by hand."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from gradguard import statements

from test_import_graph import FILES

EVERY_BLOCK = textwrap.dedent("""\
    import torch
    class A:
        def f(self):
            for i in r:
                a = 1
            else:
                b = 2
            while c:
                d = 3
            else:
                e = 4
    try:
        f = 5
    except ValueError:
        class B: pass
    else:
        g = 6
    finally:
        h = 7
    try:
        i = 8
    except* TypeError:
        def j(): pass
    match k:
        case 1:
            class C: pass
        case _:
            async def m():
                async with n as o:
                    async for p in q:
                        if s: t = 1
                        elif u: v = 2
                        else: w = 3
    with x: y = lambda: 1
    """)


def _reference_blocks(tree: ast.AST) -> set[tuple[int, str, int]]:
    """Every non-empty list of statements, found by visiting every node."""
    return {(id(node), name, id(value)) for node in ast.walk(tree) for name, value in ast.iter_fields(node)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt)}


def _sources() -> list[tuple[str, str]]:
    root = Path(__file__).parent / "fixtures"
    return [(EVERY_BLOCK, "every block")] + [(p.read_text(encoding="utf-8"), p.name) for p in sorted(root.rglob("*.py"))]


@pytest.mark.parametrize("source", [s for s, _ in _sources()], ids=[n for _, n in _sources()])
def test_the_walkers_find_what_ast_walk_finds(source: str) -> None:
    tree = ast.parse(source)
    found = list(statements.walk_blocks(tree))
    assert {(id(n), name, id(b)) for n, name, b in found} == _reference_blocks(tree)
    walked = list(statements.walk(tree))
    assert {id(n) for n in walked} == {id(n) for n in ast.walk(tree)
                                       if isinstance(n, (ast.stmt, ast.excepthandler, ast.match_case))}
    every = [id(n) for n in statements.every_node(tree)]
    assert sorted(every) == sorted(id(n) for n in ast.walk(tree) if not isinstance(n, ast.expr_context))
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    order = {id(n): i for i, (n, _, _) in enumerate(found)}
    for node, _, _ in found:  # a holder's blocks come before those inside them
        up = parents.get(id(node))
        while up is not None:
            assert order.get(id(up), -1) <= order[id(node)]
            up = parents.get(id(up))


@pytest.mark.parametrize("source", [s for s, _ in _sources()], ids=[n for _, n in _sources()])
def test_the_engine_walk_finds_every_function_and_class(source: str) -> None:
    """The engine walks the tree once for its units and the classes (``find_classes`` no longer walks it)."""
    from gradguard import engine

    tree = ast.parse(source)
    class_nodes: list[ast.ClassDef] = []
    units = list(engine._units(tree, class_nodes))
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert sorted(id(fn) for fn, _ in units[1:]) == sorted(map(id, functions)) and units[0] == (None, None)
    assert sorted(map(id, class_nodes)) == sorted(id(n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
    owners = {id(m): c for c in class_nodes for m in c.body}
    assert all(owner is owners.get(id(fn)) for fn, owner in units[1:])


def test_every_kind_of_block_is_walked() -> None:
    tree = ast.parse(EVERY_BLOCK)
    names = {n.name for n in statements.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    assert names == {"A", "f", "B", "j", "C", "m"}
    assigned = {t.id for n in statements.walk(tree) if isinstance(n, ast.Assign) for t in n.targets}
    assert assigned == set("abdefghitvwy")


def test_children_puts_a_clause_body_in_the_clause_place() -> None:
    tree = ast.parse("try:\n    a = 1\nexcept E:\n    b = 2\nelse:\n    c = 3\nfinally:\n    d = 4\n")
    assert [s.targets[0].id for s in statements.children(tree.body[0])] == ["a", "c", "d", "b"]
    match = ast.parse("match x:\n    case 1:\n        a = 1\n    case _:\n        b = 2\n").body[0]
    assert [s.targets[0].id for s in statements.children(match)] == ["a", "b"]
    assert [type(n).__name__ for n in statements.nested(match)] == ["match_case", "match_case"]


def test_block_of_names_the_list_that_holds_a_statement() -> None:
    stmt = ast.parse("if c:\n    a = 1\nelse:\n    b = 2\n").body[0]
    assert statements.block_of(stmt, stmt.orelse[0]) is stmt.orelse
    assert statements.block_of(stmt, stmt.body[0]) is stmt.body
    assert statements.block_of(stmt, stmt) is None
    assert statements.block_of(None, stmt) is None
    lam = ast.parse("f = lambda: 1").body[0].value
    assert statements.block_of(lam, lam.body) is None  # a lambda's body is an expression, not a block


_BY_HAND = re.compile(r"""["'](?:orelse|finalbody)["']|\.finalbody\b""")


def test_no_other_module_lists_the_block_fields_by_hand() -> None:
    """The interpreter runs each kind of statement's parts by name (that is its job); every walker asks
    ``statements``."""
    found = [f"{module}:{i}" for module, path in FILES.items() if module != "gradguard.statements"
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if _BY_HAND.search(line) and module != "gradguard.inference.interpreter"]
    assert found == []
