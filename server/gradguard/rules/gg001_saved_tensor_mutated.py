"""GG001 saved-tensor-mutated: an in-place write to a tensor an earlier op saved for backward."""

from __future__ import annotations

import ast
from dataclasses import replace

from ..diagnostics import Fix, Severity
from ..fixes.callers import fix_in_helper, inside_helper, rebound_in_closure, through_callers
from ..fixes.context import FUNCTIONS, CannotFix, FixContext
from ..fixes.edits import Rewrite
from ..fixes.inplace import RebindRewrite, fix_or_none, mutation_of, rebind_fix
from ..fixes.into_graph import write_in_graph
from ..fixes.moves import block_around
from ..fixes.writes import (
    NONLOCAL_ESCAPE,
    InPlaceWrite,
    assign,
    attribute_base,
    aug_to_binop,
    clone_of,
    code,
    cst_mod,
    out_of_place,
    param_escape,
    root_name,
    short,
)
from ..inference.events import Finding, Mutation
from ..inference.scopes import bound_names
from ..inference.sharing import Report
from ..inference.values import Grad
from ..knowledge import load_knowledge
from ..messages import Message
from ..statements import walk as walk_statements
from .base import Example, Rule
from .common import SAVED_MESSAGE, call_path_related, conflict_related, first_conflict, where_it_raises, where_it_reads

ADVICE = "Use an out-of-place op or clone first."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    if mutation.module is not None or mutation.functional_inplace:
        return  # inplace=True activations are GG005
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    what = {"output": "output", "weight": "weight"}.get(save.role, "input")
    if mutation.alias_site is not None:
        yield _through_second_name(mutation, conflict, what)
        return
    if mutation.conversion_site is not None:
        yield _through_noop_conversion(mutation, conflict, what)
        return
    state = _updated_state(mutation)
    if state is not None:
        yield _state_read_by_reference(mutation, conflict, what, state)
        return
    if mutation.silent_before_packing:
        message = Message.format(
            "{how} modifies {label} in place, but `{op}` on {saved} saved it (as its {what}) for backward, and "
            "torch records a saved tensor's version only when the forward returns: {reads} computes with the "
            "written values and raises nothing (silently wrong gradients). {advice}",
            how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, what=what,
            reads=where_it_reads(conflict), advice=ADVICE)
    else:
        message = Message.format(
            "{how} modifies {label} in place, but `{op}` on {saved} saved it (as its {what}) for backward; {raises} "
            '"{torch}". {advice}',
            how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, what=what,
            raises=where_it_raises(conflict), torch=SAVED_MESSAGE, advice=ADVICE)
    yield Finding(
        "GG001",
        mutation.node,
        message,
        certain=save.certain,
        related=conflict_related(conflict, mutation),
        mutation=mutation,
    )


def _updated_state(mutation: Mutation) -> str | None:
    """A write under no_grad, through an attribute, to state that does not require grad (a queue, a running
    statistic, a cache): the attribute (`self.queue`).  The update is meant; the op that read the state by
    reference is what to change."""
    root = mutation.target.root()
    # Grad mode off in the analysed code is a `no_grad` it wrote (a caller's mode only ever leaves it on).
    if mutation.grad_enabled or ((root.requires_grad == Grad.YES or root.param) and not mutation.by_layer):
        return None
    expr = mutation.written_through
    return ast.unparse(expr) if isinstance(expr, ast.Attribute) else None


