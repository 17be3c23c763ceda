"""How deep gradguard analyses, and the placeholder that stands for what lies beyond.

Python accepts expressions about 3,000 levels deep (``z = y + y + ... + y`` with 2,000 terms is a valid
program), but every walker of the analysis -- the interpreter, the rules, ``ast.unparse``, libcst in the
fixes -- recurses once or more per level, and Python stops a recursion at 1,000 frames.  So the tree is
bounded once, right after parsing (``parsing.parse``): an expression nested deeper than
``MAX_EXPRESSION_DEPTH`` is replaced by an ``Unanalysed`` node.  The interpreter gives it an unknown value,
nothing else walks into it (it has no children), and the analysis reports it as GG903, so a file that was
not fully analysed never gets an all-clear.  Statements need no bound of their own: CPython refuses more than
100 levels of indentation.

Only expressions that are wider (in bytes) than the bound can be deeper than it, so the depth is measured
only for those: the cost is one pass over the statements plus the wide expressions' nodes.
"""

from __future__ import annotations

import ast
from typing import Iterator

# Deep enough for any hand-written code (CPython itself refuses more than 200 nested brackets) and for
# generated sums of a hundred terms; shallow enough that the interpreter, at 3 frames per level of the
# 100 statement levels CPython allows plus a few frames per expression level, stays under 1,000 frames.
MAX_EXPRESSION_DEPTH = 100


class Unanalysed(ast.expr):
    """Where the analysis stopped: an expression too deep to analyse, or a statement Python's own parser
    could not build (``parsing.parse`` splits such a file into top-level statements).  ``what`` names it
    for the message ("the expression", "the function `f`"), ``why`` says why it was skipped ("is nested
    ...")."""

    _fields = ()

    def __init__(self, what: str = "the expression", why: str = "", depth: int | None = None, **positions):
        super().__init__(**positions)
        self.what = what
        self.why = why
        self.depth = depth


def expression_depth(root: ast.expr) -> int:
    """The most expressions nested inside one another below ``root`` (``y + y + y`` is 3), without recursion."""
    deepest = 0
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        for child in ast.iter_child_nodes(node):
            stack.append((child, depth + isinstance(child, ast.expr)))
    return deepest


def _deeper_than(root: ast.expr, limit: int) -> bool:
    """``expression_depth(root) > limit``, without entering the parts too narrow (``_may_be_deeper``) to reach
    the limit from where they are: most wide expressions are a long line of shallow calls, and measuring
    each one's full depth cost about a tenth of a line edit's analysis."""
    stack = [(root, 1, True)]
    while stack:
        node, depth, narrowing = stack.pop()
        if depth > limit:
            return True
        # Inside an f-string, positions are not trusted (Python 3.10 gives some parts the string's own).
        narrowing = narrowing and not isinstance(node, ast.JoinedStr)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.expr):
                stack.append((child, depth, narrowing))
            elif not (narrowing and getattr(child, "end_col_offset", None) is not None
                      and not _may_be_deeper(child, limit - depth)):
                stack.append((child, depth + 1, narrowing))
    return False


def bound(tree: ast.Module) -> list[Unanalysed]:
    """Replace, in place, every expression of ``tree`` nested deeper than ``MAX_EXPRESSION_DEPTH``; return the
    tree's placeholders in source order (those made here and those already there: what the analysis of this
    file skips), so that nothing walks the tree again to find them (``parsing.Parsed.skipped``)."""
    found = []
    for holder, field, index, root in list(_roots(tree, MAX_EXPRESSION_DEPTH)):
        if isinstance(root, Unanalysed):
            found.append(root)
            continue
        if not _may_be_deeper(root, MAX_EXPRESSION_DEPTH) or not _deeper_than(root, MAX_EXPRESSION_DEPTH):
            continue
        depth = expression_depth(root)  # for the message: what is too deep is rare
        placeholder = Unanalysed(
            "the expression", f"is nested {depth:,} levels deep, and gradguard analyses expressions up to "
            f"{MAX_EXPRESSION_DEPTH} levels deep", depth,
            lineno=root.lineno, col_offset=root.col_offset, end_lineno=root.end_lineno,
            end_col_offset=root.end_col_offset)
        if index is None:
            setattr(holder, field, placeholder)
        else:
            getattr(holder, field)[index] = placeholder
        found.append(placeholder)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _may_be_deeper(root: ast.AST, limit: int) -> bool:
    """Each level of an expression adds at least one byte of text (an operator, a dot, a bracket), and a
    few kinds of node share their parent's text, never two in a row: narrow expressions are shallow."""
    return root.end_lineno != root.lineno or (root.end_col_offset - root.col_offset) * 2 >= limit


def _narrow(node: ast.AST, limit: int) -> bool:
    """A statement, argument, keyword or alias on one line too narrow to hold an expression deeper than
    ``limit``: nothing in it need be looked at."""
    return getattr(node, "end_col_offset", None) is not None and not _may_be_deeper(node, limit)


def _roots(tree: ast.AST, limit: int) -> Iterator[tuple[ast.AST, str, int | None, ast.expr]]:
    """Every outermost expression (one not inside another expression) with where it is held: (holder,
    field, index in the field's list or None), except those of statements (arguments, keywords) on one line
    too narrow to hold an expression deeper than ``limit`` (``_narrow``: most statements; a placeholder of
    ``parsing`` stands for a statement far wider).  Statements, and the parts of statements that are not
    expressions (arguments, ``with`` items, handlers, match cases and patterns), are walked without recursion;
    expressions are not entered."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for field in node._fields:  # (``ast.iter_fields`` without its generator: a third of this walk's time)
            value = getattr(node, field, None)
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.expr):
                        yield node, field, i, item
                    elif isinstance(item, ast.AST) and not _narrow(item, limit):
                        stack.append(item)
            elif isinstance(value, ast.expr):
                yield node, field, None, value
            elif isinstance(value, ast.AST) and not _narrow(value, limit):
                stack.append(value)
