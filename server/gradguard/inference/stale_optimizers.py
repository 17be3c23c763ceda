"""An optimizer built just before the statement that replaces a module it holds (rule GG103, silent).

``optimizer = torch.optim.SGD(model.parameters())`` takes the parameters ``model`` holds now.  A statement after it
that gives ``model`` (or one of its submodules) a new module (``model.fc = nn.Linear(...)``, ``setattr(model, name,
...)``, a helper or another class's method that does it: a pruning "speedup", a head swap) leaves the optimizer
holding the old parameters: the new ones get gradients no optimizer applies.  When the two statements are in one
block of one function and nothing between them reads the optimizer (nor rebinds a name its construction reads),
the line to change is the construction: built after the replacement, it takes the new parameters, and nothing that
ran before sees a difference.  The interpreter finds the replacement (``ReplacedParameter``); this module finds
that construction.  The probe's finding of the same bug is ``probe/module_flags.py`` (``Replaced``).
"""

from __future__ import annotations

import ast

from .. import statements


def built_just_before(scope: ast.AST | None, names: set[str], site: ast.AST) -> ast.Assign | None:
    """The statement ``name = ...`` of ``scope``'s code that bound the optimizer (now held in ``name``, one of
    ``names``) in the block that holds, later, the statement that is or holds ``site`` (a compound one, such as a
    loop or an ``if`` the replacement is in, included: built after it, the optimizer takes what it left), with no
    statement between them (nor that one) naming ``name`` or rebinding a name the construction reads; None when
    there is none (the optimizer came in as an argument, or the code between may use it)."""
    if scope is None or not names:
        return None
    for _holder, _field, block in statements.walk_blocks(scope):  # a block before the blocks it holds
        at = next((j for j, st in enumerate(block) if _holds(st, site)), None)
        if at is None:
            continue
        for i in range(at - 1, -1, -1):
            st = block[i]
            named = {n.id for n in ast.walk(st) if isinstance(n, ast.Name)}
            if not named & names:
                continue
            made = _made_in(st, names)
            if made is None:
                return None  # the nearest statement that names it does not bind it
            return made if _untouched_between(block[i + 1:at + 1], made) else None
        if not statements.holds_statements(block[at]):
            return None
        # The site is in a compound statement not preceded here by a statement naming the optimizer: the
        # construction may be in one of its blocks, before the site (looked at next).
    return None


def _untouched_between(between: list[ast.stmt], construction: ast.Assign) -> bool:
    """Nothing in ``between`` names the optimizer's variable or rebinds a name its construction reads."""
    name = construction.targets[0].id
    read = {n.id for n in ast.walk(construction.value) if isinstance(n, ast.Name)}
    for st in between:
        for n in ast.walk(st):
            if isinstance(n, ast.Name) and (n.id == name or n.id in read and not isinstance(n.ctx, ast.Load)):
                return False
            if isinstance(n, (ast.Global, ast.Nonlocal)):
                return False
    return True


def _made_in(stmt: ast.stmt, names: set[str]) -> ast.Assign | None:
    """The statement ``name = <no name of names>`` that ``stmt`` is, or that a compound statement ``stmt`` (``with
    ...:``, a loop, ``try``, ``if``) runs as its only statement naming the optimizer's variables, nothing else in
    its code (a test, an iterable, another statement) naming them or rebinding after it what it reads; else None."""
    if isinstance(stmt, statements.SCOPES) or any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(stmt)):
        return None
    if _binds(stmt, names) or not statements.holds_statements(stmt):
        return stmt if _binds(stmt, names) else None
    own = [stmt]  # its own code: not the insides of the functions it defines, whose locals are others
    for node in own:
        if not isinstance(node, statements.SCOPES):
            own.extend(ast.iter_child_nodes(node))
    binders = [n for n in own if _binds(n, names)]
    if len(binders) != 1:
        return None
    made = binders[0]
    inside, read = {id(n) for n in ast.walk(made)}, statements.names_read(made.value)
    for n in own:
        if id(n) in inside:
            continue
        if isinstance(n, ast.Name) and n.id in names or getattr(n, "name", None) in names:
            return None  # the control around it, or other code of the statement, names the optimizer
        if isinstance(n, ast.Name) and n.id in read and not isinstance(n.ctx, ast.Load) \
                and (n.lineno, n.col_offset) > (made.end_lineno, made.end_col_offset):
            return None  # what the construction reads is rebound after it
    return made


def _binds(stmt: ast.AST | None, names: set[str]) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in names and not statements.names(stmt.value) & names)


def _holds(stmt: ast.stmt, node: ast.AST) -> bool:
    return stmt is node or any(n is node for n in ast.walk(stmt))