def _state_read_by_reference(mutation: Mutation, conflict, what: str, state: str) -> Finding:
    """The finding at the op that saved the state: it is to read a copy, so that the update stays in place."""
    save = conflict.save
    return Finding(
        "GG001",
        save.node,
        Message.format(
            "`{op}` saves `{state}` (as its {what}) for backward, and {how} on {write} then updates that state in "
            'place under no_grad, before the backward: {raises} "{torch}". Give `{op}` a copy of the state '
            "(`{state}.clone()`), so that the update can stay in place.",
            op=save.op, state=state, what=what, how=mutation.how, write=mutation.node,
            raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
        certain=save.certain,
        related=[(mutation.node, "the in-place update of the state"), *call_path_related(mutation),
                 *([(conflict.sink.node, "backward raises here")] if conflict.sink.kind == "backward" else [])],
        mutation=mutation, data={"state": state},
    )


# ---- The fix --------------------------------------------------------------------------------------
def _copy_state_at_read(ctx: FixContext, finding: Finding) -> Fix:
    """``q @ self.queue`` -> ``q @ self.queue.clone()``: the op reads the values it read before, and the state's
    update stays in place.  Safe: nothing but the saved copy differs."""
    state = finding.data["state"]
    read = next((n for n in ast.walk(finding.node) if isinstance(n, ast.Attribute) and ast.unparse(n) == state), None)
    if read is None:
        raise CannotFix("the op does not name the state it read")
    rw = Rewrite(ctx).replace_node(ctx.cst(read), cst_mod().parse_expression(f"{ctx.source(read)}.clone()"))
    return rw.fix(f"Read a copy of the state: `{state}.clone()`", safe=True)


def _through_second_name(mutation: Mutation, conflict, what: str) -> Finding:
    """The write goes through a second name of the saved tensor (`out = x` ... `out[i] = v`): the binding is the
    line to change (a copy was meant), and every write through that name is the same finding."""
    binding, name, other = mutation.alias_site
    save = conflict.save
    return Finding(
        "GG001",
        binding,
        Message.format(
            "`{bound}` gives `{name}` the tensor `{other}` holds, not a copy: {how} through `{name}` on {write} "
            "(and the other writes through it) modify `{other}` in place, but `{op}` on {saved} saved it (as its "
            '{what}) for backward; {raises} "{torch}". Take a copy here (`.clone()`).',
            bound=ast.unparse(binding), name=name, other=other, how=mutation.how, write=mutation.node, op=save.op,
            saved=save.node, what=what, raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
        certain=save.certain,
        related=[(mutation.node, f"the in-place write through `{name}`"), *conflict_related(conflict, mutation)],
        mutation=mutation,
    )


def _through_noop_conversion(mutation: Mutation, conflict, what: str) -> Finding:
    """The write goes through the result of a conversion to the dtype the tensor had already (`x = x.float()` of a
    float32 `x`): torch returned the tensor itself, so the write changes what the op saved.  The conversion is
    where a copy was meant."""
    binding, dtype = mutation.conversion_site
    save = conflict.save
    return Finding(
        "GG001",
        binding,
        Message.format(
            "`{call}` returns `{source}` itself, not a copy, since it is {dtype} already: {how} on {write} then "
            "modifies {label} in place, but `{op}` on {saved} saved it (as its {what}) for backward; {raises} "
            '"{torch}". Take a copy here (`.clone()`).',
            call=ast.unparse(binding.value), source=ast.unparse(binding.value.func.value), dtype=dtype,
            how=mutation.how, write=mutation.node, label=mutation.target.label, op=save.op, saved=save.node,
            what=what, raises=where_it_raises(conflict), torch=SAVED_MESSAGE),
        certain=save.certain,
        related=[(mutation.node, "the in-place write"), *conflict_related(conflict, mutation)],
        mutation=mutation, data={"conversion": True},
    )


def _copy_after_conversion(ctx: FixContext, mutation: Mutation) -> Fix:
    """`x = x.float()` -> `x = x.float().clone()`.  Unsafe: the caller's tensor keeps its values, where the writes
    used to change it too."""
    binding, _ = mutation.conversion_site
    ctx.require_own_lines(binding)
    copy = f"{ctx.source(binding.value)}.clone()"
    rw = Rewrite(ctx).replace_node(ctx.cst(binding.value), cst_mod().parse_expression(copy))
    return rw.fix(f"Take a copy: `{copy}` (unsafe: `{ast.unparse(binding.value.func.value)}` keeps its values)",
                  safe=False)


def _copy_at_binding(ctx: FixContext, mutation: Mutation) -> Fix:
    """`out = x` -> `out = x.clone()`.  Unsafe: `x` keeps its values, where the writes used to change it too."""
    binding, name, other = mutation.alias_site
    ctx.require_own_lines(binding)
    value = ctx.source(binding.value)
    copy = f"{value}.clone()" if isinstance(binding.value, (ast.Name, ast.Call, ast.Attribute)) else f"({value}).clone()"
    rw = Rewrite(ctx).replace_node(ctx.cst(binding.value), cst_mod().parse_expression(copy))
    return rw.fix(f"Take a copy: `{name} = {copy}` (unsafe: `{other}` keeps its values)", safe=False)


def _copy_at_detach(ctx: FixContext, write: InPlaceWrite) -> Fix:
    """`c = out.detach()` ... `c.zero_()` -> `c = out.detach().clone()`: the writes change a copy, not the memory
    backward saved.  Unsafe: `out` keeps its values, where the writes used to change it too."""
    name, _ = root_name(write.target)
    if name is None:
        raise CannotFix("the write does not go through a name")
    scope = ctx.scope_of(write.stmt)
    stores = [n for n in ctx.names_in(scope).of(name) if not isinstance(n.ctx, ast.Load)]
    binding = ctx.parents.get(stores[0]) if len(stores) == 1 else None
    value = binding.value if isinstance(binding, ast.Assign) and binding.targets == [stores[0]] else None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "detach"
            and not value.args and not value.keywords):
        raise CannotFix(f"`{name}` is not bound once, by `.detach()`")
    block = block_around(ctx, write.stmt)
    if block is None or binding not in block or block.index(binding) > block.index(write.stmt):
        raise CannotFix(f"`{name}` is not bound before the write in its block")
    ctx.require_own_lines(binding)
    copy = f"{ctx.source(value)}.clone()"
    rw = Rewrite(ctx).replace_node(ctx.cst(value), cst_mod().parse_expression(copy))
    return rw.fix(f"Take a copy: `{name} = {short(copy)}` (unsafe: `{ast.unparse(value.func.value)}` keeps its "
                  "values)", safe=False)


def fix(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG001 (and any rule about a write to memory saved for backward): rebind out of place when nothing
    else sees the memory; clone where it is saved when a view of it is read later (or rebinding cannot
    work); an unsafe rebinding when only containers, attributes or the caller could see the write.  A write to
    an element of a local list or dict rebinds that element."""
    element = finding.mutation
    if element is not None and element.in_container:
        if grad_would_be_lost(element):
            return None
        copy_ok = not saves_inside(ctx, element, ctx.statement_of(element.entry()))
        return (fix_or_none(lambda: rebind_element(ctx, element, copy_ok))
                or fix_or_none(lambda: rebind_made_element(ctx, element)))
    mutation = mutation_of(finding)
    if finding.data.get("state"):
        return fix_or_none(lambda: _copy_state_at_read(ctx, finding))
    if mutation.alias_site is not None and finding.node is mutation.alias_site[0]:
        return fix_or_none(lambda: _copy_at_binding(ctx, mutation))
    if mutation.conversion_site is not None and finding.node is mutation.conversion_site[0]:
        return fix_or_none(lambda: _copy_after_conversion(ctx, mutation))
    if mutation.entry() is not mutation.node:  # the write is inside a call: a helper, a method, a callable object
        return (fix_or_none(lambda: fix_in_helper(fix, ctx, finding)) or _clone_where_made(ctx, finding)
                or _callers_read_saved_values(ctx, finding))
    write = InPlaceWrite.of_mutation(ctx, mutation)
    rebind = fix_or_none(lambda: RebindRewrite(ctx, write))
    possible = (
        rebind is not None
        and not grad_would_be_lost(mutation)
        and (rebind.direct or not saves_inside(ctx, mutation, write.stmt))
    )
    if possible and rebind.report.clean:
        built = fix_or_none(rebind.rewrite)
        if built is not None:
            return built[0].fix(f"Write out of place: `{short(built[1])}`", safe=True)
        possible = False
    if mutation.target.detached_from is not None and mutation.read_after is not None:
        # A write through a `.detach()` alias whose changed values a backward reads: a clone where saved would leave
        # that hidden write (GG102); the alias was meant to be a copy.
        return fix_or_none(lambda: _copy_at_detach(ctx, write))
    # Under no_grad a clone where saved still leaves the write hidden from autograd on a tensor of the graph
    # (silent wrong gradients): that is no repair.  The write goes into the graph instead, as for GG102.
    hidden = grad_would_be_lost(mutation)
    if hidden:
        into_graph = fix_or_none(lambda: write_in_graph(ctx, finding))
        if into_graph is not None:
            return into_graph
    # A container that holds the written tensor and is read later would see the write the clone keeps in place,
    # where writing out of place keeps its old values: the two programs differ, and nothing tells which is meant.
    held = (_filled_container_read_after(ctx, write, rebind.report) if rebind is not None
            else _attribute_put_in_container(ctx, write))
    if (not possible or rebind.report.aliases_read_after) and not hidden and not held and not finding.saves_elsewhere:
        built = fix_or_none(lambda: clone_where_saved(ctx, mutation, write))
        if built is not None:
            return built[0].fix(f"Clone what backward needs where it is saved: {built[1]}", safe=True)
    if possible and only_the_caller_holds(rebind):
        callers = fix_or_none(lambda: through_callers_fix(ctx, rebind))
        if callers is not None:
            return callers
    if possible and rebind.report.escapes == [NONLOCAL_ESCAPE] and not rebind.report.aliases_read_after \
            and not rebind.report.holders_read_after:
        closure = fix_or_none(lambda: rebound_in_closure(ctx, write, rebind.name, rebind.rewrite))
        if closure is not None:
            return closure
    if possible and rebind.report.only_holders:
        return rebind_fix(rebind, "Write out of place")
    return None


def _callers_read_saved_values(ctx: FixContext, finding: Finding) -> Fix | None:
    """The helper's write made out of place although a caller reads the tensor again after the call: the helper
    goes on computing with the written name, and the caller then reads the values the broken save kept for backward
    (``x = token; x += pos`` in a forward whose caller decodes the same input again).  Unsafe: that caller read the
    written values before."""
    built = fix_or_none(lambda: fix_in_helper(fix, ctx, finding, saved=True))
    why = "a caller reads the tensor again after the call, and then reads the values backward saved"
    return built and replace(built, title=f"{built.title[:-1]}; {why})" if built.title.endswith(")")
                             else f"{built.title} (unsafe: {why})")


def _clone_where_made(ctx: FixContext, finding: Finding) -> Fix | None:
    """A write inside a call the fix cannot change there: clone the tensor where the op that saved it made it
    (``rates = torch.exp(w).clone()``), or the argument it saved (``weights.clone() ** 2``), so the call writes
    memory the backward no longer needs -- the same program.  Which argument an op saved is told by name only
    when the call writes a name of the caller's own scope (a closure's free variable); else only ops that saved
    their output, or whose saved argument the run saw, are cloned."""
    mutation = mutation_of(finding)
    if finding.saves_elsewhere:
        return None  # the clone would leave the saves only a caller's analysis saw
    named = _write_on_enclosing_name(ctx, finding)
    moment = finding.mutation.moment
    if named is not None and moment is not None and moment.callers_read_after(skip=1):
        # A closure writing its function's local that that function's caller also holds and reads again (`x = tokens`
        # in a forward whose caller decodes the same input again): the clone keeps the write the caller then sees,
        # writing out of place would not -- two programs, and nothing tells which is meant (as for the same write
        # made directly).
        return None
    if grad_would_be_lost(mutation) or mutation.target.detached_from is not None and mutation.read_after is not None \
            or named is None and any(
            c.save.role != "output" and not (c.save.role == "input" and c.save.operand) for c in mutation.conflicts):
        return None
    for conflict in (c for c in mutation.conflicts if c.save.role == "output"):
        # `h = torch.tanh(...); outputs.append(h)`: the list would see the call's write on the clone, where the
        # write was not meant to reach the stored output -- the two programs differ, and nothing tells which is meant.
        binding = ctx.statement_of(conflict.save.node)
        if not (isinstance(binding, ast.Assign) and binding.value is conflict.save.node
                and len(binding.targets) == 1 and isinstance(binding.targets[0], ast.Name)):
            return None
        if moment is None or moment.holders is None or moment.holders_read_after():
            return None  # (the run's holders of the written memory at the write: the saved output's)
    built = fix_or_none(lambda: clone_where_saved(ctx, mutation, named))
    return built and built[0].fix(f"Clone what backward needs where it is saved: {built[1]}", safe=True)


def _write_on_enclosing_name(ctx: FixContext, finding: Finding) -> InPlaceWrite | None:
    """The write inside the call, when it writes a name the called function does not bind (a closure's free
    variable): that name holds the same tensor where the op saved it."""
    inner = inside_helper(finding)
    if inner is None:
        return None
    try:
        write = InPlaceWrite.of(ctx, inner.mutation.node)
    except (CannotFix, KeyError):
        return None
    name, _ = root_name(write.target)
    fn = ctx.function_of(write.stmt)
    return write if name is not None and isinstance(fn, ast.FunctionDef) and name not in bound_names(fn) else None


def clone_where_saved(ctx: FixContext, mutation: Mutation, write: InPlaceWrite | None) -> tuple[Rewrite, str]:
    """Clone at every op that saved the written memory for a backward that this write breaks (``write``: the
    statement, when it is in the tree, whose names tell which argument of an op was saved).  Only when the run saw
    every save: memory made in a loop over layers the run made one of (``Mutation.unrun_layers``) may be saved again
    by the layers after it (`x = torch.tanh(layer(x))`, read by the next layer), and a clone here would leave those."""
    if not mutation.conflicts:
        raise CannotFix("no conflicting save")
    if mutation.unrun_layers:
        raise CannotFix("the written memory is made by one layer of a list whose later layers may save it too")
    name = root_name(write.target)[0] if write is not None else None
    rw = Rewrite(ctx)
    wrapped: dict[int, ast.AST] = {}
    for conflict in mutation.conflicts:
        save = conflict.save
        node = save.node
        if not isinstance(node, ast.expr) or _is_inplace_expr(ctx, node):
            raise CannotFix(f"`{save.op}` saves in place")
        if save.role == "output":
            if save.version != 0:
                raise CannotFix(f"`{save.op}` saved a tensor it wrote in place")  # cloning its result cannot help
            if save.op.startswith("nn.") and getattr(load_knowledge().module(save.op[3:]), "returns", "tensor") != "tensor":
                raise CannotFix(f"`{save.op}` returns a tuple")
            if save.operand is None and saves_by_call(node):
                # `ctx.save_for_backward(*outs)`: the call returns None, and which argument holds the tensor is unknown
                raise CannotFix(f"cannot tell which argument of `{ast.unparse(node.func)}` is saved")
            targets = [save.operand if save.operand is not None else node]  # `ctx.save_for_backward(out)`: out
        elif save.role == "input" and save.operand is not None:
            targets = [save.operand]  # the run saw which argument's value the op saved
        elif save.role == "input":
            names = _names_over_written(write, name)
            # (the receiver of `ctx.save_for_backward(a, b)` is no operand: the call saves its arguments)
            operands = node.args if saves_by_call(node) else _operands(node)
            targets = [arg for arg in operands if root_name(arg)[0] in names]
            if not targets:
                raise CannotFix(f"cannot tell which argument of `{save.op}` is saved")
        else:
            raise CannotFix(f"`{save.op}` saves its {save.role}, which is not an expression here")
        for target in targets:
            if id(target) in wrapped:
                continue
            wrapped[id(target)] = target
    # Inner expressions first would be replaced inside outer ones: refuse nesting rather than guess.
    nodes = list(wrapped.values())
    for a in nodes:
        for b in nodes:
            if a is not b and ctx.inside(b, a):
                raise CannotFix("nested saves")
    for node in nodes:
        rw.replace_node(ctx.cst(node), clone_of(ctx.cst(node)))
    shown = ", ".join(f"`{short(code(clone_of(ctx.cst(n))), 50)}`" for n in nodes)
    return rw, shown


def saves_by_call(node: ast.AST) -> bool:
    """``ctx.save_for_backward(...)``: a custom Function's save, a call that returns None (its arguments are saved)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "save_for_backward"


def _names_over_written(write: InPlaceWrite | None, name: str | None) -> set[str]:
    """The names of the write's frame that held the written memory (the tensor itself, a view or base of it), at
    any run of the write (``Moment.held_in_any_run``); the written name alone when no run reported the write."""
    if write is None or name is None:
        return set()
    moment = write.moment
    if moment is None or moment.holders is None:
        return {name}
    return {name, *(held for held, how in moment.held_in_any_run(write.depth) if how != "holder")}


def _operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.Call):
        # `torch.einsum(eq, [a, b])`: a list of operands is its tensors, each of which may be the saved one
        args = [e for a in node.args for e in (a.elts if isinstance(a, (ast.List, ast.Tuple)) else (a,))]
        out = args + [k.value for k in node.keywords if k.arg is not None]
        if isinstance(node.func, ast.Attribute):
            out.append(node.func.value)  # the receiver of a method (`h.clamp(...)` saves h)
        return [o for o in out if not isinstance(o, ast.Starred)]
    return []


