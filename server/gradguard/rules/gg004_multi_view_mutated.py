"""GG004 multi-view-mutated: an in-place write to an output of unbind/split/chunk/unpacking/iteration."""

from __future__ import annotations

import ast

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.callers import fix_in_helper, rebound_in_closure
from ..fixes.context import CannotFix, FixContext
from ..fixes.edits import Rewrite
from ..fixes.copies import fix_leaf_write
from ..fixes.inplace import RebindRewrite, fix_or_none, is_parameter_update, mutation_of, rebind_fix
from ..fixes.writes import (
    NONLOCAL_ESCAPE,
    InPlaceWrite,
    assign,
    aug_to_binop,
    code,
    cst_mod,
    out_of_place,
    parse_expr,
    root_name,
    short,
)
from ..inference.events import Finding, Mutation
from ..inference.values import Grad
from ..knowledge import load_knowledge
from ..knowledge.names import ELEMENTWISE_INPLACE, OUT_OF_PLACE_METHODS, PIECES, SEQUENCE_VIEWS
from ..messages import Message
from ..statements import names
from .base import Example, Rule
from .common import call_path_related, grad_leaf, piece_of, pieces_call, view_call
from .gg001_saved_tensor_mutated import fix as saved_tensor_fix, only_the_caller_holds, through_callers_fix
from .gg005_inplace_activation_on_saved import module_inplace_false

MESSAGE = "Output 0 of Unbind is a view and is being modified inplace."


def check(mutation: Mutation):
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    target = mutation.target
    if not mutation.grad_enabled:
        return
    piece = piece_of(target)
    if piece is None or target.requires_grad == Grad.NO:
        return
    if piece.custom_view is not None:
        yield _custom_view_finding(mutation, piece)
        return
    op = piece.multi_view  # torch's node: chunk's pieces are outputs of Split
    what, condition = _source(piece)
    if piece is target:
        raises = f'"Output N of {op} is a view and is being modified inplace"'
    else:  # a slice or view of the piece: torch names that view's node
        raises = '"Output N of ... is a view and is being modified inplace. This view is the output of a function ' \
                 'that returns multiple views"'
    yield Finding(
        "GG004",
        mutation.node,
        f"{mutation.how} modifies {what}, one of several views of one tensor (torch's `{op}`); {condition}torch raises "
        f"here: {raises}. Rebind out of place or `clone()` the piece first.",
        certain=target.requires_grad == Grad.YES and mutation.grad_mode_known,
        related=[*([(piece.origin, "the piece is made here")] if piece.origin is not None else []),
                 *call_path_related(mutation)],
        mutation=mutation,
    )


def _custom_view_finding(mutation: Mutation, piece) -> Finding:
    """A write to a view made inside a custom Function: an input a Function's forward returned without
    ``ctx.mark_dirty``, or what a full backward hook wraps a module's inputs and outputs in.  The hook's
    registration is what the user changes (a tensor hook on the output instead), so a hook's view is reported
    there; a Function's output at the write."""
    node = piece.custom_view
    by_hook = piece.multi_view == "BackwardHookFunction"
    if by_hook:
        registration = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else \
            "register_full_backward_hook"
        what = Message.format("a tensor that `{registration}` on {node} wraps (with that hook, torch runs the "
                              "module's inputs and outputs through a `BackwardHookFunction`)",
                              registration=registration, node=node)
        advice = ("Register a tensor hook on the output inside a forward hook instead (`output.register_hook`), or "
                  "make the write out of place.")
    else:
        what = Message.format("the output of `{op}.apply` on {node}, which is an input its forward returned "
                              "without `ctx.mark_dirty`", op=piece.multi_view, node=node)
        advice = "Call `ctx.mark_dirty` on that input in the forward, return a clone, or make this write out of place."
    return Finding(
        "GG004",
        node if by_hook else mutation.node,
        Message.format("{how} modifies {what}; torch raises at this write: \"Output 0 of {op} is a view and is "
                       "being modified inplace. This view was created inside a custom Function\". {advice}",
                       how=mutation.how, what=what, op=piece.multi_view, advice=advice),
        certain=mutation.target.requires_grad == Grad.YES and mutation.grad_mode_known,
        related=[(mutation.node, "the in-place write") if by_hook else (node, "the Function returns the view here"),
                 *call_path_related(mutation)],
        mutation=mutation,
    )


