"""A leaf written as part of a computation (GG002, GG003, GG107, and GG004 and GG104 through them), fixed by
redirecting the code that reads it after the write, where ``inplace.py`` rebinds the written name:

- **leaf writes** -- ``fix_leaf_write`` chooses: ``with torch.no_grad():`` for a parameter update or reset
  (``inplace.is_parameter_update``), else one of the forms below.
- **unread** -- a helper's parameter that neither the helper nor any caller reads after the write is written
  out of place (``callers.unread_by_callers``).
- **copy** -- compute on ``w = self.weight.clamp(...)`` / ``x_new = x.clone()`` and read the copy from then on
  (unsafe: the leaf keeps its old value).  A write inside an ``if``/``try``/``with`` or loop binds the copy before
  that statement (``copy_anchor``, ``update_on_copy``); a closure's write copies before its call
  (``copy_for_closure``), a helper's returns its copy to each caller (``copy_for_callers``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable

from ..diagnostics import Fix, TextEdit
from ..inference.scopes import bound_names
from ..knowledge.names import LEAF_IDENTITY_ATTRS, NON_VALUE_ATTRS
from ..statements import block_of, own_nodes
from .callers import Helper, unread_by_callers
from .context import FUNCTIONS, CannotFix, FixContext
from .edits import Rewrite, return_at_end
from .inplace import fix_or_none, is_parameter_update, mutation_of, no_grad_wrap, not_inplace, rebinds, starts_after
from .writes import InPlaceWrite, assign, attribute_base, aug_to_binop, code, cst_mod, out_of_place, root_name, short

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding


def fix_leaf_write(ctx: FixContext, finding: Finding, update: bool | None = None) -> Fix | None:
    """GG002/GG003: ``with torch.no_grad():`` for parameter updates and resets; a copy for computations.
    ``update`` says which one it is when the caller knows better than ``is_parameter_update`` (GG104 does).
    An update through a list or dict element is wrapped too: the wrap keeps the write, whatever names it."""
    mutation = finding.mutation
    if mutation is None or not mutation.in_container:
        mutation = mutation_of(finding)
    write = InPlaceWrite.of_mutation(ctx, mutation)
    if update if update is not None else is_parameter_update(ctx, mutation, write):
        rw, desc = no_grad_wrap(ctx, write.stmt)
        return rw.fix(f"Update under `{desc}`", safe=True, callers_checked=True)  # (kept for every caller)
    mutation_of(finding)  # a copy names the tensor, not an element
    if (unread := fix_or_none(lambda: unread_by_callers(ctx, write))) is not None:
        return unread
    try:
        rw, desc, safe = compute_on_copy(ctx, write)
    except CannotFix:
        copied = fix_or_none(lambda: copy_for_callers(ctx, write)) or fix_or_none(lambda: copy_for_closure(ctx, write))
        if copied is None:
            raise
        return copied
    title = f"Compute on a copy: {desc}"
    return rw.fix(title if safe else f"{title} (unsafe: the leaf keeps its old value)", safe=safe)


def compute_on_copy(ctx: FixContext, write: InPlaceWrite) -> tuple[Rewrite, str, bool]:
    """Compute on a copy of the leaf (``self.weight`` -> ``weight``, ``x`` -> ``x_new``) and read the copy
    from then on.  Returns (rewrite, description with its code in backticks, safe)."""
    cst = cst_mod()
    stmt = write.stmt
    scope = ctx.scope_of(stmt)
    attr = attribute_base(write.target)
    name, direct = root_name(write.target)
    rw = Rewrite(ctx)
    if attr is not None:
        base_text = ctx.source(attr)
        local = fresh_name(ctx, scope, attr.attr)
        anchor, later = copy_anchor(ctx, scope, stmt, lambda start: later_reads_of_attribute(ctx, scope, start, attr, stmt))
        if not (later and ctx.loops_around(stmt, scope)) and not any(starts_after(r, stmt) for r in later):
            raise CannotFix(f"`{base_text}` is not read after the write in this function")
        first = _rewrite_write_on(ctx, rw, write, attr, local, anchor)
        for node in later:
            rw.replace_node(ctx.cst(node), cst.Name(local))
        return rw, f"`{short(first)}`, then read `{local}` instead of `{base_text}`", False
    if name is None:
        raise CannotFix("the leaf is neither a local name nor an attribute")
    leaf, start = name, stmt
    view_binding = _is_view_name(ctx, scope, stmt, name) if direct else None
    if view_binding is not None:
        # `wt = w.t(); wt.add_(1)`: copy w before the view is taken
        start, leaf = view_binding
    if write.kind in ("method", "functional") and write.value_use and direct and start is stmt:
        # `weights = logits.exp_()`, `x = F.relu(x, inplace=True)` where nothing reads the leaf's value later:
        # `logits.exp()`, `F.relu(x, inplace=False)` is the same
        report = write.sharing(ctx, name)
        if (rebinds(stmt, name) or not write.value_read_after(ctx, name)) and report.clean:
            new_value = not_inplace(ctx, write)
            rw.replace_node(ctx.cst(write.call), new_value)
            return rw, f"`{short(code(new_value), 90)}`", True
    anchor, reads = copy_start(ctx, scope, start, stmt, leaf)
    repeated = bool(ctx.loops_around(stmt, scope))  # a read above the write runs after it in the next iteration
    if not any(not ctx.inside(r, stmt) and (repeated or starts_after(r, stmt)) for r in reads):
        raise CannotFix(f"`{leaf}` is not read after the write")
    _require_not_passed_on(ctx, reads, leaf, "write")
    update = start is stmt and direct and write.kind in ("augassign", "method") and not write.value_use
    rw, first, local = written_copy(ctx, write, scope, leaf, anchor, reads, update)
    return rw, f"`{short(first)}`, then read `{local}` instead of `{leaf}`", False


def copy_start(ctx: FixContext, scope: ast.AST, start: ast.stmt, stmt: ast.stmt, name: str,
               skip: Callable[[ast.Name], bool] = lambda read: False) -> tuple[ast.stmt, list[ast.Name]]:
    """Where a copy of ``name`` written by ``stmt`` begins (``copy_anchor``: ``start``, or a statement around it),
    with the reads of ``name`` from there on but those ``skip`` names; CannotFix when ``name`` is bound again."""
    anchor, reads = copy_anchor(ctx, scope, start, lambda at: [
        r for r in later_reads_of_name(ctx, scope, at, name) if not skip(r)])
    if assigned_after(ctx, scope, anchor, name, stmt):
        raise CannotFix(f"`{name}` is assigned again later")
    return anchor, reads


def written_copy(ctx: FixContext, write: InPlaceWrite, scope: ast.AST, name: str, anchor: ast.stmt,
                 reads: list[ast.Name], update: bool = True) -> tuple[Rewrite, str, str]:
    """A copy of ``name`` in a new name, which ``reads`` read instead: the whole-tensor write made out of place into
    it (``update``: ``update_on_copy``; the reads inside the write keep theirs), else ``new = name.clone()`` bound
    before ``anchor``.  Returns (rewrite, description, the new name)."""
    local, rw = fresh_name(ctx, scope, f"{name}_new"), Rewrite(ctx)
    first = update_on_copy(ctx, rw, write, name, local, anchor) if update else f"{local} = {name}.clone()"
    if not update:
        rw.insert_before(anchor, first)
    for node in reads:
        if not (update and ctx.inside(node, write.stmt)):
            rw.replace_node(ctx.cst(node), cst_mod().Name(local))
    return rw, first, local


def update_on_copy(ctx: FixContext, rw: Rewrite, write: InPlaceWrite, source: str, local: str, anchor: ast.stmt) -> str:
    """The whole-tensor write statement (``x += v``, ``x.clamp_(...)``, ``self.w.clamp_(...)``) as its
    out-of-place form bound to ``local``: ``x_new = x + v``.  When ``anchor`` is a statement around the write (an
    ``if``, ``try``, ``with`` or loop), ``local = <source>`` is bound just before it and the write updates the
    copy (``x_new = x_new + v``), so it holds the value whether or not, and however often, the write ran.
    Returns the description."""
    cst = cst_mod()
    stmt = write.stmt
    receiver = write.call.func.value if write.kind == "method" and isinstance(write.call.func, ast.Attribute) else None
    if anchor is not stmt:
        if any(ctx.source(n) == source for n in ast.walk(stmt)
               if isinstance(n, (ast.Name, ast.Attribute)) and n is not write.target and n is not receiver):
            raise CannotFix(f"the written value reads `{source}` again")
        rw.insert_before(anchor, f"{local} = {source}")
    if write.kind == "augassign":
        aug = ctx.cst(stmt)
        value = aug_to_binop(aug)
        if anchor is not stmt:
            value = value.with_changes(left=cst.Name(local))
        new = assign(cst.Name(local), value, like=aug)
    else:
        value = out_of_place(ctx, write.call)
        if anchor is not stmt:
            if not isinstance(value.func, cst.Attribute):
                raise CannotFix("the in-place call is not a method of the written tensor")
            value = value.with_changes(func=value.func.with_changes(value=cst.Name(local)))
        new = assign(cst.Name(local), value)
    rw.replace_node(ctx.cst(stmt), new)
    return code(new) if anchor is stmt else f"{local} = {source}; {code(new)}"


def _reads_of_copy(ctx: FixContext, scope: ast.AST, call: ast.stmt, name: str,
                   keep: Callable[[ast.Name], bool]) -> list[ast.Name]:
    """The reads of ``name`` after the statement ``call`` that are to read the copy (not ``.grad`` and the like,
    nor those ``keep`` names); CannotFix when there is none, or one binds the leaf to another name (the copy
    would go on under it, and be read as the leaf)."""
    reads = [r for r in later_reads_of_name(ctx, scope, call, name) if not keep(r)]
    if not reads:
        raise CannotFix(f"`{name}` is not read after the call")
    _require_not_passed_on(ctx, reads, name, "call")
    return reads


def _require_not_passed_on(ctx: FixContext, reads: list[ast.Name], name: str, after: str) -> None:
    """CannotFix when one of the reads binds the leaf to another name (``x = x_cur``): the copy would go on under
    it, which later code may read as the leaf (``x.grad``), and find a tensor that is not one."""
    if any(isinstance(p := ctx.parents.get(r), (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and p.value is r
           for r in reads):
        raise CannotFix(f"`{name}` is bound to another name after the {after}")


def copy_for_closure(ctx: FixContext, write: InPlaceWrite, keep: Callable[[ast.Name], bool] = lambda read: False,
                     kept: str = "the leaf keeps its old value") -> Fix:
    """A closure writes a variable of the function around it, a leaf, which that function reads after calling
    it: the function binds a copy before the call (``x_new = x.clone()``), the closure writes the copy, and the
    reads after the call read it (``x.grad``, the optimizer and the reads ``keep`` names still see the leaf).
    The closure must be called once, as a statement, and read the variable nowhere but in the write."""
    cst = cst_mod()
    name, _ = root_name(write.target)
    stmt = write.stmt
    fn = ctx.function_of(stmt)
    outer = ctx.scope_of(fn)
    if not (isinstance(fn, ast.FunctionDef) and isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef))
            and name is not None and name in bound_names(outer)):
        raise CannotFix("not a closure writing a variable of the function around it")
    own = list(own_nodes(fn))
    declared = [n for n in own if isinstance(n, ast.Nonlocal) and name in n.names]
    if any(isinstance(n, ast.Global) and name in n.names for n in own) or (name in bound_names(fn) and not declared) \
            or any(isinstance(n, ast.Name) and n.id == name and not ctx.inside(n, stmt) for n in own):
        raise CannotFix(f"the closure binds `{name}` or reads it outside the write")
    if len(declared) > 1 or declared and (declared[0].names != [name] or ctx.lines[declared[0].lineno - 1].strip()
                                          != f"nonlocal {name}"):
        raise CannotFix("the `nonlocal` statement does not have its line to itself")
    uses = [n for n in own_nodes(outer) if isinstance(n, ast.Name) and n.id == fn.name]
    call = ctx.parents.get(uses[0]) if len(uses) == 1 else None
    call_stmt = ctx.statement_of(call) if isinstance(call, ast.Call) and call.func is uses[0] else None
    if not (isinstance(call_stmt, ast.Expr) and call_stmt.value is call) or ctx.loops_around(call_stmt, outer) \
            or not starts_after(call_stmt, fn) or ctx.loops_around(stmt, fn):
        raise CannotFix("the closure is not called once, as a statement, after it is defined")
    ctx.require_own_lines(call_stmt)
    if any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) and starts_after(n, fn)
           for n in own_nodes(outer)):
        raise CannotFix(f"`{name}` is assigned again after the closure is defined")
    reads = _reads_of_copy(ctx, outer, call_stmt, name, keep)
    local = fresh_name(ctx, outer, f"{name}_new")
    rw = Rewrite(ctx)
    rw.insert_before(call_stmt, f"{local} = {name}.clone()")
    for node in [*(n for n in ctx.names_in(fn).of(name) if ctx.inside(n, stmt)), *reads]:
        rw.replace_node(ctx.cst(node), cst.Name(local))
    extra = []
    if declared:
        line, column, end_line, end_column = ctx.char_range(declared[0])
        extra.append(TextEdit(line, column + 1, end_line, end_column + 1, f"nonlocal {local}"))
    edits = sorted([*rw.edits(), *extra], key=lambda e: (e.line, e.column))
    title = (f"Compute on a copy: `{local} = {name}.clone()` before `{fn.name}()`, which writes it, then read "
             f"`{local}` instead of `{name}` (unsafe: {kept})")
    return Fix(title, False, tuple(edits), callers_checked=True)


def copy_anchor(ctx: FixContext, scope: ast.AST, start: ast.stmt,
                 reads_from: Callable[[ast.stmt], list[ast.expr]]) -> tuple[ast.stmt, list[ast.expr]]:
    """Where the copy of the leaf begins, with the reads of the leaf from there on (``reads_from``): ``start``
    itself when every later read runs after it in its block and no loop repeats it; else the innermost statement
    around it for which that holds (the write sits in an ``if``, ``try``, ``with`` or loop, and the reads follow
    it).  There the copy is bound before the write can run, so every later read -- the next iteration's
    included -- reads it."""
    for candidate in [start, *(a for a in ctx.ancestors(start) if isinstance(a, ast.stmt))]:
        if candidate is scope or isinstance(candidate, (*FUNCTIONS, ast.ClassDef)):
            break
        if ctx.loops_around(candidate, scope):
            continue
        reads = reads_from(candidate)
        try:
            require_dominated(ctx, reads, candidate)
        except CannotFix:
            continue
        return candidate, reads
    raise CannotFix("no statement around the write runs before every later read of the leaf")


def _rewrite_write_on(ctx: FixContext, rw: Rewrite, write: InPlaceWrite, attr: ast.Attribute, local: str,
                      anchor: ast.stmt) -> str:
    """The write done on the copy ``local`` of ``attr``, bound just before ``anchor`` (the write's own statement,
    or an ``if``/``try``/``with`` around it: then ``local = self.weight`` first, and the write updates ``local``)."""
    cst = cst_mod()
    if write.target is attr and (write.kind == "augassign" or write.kind == "method" and not write.value_use):
        return update_on_copy(ctx, rw, write, ctx.source(attr), local, anchor)
    if write.value_use:
        raise CannotFix("the in-place result is used")
    rw.insert_before(anchor, f"{local} = {ctx.source(attr)}.clone()")
    rw.replace_node(ctx.cst(attr), cst.Name(local))
    return f"{local} = {ctx.source(attr)}.clone()"


def _is_view_name(ctx: FixContext, scope: ast.AST, stmt: ast.stmt, name: str):
    """(binding statement, leaf name) when ``name`` was bound, once and before ``stmt`` runs, to a view of another
    local name (or to a name so bound); None otherwise."""
    bindings = [n for n in ctx.names_in(scope).of(name) if isinstance(n.ctx, ast.Store)]
    binding = ctx.statement_of(bindings[0]) if len(bindings) == 1 else None
    if not isinstance(binding, ast.Assign) or len(binding.targets) != 1 or not isinstance(binding.targets[0], ast.Name):
        return None
    try:  # (the write runs after it: later in its block, or inside a statement that is)
        require_dominated(ctx, [stmt], binding)
    except CannotFix:
        return None
    source, direct = root_name(binding.value)
    if source is not None and direct:  # a second name of the view (`wt_cur = wt`): where that one was bound
        return _is_view_name(ctx, scope, binding, source)
    return (binding, source) if source is not None else None


def fresh_name(ctx: FixContext, scope: ast.AST, base: str) -> str:
    names = ctx.names_in(scope)
    used = {*names.uses, *names.arguments, *ctx.imports}  # (a module's or class's arguments: none)
    name, i = base, 1
    while name in used:
        i += 1
        name = f"{base}{i}"
    return name


def require_dominated(ctx: FixContext, nodes: list[ast.AST], start: ast.stmt) -> None:
    """CannotFix unless every node runs only after ``start`` has: it is in ``start``'s block, after it."""
    block = block_of(ctx.parents.get(start), start)
    if block is None:
        raise CannotFix("cannot tell what runs after the write")
    later = block[next(i for i, s in enumerate(block) if s is start):]
    for node in nodes:
        chain = [node, *ctx.ancestors(node)]
        if not any(c is s for s in later for c in chain):
            raise CannotFix(f"line {node.lineno} may run without the copy being made")


