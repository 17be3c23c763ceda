"""Where statements nest in an ``ast`` tree, said once for every walker.

``body``, ``orelse`` and ``finalbody`` hold statements; ``handlers`` (``try``) and ``cases`` (``match``) hold
clauses whose ``body`` holds statements.  Walking only these fields skips expressions (``ast.walk`` costs about
3x more), and keeping the list here means a walker cannot forget one (a ``def`` in a ``case``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from functools import cache
from itertools import chain
from typing import TypeVar

_Fact = TypeVar("_Fact")


def syntax_fact(node: ast.AST, attr: str, work_out: Callable[..., _Fact], *args: object, given: object = None) -> _Fact:
    """``work_out(*args)``, a fact of ``node``'s syntax (and of ``given``, when it depends on more), worked out on the
    first ask and kept on the node as its attribute ``attr`` (named ``_gradguard_...``).  A statement runs again at
    each loop iteration and followed call, and a project module's tree serves every file that follows a call into
    it: such facts were worked out over and over.  Safe because a tree is never changed once parsed (an edit parses
    anew the statements it touches); on the node rather than in a table by ``id``, so a dropped node's id cannot be
    taken for a live one's, and the fact goes with its tree."""
    kept = getattr(node, attr, None)
    if kept is not None and (kept[0] is given or kept[0] == given):
        return kept[1]
    found = work_out(*args)
    setattr(node, attr, (given, found))
    return found

BLOCK_FIELDS = ("body", "orelse", "finalbody")  # lists of statements (a lambda's ``body`` is an expression)
CLAUSE_FIELDS = ("handlers", "cases")  # lists of except handlers / match cases, each with a ``body`` block
NESTING_FIELDS = (*BLOCK_FIELDS, *CLAUSE_FIELDS)  # in this order, which walkers' results may depend on


def blocks(node: ast.AST) -> Iterator[tuple[str, list[ast.stmt]]]:
    """The statement lists ``node`` holds itself, with their field name (not those of its clauses)."""
    for name in BLOCK_FIELDS:
        value = getattr(node, name, None)
        if isinstance(value, list):
            yield name, value


def nested(node: ast.AST) -> Iterator[ast.AST]:
    """What ``node`` holds directly in the statement tree: statements, except handlers and match cases."""
    for name in _nesting_fields(type(node)):
        value = getattr(node, name, None)
        if isinstance(value, list):
            yield from value


def holds_statements(node: ast.AST) -> bool:
    """Whether ``node``'s kind has blocks or clauses (``nested`` may yield something): walkers need not visit
    the others (assignments, expressions, returns: most statements)."""
    return bool(_nesting_fields(type(node)))


@cache
def _nesting_fields(kind: type) -> tuple[str, ...]:
    """The nesting fields a kind of node has, in ``NESTING_FIELDS`` order.  Most statements (assignments,
    expressions, returns) have none: asking each node for all five cost a tenth of a line edit's analysis."""
    return tuple(name for name in NESTING_FIELDS if name in getattr(kind, "_fields", ()))


