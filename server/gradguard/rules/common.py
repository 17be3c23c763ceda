"""Wording shared by the rules, so every message names things the same way."""

from __future__ import annotations

import ast

from ..inference.events import Conflict, Mutation
from ..inference.values import Grad, Tensor
from ..knowledge.names import PIECES
from ..messages import Message

SAVED_MESSAGE = "one of the variables needed for gradient computation has been modified by an inplace operation"
LEAF_MESSAGE = "a leaf Variable that requires grad is being used in an in-place operation."
LEAF_VIEW_MESSAGE = "a view of a leaf Variable that requires grad is being used in an in-place operation."
MULTI_VIEW_MESSAGE = "Output 0 of {op} is a view and is being modified inplace."


def where_it_raises(conflict: Conflict) -> Message:
    return Message.format("{where} raises", where=where_it_reads(conflict))


def where_it_reads(conflict: Conflict) -> Message:
    """The backward (or the graph's way out of the function) that uses the saved tensor; ``where_it_raises``
    for a write torch sees, and as it is for one it does not (``.data``), where that backward raises nothing."""
    sink = conflict.sink
    template = {
        "backward": "the backward on {sink}",
        "return": "backward through the value returned on {sink}",
        "escape": "backward through the graph that leaves on {sink}",
        "compiled": "the compiled forward called on {sink} (`torch.compile` traces its backward with it)",
    }[sink.kind]
    return Message.format(template, sink=sink.node)


def conflict_related(conflict: Conflict, mutation: Mutation, silent: bool = False) -> list:
    """Where the tensor was saved, the call path to the write (when it is inside a helper), and the backward.
    ``silent``: the write moves no version counter (``.data``), so that backward raises nothing and computes
    wrong gradients."""
    save, sink = conflict.save, conflict.sink
    what = {"output": "its output", "weight": "its weight"}.get(save.role, "this input")
    effect = "computes wrong gradients (no error)" if silent else "raises"
    sink_note = {
        "backward": "backward reads the changed values here: no error, wrong gradients" if silent
        else "backward raises here",
        "return": f"the graph is returned here; its backward {effect}",
        "escape": f"the graph leaves the function here; its backward {effect}",
        "compiled": f"the compiled forward is called here: `torch.compile` traces its backward with it and {effect}",
    }[sink.kind]
    return [(save.node, f"{save.op} saves {what} for backward here"), *call_path_related(mutation), (sink.node, sink_note)]


def call_path_related(mutation: Mutation) -> list:
    """Each call site on the way from the analysed function to a write inside a followed helper (a ``with``
    statement: the write is in its context manager's code after the yield, which runs as the block ends)."""
    return [(site, Message.format("`{callee}()` is left when this block ends; the write on {write} happens then"
                                  if isinstance(site, (ast.With, ast.AsyncWith)) else
                                  "`{callee}()` is called here; the write on {write} happens inside it",
                                  callee=_callee(site), write=mutation.node))
            for site in mutation.call_path()]


def _callee(call: ast.AST) -> str:
    if isinstance(call, (ast.With, ast.AsyncWith)):
        call = next((i.context_expr for i in call.items if isinstance(i.context_expr, ast.Call)), call.items[0].context_expr)
    func = call.func if isinstance(call, ast.Call) else call
    return ast.unparse(func)


def first_conflict(mutation: Mutation) -> Conflict | None:
    if not mutation.conflicts:
        return None
    return max(mutation.conflicts, key=lambda c: (c.save.certain, c.sink.kind == "backward", -c.save.id))


def grad_leaf(t: Tensor) -> bool:
    return t.leaf and t.requires_grad != Grad.NO


def piece_of(target: Tensor) -> Tensor | None:
    """The output of a multi-view function that ``target`` is (or is a view of)."""
    piece = None
    for t in target.view_chain():
        if not t.multi_view:
            break
        piece = t
    return piece


def view_call(piece: Tensor) -> str | None:
    """The function the user called to get the piece (``chunk``, ``split``, ``unbind``); None when the piece
    comes from unpacking (``a, b = t``) or iterating (``for row in t``) a tensor."""
    origin = piece.origin
    if isinstance(origin, ast.Call):
        func = origin.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return None


def pieces_call(node: ast.AST) -> bool:
    """``h.split(2)``, ``h.unbind(0)``: a method call that returns several views of one tensor (``PIECES``)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PIECES
