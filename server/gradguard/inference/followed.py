"""Following the file's own code: calls of its functions, methods, closures and lambdas analysed in place
with the caller's values, instances of its classes built by running ``__init__``, and the scopes a nested
function sees.  A mixin of ``Interpreter``."""

from __future__ import annotations

import ast
from typing import NamedTuple

from ..knowledge.names import JOINING
from ..statements import blocks, every_node, syntax_fact
from .calls import CALL_STATS
from .classes import ClassInfo, dataclass_fields, find_method
from .imports import normalize, qualified_name
from .state import GRAD_OFF_CONTEXTS, State
from .values import (
    NOT_TENSOR,
    UNKNOWN,
    Const,
    FunctionValue,
    KeywordArgs,
    ModuleValue,
    Tensor,
    TensorSeq,
    Value,
    join,
    new_id,
)


# Decorators that make a generator function a context manager: `with cm(...) as v:` runs the generator up to its
# yield (`v` is the yielded value), then the `with` body, then the rest of the generator.
CONTEXT_MANAGER_DECORATORS = frozenset({"contextlib.contextmanager", "contextlib.asynccontextmanager"})


class FollowedCall(NamedTuple):
    """A followed call running now: an entry of ``Interpreter.call_stack`` (outermost first)."""

    fn: ast.AST  # the function (or lambda) it runs
    self_value: Value | None  # the instance it runs on (None: a function)
    site: ast.AST  # its call site (the `with` statement, for the part of a generator run when the block ends)
    mark: int  # a fresh id: this call, told apart from another at the same site
    caller_grad: bool  # the caller's grad mode when it made the call
    caller_grad_off_site: tuple[ast.AST, int | None] | None  # the caller's ``grad_off_site`` then


