"""GG101 optimizer-step-before-backward: parameters updated in place while a pending graph still needs them."""

from __future__ import annotations

import ast

from .. import statements
from ..statements import chain_base, dotted_root, is_dotted
from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.context import FUNCTIONS, LOOPS, CannotFix, FixContext
from ..fixes.edits import Rewrite
from ..fixes.helper_calls import calls_of
from ..fixes.identity import FindingId
from ..fixes.moves import (block_around, enclosing_statements, move_after_backward, move_statements_after, mutation_in,
                           units, value_only_call)
from ..fixes.writes import cst_mod
from ..inference.events import Finding, LoadedCopy, Mutation, StaleStep, in_function_of
from ..knowledge.names import RECURRENT_LAYERS
from ..messages import Message, other_file
from ..text import apply_edits, line_after
from .base import Example, Rule
from .common import SAVED_MESSAGE, conflict_related, first_conflict, where_it_raises


def check(mutation: Mutation):
    if isinstance(mutation, StaleStep):
        yield _stale_step(mutation)
        return
    if isinstance(mutation, LoadedCopy):
        yield _replaced_copy(mutation)
        return
    if not isinstance(mutation, Mutation) or mutation.kind in ("data", "detach") or mutation.by_layer:
        return  # a layer renormalising its own weight is GG001's state read by reference
    written = mutation.target.group or (mutation.target,)
    is_update = mutation.kind == "step" or (
        not mutation.grad_enabled and any(t.param or (t.leaf and t.requires_grad) for t in written))
    if not is_update:
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        if mutation.mixed is not None:
            yield _mixed(mutation, mutation.mixed)
        return
    save = conflict.save
    place = line_to_change(mutation)
    if place is not None:
        yield place
        return
    yield Finding(
        "GG101",
        mutation.node,
        Message.format(
            "{how} updates {label} in place while the graph built on {saved} (`{op}` saved {what}) is still waiting "
            'for its backward; {raises} "{torch}". {advice}',
            how=mutation.how, label=_updated(mutation), saved=save.node, op=save.op, what=_saved(save.role),
            raises=where_it_raises(conflict), torch=SAVED_MESSAGE, advice=advice(mutation, conflict)),
        certain=save.certain,
        related=conflict_related(conflict, mutation),
        mutation=mutation,
    )


def _stale_step(event: StaleStep) -> Finding:
    """A step applying gradients an earlier step of its optimizer applied (``inference/accumulation.py``)."""
    step, first = event.step, event.first
    earlier = (Message.text("its previous run") if first.node is step.node
               else Message.format("`{name}.step()` on {first}", name=first.name, first=first.node))
    what = Message.format(
        "`{name}.step()` on {step} applies gradients that {earlier} already applied: nothing cleared them since (no "
        "zero_grad(), no setting .grad to None), and backward() adds to a gradient that is there, so this step "
        "applies the earlier gradients again (silently)", name=step.name, step=step.node, earlier=earlier)
    related = [(step.node, Message.text("the step that applies them again"))]
    if first.node is not step.node:
        related.insert(0, (first.node, Message.text("the step that applied those gradients first")))
    if event.node is step.node:
        return Finding("GG101", step.node, Message.format("{what}; clear them after each step (`{name}.zero_grad()`).",
                                                          what=what, name=step.name), related=related,
                       data={"stale": event})
    return Finding(
        "GG101", event.node,
        Message.format("This backward adds to gradients that still hold what an optimizer step already applied: "
                       "clear them before it (`{name}.zero_grad()`). In detail: {what}.", name=step.name, what=what),
        related=related, data={"stale": event})


def _replaced_copy(load: LoadedCopy) -> Finding:
    """A copy loaded with a module's weights, replaced by that module before it ran (``inference/loaded_copies.py``)."""
    stored = load.replaced
    what = (Message.format("`{target}`", target=ast.unparse(stored.targets[0]))
            if isinstance(stored, ast.Assign) and len(stored.targets) == 1 else Message.text("the name"))
    return Finding(
        "GG101", stored,
        Message.format(
            "This assignment drops the module that {load} filled with this module's weights, before that copy "
            "computed anything, and stores the module being trained itself in its place: every optimizer step (the "
            "step on {step}) now changes what is read through {what}, so the copy no longer stays fixed (silently). "
            "Keep the copy (remove this assignment).", load=load.node, step=load.step.node, what=what),
        related=[(load.node, Message.text("the weights are copied here")),
                 (load.step.node, Message.text("an optimizer step that changes the module the name now holds"))],
        data={"replaced": load})


