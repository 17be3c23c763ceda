"""A write to a helper's parameter, fixed through its callers: the helper rebinds the parameter out of place and
returns it, and every call rebinds the name it passed (``helper(x)`` -> ``x = helper(x)``).

The write changed the caller's tensor; after the fix the caller's name holds the new one, so every later read in
the caller sees what it saw before.  Offered only when every use of the helper in the file is such a call: a
module-level function used by name only, or a method of a class called as ``self.helper(...)`` only, each call a
statement of its own (or already rebinding the name it passes), passing a local name of the caller that nothing
else holds.  A helper anyone may import (no leading underscore) makes the fix unsafe: calls from other files keep
expecting the write.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..diagnostics import Fix, TextEdit
from ..inference.scopes import bound_names
from ..inference.state import GRAD_MODES
from ..statements import own_nodes
from .context import CannotFix, FixBuilder, FixContext
from .edits import Rewrite, return_at_end
from .helper_calls import CALLED_ON_INSTANCES, calls_of
from .inplace import fix_or_none, not_inplace
from .moves import enclosing_statements
from .writes import NESTED_ESCAPE, NONLOCAL_ESCAPE, InPlaceWrite, attribute_base, code, param_escape, root_name, short
from .writes import pieces_read_by_counter

if TYPE_CHECKING:  # pragma: no cover
    from ..inference.events import Finding
    from ..inference.sharing import Moment, Report


def inside_helper(finding: Finding) -> Finding | None:
    """The finding as the helper it happens in sees it: its write, with the calls leading there forgotten (so a
    fix builder works on the helper's own statement); None when the finding's story does not call into it."""
    mutation = finding.mutation
    if mutation is None or not mutation.frames or mutation.entry() is mutation.node:
        return None
    return replace(finding, mutation=replace(mutation, frames=[]))


def fix_in_helper(build: FixBuilder, ctx: FixContext, finding: Finding, saved: bool = False) -> Fix | None:
    """``build``'s fix for the write inside the helper: kept when it is safe for every caller, or when it also
    changes the calls (``through_callers``).  An unsafe fix of the helper alone would leave the callers expecting
    a write that no longer happens, unless ``saved`` (a write breaking a save): ``Moment.only_callers_read_after``."""
    inner = inside_helper(finding)
    fn = inner and ctx.function_of(inner.mutation.node)
    if fn is None:
        return None
    node = inner.mutation.node
    try:
        name, _ = root_name(target := InPlaceWrite.of(ctx, node).target)
    except (CannotFix, KeyError):  # KeyError: a call the engine wrote out (``**kwargs`` spread), not in the tree
        return None
    attribute = name is None and attribute_base(target) is not None  # `m.w[i] = 0`: only a fix seeing to every caller
    outer, moment = None, finding.mutation.moment
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    # A local bound from something else (`x = token`, `a, b = state`): the run knows who else holds that tensor.
    unseen = name in bound_names(fn) and name not in params and not _only_numpy_views(ctx, fn, name)
    saved = saved and bool(finding.mutation.conflicts and moment and moment.only_callers_read_after(name))
    read_after = moment and [o for o in moment.others_read_after(name) if o in {h for h, _ in moment.held_outside()}
                             or not pieces_read_by_counter(ctx, ctx.statement_of(node), o)]  # (but its own pieces)
    if unseen and not saved and (moment is None or name is None or read_after):
        return None
    if name not in bound_names(fn) and not attribute:
        # A closure's free variable: rebinding it there needs `nonlocal`, and every call of the closure in its
        # function to be a plain call after which nothing else holds the old tensor.  A global: no fix.
        outer = _enclosing_owner(ctx, fn, name)
        if outer is None:
            return None
    try:
        fix = build(ctx, inner)
    except CannotFix:
        return None
    if attribute:
        return fix if fix is not None and fix.callers_checked else None
    if fix is not None and outer is not None and not fix.callers_checked:  # (else it saw to the call itself)
        return fix_or_none(lambda: _with_nonlocal(ctx, fix, fn, outer, name, moment))
    within = fix is not None and all(fn.lineno <= e.line <= fn.end_lineno for e in fix.edits)
    if unseen or saved:  # (the run's facts above are about rebinding `name` in the helper)
        return (replace(fix, safe=False) if saved else fix) if within else None
    # An unsafe fix within the helper, unless no call in this file expects the write (all rebind, or none reads after
    # it).  The run tells it for the calls it made: when nothing but `name` held the memory and read it after the
    # write, in any caller, rebinding `name` changes no value any of them reads.
    if fix is not None and not fix.safe and within and not fix.callers_checked \
            and (moment is None or name is None or read_after):
        return None
    return fix


def _enclosing_owner(ctx: FixContext, fn: ast.FunctionDef, name: str | None) -> ast.FunctionDef | None:
    """The function ``fn`` is nested in, when ``name`` is that function's local (and not global there)."""
    outer = ctx.scope_of(fn)  # (its body, when it is defined in a loop, `if` or `with`)
    if name is None or not isinstance(outer, ast.FunctionDef):
        return None
    if any(isinstance(n, ast.Global) and name in n.names for n in own_nodes(fn)):
        return None
    return outer if name in bound_names(outer) else None


def _with_nonlocal(ctx: FixContext, fix: Fix, fn: ast.FunctionDef, outer: ast.FunctionDef, name: str,
                   moment: Moment | None) -> Fix:
    """``fix`` made in the closure ``fn``, with ``nonlocal name`` declared: the rebinding reaches ``outer``.
    Every use of ``fn`` in ``outer`` must be a plain call statement after which only ``name`` holds its tensor.
    A fix that changes nothing in ``fn`` (a clone where ``outer`` saved the tensor) is kept as it is."""
    if not any(fn.lineno <= e.line <= fn.end_lineno for e in fix.edits):
        if ctx.parents.get(fn) is not outer:  # (a `def` in a loop or block: who holds the old tensor is not checked)
            raise CannotFix("a fix outside a closure defined inside a block")
        return fix
    uses = [n for n in own_nodes(outer) if isinstance(n, ast.Name) and n.id == fn.name]
    names = ctx.names_in(outer)
    if not uses or any(d is not fn for m in (*names.of(fn.name), *names.of(name))
                       for d in ctx.definitions_between(m, outer)):
        raise CannotFix("the closure is not only called in its function")
    for use in uses:
        call = ctx.parents.get(use)
        stmt = ctx.parents.get(call)
        if not (isinstance(call, ast.Call) and call.func is use and isinstance(stmt, ast.Expr) and stmt.value is call):
            raise CannotFix("the closure is used otherwise than called as a statement")
        report = InPlaceWrite.at_call(ctx, call, moment).sharing(ctx, name)
        if report.besides(NESTED_ESCAPE, NONLOCAL_ESCAPE):  # (no other nested code uses it)
            raise CannotFix(f"at the call on line {call.lineno}: {report.reason()}")
    if any(isinstance(n, ast.Nonlocal) and name in n.names for n in own_nodes(fn)):
        return fix  # the closure already rebinds the enclosing name
    first = fn.body[1] if len(fn.body) > 1 and ast.get_docstring(fn, clean=False) is not None else fn.body[0]
    ctx.require_own_lines(first)
    indent = ctx.indent_of(first)
    declare = TextEdit(first.lineno, 1, first.lineno, 1, f"{indent}nonlocal {name}{ctx.newline}")
    edits = tuple(sorted((declare, *fix.edits), key=lambda e: (e.line, e.column)))
    return replace(fix, title=f"{fix.title}; `nonlocal {name}` in `{fn.name}`, so `{outer.name}` sees it", edits=edits)


def rebound_in_closure(ctx: FixContext, write: InPlaceWrite, name: str,
                       rewrite: Callable[[], tuple[Rewrite, str]]) -> Fix:
    """``write`` made out of place by ``rewrite``, rebinding ``name``, which the closure around it declares
    ``nonlocal``: kept when every call of the closure is a statement after which nothing else holds the old tensor."""
    fn = ctx.function_of(write.stmt)
    outer = ctx.scope_of(fn)
    if not (isinstance(fn, ast.FunctionDef) and isinstance(outer, ast.FunctionDef) and name not in bound_names(fn)
            and _enclosing_owner(ctx, fn, name) is outer):  # (a free variable of it, or declared `nonlocal`)
        raise CannotFix(f"`{name}` is not a `nonlocal` of a closure")
    made, text = rewrite()
    fix = made.fix(f"Write out of place: `{short(text)}`", safe=True)
    return replace(_with_nonlocal(ctx, fix, fn, outer, name, write.moment), callers_checked=True)


def _only_numpy_views(ctx: FixContext, fn: ast.FunctionDef, name: str | None) -> bool:
    """Every binding of ``name`` in ``fn`` is ``name = <tensor>...numpy()``."""
    stores = [n for n in own_nodes(fn) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    for store in stores:
        parent = ctx.parents.get(store)
        if isinstance(parent, ast.AugAssign):
            continue  # a write to the array itself
        value = parent.value if isinstance(parent, ast.Assign) and parent.targets == [store] else None
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "numpy"):
            return False
    return bool(stores)


@dataclass(frozen=True)
class Helper:
    """The function around a write to its parameter ``param``, and the calls that pass it."""

    fn: ast.FunctionDef
    param: str
    index: int  # the parameter's position among the arguments a call passes (``self`` not counted)
    calls: tuple[ast.Call, ...]
    method: bool

    @staticmethod
    def of(ctx: FixContext, stmt: ast.stmt, param: str) -> Helper:
        fn = ctx.function_of(stmt)
        if not isinstance(fn, ast.FunctionDef):
            raise CannotFix("the write is not in a plain function")
        owner = ctx.parents.get(fn)
        method = isinstance(owner, ast.ClassDef)
        if not (method or isinstance(owner, ast.Module)):
            raise CannotFix("the helper is nested in another function")
        positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        if method:
            # an instance-called method may name its receiver otherwise: its calls never spell it
            if not positional or (positional[0] != "self" and fn.name not in CALLED_ON_INSTANCES) \
                    or any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                           for d in fn.decorator_list):
                raise CannotFix("a method without `self`")
            positional = positional[1:]
        if param not in positional:
            raise CannotFix("the written tensor is not a positional parameter")
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in own_nodes(fn)):
            raise CannotFix("the helper is a generator or a coroutine")
        calls = calls_of(ctx, fn, method)
        return Helper(fn, param, positional.index(param), tuple(calls), method)

    def public_name(self, ctx: FixContext) -> str:
        """The name other files would call the helper by: its class's for an instance-called method."""
        owner = ctx.parents.get(self.fn)
        return owner.name if self.method and self.fn.name in CALLED_ON_INSTANCES else self.fn.name

    def passed(self, call: ast.Call) -> ast.expr:
        """What ``call`` passes for the parameter; CannotFix when it does not pass it by position."""
        if any(isinstance(a, ast.Starred) for a in call.args[: self.index + 1]) or len(call.args) <= self.index \
                or any(k.arg is None or k.arg == self.param for k in call.keywords):
            raise CannotFix("a call does not pass the parameter by position")
        return call.args[self.index]

    def returns_param(self) -> bool:
        """Whether the helper ends with ``return <param>`` and returns nowhere else; CannotFix when it returns
        something else."""
        returns = [n for n in own_nodes(self.fn) if isinstance(n, ast.Return)]
        if not returns:
            return False
        last = self.fn.body[-1]
        if returns == [last] and isinstance(last.value, ast.Name) and last.value.id == self.param:
            return True
        raise CannotFix("the helper returns something else than the written parameter")