def _is_inplace_expr(ctx: FixContext, node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_"):
            return True
        if any(k.arg in ("out", "inplace") for k in node.keywords):
            return True
    return False


def grad_would_be_lost(mutation: Mutation) -> bool:
    """Rebinding under no_grad drops the graph of a tensor that requires grad (not the no_grad autograd runs a
    custom Function's forward and backward in: the Function's backward gives the gradients)."""
    return not mutation.grad_enabled and not mutation.in_function and mutation.target.requires_grad != Grad.NO


def saves_inside(ctx: FixContext, mutation: Mutation, stmt: ast.stmt) -> bool:
    """Does the write statement itself evaluate an op whose save it breaks (``y[t] = y[t] * y[t - 1]``)?"""
    return any(conflict.save.node is not None and ctx.inside(conflict.save.node, stmt) for conflict in mutation.conflicts)


def _filled_container_read_after(ctx: FixContext, write: InPlaceWrite, report: Report) -> bool:
    """Is a holder read later a container the program filled with the tensor itself (``outs.append(h)``): one of
    its methods called with a name over the written memory (``_names_over_written``)?"""
    if not report.holders_read_after:
        return False
    names, uses = _names_over_written(write, report.name), ctx.names_in(ctx.scope_of(write.stmt))
    for holder in report.holders_read_after:
        for load in uses.of(holder):
            method = ctx.parents.get(load)
            call = ctx.parents.get(method)
            if isinstance(method, ast.Attribute) and isinstance(call, ast.Call) and call.func is method \
                    and any(root_name(arg)[0] in names for arg in call.args):
                return True
    return False


def _attribute_put_in_container(ctx: FixContext, write: InPlaceWrite) -> bool:
    """Is the written attribute (``self.h``) handed, in the writing function, to a method whose result is dropped
    (``self.outputs.append(self.h)``): a container that may keep it?"""
    attr = attribute_base(write.target)
    if attr is None:
        return False
    text = ctx.source(attr)
    scope = ctx.scope_of(write.stmt)
    for node in walk_statements(scope):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) \
                and any(ctx.source(arg) == text for arg in node.value.args):
            return True
    return False