def line_to_change(mutation: Mutation) -> Finding | None:
    """Where an update between two backwards is to be mended, when that is not the update itself: the first op
    after it that builds on a value computed before it and shared with the backward before it (``fake_out``
    of the discriminator's loss, reused in the generator's after ``opt_D.step()``; a recurrent state carried to
    the next step).  That value is to be computed again there; it is named in the function that runs the
    update (a helper's call site).  A value made for the failing backward alone leaves the update as the line:
    run that backward before it."""
    use, conflict = mutation.stale_use, mutation.stale_conflict
    if use is None and mutation.early_forward is not None:
        return _computed_too_early(mutation, mutation.early_forward)
    if use is None or conflict is None or (use.node.lineno == conflict.sink.node.lineno
                                           and other_file(use.node) is None):
        return None  # `out.pow(2).mean().backward()`: the use is the backward's own loss; the update is the line
    save = conflict.save
    node = in_function_of(use.path, use.node, mutation.call_path())
    detach = mutation.stale_detach
    if detach is not None:
        node = in_function_of(detach.path, detach.node, mutation.call_path())
        return Finding(
            "GG101", node,
            Message.format(
                "{this} cuts the state the loop carries across {how} on {step}, but only after that loop has run "
                "the update again: within it, the backward on {sink} still runs back through the graph built before "
                "the update (its graph holds the weights `{op}` saved on {saved}, and {how} updates its parameters in place), "
                "and raises \"{torch}\". Detach the state in the loop that updates, before each forward, so that "
                "each backward stops there.",
                this=_said(node, "this line"), how=mutation.how, step=mutation.node, sink=conflict.sink.node,
                op=save.op, saved=save.node, torch=SAVED_MESSAGE),
            certain=save.certain,
            related=[(in_function_of(use.path, use.node, mutation.call_path()), "the carried state is used here"),
                     (mutation.node, f"{mutation.how} updates the weights in place here"),
                     *conflict_related(conflict, mutation)],
            mutation=mutation)
    kept = mutation.stale_kept
    if kept is not None:
        return Finding(
            "GG101", kept.store,
            Message.format(
                "{this} keeps a tensor on the object together with its graph (which holds the weights `{op}` saved "
                "on {saved}); it is read back on {read} after {how} on {step} updated {label} in place, and the loss "
                "built on it fails: {raises} \"{torch}\". Compute it again on each call instead of keeping it, or "
                "keep it detached (`.detach()`) if no gradient should flow through it.",
                this=_said(kept.store, "this line"), op=save.op, saved=save.node, read=kept.read, how=mutation.how,
                step=mutation.node, label=_updated(mutation), raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
            certain=save.certain,
            related=[(kept.read, "the kept tensor is read again here"),
                     (mutation.node, f"{mutation.how} updates the weights in place here"),
                     *conflict_related(conflict, mutation)],
            mutation=mutation)
    if mutation.stale_carried:
        return Finding(
            "GG101", node,
            Message.format(
                "{this} builds on a value computed before {how} on {step} updates {label} in place, and carried "
                "by the loop into this iteration (its graph holds the weights `{op}` saved on {saved}); {raises} "
                "\"{torch}\". Compute that value again after the update (where the loop carries it over), so "
                "that this iteration's loss is built on the updated weights.",
                this=_said(node, "this line"), how=mutation.how, step=mutation.node, label=_updated(mutation),
                op=save.op, saved=save.node, raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
            certain=save.certain,
            related=[(mutation.node, f"{mutation.how} updates the weights in place here"),
                     *conflict_related(conflict, mutation)],
            mutation=mutation)
    return Finding(
        "GG101", node,
        Message.format(
            "{this} builds on a value computed, and already used by a backward, before {how} on {step} updates "
            "{label} in place (its graph holds the weights `{op}` saved on {saved}); {raises} \"{torch}\". {advice}",
            this=_said(node, "this line"), how=mutation.how, step=mutation.node, label=_updated(mutation),
            op=save.op, saved=save.node, raises=where_it_raises(conflict), torch=SAVED_MESSAGE,
            advice=advice(mutation, conflict)),
        certain=save.certain,
        related=[(mutation.node, f"{mutation.how} updates the weights in place here"),
                 *conflict_related(conflict, mutation)],
        mutation=mutation)


def _computed_too_early(mutation: Mutation, conflict) -> Finding:
    """The failing loss's forward, computed before a call that backpropagates another loss and steps (a policy's
    loss computed through the critics before ``update(q_optim, q_loss)``), where that loss is trained by an update
    of other parameters: the function that makes the call cannot move the step alone; the forward is the line to
    compute after the call."""
    save, sink = conflict.save, conflict.sink
    path = mutation.call_path()
    node = in_function_of(save.path, save.node, path)
    call = in_function_of(tuple(path), mutation.node, list(save.path))
    backward = in_function_of(sink.path, sink.node, list(save.path))
    waits = Message.format("the backward on {sink}" if backward is sink.node else
                           "the backward run by the call on {call} ({sink})",
                           sink=sink.node, call=backward)
    return Finding(
        "GG101", node,
        Message.format(
            "{this} computes a forward whose graph (with the weights `{op}` saved on {saved}) waits for {waits}, but "
            "the call on {call} runs before that backward: it backpropagates another loss, which does "
            "not run through this graph, and {how} in it updates {label} in place; {raises} \"{torch}\". Compute "
            "this after that call, so that the loss built on it uses the updated weights.",
            this=_said(node, "this line"), op=save.op, saved=save.node, waits=waits, call=call,
            how=mutation.how, label=_updated(mutation), raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
        certain=save.certain,
        related=[(call, "this call backpropagates another loss and updates the weights"),
                 (mutation.node, f"{mutation.how} updates the weights in place here"),
                 *conflict_related(conflict, mutation)],
        mutation=mutation)


def _mixed(mutation: Mutation, mixed) -> Finding:
    """A value computed through the parameters before their update, combined after it with one computed through
    the updated parameters (a TD error taken with a target from the critic before its step and a value from the
    critic after it), and used only detached: nothing raises, but it is the value of neither set of weights."""
    use, save = mixed.use, mixed.save
    node = in_function_of(use.path, use.node, mutation.call_path())
    return Finding(
        "GG101", node,
        Message.format(
            "{this} combines a value computed before {how} on {step} updated {label} in place (its graph holds the "
            "weights `{op}` saved on {saved}) with a value computed through the updated weights after it, so it "
            "belongs to neither: it mixes the weights before and after the update. It is used detached on {cut}, in "
            "the loss the backward on {sink} differentiates, so nothing raises and that loss's gradients are not "
            "the ones of either weights. Compute both parts before the update (or both after it).",
            this=_said(node, "this line"), how=mutation.how, step=mutation.node, label=_updated(mutation),
            op=save.op, saved=save.node, cut=mixed.cut, sink=mixed.sink.node),
        certain=save.certain,
        related=[(mutation.node, f"{mutation.how} updates the weights in place here"),
                 (save.node, f"{save.op} saves its weight for the value computed before the update here"),
                 (mixed.cut, "the mixed value is detached here"),
                 (mixed.sink.node, "the backward of the loss built on it")],
        mutation=mutation)


def _said(node: ast.AST, fallback: str) -> str:
    text = ast.unparse(node)
    return f"`{text}`" if len(text) <= 60 else fallback


def advice(mutation: Mutation, conflict) -> Message:
    """What to do, chosen by what the event shows; the situation is named only as far as the event shows it, and
    a fact it does not record is a condition in the advice, never a guess:

    - a recurrent state carried across steps: a recurrent layer's save, reached by a backward that comes before
      the step in the code and runs after it (the loop's next iteration);
    - a GAN's generated sample fed to the discriminator: every weight the step updates was saved by one forward,
      its first layer's too, so that network's input requires grad (whether it is another network's output, the
      event does not record: the advice says "if");
    - two losses on a shared trunk: the step updates weights this backward reads and weights, saved in a forward
      still pending, that it does not (another head);
    - a second loss backwarded after a step: a backward ran before the step (whether through this graph, the
      event does not record: the advice says "if");
    - otherwise (no backward before the update, or the graph leaves the function): the generic advice."""
    sink, save = conflict.sink, conflict.save
    update = "the step" if mutation.kind == "step" else "the update"
    if sink.kind != "backward" or not mutation.after_backward:
        return Message.text(f"Move {update} after every backward that needs this graph, or compute the forward "
                            f"again after {update}.")
    same_sink = [c for c in mutation.conflicts if c.sink is sink]
    again = sink.node.lineno <= getattr(mutation.entry(), "lineno", 0) and sink.seq > mutation.seq
    # A recurrent layer's save that a backward reached again after the step, at a backward that comes before the
    # step in the code, is a state carried from one chunk of a sequence to the next.
    recurrent = next((c.save for c in same_sink if c.save.op in RECURRENT_LAYERS), None)
    if again and recurrent is not None:
        return Message.format(
            "This backward, run again by the loop after {update}, reaches the graph `{op}` built on {cell} in an "
            "earlier iteration, through a value the loop carries across {update} (a recurrent state, as in "
            "truncated BPTT): detach that state where each chunk begins (`h = h.detach()` for a state `h`), so that "
            "each backward stops at the chunk boundary; `retain_graph=True` is then not needed.",
            update=update, op=recurrent.op, cell=recurrent.node)
    params = [t for t in (mutation.target.group or (mutation.target,)) if t.param]
    saved = {c.save.storage.id for c in same_sink if c.save.role == "weight"}
    if params and {t.storage.id for t in params} <= saved:
        call = _one_argument_call(save.node)
        detached = (f"`{ast.unparse(call.func)}({ast.unparse(call.args[0])}.detach())`" if call is not None
                    else "`D(fake.detach())` in the usual GAN loop")
        forward = f"`{ast.unparse(call)}`" if call is not None else "its forward"
        return Message.format(
            "Every weight {update} changes was saved for backward on {saved}, which a layer does only when its "
            "input requires grad: that network's input does. If that input is another network's output (a GAN's generated sample fed to its discriminator), "
            "compute {forward} again after {update} for the loss that trains the other network, and give the "
            "updated network's own loss a detached input ({detached}); if not, run every backward that needs this "
            "graph before {update}.", update=update, saved=save.node, detached=detached, forward=forward)
    reached = {c.save.storage.id for c in same_sink}
    head = next((p for p in mutation.pending if p.role == "weight" and p.id not in sink.graph
                 and p.storage.id not in reached), None)
    if head is not None:
        return Message.format(
            "{Update} changes weights this backward reads (saved on {saved}) and weights it does not (saved on "
            "{head}). If the losses share a trunk and part ways at their heads (actor-critic, multi-task), run "
            "every backward (or one backward of the losses' sum) before {update}, or compute the trunk's forward "
            "again after it.", Update=update.capitalize(), update=update, saved=save.node, head=head.node)
    return Message.format(
        "A backward ran before {update}, and this one, after it, goes through a graph built before it. If this is "
        "a second loss of the graph that backward used, compute both losses and run every backward (or one "
        "backward of their sum) before {update}; if not, compute the forward again after {update}.", update=update)


def _one_argument_call(node: ast.AST) -> ast.Call | None:
    """``D(fake)``, ``critic(G(z))``: a call of a named network on one input (not a layer inside its forward)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1 and not node.keywords \
            and not isinstance(node.args[0], ast.Starred):
        return node
    return None


def _saved(role: str) -> str:
    return {"weight": "a weight", "output": "its output"}.get(role, "an input")


def _updated(mutation: Mutation) -> str:
    """What the write updates: a step updates its optimizer's parameters (the step already names the optimizer)."""
    return "its parameters" if mutation.kind == "step" else mutation.target.label


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix:
    """GG101, the first that applies: run the step (or the update) after the last backward that needs the old
    weights; compute an early forward after the step instead, or in the loop of per-loss steps; in a
    truncated-BPTT loop kept alive with ``retain_graph=True``, cut the graph between chunks."""
    if "stale" in finding.data:
        return _clear_before_backward(ctx, finding, finding.data["stale"])
    if "replaced" in finding.data:
        return _keep_loaded_copy(ctx, finding.node)
    mutation = mutation_in(finding)
    if not mutation.conflicts and mutation.mixed is not None:
        return _mixed_before_update(ctx, mutation, finding)
    if mutation.stale_kept is not None:
        return _compute_kept_anew(ctx, mutation, finding)
    # A loss computed too early is mended by computing it later: running the update after its backward would
    # apply that loss's gradients too.
    early = mutation.stale_use is None and mutation.early_forward is not None
    for attempt in (lambda: _refuse("the loss was computed too early") if early
                    else move_after_backward(ctx, mutation, "Update after the backward"),
                    lambda: _backward_once(ctx, mutation),
                    lambda: _forward_after_step(ctx, mutation, finding.code),
                    lambda: _forward_into_loop(ctx, mutation, finding.code),
                    lambda: _detach_in_loop_that_steps(ctx, mutation, finding),
                    lambda: _carried_again_after_step(ctx, mutation, finding),
                    lambda: _made_again_each_iteration(ctx, mutation, finding),
                    lambda: _refuse("the loss was computed too early") if early
                    else _step_after_later_backward(ctx, mutation, finding.code)):
        try:
            return attempt()
        except CannotFix:
            pass
    return _detach_between_chunks(ctx, mutation)


def _backward_before_block_exit(ctx: FixContext, finding: Finding) -> Fix:
    """An update a ``with`` block runs as it ends (a context manager's code after its ``yield``, an ``__exit__``:
    weights restored, a copy written back), before the backward after the block that needs the weights the forward
    in the block saved: the statements from the block's end to that backward move into the block, at its end, so
    that the backward runs before the update::

        with averaged_weights(model, avg) as m:           with averaged_weights(model, avg) as m:
            loss = m(x).pow(2).mean()               ->        loss = m(x).pow(2).mean()
        loss.backward()                                       loss.backward()

    Only when the update breaks one backward, a statement of the block that holds the ``with``, below it; the
    statements moved are plain ones that call nothing but that backward and code known to compute on values; and
    the finding is gone with them.  Unsafe: the block's exit now runs after the backward (code there sees the
    gradients it gave)."""
    mutation = mutation_in(finding)
    path = mutation.call_path()
    block_with = next((s for s in path if isinstance(s, (ast.With, ast.AsyncWith))), None)
    sinks = {id(c.sink.node): c.sink for c in mutation.conflicts}
    if block_with is None or len(sinks) != 1 or next(iter(sinks.values())).kind != "backward":
        raise CannotFix("not an update at a `with` block's exit before one backward")
    (sink,) = sinks.values()
    block = block_around(ctx, block_with) or []
    k = next((i for i, st in enumerate(block) if st is block_with), None)
    j = next((i for i, st in enumerate(block) if k is not None and i > k and ctx.inside(sink.node, st)), None)
    if j is None or sink.path != tuple(path[:path.index(block_with)]):
        raise CannotFix("the backward is not below the `with` in its block")
    moved = block[k + 1:j + 1]
    for st in moved:
        if not isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) or any(
                isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Lambda))
                for n in statements.every_node(st)):
            raise CannotFix("the statements up to the backward are not plain statements")
        if any(c is not sink.node and not value_only_call(ctx, c) for c in statements.calls(st)):
            raise CannotFix("the statements up to the backward call code that may read the weights")
        ctx.require_own_lines(st)
    ctx.require_own_lines(block_with)
    # (the lines from the block's end to the backward, blank lines and comments too, indented as the block's body)
    inner, outer = ctx.indent_of(block_with.body[0]), ctx.indent_of(moved[0])
    lines = ctx.lines[block_with.end_lineno:moved[-1].end_lineno]
    if any(line.strip() and not line.startswith(outer) and not line.lstrip().startswith("#") for line in lines):
        raise CannotFix("a line to move is indented less than its statement")
    text = "".join(inner + (line[len(outer):] if line.startswith(outer) else line.lstrip()).rstrip("\r\n")
                   + ctx.newline if line.strip() else ctx.newline for line in lines)
    edits = [TextEdit(block_with.end_lineno + 1, 1, moved[-1].end_lineno + 1, 1, text)]
    caller = line_after(edits, mutation.frames[0][0].lineno) if mutation.frames else None
    if ctx.still_found(apply_edits(ctx.text, edits), FindingId(finding.code, line_after(edits, mutation.entry().lineno),
                                                               None, caller)):
        raise CannotFix("the backward, moved into the block, still runs after the update")
    return Fix(f"Backpropagate in the `with` block, before its exit updates the weights: move "
               f"`{ctx.source(moved[-1]).splitlines()[0][:60]}` into it (unsafe: the block's exit then runs after "
               "the backward)", False, tuple(edits))


