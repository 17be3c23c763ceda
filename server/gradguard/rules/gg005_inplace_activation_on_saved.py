"""GG005 inplace-activation-on-saved: an ``inplace=True`` activation overwrites a tensor saved for backward."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from ..diagnostics import Fix, Severity, TextEdit
from ..fixes.context import CannotFix, FixContext
from ..fixes.edits import Rewrite
from ..fixes.inplace import RebindRewrite, fix_or_none, inplace_false, is_temporary, mutation_of, rebind_fix, rebinds
from ..fixes.writes import InPlaceWrite, root_name, short, without_keyword
from ..inference.events import Finding, Mutation
from ..inference.hooks import KeptOutputOverwritten
from ..inference.sharing import Moment
from ..knowledge import load_knowledge
from ..messages import Message
from ..statements import own_nodes
from .base import Example, Rule
from .common import SAVED_MESSAGE, conflict_related, first_conflict, where_it_raises


def check(mutation: Mutation):
    if isinstance(mutation, KeptOutputOverwritten):
        yield from _kept_output_overwritten(mutation)
        return
    if not isinstance(mutation, Mutation) or mutation.kind != "write":
        return  # optimizer steps, .data writes and graph breaks have rules of their own
    if mutation.module is None and not mutation.functional_inplace:
        return
    conflict = first_conflict(mutation)
    if conflict is None:
        yield from _sign_refused(mutation)
        return
    save = conflict.save
    ctor = mutation.module.ctor if mutation.module is not None else None
    what = "output" if save.role == "output" else "input"
    facts = dict(how=mutation.how, label=mutation.target.label, op=save.op, saved=save.node, what=what,
                 raises=where_it_raises(conflict), torch=SAVED_MESSAGE)
    if ctor is None:
        yield Finding(
            "GG005",
            mutation.node,
            Message.format(
                '{how} overwrites {label}, which `{op}` on {saved} saved (as its {what}) for backward; {raises} "{torch}". '
                "{advice}", advice=functional_advice(mutation.node), **facts),
            certain=save.certain,
            related=conflict_related(conflict, mutation),
            mutation=mutation,
        )
        return
    # A module is reported once, where it is made in-place: where it is built (the line `inplace=False` changes),
    # or the later `m.inplace = True` that switched it.
    made = mutation.module.made_inplace
    yield Finding(
        "GG005",
        made or ctor,
        Message.format(
            "{how}, {made}, is applied on {applied} to {label}, which `{op}` on {saved} saved (as its {what}) for "
            'backward; {raises} "{torch}". {advice}', applied=mutation.node,
            made="switched to in-place here" if made else "built here",
            advice="Leave this module out of place." if made else "Use inplace=False.", **facts),
        certain=save.certain,
        related=[(mutation.node, "the module is applied here"), *conflict_related(conflict, mutation)],
        mutation=mutation,
    )


def _sign_refused(mutation: Mutation):
    """An in-place activation given a negative parameter its in-place backward refuses (`F.leaky_relu_(x, -2)`
    saves its result and cannot tell the input's sign from it): the backward through it raises."""
    if mutation.sign_refused is None or mutation.sign_reached is None:
        return
    param, value, error = mutation.sign_refused
    ctor = mutation.module.ctor if mutation.module is not None else None
    made = mutation.module.made_inplace if mutation.module is not None else None
    facts = dict(how=mutation.how, param=param, value=value, label=mutation.target.label, torch=error,
                 backward=mutation.sign_reached.node)
    if ctor is None:
        yield Finding(
            "GG005", mutation.node,
            Message.format('{how} with `{param}={value}` overwrites {label} in place; torch refuses the backward of an '
                           'in-place call with a negative `{param}`, so the backward on {backward} raises "{torch}". '
                           '{advice}',
                           advice=functional_advice(mutation.node), **facts),
            related=[(mutation.sign_reached.node, "backward raises here")],
            mutation=mutation,
        )
        return
    yield Finding(
        "GG005", made or ctor,
        Message.format('{how}, {made}, has `{param}={value}` and is applied on {applied} to {label}; torch refuses the '
                       'backward of an in-place call with a negative `{param}`, so the backward on {backward} raises '
                       '"{torch}". {advice}', applied=mutation.node,
                       made="switched to in-place here" if made else "built here",
                       advice="Leave this module out of place." if made else "Use inplace=False.", **facts),
        related=[(mutation.node, "the module is applied here"), (mutation.sign_reached.node, "backward raises here")],
        mutation=mutation,
    )


def _kept_output_overwritten(event: KeptOutputOverwritten):
    """A forward hook keeps its module's output itself, and an in-place activation run after the module overwrites
    it; the kept reference is then used (a backward through a value computed from it, or ``autograd.grad`` asked
    about it).  Reported at the statement that keeps it, where a ``.clone()`` fixes it."""
    write = event.write
    if write.module is None and not write.functional_inplace:
        return
    use = event.first_use()
    if use is None:
        return
    if getattr(use, "how", "") == "autograd.grad":
        used = Message.format("`autograd.grad` on {line} gives the gradient with respect to the activation's output, "
                              "not the layer's", line=use.node)
    else:
        used = Message.format("the backward on {line} runs through the activation's values, not the layer's",
                              line=use.node)
    made = write.module.made_inplace or write.module.ctor if write.module is not None else None
    yield Finding(
        "GG005",
        event.node,
        Message.format(
            "This forward hook keeps the output of {hooked} itself (the hook is registered on {registered}), and "
            "{how}, applied on {applied}, then overwrites that tensor in place: what the hook kept holds the "
            "activation's values, and autograd takes it for the activation's output, so {used}, without an error. "
            "Keep `output.clone()` instead, or use an out-of-place activation.",
            hooked=event.hooked, registered=event.registered, how=write.how, applied=write.node, used=used),
        related=[(event.registered, "the forward hook is registered here"),
                 (write.node, "the in-place write to the kept output"),
                 *([(made, "the in-place layer is built here")] if made is not None else []),
                 (use.node, "the kept output is used here")],
        data={"kept_output": event},
    )


def functional_advice(call: object) -> str:
    """What to call instead of an in-place functional: ``inplace=False`` only for a function that takes that
    argument (the generated table's ``inplace_kwarg``: ``F.relu(x, inplace=True)``); an ``F.leaky_relu_`` takes
    none, so its out-of-place twin (the table's ``inplace``), spelled as the code spells the function."""
    func = call.func if isinstance(call, ast.Call) else None
    spelled = ast.unparse(func) if func is not None else ""
    name = spelled.rsplit(".", 1)[-1]
    knowledge = load_knowledge()
    inplace_keyword = isinstance(call, ast.Call) and any(k.arg == "inplace" for k in call.keywords)
    if name in knowledge.inplace_kwarg_functions and inplace_keyword:
        return f"Pass `inplace=False` to `{spelled}` (or drop the keyword)."
    twin = knowledge.inplace_twin(name) if name.endswith("_") else None
    if twin:
        return f"Call the out-of-place `{spelled[:-len(name)]}{twin}` instead (`{name}` takes no `inplace` argument)."
    return "Use an out-of-place op here."


# ---- The fix --------------------------------------------------------------------------------------
def fix(ctx: FixContext, finding: Finding) -> Fix | None:
    """GG005: ``inplace=False`` at the module's constructor, or at the functional call; a forward hook that keeps
    its module's output returns a copy of it."""
    if finding.data.get("kept_output") is not None:
        return _hook_returns_a_copy(ctx, finding.data["kept_output"])
    mutation = mutation_of(finding)
    module = mutation.module
    if module is not None:
        return module_inplace_false(ctx, mutation)
    forwarded = fix_or_none(lambda: _forwarded_flag(ctx, mutation))
    if forwarded is not None:
        return forwarded
    write = InPlaceWrite.of_mutation(ctx, mutation)
    if write.kind != "functional":
        raise CannotFix("not an in-place activation call")
    rebind = RebindRewrite(ctx, write)
    func = ctx.source(write.call.func)
    what = f"Use `{func[:-1]}`" if func.endswith("_") else "Use `inplace=False`"
    return rebind_fix(rebind, what)


def _hook_returns_a_copy(ctx: FixContext, event: KeptOutputOverwritten) -> Fix:
    """``return output.clone()`` at the end of a forward hook that keeps its module's output: torch goes on with the
    copy, which the in-place layer then writes, and what the hook kept stays the layer's output, in the graph (so
    `autograd.grad` asked of it still works, where a kept clone would be no input of the loss).  Unsafe: the kept
    tensor now holds the layer's values, not the activation's."""
    hook = ctx.function_of(event.node)
    if hook is None or hook is not event.hook_def:
        raise CannotFix("the output is kept by a function the hook calls, not in the hook's own body")
    params = [*hook.args.posonlyargs, *hook.args.args] if isinstance(hook, ast.FunctionDef) else []
    if len(params) < 3 or hook.args.vararg is not None:
        raise CannotFix("the hook is not a function taking the output as its last parameter")
    output = params[-1].arg
    own = list(own_nodes(hook))
    if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in own):
        raise CannotFix("the hook returns a value of its own")
    if any(isinstance(n, ast.Name) and n.id == output and not isinstance(n.ctx, ast.Load) for n in own):
        raise CannotFix(f"the hook rebinds `{output}`")
    last = hook.body[-1]
    ctx.require_own_lines(last)
    end = last.end_lineno
    returned = f"return {output}.clone()"
    at = len(ctx.lines[end - 1]) + 1
    edit = TextEdit(end, at, end, at, f"{ctx.newline}{ctx.indent_of(hook.body[0])}{returned}")
    return Fix(f"Return a copy from the hook: `{returned}` (unsafe: what the hook keeps holds the layer's values, "
               "not the activation's)", False, (edit,))


