"""What a finding claims torch does, as data: the structured side of a rule's message.

A message is for people; this is for checking.  ``explain`` reads the facts the analysis recorded on the
finding (``Finding.mutation`` and the conflict the rules pick with ``first_conflict``), never the
message text, so that ``tests/agreement.py`` can hold each claim against what the runtime probe saw torch
do: loud or silent, which op saved which tensor on which line, which backward fails, which multi-view
function made the piece that was written.
"""

from __future__ import annotations

import ast

from dataclasses import dataclass

from .inference.events import Finding, Mutation
from .inference.values import Tensor
from .rules.common import first_conflict, piece_of, view_call

# How torch reacts, per the finding.
AT_WRITE = "raised-at-write"  # the write itself raises (leaf, view of a leaf, multi-view, no_grad view, out=)
AT_BACKWARD = "raised-at-backward"  # backward() raises "modified by an inplace operation"
SILENT = "silent"  # nothing raises; backward() uses the new values (a `.data` write)

REACTION = {"GG001": AT_BACKWARD, "GG005": AT_BACKWARD, "GG101": AT_BACKWARD, "GG102": SILENT,
            "GG002": AT_WRITE, "GG003": AT_WRITE, "GG004": AT_WRITE, "GG105": AT_WRITE, "GG106": AT_WRITE}


@dataclass(frozen=True)
class Explanation:
    """One mutation finding's claims.  Lines are 1-based; None where the claim does not apply.

    ``saving_op`` is the static op label (``torch.sigmoid``, ``nn.Linear``, ``*``) and ``save_role`` what it
    saved (``output``, ``input``, ``weight``).  ``multi_view`` is the autograd node torch names for a piece of
    ``split``/``chunk``/``unbind``/unpacking (``Split``, ``Unbind``); ``view_call`` the function the user called
    to get it (``chunk``), None for unpacking or iteration; ``through_view`` is True when the write goes
    through a further view of the piece (torch then names that view's node instead).
    """

    code: str
    kind: str
    mutation_line: int
    tensor_line: int | None = None
    saving_op: str | None = None
    save_line: int | None = None
    save_role: str | None = None
    backward_line: int | None = None
    sink: str | None = None  # "backward", "return" (the graph leaves by a return), "escape"
    multi_view: str | None = None
    view_call: str | None = None
    through_view: bool = False
    custom_view: bool = False  # the view was made inside a custom Function (or by a full backward hook)


def explain(finding: Finding) -> Explanation | None:
    """The claims of a mutation finding; None for findings that are not about one write (GG103)."""
    mutation = finding.mutation
    code = finding.data.get("underlying", finding.code)  # GG104 is its underlying rule to torch
    kind = REACTION.get(code)
    if not isinstance(mutation, Mutation) or kind is None:
        return None
    target = mutation.target
    fields = {}
    if kind != AT_WRITE:
        conflict = first_conflict(mutation)
        if conflict is None and code == "GG101" and mutation.mixed is not None:
            # A value mixing the weights before and after an update, used detached: nothing raises.
            mixed = mutation.mixed
            kind = SILENT
            fields = dict(saving_op=mixed.save.op, save_line=line_of(mixed.save.node), save_role="weight",
                          sink="backward", backward_line=line_of(mixed.sink.node))
        if conflict is not None:
            save, sink = conflict.save, conflict.sink
            if mutation.silent_before_packing:
                kind = SILENT  # saved in a custom Function's forward that has not returned: torch packs it later
            # A parameter saved as an op's input (`x @ w`) is a weight, as `nn.Linear` saves its weight.
            role = "weight" if save.role == "input" and _is_parameter(target) else save.role
            fields = dict(saving_op=save.op, save_line=line_of(save.node), save_role=role, sink=sink.kind,
                          backward_line=line_of(sink.node) if sink.kind == "backward" else None)
    elif code == "GG004":
        fields = _multi_view(mutation)
    return Explanation(finding.code, kind, line_of(mutation.node),
                       tensor_line=line_of(target.origin) if target.origin is not None else None, **fields)


def _is_parameter(target: Tensor) -> bool:
    """The written tensor (which shares the saved tensor's memory) is a parameter, or a view of one."""
    return any(t.param for t in (*(target.group or (target,)), *target.view_chain()))


def _multi_view(mutation: Mutation) -> dict:
    piece = piece_of(mutation.target)
    if piece is None:
        return {}
    # `piece[0] = v` and `piece.view(-1).add_(1)` write through a view of the piece: torch names that view.
    if piece.custom_view is not None:
        return dict(multi_view=piece.multi_view, through_view=piece is not mutation.target, custom_view=True)
    return dict(multi_view=piece.multi_view, view_call=view_call(piece), through_view=piece is not mutation.target)


def line_of(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)