fix.at_block_exit = _backward_before_block_exit  # the fix of a write a `with` block's exit makes (autofix.build.Fixer)


def _compute_kept_anew(ctx: FixContext, mutation: Mutation, finding: Finding) -> Fix:
    """A value an object keeps across steps, graph and all, filled on the first call only (``if self.cache is
    None: self.cache = encoder(ids)``): the guard goes, so that each call computes the value with the weights it
    has then::

        if self.cache is None:                  ->    self.cache = encoder(ids)
            self.cache = encoder(ids)

    Only a guard ``if <the kept attribute> is None:`` with no ``else``, whose body is that one assignment, and only
    when the finding is gone with it.  Unsafe: the value is computed again on every call, and its gradients flow at
    every step (keeping it detached, the other choice, would stop them instead)."""
    inner = mutation.stale_kept.store
    if not (isinstance(inner, ast.Assign) and len(inner.targets) == 1 and is_dotted(inner.targets[0])):
        raise CannotFix("the kept value is not stored by a plain assignment")
    target = ast.unparse(inner.targets[0])

    def guards(store: ast.stmt) -> bool:
        guard = ctx.parents.get(store)
        test = guard.test if isinstance(guard, ast.If) else None
        return (isinstance(test, ast.Compare) and guard.body[-1] is store and not guard.orelse and len(test.ops) == 1
                and all(_makes_callee(ctx, st, store) for st in guard.body[:-1])
                and isinstance(test.ops[0], ast.Is) and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None and ast.unparse(test.left) == target)

    # (the assignment, or the statement around it alone that the guard holds: `with ...:`, kept as it is)
    store = next((u for u in units(ctx, inner) if guards(u)), None)
    fn = ctx.function_of(inner)
    if store is None and fn is not None and [st for st in fn.body if not (
            isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))] == [inner]:
        # A function whose body is only that assignment (a helper, a closure, a method), called once, alone in
        # the guard of the function that calls it: that call is what the guard holds
        calls = calls_of(ctx, fn, isinstance(ctx.parents.get(fn), ast.ClassDef))
        named = _named_in_caller(ctx, fn, calls[0], target) if len(calls) == 1 else None
        call = ctx.statement_of(calls[0])
        alone = statements.sole_statement(call)
        if named is not None and isinstance(alone, ast.Expr) and alone.value is calls[0]:
            target = named
            store = next((u for u in units(ctx, call) if guards(u)), None)
    if store is None:
        raise CannotFix("the kept value is not filled under an `if <it> is None:` of its own")
    guard = ctx.parents[store]
    for st in (guard, *guard.body):
        ctx.require_own_lines(st)
    outer, indent = ctx.indent_of(guard), ctx.indent_of(store)
    text = "".join(outer + line[len(indent):].rstrip("\r\n") + ctx.newline if line.strip() else ctx.newline
                   for line in ctx.lines[guard.body[0].lineno - 1:store.end_lineno])
    edits = (TextEdit(guard.lineno, 1, guard.end_lineno + 1, 1, text),)
    entry = mutation.entry()
    caller = line_after(edits, mutation.frames[0][0].lineno) if mutation.frames else None
    if ctx.still_found(apply_edits(ctx.text, list(edits)), FindingId(finding.code, line_after(edits, entry.lineno),
                                                                     None, caller)):
        raise CannotFix("computing the value on each call leaves the step breaking a graph")
    return Fix(f"Compute `{target[:60]}` anew on each call: drop its `if ... is None:` cache (unsafe: it is computed "
               "again at every call, and its gradients flow at every step)", False, edits)


def _makes_callee(ctx: FixContext, st: ast.stmt, call: ast.stmt) -> bool:
    """``st`` only binds the name the statement ``call`` calls, and runs nothing of the code: a ``def`` of it (no
    decorator, no default), or an instance of a class of this file without an ``__init__`` of its own, made with no
    argument."""
    func = getattr(getattr(statements.sole_statement(call), "value", None), "func", None)
    name = func.id if isinstance(func, ast.Name) else None
    if isinstance(st, FUNCTIONS):
        return st.name == name and not st.decorator_list and not st.args.defaults and not st.args.kw_defaults
    made = st.value if isinstance(st, ast.Assign) and [ast.unparse(t) for t in st.targets] == [name] else None
    if not (isinstance(made, ast.Call) and isinstance(made.func, ast.Name) and not made.args and not made.keywords):
        return False
    classes = ctx.names_in(ctx.tree).definitions.get(made.func.id, ())
    return len(classes) == 1 and isinstance(classes[0], ast.ClassDef) and not any(
        isinstance(n, FUNCTIONS) and n.name == "__init__" for n in classes[0].body)