def _forwarded_flag(ctx: FixContext, mutation: Mutation) -> Fix:
    """Where ``inplace=True`` reaches the in-place op through a wrapper's ``**kwargs``: the call that spells
    the flag drops it.  Safe when the call rebinds the name it passes (``x = act(x, inplace=True)``) or that name
    is not read afterwards, and nothing else holds its memory."""
    # The engine writes the op's call out with the caller's keywords (``F.relu(t, inplace=True)``): the flag's
    # keyword is the caller's own node, and the op's function is the wrapper's.
    inner = mutation.node
    flag = next((k for k in getattr(inner, "keywords", ()) if k.arg == "inplace"), None)
    if not isinstance(inner, ast.Call) or flag is None or not (isinstance(flag.value, ast.Constant)
                                                              and flag.value.value is True):
        raise CannotFix("the write's call does not get `inplace=True`")
    call = ctx.parents.get(flag)
    fn = ctx.function_of(inner.func)
    if not isinstance(call, ast.Call) or fn is None or fn.args.kwarg is None or ctx.function_of(call) is fn:
        raise CannotFix("the flag is not forwarded from a caller through `**kwargs`")
    kwargs = fn.args.kwarg.arg
    if [n for n in own_nodes(fn) if isinstance(n, ast.Name) and n.id == kwargs and ctx.parents.get(n) is not None
            and not (isinstance(ctx.parents.get(n), ast.keyword) and ctx.parents.get(n).arg is None)]:
        raise CannotFix("the wrapper reads its `**kwargs` otherwise than forwarding them")
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
    if name != fn.name or any(a.arg == "inplace" for a in (*fn.args.args, *fn.args.kwonlyargs)):
        raise CannotFix("the call is not to the wrapper that forwards the flag")
    passed = call.args[0] if call.args else None
    if not isinstance(passed, ast.Name):
        raise CannotFix("the written tensor is not passed as a name")
    stmt = ctx.statement_of(call)
    site = InPlaceWrite.at_call(ctx, call, mutation.moment)
    report = site.sharing(ctx, passed.id)
    if report.besides(f"it is passed to `{ctx.source(call.func)}`") or (
            not (rebinds(stmt, passed.id) and stmt.value is call) and site.value_read_after(ctx, passed.id)):
        raise CannotFix(f"`{passed.id}` is read later and would miss the write")
    from_cst = ctx.cst(call)
    rw = Rewrite(ctx).replace_node(from_cst, without_keyword(from_cst, "inplace"))
    return rw.fix(f"Drop `inplace=True` from the call to `{fn.name}`: it forwards the flag to an op whose input "
                  "backward needs", safe=True)


