"""GG102 silent-data-write: a write through ``.data`` to a tensor a pending graph saved (no error, wrong grads)."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.callers import through_callers
from ..fixes.context import CannotFix, FUNCTIONS, FixContext
from ..fixes.edits import renamed
from ..fixes.into_graph import write_in_graph
from ..fixes.moves import move_after_backward, mutation_in, units
from ..fixes.copies import fresh_name, later_reads_of_attribute, require_dominated
from ..fixes.writes import InPlaceWrite, param_escape, root_name, short
from ..inference.events import Finding, Mutation
from ..inference.values import Grad, Tensor
from ..knowledge.names import NUMPY_OUT_TWINS
from ..messages import Message
from ..statements import every_node, is_dotted, number_written_out
from .base import Example, Rule
from .common import call_path_related, conflict_related, first_conflict, grad_leaf, piece_of, where_it_reads
from .gg001_saved_tensor_mutated import clone_where_saved


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation):
        return
    if not mutation.conflicts and mutation.read_after is not None:
        if mutation.hidden_from.leaf:
            if mutation.grad_mode_known or mutation.read_after.kind == "backward":
                yield _own_values_replaced(mutation)
            return
        yield _forward_changed(mutation)
        return
    if mutation.kind != "data":
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        return
    save = conflict.save
    yield Finding(
        "GG102",
        mutation.node,
        Message.format(
            "{how} changes {label} behind autograd's back: `{op}` on {saved} saved it for backward, and {writes} "
            "do not bump the version counter, so {reads} silently computes wrong gradients. Write after the backward, "
            "or use `with torch.no_grad():` on the tensor itself (then torch raises instead of lying).",
            how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, reads=where_it_reads(conflict),
            writes="writes to a NumPy array over its memory" if "NumPy" in mutation.how else "`.data` writes"),
        certain=save.certain,
        related=conflict_related(conflict, mutation, silent=True),
        mutation=mutation,
    )


def _forward_changed(mutation: Mutation) -> Finding:
    """A hidden write to a tensor with a grad_fn that a later backward reads: no error (no saved copy of it was
    changed), but the new values have no gradient path, so backward differentiates the old computation."""
    owner, sink = mutation.hidden_from, mutation.read_after
    hidden = _hidden_how(mutation)
    related = []
    if owner.origin is not None:
        related.append((owner.origin, Message.format("{label} is computed here, with a grad_fn", label=owner.label)))
    related += call_path_related(mutation)
    related.append((sink.node, "backward reads the changed values here, but differentiates them as if unchanged: "
                               "no error, wrong gradients" if sink.kind == "backward" else
                    "the forward returns a value computed from the changed tensor here; the backward through it "
                    "differentiates the values as if unchanged: no error, wrong gradients"))
    return Finding(
        "GG102",
        mutation.node,
        Message.format(
            "{how} changes {label}, which has a grad_fn, {hidden}: autograd records no operation for the change, "
            "so {reads} differentiates the values as if they were never changed (no error, wrong gradients). Make the change an operation of the graph (`{name} = {name} * mask`, `torch.where`, "
            "`.clamp()` out of place), or apply it to a detached copy (`.detach().clone()`) that backward never reads.",
            how=mutation.how, label=owner.label, hidden=hidden, name=_name(owner),
            reads=Message.format("the backward on {sink}" if sink.kind == "backward"
                                 else "backward through the value returned on {sink}", sink=sink.node)),
        certain=owner.requires_grad == Grad.YES,
        related=related,
        mutation=mutation,
    )


def _own_values_replaced(mutation: Mutation) -> Finding:
    """``w.data = torch.mul(w, mask)`` in a forward: a leaf that requires grad takes values computed from itself
    with grad on, and the graph of that computation is dropped.  Grad mode was on when the caller's is not
    known only if a backward then reached the leaf through the new values (a forward's return does not show it)."""
    owner, sink = mutation.hidden_from, mutation.read_after
    reads = Message.format("the backward on {sink}" if sink.kind == "backward"
                           else "backward through the value returned on {sink}", sink=sink.node)
    return Finding(
        "GG102",
        mutation.node,
        Message.format(
            "`.data =` gives {label}, which requires grad, values computed from itself in the forward, and autograd "
            "records none of that computation: {reads} gives {label} the gradient of the new values as if they were "
            "its own, without the derivative of what computed them (no error, wrong gradients), and its own values "
            "are lost. Use the computed value in the forward in place of {label} and leave {label} unchanged.",
            label=owner.label, reads=reads),
        certain=True,
        related=[*call_path_related(mutation), (sink.node, "backward reaches the replaced values here, without the "
                                                           "derivative of what computed them: no error, wrong gradients")],
        mutation=mutation,
    )


def _hidden_how(mutation: Mutation) -> str:
    if mutation.kind == "data":
        return ("through a NumPy array that shares its memory" if "NumPy" in mutation.how
                else "through `.data`")
    if any(t.detached_from is not None for t in mutation.target.view_chain()):
        return "through a `.detach()` alias that shares its memory"
    return "with grad mode off (`torch.no_grad()`, `inference_mode` or a no-grad helper)"


def _name(owner: Tensor) -> str:
    label = owner.label
    return label.strip("`") if label.startswith("`") and label.count("`") == 2 else "t"


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix:
    """Move the `.data` write after the backward that needs the old value.  A hidden write the forward reads
    (no backward needs the old value, or the backward's loss reads the new one) goes into the graph instead
    (moving it would change the forward): the same op out of place, with grad on;
    through a NumPy view, the torch twin of the NumPy op on the tensor itself."""
    mutation = finding.mutation
    if mutation.own_reads is not None:
        return _own_values_in_graph(ctx, mutation)
    if not mutation.conflicts:
        try:
            return write_in_graph(ctx, finding)
        except CannotFix:
            pass
        try:
            return _numpy_view_in_graph(ctx, mutation)
        except CannotFix:
            return _through_detached_source(ctx, mutation)

    try:
        return _write_after_backward(ctx, finding)
    except CannotFix:  # the backward's loss reads the written values: they belong in the graph
        try:
            return write_in_graph(ctx, finding)
        except CannotFix:
            return _clone_where_saved(ctx, finding)


def _own_values_in_graph(ctx: FixContext, mutation: Mutation) -> Fix:
    """``w.data = f(w)`` in a forward: ``f(w)`` is bound to a name of its own, as an op of the graph, and read where
    the forward read the leaf's new values (the run's ``own_reads``: every op that took them, after the write in the
    same function, read them as ``w``), and in the code's other reads of ``w`` after it there.  The leaf keeps its
    own values.  Unsafe: the gradient now goes through ``f``, and ``w`` is no longer changed."""
    stmt, owner = ctx.own(mutation.node), mutation.hidden_from
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
    if not (isinstance(target, ast.Attribute) and target.attr == "data" and isinstance(target.value, ast.Attribute)
            and is_dotted(target.value)) or mutation.moment is None or not mutation.own_reads:
        raise CannotFix("not `w.data = f(w)` on an attribute, read by an op after")
    leaf, scope = target.value, ctx.scope_of(stmt)
    # (a layer's call reading it as its own weight, `self.conv(x)`, is not rewritten: a pruning mask's product read
    # there is as often meant to pass the gradient straight through, as in the real DPF case's own fix)
    later = later_reads_of_attribute(ctx, scope, stmt, leaf, stmt)
    # a helper that ends `return w`, its one return: its call gives the caller's op the new values (`f(w)` then)
    fn, run = ctx.function_of(stmt), mutation.moment
    last = fn.body[-1] if fn is not None else None
    returned = isinstance(last, ast.Return) and any(r is last.value for r in later) \
        and sum(isinstance(n, ast.Return) for n in every_node(fn)) == 1
    site = run.log.sites.get(run.frames[-1]) if returned else None
    if {id(r) for r in mutation.own_reads if not ctx.inside(r, stmt)} - {id(r) for r in later} - {id(site)}:
        raise CannotFix(f"an op reads the new values of `{ctx.source(leaf)}` other than as it, after it here")
    # the write alone in a `with` (`torch.enable_grad()`) or a `try` body with no handler: the name is bound whenever
    # what follows them runs
    start = stmt
    for up in units(ctx, stmt)[1:]:
        if not isinstance(up, ast.With) and not (isinstance(up, ast.Try) and not up.handlers and not up.orelse):
            break
        start = up
    require_dominated(ctx, later, start)
    if owner.storage.id in mutation.moment.log.escaped:
        raise CannotFix("the new values go where the analysis cannot see")
    name = fresh_name(ctx, scope, leaf.attr)
    edits = [TextEdit(*_range(ctx, node), name) for node in [target, *later]]
    return Fix(f"Compute `{name} = {short(ctx.source(stmt.value))}` in the graph and read it in place of "
               f"`{ctx.source(leaf)}`, which keeps its own values (unsafe: the gradient now goes through it)",
               False, tuple(edits))


def _range(ctx: FixContext, node: ast.AST) -> tuple[int, int, int, int]:
    line, column, end_line, end_column = ctx.char_range(node)
    return line, column + 1, end_line, end_column + 1


def _clone_where_saved(ctx: FixContext, finding: Finding) -> Fix:
    """The write cannot move after the backward it breaks (that backward runs in a caller, or the graph is
    returned) nor go into the graph (a parameter, a buffer): the op that saved the tensor saves a clone instead,
    so the backward reads the values the forward computed with, and the write changes memory no backward needs
    (GG001's repair of a write to saved memory).  Not when something else saved it (a caller's analysis)."""
    mutation = mutation_in(finding)
    if finding.saves_elsewhere:
        raise CannotFix("a caller's analysis saw the saves")
    if mutation.read_after is not None or mutation.value_grad != Grad.NO:
        # the new values are read by a backward, or computed with a graph the write drops (`w.data /= sigma(w)`):
        # meant for this step's computation, where a clone would leave them cut from it
        raise CannotFix("the written values belong in the graph")
    direct = mutation.entry() is mutation.node  # (else which argument an op saved is told by the run only)
    rw, shown = clone_where_saved(ctx, mutation, InPlaceWrite.of_mutation(ctx, mutation) if direct else None)
    return rw.fix(f"Clone what backward needs where it is saved: {shown}", safe=True)


def _write_after_backward(ctx: FixContext, finding: Finding) -> Fix:
    """GG102: do the ``.data`` write after the backward that needs the old value.  (Writing under
    ``torch.no_grad()`` to the tensor itself would make that backward raise: not a fix.)"""
    return move_after_backward(ctx, mutation_in(finding), "Write after the backward")


# ---- The fix through the tensor a `.detach()` alias shares memory with ------------------------------
# ``x_d = x.detach(); x_d.zero_()`` changes ``x``'s memory where autograd does not see it.  When no backward needs
# ``x``'s old value (no save in conflict) and ``x`` still names that tensor at the write, the same write through
# ``x`` itself (``x.zero_()``) changes the same memory -- ``x_d`` sees it as before -- and autograd records it.
# Unsafe, like every hidden write put in the graph: the gradient now goes through the op.


def _through_detached_source(ctx: FixContext, mutation: Mutation) -> Fix:
    owner = mutation.hidden_from
    if owner is None or owner.leaf or mutation.conflicts or not mutation.grad_enabled \
            or not any(t.detached_from is not None and t.detached_from.storage is owner.storage
                       for t in mutation.target.view_chain()) or piece_of(owner) is not None or grad_leaf(owner.root()):
        raise CannotFix("not a write with grad on through a `.detach()` alias of a tensor with a grad_fn")
    write = InPlaceWrite.of_mutation(ctx, mutation)
    alias, _ = root_name(write.target)
    scope = ctx.scope_of(write.stmt)
    names = ctx.names_in(scope)
    stores = [n for n in names.of(alias or "") if not isinstance(n.ctx, ast.Load) and n is not write.target]
    binding = ctx.parents.get(stores[0]) if len(stores) == 1 else None
    value = binding.value if isinstance(binding, ast.Assign) and binding.targets == stores else None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "detach"
            and not value.args and isinstance(value.func.value, ast.Name)) or ctx.loops_around(write.stmt, scope):
        raise CannotFix("the alias is not bound once to `name.detach()`, or the write is in a loop")
    source = value.func.value.id
    if any(not isinstance(n.ctx, ast.Load) and binding.lineno <= n.lineno <= write.stmt.lineno
           for n in names.of(source)) or not binding.end_lineno < write.stmt.lineno:
        raise CannotFix(f"`{source}` is bound again between the alias and the write")
    root = next(n for n in names.of(alias) if ctx.inside(n, write.target) and isinstance(n.ctx, ast.Load)) \
        if write.kind != "augassign" or not isinstance(write.target, ast.Name) else write.target
    line, column, end_line, end_column = ctx.char_range(root)
    return Fix(f"Write through `{source}` itself, so autograd records it (unsafe: the gradient now goes through "
               f"the write, where it skipped it before)", False, (TextEdit(line, column + 1, end_line, end_column + 1,
                                                                          source),))