def _mixed_before_update(ctx: FixContext, mutation: Mutation, finding: Finding) -> Fix:
    """A value that mixes weights from before an update and after it (``td_delta = td_target - critic(s)`` after
    the critic's step, ``td_target`` from before it), used only detached: the statement that computes it moves
    above the update (the statement of its block that holds it), so that both parts use the weights before it, as
    the loss was meant to (the TD error of the critic the target came from)::

        critic_loss.backward()                        critic_loss.backward()
        critic_opt.step()                      ->     td_delta = td_target - critic(s)
        td_delta = td_target - critic(s)              critic_opt.step()

    Only a plain assignment of the update's block, after it, whose reads nothing between changes (rebinds,
    stores into, changes in place or hands to code that may), whose names nothing between reads or binds, and
    only when the finding is gone with it.  Unsafe: the value, and the loss weighed by it, change (computing the
    earlier part again after the update instead would be the other choice)."""
    inner = ctx.statement_of(finding.node)
    update = in_function_of(tuple(mutation.call_path()), mutation.node, list(mutation.mixed.use.path))
    # The assignment, or the statement around it alone (an `if`, a `with`) that shares a block with the update
    use = next((u for u in units(ctx, inner) if any(ctx.inside(update, st) for st in block_around(ctx, u) or [])),
               inner)
    block = block_around(ctx, use) or []
    k = next((k for k, st in enumerate(block) if ctx.inside(update, st)), None)
    u = next((k for k, st in enumerate(block) if st is use), None)
    if k is None or u is None or k >= u or not isinstance(inner, (ast.Assign, ast.AnnAssign)):
        raise CannotFix("the mixed value is not a plain assignment after the update in its block")
    # (what makes the function the assignment calls, just before it, moves with it: a `def`, an instance)
    made: list[ast.stmt] = []
    while u - len(made) - 1 > k and _makes_callee(ctx, block[u - len(made) - 1], use):
        made.insert(0, block[u - len(made) - 1])
    moved = [*made, use]
    reads = set().union(*(statements.names_read(st) for st in moved))
    writes = set().union(*(statements.names_bound(st) for st in moved)) | {st.name for st in made
                                                                           if isinstance(st, FUNCTIONS)}
    between = block[k + 1:u - len(made)]
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr, ast.Lambda))
           for st in moved for n in statements.every_node(st)):
        raise CannotFix("the assignment does more than compute a value")
    for st in [block[k], *between]:
        if (statements.names_bound(st) | _stored_into(st)) & reads or (statements.names_read(st) | statements.names_bound(st)) & writes:
            raise CannotFix("the statements between share names with the assignment")
    for st in between:
        for n in statements.every_node(st):
            if isinstance(n, ast.Call) and not (
                    value_only_call(ctx, n) and not (isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_"))
                    or isinstance(n.func, ast.Attribute) and n.func.attr in ("backward", "zero_grad", "step")
                    and is_dotted(n.func.value) and not any(isinstance(a, ast.Starred) for a in n.args)
                    and not (statements.names_read(n) - {dotted_root(n.func.value)}) & reads):
                raise CannotFix("a call between may change what the assignment reads")
    for st in (*moved, block[k]):
        ctx.require_own_lines(st)
    text = "".join(line.rstrip("\r\n") + ctx.newline for line in ctx.lines[moved[0].lineno - 1:use.end_lineno])
    edits = (TextEdit(block[k].lineno, 1, block[k].lineno, 1, text),
             TextEdit(moved[0].lineno, 1, use.end_lineno + 1, 1, ""))
    caller = line_after(edits, mutation.frames[0][0].lineno) if mutation.frames else None
    found = FindingId(finding.code, line_after(edits, mutation.entry().lineno), None, caller)
    if ctx.still_found(apply_edits(ctx.text, list(edits)), found):
        raise CannotFix("computing the value before the update leaves it mixed")
    shown = ctx.source(inner).splitlines()[0]
    return Fix(f"Compute `{shown[:60]}` before the update, both parts with the weights it had (unsafe: the value, "
               "and the loss weighed by it, change)", False, edits)



def _clear_before_backward(ctx: FixContext, finding: Finding, event: StaleStep) -> Fix:
    """Gradients a step applies again: clear the step's optimizer's gradients just before the backward
    (``opt.zero_grad()``), when the backward and the step are statements of one block, the step a plain
    ``<name>.step()`` statement, and nothing earlier in the block runs a backward, writes a ``.grad`` or rebinds the
    optimizer (gradients meant to add up would be cleared too).  Unsafe: gradients accumulated on purpose across
    steps no longer are."""
    call = event.step.node
    if finding.node is call:
        raise CannotFix("no backward before the step in its function: where the gradients should be cleared is "
                        "the author's choice")
    inner = ctx.statement_of(call)
    backward, step = _units_in_one_block(ctx, ctx.statement_of(finding.node), inner)
    block = block_around(ctx, step) if backward is not None else None
    if block is None or not (
            isinstance(inner, ast.Expr) and inner.value is call and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute) and not call.args and not call.keywords
            and is_dotted(call.func.value)):
        raise CannotFix("the backward and a plain step are not statements of one block")
    i, k = block.index(backward), block.index(step)
    name = ast.unparse(call.func.value)
    if i > k or any(_runs_backward_or_stores(n, name, before=j < i) for j, st in enumerate(block[:k + 1])
                    for n in statements.every_node(st)):
        raise CannotFix("an earlier backward or write of the gradients in the block: they may be meant to add up")
    ctx.require_own_lines(backward)
    edit = TextEdit(backward.lineno, 1, backward.lineno, 1, f"{ctx.indent_of(backward)}{name}.zero_grad(){ctx.newline}")
    return Fix(f"Clear the gradients before the backward: `{name}.zero_grad()` (unsafe: gradients meant to add up "
               "across steps no longer do)", False, (edit,))


def _keep_loaded_copy(ctx: FixContext, stmt: ast.stmt) -> Fix:
    """``target = online`` after ``target.load_state_dict(online.state_dict())``: remove the assignment (``pass`` when
    it is its block's only statement), keeping the copy the load filled.  The module stored is a call's result
    (``teacher = refresh(teacher, student)``, a helper that loads and returns the module trained): the call stays,
    as a statement of its own, and only the binding of its result goes."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and is_dotted(stmt.targets[0])
            and (is_dotted(stmt.value) or isinstance(stmt.value, ast.Call))):
        raise CannotFix("not a plain assignment of one name or attribute")
    ctx.require_own_lines(stmt)
    block = block_around(ctx, stmt)
    if block is None:
        raise CannotFix("not a statement of a block")
    target, online = ast.unparse(stmt.targets[0]), ast.unparse(stmt.value)
    if isinstance(stmt.value, ast.Call):
        keep, what = f"{ctx.indent_of(stmt)}{ctx.source(stmt.value)}{ctx.newline}", f"`{target} = ` before `{online[:60]}`"
    else:
        keep, what = f"{ctx.indent_of(stmt)}pass{ctx.newline}" if len(block) == 1 else "", f"`{target} = {online}`"
    return Fix(f"Keep the loaded copy: remove {what} (unsafe: code that relies on the two names "
               "holding one module changes)", False, (TextEdit(stmt.lineno, 1, stmt.end_lineno + 1, 1, keep),))


def _units_in_one_block(ctx: FixContext, a: ast.stmt, b: ast.stmt) -> tuple[ast.stmt | None, ast.stmt | None]:
    """A unit of ``a`` and one of ``b`` (``units``) that are statements of one block, the innermost such."""
    for ub in units(ctx, b):
        block = block_around(ctx, ub) or []
        ua = next((u for u in units(ctx, a) if any(st is u for st in block)), None)
        if ua is not None:
            return ua, ub
    return None, None


def _runs_backward_or_stores(n: ast.AST, chain: str, before: bool) -> bool:
    """A binding of the optimizer ``chain`` (or the name it starts from); ``before`` the backward, also a backward
    call or a write of a ``.grad``."""
    if before and isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward":
        return True
    if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
        return (before and isinstance(n, ast.Attribute) and n.attr == "grad") or \
            ast.unparse(n) in (chain, chain.split(".")[0])
    return False


def _refuse(why: str) -> Fix:
    raise CannotFix(why)


def _backward_once(ctx: FixContext, mutation: Mutation) -> Fix:
    """One loss backpropagated twice, with the step between (``opt_c.zero_grad(); loss.backward(retain_graph=True);
    opt_c.step(); opt_a.zero_grad(); loss.backward(); opt_a.step()``): both backwards compute the same gradients,
    the second through weights the step changed.  Drop the first backward and run the step after the second::

        opt_c.zero_grad()                             opt_c.zero_grad()
        loss.backward(retain_graph=True)              opt_a.zero_grad()
        opt_c.step()                           ->     loss.backward()
        opt_a.zero_grad()                             opt_c.step()
        loss.backward()                               opt_a.step()

    Every step applies what it applied before: the step's gradients were cleared just before the first backward
    (``opt_c.zero_grad()`` there), so they hold that loss's gradients, once, in both; the ``zero_grad()``s between
    (the only other statements allowed there) run before the one backward, and every later step of the block is of
    an optimizer they cleared.  Unsafe: a gradient none of them cleared now holds one backward's, not two."""
    sinks = {id(c.sink.node): c.sink for c in mutation.conflicts}
    if mutation.kind != "step" or len(sinks) != 1:
        raise CannotFix("not an optimizer step before one backward")
    (sink,) = sinks.values()
    # The statements, or those around them alone (`if True:`, `with ...:`) that share a block
    second, step = _units_in_one_block(ctx, ctx.statement_of(sink.node), ctx.statement_of(mutation.entry())) \
        if sink.kind == "backward" else (None, None)
    block = block_around(ctx, step) or [] if step is not None else []
    i = next((k for k, st in enumerate(block) if st is step), None)
    j = next((k for k, st in enumerate(block) if st is second), None)
    loss = _backward_of(_plain(ctx, second))
    stepped = _step_of(ctx, mutation, _plain(ctx, step)) if step is not None else None
    if i is None or j is None or j < i or loss is None or stepped is None:
        raise CannotFix("the step and the backward are not plain statements of one block")
    h = i - 1
    if h < 0 or _backward_of(_plain(ctx, block[h])) != loss:
        raise CannotFix("the statement before the step is not a backward of the same loss")
    cleared = [_method_of(_plain(ctx, st), "zero_grad") for st in block[i + 1:j]]
    if None in cleared:
        raise CannotFix("statements other than `zero_grad()` run between the step and the backward")
    before = []
    for st in reversed(block[:h]):
        chain = _method_of(_plain(ctx, st), "zero_grad")
        if chain is None:
            break
        before.append(chain)
    if stepped not in before:
        raise CannotFix("the step's gradients are not cleared just before the first backward")
    later = [n.func.value for st in block[j + 1:] for n in statements.every_node(st)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"]
    if any(ast.unparse(chain) not in cleared for chain in later):
        raise CannotFix("a later step applies gradients the second backward would add to a second time")
    for st in (block[h], step, second):
        ctx.require_own_lines(st)
    edits = move_statements_after(ctx, [block[h], step], [step], second)
    return Fix(f"Backpropagate `{loss}` once: run `{ctx.source(_plain(ctx, step))[:60]}` after its last backward (unsafe: "
               "gradients no `zero_grad()` between cleared now hold one backward's, not two)", False, tuple(edits))


def _step_after_later_backward(ctx: FixContext, mutation: Mutation, code: str) -> Fix:
    """An optimizer step between a backward it applies and a later backward that needs the weights it updates
    (a critic's step before the actor's loss through the critic's values, a discriminator's step before the
    generator's loss through it): the step moves just below the later backward (below the statement of the
    step's block that holds it: an ``if`` that guards it)::

        value_loss.backward(retain_graph=True)        value_loss.backward(retain_graph=True)
        value_opt.step()                        ->    actor_loss = -target.mean()
        actor_loss = -target.mean()                   actor_opt.zero_grad()
        actor_opt.zero_grad()                         actor_loss.backward()
        actor_loss.backward()                         value_opt.step()

    What the step passes over is read from the run (``Mutation.touched_after``) and the code: no clear, step or
    read of its parameters' gradients, no backward but those it breaks, no forward through its parameters;
    only plain statements (and ``if``s) whose calls are the backwards it breaks, other optimizers' ``zero_grad()``
    and ``step()``, and calls known to compute on tensor values.  Offered only when the analysis of the moved code
    finds nothing left.  Unsafe: the later backward adds its gradients of the step's parameters before the step,
    which then applies them too (the order of the usual GAN and actor-critic loops)."""
    if mutation.kind != "step" or mutation.touched_after is None:
        raise CannotFix("not an optimizer step whose later gradients the run shows")
    # (the step, or the call of the helper that steps, in the function of the backwards it breaks)
    sink_path = {c.sink.path for c in mutation.conflicts}
    inner = ctx.statement_of(in_function_of(tuple(mutation.call_path()), mutation.node, list(min(sink_path, key=len))))
    chain = _step_of(ctx, mutation, inner) if len(sink_path) == 1 else None
    if chain is None or block_around(ctx, inner) is None:
        raise CannotFix("the step is not a plain `opt.step()` statement of a block, or a call of a helper that only steps")
    path = mutation.call_path()
    sinks = [in_function_of(c.sink.path, c.sink.node, path) for c in mutation.conflicts if c.sink.kind == "backward"]
    if len(sinks) != len(mutation.conflicts):
        raise CannotFix("the graph is not backpropagated here")
    # The step, or the statement around it alone (`if`, `with`) that shares a block with the backwards: it moves whole
    for step in units(ctx, inner):
        block = block_around(ctx, step) or []
        i = next(k for k, st in enumerate(block) if st is step)
        downs = [next((k for k in range(i + 1, len(block)) if ctx.inside(s, block[k])), None) for s in sinks]
        if None not in downs:
            break
    if None in downs:
        raise CannotFix("a backward it breaks is not after the step in its block")
    region = block[i + 1:max(downs) + 1]
    root = chain.split(".")[0]
    for st in region:
        for n in statements.every_node(st):
            if isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Raise, ast.Yield, ast.YieldFrom, ast.Await,
                              ast.Lambda, *FUNCTIONS, ast.ClassDef, ast.Global, ast.Nonlocal)) \
                    or isinstance(n, ast.stmt) and not isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign,
                                                                       ast.Expr, ast.If, ast.Pass)):
                raise CannotFix("the statements the step would pass over are not plain statements")
            if isinstance(n, ast.Attribute) and n.attr in ("grad", "main_grad", "weight", "bias", "data"):
                # (a weight read by name computes with the values the step would write: `F.linear(x, fc.weight)`)
                raise CannotFix("the statements the step would pass over read a gradient or a weight")
            if isinstance(n, ast.Name) and n.id == root and not isinstance(n.ctx, ast.Load):
                raise CannotFix("the statements the step would pass over rebind its optimizer")
            if isinstance(n, ast.Call) and not (
                    any(n is s for s in sinks) or value_only_call(ctx, n) or isinstance(n.func, ast.Attribute)
                    and n.func.attr in ("zero_grad", "step") and is_dotted(n.func.value)
                    and ast.unparse(n.func.value) != chain):
                raise CannotFix("the statements the step would pass over call code that may read its weights")
    ran = set()
    for node, where, touches in mutation.touched_after:
        seen = in_function_of(where, node, path)
        ran.add(id(seen))
        if touches and any(ctx.inside(seen, st) for st in region):
            raise CannotFix("the statements the step would pass over touch its parameters or their gradients")
    # Every `zero_grad()` and `step()` passed over ran, so the run's facts speak for it.
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("zero_grad", "step")
           and id(n) not in ran for st in region for n in statements.every_node(st)):
        raise CannotFix("a `zero_grad()` or `step()` the step would pass over did not run in the analysis")
    down = region[-1]
    for st in (step, down):
        ctx.require_own_lines(st)
    edits = move_statements_after(ctx, [step], [step], down)

    def moved(node: ast.AST) -> int:  # the line of ``node`` once the step has moved
        return line_after(edits, down.end_lineno) + 1 + node.lineno - step.lineno if ctx.inside(node, step) \
            else line_after(edits, node.lineno)
    caller = moved(mutation.frames[0][0]) if mutation.frames else None
    if ctx.still_found(apply_edits(ctx.text, edits), FindingId(code, moved(mutation.entry()), None, caller)):
        raise CannotFix("the step, moved below the backward, still breaks a graph")
    return Fix(f"Step after the backward that needs the old weights: move `{ctx.source(inner)[:60]}` below "
               f"`{ctx.source(down).splitlines()[0][:60]}` (unsafe: the step then also applies the gradients that "
               "backward gives its parameters)", False, tuple(edits))