class FollowedCallsMixin:
    def _stmt_FunctionDef(self, stmt: ast.FunctionDef) -> None:
        """A nested ``def`` is a closure over the running function's variables (module-level functions are
        looked up by name instead, see ``_expr_Name``)."""
        if not (self.module_unit and not self.call_stack):
            self.state.env[stmt.name] = FunctionValue(stmt, scope=[self.state.env, *self.scopes],
                                                      module_path=self.ctx.path)

    _stmt_AsyncFunctionDef = _stmt_FunctionDef

    def _stmt_Nonlocal(self, stmt: ast.Nonlocal | ast.Global) -> None:
        self.outer_names.update(dict.fromkeys(stmt.names, isinstance(stmt, ast.Nonlocal)))

    _stmt_Global = _stmt_Nonlocal

    def lookup(self, name: str) -> Value | None:
        """A name not bound in the running function: its closure's scope, then the module's variables."""
        for scope in self.scopes:
            if name in scope:
                return scope[name]
        return None

    def _module_env(self) -> dict[str, Value]:
        """The module's variables as seen from the code running now."""
        if self.module_unit and not self.call_stack:
            return self.state.env
        return self.scopes[-1] if self.scopes else {}

    def _another_instance(self, fn: ast.AST, self_value: Value | None) -> bool:
        """A method running already, called on another of the file's module instances (a stack of layers that holds
        a stack of layers: each runs its own ``forward``), which the depth limit bounds."""
        return isinstance(self_value, ModuleValue) and all(
            call.self_value is not self_value for call in self.call_stack if call.fn is fn)

    def running_function(self) -> ast.AST | None:
        """The function the innermost followed call runs (None: none runs, the run's own code)."""
        return self.call_stack[-1].fn if self.call_stack else None

    @property
    def caller_grad_off(self) -> tuple[tuple[ast.AST, int | None] | None, ast.AST] | None:
        """In a followed call made with grad mode off: the caller's ``grad_off_site`` (the same object while the
        callee runs under that switch and turns grad mode off nowhere itself), and the call, in the function that
        turned it off, that the running code is part of (the outermost of the calls made one in another with grad
        mode off under that same switch).  None in a call made with grad mode on, or in none."""
        calls = self.call_stack
        if not calls or calls[-1].caller_grad:
            return None
        switch = calls[-1].caller_grad_off_site
        outer = len(calls) - 1
        while outer > 0 and not calls[outer - 1].caller_grad and calls[outer - 1].caller_grad_off_site is switch:
            outer -= 1
        return switch, calls[outer].site

    def inline(self, fn: ast.FunctionDef | ast.Lambda, args: list[Value], kwargs: dict[str, Value], node: ast.AST,
               self_value: Value | None = None, record: bool = True, scope: list[dict[str, Value]] | None = None,
               owner: ClassInfo | None = None, max_depth: int = 5, module_path: str | None = None,
               frame: list[dict[str, Value]] | None = None) -> Value | None:
        """Analyse a call of one of the file's own functions in place, with the caller's values.

        ``scope``: the variables a closure or lambda sees from the functions around its definition, innermost
        first; ``owner``: the
        class a method was found on.  Returns None when the call is not followed (too deep, recursive): the
        caller then treats it as unknown.  ``frame``: the callee's variables, kept across two calls that run the
        parts of one generator (see ``enter_context``): empty, it receives them; else the call runs in them.
        """
        if len(self.call_stack) >= max_depth or (
                any(call.fn is fn for call in self.call_stack) and not self._another_instance(fn, self_value)):
            return None
        self.count_step()
        saved = (self.state, self.inline_record, self.returns, self.loop_vars, self.scopes, self.outer_names,
                 self.owner, self.self_value, self.ctx, self.grad_off_site, self.returned_conversions)
        context = self.ctx.for_module(module_path or getattr(owner, "module_path", None))
        # Code of another module of the project sees that module's imports and classes; its globals are unknown.
        module_env = self._module_env() if context is self.ctx else {}
        self.ctx = context
        env = frame[0] if frame else self._bind_parameters(fn, args, kwargs, self_value, node)
        if frame is not None and not frame:
            frame.append(env)
        # A call made with grad mode off runs under its caller's switch until it turns grad mode off itself (see
        # ``caller_grad_off``).
        grad = caller_grad = self.state.grad_enabled
        caller_grad_off_site = self.grad_off_site
        decorated = False
        for deco in getattr(fn, "decorator_list", ()):
            if self.qual(deco.func if isinstance(deco, ast.Call) else deco) in GRAD_OFF_CONTEXTS:
                # the calls this function makes are frame ``len(self.frame_sites) + 1``, its own call the one before
                grad, self.grad_off_site, decorated = False, (deco, len(self.frame_sites) + 1), True
        self.state = State(env, grad)
        chain = [*(scope or ()), module_env]
        self.scopes = [s for i, s in enumerate(chain) if s is not env and all(s is not t for t in chain[:i])]
        self.outer_names = {}
        self.owner, self.self_value = owner, self_value
        self.inline_record = self.inline_record and record
        # An index of the caller's loop passed in (`step(y, t)`) still indexes element by element; a closure
        # sees the loops around its definition's caller by name.
        self.returns, self.returned_conversions = [], []
        self.loop_vars = [*(saved[3] if scope is not None else ()),
                          *self._loop_parameters(fn, node, saved[3], self_value is not None)]
        CALL_STATS["followed call of the file's own code"] += 1
        self.followed.add((owner.name if owner is not None else "", getattr(fn, "name", "")))
        self.call_stack.append(FollowedCall(fn, self_value, node, new_id(), caller_grad, caller_grad_off_site))
        self.frame_sites = (*self.frame_sites, node)
        unsure_context = self.unsure_context
        self.run_log.enter(node, fn)
        self.run_log.parameters_bound(env, parameter_names(fn, self_value is not None))
        self.caller_envs.append(saved[0].env)
        try:
            if isinstance(fn, ast.Lambda):
                self.run_log.ran(ast.copy_location(ast.Return(fn.body), fn.body))  # what its body reads, as it runs
                self.returns.append(self.eval(fn.body))
            else:
                self.run_block(fn.body)
            returns, converted = self.returns, self.returned_conversions
            exit_mode, exit_site = self.state.grad_enabled, self.grad_off_site
        finally:
            self.call_stack.pop()
            self.frame_sites = self.frame_sites[:-1]
            self.unsure_context = unsure_context  # (what followed a jump inside it ends with it)
            self.run_log.leave()
            self.caller_envs.pop()
            (self.state, self.inline_record, self.returns, self.loop_vars, self.scopes, self.outer_names,
             self.owner, self.self_value, self.ctx, self.grad_off_site, self.returned_conversions) = saved
        if not decorated and exit_mode != grad:
            # `torch.set_grad_enabled(False)` called in the callee (not entered as a block): the mode stays so
            self.state.grad_enabled = exit_mode
            if not exit_mode:
                self.grad_off_site = exit_site
        # Every return hands back one conversion's tensor itself (`return h.to(torch.float32)`): so does the call.
        if converted and converted[0] is not None and all(c is converted[0] for c in converted) \
                and len(converted) == len(returns):
            self.converted_returns[id(node)] = converted[0]
        else:
            self.converted_returns.pop(id(node), None)
        if not returns:
            return NOT_TENSOR
        result = returns[0]
        for other in returns[1:]:
            result = join(result, other)
        return result

    def enter_context(self, expr: ast.expr, stmt: ast.stmt):
        """``with cm(...) as v:`` of a generator function of the project decorated ``@contextmanager``: run it up to
        its yield now, and return the yielded value and a function that runs the rest of it (to call when the
        ``with`` body is done; its call site is the ``with`` statement ``stmt``, so that what it writes is not
        taken for a write made where the block begins); None when it is not one (or not one yield where it can
        be split)."""
        if not isinstance(expr, ast.Call):
            return None
        callee = self.eval(expr.func)
        fn = callee.node if isinstance(callee, FunctionValue) else None
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        imports = self.ctx.for_module(callee.module_path or getattr(callee.owner, "module_path", None)).imports
        if not any(normalize(qualified_name(d, imports) or "") in CONTEXT_MANAGER_DECORATORS
                   for d in fn.decorator_list):
            return None
        parts = self.ctx.generator_parts.get(fn)
        if parts is None:
            parts = self.ctx.generator_parts[fn] = _generator_parts(fn)
        if parts is False:
            return None
        enter, leave = parts
        args, kwargs = self._eval_call_args(expr)
        frame: list[dict[str, Value]] = []
        where = dict(self_value=callee.self_value, scope=callee.scope, owner=callee.owner,
                     module_path=callee.module_path)
        value = self.inline(enter, args, kwargs, expr, frame=frame, **where)
        if value is None:  # not followed (too deep, recursive): an unknown call, as any other
            return self._unknown_call(expr, [*args, *kwargs.values()]), lambda: None

        def exit_() -> None:
            self.inline(leave, [], {}, stmt, frame=frame, **where)

        return value, exit_

    @staticmethod
    def _loop_parameters(fn: ast.FunctionDef | ast.Lambda, node: ast.AST, loop_vars: list[str],
                         bound: bool) -> list[str]:
        """The callee's parameters given an expression of one of the caller's loop indices (``bound``: the
        first parameter is the instance, not an argument of the call)."""
        if not loop_vars or not isinstance(node, ast.Call):
            return []
        params = [p.arg for p in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]]
        if bound:
            params = params[1:]
        given = [*zip(params, node.args), *((kw.arg, kw.value) for kw in node.keywords if kw.arg in params)]
        return [name for name, expr in given
                if any(isinstance(n, ast.Name) and n.id in loop_vars for n in every_node(expr))]

    def _bind_parameters(self, fn: ast.FunctionDef | ast.Lambda, args: list[Value], kwargs: dict[str, Value],
                         self_value: Value | None, site: ast.AST | None = None) -> dict[str, Value]:
        """The callee's parameters bound as Python binds them: positionally, by keyword, else their default."""
        params = [*fn.args.posonlyargs, *fn.args.args]
        env: dict[str, Value] = {}
        if self_value is not None and params:
            env[params[0].arg] = self_value
            params = params[1:]
        for param, value in zip(params, args):
            env[param.arg] = value
        defaults = _defaults(fn.args)
        for param in [*params[len(args):], *fn.args.kwonlyargs]:
            if param.arg in kwargs:
                env[param.arg] = kwargs[param.arg]
            elif param.arg in defaults:
                value = self.eval(defaults[param.arg])
                if (site is None or site is fn) and isinstance(value, Const):
                    # No call site (the instance every method's `self` starts from): the default is one value
                    # among those callers may pass, so no branch is decided by it.
                    value = NOT_TENSOR
                env[param.arg] = value
            else:
                env[param.arg] = self._param_value(param, is_forward=False)
        assumed = [name for name, value in env.items() if isinstance(value, Tensor) and value.root().assumed]
        if assumed and not isinstance(fn, ast.Lambda):
            for name in self.sequences_of(fn).intersection(assumed):
                env[name] = UNKNOWN  # a caller's argument taken for one tensor, iterated here as a list
        if fn.args.vararg is not None:
            extra = args[len(params):]
            # The call's extra positional values: none at a known call is a known empty tuple (`f(t, *args)` forwards
            # nothing); with no call site, whatever callers pass.
            called = site is not None and site is not fn
            calls = site.args if isinstance(site, ast.Call) else ()
            written = tuple(calls[len(params):]) if extra and len(calls) == len(args) and not any(
                isinstance(a, ast.Starred) for a in calls) else None
            env[fn.args.vararg.arg] = (TensorSeq(list(extra), literal=not extra, written=written) if extra or called
                                       else UNKNOWN)
        if fn.args.kwarg is not None:
            named = {p.arg for p in [*params, *fn.args.kwonlyargs]}
            extra = [kw for kw in getattr(site, "keywords", ()) if kw.arg and kw.arg not in named]
            env[fn.args.kwarg.arg] = (KeywordArgs(extra, {kw.arg: kwargs.get(kw.arg, UNKNOWN) for kw in extra}, site)
                                      if extra else UNKNOWN)
        return env

    def instantiate(self, info: ClassInfo, args: list[Value], kwargs: dict[str, Value], node: ast.AST | None,
                    record: bool = True, run_init: bool = True) -> ModuleValue:
        """An instance of one of the file's classes, with what its ``__init__`` (found along the MRO) assigns.

        Construction nests deeper than ordinary calls (a model of blocks of layers), so it has its own bound."""
        classes = self.ctx.classes_for(info)  # first: resolves its imported bases, which may give its torch base
        torch_layer = info.torch_base not in (None, "Module")
        instance = ModuleValue(info.torch_base if torch_layer else info.name, torch_module=torch_layer, ctor=node,
                               user_class=info.node, bound_class=info if info.bound_from is not None else None)
        if torch_layer and isinstance(node, ast.Call):
            self.construct_torch_base(instance, node, args)  # `MyReLU(inplace=True)`: torch's constructor runs
        if run_init and info.dataclass_init:
            self._dataclass_init(instance, dataclass_fields(classes, info), args, kwargs)
            found = find_method(classes, info, "__post_init__")
        else:
            found = find_method(classes, info, "__init__") if run_init else None
        if found is not None:
            init, owner = found
            self.inline(init, args, kwargs, node or init, self_value=instance, record=record, owner=owner,
                        max_depth=8)
        return instance


    @staticmethod
    def _dataclass_init(instance: ModuleValue, fields: list[tuple[str, ast.expr | None]], args: list[Value],
                        kwargs: dict[str, Value]) -> None:
        """What a dataclass's generated ``__init__`` assigns: each field from its argument, by position then by
        name, else its default (a constant; any other default is not evaluated here, so unknown)."""
        for i, (name, default) in enumerate(fields):
            if i < len(args):
                instance.attrs[name] = args[i]
            elif name in kwargs:
                instance.attrs[name] = kwargs[name]
            else:
                instance.attrs[name] = Const(default.value) if isinstance(default, ast.Constant) else UNKNOWN