# ---- The fix through a NumPy view -----------------------------------------------------------------
# GG102 on a NumPy view: a write to ``arr = t.detach().numpy()`` changes ``t`` behind autograd's back.  When the
# forward reads ``t`` afterwards, the fix puts the write in the graph with the torch twin of the NumPy op, on ``t``
# itself: ``np.clip(arr, a, b, out=arr)`` -> ``t = t.clamp(a, b)``, ``arr[i, n:] = 0.0`` -> ``t = t.clone()`` and
# ``t[i, n:] = 0.0``, ``arr *= 2`` -> ``t = t * 2``.
#
# Offered only when ``arr`` is the view's one name, bound once from a local tensor name, and read nowhere but in
# its binding and in this write (so nothing reads the array the write no longer changes).  Always unsafe, like
# every hidden write put in the graph: the gradient now goes through the op, where it skipped it before.

_TO_NUMPY = ("detach", "cpu")
_AUG = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


def _numpy_view_in_graph(ctx: FixContext, mutation: Mutation) -> Fix:
    owner = mutation.hidden_from
    if owner is None or owner.leaf or "NumPy" not in mutation.how:
        raise CannotFix("not a write through a NumPy view of a tensor with a grad_fn")
    if mutation.target.storage is not owner.storage:
        raise CannotFix("the write does not reach the memory of the tensor with the grad_fn")
    write = InPlaceWrite.of_mutation(ctx, mutation)
    if write.value_use:
        raise CannotFix("the write's result is used")
    stmt = write.stmt
    array = write.target.value if write.kind == "setitem" else write.target
    if not isinstance(array, ast.Name):
        raise CannotFix("the array is not a local name")
    tensor = _viewed_tensor(ctx, stmt, array.id)
    new = _in_torch(ctx, write, array.id, tensor)
    report = write.sharing(ctx, tensor)
    through = report.escapes == [param_escape(tensor)]
    if report.holders_read_after or (report.escapes and not through) or set(report.aliases_read_after) - {array.id}:
        raise CannotFix(report.reason())
    ctx.require_own_lines(stmt)
    new = new.replace("\n", ctx.newline + ctx.indent_of(stmt))
    line, column, end_line, end_column = ctx.char_range(stmt)
    edit = TextEdit(line, column + 1, end_line, end_column + 1, new)
    title = (f"Put the write in the graph: `{short(new.splitlines()[-1])}` on the tensor instead of its NumPy view "
             "(unsafe: the gradient now goes through it, where it skipped it before)")
    if through:  # the tensor is the function's parameter: it returns the new one, its calls rebind theirs
        return through_callers(ctx, (edit,), stmt, tensor, title, False, moment=write.moment)
    return Fix(title, False, (edit,))