def _plain(ctx: FixContext, stmt: ast.stmt | None) -> ast.stmt | None:
    """The statement ``stmt`` runs alone (itself, or the one in an ``if True:``, a ``with``: ``units``), if any."""
    inner = statements.sole_statement(stmt) if stmt is not None else None
    return inner if inner is not None and any(u is stmt for u in units(ctx, inner)) else None


def _backward_of(stmt: ast.stmt | None) -> str | None:
    """``loss`` of a statement ``loss.backward()`` (``retain_graph=`` at most)."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "backward"
            and isinstance(call.func.value, ast.Name) and not call.args
            and all(k.arg == "retain_graph" and isinstance(k.value, ast.Constant) for k in call.keywords)):
        return call.func.value.id
    return None


def _step_of(ctx: FixContext, mutation: Mutation, stmt: ast.stmt | None) -> str | None:
    """The optimizer, as ``stmt`` of the function that runs the step names it, when ``stmt`` does that step and
    nothing else: ``opt.step()`` itself, or the call of the followed function (a helper, a closure, a method,
    ``__call__`` or ``forward`` of an instance) whose body is only the step (``def update(opt): opt.step()``), the
    optimizer then named there by its argument (or, free in a closure, by its own name)."""
    chain = _method_of(stmt, "step") if stmt is not None else None
    if chain is not None or not mutation.frames or stmt is None or not ctx.inside(mutation.frames[-1][0], stmt):
        return chain
    site, fn = mutation.frames[-1][0], ctx.function_of(mutation.node)
    body = [st for st in fn.body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))] if fn else []
    inner = _method_of(body[0], "step") if len(body) == 1 and body[0] is ctx.statement_of(mutation.node) else None
    alone = statements.sole_statement(stmt)
    if inner is None or not isinstance(alone, ast.Expr) or alone.value is not site:
        return None
    return _named_in_caller(ctx, fn, site, inner)


def _named_in_caller(ctx: FixContext, fn: ast.FunctionDef, site: ast.AST, chain: str) -> str | None:
    """``chain`` (``opt``, ``self.cache``) of the function ``fn``, as the function that makes its call ``site`` names
    it: through the argument bound to the parameter it starts from (after the instance's, for a method), or itself,
    free in a closure of that function."""
    if not isinstance(site, ast.Call) or any(isinstance(a, ast.Starred) for a in site.args) or site.keywords:
        return None
    root = chain.split(".")[0]
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if isinstance(ctx.parents.get(fn), ast.ClassDef):  # a method: its first parameter is the instance
        if fn.decorator_list:
            return None
        params = params[1:]
    if root in params:
        k = params.index(root)
        return ast.unparse(site.args[k]) + chain[len(root):] if k < len(site.args) and is_dotted(site.args[k]) \
            else None
    return chain if ctx.function_of(fn) is ctx.function_of(site) else None  # free in a closure of the caller


def _method_of(stmt: ast.stmt, method: str) -> str | None:
    """``opt`` of a statement ``opt.<method>()`` on a chain of names (``set_to_none=`` a constant at most)."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == method
            and is_dotted(call.func.value) and not call.args
            and all(k.arg == "set_to_none" and isinstance(k.value, ast.Constant) for k in call.keywords)):
        return ast.unparse(call.func.value)
    return None


