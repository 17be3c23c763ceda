"""GG105 nograd-view-mutated: a view made under no_grad is modified in place with grad mode on."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes import inplace
from ..fixes.callers import through_callers
from ..fixes.context import CannotFix, FixContext
from ..fixes.moves import block_around, grad_off, mutation_in, no_grad_block
from ..fixes.writes import InPlaceWrite, short
from ..inference.events import Finding, Mutation
from ..inference.sharing import Report
from ..inference.values import Grad
from ..knowledge.names import VIEW_METHODS
from ..messages import Message
from .base import Example, Rule
from .common import call_path_related, pieces_call
from .gg001_saved_tensor_mutated import only_the_caller_holds

MESSAGE = "A view was created in no_grad mode and is being modified inplace with grad mode enabled."


INFERENCE_MESSAGE = "Inplace update to inference tensor outside InferenceMode is not allowed."


def check(mutation: Mutation):
    if isinstance(mutation, Mutation) and mutation.kind == "write" and mutation.inference_made is not None:
        yield _inference_tensor_written(mutation)
        return
    if not isinstance(mutation, Mutation) or mutation.kind != "write" or not mutation.grad_enabled:
        return
    chain = list(mutation.target.view_chain())
    of_grad_tensor = any(t.nograd_view for t in chain)
    # A no_grad view of a tensor that does not require grad is refused only a value that requires grad.
    if not of_grad_tensor and not (any(t.nograd_plain_view for t in chain) and mutation.value_grad > Grad.NO):
        return
    origin = [(mutation.target.origin, "the view is made under no_grad here")] if mutation.target.origin else []
    certain = mutation.grad_mode_known and (of_grad_tensor or mutation.value_grad == Grad.YES)
    yield Finding(
        "GG105",
        mutation.node,
        f'{mutation.how} modifies a view that was made under `torch.no_grad()`; torch raises here: "{MESSAGE}" '
        "Make the view with grad mode on, or write under `torch.no_grad()` too, or clone it.",
        certain=certain,
        related=[*origin, *call_path_related(mutation)],
        mutation=mutation,
    )


def _inference_tensor_written(mutation: Mutation) -> Finding:
    """A tensor made inside ``torch.inference_mode()`` (a buffer a reset allocates there) updated in place after
    the block: reported where it is made, the line to move out of the block."""
    return Finding(
        "GG105",
        mutation.inference_made,
        Message.format(
            "this runs inside a `torch.inference_mode()` block and makes an inference tensor, which {how} on {write} "
            'updates in place outside it; torch raises there: "{torch}" Make it outside the block (or under '
            "`torch.no_grad()`), or clone it before the update.", how=mutation.how, write=mutation.node,
            torch=INFERENCE_MESSAGE),
        related=[(mutation.node, "the in-place update raises here"), *call_path_related(mutation)],
        mutation=mutation, data={"inference": True},
    )


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix | None:
    """Make the view with grad mode on (and write out of place), else write under no_grad too."""
    if finding.data.get("inference"):
        return None  # moving a statement out of an inference_mode block changes what runs under it
    mutation = mutation_in(finding)
    if not any(t.nograd_view for t in mutation.target.view_chain()):
        # A view of a tensor that does not require grad (a buffer, a memory bank), written with a value that
        # does: the tensor was never meant to carry a graph, and torch refuses to give it one.  Store the values.
        # torch refuses the write itself, wherever it is: in a helper the run followed too (for every call of it)
        rw, desc = inplace.no_grad_wrap(ctx, InPlaceWrite.of(ctx, mutation.node).stmt)
        if not mutation.frames:
            return rw.fix(f"Write the values under `{desc}`", safe=True)
        return rw.fix(f"Write the values under `{desc}` (unsafe: in a helper, for each of its calls)", safe=False)
    made = inplace.fix_or_none(lambda: _view_with_grad(ctx, mutation))
    if made is None:  # the view comes from a helper that makes it under no_grad
        made = inplace.fix_or_none(lambda: helper_view_with_grad(ctx, mutation, _nograd_origin(mutation)))
    # Writing under no_grad too is not offered: it drops the gradient through the write (chunk/unbind/transpose
    # fixtures then raise or differ from their reference) ...
    if made is None:
        made = inplace.fix_or_none(lambda: _parameter_update(ctx, mutation))
    return made


def _parameter_update(ctx: FixContext, mutation: Mutation) -> Fix:
    """... but for a view of a parameter written with values that require no grad, as an update or a reset
    between steps (a cached ``self.anchor = self.protos[0]`` scaled after a backward, ``Mutation.after_backward``): a leaf's memory can only be written under
    ``no_grad`` (with grad on, a view of a leaf raises too), and no gradient goes through such a write to drop."""
    root = mutation.target.root()
    if not (root.leaf and root.requires_grad == Grad.YES and mutation.value_grad == Grad.NO):
        raise CannotFix("not a parameter's view written with plain values")
    if not mutation.after_backward:  # before any backward it may be a step of the computation (`w.t()` scaled)
        raise CannotFix("no backward runs before the write: it may be part of the computation")
    write = InPlaceWrite.of(ctx, mutation.node)  # the write itself, in a helper too (its frame: the innermost)
    write.moment = mutation.moment
    if isinstance(write.target, ast.Name) and (write.moment is None or any(
            not ctx.inside(read, write.stmt) for read in write.moment.value_reads_after(write.target.id, write.depth))):
        raise CannotFix("the view is read after the write (not by the write again): a step of a computation")
    if not inplace.is_parameter_update(ctx, mutation, write):
        raise CannotFix("the write is part of a computation, not an update")
    rw, desc = inplace.no_grad_wrap(ctx, write.stmt)
    return rw.fix(f"Update the parameter's view under `{desc}`" + (" (unsafe: in a helper, for each of its calls)"
                                                                   if mutation.frames else ""), not mutation.frames)


def _view_with_grad(ctx: FixContext, mutation: Mutation) -> Fix:
    """Move the view's binding out of its ``with torch.no_grad():`` (the view then has history), and write
    out of place when nothing else sees the memory."""
    origin = _nograd_origin(mutation)
    binding = ctx.statement_of(origin)
    if not isinstance(binding, ast.Assign) or not all(isinstance(t, (ast.Name, ast.Tuple)) for t in binding.targets):
        raise CannotFix("the view is not bound to a local name")
    block = no_grad_block(ctx, binding)
    if block is None:
        raise CannotFix("the view is not made directly in a no_grad block")
    if ctx.function_of(block) is not ctx.function_of(mutation.entry()) or ctx.function_of(block) is None:
        raise CannotFix("the view is made in another function")
    if block.body[0] is not binding:
        raise CannotFix("the view is not the first statement of its no_grad block")
    write_stmt = ctx.statement_of(mutation.entry())
    view_loops, write_loops = ctx.loops_around(block), ctx.loops_around(write_stmt)
    if write_loops[len(write_loops) - len(view_loops):] != view_loops:  # the write may repeat; the view may not
        raise CannotFix("the view is made in a loop the write is not in")
    # The write is a statement of the view's block, or inside one (an `if`, `try` or `with` there: the loops
    # around both are the same); rebinding it out of place there keeps its condition.
    around = {id(s) for s in (write_stmt, *ctx.ancestors(write_stmt))}
    if block_around(ctx, block) is None or not any(id(s) in around for s in block_around(ctx, block)):
        raise CannotFix("the write is not in the block of the view")
    ctx.require_own_lines(block)
    ctx.require_own_lines(binding)
    nl, lines = ctx.newline, ctx.lines
    indent = ctx.indent_of(block)
    body_indent = ctx.indent_of(binding)
    moved = "".join(indent + line[len(body_indent):].rstrip("\r\n") + nl if line.startswith(body_indent) else line
                    for line in lines[binding.lineno - 1:binding.end_lineno])
    edits = []
    if len(block.body) == 1:
        edits.append(TextEdit(block.lineno, 1, block.end_lineno + 1, 1, moved))
    else:
        edits.append(TextEdit(block.lineno, 1, block.lineno, 1, moved))
        edits.append(TextEdit(binding.lineno, 1, binding.end_lineno + 1, 1, ""))
    title = f"Make the view with grad mode on: `{ctx.source(binding)[:50]}` outside the no_grad block"
    rebind = inplace.fix_or_none(lambda: inplace.RebindRewrite(ctx, InPlaceWrite.of_mutation(ctx, mutation)))
    safe, built = True, None
    callers = inplace.fix_or_none(lambda: _helper_out_of_place(ctx, mutation)) if rebind is None else None
    if callers is not None and not any(block.lineno <= e.line <= block.end_lineno for e in callers.edits):
        edits.extend(callers.edits)  # (the helper's edits, and its calls' in the code after the block)
        built, safe = True, callers.safe
        title += f", then {callers.title[0].lower()}{callers.title[1:]}"
    if rebind is not None and rebind.direct and rebind.report.only_holders:
        built = inplace.fix_or_none(rebind.rewrite)
        if built is not None:
            more = built[0].edits()
            moved_end = max((e.end_line, e.end_column) for e in edits)
            if any((e.line, e.column) <= moved_end for e in more):
                raise CannotFix("the write is next to the view's binding")
            edits.extend(more)
            title += f", then write out of place: `{built[1][:50]}`"
            if not rebind.report.clean:  # `emb.weight` (tied) or a list holds the memory: it keeps the old values
                safe = False
                title += f" (unsafe: {rebind.report.reason()}, and no longer sees the write)"
    if built is None:
        root = mutation.target.root()
        if root.leaf or root.param:
            raise CannotFix("an in-place write to a view of a leaf would still raise")
        if mutation.target.multi_view or any(isinstance(t, ast.Tuple) for t in binding.targets):
            # `q, k = qk.chunk(2)`: torch refuses an in-place write to a piece of chunk/split/unbind made with
            # grad on (GG004), so the view may leave no_grad only with the write out of place
            raise CannotFix("an in-place write to a piece of chunk/split/unbind would raise with grad on")
    edits.sort(key=lambda e: (e.line, e.column))
    return Fix(title, safe, tuple(edits))


def _helper_out_of_place(ctx: FixContext, mutation: Mutation) -> Fix:
    """The write of a helper the code calls with the view (``scale(q)``), out of place there: the helper returns it
    and each call rebinds what it passed (``through_callers``), when nothing but the caller holds it.  A container or
    object of a caller that holds it (a tied ``emb.weight``) keeps the old values, as in the view's own block: unsafe."""
    write = InPlaceWrite.of(ctx, mutation.node)
    write.moment = mutation.moment
    rebind = inplace.RebindRewrite(ctx, write)
    if mutation.entry() is mutation.node or not (rebind.direct and only_the_caller_holds(rebind)):
        raise CannotFix("not a helper's write to its parameter that only its caller holds")
    held: list[Report] = []

    def holders_kept(call: ast.Call, name: str) -> Report:
        report = InPlaceWrite.at_call(ctx, call, write.moment).sharing(ctx, name)
        held.extend([report] if report.holders_read_after else [])
        return replace(report, holders_read_after=[])
    rw, desc = rebind.rewrite()
    fix = through_callers(ctx, rw, write.stmt, rebind.name, f"Write out of place: `{short(desc)}`", safe=True,
                          moment=write.moment, check=holders_kept)
    return replace(fix, title=fix.title + "".join(f" (unsafe: {r.reason()}, and no longer sees the write)"
                                                  for r in held), safe=fix.safe and not held)


