"""Moving statements past the backward that needs the old values, the building block of GG101 and GG102.

An update (``opt.step()``, a ``.data`` write, a clip or EMA loop, a helper call that does one) is moved, as a
whole statement of the block that holds the backward it breaks, to just after that backward.  Safe when only
that backward ran between the two places; unsafe otherwise (the statements in between now see the values
before the update).  The helpers here (the finding's mutation, the block around a statement, the ``no_grad``
block a statement is alone in) serve the rules' own fixes too.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..inference.state import turns_grad_off
from ..knowledge import load_knowledge
from ..knowledge.names import OUT_OF_PLACE_METHODS, PARAMETER_ITERATORS
from ..statements import block_of, calls, is_dotted, names, sole_statement
from ..statements import walk as walk_statements
from .context import FUNCTIONS, CannotFix, FixContext

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding, Mutation


def mutation_in(finding: Finding) -> Mutation:
    """The mutation a finding's event carries (CannotFix for a finding without one)."""
    mutation = finding.mutation
    if mutation is None:
        raise CannotFix("the finding carries no mutation")
    return mutation


def block_around(ctx: FixContext, stmt: ast.stmt) -> list[ast.stmt] | None:
    return block_of(ctx.parents.get(stmt), stmt)


def enclosing_statements(ctx: FixContext, node: ast.AST) -> list[ast.stmt]:
    """The statements enclosing ``node`` inside its function, innermost first."""
    out = []
    for n in [node, *ctx.ancestors(node)]:
        if isinstance(n, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            break
        if isinstance(n, ast.stmt):
            out.append(n)
    return out


def units(ctx: FixContext, stmt: ast.stmt) -> list[ast.stmt]:
    """``stmt`` and the compound statements around it that run it alone (``statements.sole_statement``: ``if c:``,
    ``with ...:``, a loop, ``try``), innermost first, while their tests, iterables and context managers call only
    code known to compute on values: moved, copied or kept whole, each does what ``stmt`` does, in its control."""
    out = []
    for up in enclosing_statements(ctx, stmt):
        if sole_statement(up) is not stmt or up is not stmt and not all(
                value_only_call(ctx, c) for c in calls(up) if not ctx.inside(c, stmt)):
            break
        out.append(up)
    return out


def move_after_backward(ctx: FixContext, mutation: Mutation, what: str) -> Fix:
    """Move the statement that does the update to just after the last backward it breaks, when both are
    statements of one block (the update first)."""
    if not mutation.conflicts:
        raise CannotFix("no conflicting backward")
    sinks = [c.sink for c in mutation.conflicts]
    if any(s.kind != "backward" for s in sinks):
        raise CannotFix("the graph is returned or stored, not backpropagated here")
    ups = enclosing_statements(ctx, mutation.entry())
    best = None
    for sink in sinks:
        downs = enclosing_statements(ctx, sink.node)
        pair = next(((u, d) for u in ups for d in downs if u is not d
                     and (block := block_around(ctx, u)) is not None and any(s is d for s in block)), None)
        if pair is None:
            raise CannotFix(f"the backward on line {sink.node.lineno} is not in the block of the update")
        if best is not None and best[0] is not pair[0]:
            raise CannotFix("the backwards it breaks are in different blocks")
        if best is None or pair[1].lineno > best[1].lineno:
            best = pair
    up, down = best
    block = block_around(ctx, up)
    i, j = next(k for k, s in enumerate(block) if s is up), next(k for k, s in enumerate(block) if s is down)
    if j <= i:
        raise CannotFix("the backward comes before the update")
    if any(isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Raise))
           for s in block[i + 1:j + 1] for n in (s, *walk_statements(s))):
        raise CannotFix("control leaves the block between the update and the backward")
    if (names(up) & names(down)) - set(ctx.imports):
        # `img.data[:, c] = ...; img.pow(2).mean().backward()`, `clip(D); (-D(fake)).mean().backward()`: the
        # backward's statement computes from what the update touches (through any alias: `for t in [img]`), and
        # after the move it would compute from the values before the update
        raise CannotFix("the backward's statement reads what the update touches")
    ctx.require_own_lines(up)
    ctx.require_own_lines(down)
    edits = tuple(move_statements_after(ctx, [up], [up], down))
    shown = ctx.source(up).splitlines()[0]
    # The backward is named by its code, not its line: a title is not a message template, and a line would go
    # stale when the cached fix is moved (``moved.py``) or name a program line in a notebook.
    title = f"{what}: move `{shown[:60]}` after `{ctx.source(down).splitlines()[0][:60]}`"
    between = block[i + 1:j]
    if between and not (all(_clears_gradients(ctx, s) for s in between) and _reads_values_only(ctx, up)):
        # Not offered: the code in between (a fresh forward, a generator loss through D) may need the update
        # first; the proof test showed GAN and helper cases where moving past it changes the gradients.  Only
        # `opt.zero_grad()` may be passed over, by an update that neither reads nor writes a `.grad`: it touches
        # nothing the other reads.
        raise CannotFix(f"lines {between[0].lineno}-{down.lineno - 1} would run before the update")
    return Fix(title, True, edits)