def _forward_after_step(ctx: FixContext, mutation: Mutation, code: str) -> Fix:
    """The forward whose graph the step breaks was computed before the step (``g_logits = D(fake)`` before the
    discriminator's step): compute it after the step, so the backward runs through a graph of the updated
    weights.  Statements read only after the step move; one also read before it (``d_fake`` of both losses) may
    be computed again after the step; a candidate is offered only when the finding (``code``) is gone with it.  Unsafe: that forward now sees the new
    weights, which is what the usual GAN loop does, but not what the code said."""
    if len({id(c.sink.node) for c in mutation.conflicts}) != 1:
        raise CannotFix("not one backward in the step's block")
    sink = mutation.conflicts[0].sink
    if sink.kind != "backward":
        raise CannotFix("the graph is not backpropagated here")
    # The step, or the statement around it (`if`, `try`, `with`, a loop) that shares a block with the backward:
    # the forward moves below all of it.
    # A backward run inside a call (`update(opt, loss)`) is that call's statement in the step's function.
    downs = enclosing_statements(ctx, in_function_of(sink.path, sink.node, mutation.call_path()))
    block = i = down = step = None
    for up in enclosing_statements(ctx, ctx.statement_of(mutation.entry())):
        around = block_around(ctx, up) or []
        k = next((k for k, st in enumerate(around) if st is up), None)
        down = next((st for st in downs if k is not None and any(st is b for b in around[k + 1:])), None)
        if down is not None:
            block, i, step = around, k, up
            break
    if down is None:
        raise CannotFix("the backward is not after the step in its block")
    tried: list[tuple[list[ast.stmt], list[ast.stmt]]] = []

    def attempt(chained: bool) -> Fix | None:
        moved, kept = _forward_before(block, i, next(k for k, st in enumerate(block) if st is down), chained)
        if (moved, kept) in tried:
            return None  # the same statements as the first try
        tried.append((moved, kept))
        for st in [*moved, *kept]:
            # (or one in an `if`, a `with` alone, which moves, or is computed again, with it)
            inner = statements.sole_statement(st)
            if not isinstance(inner, (ast.Assign, ast.AnnAssign, ast.Expr)) or st not in units(ctx, inner):
                raise CannotFix("only plain statements are moved")
            ctx.require_own_lines(st)
        ctx.require_own_lines(step)
        if not isinstance(step, (ast.Assign, ast.AnnAssign, ast.Expr, ast.If, ast.Try, ast.With, *LOOPS)) or any(
                isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Raise, ast.Yield, ast.YieldFrom))
                for n in ast.walk(step)):
            raise CannotFix("control may leave the statement of the step")
        if any(statements.names_bound(st) & statements.names_read(step) for st in moved) \
                or any((statements.names_read(st) | statements.names_bound(st)) & statements.names_bound(step) for st in [*moved, *kept]):
            raise CannotFix("the statement of the step uses what the forward computes")
        # At most one statement is computed again: with more (a shared trunk's features and a critic's values),
        # what follows the step (an advantage target) changes meaning, not only its weights.  The one that made the
        # saved graph (`d_fake = D(fake)`) is tried first; a statement made between (`ones = torch.ones(...)`)
        # needs no recomputing, so it must not use up the one try.  One that another kept statement reads (`feat`,
        # read by `value = critic(feat)`) is never recomputed alone: the two would disagree after the step.
        saved = [c.save.node for c in mutation.conflicts]
        holds_graph = [st for st in kept if any(ctx.inside(n, st) for n in saved)]
        order = [*holds_graph, *(st for st in reversed(kept) if st not in holds_graph)]
        # Nor one whose result is changed in place before the step (`losses["d"] = ...`): computed again, it would lose
        # that change.
        alone = [st for st in order if not any(statements.names_bound(st) & statements.names_read(other) for other in kept if other is not st)
                 and not any(statements.names_bound(st) & _stored_into(b) for b in block[block.index(st) + 1:i])]
        for recomputed in ([], *([st] for st in alone)):
            after = sorted([*moved, *recomputed], key=lambda st: st.lineno)
            if not any(statements.calls(st) for st in after):
                continue
            edits = move_statements_after(ctx, moved, after, _latest_place(block, i, after))
            # Statements left before the step may hold part of the graph too: offer only what analyses clean.
            # The update's entry (the step, or a call below the helper that steps) and the backward are not moved:
            # found where the edits put their lines.
            entry, backward = line_after(edits, mutation.entry().lineno), line_after(edits, sink.node.lineno)
            caller = line_after(edits, mutation.frames[0][0].lineno) if mutation.frames else None
            if not ctx.still_found(apply_edits(ctx.text, edits), FindingId(code, entry, backward, caller)):
                shown = ctx.source(statements.sole_statement(after[0]) or after[0]).splitlines()[0]
                return Fix(f"Compute `{shown[:60]}` after the step, so that its backward sees the updated weights "
                           "(unsafe: the forward now uses them)", False, tuple(edits))
        return None

    # What reads a statement before the step keeps it there; failing that, a statement read before the step only by
    # statements that move with it moves too (a loss added up in steps).
    for chained in (False, True):
        try:
            fix = attempt(chained)
        except CannotFix:
            fix = None
        if fix is not None:
            return fix
    raise CannotFix("no forward computed before the step can be computed after it instead")


def _latest_place(block: list[ast.stmt], step: int, after: list[ast.stmt]) -> ast.stmt:
    """The statement the forward goes below: the last one before the first that reads what it computes, so that
    a later step of the same parameters (a second generator's step on a shared optimizer) runs before it too.
    The step itself when something in between writes a name the forward reads."""
    made = set().union(*(statements.names_bound(st) for st in after))
    needs = set().union(*(statements.names_read(st) for st in after))
    k = step
    while k + 1 < len(block) and not (statements.names_read(block[k + 1]) & made) and not (statements.names_bound(block[k + 1]) & (needs | made)):
        k += 1
    return block[k]