def through_callers_fix(ctx: FixContext, rebind: RebindRewrite) -> Fix:
    rw, desc = rebind.rewrite()
    return through_callers(ctx, rw, rebind.write.stmt, rebind.name, f"Write out of place: `{short(desc)}`", safe=True,
                           moment=rebind.write.moment)


def only_the_caller_holds(rebind: RebindRewrite) -> bool:
    """The written name is the function's parameter, and nothing else keeps or views its memory."""
    report = rebind.report
    return not (report.aliases_read_after or report.holders_read_after) and report.escapes == [param_escape(rebind.name)]


# ---- The fix of an element of a list or dict -----------------------------------------------------
# A write to an element of a local list or dict, fixed by rebinding the element out of place.
#
#     hs = [h]; hs[0].mul_(2)        ->  hs = [h]; h = hs[0] = hs[0].mul(2)
#     d = {"h": h}; d["h"] /= n      ->  d = {"h": h}; d["h"] = d["h"] / n
#     hs = [h]; hs[0][0] = 0         ->  hs = [h]; h = hs[0] = hs[0].clone(); hs[0][0] = 0
#
# The write changed the one tensor the element and the name put in the display hold; after the fix both hold the
# new tensor, so every later read through either sees the values it saw before.  Offered only where nothing else
# can hold that tensor: the container is a list or dict display bound once, before the write in the same block
# (so a loop around the write rebuilds it too), read nowhere before the write and only read by key after it; the element is a constant key of the display
# holding a plain local name, and that name has no view, holder (but the container) or escape read later.