def _viewed_tensor(ctx: FixContext, stmt: ast.stmt, array: str) -> str:
    """The local tensor name ``array`` is the one NumPy view of: ``array = t.detach().numpy()``, bound once in the
    function before ``stmt``, in its block or one around it, and read only there and in ``stmt``."""
    scope = ctx.scope_of(stmt)
    if not isinstance(scope, FUNCTIONS):
        raise CannotFix("the array is not a function's local")
    names = ctx.names_in(scope)
    if array in names.declared:
        raise CannotFix("the array's name is global or nonlocal")
    if any(ctx.definitions_between(n, scope) for n in names.of(array)):
        raise CannotFix("a nested scope uses the array")
    stores, loads = [], []
    for node in names.of(array):
        if isinstance(stmt, ast.AugAssign) and node is stmt.target:
            continue  # the write itself
        (loads if isinstance(node.ctx, ast.Load) else stores).append(node)
    if len(stores) != 1:
        raise CannotFix("the array's name is bound more than once")
    binding = ctx.parents.get(stores[0])
    if not (isinstance(binding, ast.Assign) and binding.targets == [stores[0]] and binding.lineno < stmt.lineno):
        raise CannotFix("the array is not bound by a plain assignment before the write")
    if ctx.parents.get(binding) not in (ctx.parents.get(stmt), *ctx.ancestors(stmt)):
        raise CannotFix("the array's binding does not always run before the write")
    outer, inner = ctx.loops_around(binding, scope), ctx.loops_around(stmt, scope)
    if outer and inner[len(inner) - len(outer):] != outer:
        raise CannotFix("the array is bound in a loop the write is not in")
    if any(not any(a is stmt for a in [n, *ctx.ancestors(n)]) for n in loads):
        raise CannotFix("the array is read elsewhere than in the write")
    value = binding.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "numpy"
            and not value.args and not value.keywords):
        raise CannotFix("the array is not a `.numpy()` view")
    source = value.func.value
    while isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) \
            and source.func.attr in _TO_NUMPY and not source.args and not source.keywords:
        source = source.func.value
    if not isinstance(source, ast.Name):
        raise CannotFix("the view is not of a local tensor name")
    if any(isinstance(n.ctx, ast.Store) and binding.lineno < n.lineno < stmt.lineno for n in names.of(source.id)):
        raise CannotFix("the tensor's name is bound again between the view and the write")
    return source.id