def module_inplace_false(ctx: FixContext, mutation: Mutation) -> Fix | None:
    """``nn.ReLU(inplace=True)`` -> ``nn.ReLU(inplace=False)``: safe when at every place the module is applied
    its input is a temporary or a name rebound to the result (nothing else reads the overwritten input)."""
    ctor = mutation.module.ctor if mutation.module is not None else None
    if mutation.module is not None and mutation.module.made_inplace is not None:
        return _switch_off(ctx, mutation.module.made_inplace)
    if not isinstance(ctor, ast.Call):
        raise CannotFix("the module's constructor is not in this file")
    flag = next((k.value for k in ctor.keywords if k.arg == "inplace"), None)
    read = flag is not None and not (isinstance(flag, ast.Constant) and flag.value is True)
    if read and not _read_only(flag):
        raise CannotFix("inplace= is neither the literal True nor a flag read from a variable")
    rw = Rewrite(ctx).replace_node(ctx.cst(ctor), inplace_false(ctx.cst(ctor), read_flag=read))
    sites, why = _module_call_sites(ctx, ctor)
    unsafe = [why] if why else []
    if read:  # the run found it True here; out of place, every module built here computes the same values
        unsafe.insert(0, f"every module built here runs out of place, whatever `{short(ctx.source(flag), 30)}` says")
    runs = mutation.moment.log.writes if mutation.moment is not None else {}
    for site in sites:
        problem = _site_problem(ctx, site, runs.get(id(site), ()))
        if problem:
            unsafe.append(problem)
    title = f"Use `inplace=False` in `{short(ctx.source(ctor), 50)}`"
    if unsafe:
        return rw.fix(f"{title} (unsafe: {unsafe[0]})", safe=False)
    return rw.fix(title, safe=True)