def rebind_element(ctx: FixContext, mutation: Mutation, copy_ok: bool = True) -> Fix:
    """The element write of ``mutation`` made out of place (CannotFix when some other holder could tell).  A write
    through a view of the element (``hs[0][0] = 0``) writes a copy of it instead, when ``copy_ok`` (the write does
    not itself evaluate the op whose save it breaks)."""
    write = InPlaceWrite.of_mutation(ctx, mutation)
    element = write.target
    while isinstance(element, ast.Subscript) and not _is_element(element):
        element = element.value  # `hs[0][mask] = 0` writes a view of `hs[0]`
    if not _is_element(element):
        raise CannotFix("the written element is not `container[constant]`")
    direct = element is write.target
    if direct and write.kind not in ("augassign", "method"):
        raise CannotFix(f"no out-of-place form of a {write.kind} write to the element")
    if not direct and not copy_ok:
        raise CannotFix("the write evaluates the op whose save it breaks")
    if not direct and not (write.target.value is element and mutation.target.base is not None
                           and not (isinstance(write.target.slice, ast.Constant)
                                    and isinstance(write.target.slice.value, str))):
        # `acts[0]["h"].mul_(2)`: the element is a dict, not a tensor to copy; only one tensor index is known
        # to make the view the engine saw written
        raise CannotFix("the write is not to one index of the element's tensor")
    container, key = element.value.id, element.slice.value
    stmt = write.stmt
    fn = ctx.function_of(stmt)
    if not isinstance(fn, FUNCTIONS):
        raise CannotFix("the element write is not in a function")
    display = _display(ctx, fn, stmt, container)
    held = _held_name(display, key)
    if held not in ctx.once("locals", fn, lambda: bound_names(fn)):
        # a free variable: the enclosing function's later reads cannot be seen here, and binding it would make
        # a new local (unbound where the display reads it)
        raise CannotFix(f"`{held}` is not a local of the function")
    _require_only_use(ctx, fn, stmt, container, display)
    report = write.sharing(ctx, held)
    seen_through = set(report.aliases_read_after) | set(report.holders_read_after)
    if seen_through - {container} or set(report.escapes) - {param_escape(held)}:
        raise CannotFix(report.reason())
    if container in report.aliases_read_after and not _only_rebinds_held(ctx, fn, stmt, container, held):
        raise CannotFix(report.reason())
    # a parameter: the caller no longer sees the write (as with a parameter's name rebound out of place)
    unsafe = f" (unsafe: {param_escape(held)})" if report.escapes else ""
    if any(isinstance(n.ctx, ast.Store) and display.lineno <= n.lineno <= stmt.end_lineno
           for n in ctx.names_in(fn).of(held)):
        raise CannotFix(f"`{held}` is bound again between the container and the write")
    cst = cst_mod()
    targets = [ctx.cst(element).deep_clone()]
    held_read = write.value_read_after(ctx, held)
    if held_read:
        targets.insert(0, cst.Name(held))
    elif unsafe and not any(n.lineno > stmt.end_lineno for n in ctx.names_in(fn).of(container)):
        # nothing here reads the new value: the fix would drop the write the caller sees, not repair it
        raise CannotFix(f"neither `{held}` nor `{container}` is read after the write")
    rw = Rewrite(ctx)
    if not direct:
        copy = code(assign(targets[0], clone_of(ctx.cst(element).deep_clone()), *targets[1:]))
        rw.insert_before(stmt, copy)
        return _fix(rw, f"Write a copy of the element: `{short(copy)}`", unsafe)
    node = ctx.cst(stmt)
    if write.kind == "augassign":
        new = assign(targets[0], aug_to_binop(node), *targets[1:])
    elif not write.value_use:
        new = assign(targets[0], out_of_place(ctx, write.call), *targets[1:])
    elif isinstance(stmt, ast.Assign) and stmt.value is write.call:
        # `s = hs[0].exp_()`: `s = h = hs[0] = hs[0].exp()`
        new = node.with_changes(targets=[*node.targets, *(cst.AssignTarget(target=t) for t in targets)],
                                value=out_of_place(ctx, write.call))
    else:
        raise CannotFix("the in-place call's result is used inside an expression")
    rw.replace_node(node, new)
    return _fix(rw, f"Write the element out of place: `{short(code(new))}`", unsafe)