def _in_torch(ctx: FixContext, write: InPlaceWrite, array: str, tensor: str) -> str:
    """The write's statement spelled as the torch op on ``tensor``, rebinding it."""
    if write.kind == "out":
        call = write.call
        q = ctx.qual(call.func) or ""
        twin = NUMPY_OUT_TWINS.get(q.removeprefix("numpy.")) if q.startswith("numpy.") else None
        first = call.args[0] if call.args else None
        if twin is None or len(call.keywords) != 1 or not (isinstance(first, ast.Name) and first.id == array):
            raise CannotFix("no torch twin for this NumPy call")
        numbers = call.args[1:]
        if not all(number_written_out(n) for n in numbers) or twin.count("{") - 1 != len(numbers):
            raise CannotFix("the NumPy call's other arguments are not numbers")
        return f"{tensor} = " + twin.format(*(ctx.source(n) for n in numbers), t=tensor)
    if write.kind == "augassign" and type(write.stmt.op) in _AUG and number_written_out(write.stmt.value):
        return f"{tensor} = {tensor} {_AUG[type(write.stmt.op)]} {ctx.source(write.stmt.value)}"
    if write.kind == "setitem" and number_written_out(write.stmt.value):
        index = write.target.slice
        if not _plain_index(index, array):
            raise CannotFix("an index NumPy and torch may read differently")
        if index.end_lineno != index.lineno:
            raise CannotFix("the index spans lines")
        spelled = renamed(ctx, index, array, tensor)
        return f"{tensor} = {tensor}.clone()\n{tensor}[{spelled}] = {ctx.source(write.stmt.value)}"
    raise CannotFix("no torch twin for this NumPy write")


