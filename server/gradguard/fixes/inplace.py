"""The fixes of the in-place rules (GG001-GG005), built from the ``Mutation`` a finding carries.

Each strategy returns a ``Fix`` or raises ``CannotFix``; the rules' ``fix`` hooks pick among them:

- **rebind** -- write out of place and rebind the name: ``x = x + y``, ``x = x.add(y)``,
  ``b = torch.mul(a, s)`` for ``out=b``, or ``x = x.clone()`` before a write through a view of ``x``.
  Safe when no other name, container, attribute or caller can see the written memory afterwards
  (``aliases.analyse``); unsafe when only containers/attributes/the caller could; none when a view of the
  memory is read later (the rebinding would drop a write the program relies on).
- **clone where saved** -- ``op(x.clone())`` / ``op(x).clone()`` at the op that saved the tensor: the write
  then hits memory autograd no longer needs.  Always the same program; used when rebinding cannot be.
- **no_grad** -- a parameter update or reset: ``with torch.no_grad():`` around it.
- **copy** -- a leaf written as part of a computation: compute on ``w = self.weight.clamp(...)`` /
  ``x_new = x.clone()`` and read the copy from then on (unsafe: the leaf keeps its old value).
- **inplace=False** / ``F.relu_`` -> ``F.relu``, at the call or at the module's constructor.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ..diagnostics import Fix
from ..inference.values import Grad
from ..knowledge import load_knowledge
from ..statements import block_of
from .callers import NONLOCAL_ESCAPE, forwarded_inplace_flag, param_escape, through_callers, through_closure_calls
from .rows import whole_tensor_instead_of_rows
from .aliases import NON_VALUE_ATTRS, AliasAnalysis, Report, _view_sources, analyse, value_read_after
from .context import FUNCTIONS, CannotFix, FixContext
from .edits import Rewrite
from .elements import rebind_element
from .writes import (
    PIECES,
    Write,
    assign,
    attribute_base,
    aug_to_binop,
    clone_of,
    code,
    cst_mod,
    out_of_place,
    parse_expr,
    root_name,
    short,
    without_keyword,
)

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from ..inference.events import Finding, Mutation

# Attribute reads that are about the leaf itself, not its value: they keep naming the leaf after a copy.
LEAF_IDENTITY_ATTRS = frozenset({
    "grad", "requires_grad", "is_leaf", "grad_fn", "retain_grad", "register_hook", "requires_grad_", "retains_grad",
})


def mutation_of(finding: Finding) -> Mutation:
    mutation = (finding.data or {}).get("mutation")
    if mutation is None:
        raise CannotFix("the finding carries no mutation")
    if mutation.in_container:
        raise CannotFix("the tensor is an element of a Python list or dict; the rewrites name tensors, not elements")
    return mutation


# ============================================================================ rebinding
class Rebind:
    """Rewrite the write out of place and rebind the name it writes through."""

    def __init__(self, ctx: FixContext, write: Write, *, pieces_disjoint: bool = True):
        self.ctx = ctx
        self.write = write
        name, direct = root_name(write.target)
        if write.kind == "functional" and name is None:
            # `F.relu(self.fc(x), inplace=True)`: the input is a temporary nobody else sees
            if not _is_temporary(write.target):
                raise CannotFix("the input of the in-place function is not a local name")
        elif name is None:
            raise CannotFix("the written tensor is not a local name")
        if name is not None and not _binds_locally(ctx, ctx.scope_of(write.stmt), name):
            # `buf` read from an enclosing function or the module: a binding here makes a new local, which the
            # enclosing code never sees (and which a read before it would find unbound)
            raise CannotFix(f"`{name}` belongs to an enclosing scope; binding it here would not reach it")
        self.name = name
        self.direct = direct
        self.report: Report = (
            analyse(ctx, write.stmt, name, pieces_disjoint, write_call=write.call) if name else Report("")
        )

    def rewrite(self) -> tuple[Rewrite, str]:
        """The edit and a short description; CannotFix when this write has no rebinding form."""
        ctx, w = self.ctx, self.write
        cst = cst_mod()
        rw = Rewrite(ctx)
        name = self.name
        if w.kind == "functional":
            call = ctx.cst(w.call)
            new_call = _not_inplace(ctx, w.call, call)
            if not w.value_use:
                if not self.direct:
                    raise CannotFix("the in-place function writes a view and its result is dropped")
                new = assign(cst.Name(name), new_call)
                rw.replace_node(ctx.cst(w.stmt), new)
                return rw, code(new)
            rw.replace_node(call, new_call)
            if name and not _rebinds(w.stmt, name) and value_read_after(ctx, w.stmt, name):
                raise CannotFix(f"`{name}` is read later and would miss the write")
            return rw, code(new_call)
        if not self.direct:
            # a write through a view of `name`: copy `name` first, then write the copy
            rw.insert_before(w.stmt, f"{name} = {name}.clone()")
            return rw, f"{name} = {name}.clone()"
        if w.kind == "augassign":
            aug = ctx.cst(w.stmt)
            new = assign(aug.target.deep_clone(), aug_to_binop(aug), like=aug)
            rw.replace_node(aug, new)
            return rw, code(new)
        if w.kind == "method":
            new_value = out_of_place(ctx, w.call)
            if not w.value_use:
                new = assign(cst.Name(name), new_value)
                rw.replace_node(ctx.cst(w.stmt), new)
                return rw, code(new)
            stmt = w.stmt
            if (
                isinstance(stmt, ast.Assign)
                and stmt.value is w.call
                and not _rebinds(stmt, name)
                and value_read_after(ctx, stmt, name)
            ):
                # `s = x.exp_()` and x is read later: `s = x = x.exp()`
                small = ctx.cst(stmt)
                targets = [*small.targets, cst.AssignTarget(target=cst.Name(name))]
                new = small.with_changes(targets=targets, value=new_value)
                rw.replace_node(small, new)
                return rw, code(new)
            if not _rebinds(stmt, name) and value_read_after(ctx, stmt, name):
                raise CannotFix(f"`{name}` is read later and would miss the write")
            rw.replace_node(ctx.cst(w.call), new_value)
            return rw, code(new_value)
        if w.kind == "out":
            if w.value_use:
                raise CannotFix("the result of the out= call is used")
            new = assign(cst.Name(name), without_keyword(ctx.cst(w.call), "out"))
            rw.replace_node(ctx.cst(w.stmt), new)
            return rw, code(new)
        raise CannotFix(f"no rebinding for {w.kind}")


def _binds_locally(ctx: FixContext, scope: ast.AST, name: str) -> bool:
    """Is ``name`` a local of ``scope`` (a parameter, or bound in it), or ``scope`` the module or a class body?"""
    if not isinstance(scope, FUNCTIONS):
        return True
    if name in {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}:
        return True
    for node in ast.walk(scope):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True  # declared: a binding here reaches the enclosing name (the alias report weighs that)
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load) \
                and ctx.scope_of(node) is scope:
            return True
    return False


def _is_temporary(expr: ast.expr) -> bool:
    """A call or arithmetic result that no name holds (``F.relu(self.fc(x))``)."""
    node = expr
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp))


def _rebinds(stmt: ast.stmt, name: str) -> bool:
    return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


def _not_inplace(ctx: FixContext, call_ast: ast.Call, call: cst.Call) -> cst.Call:
    """``F.relu_(x)`` -> ``F.relu(x)``; ``F.relu(x, inplace=True)`` -> ``F.relu(x, inplace=False)``."""
    cst = cst_mod()
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if name.endswith("_"):
        q = ctx.qual(call_ast.func) or ""
        twin = name[:-1]
        if isinstance(func, cst.Attribute):
            return call.with_changes(func=func.with_changes(attr=cst.Name(twin)))
        if q.startswith("torch.") and isinstance(func, cst.Name):
            raise CannotFix(f"`{name}` was imported by name; its twin `{twin}` may not be")
        raise CannotFix("unrecognised in-place function")
    return inplace_false(call)


def inplace_false(call: cst.Call) -> cst.Call:
    """Set an ``inplace=True`` keyword (or a positional ``True`` in ``nn.ReLU(True)``) to False."""
    cst = cst_mod()
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "inplace":
            if not (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                raise CannotFix("inplace= is not the literal True")
            args[i] = arg.with_changes(value=cst.Name("False"))
            return call.with_changes(args=args)
    positional = [i for i, a in enumerate(args) if a.keyword is None and not a.star]
    trues = [i for i in positional if isinstance(args[i].value, cst.Name) and args[i].value.value == "True"]
    if len(trues) == 1:
        i = trues[0]
        args[i] = args[i].with_changes(value=cst.Name("False"))
        return call.with_changes(args=args)
    raise CannotFix("no inplace=True to turn off")


# ============================================================================ clone where saved
def clone_where_saved(ctx: FixContext, mutation: Mutation, write: Write) -> tuple[Rewrite, str]:
    """Clone at every op that saved the written memory for a backward that this write breaks."""
    if not mutation.conflicts:
        raise CannotFix("no conflicting save")
    name, _ = root_name(write.target)
    alias_names = set(AliasAnalysis(ctx, write.stmt, name).aliases) if name else set()
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
            targets = [node]
        elif save.role == "input":
            knowledge = load_knowledge()
            targets = [arg for arg in _operands(node) if alias_names & set(_view_sources(arg, ctx, knowledge))]
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
            if a is not b and any(n is b for n in ast.walk(a)):
                raise CannotFix("nested saves")
    for node in nodes:
        rw.replace_node(ctx.cst(node), clone_of(ctx.cst(node)))
    shown = ", ".join(f"`{short(code(clone_of(ctx.cst(n))), 50)}`" for n in nodes)
    return rw, shown


def _operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.Call):
        out = list(node.args) + [k.value for k in node.keywords if k.arg is not None]
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


# ============================================================================ no_grad
def no_grad_wrap(ctx: FixContext, stmt: ast.stmt) -> tuple[Rewrite, str]:
    torch = ctx.torch_name()
    if torch is None:
        raise CannotFix("torch is not imported as a module")
    rw = Rewrite(ctx).wrap_in_with(stmt, f"{torch}.no_grad()")
    return rw, f"with {torch}.no_grad():"


# ============================================================================ copy of a leaf
def compute_on_copy(ctx: FixContext, write: Write) -> tuple[Rewrite, str, bool]:
    """Compute on a copy of the leaf (``self.weight`` -> ``weight``, ``x`` -> ``x_new``) and read the copy
    from then on.  Returns (rewrite, description, safe)."""
    cst = cst_mod()
    stmt = write.stmt
    scope = ctx.scope_of(stmt)
    if ctx.loops_around(stmt, scope):
        raise CannotFix("the write is in a loop: earlier iterations would read the copy")
    attr = attribute_base(write.target)
    name, direct = root_name(write.target)
    rw = Rewrite(ctx)
    if attr is not None:
        base_text = ctx.source(attr)
        local = _fresh_name(ctx, scope, attr.attr)
        later = _later_reads_of_attribute(ctx, scope, stmt, attr)
        if not later:
            raise CannotFix(f"`{base_text}` is not read after the write in this function")
        _require_dominated(ctx, later, stmt)
        first = _rewrite_write_on(ctx, rw, write, attr, local)
        for node in later:
            rw.replace_node(ctx.cst(node), cst.Name(local))
        return rw, f"{first}, then read `{local}` instead of `{base_text}`", False
    if name is None:
        raise CannotFix("the leaf is neither a local name nor an attribute")
    leaf, start = name, stmt
    view_binding = _is_view_name(ctx, scope, stmt, name) if direct else None
    if view_binding is not None:
        # `wt = w.t(); wt.add_(1)`: copy w before the view is taken
        start, leaf = view_binding
    if write.kind == "method" and write.value_use and direct and start is stmt:
        report = analyse(ctx, stmt, name, write_call=write.call)
        if not value_read_after(ctx, stmt, name) and report.clean:
            new_value = out_of_place(ctx, write.call)
            rw.replace_node(ctx.cst(write.call), new_value)
            return rw, code(new_value), True
    if _assigned_after(ctx, scope, start, leaf, stmt):
        raise CannotFix(f"`{leaf}` is assigned again later")
    local = _fresh_name(ctx, scope, f"{leaf}_new")
    reads = _later_reads_of_name(ctx, scope, start, leaf)
    if not any(not _inside(ctx, r, stmt) and _after(r, stmt) for r in reads):
        raise CannotFix(f"`{leaf}` is not read after the write")
    _require_dominated(ctx, reads, start)
    for read in reads:
        parent = ctx.parents.get(read)
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and parent.value is read:
            # `x = x_cur`: the copy would go on under another name, which later code may read as the leaf
            # (`x.grad`), and find a tensor that is not one
            raise CannotFix(f"`{leaf}` is bound to another name after the write")
    if start is stmt and direct and write.kind in ("augassign", "method") and not write.value_use:
        if write.kind == "augassign":
            aug = ctx.cst(stmt)
            new = assign(cst.Name(local), aug_to_binop(aug), like=aug)
        else:
            new = assign(cst.Name(local), out_of_place(ctx, write.call))
        rw.replace_node(ctx.cst(stmt), new)
        reads = [r for r in reads if not _inside(ctx, r, stmt)]
        first = code(new)
    else:
        rw.insert_before(start, f"{local} = {leaf}.clone()")
        first = f"{local} = {leaf}.clone()"
    for node in reads:
        rw.replace_node(ctx.cst(node), cst.Name(local))
    return rw, f"{first}, then read `{local}` instead of `{leaf}`", False


def fix_asked_write(ctx: FixContext, finding: Finding) -> Fix:
    """GG107: the tensor whose own gradient is asked for keeps its name and its value; the write becomes an
    out-of-place op bound to a new name, which the later uses read (``h_new = h.mul(mask)``).  The asks
    (``h.grad``, ``inputs=[h]``, a helper that registers a hook on ``h``) keep reading ``h``, so autograd
    answers for the tensor they name, over every use.  Unsafe when something else holds the tensor: it then
    keeps the old values."""
    cst = cst_mod()
    mutation = mutation_of(finding)
    write = Write.of(ctx, mutation.entry())
    name, direct = root_name(write.target)
    if name is None or not direct or write.kind not in ("augassign", "method") or write.value_use:
        raise CannotFix("not a whole-tensor write statement on a local name")
    stmt = write.stmt
    scope = ctx.scope_of(stmt)
    if ctx.loops_around(stmt, scope):
        raise CannotFix("the write is in a loop: earlier iterations would read the new name")
    if _assigned_after(ctx, scope, stmt, name, stmt):
        raise CannotFix(f"`{name}` is assigned again later")
    asking = [a.node for a in mutation.asks]
    reads = [r for r in _later_reads_of_name(ctx, scope, stmt, name)
             if not _inside(ctx, r, stmt) and not _asks_through(ctx, r, asking)]
    if not reads:
        raise CannotFix(f"`{name}` is not read after the write")
    _require_dominated(ctx, reads, stmt)
    report = analyse(ctx, stmt, name, write_call=write.call)
    if not report.only_holders:
        raise CannotFix(report.reason())
    local = _fresh_name(ctx, scope, f"{name}_new")
    value = aug_to_binop(ctx.cst(stmt)) if write.kind == "augassign" else out_of_place(ctx, write.call)
    new = assign(cst.Name(local), value)
    rw = Rewrite(ctx).replace_node(ctx.cst(stmt), new)
    for node in reads:
        rw.replace_node(ctx.cst(node), cst.Name(local))
    title = f"Write out of place into a new name, and keep `{name}` for its gradient: `{short(code(new))}`"
    if report.clean:
        return rw.fix(title, safe=True)
    return rw.fix(f"{title} (unsafe: {report.reason()}, and now sees the unwritten values)", safe=False)


def _asks_through(ctx: FixContext, read: ast.Name, asking: list[ast.AST]) -> bool:
    """Is ``read`` where the gradient is asked for: inside the ask (``inputs=[h]``), or handed to the function
    that asks (``monitor.watch(h)`` where ``watch`` registers the hook)?"""
    if any(_inside(ctx, read, a) or read is a for a in asking):
        return True
    call = ctx.parents.get(read)
    if not (isinstance(call, ast.Call) and read in call.args):
        return False
    callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    return any((fn := ctx.function_of(a)) is not None and fn.name == callee for a in asking)


def _rewrite_write_on(ctx: FixContext, rw: Rewrite, write: Write, attr: ast.Attribute, local: str) -> str:
    cst = cst_mod()
    stmt = write.stmt
    if write.target is attr and write.kind == "augassign":
        aug = ctx.cst(stmt)
        new = assign(cst.Name(local), aug_to_binop(aug), like=aug)
        rw.replace_node(aug, new)
        return code(new)
    if write.target is attr and write.kind == "method" and not write.value_use:
        new = assign(cst.Name(local), out_of_place(ctx, write.call))
        rw.replace_node(ctx.cst(stmt), new)
        return code(new)
    if write.value_use:
        raise CannotFix("the in-place result is used")
    rw.insert_before(stmt, f"{local} = {ctx.source(attr)}.clone()")
    rw.replace_node(ctx.cst(attr), cst.Name(local))
    return f"{local} = {ctx.source(attr)}.clone()"


def _is_view_name(ctx: FixContext, scope: ast.AST, stmt: ast.stmt, name: str):
    """(binding statement, leaf name) when ``name`` was bound, once and before ``stmt`` in the same block,
    to a view of another local name; None otherwise."""
    bindings = [
        n for n in ast.walk(scope)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
    ]
    if len(bindings) != 1:
        return None
    binding = ctx.statement_of(bindings[0])
    if not isinstance(binding, ast.Assign) or len(binding.targets) != 1 or not isinstance(binding.targets[0], ast.Name):
        return None
    if ctx.parents.get(binding) is not ctx.parents.get(stmt) or binding.lineno >= stmt.lineno:
        return None
    source, direct = root_name(binding.value)
    if source is None or direct:
        return None
    return binding, source


def _fresh_name(ctx: FixContext, scope: ast.AST, base: str) -> str:
    used = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
    if isinstance(scope, FUNCTIONS):
        used |= {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)}
    used |= set(ctx.imports)
    name, i = base, 1
    while name in used:
        i += 1
        name = f"{base}{i}"
    return name


def _require_dominated(ctx: FixContext, nodes: list[ast.AST], start: ast.stmt) -> None:
    """CannotFix unless every node runs only after ``start`` has: it is in ``start``'s block, after it."""
    block = block_of(ctx.parents.get(start), start)
    if block is None:
        raise CannotFix("cannot tell what runs after the write")
    index = next(i for i, s in enumerate(block) if s is start)
    later = block[index:]
    for node in nodes:
        chain = [node, *ctx.ancestors(node)]
        if not any(c is s for s in later for c in chain):
            raise CannotFix(f"line {node.lineno} may run without the copy being made")