def rebind_made_element(ctx: FixContext, mutation: Mutation) -> Fix:
    """``outs[i - 1] += up(outs[i])`` on a list the function makes by a comprehension of calls (each element a
    tensor of its own), where the run shows no variable but that list holding the written memory, in any run of
    the write and any frame, and nothing it was handed to or got from a caller: every reader reaches the element
    through the list, so ``outs[i - 1] = outs[i - 1] + up(outs[i])`` shows them the same values and leaves the
    saved tensor alone."""
    write = InPlaceWrite.of_mutation(ctx, mutation)
    element = write.target
    if write.kind != "augassign" or not (isinstance(element, ast.Subscript) and isinstance(element.value, ast.Name)
                                         and _plain(element.slice)):
        raise CannotFix("not an augmented write to `container[index]` of a plain index")
    if any(isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)) for n in ast.walk(write.stmt)):
        raise CannotFix("the write's statement binds or suspends")
    moment, depth = write.moment, write.depth
    container = element.value.id
    if moment is None or moment.holders is None:
        raise CannotFix("the run did not say who holds the written memory")
    if moment.held_in_any_run(depth) != [(container, "holder")] or moment.held_outside(depth) \
            or moment.callers_pass(depth) or moment.escape_sites():
        raise CannotFix(f"something besides `{container}` holds the written tensor")
    fn = ctx.function_of(write.stmt)
    if not isinstance(fn, FUNCTIONS):
        raise CannotFix("the element write is not in a function")
    stores = [n for n in ctx.names_in(fn).of(container) if not isinstance(n.ctx, ast.Load)]
    binding = ctx.parents.get(stores[0]) if len(stores) == 1 else None
    if not (isinstance(binding, ast.Assign) and binding.targets == [stores[0]] and isinstance(binding.value, ast.ListComp)
            and isinstance(binding.value.elt, ast.Call)) \
            or container not in ctx.once("locals", fn, lambda: bound_names(fn)):
        # two slots of one list may hold one tensor (`[t] * 2`): a comprehension of calls makes one per slot
        raise CannotFix(f"`{container}` is not bound once, to a comprehension of calls")
    node = ctx.cst(write.stmt)
    new = assign(ctx.cst(element).deep_clone(), aug_to_binop(node))
    rw = Rewrite(ctx)
    rw.replace_node(node, new)
    return _fix(rw, f"Write the element out of place: `{short(code(new))}`", "")