def later_reads_of_name(ctx: FixContext, scope: ast.AST, start: ast.stmt, name: str) -> list[ast.Name]:
    reads = []
    for node in ctx.names_in(scope).of(name):
        if not (isinstance(node.ctx, ast.Load) and starts_after(node, start)):
            continue
        if ctx.scope_of(node) is not scope:
            raise CannotFix(f"a nested function reads `{name}`")
        parent = ctx.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr in LEAF_IDENTITY_ATTRS:
            continue
        reads.append(node)
    return reads


def assigned_after(ctx: FixContext, scope: ast.AST, start: ast.stmt, name: str, write: ast.stmt) -> bool:
    return any(not isinstance(n.ctx, ast.Load) and starts_after(n, start) and not ctx.inside(n, write)
               for n in ctx.names_in(scope).of(name))


def later_reads_of_attribute(ctx: FixContext, scope: ast.AST, start: ast.stmt, attr: ast.Attribute,
                              stmt: ast.stmt) -> list[ast.Attribute]:
    """Reads of ``self.weight`` from ``start`` on, but in the write ``stmt``; CannotFix when the object is used
    some other way later (``self.fc(x)`` reads ``self.fc.weight`` without naming it, and ``net(x)`` reads
    ``net.emb.weight``) or the attribute is assigned."""
    text = ctx.source(attr)
    prefixes = []
    attrs = [attr.attr]  # the attribute names an attribute reading the same text (or a prefix of it) ends with
    node: ast.AST = attr.value
    while isinstance(node, ast.Attribute):
        prefixes.append(ctx.source(node))
        attrs.append(node.attr)
        node = node.value
    names, methods = ctx.names_in(scope), ctx.names_in(ctx.tree).definitions
    roots = names.of(node.id) if isinstance(node, ast.Name) else []
    if roots and any(starts_after(n, start) for n in names.of("super")):  # (`super().forward(x)` reads `self.weight`)
        raise CannotFix(f"a `super()` call after the write may read `{text}`")
    prefixes += [node.id] if roots else []
    reads = []
    for node in (*(n for a in dict.fromkeys(attrs) for n in names.attribute(a)), *roots):
        if not starts_after(node, start) or node is attr or ctx.inside(node, stmt):
            continue
        source = ctx.source(node)
        if source == text:
            if not isinstance(node.ctx, ast.Load):
                raise CannotFix(f"`{text}` is assigned later")
            parent = ctx.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.attr in LEAF_IDENTITY_ATTRS | NON_VALUE_ATTRS:
                continue
            reads.append(node)
        elif source in prefixes:  # (and a method of the file called on it, `self.project(x)`, may read it too)
            parent = ctx.parents.get(node)
            call = ctx.parents.get(parent)
            if not (isinstance(parent, ast.Attribute) and parent.value is node) or isinstance(call, ast.Call) \
                    and call.func is parent and any(isinstance(d, FUNCTIONS) for d in methods.get(parent.attr, ())):
                raise CannotFix(f"`{source}` is used later and may read `{text}` itself")
    if any(ctx.scope_of(r) is not scope for r in reads):
        raise CannotFix("a nested function reads it")
    return reads