def used_as_sequences(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Names the function treats as lists of tensors: iterated (``for t in xs``, ``enumerate(xs)``, ``zip(xs,
    ...)``), concatenated or stacked (``torch.cat(xs)``), or appended to.  An unannotated ``forward`` argument used
    so is not taken for one tensor."""
    names = set()
    for node in every_node(fn):  # (a set: the order does not matter)
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name):
            names.add(node.iter.id)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in ("enumerate", "zip") or called in JOINING:
                names.update(a.id for a in node.args if isinstance(a, ast.Name))
            elif called in ("append", "extend") and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                names.add(func.value.id)
    return frozenset(names)


def _generator_parts(fn: ast.FunctionDef | ast.AsyncFunctionDef):
    """A generator function that yields once, as a statement of its body or of the body of a ``try`` there, as two
    functions of its parameters: up to the yield (returning the yielded value), and after it (the rest of the
    ``try`` body, its ``else`` and ``finally``, then what follows; ``except`` handlers run only when the ``with``
    body raises).  False for any other generator."""
    yields = [n for n in ast.walk(fn) if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await))]
    if len(yields) != 1 or not isinstance(yields[0], ast.Yield):
        return False
    found = None
    for i, stmt in enumerate(fn.body):
        if _yields(stmt):
            found = fn.body[:i], stmt, fn.body[i + 1:]
        elif isinstance(stmt, ast.Try):
            for j, inner in enumerate(stmt.body):
                if _yields(inner):
                    rest = [s for field, block in blocks(stmt) if field != "body" for s in block]  # else, finally
                    found = ([*fn.body[:i], *stmt.body[:j]], inner, [*stmt.body[j + 1:], *rest, *fn.body[i + 1:]])
        if found is not None:
            break
    if found is None:
        return False
    before, at, after = found
    value = at.value.value if at.value.value is not None else ast.copy_location(ast.Constant(None), at)
    returned = ast.copy_location(ast.Return(value=value), at)
    return _part(fn, [*before, returned]), _part(fn, after)


def _yields(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Yield)


def _part(fn: ast.FunctionDef | ast.AsyncFunctionDef, body: list[ast.stmt]) -> ast.FunctionDef:
    """A function of ``fn``'s name and parameters with ``body`` (undecorated: the split is the decorator's work)."""
    part = ast.FunctionDef(name=fn.name, args=fn.args, body=body or [ast.copy_location(ast.Pass(), fn)],
                           decorator_list=[], returns=None, type_comment=None, type_params=[])
    return ast.copy_location(part, fn)


def parameter_names(fn: ast.FunctionDef | ast.Lambda, bound_self: bool) -> tuple[str, ...]:
    """The names ``fn``'s parameters bind (not ``self`` when the call binds it): what its caller passed.  Read once
    per signature (kept on its node): asked at every followed call."""
    args = fn.args
    names = syntax_fact(args, "_gradguard_names", lambda: (
        *(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)),
        *(extra.arg for extra in (args.vararg, args.kwarg) if extra is not None)))
    return names[1:] if bound_self else names


def _defaults(args: ast.arguments) -> dict[str, ast.expr]:
    """Each parameter's default expression by name (positional defaults belong to the last positional parameters),
    read once per signature: ``_bind_parameters`` asks at every followed call."""
    return syntax_fact(args, "_gradguard_defaults", lambda: {
        **dict(zip([p.arg for p in [*args.posonlyargs, *args.args]][::-1], args.defaults[::-1])),
        **{p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}})