def _plain(index: ast.expr) -> bool:
    """An index that evaluates to the same value twice: names, constants and arithmetic on them."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load))
               for n in ast.walk(index))


def _fix(rw: Rewrite, title: str, unsafe: str) -> Fix:
    fix = rw.fix(title + unsafe, safe=not unsafe)
    if fix is None:
        raise CannotFix("no edit")
    return fix


def _is_element(node: ast.expr) -> bool:
    """``name[constant]``."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant)


def _display(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, container: str) -> ast.Assign:
    """The one binding of ``container`` in ``fn``: a list or dict display earlier in the block of ``stmt``."""
    names = ctx.names_in(fn)
    stores = [n for n in names.of(container) if not isinstance(n.ctx, ast.Load)]
    if len(stores) != 1 or container in names.declared:
        raise CannotFix(f"`{container}` is bound more than once")
    binding = ctx.parents.get(stores[0])
    if not (isinstance(binding, ast.Assign) and binding.targets == [stores[0]]
            and isinstance(binding.value, (ast.List, ast.Dict))):
        raise CannotFix(f"`{container}` is not bound to a list or dict display")
    block = block_around(ctx, stmt)
    if block is None:
        raise CannotFix("cannot tell the write's block")
    if binding not in block or block.index(binding) > block.index(stmt):
        raise CannotFix(f"`{container}` is not bound before the write in its block")
    return binding