def _read_only(flag: ast.expr) -> bool:
    """A name (not False or None), an attribute chain or a subscript by a literal: reading it runs no code."""
    while isinstance(flag, (ast.Attribute, ast.Subscript)):
        if isinstance(flag, ast.Subscript) and not isinstance(flag.slice, ast.Constant):
            return False
        flag = flag.value
    return isinstance(flag, ast.Name)


def _switch_off(ctx: FixContext, made: ast.AST) -> Fix:
    """``m.inplace = True``, which switched the module to in-place after it was built, sets False instead.  Unsafe:
    every module the assignment reaches (a loop over ``modules()``) is applied out of place, also one whose caller
    relies on its input being overwritten."""
    if not (isinstance(made, ast.Assign) and len(made.targets) == 1 and isinstance(made.targets[0], ast.Attribute)
            and made.targets[0].attr == "inplace" and isinstance(made.value, ast.Constant) and made.value.value is True):
        raise CannotFix("the module is switched to in-place by something other than `... .inplace = True`")
    ctx.require_own_lines(made)
    line, column, end_line, end_column = ctx.char_range(made.value)
    edit = TextEdit(line, column + 1, end_line, end_column + 1, "False")
    target = ctx.source(made.targets[0])
    return Fix(f"Keep it out of place: `{short(target)} = False` (unsafe: every module the assignment sets runs out "
               "of place)", False, (edit,))


def _module_call_sites(ctx: FixContext, ctor: ast.Call) -> tuple[list[ast.Call], str | None]:
    parent = ctx.parents.get(ctor)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            cls = ctx.class_of(ctor)
            if cls is None:
                return [], "the module is stored on an object outside a class"
            on_self = [n for n in ctx.names_in(cls).attribute(target.attr)
                       if isinstance(n.value, ast.Name) and n.value.id == "self"]
            sites = [call for n in on_self if isinstance(call := ctx.parents.get(n), ast.Call) and call.func is n]
            other_uses = [n for n in on_self if isinstance(n.ctx, ast.Load) and not any(s.func is n for s in sites)]
            if other_uses:
                return sites, f"`self.{target.attr}` is also used other than by calling it"
            return sites, None if sites else "the module is never called in its class"
        if isinstance(target, ast.Name):
            scope = ctx.scope_of(ctor)
            uses = ctx.names_in(scope).of(target.id)
            sites = [call for n in uses if isinstance(call := ctx.parents.get(n), ast.Call) and call.func is n]
            loads = [n for n in uses if isinstance(n.ctx, ast.Load)]
            if len(loads) != len(sites):
                return sites, f"`{target.id}` is also used other than by calling it"
            return sites, None if sites else "the module is never called here"
    if isinstance(parent, ast.Call) and (ctx.qual(parent.func) or "").endswith("Sequential") and ctor in parent.args:
        if parent.args.index(ctor) == 0:
            return [], "it is the first layer: it would overwrite the Sequential's input"
        return [], None  # its input is the previous layer's output, which nothing else holds
    return [], "cannot see where the module is applied"