def _after(node: ast.AST, stmt: ast.stmt) -> bool:
    return (node.lineno, node.col_offset) >= (stmt.lineno, stmt.col_offset)


def _inside(ctx: FixContext, node: ast.AST, stmt: ast.stmt) -> bool:
    return any(a is stmt for a in ctx.ancestors(node))


def _later_reads_of_name(ctx: FixContext, scope: ast.AST, start: ast.stmt, name: str) -> list[ast.Name]:
    reads = []
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) and _after(node, start)):
            continue
        if ctx.scope_of(node) is not scope:
            raise CannotFix(f"a nested function reads `{name}`")
        parent = ctx.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr in LEAF_IDENTITY_ATTRS:
            continue
        reads.append(node)
    return reads


def _assigned_after(ctx: FixContext, scope: ast.AST, start: ast.stmt, name: str, write: ast.stmt) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) and _after(n, start)
        and not _inside(ctx, n, write)
        for n in ast.walk(scope)
    )


def _later_reads_of_attribute(ctx: FixContext, scope: ast.AST, stmt: ast.stmt, attr: ast.Attribute) -> list[ast.Attribute]:
    """Reads of ``self.weight`` after the write; CannotFix when the object is used some other way later
    (``self.fc(x)`` reads ``self.fc.weight`` without naming it) or the attribute is assigned."""
    text = ctx.source(attr)
    prefixes = []
    node: ast.AST = attr.value
    while isinstance(node, ast.Attribute):
        prefixes.append(ctx.source(node))
        node = node.value
    reads = []
    for node in ast.walk(scope):
        if not isinstance(node, ast.Attribute) or not _after(node, stmt) or _inside(ctx, node, stmt):
            continue
        source = ctx.source(node)
        if source == text:
            if not isinstance(node.ctx, ast.Load):
                raise CannotFix(f"`{text}` is assigned later")
            parent = ctx.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.attr in LEAF_IDENTITY_ATTRS | NON_VALUE_ATTRS:
                continue
            reads.append(node)
        elif source in prefixes:
            parent = ctx.parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                raise CannotFix(f"`{source}` is used later and may read `{text}` itself")
    if any(ctx.scope_of(r) is not scope for r in reads):
        raise CannotFix("a nested function reads it")
    return reads