def copy_for_callers(ctx: FixContext, write: InPlaceWrite, keep: Callable[[ast.Name], bool] = lambda read: False,
                     kept: str = "the leaf keeps its old value") -> Fix:
    """A helper writes its parameter, a leaf, and reads it no more; its callers read the leaf after the call:
    the helper writes a copy (``proj = proj.clone()`` before the write) and returns it, and each call binds it to
    a new name that the caller reads from then on (``proj_new = scale(proj)``; ``proj.grad`` and the optimizer
    still see the leaf, and so do the reads ``keep`` names; a parameter's leaf, ``m.w[0] = 0``: ``w = m.w.clone()``,
    read where the run saw the caller take its values, ``_attribute_reads``).  Unsafe (``kept`` says why)."""
    cst, (name, _), stmt = cst_mod(), root_name(write.target), write.stmt
    attr = attribute_base(write.target) if name is None and write.moment is not None else None
    name = ctx.source(attr).split(".")[0] if attr is not None else name
    helper = Helper.of(ctx, stmt, name)
    fn = helper.fn
    if ctx.loops_around(stmt, fn) or any(isinstance(n, ast.Return) for n in own_nodes(fn)):
        raise CannotFix("the helper writes in a loop, or returns something already")
    after = later_reads_of_name(ctx, fn, stmt, name) if attr is None else write.moment.values_taken_after(write.depth)
    if any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in own_nodes(fn)) \
            or after is None or any(not ctx.inside(r, stmt) for r in after):
        raise CannotFix(f"the helper binds `{name}` or reads it after the write")
    if not helper.calls:
        raise CannotFix("the helper is not called in this file")
    rw, copy = Rewrite(ctx), fresh_name(ctx, fn, attr.attr) if attr is not None else name
    first = _rewrite_write_on(ctx, rw, write, attr, copy, stmt) if attr is not None else f"{name}.clone()"
    if attr is None:
        rw.insert_before(stmt, f"{name} = {first}")
    extra = [return_at_end(ctx, fn, copy)]
    callers, locals_ = set(), []
    for call in helper.calls:
        arg = helper.passed(call)
        call_stmt = ctx.statement_of(call)
        caller = ctx.function_of(call_stmt)
        if not (isinstance(arg, ast.Name) and isinstance(call_stmt, ast.Expr) and call_stmt.value is call):
            raise CannotFix("a call passes an expression, or uses what the helper returns")
        if caller is None or caller in callers or arg.id not in bound_names(caller) or ctx.loops_around(call_stmt, caller):
            raise CannotFix("a call at module level, in a loop, or a second call in one function")
        callers.add(caller)
        ctx.require_own_lines(call_stmt)
        at = InPlaceWrite.at_call(ctx, call, write.moment)
        if assigned_after(ctx, caller, call_stmt, arg.id, call_stmt) or attr is None and at.sharing(
                ctx, arg.id).aliases_read_after:  # (a view of it keeps the old values)
            raise CannotFix(f"`{arg.id}` is assigned again after the call, or a view or base of it is read after it")
        reads = _reads_of_copy(ctx, caller, call_stmt, arg.id, keep) if attr is None else \
            _attribute_reads(ctx, at, call_stmt, arg.id + ctx.source(attr)[len(name):])
        local = fresh_name(ctx, caller, f"{arg.id}_new" if attr is None else attr.attr)
        locals_.append(local)
        rw.replace_node(ctx.cst(call_stmt), assign(cst.Name(local), ctx.cst(call)))
        for read in reads:
            rw.replace_node(ctx.cst(read), cst.Name(local))
    edits = sorted([*rw.edits(), *extra], key=lambda e: (e.line, e.column))
    title = (f"Compute on a copy: `{fn.name}` writes `{short(first)}` and returns it, read as "
             + ", ".join(f"`{n}`" for n in sorted(set(locals_))) + f" after each call (unsafe: {kept})")
    return Fix(title, False, tuple(edits), callers_checked=True)


def _attribute_reads(ctx: FixContext, at: InPlaceWrite, call: ast.stmt, text: str) -> list[ast.Attribute]:
    """The caller's reads of the leaf ``text`` (``self.w``) after ``call``: every node the run saw take its values
    there (``Moment.values_taken_after``), each naming it or a view of it; CannotFix for one that does not."""
    taken = at.moment.values_taken_after(at.depth) if at.moment is not None else None
    reads = [attribute_base(node) for node in taken or ()]
    if not taken or any(r is None or ctx.source(r) != text or ctx.scope_of(r) is not ctx.scope_of(call) for r in reads):
        raise CannotFix(f"the caller takes `{text}`'s values otherwise than by its name after the call, or not at all")
    require_dominated(ctx, reads, call)
    return reads