def _nograd_origin(mutation: Mutation) -> ast.AST:
    """Where the view made under no_grad is made: the written view itself, or the one it is a view of (``row``
    for a write to ``row[:2]``, where ``row = h[0]`` was taken under no_grad)."""
    for t in mutation.target.view_chain():
        if t.nograd_view and not (t.base is not None and t.base.nograd_view):
            if t.origin is None:
                break
            return t.origin
    raise CannotFix("cannot see where the view is made")


# ---- The fix of a view a no_grad helper makes ----------------------------------------------------
# GG105 when the view comes from a helper that makes it under no_grad (``@torch.no_grad()`` on it, or a
# ``with torch.no_grad():`` around its ``return``): the helper makes it with grad mode on, and the caller's write
# goes out of place when torch would refuse it in place (a view of a leaf, one of several pieces).
#
# Offered only when the helper does nothing but return views of its inputs (indexing, ``t()``, ``chunk``...), so
# grad mode changes nothing in it but whether the views have history.  Always unsafe: every caller of the helper
# then gets views with history wherever the input requires grad.

def helper_view_with_grad(ctx: FixContext, mutation: Mutation, origin: ast.AST) -> Fix:
    ret = ctx.statement_of(origin)
    fn = ctx.function_of(ret)
    if not isinstance(ret, ast.Return) or ret.value is not origin or fn is None \
            or fn is ctx.function_of(mutation.entry()):
        raise CannotFix("the view is not what a helper returns")
    if not _only_views(ctx, origin):
        raise CannotFix("the helper computes more than views: grad mode would change more than their history")
    body = fn.body[1:] if ast.get_docstring(fn, clean=False) is not None else fn.body
    edits = []
    if body == [ret] and len(fn.decorator_list) == 1 and grad_off(ctx, fn.decorator_list[0]):
        decorator = fn.decorator_list[0]
        if ctx.lines[decorator.lineno - 1].strip() != "@" + ctx.source(decorator):
            raise CannotFix("the decorator does not have its line to itself")
        edits.append(TextEdit(decorator.lineno, 1, decorator.lineno + 1, 1, ""))
        how = "without `@torch.no_grad()`"
    elif len(body) == 1 and isinstance(body[0], ast.With) and body[0].body == [ret] and not fn.decorator_list \
            and len(body[0].items) == 1 and grad_off(ctx, body[0].items[0].context_expr) \
            and body[0].items[0].optional_vars is None and ret.lineno == ret.end_lineno:
        block = body[0]
        ctx.require_own_lines(block)
        ctx.require_own_lines(ret)
        line = ctx.lines[ret.lineno - 1].rstrip("\r\n")
        edits.append(TextEdit(block.lineno, 1, block.end_lineno + 1, 1,
                              ctx.indent_of(block) + line.lstrip() + ctx.newline))
        how = "outside its no_grad block"
    else:
        raise CannotFix("the helper does more than return the view under no_grad")
    title = f"Make the view with grad mode on: `{fn.name}` returns `{short(ctx.source(origin), 40)}` {how}"
    rebind = inplace.fix_or_none(lambda: inplace.RebindRewrite(ctx, InPlaceWrite.of_mutation(ctx, mutation)))
    report = rebind.report if rebind is not None and rebind.direct else None  # holders only: not the caller's
    built = inplace.fix_or_none(rebind.rewrite) if report and (report.clean or report.only_holders and not report.escapes) \
        else None
    callers = inplace.fix_or_none(lambda: _helper_out_of_place(ctx, mutation)) if rebind is None else None
    if callers is not None and not any(fn.lineno <= e.line <= fn.end_lineno for e in callers.edits):
        edits.extend(callers.edits)  # the write is another helper's (`scale(dec_w)`): out of place there
        title += f", then {callers.title[0].lower()}{callers.title[1:]}"
    elif built is not None:
        edits.extend(built[0].edits())
        title += f", then write out of place: `{short(built[1], 50)}`"
        if not rebind.report.clean:  # `encoder` holds the viewed weight: it keeps its values, as in the tied case
            title += f" ({rebind.report.reason()}, and no longer sees the write)"
    else:
        root = mutation.target.root()
        if root.leaf or root.param:
            raise CannotFix("an in-place write to a view of a leaf would still raise")
        if pieces_call(origin):
            raise CannotFix("an in-place write to one of several views of one call would still raise")
    title += f" (unsafe: every call of `{fn.name}` now gets views with history where its input requires grad)"
    return Fix(title, False, tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _only_views(ctx: FixContext, expr: ast.expr) -> bool:
    """Names, attributes, basic indexing with numbers and slices, and view methods with number arguments."""
    if isinstance(expr, ast.Name):
        return True
    if isinstance(expr, ast.Attribute):
        return _only_views(ctx, expr.value)
    if isinstance(expr, ast.Subscript):
        return _only_views(ctx, expr.value) and all(_plain_number(n) for n in ast.walk(expr.slice))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in VIEW_METHODS \
            and expr.func.attr not in ("detach", "contiguous"):
        numbers = [*expr.args, *(k.value for k in expr.keywords)]
        return _only_views(ctx, expr.func.value) and all(_plain_number(n) for a in numbers for n in ast.walk(a))
    return False


def _plain_number(node: ast.AST) -> bool:
    """A part of an integer, a slice, ``None`` or ``...`` written out: basic indexing, never a copy."""
    if isinstance(node, ast.Constant):
        return node.value is None or node.value is Ellipsis or type(node.value) is int
    return isinstance(node, (ast.Tuple, ast.Slice, ast.UnaryOp, ast.USub, ast.Load))


RULE = Rule(
    code="GG105",
    name="nograd-view-mutated",
    summary="A view made under `torch.no_grad()` is modified in place with grad on (of a tensor that requires grad, "
            "or with a value that does).",
    explanation="""
A view created while grad mode is off (`with torch.no_grad(): v = x[0]`, `chunk`/`unbind` inside no_grad,
or returned by a function decorated `@torch.no_grad()`) has no autograd history linking it to its base.
Writing to it later with grad mode on would leave the base's graph wrong, so torch raises: `A view was
created in no_grad mode and is being modified inplace with grad mode enabled.`  The same holds for a no_grad
view of a tensor that does not require grad (a buffer slot, a memory bank row) when the value written into it
does: the write would have to give the view a history it cannot have.

`torch.inference_mode()` is stricter than no_grad: a tensor a factory makes inside it (a buffer an
environment's `reset()` allocates there) is an inference tensor, and any in-place update of it outside the
block raises `Inplace update to inference tensor outside InferenceMode is not allowed.`  That is reported
where the tensor is made, the statement of the block to move out of it.
""",
    fix_advice="Make the view with grad mode on, do the write under `torch.no_grad()` as well, or `clone()` the view. "
               "For a buffer written with a value that requires grad, write under `torch.no_grad()` (the buffer "
               "stores values, not a graph).",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
A view is tracked when the tensor it is a view of is known: made in the same function, a module's parameter,
or a buffer registered with `register_buffer`. A view of a tensor from a caller or another file is not, and a
write whose grad mode or value depends on a caller is reported as a warning.
""",
    invalid=(
        Example(
            """
import torch
x = torch.randn(3, 3, requires_grad=True)
y = x * 2
with torch.no_grad():
    row = y[0]
row.mul_(2)                         # GG105
""",
            raises=MESSAGE,
        ),
        Example(
            """
import torch
bank = torch.zeros(4, 3)
with torch.no_grad():
    slot = bank[0]
w = torch.randn(3, requires_grad=True)
slot.copy_(w * 2)                   # GG105
""",
            raises=MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(3, 3, requires_grad=True)
y = x * 2
with torch.no_grad():
    row = y[0]
    row.mul_(2)
"""
        ),
    ),
)