# ============================================================================ small helpers for the rules
def fix_or_none(build) -> Fix | None:
    try:
        return build()
    except CannotFix:
        return None


def is_parameter_update(ctx: FixContext, mutation: Mutation, write: Write) -> bool:
    """Is this leaf write an optimizer-style update or a reset, rather than part of a computation?"""
    stmt = write.stmt
    if any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(stmt)):
        return True
    fn = ctx.function_of(stmt)
    scope = ctx.scope_of(stmt)
    origin = mutation.target.root().origin
    for loop in ctx.loops_around(stmt, scope):
        if origin is not None and any(n is origin for n in ast.walk(loop)):
            continue  # a leaf made afresh in each iteration is not a parameter being trained
        for node in ast.walk(loop):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("backward", "step"):
                return True  # a leaf that outlives the training loop: a parameter, updated or reset
    if any(_inside_forward(ctx, node) for node in (stmt, *(site for site, _ in mutation.frames))):
        return False  # written while a module computes its output (in forward, or a function forward calls)
    root = mutation.target.root()
    if root.param:
        return True
    # An attribute of unknown make is taken for a parameter (`model.fc.weight`); one the analyser saw made by a
    # factory (`self.x = torch.randn(..., requires_grad=True)`) is a leaf like a local one, and the function
    # that writes it and calls backward after is computing with it.
    made_here = root.origin is not None and fn is not None and _backward_after(ctx, fn, stmt)
    return attribute_base(write.target) is not None and not made_here