def children(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements directly inside ``node``: its blocks', then its clauses' (a clause's body in its place)."""
    for child in nested(node):
        if isinstance(child, ast.stmt):
            yield child
        else:
            yield from child.body


def walk(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement and clause below ``tree``, each before what it holds; expressions are not entered."""
    stack = list(nested(tree))
    while stack:
        node = stack.pop()
        yield node
        if holds_statements(node):  # most statements hold none: no generator made for them
            stack.extend(nested(node))


def every_node(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes ``ast.walk`` gives (``tree`` and all below it, expressions too) but the ``Load``/``Store``/``Del``
    markers, in no set order, for a search whose answer does not depend on the order: about half ``ast.walk``'s
    cost (no generator per node)."""
    stack = [tree]
    fields = node_fields
    while stack:
        node = stack.pop()
        yield node
        for name in fields(type(node)):
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, ast.AST))


def names(tree: ast.AST) -> set[str]:
    """The identifiers of every ``Name`` in ``tree`` (``tree`` itself included), read or bound."""
    return {n.id for n in every_node(tree) if isinstance(n, ast.Name)}


def names_read(tree: ast.AST) -> set[str]:
    """The identifiers ``tree`` reads (its ``Name`` loads)."""
    return {n.id for n in every_node(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_bound(tree: ast.AST) -> set[str]:
    """The identifiers ``tree`` binds or deletes (its ``Name`` stores and dels)."""
    return {n.id for n in every_node(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def calls(tree: ast.AST) -> list[ast.Call]:
    """The calls in ``tree`` (``tree`` itself included), outer before inner and then left to right (``ast.walk``'s
    order): which call of a statement a rewrite tries first."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def number_written_out(tree: ast.AST) -> bool:
    """A number spelled in the code (``1 - 1e-4``, ``-2``): constants that are ints or floats (not bools),
    combined by arithmetic: the same value to Python, NumPy and torch."""
    return all(isinstance(n, (ast.UnaryOp, ast.BinOp, ast.operator, ast.unaryop)) or isinstance(n, ast.Constant)
               and isinstance(n.value, (int, float)) and not isinstance(n.value, bool) for n in every_node(tree))


@cache
def node_fields(kind: type) -> tuple[str, ...]:
    """The fields of a kind of node that may hold nodes other than a ``ctx`` marker."""
    return tuple(name for name in kind._fields if name != "ctx")


def walk_blocks(tree: ast.AST) -> Iterator[tuple[ast.AST, str, list[ast.stmt]]]:
    """Every non-empty statement list in ``tree`` as (holder, field, list), a holder's before those inside it."""
    for node in chain((tree,), walk(tree)):
        for name, block in blocks(node):
            if block:
                yield node, name, block


def block_of(parent: ast.AST | None, stmt: ast.AST) -> list[ast.stmt] | None:
    """The statement list of ``parent`` that holds ``stmt`` itself, if any."""
    return next((block for _, block in blocks(parent) if any(s is stmt for s in block)), None)


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def sole_statement(stmt: ast.stmt) -> ast.stmt | None:
    """The one statement without a block that ``stmt`` runs: ``stmt`` itself, or the one inside a compound
    statement (``if``, ``with``, a loop, ``try``, nested) whose other statements are ``pass`` and that defines
    nothing.  Moved or copied whole, such a statement carries that one statement with the control around it."""
    if not holds_statements(stmt):
        return stmt
    inner = [s for s in walk(stmt) if isinstance(s, ast.stmt) and not holds_statements(s) and not isinstance(s, ast.Pass)]
    if len(inner) != 1 or any(isinstance(s, SCOPES) for s in walk(stmt)):
        return None
    return inner[0]


def own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``scope``'s own code, expressions included, but not the insides of the functions, lambdas
    and classes defined in it (their code runs elsewhere); the definitions themselves are yielded."""
    todo = list(scope.body) if isinstance(scope.body, list) else [scope.body]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def is_main_guard(stmt: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either way round): the block a script runs as a program."""
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare) or len(stmt.test.ops) != 1 \
            or not isinstance(stmt.test.ops[0], ast.Eq):
        return False
    sides = [stmt.test.left, *stmt.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) \
        and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


def is_dotted(node: ast.AST) -> bool:
    """A name, or an attribute chain on one (``model.fc.weight``): read twice, the same object
    (no call, no subscript)."""
    return dotted_root(node) is not None


def chain_base(node: ast.AST | None) -> ast.AST | None:
    """What an attribute and subscript chain is read out of (``xs`` of ``xs[i].w``, a call of ``f(x)[0]``)."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node


def dotted_root(node: ast.AST) -> str | None:
    """The name a name or an attribute chain on one starts from (``model`` of ``model.fc.weight``), else None."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None