def _forward_before(block: list[ast.stmt], step: int, down: int,
                    chained: bool) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The statements before the step that the backward (``block[down]``) depends on: those read only after
    the step (they can move), and those also read before it (they stay, and may be computed again).  ``chained``:
    a statement read before the step only by statements that move with it moves too (a loss added up in steps)."""
    needed = statements.names_read(block[down])
    moved: list[ast.stmt] = []
    kept: list[ast.stmt] = []
    for k in range(down - 1, -1, -1):
        st = block[k]
        written = statements.names_bound(st)
        if not written & needed:
            continue
        needed = (needed - written) | statements.names_read(st)
        if k >= step:
            continue
        # The statements that move keep their order below the step (`loss = loss + a` then `loss = loss + b`):
        # only those that stay can see a difference.
        between = [b for b in block[k + 1:step] if not (chained and any(b is m for m in moved))]
        if any(statements.names_bound(b) & statements.names_read(st) for b in between):
            break  # what it reads changes before the step: computing it later would differ
        (kept if any(statements.names_read(b) & written for b in between) else moved).insert(0, st)
    return moved, kept


def _stored_into(stmt: ast.stmt) -> set[str]:
    """Names whose object ``stmt`` changes through an item or attribute (``d["k"] = v``, ``o.x += v``)."""
    out = set()
    for n in ast.walk(stmt):
        if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            root = chain_base(n)
            if isinstance(root, ast.Name):
                out.add(root.id)
    return out


def _forward_into_loop(ctx: FixContext, mutation: Mutation, code: str) -> Fix:
    """A loop steps once per loss of a list made before it from one forward::

        h = trunk(x)                                          for head, y in zip(heads, ys):
        losses = [mse(head(h), y) for head, y in zip(...)]  ->      h = trunk(x)
        for loss in losses:                                           loss = mse(head(h), y)
            loss.backward(retain_graph=True); opt.step()             loss.backward(retain_graph=True); opt.step()

    the second backward runs through the weights the first step changed.  Each loss (and the forward only it reads)
    is computed in the loop instead, after the previous step.  Unsafe: each loss now sees the weights the steps
    before it made, which is what a step per loss means, but not what the code computed."""
    entry = ctx.statement_of(mutation.entry())
    sinks = [c.sink.node for c in mutation.conflicts]
    if not sinks or any(c.sink.kind != "backward" for c in mutation.conflicts):
        raise CannotFix("the graph is not backpropagated here")
    loop = next((a for a in enclosing_statements(ctx, entry)
                 if isinstance(a, ast.For) and all(ctx.inside(s, a) for s in sinks)), None)
    if loop is None or not isinstance(loop.iter, ast.Name) or not isinstance(loop.target, ast.Name) or loop.orelse:
        raise CannotFix("the step and its backward are not in a loop over a list")
    block = block_around(ctx, loop)
    i = next((k for k, st in enumerate(block or ()) if st is loop), 0)
    made = block[i - 1] if i else None
    comp = made.value if isinstance(made, ast.Assign) else None
    if not (isinstance(comp, ast.ListComp) and len(made.targets) == 1 and isinstance(made.targets[0], ast.Name)
            and made.targets[0].id == loop.iter.id and len(comp.generators) == 1 and not comp.generators[0].ifs
            and not comp.generators[0].is_async):
        raise CannotFix("the list the loop runs over is not made by a comprehension just before it")
    gen = comp.generators[0]
    scope = ctx.scope_of(loop)
    bound = statements.names(gen.target)
    if not all(isinstance(n, (ast.Name, ast.Tuple, ast.Load, ast.Store)) for n in ast.walk(gen.target)):
        raise CannotFix("the comprehension binds more than names")
    names = ctx.names_in(scope)

    def outside(name: str) -> list[ast.Name]:
        """The uses of ``name`` in the scope, outside the comprehension (in ``ast.walk`` order)."""
        return [n for n in names.of(name) if not ctx.inside(n, comp)]

    if any(outside(name) for name in bound) or any(n is not loop.target and isinstance(n.ctx, ast.Store)
                                                   for n in outside(loop.target.id)):
        raise CannotFix("a name the comprehension binds is used outside it")
    if any(ctx.inside(n, comp) for n in names.of(loop.target.id)):
        raise CannotFix("the comprehension reads the loop's name")
    if outside(loop.iter.id) != [made.targets[0], loop.iter]:
        raise CannotFix("the list is used besides the loop")
    # The forward: the statements just before the list that only its losses read.
    moved: list[ast.stmt] = []
    needed = statements.names_read(comp.elt)
    for st in reversed(block[:i - 1]):
        written = statements.names_bound(st)
        if not isinstance(st, (ast.Assign, ast.Expr)) or not written or not written & needed \
                or written & statements.names_read(gen.iter):
            break
        readers = [n for name in written for n in outside(name) if isinstance(n.ctx, ast.Load)
                   and not any(ctx.inside(n, m) for m in moved)]
        if readers:
            break  # read again outside the losses: it must stay computed once
        moved.insert(0, st)
        needed = (needed - written) | statements.names_read(st)
    rebound = bound | {loop.target.id} | set().union(*(statements.names_bound(st) for st in moved))
    if names.declared or any(ctx.definitions_between(n, scope) for name in rebound for n in names.of(name)):
        raise CannotFix("a nested scope may see the names the rewrite rebinds")
    body_writes = set().union(*(statements.names_bound(st) for st in loop.body))
    if body_writes & (needed | statements.names_read(comp.elt) | statements.names_read(gen.iter)):
        raise CannotFix("the loop changes what the losses are computed from")
    for st in [*moved, made, loop.body[0]]:
        ctx.require_own_lines(st)
    nl, outer, inner = ctx.newline, ctx.indent_of(loop), ctx.indent_of(loop.body[0])
    moved_text = "".join(inner + line[len(outer):].rstrip("\r\n") + nl if line.strip() else nl
                         for st in moved for line in ctx.lines[st.lineno - 1:st.end_lineno])
    elt = ctx.source(comp.elt)
    elt = f"({elt})" if "\n" in elt else elt
    inserted = f"{moved_text}{inner}{loop.target.id} = {elt}{nl}"
    header = f"{ctx.source(gen.target)} in {ctx.source(gen.iter)}"
    line, col, _, _ = ctx.char_range(loop.target)
    _, _, end_line, end_col = ctx.char_range(loop.iter)
    first = loop.body[0].lineno
    edits = [TextEdit(st.lineno, 1, st.end_lineno + 1, 1, "") for st in [*moved, made]]
    edits.append(TextEdit(line, col + 1, end_line, end_col + 1, header))
    edits.append(TextEdit(first, 1, first, 1, inserted))
    edits.sort(key=lambda e: (e.line, e.column))
    removed = sum(st.end_lineno - st.lineno + 1 for st in [*moved, made])
    entry_line = entry.lineno - removed + header.count("\n") - (end_line - line) + inserted.count("\n")
    if ctx.still_found(apply_edits(ctx.text, edits), FindingId(code, entry_line)):
        raise CannotFix("computing the losses in the loop leaves the step breaking a graph")
    return Fix(f"Compute each `{loop.target.id}` in the loop, after the previous step: `for {header[:60]}:` "
               "(unsafe: each loss now sees the weights the steps before it updated)", False, tuple(edits))


def _detach_between_chunks(ctx: FixContext, mutation: Mutation) -> Fix:
    """The step and a ``backward(retain_graph=True)`` in one loop body, where the next iteration's backward
    runs through the previous one's graph (whose weights the step changed) by way of a state the loop carries
    (``h = cell(x, h)``): detach that state at the top of the body and drop ``retain_graph=True``.  Unsafe: it
    truncates backpropagation at the chunk boundary, which is what truncated BPTT means but changes gradients."""
    cst = cst_mod()
    step = ctx.statement_of(mutation.entry())
    backwards = [c.sink.node for c in mutation.conflicts if c.sink.kind == "backward"]
    calls = [n for b in backwards for n in statements.calls(b) if _retains(n)]
    if not backwards or len(calls) != len(backwards):
        raise CannotFix("the backward that breaks is not a `backward(retain_graph=True)`")
    # The innermost loop around the step that runs its backwards too (a loop inside the body, around the step
    # alone, does not carry the state from one chunk to the next).
    loop = next((a for a in enclosing_statements(ctx, step)
                 if isinstance(a, (ast.For, ast.While)) and all(ctx.inside(c, a) for c in calls)), None)
    if loop is None:
        raise CannotFix("the step and the backward it breaks are not in one loop")
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


def _detach_in_loop_that_steps(ctx: FixContext, mutation: Mutation, finding: Finding) -> Fix:
    """A detach of the carried state (``net.detach_hidden()``, ``h = h.detach()``) just after the loop that steps,
    where each iteration's backward still runs back into the iterations before it: the statement moves to the end
    of that loop's body, so that the state is cut after each step, and left as it was cut after the loop.  Only a
    statement just after the loop, of a loop no ``break``/``continue``/``return`` leaves early (each iteration
    reaches the end of its body), and only when the finding is gone with it.  Unsafe: each backward now stops at
    the start of its iteration (truncated BPTT), which is what a detach per step means."""
    if mutation.stale_detach is None:
        raise CannotFix("no detach of the carried state after the loop")
    cut = ctx.statement_of(finding.node)
    step = ctx.statement_of(mutation.entry())
    loop = next((a for a in enclosing_statements(ctx, step) if isinstance(a, LOOPS) and not ctx.inside(cut, a)), None)
    block = block_around(ctx, loop) if loop is not None else None
    k = next((k for k, st in enumerate(block or ()) if st is loop), None)
    if k is None or k + 1 >= len(block) or block[k + 1] is not cut or loop.orelse \
            or not isinstance(cut, (ast.Expr, ast.Assign)):
        raise CannotFix("the detach is not a plain statement just after the loop that steps")
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Raise, ast.Yield, ast.YieldFrom))
           for st in loop.body for n in statements.every_node(st)):
        raise CannotFix("an iteration may leave the loop's body before its end")
    last = loop.body[-1]
    for st in (cut, last):
        ctx.require_own_lines(st)
    nl, indent = ctx.newline, ctx.indent_of(last)
    text = "".join(indent + line[len(ctx.indent_of(cut)):].rstrip("\r\n") + nl
                   for line in ctx.lines[cut.lineno - 1:cut.end_lineno])
    # One edit from the end of the body to the end of the detach: the detach, then what stood between (blank lines,
    # comments).
    between = "".join(line.rstrip("\r\n") + nl for line in ctx.lines[last.end_lineno:cut.lineno - 1])
    edits = (TextEdit(last.end_lineno + 1, 1, cut.end_lineno + 1, 1, text + between),)
    fixed = apply_edits(ctx.text, list(edits))
    if ctx.still_found(fixed, FindingId(finding.code, line_after(list(edits), mutation.entry().lineno))):
        raise CannotFix("detaching after each step leaves the step breaking a graph")
    shown = ctx.source(cut).splitlines()[0]
    return Fix(f"Detach the state after each step: move `{shown[:60]}` to the end of the loop that steps (unsafe: "
               "each backward now stops at the start of its step)", False, edits)


def _carried_again_after_step(ctx: FixContext, mutation: Mutation, finding: Finding) -> Fix:
    """A value the loop computes before the step and carries into its next iteration (``state =
    enc.get_state(next_obs)``, or ``nxt = enc(o)`` handed on by ``state = nxt`` after the step), where the finding's
    use builds the next loss on it: the statement that computes it is copied to just after the step, so that the
    next iteration's value is computed with the updated weights.  Only a plain ``name = call(...)`` of the loop's
    body, between the use and the step, whose reads nothing from it to the step rebinds or changes in place, and
    whose name nothing after the step reads but a copy into the carried name; and only when the finding is gone
    with it.  Unsafe: that forward now runs again, with the updated weights."""
    if not mutation.stale_carried:
        raise CannotFix("the stale value is not carried by the loop")
    use, step = ctx.statement_of(finding.node), ctx.statement_of(mutation.entry())
    loop = next((a for a in enclosing_statements(ctx, step) if isinstance(a, LOOPS) and ctx.inside(use, a)), None)
    body = loop.body if loop is not None else []
    tops = [next((k for k, st in enumerate(body) if st is node or ctx.inside(node, st)), None) for node in (use, step)]
    if None in tops or tops[0] >= tops[1] or body[tops[1]] is not step:
        raise CannotFix("the use and the step are not in one loop's body, the use first")
    u, i = tops
    carried = statements.names_read(finding.node)
    for st in reversed(body[i + 1:]):  # copies after the step into a carried name: `state = nxt`
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.value, ast.Name) \
                and statements.names_bound(st) & carried:
            carried = carried | {st.value.id}
    made = next((st for st in reversed(body[u + 1:i]) if statements.names_bound(st) & carried), None)
    if not (isinstance(made, ast.Assign) and len(made.targets) == 1 and isinstance(made.targets[0], ast.Name)
            and isinstance(made.value, ast.Call)):
        raise CannotFix("the carried value is not made by a plain `name = call(...)` before the step")
    k = body.index(made)
    name, reads = made.targets[0].id, statements.names_read(made.value)
    if any((statements.names_bound(st) | _stored_into(st)) & reads for st in body[k + 1:i + 1]):
        raise CannotFix("what the value is computed from changes before the step")
    if loop.orelse or isinstance(loop, ast.While) and name in statements.names_read(loop.test) or any(
            name in statements.names_bound(st) or name in statements.names_read(st) and not (isinstance(st, ast.Assign)
                                                             and isinstance(st.value, ast.Name))
            for st in body[i + 1:]):
        raise CannotFix("code after the step reads or rebinds the value")
    for st in (made, step):
        ctx.require_own_lines(st)
    edits = move_statements_after(ctx, [], [made], step)
    if ctx.still_found(apply_edits(ctx.text, edits), FindingId(finding.code, mutation.entry().lineno)):
        raise CannotFix("computing the value again after the step leaves the step breaking a graph")
    shown = ctx.source(made).splitlines()[0]
    return Fix(f"Compute `{shown[:60]}` again after the step, for the next iteration (unsafe: that forward runs "
               "again, with the updated weights)", False, tuple(edits))


def _made_again_each_iteration(ctx: FixContext, mutation: Mutation, finding: Finding) -> Fix:
    """A value made once before a loop (``fake = netG(noise, prev)``, in a loop before it too) that every
    iteration of the loop builds its loss on, where the loop steps the weights it was made with: the next
    iteration's backward runs through the graph of the weights before the step.  The statement that makes it is
    copied to the top of the loop's body, so that each iteration makes it with the weights it steps.  Only the one
    assignment of that name in the function, a plain ``name = call(...)`` before the loop and outside it, whose
    reads nothing from it to the end of the loop rebinds or changes in place; and only when the finding is gone
    with it.  Unsafe: that forward now runs in every iteration (its first with the weights it had before)."""
    use, step = ctx.statement_of(finding.node), ctx.statement_of(mutation.entry())
    loop = next((a for a in enclosing_statements(ctx, step) if isinstance(a, LOOPS) and ctx.inside(use, a)), None)
    scope = ctx.scope_of(step)
    if loop is None or mutation.stale_use is None or mutation.stale_carried:
        raise CannotFix("the value is not used again by a loop that steps")
    # The values the use takes (its arguments, not the network it calls) that the loop does not make itself.
    use_node = finding.node
    taken = set().union(*(statements.names_read(a) for a in [*use_node.args, *(k.value for k in use_node.keywords)])) \
        if isinstance(use_node, ast.Call) else statements.names_read(use_node)
    written = set().union(*(statements.names_bound(st) for st in loop.body))
    stores = [n for name in sorted(taken - written) for n in ctx.names_in(scope).of(name)
              if not isinstance(n.ctx, ast.Load)]
    makes = [ctx.statement_of(n) for n in stores]
    if len(makes) != 1:
        raise CannotFix("not one value made once before the loop")
    made = makes[0]
    if not (isinstance(made, ast.Assign) and len(made.targets) == 1 and isinstance(made.targets[0], ast.Name)
            and isinstance(made.value, ast.Call)) or made.lineno >= loop.lineno or ctx.inside(made, loop):
        raise CannotFix("the value is not made by a plain `name = call(...)` before the loop")
    # The loop sees that value and no other: the name is no parameter or global, and only loops (never an `if`,
    # `try` or `with`) hold the assignment apart from the loop.
    names = ctx.names_in(scope)
    if made.targets[0].id in names.parameters | names.declared or any(
            not isinstance(a, LOOPS) for a in enclosing_statements(ctx, made)[1:] if not ctx.inside(loop, a)):
        raise CannotFix("the loop may see another value of the name")
    reads = statements.names_read(made.value)
    later = [n for n in statements.walk(scope) if isinstance(n, ast.stmt)
             and made.end_lineno < n.lineno <= loop.end_lineno]
    # (`noise.mul_(0.5)`: a method named like torch's in-place ones changes its object)
    changed = {n.func.value.id for st in later for n in statements.every_node(st) if isinstance(n, ast.Call)
               and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_") and isinstance(n.func.value, ast.Name)}
    if any((statements.names_bound(st) | _stored_into(st) | changed) & reads for st in later):
        raise CannotFix("what the value is made from changes before the loop or in it")
    first = loop.body[0]
    for st in (made, first):
        ctx.require_own_lines(st)
    nl, indent = ctx.newline, ctx.indent_of(first)
    text = "".join(indent + line[len(ctx.indent_of(made)):].rstrip("\r\n") + nl
                   for line in ctx.lines[made.lineno - 1:made.end_lineno])
    edits = (TextEdit(first.lineno, 1, first.lineno, 1, text),)
    if ctx.still_found(apply_edits(ctx.text, edits), FindingId(finding.code, line_after(edits, mutation.entry().lineno))):
        raise CannotFix("making the value in each iteration leaves the step breaking a graph")
    shown = ctx.source(made).splitlines()[0]
    return Fix(f"Make `{shown[:60]}` again at the top of the loop that steps (unsafe: that forward now runs in "
               "every iteration)", False, edits)


def _retains(call: ast.Call) -> bool:
    return any(k.arg == "retain_graph" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


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


RULE = Rule(
    code="GG101",
    name="optimizer-step-before-backward",
    summary="`optimizer.step()` (or a hand-written update) changes parameters a pending graph saved, before its backward.",
    explanation="""