def _site_problem(ctx: FixContext, site: ast.Call, runs: Sequence[Moment]) -> str | None:
    """Why applying the module out of place at ``site`` may change the program (None: it does not): who else holds
    its input and reads it after, as the run's writes there show (``runs``: ``RunLog.writes``; a site no run wrote
    at is asked of the code)."""
    if not site.args:
        return "a call without an input"
    stmt = ctx.statement_of(site)
    if isinstance(stmt, ast.Expr) and stmt.value is site:
        return f"the result of `{ctx.source(site)}` is dropped: the code relies on the in-place write"
    arg = site.args[0]
    name, _ = root_name(arg)
    if name is None:
        return None if is_temporary(arg) else f"`{ctx.source(arg)}` is not a local name"
    write = InPlaceWrite(stmt, "functional", arg, site, True, runs[0] if runs else None)
    report = write.sharing(ctx, name)
    if not report.clean:
        return report.reason()
    if not rebinds(stmt, name) and write.value_read_after(ctx, name):
        return f"`{name}` is read after `{ctx.source(site)}` and would miss the write"
    return None


RULE = Rule(
    code="GG005",
    name="inplace-activation-on-saved",
    summary="`inplace=True` activation or dropout applied to a tensor that an earlier op saved for backward.",
    explanation="""
`nn.ReLU(inplace=True)`, `F.relu_`, `F.dropout(..., inplace=True)` and the other `inplace=` modules and
functions overwrite their input.  That is safe after ops that do not keep their output (convolution,
BatchNorm, Linear, add), and wrong after ops that do (`sigmoid`, `tanh`, `exp`, `softmax`, another
`relu`) or when a later op kept the input: `backward()` then raises `one of the variables needed for
gradient computation has been modified by an inplace operation`.  gradguard reports a module where it
is constructed (the line to change), with the call that applies it as a related location.  In-place forms
can keep what their out-of-place twins do not: `leaky_relu`, `elu`, `selu` and `celu` save their input, but
their in-place forms save their result, so an in-place dropout after `nn.LeakyReLU(inplace=True)` raises.

A forward hook that keeps a module's output (`features.append(output)`, `self.acts[name] = output`) keeps
the tensor itself; an in-place activation after that module overwrites it.  What the hook kept then holds the
activation's values, and autograd takes it for the activation's output: a loss computed from it, or
`autograd.grad` asked about it, gives the activation's gradients, not the layer's, without an error.  That is
reported where the hook keeps the output (`output.clone()` there fixes it).
""",
    fix_advice="Pass `inplace=False` (or drop the keyword) to a module or function that takes it; call the "
    "out-of-place twin of one whose name ends in `_` (`F.relu` for `F.relu_`, `F.leaky_relu` for `F.leaky_relu_`: "
    "these take no `inplace` argument).",
    default_severity=Severity.ERROR,
    check=check,
    fix=fix,
    when_wrong="""
An `nn.Dropout(p, inplace=True)` module is flagged in any mode. It writes nothing in `eval()` mode, or when `p` is
0 but passed as a variable. A literal `p=0` is recognised. A real case is timm's TNT: it is correct by default
(`attn_drop=0`) and raises at backward with `attn_drop > 0`.
""",
    invalid=(
        Example(
            """
import torch
import torch.nn.functional as F
x = torch.randn(4, requires_grad=True)
y = torch.sigmoid(x)
z = F.relu(y, inplace=True)   # GG005
z.sum().backward()
""",
            raises=SAVED_MESSAGE,
        ),
    ),
    valid=(
        Example(
            """
import torch
import torch.nn as nn
x = torch.randn(2, 3, 8, 8, requires_grad=True)
conv, bn, act = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True)
act(bn(conv(x))).sum().backward()
"""
        ),
    ),
)