def through_callers(ctx: FixContext, rw: Rewrite | Sequence[TextEdit], stmt: ast.stmt, param: str, title: str,
                    safe: bool, drop_decorators: tuple[ast.expr, ...] = (), moment: Moment | None = None,
                    check: Callable[[ast.Call, str], Report] | None = None) -> Fix:
    """The fix ``rw`` (which rebinds ``param`` inside its function) made whole: the function returns ``param`` and
    each call rebinds the name passed for it.  ``drop_decorators``: decorators to remove too; ``check``: the rule's
    own account of who else holding a call's passed tensor matters (a detach's: not its views)."""
    helper = Helper.of(ctx, stmt, param)
    fn = helper.fn
    if set(map(id, fn.decorator_list)) != set(map(id, drop_decorators)):
        raise CannotFix("a decorator may change what the helper's calls return")
    returns = helper.returns_param()
    edits = list(rw) if isinstance(rw, Sequence) else list(rw.edits())
    for decorator in drop_decorators:
        line = decorator.lineno
        if ctx.lines[line - 1].strip() != "@" + ctx.source(decorator) or decorator.end_lineno != line:
            raise CannotFix("the decorator does not have its line to itself")
        edits.append(TextEdit(line, 1, line + 1, 1, ""))  # the decorator's whole line
    if not returns:
        edits.append(return_at_end(ctx, fn, param))
    names = []
    for call in helper.calls:
        passed = _passed_name(ctx, helper, call, returns, moment, check)
        if passed is None:
            continue  # already `x = helper(x, ...)`
        names.append(passed)
        line, column, _, _ = ctx.char_range(call)
        edits.append(TextEdit(line, column + 1, line, column + 1, f"{passed} = "))
    if not names and not returns:
        raise CannotFix("no call to rebind")
    named = helper.public_name(ctx)
    public = not named.startswith("_")
    safe = safe and not public
    where = (f"`{fn.name}` returns `{param}` and its calls rebind " + ", ".join(f"`{n}`" for n in sorted(set(names)))
             if names else f"`{fn.name}` returns `{param}`, which its calls rebind")
    suffix = f" (unsafe: calls to `{named}` from other files still expect the write)" if public else ""
    return Fix(f"{title}; {where}{suffix}", safe, tuple(sorted(edits, key=lambda e: (e.line, e.column))),
               callers_checked=True)