def _source(piece) -> tuple[str, str]:
    """The piece as the user made it -- the function they called (`chunk`, not torch's `Split`), or the
    unpacking or loop -- and the condition under which it is a view at all: unpacking a call's result unbinds
    only if the call returns one tensor, which the analysis may not know."""
    call = view_call(piece)
    if call is not None:
        return f"a piece returned by `{call}`", ""
    origin = piece.origin
    if isinstance(origin, ast.Assign):
        value = ast.unparse(origin.value)
        if isinstance(origin.value, ast.Call):
            return f"an element unpacked from `{value}`", f"if `{value}` returns one tensor (unpacking unbinds it), "
        return f"an element unpacked from `{value}` (unpacking a tensor unbinds it)", ""
    if isinstance(origin, ast.expr):
        return f"an element of `{ast.unparse(origin)}` taken by iteration (iterating a tensor unbinds it)", ""
    return "an output of a tensor's unbind", ""


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG004: rebind the piece out of place, or write through a plain view of the whole tensor.  A piece held as
    an element of a local list or dict is rebound there, as GG001 rebinds one."""
    held = finding.mutation
    if held is not None and held.in_container:
        target = InPlaceWrite.of(ctx, held.entry()).target
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Subscript):
            # `parts_list[0][0].zero_()`: the element may be the tuple of pieces itself, which has no `clone`
            raise CannotFix("the write indexes into the element, which may hold the pieces")
        return saved_tensor_fix(ctx, finding)
    mutation = mutation_of(finding)
    if mutation.module is not None:  # an `inplace=True` layer's own write (on a backward hook's view): as GG005
        return module_inplace_false(ctx, mutation)
    write = fix_or_none(lambda: InPlaceWrite.of_mutation(ctx, mutation))  # None: a helper's write, reached by a call
    if write is not None and grad_leaf(mutation.target.root()) and is_parameter_update(ctx, mutation, write):
        return fix_leaf_write(ctx, finding, update=True)  # a parameter's reset or update: as GG002's, under no_grad
    plain = write and fix_or_none(lambda: plain_view_write(ctx, write))
    if plain:
        return plain
    if write is not None and mutation.target.base is not None:  # the rows of a tensor the loop iterates over
        whole = fix_or_none(lambda: whole_tensor_instead_of_rows(ctx, write))
        if whole is not None:
            return whole
    rows = fix_or_none(lambda: rows_through_index(ctx, mutation))
    if rows is not None:
        return rows
    if write is None:  # a helper's write, reached by a call: mended in the helper when every caller allows it
        return fix_or_none(lambda: fix_in_helper(fix, ctx, finding))
    element = fix_or_none(lambda: rebuild_pieces(ctx, write))
    if element is not None:
        return element
    rows = fix_or_none(lambda: rows_through_plain_views(ctx, mutation))
    if rows is not None:
        return rows
    if any(isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and loop.target.id == root_name(write.target)[0]
           and root_name(loop.iter)[0] is None for loop in ctx.loops_around(write.stmt)):
        # the rows of `self.t`: whether the tensor is read later is beyond the alias analysis of local names
        raise CannotFix("the written name is the row of a tensor that is not a local name")
    if mutation.target.multi_view and _indexes_pieces(ctx, write.target):
        raise CannotFix("`parts[0]` of a split: the name holds the pieces, not a tensor to copy")
    rebind = RebindRewrite(ctx, write, enclosing=True)
    target = mutation.target
    if not rebind.direct and target.multi_view and not (target.base is not None and target.base.multi_view):
        # `parts[0].zero_()`: the subscript picks a piece out of the tuple `parts`, it is no view of a tensor
        # named `parts` (`parts.clone()` would not even run)
        raise CannotFix(f"`{rebind.name}` holds the pieces; the written piece is an element of it")
    report = rebind.report
    outside = all(e == NONLOCAL_ESCAPE or e.endswith(" holds it outside this function") for e in report.escapes)
    if (NONLOCAL_ESCAPE in report.escapes or not rebind.local) and outside and not report.aliases_read_after \
            and not report.holders_read_after:
        # a closure's piece (`nonlocal`, or a free variable: declared so): rebound there, when at each call of the
        # closure nothing else (the split tensor, another piece) holds it and is read after (the run there tells)
        closure = fix_or_none(lambda: rebound_in_closure(ctx, write, rebind.name, rebind.rewrite))
        if closure is not None:
            return closure
    if not rebind.local:
        raise CannotFix(f"`{rebind.name}` belongs to an enclosing scope; binding it here would not reach it")
    if only_the_caller_holds(rebind):  # a helper's parameter (or a view of it): it returns it, its calls rebind
        callers = fix_or_none(lambda: through_callers_fix(ctx, rebind))
        if callers is not None:
            return callers
    return rebind_fix(rebind, "Write out of place")


def _indexes_pieces(ctx: FixContext, target: ast.expr) -> bool:
    """``parts[i]`` where the file binds ``parts`` to the pieces of a split (``parts = torch.split(t, 2)``): the
    written tensor is an element of the sequence ``parts`` holds, which has no ``clone``."""
    node = target
    while isinstance(node, (ast.Subscript, ast.Call)):
        node = node.value if isinstance(node, ast.Subscript) else node.func
        if isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name):
            break
    if not isinstance(node, ast.Name):
        return False
    for use in ctx.names_in(ctx.tree).of(node.id):
        binding = ctx.parents.get(use)
        if isinstance(binding, ast.Assign) and any(t is use for t in binding.targets):
            value = binding.value
            func = value.func if isinstance(value, ast.Call) else None
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in PIECES:
                return True
    return False


def plain_view_write(ctx: FixContext, write: InPlaceWrite) -> Fix | None:
    """``h.split(2)[0] += 1`` -> ``h[0:2] += 1``: the same memory through a plain view, which autograd lets
    a write go through (and which ``h`` sees, as before)."""
    target = write.target
    node = target
    while isinstance(node, ast.Subscript) and not pieces_call(node.value):
        node = node.value
    if not (isinstance(node, ast.Subscript) and pieces_call(node.value)):
        raise CannotFix("not an indexed output of split/unbind")
    call, index = node.value, node.slice
    k = _int_literal(index)
    if k is None or k < 0:
        raise CannotFix("the piece's index is not a literal")
    func = call.func
    q = ctx.qual(func) or ""
    if isinstance(func, ast.Attribute) and not q.startswith("torch."):
        base, rest = func.value, list(call.args)
        op = func.attr
    elif q in ("torch.split", "torch.unbind") and call.args:
        base, rest = call.args[0], list(call.args[1:])
        op = q.rsplit(".", 1)[1]
    else:
        raise CannotFix("not split/unbind")
    dim_node = rest[1] if len(rest) > 1 else next((kw.value for kw in call.keywords if kw.arg == "dim"), None)
    if op == "unbind":
        dim_node = rest[0] if rest else dim_node
    dim = 0 if dim_node is None else _int_literal(dim_node)
    if dim is None or dim < 0 or len(call.keywords) > (1 if any(kw.arg == "dim" for kw in call.keywords) else 0):
        raise CannotFix("the dimension is not a literal")
    lead = ":, " * dim
    base_code = ctx.source(base)
    if op == "split":
        size = _int_literal(rest[0]) if rest else None
        if size is None or size <= 0:
            raise CannotFix("split size is not a literal")
        view = f"{base_code}[{lead}{k * size}:{(k + 1) * size}]"
    elif op == "unbind":
        view = f"{base_code}[{lead}{k}]"
    else:
        raise CannotFix("chunk sizes depend on the tensor's shape")
    if not isinstance(base, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
        raise CannotFix("the split tensor is not a simple expression")
    rw = Rewrite(ctx).replace_node(ctx.cst(node), parse_expr(view))
    return rw.fix(f"Write through a plain view: `{view}`", safe=True)


def rows_through_plain_views(ctx: FixContext, mutation: Mutation) -> Fix:
    """``for t in batch:`` whose row is written in place (by the loop's body or a helper it calls) -> ``for t in
    [batch[i] for i in range(len(batch))]``: iterating a tensor unbinds it, and each row is now a plain view of the
    same memory instead, which autograd lets a write go through (and which ``batch`` sees, as before).  Only for a
    loop over a local name of a function; refused where the rows are of a leaf that requires grad (torch refuses a
    write through any view of one)."""
    piece = piece_of(mutation.target)
    origin = piece.origin if piece is not None else None
    loop = ctx.parents.get(origin) if isinstance(origin, ast.expr) else None
    if not (isinstance(loop, ast.For) and loop.iter is origin and isinstance(origin, ast.Name)):
        raise CannotFix("the piece is not a row of a loop over a named tensor")
    if piece.base is not None and grad_leaf(piece.base.root()):
        raise CannotFix("the rows are of a leaf that requires grad: a write through any view of it is refused")
    if ctx.function_of(loop) is None:
        raise CannotFix("a loop at module level: its functions may read the rows' tensor")
    if any(not isinstance(n.ctx, ast.Load) for name in ("len", "range") for n in ctx.names_in(ctx.tree).of(name)) \
            or {"len", "range"} & set(ctx.imports):
        raise CannotFix("`len` or `range` is rebound in the file")
    index = "i" if origin.id != "i" else "j"
    new = f"[{origin.id}[{index}] for {index} in range(len({origin.id}))]"
    rw = Rewrite(ctx).replace_node(ctx.cst(origin), parse_expr(new))
    return rw.fix(f"Write through plain views: iterate over `{short(new)}`", safe=True)


def _returns_pieces(ctx: FixContext, call: ast.Call) -> bool:
    q = ctx.qual(call.func) or ""
    if q.startswith("torch.") and q.removeprefix("torch.") in SEQUENCE_VIEWS:
        return True
    return isinstance(call.func, ast.Attribute) and not q.startswith("torch.") and call.func.attr in SEQUENCE_VIEWS


def _int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return -inner if inner is not None else None
    return None


def rebuild_pieces(ctx: FixContext, write: InPlaceWrite) -> Fix | None:
    """``parts = torch.split(t, 2); parts[0].zero_()`` -> ``parts = (torch.zeros_like(parts[0]), *parts[1:])``:
    the tuple of pieces is rebuilt with the new piece instead of writing the old one."""
    cst = cst_mod()
    target = write.target
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
        raise CannotFix("not an element of a named tuple of pieces")
    k = _int_literal(target.slice)
    if k is None or k < 0:
        raise CannotFix("the element's index is not a literal")
    name = target.value.id
    if write.value_use:
        raise CannotFix("the in-place result is used")
    scope = ctx.scope_of(write.stmt)
    bindings = [n for n in ctx.names_in(scope).of(name) if not isinstance(n.ctx, ast.Load)]
    binding = ctx.parents.get(bindings[0]) if len(bindings) == 1 else None
    if not (isinstance(binding, ast.Assign) and isinstance(binding.value, ast.Call) and _returns_pieces(ctx, binding.value)):
        raise CannotFix(f"`{name}` is not bound once to the tuple split/chunk/unbind return")
    report = write.sharing(ctx, name)
    if not report.clean:
        raise CannotFix(report.reason())
    element = ctx.cst(target)
    if write.kind == "method":
        new_piece = out_of_place(ctx, write.call, element)
    elif write.kind == "augassign":
        new_piece = aug_to_binop(ctx.cst(write.stmt))
    else:
        raise CannotFix("not a method or augmented assignment on the element")
    before = f"*{name}[:{k}], " if k else ""
    new = assign(
        cst.Name(name),
        parse_expr(f"({before}__PIECE__, *{name}[{k + 1}:])").visit(_Placeholder("__PIECE__", new_piece)),
    )
    rw = Rewrite(ctx).replace_node(ctx.cst(write.stmt), new)
    return rw.fix(f"Rebuild the pieces: `{short(code(new))}`", safe=True)


class _Placeholder:
    """A libcst transformer replacing the name ``placeholder`` with a node (built lazily: libcst import)."""

    def __new__(cls, placeholder: str, node):
        cst = cst_mod()

        class Replace(cst.CSTTransformer):
            def leave_Name(self, original, updated):
                return node if original.value == placeholder else updated

        return Replace()


# ---- The fix of a loop over rows -----------------------------------------------------------------
# GG004 on ``for row in t: row.mul_(c)``: the rows are pieces of ``t`` (its ``unbind``), which torch does not let a
# write go through; the same elementwise op on the whole tensor is what the loop computes (``c`` broadcast against a
# row's dimensions broadcasts the same way against ``t``'s trailing ones), so ``t = t.mul(c)``.
#
# Offered only when the loop is that one statement, the op is elementwise, its arguments do not read the row, the
# row's name is not read after the loop, and nothing else holds ``t``'s memory as the run went (then rebinding ``t``
# is the write).



def whole_tensor_instead_of_rows(ctx: FixContext, write: InPlaceWrite) -> Fix:
    stmt = write.stmt
    loop = ctx.parents.get(stmt)
    if not (isinstance(loop, ast.For) and loop.body == [stmt] and not loop.orelse
            and isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Name)):
        raise CannotFix("not a one-statement loop over the rows of a named tensor")
    row, tensor = loop.target.id, loop.iter.id
    call = write.call
    if write.kind != "method" or write.value_use or not (isinstance(write.target, ast.Name) and write.target.id == row):
        raise CannotFix("not an in-place method on the loop's row")
    op = call.func.attr.removesuffix("_")
    if op not in ELEMENTWISE_INPLACE or op not in OUT_OF_PLACE_METHODS or not call.func.attr.endswith("_"):
        raise CannotFix("not an elementwise in-place op")
    if any({row, tensor} & names(a) for a in [*call.args, *call.keywords]):
        raise CannotFix("the op's arguments read the row or the tensor")
    scope = ctx.scope_of(loop)
    if any(n is not loop.target and not ctx.inside(n, loop) for n in ctx.names_in(scope).of(row)):
        raise CannotFix("the row's name is used outside the loop")
    if write.moment is None:
        raise CannotFix("no run of the write shows who holds the tensor")
    report = write.sharing(ctx, tensor)  # the run's holders of the rows' memory, but the row itself
    report.aliases_read_after = [other for other in report.aliases_read_after if other != row]
    if not report.clean:
        raise CannotFix(report.reason())
    ctx.require_own_lines(loop)
    args = ctx.source(call)[len(ctx.source(call.func)):]
    new = f"{tensor} = {tensor}.{op}{args}"
    line, column, end_line, end_column = ctx.char_range(loop)
    return Fix(f"Write the whole tensor at once: `{new}` instead of each row of it", True,
               (TextEdit(line, column + 1, end_line, end_column + 1, new),))


# ---- The fix of a loop whose rows are written one by one -----------------------------------------------
# ``for row, m in zip(t, means): row.sub_(m)``: each row is a piece of ``t`` (its ``unbind``), which torch does not let
# a write go through, but ``t[i]`` is a plain view of the same memory, which it does.  So the loop counts its rows and
# writes ``t[i]`` where it wrote ``row``: the same memory gets the same values, every holder of ``t`` sees them as
# before, and no other read changes (safe).  Offered when the row is read nowhere but as the receiver of in-place
# writes in the loop (a piece read after its base was written raises: "its base or another view of its base has been
# modified inplace"), ``t`` is an expression the loop does not rebind (a name, attributes and constant indices), and
# the run saw ``t``'s memory neither as a leaf that requires grad nor saved for a backward (then the write through
# ``t[i]`` would raise too).  A helper's loop is fixed where it is: its callers' tensors get the same writes.


def rows_through_index(ctx: FixContext, mutation: Mutation) -> Fix:
    piece = piece_of(mutation.target)
    tensor = piece.origin if piece is not None else None
    if not isinstance(tensor, ast.expr) or piece.base is None or view_call(piece) is not None:
        raise CannotFix("not a row of a tensor a loop iterates over")
    if grad_leaf(piece.root()) or mutation.conflicts:
        raise CannotFix("the iterated tensor is a leaf that requires grad, or saved for backward: a write raises too")
    stmt = ctx.statement_of(mutation.node)
    loop = ctx.parents.get(tensor)
    index, row, zipped = None, None, None
    if isinstance(loop, ast.Call) and _named_call(ctx, loop, "zip") and tensor in loop.args:
        zipped, loop = loop, ctx.parents.get(loop)
    if isinstance(loop, ast.Call) and _named_call(ctx, loop, "enumerate") and loop.args == [zipped or tensor] \
            and not loop.keywords:
        counted, loop = loop, ctx.parents.get(loop)
        if not (isinstance(loop, ast.For) and loop.iter is counted and isinstance(loop.target, ast.Tuple)
                and len(loop.target.elts) == 2 and isinstance(loop.target.elts[0], ast.Name)):
            raise CannotFix("not a loop over the enumerated rows")
        index, inner = loop.target.elts[0].id, loop.target.elts[1]
    elif isinstance(loop, ast.For) and loop.iter is (zipped or tensor):
        inner = loop.target
    else:
        raise CannotFix("the rows are not the loop's own iteration")
    if zipped is not None:
        if not (isinstance(inner, ast.Tuple) and len(inner.elts) == len(zipped.args)) or zipped.keywords \
                or any(isinstance(a, ast.Starred) for a in zipped.args):
            raise CannotFix("the zip's items are not unpacked one name each")
        inner = inner.elts[zipped.args.index(tensor)]
    if not isinstance(inner, ast.Name) or not isinstance(loop, ast.For) or loop not in ctx.loops_around(stmt):
        raise CannotFix("the row is not a name of the loop around the write")
    row = inner.id
    scope = ctx.scope_of(loop)
    names = ctx.names_in(scope)
    writes = [n for n in names.of(row) if n is not inner]
    if not writes or not all(ctx.inside(n, loop) and _receiver_of_write(ctx, n) for n in writes):
        raise CannotFix("the row is read otherwise than written in place")
    _require_stable(ctx, tensor, loop, names)
    if index is not None and any(isinstance(n.ctx, ast.Store) and ctx.inside(n, loop) and n is not loop.target.elts[0]
                                 for n in names.of(index)):
        raise CannotFix("the loop rebinds its counter")
    edits = []
    if index is None:
        index = next((c for c in ("i", "j", "k", "row_index") if not ctx.names_in(ctx.tree).of(c)), None)
        if index is None:
            raise CannotFix("no free name for the row's index")
        target = ctx.source(loop.target)
        if isinstance(loop.target, ast.Tuple) and not (target.startswith("(") and target.endswith(")")):
            target = f"({target})"
        edits += [_replace(ctx, loop.target, f"{index}, {target}"),
                  _replace(ctx, loop.iter, f"enumerate({ctx.source(loop.iter)})")]
    view = f"{ctx.source(tensor)}[{index}]"
    edits += [_replace(ctx, n, view) for n in writes]
    return Fix(f"Write each row through a plain view of the tensor: `{view}` instead of `{row}`", True,
               tuple(sorted(edits, key=lambda e: (e.line, e.column))))


def _named_call(ctx: FixContext, call: ast.Call, builtin: str) -> bool:
    """``call`` calls the builtin ``builtin`` (which the file does not bind to anything else)."""
    names = ctx.names_in(ctx.tree)
    return isinstance(call.func, ast.Name) and call.func.id == builtin and builtin not in names.definitions \
        and builtin not in names.imported and not any(isinstance(n.ctx, ast.Store) for n in names.of(builtin))


def _receiver_of_write(ctx: FixContext, name: ast.Name) -> bool:
    """``row.mul_(s)``, ``row += 1``, ``row[0] = 0``: the name is what an in-place write writes."""
    parent = ctx.parents.get(name)
    if isinstance(parent, ast.AugAssign) and parent.target is name:
        return True
    if isinstance(parent, ast.Attribute) and load_knowledge().is_inplace(parent.attr):
        call = ctx.parents.get(parent)
        return isinstance(call, ast.Call) and call.func is parent
    return isinstance(parent, ast.Subscript) and parent.value is name \
        and isinstance(ctx.parents.get(parent), ast.Assign) and parent in ctx.parents.get(parent).targets


def _require_stable(ctx: FixContext, tensor: ast.expr, loop: ast.For, names) -> None:
    """``tensor`` names the same tensor at every row: a name, attributes and constant indices, none rebound in
    the loop."""
    node = tensor
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            raise CannotFix("the iterated tensor is indexed by a computed value")
        if isinstance(node, ast.Attribute) and any(isinstance(a.ctx, ast.Store) and ctx.inside(a, loop)
                                                   for a in names.attribute(node.attr)):
            raise CannotFix("the loop assigns an attribute the iterated tensor is read through")
        node = node.value
    if not isinstance(node, ast.Name):
        raise CannotFix("the iterated tensor is not read through a name")
    if any(isinstance(n.ctx, ast.Store) and ctx.inside(n, loop) for n in names.of(node.id)):
        raise CannotFix("the loop rebinds the iterated tensor's name")


def _replace(ctx: FixContext, node: ast.AST, text: str) -> TextEdit:
    line, column, end_line, end_column = ctx.char_range(node)
    return TextEdit(line, column + 1, end_line, end_column + 1, text)


RULE = Rule(
    code="GG004",
    name="multi-view-mutated",
    summary="In-place write to an output of `unbind`/`split`/`chunk`, tuple unpacking or iteration of a tensor.",
    explanation="""
`unbind`, `split`, `chunk` (and `a, b = t`, `for row in t`, which unbind) return several views of one
tensor.  Autograd cannot rebase a write to one of them, so in grad mode, for a tensor that requires grad,
it raises at once: `RuntimeError: Output 0 of Unbind is a view and is being modified inplace. This view
is the output of a function that returns multiple views...` (`chunk` reports `Split`).  Views of such
outputs (a slice, `.view()`) raise too.
""",
    fix_advice="""
Rebind out of place (`q = q * scale` instead of `q *= scale`), or clone the piece (`a = a.clone()`),
and reassemble with `torch.stack`/`torch.cat` if the whole tensor is needed.
""",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
It assumes that `a, b = t` and `for row in t` iterate a tensor. The message names the op that made the views.
When the write goes through a slice or view of a piece, torch names that (`Select`, `Slice`, `View`) instead.
Pieces made under `torch.no_grad()` raise a different error: that is GG105.
""",
    invalid=(
        Example(
            """
import torch
x = torch.randn(2, 3, requires_grad=True)
a, b = (x * 2).unbind(0)
a.mul_(2)              # GG004
""",
            raises=MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
x = torch.randn(2, 3, requires_grad=True)
a, b = (x * 2).unbind(0)
a = a * 2
(a + b).sum().backward()
"""
        ),
    ),
)