`optimizer.step()` updates every parameter in place (under `no_grad`, but the version counter still moves).
Layers keep their weights for backward (`nn.Linear` saves its weight whenever its input requires grad;
torch reports it as "output 0 of AsStrided"), so a step between a forward and a later `backward()` of a
loss from that forward makes the backward raise `one of the variables needed for gradient computation has
been modified by an inplace operation`.  Typical cases: a GAN that steps the discriminator on `D(fake)`
and then backpropagates the generator loss through the same `D(fake)`; actor-critic and multi-task heads
that step one optimizer between two backwards of a shared graph; weight clipping or EMA updates between
forward and backward.  gradguard follows optimizers built from `model.parameters()` (also `list(...)`,
`itertools.chain`, param groups) and helper functions of the same file that step them.

It is reported at the line to change.  When a value computed before the step, and already used by the
backward before it, is used again after the step to build the loss that fails (`fake_out` of the
discriminator's loss reused in the generator's, a trunk's features reused by the actor's loss, a recurrent
state carried into the next step), the finding is at that first use, named in the function that runs the
step: that value is to be computed again (or detached) there.  So is the first use of a value computed before
the step that the loop carries into its next iteration (the state features of the next action), where the loss
that fails is built on it.  When the code detaches that state, but only after the loop that steps has stepped
again (a detach in the outer loop of truncated BPTT), the finding is at that detach: it belongs in the loop that
steps.  When that value is one an object keeps in an attribute across steps (a cache filled on the first call, a
value prepared before the loop) and read back after the step, the finding is at the assignment that keeps it:
keep it detached, or compute it anew on each call.  When the step runs inside a call that backpropagates another
loss and steps (a helper `update(optim, loss)`), and the loss that fails was computed before that call from a
forward no earlier backward ran through, for an optimizer of other parameters (a policy's loss computed through
the critics before the critics' updates), the finding is at that forward: compute it after the call.  Otherwise
it is at the step (or the update).

One form raises nothing: a value computed through the parameters before the step (a TD target from the critic)
combined after the step with one computed through the updated parameters (the critic's value of the same states),
whose result a loss then uses detached (the actor's weight `td_delta.detach()`).  No backward runs through the old
graph, so torch says nothing, but the value belongs to neither set of weights and the loss's gradients are not
those the algorithm means.  The finding is at the op that combines them: compute both parts before the step (or
both after it).  It is made only when the earlier part still carries its graph (a part computed under
`torch.no_grad()` leaves no trace of the weights it used) and the combined value reaches a backward.

Another form raises nothing: a step that applies gradients an earlier step of the same optimizer already applied.  A
backward adds into each `.grad`; when nothing clears the gradients after a step (no `zero_grad()`, no `.grad = None`)
and a later backward adds to them, the next step applies the sum (a GAN's discriminator whose `zero_grad()` is
missing also keeps what the generator's loss pushed into it).  It is reported at the first of those backwards in
the function that runs the step, where `zero_grad()` belongs, and only when every link is seen: a gradient the
first step applied, no clear since (a `zero_grad()` of an object gradguard does not know, or an optimizer or model
handed to code it cannot see, counts as one), a backward that adds to it, and the second step.

A third raises nothing either: `target.load_state_dict(online.state_dict())` followed by `target = online` (or the
module a helper returns stored there) drops the copy before it computed anything and stores the module being trained
in its place, so every step of its optimizer moves what is read through that name (a DQN's target network, a
teacher).  It is reported at that assignment when the load and the assignment run on paths known to run, the copy
never runs after the load, and a later step of an optimizer holds the module's parameters.
""",
    fix_advice="""
The message picks the advice from what gradguard saw, and says "if" where it could not see enough; with
nothing to go on, move `step()` (or the update) after every backward that needs the graph, or compute the
forward again after it.

- A GAN's generated sample fed to the discriminator (seen as: every weight the step updates was saved, so the
  stepped network's input requires grad): `D(fake.detach())` for the discriminator's loss, and `D(fake)`
  computed again after `opt_D.step()` for the generator's loss.
- Two losses on a shared trunk (actor-critic, multi-task heads) with one optimizer stepped between their
  backwards (seen as: the step updates weights this backward reads and weights of another head it does not):
  run both backwards (or one backward of their sum) before stepping, or compute the trunk's forward again after
  the step.
- A recurrent state carried across steps (seen as: a recurrent layer's graph reached by the loop's next
  backward; truncated BPTT kept alive with `retain_graph=True`): detach the state at the chunk boundary
  (`h = h.detach()`) and drop `retain_graph=True`.
- A second loss backwarded after a step (seen as: a backward ran before the step): compute both losses and step
  after the last backward, or compute the forward again after the step.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
Parameters are tracked per module object within one file. The finding is missed, not guessed, when the
optimizer is built in another file or from parameters gathered in ways gradguard does not follow. A filter
such as `[p for p in model.parameters() if p.requires_grad]` or over `model.modules()` is read as all of the
model's parameters that require grad, so a filter on anything else (names, shapes) can give a finding on a
parameter the optimizer does not hold. A step is not flagged when the graph it would break is freed before the
next backward.
""",
    invalid=(
        Example(
            """
import torch
import torch.nn as nn
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
out = net(torch.randn(5, 4))
out.mean().backward(retain_graph=True)
opt.step()                          # GG101
out.pow(2).mean().backward()
""",
            raises=SAVED_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
import torch.nn as nn
net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
out = net(torch.randn(5, 4))
(out.mean() + out.pow(2).mean()).backward()
opt.step()
"""
        ),
    ),
)
