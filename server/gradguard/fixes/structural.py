"""The fixes of GG101-GG105: structural moves and rewrites, built from the event a finding carries.

- **move after the backward** (GG101, GG102) -- the update (``opt.step()``, a ``.data`` write, a clip or
  EMA loop, a helper call that does one) is moved, as a whole statement of the block that holds the
  backward it breaks, to just after that backward.  Safe when only that backward ran between the two
  places; unsafe otherwise (the statements in between now see the values before the update).
- **keep the tensors** (GG103) -- ``torch.tensor([a, b])`` -> ``torch.stack([a, b])``;
  ``t.item()`` / ``float(t)`` used in tensor arithmetic -> ``t``.
- **element loops** (GG104) -- the fix of the in-place rule behind the finding (GG001-GG004) when it is safe;
  else a loop filling a preallocated tensor collects the steps in a list and stacks them (``loops``).
- **no_grad views** (GG105) -- make the view with grad mode on (move its binding out of the ``no_grad``
  block) and write out of place when nothing else sees the memory; or do the write under ``no_grad`` too.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..knowledge import load_knowledge
from ..statements import block_of
from .context import FUNCTIONS, CannotFix, FindingId, FixContext
from .edits import Rewrite, apply_edits
from . import inplace as F
from .inplace import fix_leaf_write, fix_or_none
from .loops import stack_steps
from .aliases import analyse
from .callers import param_escape, through_callers
from .view_helpers import helper_view_with_grad
from .writes import OUT_OF_PLACE_METHODS, Write, aug_to_binop, code, cst_mod, out_of_place, parse_expr, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding, Mutation

def _mutation(finding: Finding) -> Mutation:
    mutation = (finding.data or {}).get("mutation")
    if mutation is None:
        raise CannotFix("the finding carries no mutation")
    return mutation


def _block_of(ctx: FixContext, stmt: ast.stmt) -> list[ast.stmt] | None:
    return block_of(ctx.parents.get(stmt), stmt)


def _chain(ctx: FixContext, node: ast.AST) -> list[ast.stmt]:
    """The statements enclosing ``node`` inside its function, innermost first."""
    out = []
    for n in [node, *ctx.ancestors(node)]:
        if isinstance(n, (*FUNCTIONS, ast.ClassDef, ast.Lambda)):
            break
        if isinstance(n, ast.stmt):
            out.append(n)
    return out


# ============================================================================ move after the backward
def move_after_backward(ctx: FixContext, mutation: Mutation, what: str) -> Fix:
    """Move the statement that does the update to just after the last backward it breaks, when both are
    statements of one block (the update first)."""
    if not mutation.conflicts:
        raise CannotFix("no conflicting backward")
    sinks = [c.sink for c in mutation.conflicts]
    if any(s.kind != "backward" for s in sinks):
        raise CannotFix("the graph is returned or stored, not backpropagated here")
    ups = _chain(ctx, mutation.entry())
    best = None
    for sink in sinks:
        downs = _chain(ctx, sink.node)
        pair = next(
            ((u, d) for u in ups for d in downs
             if u is not d and (block := _block_of(ctx, u)) is not None and any(s is d for s in block)),
            None,
        )
        if pair is None:
            raise CannotFix(f"the backward on line {sink.node.lineno} is not in the block of the update")
        if best is not None and best[0] is not pair[0]:
            raise CannotFix("the backwards it breaks are in different blocks")
        if best is None or pair[1].lineno > best[1].lineno:
            best = pair
    up, down = best
    block = _block_of(ctx, up)
    i, j = next(k for k, s in enumerate(block) if s is up), next(k for k, s in enumerate(block) if s is down)
    if j <= i:
        raise CannotFix("the backward comes before the update")
    if any(isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Raise)) for s in block[i + 1:j + 1] for n in ast.walk(s)):
        raise CannotFix("control leaves the block between the update and the backward")
    ctx.require_own_lines(up)
    ctx.require_own_lines(down)
    edits = tuple(_move_after(ctx, [up], [up], down))
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
_PARAMETER_LISTS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers", "values", "items"})


def _clears_gradients(ctx: FixContext, stmt: ast.stmt) -> bool:
    """``x.zero_grad()`` (``set_to_none`` as a constant at most): it sets ``.grad``s and reads nothing else."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "zero_grad"
            and not call.args and all(k.arg == "set_to_none" and isinstance(k.value, ast.Constant) for k in call.keywords)
            and _names_only(call.func.value))