def _inside_forward(ctx: FixContext, node: ast.AST) -> bool:
    """Is ``node`` in a module's ``forward`` (or a function nested in one)?"""
    return any(isinstance(a, FUNCTIONS) and a.name == "forward" for a in ctx.ancestors(node))


def _backward_after(ctx: FixContext, fn: ast.AST, stmt: ast.stmt) -> bool:
    """Does ``fn`` call ``.backward()`` (or ``torch.autograd.backward/grad``) after ``stmt``, in its own body?"""
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and _after(node, stmt) and not _inside(ctx, node, stmt)
                and ctx.scope_of(node) is fn):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "backward":
            return True
        if (ctx.qual(func) or "") in ("torch.autograd.backward", "torch.autograd.grad"):
            return True
    return False


def grad_would_be_lost(mutation: Mutation) -> bool:
    """Rebinding under no_grad drops the graph of a tensor that requires grad."""
    return not mutation.grad_enabled and mutation.target.requires_grad != Grad.NO


def saves_inside(mutation: Mutation, stmt: ast.stmt) -> bool:
    """Does the write statement itself evaluate an op whose save it breaks (``y[t] = y[t] * y[t - 1]``)?"""
    for conflict in mutation.conflicts:
        node = conflict.save.node
        if node is stmt or any(n is node for n in ast.walk(stmt)):
            return True
    return False


