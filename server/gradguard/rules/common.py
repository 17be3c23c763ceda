"""Wording shared by the rules, so every message names things the same way."""

from __future__ import annotations

import ast

from ..inference.events import Conflict, Mutation, line_of
from ..inference.values import Grad, Tensor

SAVED_MESSAGE = "one of the variables needed for gradient computation has been modified by an inplace operation"
LEAF_MESSAGE = "a leaf Variable that requires grad is being used in an in-place operation."
LEAF_VIEW_MESSAGE = "a view of a leaf Variable that requires grad is being used in an in-place operation."
MULTI_VIEW_MESSAGE = "Output 0 of {op} is a view and is being modified inplace."


def where_it_raises(conflict: Conflict) -> str:
    sink = conflict.sink
    if sink.kind == "backward":
        return f"the backward on line {line_of(sink.node)} raises"
    if sink.kind == "return":
        return f"backward through the value returned on line {line_of(sink.node)} raises"
    return f"backward through the graph that leaves on line {line_of(sink.node)} raises"


def where_it_reads(conflict: Conflict) -> str:
    """``where_it_raises`` for a write torch does not see (``.data``): that backward raises nothing."""
    sink = conflict.sink
    if sink.kind == "backward":
        return f"the backward on line {line_of(sink.node)}"
    if sink.kind == "return":
        return f"backward through the value returned on line {line_of(sink.node)}"
    return f"backward through the graph that leaves on line {line_of(sink.node)}"


def conflict_related(conflict: Conflict, silent: bool = False) -> list:
    """Notes on the saving op and the backward.  ``silent``: the write moves no version counter (``.data``), so
    that backward raises nothing and computes wrong gradients."""
    save, sink = conflict.save, conflict.sink
    what = {"output": "its output", "weight": "its weight"}.get(save.role, "this input")
    effect = "computes wrong gradients (no error)" if silent else "raises"
    sink_note = {
        "backward": "backward reads the changed values here: no error, wrong gradients" if silent
        else "backward raises here",
        "return": f"the graph is returned here; its backward {effect}",
        "escape": f"the graph leaves the function here; its backward {effect}",
    }[sink.kind]
    return [(save.node, f"{save.op} saves {what} for backward here"), (sink.node, sink_note)]


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
