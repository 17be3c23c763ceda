"""Every call of a helper function or method in the file, found by name (``calls_of``), or CannotFix when the
helper is used any other way: a fix through the callers (``callers.through_callers``) must change every one."""

from __future__ import annotations

import ast

from ..inference.scopes import bound_names
from .context import FUNCTIONS, CannotFix, FixContext

# Methods Python (or ``nn.Module.__call__``) runs when an instance is called: ``step(x)`` returns what they return.
CALLED_ON_INSTANCES = ("__call__", "forward")


def calls_of(ctx: FixContext, fn: ast.FunctionDef, method: bool) -> list[ast.Call]:
    """Every call of the helper in the file; CannotFix when it is used any other way, or defined twice."""
    if method and fn.name in CALLED_ON_INSTANCES:
        return _instance_calls(ctx, fn, ctx.parents.get(fn))
    names = ctx.names_in(ctx.tree)
    if any(d is not fn for d in names.definitions.get(fn.name, ())):
        raise CannotFix(f"`{fn.name}` is defined more than once")
    if fn.name in names.imported:
        raise CannotFix(f"`{fn.name}` is also imported")
    if method and names.of(fn.name):
        raise CannotFix(f"`{fn.name}` is also a name here")
    calls = []
    for node in names.attribute(fn.name) if method else names.of(fn.name):
        parent = ctx.parents.get(node)
        if method and not (isinstance(node.value, ast.Name) and node.value.id == "self"
                           and isinstance(parent, ast.Call) and parent.func is node
                           and ctx.class_of(node) is ctx.parents.get(fn)):
            raise CannotFix(f"`{fn.name}` is used otherwise than called on `self` in its class")
        if not method and not (isinstance(node.ctx, ast.Load) and isinstance(parent, ast.Call) and parent.func is node):
            raise CannotFix(f"`{fn.name}` is used otherwise than called")
        calls.append(parent)
    if not calls:
        raise CannotFix(f"`{fn.name}` is never called here")
    return calls


def _instance_calls(ctx: FixContext, fn: ast.FunctionDef, cls: ast.ClassDef) -> list[ast.Call]:
    """The calls of the instances of ``cls`` that run ``fn``: every use of the class must be ``inst = Cls(...)`` in
    a function, and every use of ``inst`` there a call.  (``forward`` only where the class has a base, the module
    whose ``__call__`` runs it, and defines no ``__call__`` of its own.)"""
    if fn.name == "forward" and (not cls.bases or any(
            isinstance(n, FUNCTIONS) and n.name == "__call__" for n in cls.body)):
        raise CannotFix("`forward` is not what calling an instance runs")
    names = ctx.names_in(ctx.tree)
    if any(d is not cls for d in names.definitions.get(cls.name, ())):
        raise CannotFix(f"`{cls.name}` is defined more than once")
    if cls.name in names.imported:
        raise CannotFix(f"`{cls.name}` is also imported")
    if names.attribute(fn.name):
        raise CannotFix(f"`{fn.name}` is also used by name")
    calls: dict[int, ast.Call] = {}
    for node in names.of(cls.name):
        for call in _calls_on_instance(ctx, node, cls):
            calls[id(call)] = call
    if not calls:
        raise CannotFix(f"no instance of `{cls.name}` is called here")
    return list(calls.values())


def _calls_on_instance(ctx: FixContext, use: ast.Name, cls: ast.ClassDef) -> list[ast.Call]:
    """``use`` must make an instance bound to a local name that its function only calls: those calls."""
    ctor = ctx.parents.get(use)
    bind = ctx.parents.get(ctor)
    if not (isinstance(ctor, ast.Call) and ctor.func is use and isinstance(bind, ast.Assign) and bind.value is ctor
            and len(bind.targets) == 1 and isinstance(bind.targets[0], ast.Name)):
        raise CannotFix(f"`{cls.name}` is used otherwise than made into an instance bound to a name")
    inst = bind.targets[0].id
    scope = ctx.function_of(bind)
    if scope is None or inst not in bound_names(scope):
        raise CannotFix(f"an instance of `{cls.name}` is not a local of a function")
    calls = []
    for node in ctx.names_in(scope).of(inst):
        parent = ctx.parents.get(node)
        if ctx.function_of(node) is not scope:
            raise CannotFix(f"a nested function uses `{inst}`")
        if isinstance(node.ctx, ast.Store):
            value = parent.value if isinstance(parent, ast.Assign) and parent.targets == [node] else None
            if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == cls.name):
                raise CannotFix(f"`{inst}` is bound to something else too")
        elif isinstance(parent, ast.Call) and parent.func is node:
            calls.append(parent)
        else:
            raise CannotFix(f"`{inst}` is used otherwise than called")
    return calls
