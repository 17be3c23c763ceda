"""An optimizer built just before the statement that replaces a module it holds (rule GG103, silent).

``optimizer = torch.optim.SGD(model.parameters())`` (or ``self.optimizer = ...``) takes the parameters ``model`` holds now.  A statement after it
that gives ``model`` (or one of its submodules) a new module (``model.fc = nn.Linear(...)``, ``setattr(model, name,
...)``, a helper or another class's method that does it: a pruning "speedup", a head swap) leaves the optimizer
holding the old parameters: the new ones get gradients no optimizer applies.  When the two statements are in one
block of one function and nothing between them reads the optimizer (nor rebinds a name its construction reads),
the line to change is the construction: built after the replacement, it takes the new parameters, and nothing that
ran before sees a difference.  A statement that is only the call of a helper that built it (``make()``, a closure
that binds it ``nonlocal``) is its construction too.  The interpreter finds the replacement (``ReplacedParameter``); this module finds
that construction.  The probe's finding of the same bug is ``probe/module_flags.py`` (``Replaced``).
"""

from __future__ import annotations

import ast

from .. import statements


def built_just_before(scope: ast.AST | None, names: set[str], site: ast.AST,
                      made_in: ast.AST | None = None) -> ast.stmt | None:
    """The statement ``name = ...`` of ``scope``'s code that bound the optimizer (now held in ``name``, one of
    ``names``) in the block that holds, later, the statement that is or holds ``site`` (a compound one, such as a
    loop or an ``if`` the replacement is in, included: built after it, the optimizer takes what it left), with no
    statement between them (nor that one) naming ``name`` or rebinding a name the construction reads; None when
    there is none (the optimizer came in as an argument, or the code between may use it).  ``made_in``: the call
    whose own frame built the optimizer (``OptimizerValue.made_in``); a statement that is that call alone is the
    construction (nothing after it names the optimizer's variables, so the call bound them: ``nonlocal``)."""
    if scope is None or not names:
        return None
    for _holder, _field, block in statements.walk_blocks(scope):  # a block before the blocks it holds
        at = next((j for j, st in enumerate(block) if _holds(st, site)), None)
        if at is None:
            continue
        for i in range(at - 1, -1, -1):
            st = block[i]
            if made_in is not None and isinstance(st, ast.Expr) and st.value is made_in:
                return st if _untouched_between(block[i + 1:at + 1], names, statements.names_read(st.value)) \
                    else None
            named = {_named(n) for n in ast.walk(st)}
            if not named & names:
                continue
            made = _made_in(st, names)
            if made is None:
                return None  # the nearest statement that names it does not bind it
            read = {n.id for n in ast.walk(made.value) if isinstance(n, ast.Name)}
            return made if _untouched_between(block[i + 1:at + 1], {_named(made.targets[0])}, read) else None
        if not statements.holds_statements(block[at]):
            return None
        # The site is in a compound statement not preceded here by a statement naming the optimizer: the
        # construction may be in one of its blocks, before the site (looked at next).
    return None


def _untouched_between(between: list[ast.stmt], names: set[str], read: set[str]) -> bool:
    """Nothing in ``between`` names the optimizer's variables or rebinds a name its construction reads.  Held as an
    instance's attribute (``self.opt``), the instance is read there only for other attributes, none of them called
    (``self.model``, not ``self.reset()`` nor ``helper(self)``, which may read the optimizer)."""
    roots = {n.partition(".")[0] for n in names if "." in n}
    for st in between:
        nodes = list(ast.walk(st))
        called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
        plain = {id(n.value) for n in nodes if isinstance(n, ast.Attribute) and id(n) not in called}
        for n in nodes:
            if _named(n) in names or isinstance(n, (ast.Global, ast.Nonlocal)):
                return False
            if isinstance(n, ast.Name) and (n.id in read | roots and not isinstance(n.ctx, ast.Load)
                                            or n.id in roots and id(n) not in plain):
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
        if _named(n) in names or getattr(n, "name", None) in names:
            return None  # the control around it, or other code of the statement, names the optimizer
        if isinstance(n, ast.Name) and n.id in read and not isinstance(n.ctx, ast.Load) \
                and (n.lineno, n.col_offset) > (made.end_lineno, made.end_col_offset):
            return None  # what the construction reads is rebound after it
    return made


def _binds(stmt: ast.AST | None, names: set[str]) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _named(stmt.targets[0]) in names
            and not {_named(n) for n in ast.walk(stmt.value)} & names)


def _named(node: ast.AST) -> str | None:
    """The variable (``opt``) or the instance's attribute (``self.opt``) that ``node`` is, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _holds(stmt: ast.stmt, node: ast.AST) -> bool:
    return stmt is node or any(n is node for n in ast.walk(stmt))