# ============================================================================ per-rule choices
def _rebind_fix(rebind: Rebind, what: str) -> Fix | None:
    """Safe when nothing else sees the memory, unsafe when only containers/attributes/the caller do."""
    report = rebind.report
    if not (report.clean or report.only_holders):
        return None
    w = rebind.write
    if not report.clean and rebind.name and not w.value_use and not value_read_after(rebind.ctx, w.stmt, rebind.name):
        # `dst = torch.add(a, b)` for a parameter nothing here reads again: the new binding goes nowhere, and the
        # caller (or holder) that saw the write loses it -- that drops the write, it does not repair it
        return None
    if not report.clean and _loop_variable_unread(rebind.ctx, w.stmt, rebind.name):
        return None  # `for row in self.t: row = row.mul(2)`: nothing reads the new `row`; self.t loses every write
    built = fix_or_none(rebind.rewrite)
    if built is None:
        return None
    rw, desc = built
    if report.clean:
        return rw.fix(f"{what}: `{short(desc)}`", safe=True)
    return rw.fix(f"{what}: `{short(desc)}` (unsafe: {report.reason()})", safe=False)


def _loop_variable_unread(ctx: FixContext, stmt: ast.stmt, name: str) -> bool:
    """Is ``name`` the target of a ``for`` loop around ``stmt`` that reads it nowhere after ``stmt`` in its body?"""
    for loop in ctx.loops_around(stmt):
        if isinstance(loop, (ast.For, ast.AsyncFor)) and any(
            isinstance(n, ast.Name) and n.id == name for n in ast.walk(loop.target)
        ):
            return not any(
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and _after(n, stmt)
                and not _inside(ctx, n, stmt)
                for body_stmt in loop.body for n in ast.walk(body_stmt)
            )
    return False