# Calls an update may make and still be known to read and write tensor values only (never a `.grad`).
_VALUE_CALLS = frozenset({"zip", "range", "enumerate", "len", "list", "tuple", "reversed"})
_PARAMETER_LISTS = PARAMETER_ITERATORS | {"values", "items"}


def _clears_gradients(ctx: FixContext, stmt: ast.stmt) -> bool:
    """``x.zero_grad()`` (``set_to_none`` as a constant at most): it sets ``.grad``s and reads nothing else."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "zero_grad"
            and not call.args and all(k.arg == "set_to_none" and isinstance(k.value, ast.Constant) for k in call.keywords)
            and is_dotted(call.func.value))


def _reads_values_only(ctx: FixContext, stmt: ast.stmt) -> bool:
    """Whether the update reads and writes tensor values only: no `.grad`, and no call that could (a helper, a
    step); a function defined inside it (a closure it then calls) is checked by this same walk of its body."""
    inline = {n.name for n in ast.walk(stmt) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return not any(isinstance(node, ast.Attribute) and node.attr in ("grad", "main_grad", "zero_grad")
                   or isinstance(node, ast.Call) and not value_only_call(ctx, node, inline) for node in ast.walk(stmt))


def value_only_call(ctx: FixContext, node: ast.Call, inline: set[str] | frozenset[str] = frozenset()) -> bool:
    """A call known to compute on tensor values only (no `.grad`, no module's forward): a tensor method, a parameter
    list, a torch function (not autograd's, a clip of gradients or a backward), a few builtins, or one of the
    functions ``inline`` (defined in the code checked)."""
    func, q, knowledge = node.func, ctx.qual(node.func) or "", load_knowledge()
    if isinstance(func, ast.Name) and (func.id in _VALUE_CALLS or func.id in inline) and func.id not in ctx.imports:
        return True
    if q.startswith("torch.") and not (q.startswith("torch.autograd") or "clip_grad" in q or "backward" in q):
        return True
    return isinstance(func, ast.Attribute) and func.attr not in ("backward", "step", "zero_grad") and (
        func.attr in _PARAMETER_LISTS or func.attr in OUT_OF_PLACE_METHODS or knowledge.is_inplace(func.attr)
        or func.attr in knowledge.tensor_methods)


def move_statements_after(ctx: FixContext, moved: list[ast.stmt], after: list[ast.stmt], anchor: ast.stmt) -> list[TextEdit]:
    """Edits that delete ``moved`` and put (a copy of) each of ``after`` just below ``anchor``, in order."""
    lines, nl = ctx.lines, ctx.newline
    if anchor.end_lineno >= len(lines):
        raise CannotFix("nothing can go below the file's last line")
    text = "".join(line + nl for st in after for line in lines[st.lineno - 1:st.end_lineno])
    edits = [TextEdit(st.lineno, 1, st.end_lineno + 1, 1, "") for st in moved]
    edits.append(TextEdit(anchor.end_lineno + 1, 1, anchor.end_lineno + 1, 1, text))
    return sorted(edits, key=lambda e: (e.line, e.column))


def no_grad_block(ctx: FixContext, stmt: ast.stmt, inference: bool = False) -> ast.With | None:
    """The ``with`` block around ``stmt`` (one item, bound to nothing) when it turns grad mode off:
    ``torch.no_grad()``, ``torch.set_grad_enabled(False)``; with ``inference``, ``torch.inference_mode()`` too."""
    parent = ctx.parents.get(stmt)
    if not isinstance(parent, ast.With) or len(parent.items) != 1 or parent.items[0].optional_vars is not None:
        return None
    return parent if grad_off(ctx, parent.items[0].context_expr, inference) else None


def grad_off(ctx: FixContext, node: ast.expr, inference: bool = False) -> bool:
    """Is ``node`` a block or decorator that turns grad mode off (``state.turns_grad_off``)?"""
    return turns_grad_off(ctx.qual(node.func) if isinstance(node, ast.Call) else None, node, inference)
