"""Wording shared by the rules, so every message names things the same way."""

from __future__ import annotations

import ast

from ..inference.events import Conflict, Mutation
from ..inference.values import Grad, Tensor
from ..messages import Message

SAVED_MESSAGE = "one of the variables needed for gradient computation has been modified by an inplace operation"
LEAF_MESSAGE = "a leaf Variable that requires grad is being used in an in-place operation."
LEAF_VIEW_MESSAGE = "a view of a leaf Variable that requires grad is being used in an in-place operation."
MULTI_VIEW_MESSAGE = "Output 0 of {op} is a view and is being modified inplace."


def where_it_raises(conflict: Conflict) -> Message:
    sink = conflict.sink
    template = {
        "backward": "the backward on {sink} raises",
        "return": "backward through the value returned on {sink} raises",
        "escape": "backward through the graph that leaves on {sink} raises",
    }[sink.kind]
    return Message.format(template, sink=sink.node)


def conflict_related(conflict: Conflict, mutation: Mutation) -> list:
    """Where the tensor was saved, the call path to the write (when it is inside a helper), where backward raises."""
    save, sink = conflict.save, conflict.sink
    what = "its output" if save.role == "output" else "this input"
    sink_note = {
        "backward": "backward raises here",
        "return": "the graph is returned here; its backward raises",
        "escape": "the graph leaves the function here; its backward raises",
    }[sink.kind]
    return [(save.node, f"{save.op} saves {what} for backward here"), *call_path_related(mutation), (sink.node, sink_note)]


def call_path_related(mutation: Mutation) -> list:
    """Each call site on the way from the analysed function to a write inside a followed helper."""
    return [(site, Message.format("`{callee}()` is called here; the write on {write} happens inside it",
                                  callee=_callee(site), write=mutation.node))
            for site in mutation.call_path()]


def _callee(call: ast.AST) -> str:
    func = call.func if isinstance(call, ast.Call) else call
    return ast.unparse(func)


def first_conflict(mutation: Mutation) -> Conflict | None:
    if not mutation.conflicts:
        return None
    return max(mutation.conflicts, key=lambda c: (c.save.certain, c.sink.kind == "backward", -c.save.id))


def grad_leaf(t: Tensor) -> bool:
    return t.leaf and t.requires_grad != Grad.NO
