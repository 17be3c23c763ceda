"""Reuse a function's cached findings after lines were inserted or deleted around it.

The engine's per-document cache (``engine.analyze_module``) keys each function by the text of what its
analysis reads (the function, its class, the helpers it names), not by where that text is, and keeps each
part's lines.  So when Enter is pressed above a function, or between it and a helper it calls, its key is
unchanged and its findings are moved, each line by the move of the part it lies in, instead of analysing
the function (and every function below the edit) again.

A finding moves only if every line it mentions lies in one of those parts: its node, its related
locations, the lines its messages refer to (``messages.Message``), and its fix's edits (a fix that edits lines
outside the parts -- another caller of a helper -- is never reused: those lines are not in the key).  A rule's fix hook
reads the finding's ``data``, whose nodes are not moved: so a finding whose fix is not built yet moves only
when the caller builds fixes on demand (``with_fixes=False``), marked ``data_stale`` (its fix is then built
from a fresh analysis of its function); otherwise the caller analyses again.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from .diagnostics import Fix
from .inference.events import Finding
from .messages import Message

Spans = tuple[tuple[int, int], ...]
Moves = tuple[tuple[int, int, int], ...]  # (first, last, by how many lines)


class _Outside(Exception):
    """A line outside the moved parts: the finding cannot be moved."""


def move_findings(findings: list[Finding], before: Spans, after: Spans, with_fixes: bool = True
                  ) -> list[Finding] | None:
    """``findings`` moved from the parts' lines ``before`` to their lines ``after`` (the same parts, in the
    same order, with the same text), or None when one of them cannot be (see the module docstring)."""
    if before == after and not any(_edits_elsewhere(f, before) for f in findings):
        return findings
    moves = tuple((first, last, new_first - first) for (first, last), (new_first, _) in zip(before, after))
    try:
        return [_move(f, moves, with_fixes) for f in findings]
    except _Outside:
        return None


def _edits_elsewhere(finding: Finding, spans: Spans) -> bool:
    """Does the finding's built fix edit lines outside the parts (a helper's other callers, ``through_callers``)?
    Those lines are not in the cache key: they may have changed or moved, so the fix must be built again."""
    fix = finding.fix_memo[0] if finding.fix_memo is not None else None
    return fix is not None and any(not any(first <= line <= last for first, last in spans)
                                   for e in fix.edits for line in (e.line, e.end_line))


def _line(line: int, moves: Moves) -> int:
    for first, last, delta in moves:
        if first <= line <= last:
            return line + delta
    raise _Outside


def _node(node: ast.AST | None, moves: Moves) -> ast.AST | None:
    if node is None or getattr(node, "lineno", None) is None:
        return node
    moved = _shallow_copy(node)
    moved.lineno = _line(node.lineno, moves)
    if getattr(node, "end_lineno", None) is not None:
        moved.end_lineno = _line(node.end_lineno, moves)
    return moved


def _shallow_copy(node: ast.AST) -> ast.AST:
    """``copy.copy(node)`` at a fifth of its cost (its ``__reduce_ex__`` round trip was a third of moving a
    finding): an ``ast`` node is its class and its ``__dict__``."""
    moved = type(node).__new__(type(node))
    moved.__dict__.update(node.__dict__)
    return moved


def _message(message: Message, moves: Moves) -> Message:
    return message.moved(lambda line: _line(line, moves))


def _fix(fix: Fix | None, moves: Moves) -> Fix | None:
    if fix is None:
        return None
    edits = tuple(replace(e, line=_line(e.line, moves), end_line=_line(e.end_line, moves))
                  for e in fix.edits)
    return replace(fix, edits=edits)


def _move(finding: Finding, moves: Moves, with_fixes: bool) -> Finding:
    if finding.fix_memo is None and with_fixes:
        raise _Outside
    return replace(
        finding,
        node=_node(finding.node, moves),
        message=_message(finding.message, moves),
        related=[(_node(node, moves), _message(note, moves)) for node, note in finding.related],
        fix_memo=None if finding.fix_memo is None else (_fix(finding.fix_memo[0], moves),),
        data_stale=finding.data_stale or finding.fix_memo is None,
        twins=[],
    )