def _plain_index(index: ast.expr, array: str) -> bool:
    """Integers, slices, names, and comparisons of the array with numbers: indexes that mean the same to NumPy
    and to torch."""
    for node in ast.walk(index):
        if isinstance(node, ast.Compare):
            if not (isinstance(node.left, ast.Name) and node.left.id == array and len(node.comparators) == 1
                    and number_written_out(node.comparators[0])):
                return False
        elif isinstance(node, ast.Name):
            continue
        elif not isinstance(node, (ast.Tuple, ast.Slice, ast.Constant, ast.UnaryOp, ast.BinOp, ast.Load,
                                   ast.operator, ast.unaryop, ast.cmpop)):
            return False
        if isinstance(node, ast.Constant) and not (node.value is None or number_written_out(node)):
            return False
    return True




RULE = Rule(
    code="GG102",
    name="silent-data-write",
    summary="A `.data` write changes a tensor that a pending graph saved: no error, silently wrong gradients.",
    explanation="""
`t.data` shares `t`'s memory but not its version counter.  A write through it (`w.data.clamp_()`,
`x.data.mul_()`, `x.data[mask] = 0`) changes a tensor autograd saved for backward without autograd
noticing: `backward()` runs and returns wrong gradients.  (`param.data = new` is different: it rebinds the
storage and the saved old one is kept, so that backward is not corrupted.)  In a forward, `w.data = f(w)` with
grad on (`torch.mul(w, mask)`, `F.normalize(w)`) drops the graph of `f`: the backward gives `w` the gradient of
the new values as if they were its own, without `f`'s derivative, and `w`'s own values are lost.
""",
    fix_advice="""
Do the write after the backward that needs the old value, or write under `with torch.no_grad():` to the
tensor itself so that autograd's version check can see it.  When the backward runs elsewhere (a caller of the
`forward` that writes), clone the tensor where the op saves it (`h * self.gain.clone()`).
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
A `.data` write to a saved tensor is flagged even when backward happens to mask out its effect: for example, the
written positions get zero gradient anyway. `p.data = new` is flagged only in a forward, when `new` is computed
from `p` itself with grad on and a backward then reaches `p`: a projection meant to stay outside autograd
(`w.data = w.clamp(min=0)` as a constraint) is flagged too; write it from `w.data` or under `torch.no_grad()`.
""",
    invalid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
y = torch.sigmoid(w * 2)
y.data.mul_(0.5)                    # GG102
y.sum().backward()                  # runs, but w.grad is wrong
""",
            raises=None,
        ),
    ),
    valid=(
        Example(
            """
import torch
w = torch.randn(3, requires_grad=True)
y = torch.sigmoid(w * 2)
y.sum().backward()
w.data.mul_(0.5)
"""
        ),
    ),
)