def fix_saved_write(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG001 (and any rule about a write to memory saved for backward): rebind out of place when nothing
    else sees the memory; clone where it is saved when a view of it is read later (or rebinding cannot
    work); an unsafe rebinding when only containers, attributes or the caller could see the write.  A write to
    an element of a local list or dict rebinds that element."""
    element = (finding.data or {}).get("mutation")
    if element is not None and element.in_container:
        if grad_would_be_lost(element):
            return None
        copy_ok = not saves_inside(element, ctx.statement_of(element.entry()))
        return fix_or_none(lambda: rebind_element(ctx, element, copy_ok))
    mutation = mutation_of(finding)
    write = Write.of(ctx, mutation.entry())
    rebind = fix_or_none(lambda: Rebind(ctx, write))
    possible = (
        rebind is not None
        and not grad_would_be_lost(mutation)
        and (rebind.direct or not saves_inside(mutation, write.stmt))
    )
    if possible and rebind.report.clean:
        built = fix_or_none(rebind.rewrite)
        if built is not None:
            return built[0].fix(f"Write out of place: `{short(built[1])}`", safe=True)
        possible = False
    # Under no_grad a clone where saved still leaves the write hidden from autograd on a tensor of the graph
    # (silent wrong gradients): that is no repair.
    hidden = grad_would_be_lost(mutation)
    # A container that holds the written tensor and is read later would see the write the clone keeps in place,
    # where writing out of place keeps its old values: the two programs differ, and nothing tells which is meant.
    held = (_filled_container_read_after(ctx, write, rebind.report) if rebind is not None
            else _attribute_put_in_container(ctx, write))
    if (not possible or rebind.report.aliases_read_after) and not hidden and not held:
        built = fix_or_none(lambda: clone_where_saved(ctx, mutation, write))
        if built is not None:
            return built[0].fix(f"Clone what backward needs where it is saved: {built[1]}", safe=True)
    if possible and _only_the_caller_holds(rebind):
        callers = fix_or_none(lambda: _through_callers(ctx, rebind))
        if callers is not None:
            return callers
    if possible and rebind.report.escapes == [NONLOCAL_ESCAPE] and not rebind.report.aliases_read_after \
            and not rebind.report.holders_read_after:
        built = fix_or_none(rebind.rewrite)
        closure = built and fix_or_none(lambda: through_closure_calls(
            ctx, built[0].fix(f"Write out of place: `{short(built[1])}`", safe=True), write.stmt, rebind.name))
        if closure is not None:
            return closure
    if possible and rebind.report.only_holders:
        return _rebind_fix(rebind, "Write out of place")
    return None


def _filled_container_read_after(ctx: FixContext, write: Write, report: Report) -> bool:
    """Is a holder read later a container the program filled with the tensor itself (``outs.append(h)``)?"""
    if not report.holders_read_after:
        return False
    holders = AliasAnalysis(ctx, write.stmt, report.name).holders
    for name in report.holders_read_after:
        for event in holders.get(name, []):
            if isinstance(event, ast.Call) and isinstance(event.func, ast.Attribute) \
                    and isinstance(event.func.value, ast.Name) and event.func.value.id == name:
                return True
    return False


def _attribute_put_in_container(ctx: FixContext, write: Write) -> bool:
    """Is the written attribute (``self.h``) handed, in the writing function, to a method whose result is dropped
    (``self.outputs.append(self.h)``): a container that may keep it?"""
    attr = attribute_base(write.target)
    if attr is None:
        return False
    text = ctx.source(attr)
    scope = ctx.scope_of(write.stmt)
    for node in ast.walk(scope):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) \
                and any(ctx.source(arg) == text for arg in node.value.args):
            return True
    return False


def _through_callers(ctx: FixContext, rebind: Rebind) -> Fix:
    rw, desc = rebind.rewrite()
    return through_callers(ctx, rw, rebind.write.stmt, rebind.name, f"Write out of place: `{short(desc)}`", safe=True)


def _only_the_caller_holds(rebind: Rebind) -> bool:
    """The written name is the function's parameter, and nothing else keeps or views its memory."""
    report = rebind.report
    return not (report.aliases_read_after or report.holders_read_after) and report.escapes == [param_escape(rebind.name)]


def fix_leaf_write(ctx: FixContext, finding: Finding, update: bool | None = None) -> Fix | None:
    """GG002/GG003: ``with torch.no_grad():`` for parameter updates and resets; a copy for computations.
    ``update`` says which one it is when the caller knows better than ``is_parameter_update`` (GG104 does).
    An update through a list or dict element is wrapped too: the wrap keeps the write, whatever names it."""
    mutation = (finding.data or {}).get("mutation")
    if mutation is None or not mutation.in_container:
        mutation = mutation_of(finding)
    write = Write.of(ctx, mutation.entry())
    if update if update is not None else is_parameter_update(ctx, mutation, write):
        rw, desc = no_grad_wrap(ctx, write.stmt)
        return rw.fix(f"Update under `{desc}`", safe=True)
    mutation_of(finding)  # a copy names the tensor, not an element
    rw, desc, safe = compute_on_copy(ctx, write)
    title = f"Compute on a copy: `{short(desc, 90)}`"
    return rw.fix(title if safe else f"{title} (unsafe: the leaf keeps its old value)", safe=safe)


def fix_out_argument(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG106: a parameter update or reset goes under ``torch.no_grad()``; a computation drops ``out=`` and binds
    the result (``buf = torch.mul(h, s)``), which autograd records.  Never an ``out=`` into a copy: that call
    would raise the same error."""
    mutation = mutation_of(finding)
    write = Write.of(ctx, mutation.node)  # torch refuses the call itself, wherever the tensors were made
    if write.kind != "out":
        raise CannotFix("the write is not an out= call")
    leaf = mutation.target.requires_grad != Grad.NO and mutation.target.leaf and mutation.target.base is None
    if leaf and (mutation.value_grad == Grad.NO or is_parameter_update(ctx, mutation, write)):
        # plain values into a leaf (an initialisation), or an optimizer-style update
        rw, desc = no_grad_wrap(ctx, write.stmt)
        return rw.fix(f"Update under `{desc}`", safe=True)
    return _rebind_fix(Rebind(ctx, write), "Compute out of place")


def fix_multi_view_write(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG004: rebind the piece out of place, or write through a plain view of the whole tensor."""
    mutation = mutation_of(finding)
    write = Write.of(ctx, mutation.entry())
    plain = fix_or_none(lambda: plain_view_write(ctx, write))
    if plain is not None:
        return plain
    if mutation.target.base is not None:  # the rows of a tensor the loop iterates over
        whole = fix_or_none(lambda: whole_tensor_instead_of_rows(ctx, write))
        if whole is not None:
            return whole
    element = fix_or_none(lambda: rebuild_pieces(ctx, write))
    if element is not None:
        return element
    if any(isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and loop.target.id == root_name(write.target)[0]
           and root_name(loop.iter)[0] is None for loop in ctx.loops_around(write.stmt)):
        # the rows of `self.t`: whether the tensor is read later is beyond the alias analysis of local names
        raise CannotFix("the written name is the row of a tensor that is not a local name")
    if mutation.target.multi_view and _indexes_pieces(ctx, write.target):
        raise CannotFix("`parts[0]` of a split: the name holds the pieces, not a tensor to copy")
    rebind = Rebind(ctx, write, pieces_disjoint=True)
    target = mutation.target
    if not rebind.direct and target.multi_view and not (target.base is not None and target.base.multi_view):
        # `parts[0].zero_()`: the subscript picks a piece out of the tuple `parts`, it is no view of a tensor
        # named `parts` (`parts.clone()` would not even run)
        raise CannotFix(f"`{rebind.name}` holds the pieces; the written piece is an element of it")
    return _rebind_fix(rebind, "Write out of place")


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
    for assign in ast.walk(ctx.tree):
        if isinstance(assign, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in assign.targets):
            value = assign.value
            func = value.func if isinstance(value, ast.Call) else None
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in PIECES:
                return True
    return False


def fix_inplace_activation(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG005: ``inplace=False`` at the module's constructor, or at the functional call."""
    mutation = mutation_of(finding)
    module = mutation.module
    if module is not None:
        return module_inplace_false(ctx, mutation)
    forwarded = fix_or_none(lambda: forwarded_inplace_flag(ctx, mutation))
    if forwarded is not None:
        return forwarded
    write = Write.of(ctx, mutation.entry())
    if write.kind != "functional":
        raise CannotFix("not an in-place activation call")
    rebind = Rebind(ctx, write)
    func = ctx.source(write.call.func)
    what = f"Use `{func[:-1]}`" if func.endswith("_") else "Use `inplace=False`"
    return _rebind_fix(rebind, what)


def module_inplace_false(ctx: FixContext, mutation: Mutation) -> Fix | None:
    """``nn.ReLU(inplace=True)`` -> ``nn.ReLU(inplace=False)``: safe when at every place the module is applied
    its input is a temporary or a name rebound to the result (nothing else reads the overwritten input)."""
    ctor = mutation.module.ctor if mutation.module is not None else None
    if not isinstance(ctor, ast.Call):
        raise CannotFix("the module's constructor is not in this file")
    rw = Rewrite(ctx).replace_node(ctx.cst(ctor), inplace_false(ctx.cst(ctor)))
    sites, why = _module_call_sites(ctx, ctor)
    unsafe = [why] if why else []
    for site in sites:
        problem = _site_problem(ctx, site)
        if problem:
            unsafe.append(problem)
    title = f"Use `inplace=False` in `{short(ctx.source(ctor), 50)}`"
    if unsafe:
        return rw.fix(f"{title} (unsafe: {unsafe[0]})", safe=False)
    return rw.fix(title, safe=True)


def _module_call_sites(ctx: FixContext, ctor: ast.Call) -> tuple[list[ast.Call], str | None]:
    parent = ctx.parents.get(ctor)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            cls = ctx.class_of(ctor)
            if cls is None:
                return [], "the module is stored on an object outside a class"
            sites = [
                n for n in ast.walk(cls)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == target.attr
                and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"
            ]
            other_uses = [
                n for n in ast.walk(cls)
                if isinstance(n, ast.Attribute) and n.attr == target.attr and isinstance(n.value, ast.Name)
                and n.value.id == "self" and isinstance(n.ctx, ast.Load) and not any(s.func is n for s in sites)
            ]
            if other_uses:
                return sites, f"`self.{target.attr}` is also used other than by calling it"
            return sites, None if sites else "the module is never called in its class"
        if isinstance(target, ast.Name):
            scope = ctx.scope_of(ctor)
            sites = [
                n for n in ast.walk(scope)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == target.id
            ]
            loads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)]
            if len(loads) != len(sites):
                return sites, f"`{target.id}` is also used other than by calling it"
            return sites, None if sites else "the module is never called here"
    if isinstance(parent, ast.Call) and (ctx.qual(parent.func) or "").endswith("Sequential") and ctor in parent.args:
        if parent.args.index(ctor) == 0:
            return [], "it is the first layer: it would overwrite the Sequential's input"
        return [], None  # its input is the previous layer's output, which nothing else holds
    return [], "cannot see where the module is applied"


def _site_problem(ctx: FixContext, site: ast.Call) -> str | None:
    """Why applying the module out of place at ``site`` may change the program (None: it does not)."""
    if not site.args:
        return "a call without an input"
    stmt = ctx.statement_of(site)
    if isinstance(stmt, ast.Expr) and stmt.value is site:
        return f"the result of `{ctx.source(site)}` is dropped: the code relies on the in-place write"
    arg = site.args[0]
    name, _ = root_name(arg)
    if name is None:
        return None if _is_temporary(arg) else f"`{ctx.source(arg)}` is not a local name"
    report = analyse(ctx, stmt, name, write_call=site)
    if not report.clean:
        return report.reason()
    if not _rebinds(stmt, name) and value_read_after(ctx, stmt, name):
        return f"`{name}` is read after `{ctx.source(site)}` and would miss the write"
    return None


def plain_view_write(ctx: FixContext, write: Write) -> Fix | None:
    """``h.split(2)[0] += 1`` -> ``h[0:2] += 1``: the same memory through a plain view, which autograd lets
    a write go through (and which ``h`` sees, as before)."""
    target = write.target
    node = target
    while isinstance(node, ast.Subscript) and not _is_piece(ctx, node):
        node = node.value
    if not _is_piece(ctx, node):
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


def _is_piece(ctx: FixContext, node: ast.AST) -> bool:
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    name = func.attr if isinstance(func, ast.Attribute) else ""
    return name in ("split", "unbind", "chunk")


def _returns_pieces(ctx: FixContext, call: ast.Call) -> bool:
    q = ctx.qual(call.func) or ""
    if q in ("torch.split", "torch.chunk", "torch.unbind", "torch.tensor_split"):
        return True
    return isinstance(call.func, ast.Attribute) and not q.startswith("torch.") and call.func.attr in (
        "split", "chunk", "unbind", "tensor_split", "split_with_sizes"
    )


def _int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return -inner if inner is not None else None
    return None


def rebuild_pieces(ctx: FixContext, write: Write) -> Fix | None:
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
    bindings = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)]
    binding = ctx.parents.get(bindings[0]) if len(bindings) == 1 else None
    if not (isinstance(binding, ast.Assign) and isinstance(binding.value, ast.Call) and _returns_pieces(ctx, binding.value)):
        raise CannotFix(f"`{name}` is not bound once to the tuple split/chunk/unbind return")
    report = analyse(ctx, write.stmt, name, pieces_disjoint=True, write_call=write.call)
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