def _reads_values_only(ctx: FixContext, stmt: ast.stmt) -> bool:
    """Whether the update reads and writes tensor values only: no `.grad`, and no call that could (a helper, a
    step): only tensor methods, parameter lists, torch functions and a few builtins."""
    knowledge = load_knowledge()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and node.attr in ("grad", "main_grad", "zero_grad"):
            return False
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in _VALUE_CALLS and func.id not in ctx.imports:
            continue
        q = ctx.qual(func) or ""
        if q.startswith("torch.") and not (q.startswith("torch.autograd") or "clip_grad" in q or "backward" in q):
            continue
        if isinstance(func, ast.Attribute) and (func.attr in _PARAMETER_LISTS or func.attr in OUT_OF_PLACE_METHODS
                                                or knowledge.is_inplace(func.attr)):
            continue
        return False
    return True


def _names_only(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def fix_step_before_backward(ctx: FixContext, finding: Finding) -> Fix:
    """GG101, the first that applies: run the step (or the update) after the last backward that needs the old
    weights; compute an early forward after the step instead; in a truncated-BPTT loop kept alive with
    ``retain_graph=True``, cut the graph between chunks."""
    mutation = _mutation(finding)
    for attempt in (lambda: move_after_backward(ctx, mutation, "Update after the backward"),
                    lambda: forward_after_step(ctx, mutation, finding.code)):
        try:
            return attempt()
        except CannotFix:
            pass
    return detach_between_chunks(ctx, mutation)


def forward_after_step(ctx: FixContext, mutation: Mutation, code: str) -> Fix:
    """The forward whose graph the step breaks was computed before the step (``g_logits = D(fake)`` before the
    discriminator's step): compute it after the step, so the backward runs through a graph of the updated
    weights.  Statements read only after the step move; one also read before it (``d_fake`` of both losses) may
    be computed again after the step; a candidate is offered only when the finding (``code``) is gone with it.  Unsafe: that forward now sees the new
    weights, which is what the usual GAN loop does, but not what the code said."""
    step = ctx.statement_of(mutation.entry())
    block = _block_of(ctx, step)
    if block is None or len({id(c.sink.node) for c in mutation.conflicts}) != 1:
        raise CannotFix("not one backward in the step's block")
    sink = mutation.conflicts[0].sink
    if sink.kind != "backward":
        raise CannotFix("the graph is not backpropagated here")
    i = next(k for k, st in enumerate(block) if st is step)
    down = next((st for st in _chain(ctx, sink.node) if any(st is b for b in block[i + 1:])), None)
    if down is None:
        raise CannotFix("the backward is not after the step in its block")
    moved, kept = _forward_before(block, i, next(k for k, st in enumerate(block) if st is down))
    for st in [*moved, *kept, step]:
        if not isinstance(st, (ast.Assign, ast.AnnAssign, ast.Expr)):
            raise CannotFix("only plain statements are moved")
        ctx.require_own_lines(st)
    # At most one statement is computed again: with more (a shared trunk's features and a critic's values),
    # what follows the step (an advantage target) changes meaning, not only its weights.  The one that made the
    # saved graph (`d_fake = D(fake)`) is tried first; a statement made between (`ones = torch.ones(...)`)
    # needs no recomputing, so it must not use up the one try.  One that another kept statement reads (`feat`,
    # read by `value = critic(feat)`) is never recomputed alone: the two would disagree after the step.
    saved = {id(c.save.node) for c in mutation.conflicts}
    holds_graph = [st for st in kept if any(id(n) in saved for n in ast.walk(st))]
    order = [*holds_graph, *(st for st in reversed(kept) if st not in holds_graph)]
    alone = [st for st in order if not any(_writes(st) & _reads(other) for other in kept if other is not st)]
    for recomputed in ([], *([st] for st in alone)):
        after = sorted([*moved, *recomputed], key=lambda st: st.lineno)
        if not any(isinstance(n, ast.Call) for st in after for n in ast.walk(st)):
            continue
        edits = _move_after(ctx, moved, after, step)
        # Statements left before the step may hold part of the graph too: offer only what analyses clean.
        # (A write inside a helper is found on the helper's line; its entry is the statement that was moved.)
        entry = mutation.entry().lineno - sum(st.end_lineno - st.lineno + 1 for st in moved)
        if not ctx.still_found(apply_edits(ctx.text, edits), FindingId(code, entry)):
            shown = ctx.source(after[0]).splitlines()[0]
            return Fix(f"Compute `{shown[:60]}` after the step, so that its backward sees the updated weights "
                       "(unsafe: the forward now uses them)", False, tuple(edits))
    raise CannotFix("no forward computed before the step can be computed after it instead")


def _forward_before(block: list[ast.stmt], step: int, down: int) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The statements before the step that the backward (``block[down]``) depends on: those read only after
    the step (they can move), and those also read before it (they stay, and may be computed again)."""
    needed = _reads(block[down])
    moved: list[ast.stmt] = []
    kept: list[ast.stmt] = []
    for k in range(down - 1, -1, -1):
        st = block[k]
        written = _writes(st)
        if not written & needed:
            continue
        needed = (needed - written) | _reads(st)
        if k >= step:
            continue
        between = block[k + 1:step]
        if any(_writes(b) & _reads(st) for b in between):
            break  # what it reads changes before the step: computing it later would differ
        (kept if any(_reads(b) & written for b in between) else moved).insert(0, st)
    return moved, kept


def _move_after(ctx: FixContext, moved: list[ast.stmt], after: list[ast.stmt], anchor: ast.stmt) -> list[TextEdit]:
    """Edits that delete ``moved`` and put (a copy of) each of ``after`` just below ``anchor``, in order."""
    lines, nl = ctx.lines, ctx.newline
    if anchor.end_lineno >= len(lines):
        raise CannotFix("nothing can go below the file's last line")
    text = "".join(line.rstrip("\r\n") + nl for st in after for line in lines[st.lineno - 1:st.end_lineno])
    edits = [TextEdit(st.lineno, 1, st.end_lineno + 1, 1, "") for st in moved]
    edits.append(TextEdit(anchor.end_lineno + 1, 1, anchor.end_lineno + 1, 1, text))
    return sorted(edits, key=lambda e: (e.line, e.column))


def _writes(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def _reads(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def detach_between_chunks(ctx: FixContext, mutation: Mutation) -> Fix:
    """The step and a ``backward(retain_graph=True)`` in one loop body, where the next iteration's backward
    runs through the previous one's graph (whose weights the step changed) by way of a state the loop carries
    (``h = cell(x, h)``): detach that state at the top of the body and drop ``retain_graph=True``.  Unsafe: it
    truncates backpropagation at the chunk boundary, which is what truncated BPTT means but changes gradients."""
    import libcst as cst

    step = ctx.statement_of(mutation.entry())
    loop = next((a for a in ctx.ancestors(step) if isinstance(a, (ast.For, ast.While))), None)
    if loop is None or not any(s is step for s in loop.body):
        raise CannotFix("the step is not a statement of a loop's body")
    backwards = [c.sink.node for c in mutation.conflicts if c.sink.kind == "backward"]
    calls = [n for b in backwards for n in ast.walk(b) if isinstance(n, ast.Call) and _retains(n)]
    if not backwards or len(calls) != len(backwards) or not all(_inside(ctx, c, loop) for c in calls):
        raise CannotFix("the backward that breaks is not a `backward(retain_graph=True)` of the same loop")
    carried = _carried_tensors(loop)
    if not carried:
        raise CannotFix("no state carried from one iteration to the next")
    first = loop.body[0]
    rw = Rewrite(ctx)
    for name in carried:
        rw.insert_before(first, f"{name} = {name}.detach()")
    for call in calls:
        node = ctx.cst(call)
        args = [a for a in node.args if not (a.keyword is not None and a.keyword.value == "retain_graph")]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        rw.replace_node(node, node.with_changes(args=args))
    names = ", ".join(f"`{n}`" for n in carried)
    return rw.fix(f"Cut the graph between iterations: detach {names} at the top of the loop and drop "
                  "`retain_graph=True` (unsafe: gradients stop at the chunk boundary)", safe=False)


def _retains(call: ast.Call) -> bool:
    return any(k.arg == "retain_graph" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _inside(ctx: FixContext, node: ast.AST, outer: ast.AST) -> bool:
    return any(a is outer for a in ctx.ancestors(node))


def _bound_names(target: ast.expr) -> list[ast.Name]:
    """The names an assignment target binds: ``h``, ``out, h``; not the ``self`` of ``self.h`` (which it reads)."""
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _carried_tensors(loop: ast.For | ast.While) -> list[str]:
    """Names the body reads before it assigns them, assigned in the body from a call (``h = cell(x, h)``,
    ``out, h = rnn(x, h)``): a state one iteration hands to the next."""
    read_first: list[str] = []
    assigned: set[str] = set()
    from_call: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            return
        if isinstance(node, ast.Assign):
            visit(node.value)  # the right side is read before the targets are bound
            for target in node.targets:
                for t in _bound_names(target):
                    assigned.add(t.id)
                    if isinstance(node.value, ast.Call):
                        from_call.add(t.id)
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in assigned and node.id not in read_first:
                read_first.append(node.id)
            elif not isinstance(node.ctx, ast.Load):
                assigned.add(node.id)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in loop.body:
        visit(stmt)
    return [n for n in read_first if n in from_call]


def fix_silent_data_write(ctx: FixContext, finding: Finding) -> Fix:
    """GG102: do the ``.data`` write after the backward that needs the old value.  (Writing under
    ``torch.no_grad()`` to the tensor itself would make that backward raise: not a fix.)"""
    return move_after_backward(ctx, _mutation(finding), "Write after the backward")


def write_in_graph(ctx: FixContext, finding: Finding) -> Fix:
    """GG102 on a tensor the forward reads later: the hidden write (``.data``, ``.detach()``, ``no_grad``)
    becomes the same op out of place with grad on, and the name is rebound to it (``out = out.mul(s)``,
    ``x = x.clamp(a, b)``, ``h = h.clone(); h[pad] = 0``).  Always unsafe: the gradient then goes through
    the op, where before it skipped it (a deliberate straight-through estimator loses that)."""
    cst = cst_mod()
    mutation = _mutation(finding)
    owner = mutation.hidden_from
    if owner is None or owner.leaf:
        raise CannotFix("the written tensor has no grad_fn: no graph op to put the write in")
    write = Write.of(ctx, mutation.entry())
    if write.value_use or write.kind not in ("method", "augassign", "setitem"):
        raise CannotFix("not a plain write statement")
    copied = write.kind == "method" and write.call.func.attr == "copy_"
    stmt = write.stmt
    block = _no_grad_with(ctx, stmt) or _inference_mode_with(ctx, stmt)
    if block is not None and len(block.body) != 1:
        raise CannotFix("the no_grad block holds more than the write")
    if block is None and not mutation.grad_enabled and _no_grad_decorator(ctx, stmt) is None:
        # `with torch.no_grad(): if c: h[pad] = 0`: the rewrite would stay under no_grad, still off the graph
        raise CannotFix("grad mode is off around the write, in a block that is not the write's own")
    target = write.target.value if write.kind == "setitem" else write.target
    name = _unhidden_name(target)
    if name is None:
        raise CannotFix("the write is not on a local name, its `.data` or its `.detach()`")
    if mutation.target.storage is not owner.storage:
        raise CannotFix("the write does not reach the memory of the tensor with the grad_fn")
    decorator = _no_grad_decorator(ctx, stmt) if block is None else None
    if block is None and decorator is None and target is write.target and isinstance(target, ast.Name):
        raise CannotFix("nothing hides the write from autograd here")
    report = analyse(ctx, stmt, name, write_call=write.call)
    through = not (report.aliases_read_after or report.holders_read_after) and report.escapes == [param_escape(name)]
    if not report.clean and not through:
        raise CannotFix(report.reason())
    if decorator is not None and not through:
        raise CannotFix("the no_grad decorator covers the whole function, not just the write")
    if through and decorator is None and block is None and isinstance(target, ast.Name):
        raise CannotFix("what hides the write is at the function's call, not in it")
    if copied:
        new = f"{name} = " + _copied_in_graph(ctx, write.call, name)
    elif write.kind == "method":
        new = f"{name} = " + code(out_of_place(ctx, write.call, obj=cst.Name(name)))
    elif write.kind == "augassign":
        new = f"{name} = " + code(aug_to_binop(ctx.cst(stmt)).with_changes(left=cst.Name(name)))
    else:
        outer = block if block is not None else stmt
        new = (f"{name} = {name}.clone(){ctx.newline}{ctx.indent_of(outer)}"
               f"{name}[{ctx.source(write.target.slice)}] = {ctx.source(stmt.value)}")
    replaced = block if block is not None else stmt
    ctx.require_own_lines(replaced)
    line, column, end_line, end_column = ctx.char_range(replaced)
    edit = TextEdit(line, column + 1, end_line, end_column + 1, new)
    first = new.split(ctx.newline)[0]
    title = f"Put the write in the graph: `{short(first)}` (unsafe: the gradient now goes through it, where it skipped it before)"
    if through:
        return through_callers(ctx, (edit,), stmt, name, title, False, (decorator,) if decorator is not None else ())
    return Fix(title, False, (edit,))


def _copied_in_graph(ctx: FixContext, call: ast.Call, name: str) -> str:
    """``x.data.copy_(0.5 * x.data + 0.5 * y)`` -> ``0.5 * x + 0.5 * y``: the copied values with their graph.  Only
    arithmetic that reads ``x`` itself elementwise, so the values have ``x``'s shape, as the copy gave them."""
    if len(call.args) != 1 or call.keywords:
        raise CannotFix("not a plain `copy_(values)`")
    value = call.args[0]
    if value.lineno != value.end_lineno:
        raise CannotFix("the copied values span lines")
    leaves, stack = [], [value]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            stack.extend([node.left, node.right])
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            stack.append(node.operand)
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            continue
        elif isinstance(node, (ast.Name, ast.Attribute, ast.Call)):
            leaves.append(node)
        else:
            raise CannotFix("the copied values are not elementwise arithmetic")
    own = [leaf for leaf in leaves if _unhidden_name(leaf) == name]
    if not own or any(isinstance(n, ast.Name) and n.id == name for leaf in leaves if leaf not in own
                      for n in ast.walk(leaf)):
        raise CannotFix("the copied values do not read the written tensor elementwise")
    text, start = ctx.source(value), ctx._chars(value.lineno, value.col_offset)
    for leaf in sorted(own, key=lambda n: n.col_offset, reverse=True):
        a, b = ctx._chars(leaf.lineno, leaf.col_offset) - start, ctx._chars(leaf.lineno, leaf.end_col_offset) - start
        text = text[:a] + name + text[b:]
    return text


def _no_grad_decorator(ctx: FixContext, stmt: ast.stmt) -> ast.expr | None:
    """The ``@torch.no_grad()`` that is the only decorator of the function around ``stmt``, if it is."""
    fn = ctx.function_of(stmt)
    if fn is None or len(fn.decorator_list) != 1:
        return None
    decorator = fn.decorator_list[0]
    if isinstance(decorator, ast.Call) and ctx.qual(decorator.func) == "torch.no_grad" and not decorator.args \
            and not decorator.keywords:
        return decorator
    return None


def _inference_mode_with(ctx: FixContext, stmt: ast.stmt) -> ast.With | None:
    """The ``with torch.inference_mode():`` block ``stmt`` is alone in, if any (``inference_mode(True)`` too)."""
    parent = ctx.parents.get(stmt)
    if not isinstance(parent, ast.With) or len(parent.items) != 1 or parent.items[0].optional_vars is not None:
        return None
    item = parent.items[0].context_expr
    if not (isinstance(item, ast.Call) and ctx.qual(item.func) == "torch.inference_mode" and not item.keywords):
        return None
    if item.args and not (len(item.args) == 1 and isinstance(item.args[0], ast.Constant) and item.args[0].value is True):
        return None
    return parent


def _unhidden_name(target: ast.expr) -> str | None:
    """``x``, ``x.data`` or ``x.detach()`` -> ``x``."""
    if isinstance(target, ast.Attribute) and target.attr == "data":
        target = target.value
    elif (isinstance(target, ast.Call) and isinstance(target.func, ast.Attribute) and target.func.attr == "detach"
          and not target.args and not target.keywords):
        target = target.func.value
    return target.id if isinstance(target, ast.Name) else None


# ============================================================================ GG103: keep the tensors
def fix_graph_break(ctx: FixContext, finding: Finding) -> Fix:
    node = finding.node
    torch = ctx.torch_name()
    stmt = ctx.statement_of(node)
    candidates = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]
    # torch.tensor([a, b]) with no other arguments -> torch.stack([a, b])
    for call in candidates:
        if (ctx.qual(call.func) == "torch.tensor" and torch is not None and len(call.args) == 1 and not call.keywords
                and isinstance(call.args[0], (ast.List, ast.ListComp)) and (not isinstance(call.args[0], ast.List) or call.args[0].elts)):
            new = parse_expr(f"{torch}.stack({ctx.source(call.args[0])})")
            rw = Rewrite(ctx).replace_node(ctx.cst(call), new)
            return rw.fix(f"Keep the graph: `{torch}.stack(...)` instead of `{torch}.tensor(...)`", safe=True)
    # t.item() / float(t) inside tensor arithmetic -> t
    for call in candidates:
        inner = None
        if isinstance(call.func, ast.Attribute) and call.func.attr == "item" and not call.args:
            inner = call.func.value
        elif isinstance(call.func, ast.Name) and call.func.id == "float" and len(call.args) == 1 and "float" not in ctx.imports:
            inner = call.args[0]
        if inner is None:
            continue
        parent = ctx.parents.get(call)
        if isinstance(parent, ast.BinOp) or _summed(ctx, call):
            safe = True
        elif isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Name):
            safe = _only_arithmetic_uses(ctx, parent, parent.targets[0].id)
        else:
            continue
        text = ctx.source(inner)
        if not isinstance(inner, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            text = f"({text})"
        rw = Rewrite(ctx).replace_node(ctx.cst(call), parse_expr(text))
        title = f"Keep the graph: use `{ctx.source(inner)}` instead of `{ctx.source(call)}`"
        return rw.fix(title if safe else f"{title} (unsafe: the name then holds a tensor in its other uses)", safe=safe)
    raise CannotFix("no tensor-keeping rewrite for this graph break")


def fix_cut(ctx: FixContext, finding: Finding) -> Fix:
    """``t.detach()`` / ``t.data`` that starves parameters the optimizer updates -> ``t``: the gradient flows again."""
    node = finding.node
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
            and not node.args and not node.keywords:
        inner = node.func.value
    elif isinstance(node, ast.Attribute) and node.attr == "data":
        inner = node.value
    else:
        raise CannotFix("not a plain `.detach()` or `.data`")
    rw = Rewrite(ctx).replace_node(ctx.cst(node), parse_expr(ctx.source(inner)))
    return rw.fix(f"Let the gradient through: `{ctx.source(inner)}` instead of `{ctx.source(node)}`", safe=True)


def _summed(ctx: FixContext, call: ast.Call) -> bool:
    """``sum(t.item() for t in ...)``: the sum of the tensors is the same number, with its graph."""
    comprehension = ctx.parents.get(call)
    if not isinstance(comprehension, (ast.GeneratorExp, ast.ListComp)) or comprehension.elt is not call:
        return False
    outer = ctx.parents.get(comprehension)
    # The sum rebuilt into a new leaf (`torch.tensor(sum(...), requires_grad=True)`) would stay cut: not this fix.
    rebuilt = isinstance(ctx.parents.get(outer), ast.Call) and ctx.parents.get(outer).func is not outer
    return (isinstance(outer, ast.Call) and isinstance(outer.func, ast.Name) and outer.func.id == "sum"
            and outer.args == [comprehension] and "sum" not in ctx.imports and not rebuilt)


def _only_arithmetic_uses(ctx: FixContext, assign: ast.Assign, name: str) -> bool:
    """Whether every later read of ``name`` in its function is an operand of arithmetic (a tensor serves there
    as the number did), and nothing else assigns it."""
    scope = ctx.scope_of(assign)
    uses = 0
    for node in ast.walk(scope):
        if not isinstance(node, ast.Name) or node.id != name or node is assign.targets[0]:
            continue
        if not isinstance(node.ctx, ast.Load) or node.lineno < assign.lineno:
            return False
        if not isinstance(ctx.parents.get(node), (ast.BinOp, ast.UnaryOp)):
            return False
        uses += 1
    return uses > 0


# ============================================================================ GG104: element loops
def fix_element_loop(ctx: FixContext, finding: Finding) -> Fix | None:
    """The fix of the in-place rule behind the element-loop finding when it is safe (the loop stays; it becomes
    correct); else, where the loop fills a preallocated tensor step by step, the list + ``torch.stack`` rewrite
    (unsafe, see ``loops``); else the in-place rule's unsafe fix."""
    data = finding.data or {}
    code = data.get("underlying")
    build = ctx.builders.get(code or "")
    if code in ("GG002", "GG003"):
        # The message's advice decides, as torch proved it: `torch.no_grad()` only for an update between steps
        # (anywhere else it drops the gradient of what the loop writes), a copy for the computation.
        underlying = fix_or_none(lambda: fix_leaf_write(ctx, finding, update=data.get("advice") == "no_grad"))
    elif build is not None:
        underlying = fix_or_none(lambda: build(ctx, finding))
    else:
        underlying = None
    if underlying is not None and underlying.safe:
        return underlying
    stacked = fix_or_none(lambda: stack_steps(ctx, _mutation(finding).node))
    if stacked is None and underlying is None:
        raise CannotFix("no fix for this element loop")
    return stacked or underlying


# ============================================================================ GG105: no_grad views
def _no_grad_with(ctx: FixContext, stmt: ast.stmt) -> ast.With | None:
    parent = ctx.parents.get(stmt)
    if not isinstance(parent, ast.With) or len(parent.items) != 1 or parent.items[0].optional_vars is not None:
        return None
    item = parent.items[0].context_expr
    q = ctx.qual(item.func) if isinstance(item, ast.Call) else None
    if q == "torch.no_grad" and not item.args or q == "torch.set_grad_enabled" and (
            len(item.args) == 1 and isinstance(item.args[0], ast.Constant) and item.args[0].value is False):
        return parent
    return None


def view_with_grad(ctx: FixContext, mutation: Mutation) -> Fix:
    """Move the view's binding out of its ``with torch.no_grad():`` (the view then has history), and write
    out of place when nothing else sees the memory."""
    origin = _nograd_origin(mutation)
    binding = ctx.statement_of(origin)
    if not isinstance(binding, ast.Assign) or not all(isinstance(t, (ast.Name, ast.Tuple)) for t in binding.targets):
        raise CannotFix("the view is not bound to a local name")
    block = _no_grad_with(ctx, binding)
    if block is None:
        raise CannotFix("the view is not made directly in a no_grad block")
    if ctx.function_of(block) is not ctx.function_of(mutation.entry()) or ctx.function_of(block) is None:
        raise CannotFix("the view is made in another function")
    if block.body[0] is not binding:
        raise CannotFix("the view is not the first statement of its no_grad block")
    write_stmt = ctx.statement_of(mutation.entry())
    if ctx.loops_around(write_stmt) != ctx.loops_around(block):
        raise CannotFix("the write and the view are in different loops")
    if _block_of(ctx, block) is None or not any(s is write_stmt for s in _block_of(ctx, block)):
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
    rebind = F.fix_or_none(lambda: F.Rebind(ctx, Write.of(ctx, mutation.entry())))
    safe, built = True, None
    if rebind is not None and rebind.direct and rebind.report.only_holders:
        built = F.fix_or_none(rebind.rewrite)
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


def _nograd_origin(mutation: Mutation) -> ast.AST:
    """Where the view made under no_grad is made: the written view itself, or the one it is a view of (``row``
    for a write to ``row[:2]``, where ``row = h[0]`` was taken under no_grad)."""
    for t in mutation.target.view_chain():
        if t.nograd_view and not (t.base is not None and t.base.nograd_view):
            if t.origin is None:
                break
            return t.origin
    raise CannotFix("cannot see where the view is made")


def fix_nograd_view(ctx: FixContext, finding: Finding) -> Fix | None:
    mutation = _mutation(finding)
    if not any(t.nograd_view for t in mutation.target.view_chain()):
        # A view of a tensor that does not require grad (a buffer, a memory bank), written with a value that
        # does: the tensor was never meant to carry a graph, and torch refuses to give it one.  Store the values.
        write = F.Write.of(ctx, mutation.entry())
        rw, desc = F.no_grad_wrap(ctx, write.stmt)
        return rw.fix(f"Write the values under `{desc}`", safe=True)
    made = F.fix_or_none(lambda: view_with_grad(ctx, mutation))
    if made is None:  # the view comes from a helper that makes it under no_grad
        made = F.fix_or_none(lambda: helper_view_with_grad(ctx, mutation, _nograd_origin(mutation)))
    # Writing under no_grad too is not offered: it drops the gradient through the write (chunk/unbind/transpose
    # fixtures then raise or differ from their reference).
    return made