def _held_name(display: ast.Assign, key: object) -> str:
    """The local name the display puts at ``key``."""
    value = display.value
    element = None
    if isinstance(value, ast.List):
        if type(key) is int and 0 <= key < len(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts):
            element = value.elts[key]
    else:
        keys = [k.value if isinstance(k, ast.Constant) else None for k in value.keys]
        if None not in keys and keys.count(key) == 1:
            element = value.values[keys.index(key)]
    if not isinstance(element, ast.Name):
        raise CannotFix("the element is not a name the display puts there")
    return element.id


def _require_only_use(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, container: str, display: ast.Assign) -> None:
    """``container`` is read nowhere before the write (nothing can have kept a view of the element), and after it
    only read by key (it is never handed on, where it could be changed out of sight)."""
    for node in ctx.names_in(fn).of(container):
        if ctx.inside(node, stmt) or ctx.inside(node, display):
            continue
        parent = ctx.parents.get(node)
        if node.lineno <= stmt.end_lineno:
            raise CannotFix(f"`{container}` is used before the write")
        if not (isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Load)):
            raise CannotFix(f"`{container}` is used otherwise than read by key after the write")
        if _nested(ctx, node, fn):
            raise CannotFix(f"a nested function reads `{container}`")


def _only_rebinds_held(ctx: FixContext, fn: ast.AST, stmt: ast.stmt, container: str, held: str) -> bool:
    """Is every read of ``container`` after the write ``held = container[...]``?  Around a loop, another name
    bound to the element would keep this pass's tensor, which the next pass used to write."""
    for node in ctx.names_in(fn).of(container):
        if isinstance(node.ctx, ast.Load) and node.lineno > stmt.end_lineno:
            element = ctx.parents.get(node)
            assign_ = ctx.parents.get(element)
            if not (isinstance(assign_, ast.Assign) and assign_.value is element and len(assign_.targets) == 1
                    and isinstance(assign_.targets[0], ast.Name) and assign_.targets[0].id == held):
                return False
    return True


def _nested(ctx: FixContext, node: ast.AST, fn: ast.AST) -> bool:
    for anc in ctx.ancestors(node):
        if anc is fn:
            return False
        if isinstance(anc, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            return True
    return False


RULE = Rule(
    code="GG001",
    name="saved-tensor-mutated",
    summary="In-place write to a tensor that an earlier op saved for backward, before that backward runs.",
    explanation="""
Many ops keep a tensor for their backward: `sigmoid`, `tanh`, `exp`, `relu` and `softmax` keep their
**output**; `mul`, `div`, `pow`, `matmul`, `linear`, `layer_norm` and convolutions keep their **inputs**
(only those the gradient needs: in `a * b`, `b` is kept only if `a` requires grad).  An in-place write
(`+=`, `.add_()`, `x[i] = v`, `out=`, `.copy_()`, ...) bumps the tensor's version counter, and when
`backward()` later reaches the op it finds the saved tensor changed and raises
`RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
operation`.  The write is reported even under `torch.no_grad()` (the counter still moves) and through
views and `.detach()` aliases (they share the counter).  Which op saves what comes from torch itself
(`gradguard/knowledge/torch_ops.json`, generated from the installed torch).

A module compiled with `torch.compile(m)` (or in place, `m.compile()`) has its forward traced with its backward at the call: every tensor
that requires grad and leaves the forward (returned, or kept on an object: `self.std = h.std()` for monitoring)
is an output of that graph, so a write after a save such a tensor needs raises at the compiled call
(`BackendCompilerFailed`, carrying the same RuntimeError), even when no backward ever runs through it and eager
would run.
""",
    fix_advice="""
Write out of place (`y = y + 1` instead of `y += 1`, `y = y.masked_fill(mask, 0)` instead of
`y[mask] = 0`), or `clone()` the tensor before writing to the copy.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    invalid=(
        Example(
            """
import torch
x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)   # sigmoid saves its output y
y += 1                 # GG001
y.sum().backward()
""",
            raises=SAVED_MESSAGE,
        ),
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
x = torch.randn(3)
z = x * w              # mul saves x for w's gradient
x.add_(1)              # GG001
z.sum().backward()
""",
            raises=SAVED_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(4, requires_grad=True)
y = x + 1              # add saves nothing
y += 1
y.sum().backward()
"""
        ),
        Example(
            """
import torch
x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)
y = y + 1              # out of place
y.sum().backward()
"""
        ),
    ),
    when_wrong="""
It can miss writes hidden in functions it does not follow, and it assumes the saving op's graph reaches a
backward when the graph is returned or passed on.
""",
)
