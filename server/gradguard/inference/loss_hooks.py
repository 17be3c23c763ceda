"""A trainer's hook whose returned value is the loss the trainer backpropagates (Lightning's ``training_step``).

Under automatic optimization the trainer, not the hook, runs backward and the optimizer step, and only on what the
hook returns: a hook that computes its loss and returns nothing (it logs the loss and stops) trains nothing, with
no error.  Claimed only when every link is known: the class is a LightningModule (its base by import, or a module
class of the file with both of Lightning's hooks), nothing in its classes mentions manual optimization, the hook
never returns a value nor runs a backward or a step itself, and a tensor it computes requires grad.
"""

from __future__ import annotations

import ast

from ..knowledge.names import (
    AUTOMATIC_OPTIMIZATION_FLAG,
    LIGHTNING_MODULE,
    MANUAL_BACKWARD,
    OPTIMIZER_HOOK,
    RETURNED_LOSS_METHOD,
)
from ..statements import blocks
from .classes import ClassInfo, mro, own_method
from .events import UnreturnedLoss
from .imports import qualified_name
from .values import Grad, Tensor


def unreturned_loss(interp, fn: ast.FunctionDef, info: ClassInfo | None) -> UnreturnedLoss | None:
    """The finding's event for ``fn`` after the interpreter ran it as a method of ``info``, else None."""
    if fn.name != RETURNED_LOSS_METHOD or info is None or not fn.body or not _automatic(interp.ctx, info):
        return None
    if _returns_or_trains(fn) or any(s.kind == "backward" for s in interp.sinks):
        return None
    bound: dict[str, ast.AST] = {}  # each name the hook binds, at its last binding in source order
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id not in bound or bound[node.id].lineno < node.lineno:
                bound[node.id] = node
    computed = [(bound[name].lineno, name) for name, value in interp.state.env.items()
                if name in bound and isinstance(value, Tensor) and value.requires_grad == Grad.YES and not value.leaf]
    if not computed:
        return None
    _, name = max(computed)
    return UnreturnedLoss(_last_statement(fn.body), fn.name, f"`{name}`", bound[name])


def _last_statement(body: list[ast.stmt]) -> ast.stmt:
    """The statement the hook ends on, inside a block that ends it (`if`, `with`, `try`, loop bodies): where the
    return was to go."""
    last = body[-1]
    while isinstance(last, (ast.If, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While, ast.Try)) \
            and [name for name, block in blocks(last) if not _does_nothing(block)] == ["body"]:
        last = last.body[-1]
    return last


def _does_nothing(block: list[ast.stmt]) -> bool:
    """An empty block, or one of ``pass`` only (``finally: pass`` runs nothing after the body)."""
    return all(isinstance(stmt, ast.Pass) for stmt in block)


def _automatic(ctx, info: ClassInfo) -> bool:
    """A LightningModule under automatic optimization (nothing in its classes turns it off or runs a backward)."""
    chain = mro(ctx.classes_for(info), info)
    for cls in chain:
        for node in ast.walk(cls.node):
            if isinstance(node, (ast.Attribute, ast.Name, ast.FunctionDef)) and \
                    (getattr(node, "attr", None) or getattr(node, "id", None) or getattr(node, "name", None)) \
                    in (AUTOMATIC_OPTIMIZATION_FLAG, MANUAL_BACKWARD) or isinstance(node, ast.Attribute) and node.attr == "backward":
                return False  # manual optimization, or a backward the class runs itself (on a loss it kept)
    lightning_base = any((qualified_name(base, ctx.imports) or "").split(".")[-1] == LIGHTNING_MODULE
                         for cls in chain for base in cls.node.bases)
    hooks = any(own_method(cls.node, OPTIMIZER_HOOK) is not None for cls in chain)
    return lightning_base or (info.is_module and hooks)


def _returns_or_trains(fn: ast.FunctionDef) -> bool:
    """Whether the hook returns (or yields) a value anywhere, or runs a backward or a step of its own."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            return True
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("backward", "step"):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False