def _passed_name(ctx: FixContext, helper: Helper, call: ast.Call, returns: bool, moment: Moment | None,
                 check: Callable[[ast.Call, str], Report] | None) -> str | None:
    """The caller's name passed for the parameter, which the call must now rebind (None: it already does)."""
    arg = helper.passed(call)
    if not isinstance(arg, ast.Name):
        raise CannotFix("a call passes an expression, not a name it could rebind")
    stmt = ctx.statement_of(call)
    sharing = lambda: check(call, arg.id) if check else InPlaceWrite.at_call(ctx, call, moment).sharing(ctx, arg.id)
    if isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == arg.id and returns:
        if (report := sharing()).aliases_read_after:  # (a tuple of pieces it was read out of, read later)
            raise CannotFix(f"at the call on line {call.lineno}: {report.reason()}")
        return None
    if not (isinstance(stmt, ast.Expr) and stmt.value is call):
        raise CannotFix("a call's result is used")
    ctx.require_own_lines(stmt)
    if _under_no_grad(ctx, stmt):
        raise CannotFix("a call runs with grad mode off: the rebound value would have no graph either")
    caller = ctx.function_of(stmt)
    if caller is None:
        raise CannotFix("a call at module level")
    if arg.id not in bound_names(caller):
        raise CannotFix("a call passes a name its function does not own (rebinding it would make a new local)")
    if (report := sharing()).besides(f"it is passed to `{ctx.source(call.func)}`"):
        raise CannotFix(f"at the call on line {call.lineno}: {report.reason()}")
    return arg.id


