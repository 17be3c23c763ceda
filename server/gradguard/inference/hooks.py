"""Which statements of a gradient hook write the gradient it is given in place.

torch hands a tensor hook (``t.register_hook(f)``) and a module's backward pre-hook the gradient tensor
that autograd will pass on; an op such as ``AddBackward`` gives the *same* tensor to every input of the sum,
so writing it in place changes the gradient of the other branch too, silently (torch 2.13; its docs say the
hook must not modify its argument).  This is read from the hook's syntax alone: what the written names hold
does not matter, only that they are (pieces of) the gradient argument.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterator

# The hooks torch calls with gradients, and the position (after ``self`` of a bound method) of the argument
# that holds them: a tensor's hook gets the gradient itself, a backward pre-hook ``(module, grad_output)``.
GRADIENT_ARGUMENT = {"register_hook": 0, "register_full_backward_pre_hook": 1}


def gradient_writes(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, position: int, bound: bool,
                    is_inplace: Callable[[str], bool]) -> Iterator[tuple[ast.AST, str]]:
    """The in-place writes (node, how) the hook ``fn`` makes to its gradient argument at ``position``."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if bound:
        params = params[1:]
    if position >= len(params):
        return
    names = {params[position]}
    body = [fn.body] if isinstance(fn, ast.Lambda) else fn.body
    for node in _walk_in_order(body):
        if isinstance(node, ast.Assign) and _rooted(node.value, names):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            names |= {e.id for t in node.targets if isinstance(t, (ast.Tuple, ast.List)) for e in t.elts
                      if isinstance(e, ast.Name)}
        if isinstance(node, (ast.For, ast.comprehension)) and _rooted(node.iter, names):
            names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_inplace(node.func.attr) \
                and node.func.attr.endswith("_") and _rooted(node.func.value, names):
            yield node, f"`.{node.func.attr}()`"
        elif isinstance(node, ast.AugAssign) and _rooted(node.target, names):
            yield node, f"`{_aug_symbol(node)}`"
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and _rooted(t, names)
                                                  for t in node.targets):
            yield node, "`[...] =`"


def _aug_symbol(node: ast.AugAssign) -> str:
    return {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.Pow: "**="}.get(type(node.op), "op=")


def _rooted(expr: ast.expr, names: set[str]) -> bool:
    """Is ``expr`` one of ``names`` or a piece of one (``g[0]``, ``g[:, mask]``, ``g.data``)?  No call is
    (``g * 2`` is a new tensor)."""
    while isinstance(expr, (ast.Subscript, ast.Attribute, ast.Starred)):
        if isinstance(expr, ast.Attribute) and expr.attr != "data":
            return False
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in names


def _walk_in_order(body: list) -> Iterator[ast.AST]:
    """Every node of the statements, in source order (an alias is bound before it is written)."""
    nodes = [n for stmt in body for n in ast.walk(stmt)]
    def place(n: ast.AST) -> tuple[int, int]:
        n = n.iter if isinstance(n, ast.comprehension) else n
        return getattr(n, "lineno", 0), getattr(n, "col_offset", 0)
    return iter(sorted(nodes, key=place))
