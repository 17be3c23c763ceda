"""Reuse a function's cached findings after lines were inserted or deleted above it.

The engine's per-document cache (``engine.analyze_module``) keys each function by the text it reads,
with every part's line *relative to the function's first line*.  So when Enter is pressed above a
function, its key is unchanged and its findings can be reused, moved down by the same number of lines,
instead of analysing the function (and every function below the edit) again.

A finding moves only if every line it mentions lies in the parts its key covers (those all moved by
exactly that many lines): its node, its related locations, the line numbers quoted in its message, and
its fix's edits and title.  Its fix must already be computed (``fix_memo``), since a rule's fix hook
would read the finding's ``data``, whose nodes are not moved.  Otherwise the caller analyses again.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import replace

from .diagnostics import Fix
from .inference.events import Finding

_QUOTED_LINE = re.compile(r"\b(lines? )(\d+)(?:(-)(\d+))?")

Spans = tuple[tuple[int, int], ...]


class _Outside(Exception):
    """A line outside the moved parts: the finding cannot be moved."""


def move_findings(findings: list[Finding], delta: int, spans: Spans) -> list[Finding] | None:
    """``findings`` moved ``delta`` lines, or None when one of them cannot be (see the module docstring).
    ``spans``: the (first, last) lines, before the move, of the parts that moved."""
    if delta == 0:
        return findings
    try:
        return [_move(f, delta, spans) for f in findings]
    except _Outside:
        return None


def _line(line: int, delta: int, spans: Spans) -> int:
    if not any(first <= line <= last for first, last in spans):
        raise _Outside
    return line + delta


def _node(node: ast.AST | None, delta: int, spans: Spans) -> ast.AST | None:
    if node is None or getattr(node, "lineno", None) is None:
        return node
    moved = copy.copy(node)
    moved.lineno = _line(node.lineno, delta, spans)
    if getattr(node, "end_lineno", None) is not None:
        moved.end_lineno = _line(node.end_lineno, delta, spans)
    return moved


def _text(text: str, delta: int, spans: Spans) -> str:
    def sub(m: re.Match) -> str:
        first = str(_line(int(m.group(2)), delta, spans))
        if m.group(4) is None:
            return m.group(1) + first
        return m.group(1) + first + m.group(3) + str(_line(int(m.group(4)), delta, spans))

    return _QUOTED_LINE.sub(sub, text)


def _fix(fix: Fix | None, delta: int, spans: Spans) -> Fix | None:
    if fix is None:
        return None
    edits = tuple(replace(e, line=_line(e.line, delta, spans), end_line=_line(e.end_line, delta, spans))
                  for e in fix.edits)
    return replace(fix, title=_text(fix.title, delta, spans), edits=edits)


def _move(finding: Finding, delta: int, spans: Spans) -> Finding:
    if finding.fix_memo is None:
        raise _Outside
    return replace(
        finding,
        node=_node(finding.node, delta, spans),
        message=_text(finding.message, delta, spans),
        related=[(_node(node, delta, spans), _text(msg, delta, spans)) for node, msg in finding.related],
        fix_memo=(_fix(finding.fix_memo[0], delta, spans),),
        twins=[],
    )