def unread_by_callers(ctx: FixContext, write: InPlaceWrite) -> Fix:
    """``w = x.exp_()``, ``F.relu(x, inplace=True)`` in a helper whose parameter ``x`` no one reads afterwards, nor any
    caller after the call (``.grad`` and the like do not count), nor keeps elsewhere: out of place is the same;
    ``x[i] = v`` writes ``x = x.clone()``, which the helper reads from then on as it read ``x``.  Unsafe in a public
    helper (calls from other files are not seen)."""
    name, direct = root_name(write.target)
    view = write.kind in ("setitem", "method") and not direct and name is not None
    if not (view or write.kind in ("method", "functional") and write.value_use and direct and name is not None):
        raise CannotFix("not an in-place call whose result is used, on a name")
    report = write.sharing(ctx, name)
    if (write.value_read_after(ctx, name) and not view) or report.aliases_read_after \
            or report.holders_read_after or report.escapes != [param_escape(name)]:
        raise CannotFix(f"`{name}` is read after the write, or held by more than the caller")
    helper = Helper.of(ctx, write.stmt, name)
    if not helper.calls:
        raise CannotFix("the helper is not called in this file")
    for call in helper.calls:
        arg = helper.passed(call)
        if not isinstance(arg, ast.Name):
            continue  # a temporary: nothing else holds it
        caller, call_stmt = ctx.function_of(call), ctx.statement_of(call)
        if caller is None or arg.id not in bound_names(caller):
            raise CannotFix("a call passes a name its function does not own")
        site = InPlaceWrite.at_call(ctx, call, write.moment)
        report = site.sharing(ctx, arg.id)
        # `weights = step(logits)`: the call's own result holds what the helper returns -- the written value,
        # which the fix still returns (the helper reads its parameter's value nowhere after the write)
        result = {t.id for t in call_stmt.targets if isinstance(t, ast.Name)} \
            if isinstance(call_stmt, ast.Assign) and call_stmt.value is call else set()
        if report.aliases_read_after or set(report.holders_read_after) - result or site.value_read_after(ctx, arg.id):
            raise CannotFix(f"a caller reads what it passed for `{name}` after the call")
    named = helper.public_name(ctx)
    unsafe = "" if named.startswith("_") else f"calls to `{named}` from other files may read `{name}` after it"
    rw = Rewrite(ctx)
    if view:
        rw, title = rw.insert_before(write.stmt, f"{name} = {name}.clone()"), f"Write a copy: `{name} = {name}.clone()`"
    else:
        new_value = not_inplace(ctx, write)
        rw, title = rw.replace_node(ctx.cst(write.call), new_value), f"Write out of place: `{short(code(new_value))}`"
    return rw.fix(f"{title} (unsafe: {unsafe})" if unsafe else title, safe=not unsafe, callers_checked=True)


def _under_no_grad(ctx: FixContext, stmt: ast.stmt) -> bool:
    """Whether ``stmt`` sits in a ``with`` block of its function that may change grad mode."""
    return any(isinstance(i.context_expr, ast.Call) and ctx.qual(i.context_expr.func) in GRAD_MODES
               for up in enclosing_statements(ctx, stmt) if isinstance(up, (ast.With, ast.AsyncWith)) for i in up.items)
