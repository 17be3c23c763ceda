"""Calls: torch functions, tensor methods, nn.Module construction and application, and op semantics.

A mixin of ``Interpreter``.  What an op saves for backward comes from the generated
knowledge table (``gradguard.knowledge``); this file only knows torch's *API shapes*
(which callables are factories, which methods return Python numbers).
"""

from __future__ import annotations

import ast
import collections
from dataclasses import replace
from functools import reduce

from ..knowledge import OpInfo
from ..knowledge.names import (
    CONTIGUOUS_RESULTS,
    COPY_PROTOCOL,
    DISTRIBUTIONS_SAVING_LOGITS,
    FACTORIES,
    GRAPH_REBUILDING_FACTORIES,
    JOINING,
    NUMPY_ARRAY_MAKERS,
    MAYBE_VIEW_METHODS,
    MODULE_RETURNING_METHODS,
    NOT_TENSOR_METHODS,
    SAME_TENSOR_METHODS,
    TENSOR_METHOD_FACTORIES,
    TRAINING_MODE_METHODS,
)
from ..statements import is_dotted
from .classes import find_method
from .sharing import storages_in
from .events import CopyTrained, GradAsk, GradOffBackward, HookWrite, LoadedCopy, NumpyRefused, Sink, StaleUse
from .expressions import _const_key
from .state import SET_GRAD
from . import pickling
from .hooks import FORWARD_HOOK_REGISTRATIONS, FORWARD_HOOKS, GRADIENT_ARGUMENT, named_submodules
from .values import (
    INT,
    is_int,
    NOT_TENSOR,
    UNKNOWN,
    CallableRef,
    ClassRef,
    DataAlias,
    Derived,
    FunctionApply,
    FunctionContext,
    FunctionValue,
    Grad,
    HookHandle,
    KeywordArgs,
    LayerChoice,
    NumberFrom,
    PLAIN,
    Const,
    OptimizerValue,
    ParamGroups,
    ModuleValue,
    ModuleIterable,
    NameTemplate,
    ParamIterable,
    ParamsByName,
    PartialValue,
    Storage,
    Serialised,
    SuperRef,
    Tensor,
    TensorMap,
    TensorSeq,
    Value,
    graph_of,
    graph_tensor_behind,
    is_plain_data,
    join,
    truth,
    new_id,
    new_tensor,
)

# Methods of a list or dict that change what it holds: on an optimizer's parameter groups, what it steps.
GROUP_WRITING_METHODS = frozenset({"append", "extend", "insert", "update", "setdefault", "pop", "remove", "clear",
                                   "__setitem__"})

# Ops on stale values recorded per analysed function: the first ones are the ones a finding names.
MAX_STALE_USES = 64

# How often calls are followed or assumed harmless (the benchmark prints it).
CALL_STATS: collections.Counter[str] = collections.Counter()


# Every kind of owner ``_expr_Call`` tests a method call's owner for, in its chain of ``isinstance`` tests.
_OWNER_KINDS = (Tensor, DataAlias, NumberFrom, Derived, Const, ModuleValue, FunctionContext, Serialised, HookHandle,
                SuperRef, TensorSeq, TensorMap, OptimizerValue, ParamGroups, ClassRef)


class CallsMixin:
    def _expr_Call(self, node: ast.Call) -> Value:
        spread = self._spread_keywords(node)
        if spread is not None:
            try:
                return self._expr_Call(spread)
            finally:  # the caller's own evaluation of those keywords must not see these values
                for kw in spread.keywords:
                    self.presets.pop(id(kw.value), None)
        func = node.func
        if self._is_builtin_type(node):
            # `type(self)(...)`: an instance of one of the project's classes is of that class; any other value's
            # type stays an unknown call
            return self.type_of(node, self.eval(node.args[0]))
        callee: Value = UNKNOWN
        if isinstance(func, ast.Attribute):
            held = func.value
            if isinstance(held, ast.Attribute) and held.attr == "grad" and func.attr.endswith("_"):
                self.grads_written = True
            if isinstance(held, ast.Attribute) and held.attr == "__dict__":
                instance = self.eval(held.value)
                if isinstance(instance, ModuleValue):  # `self.__dict__.copy()`, `self.__dict__.update(state)`
                    return pickling.dict_method(self, instance, func.attr, node)
            owner = self.eval(held)
            if func.attr == "zero_grad" and (node.args or any(k.arg != "set_to_none" or not (
                    isinstance(k.value, ast.Constant) and k.value.value is True) for k in node.keywords)):
                self.zero_filled = True  # `zero_grad(set_to_none=False)`: gradients of zeros, which steps apply
            if func.attr == "zero_grad" and not isinstance(owner, (OptimizerValue, ModuleValue)):
                # of an object not known here: any gradients
                self.grad_clears.append((self._next(), None, node, self.frame_sites))
            if owner is UNKNOWN and func.attr == "backward":
                self.unknown_backward = True  # of a value not known: it may reach any parameter
            if isinstance(owner, CallableRef):  # the most common owner: an import (`torch.cat(...)`, `F.relu(...)`)
                callee = self.imported(f"{owner.qualname}.{func.attr}")
            elif isinstance(owner, _OWNER_KINDS):  # else none of the tests below holds (most often: unknown)
                if isinstance(owner, Tensor):
                    return self._tensor_method(owner, func.attr, node)
                if isinstance(owner, DataAlias):
                    return self._data_method(owner, func.attr, node)
                if isinstance(owner, NumberFrom) and func.attr == "backward":
                    self._eval_args(node)
                    self._number_backward(owner, node)
                    return UNKNOWN
                if isinstance(owner, NumberFrom) and owner.array_of is not None and func.attr in ARRAY_WRITING_METHODS:
                    self._eval_args(node)
                    self._array_write(node, owner, f"`.{func.attr}()` on the NumPy array")
                    return NOT_TENSOR
                if isinstance(owner, NumberFrom):  # `arr.mean()`, `vals.reshape(...)`: numbers read out of tensors
                    self._eval_args(node)
                    return NumberFrom(owner.sources, node, owner.markers)
                if isinstance(owner, Derived):
                    args = self._eval_args(node)
                    if func.attr == "backward":
                        self._backward(owner, node, bool(self._keyword_bool(node, "retain_graph", False)))
                        return UNKNOWN
                    if func.attr == "detach":  # a recurrent layer's state `c.detach()`: a tensor without its graph
                        return new_tensor(node, Grad.NO)
                    if func.attr == "detach_":
                        owner.graph, owner.requires_grad = frozenset(), Grad.NO
                        return owner
                    return self._unknown_call(node, [owner, *args])
                if isinstance(owner, Const) and isinstance(owner.value, tuple) and func.attr in LIST_MUTATORS:
                    # `names.append("3")`: the names are no longer the ones written out
                    self.forget_constant(func.value, node)
                if isinstance(owner, ModuleValue):
                    return self._instance_method(owner, func.attr, node)
                if isinstance(owner, FunctionContext):
                    return self.ctx_method(owner, func.attr, node)
                if isinstance(owner, Serialised):  # `buf.getvalue()`: the bytes, holding what was saved into it
                    self._eval_args(node)
                    return Serialised(owner.value, owner.node) if func.attr == "getvalue" else UNKNOWN
                if isinstance(owner, HookHandle):
                    self._eval_args(node)
                    if func.attr == "remove":
                        self.remove_hook(owner)
                    return UNKNOWN
                if isinstance(owner, SuperRef):
                    return self._super_method(owner, func.attr, node)
                if isinstance(owner, (TensorSeq, TensorMap)):
                    return self._container_method(owner, func.attr, node)
                if isinstance(owner, OptimizerValue):
                    args = self._eval_args(node)
                    if func.attr == "step":
                        self._optimizer_step(owner, node, ast.unparse(func.value))  # as the code names it
                    elif func.attr == "zero_grad":
                        self.grad_clears.append((self._next(), owner, node, self.frame_sites))
                    elif func.attr.startswith("register_"):
                        self.escaped.append(owner)  # a hook of its steps may clear or step gradients
                    elif func.attr == "add_param_group":
                        self.regrouped(owner, args)
                    return UNKNOWN
                if isinstance(owner, ParamGroups):
                    args = self._eval_args(node)
                    if func.attr in GROUP_WRITING_METHODS:
                        self.regrouped(owner.optimizer, args)  # `group["params"].append(p)`
                    return UNKNOWN
                if isinstance(owner, ClassRef) and owner.info.autograd_function and func.attr == "apply":
                    callee = FunctionApply(owner.info)
                elif isinstance(owner, ClassRef):
                    found = find_method(self.ctx.classes_for(owner.info), owner.info, func.attr)
                    callee = FunctionValue(found[0], owner=found[1]) if found else UNKNOWN
        else:
            callee = self.eval(func)
        q = self.qual(func) or (callee.qualname if isinstance(callee, CallableRef) else None)
        if q is not None and not isinstance(callee, (FunctionValue, ClassRef, ModuleValue, LayerChoice, PartialValue,
                                                     FunctionApply)):
            return self._named_call(q, node)
        return self._call_as_written(callee, node)

    def _call_as_written(self, callee: Value, node: ast.Call) -> Value:
        """``callee(...)`` called with the arguments ``node`` writes (a forwarding lambda: the callable it hands them
        on to, called there with them)."""
        args, kwargs = self._eval_call_args(node)
        forwarded = self._forwarded_to(callee, node) if isinstance(callee, FunctionValue) else None
        if forwarded is not None:
            return self._forwarded_call(forwarded, callee.node.body, args, kwargs, node)
        return self.call_value(callee, args, kwargs, node)

    def _copies_by_own_protocol(self, module: ModuleValue, seen: set[int] | None = None) -> bool:
        """Does one of the objects a deepcopy of ``module`` copies define how it is copied or pickled?"""
        seen = set() if seen is None else seen
        if id(module) in seen:
            return False
        seen.add(id(module))
        info = self.ctx.class_of(module)
        if info is not None and any(find_method(self.ctx.classes_for(info), info, name) is not None
                                    for name in COPY_PROTOCOL):
            return True
        return any(self._copies_by_own_protocol(v, seen)
                   for v in [*module.children, *module.attrs.values()] if isinstance(v, ModuleValue))

    def type_of(self, node: ast.Call, value: Value) -> Value:
        """``type(value)`` at ``node``: an instance of one of the project's classes is of that class; any other
        value's type stays an unknown call (``type(v) is T`` is decided apart, ``_exact_type_check``)."""
        info = self.ctx.class_of(value) if isinstance(value, ModuleValue) else None
        return ClassRef(info) if info is not None else self._unknown_call(node, [value])

    def _is_builtin_type(self, node: ast.Call) -> bool:
        """``type(x)`` of Python's ``type``: not imported, not bound by the code."""
        return (isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 1
                and not node.keywords and not isinstance(node.args[0], ast.Starred) and "type" not in self.ctx.imports
                and not any("type" in scope for scope in (self.state.env, *self.scopes)))

    def _spread_keywords(self, node: ast.Call) -> ast.Call | None:
        """``F.relu(t, **kwargs)`` inside a followed call: the same call with the caller's keywords written out.
        When the caller wrote ``inplace=True`` or ``out=`` it is placed at the caller's call (where the write's
        keyword, and so the fix, is); otherwise where it runs, which is the line torch reports for what it saves."""
        for kw in node.keywords:
            if kw.arg is None and isinstance(kw.value, ast.Name):
                spread = self.state.env.get(kw.value.id)
                if isinstance(spread, KeywordArgs):
                    others = [k for k in node.keywords if k is not kw]
                    call = ast.Call(func=node.func, args=node.args, keywords=[*others, *spread.keywords])
                    self.made_nodes.append(call)  # (memos keyed by a node's id must not see it reused)
                    for k in spread.keywords:
                        self.presets[id(k.value)] = spread.values[k.arg]
                    flagged = any(k.arg in ("inplace", "out") for k in spread.keywords)  # a write, fixed there
                    return ast.copy_location(call, spread.site if flagged else node)
        return None

    def _named_call(self, q: str, node: ast.Call, args: list[Value] | None = None,
                    kwargs: dict[str, Value] | None = None) -> Value:
        """A call of an imported callable, by its qualified name (``torch.sigmoid``, ``builtins.sum``)."""
        if q.startswith("torch."):
            return self._torch_call(q, node, args, kwargs)
        if args is None:
            args, kwargs = self._eval_call_args(node)
        if q.startswith("builtins."):
            return self._builtin_call(q[9:], node, args, kwargs or {})
        if q.split(".")[0] == "numpy":
            written = kwargs.get("out", args[0] if q == "numpy.copyto" and args else None)
            if isinstance(written, NumberFrom) and written.array_of is not None:
                self._array_write(node, written, f"`{q.replace('numpy.', 'np.')}(...)` into the NumPy array")
            self._numpy_refuses(q, node, args)
            numbers = [v for a in [*args, *kwargs.values()]
                       for v in (a.items if isinstance(a, TensorSeq) and a.base is None else (a,))
                       if isinstance(v, NumberFrom)]  # `np.mean(losses)` of a list of numbers read out of tensors
            if numbers:  # numpy on values read out of tensors: still values read out of tensors
                return NumberFrom(frozenset().union(*(n.sources for n in numbers)), node,
                                  frozenset().union(*(n.markers for n in numbers)))
            return NOT_TENSOR
        if q == "copy.deepcopy":
            if not args or not isinstance(args[0], ModuleValue):
                return UNKNOWN
            if self._copies_by_own_protocol(args[0]):
                # `__getstate__` and `__setstate__` of the file's own: followed; any other protocol is the class's
                return pickling.deepcopy_by_state(self, args[0], node)
            made = pickling.copy_module(args[0], node)
            for optimizer in pickling.copied_optimizers(made):
                self.optimizer_built(optimizer, node)
            self.copies.append(CopyTrained(node, args[0], made, self._next()))
            return made
        if q == "io.BytesIO":  # an empty buffer, or one over bytes a `torch.save` wrote
            if not args:
                return Serialised()
            return Serialised(args[0].value, args[0].node) if isinstance(args[0], Serialised) else UNKNOWN
        if q == "itertools.chain":
            owners = [a for a in args if isinstance(a, ParamIterable)]
            return ParamIterable(owners) if owners else UNKNOWN
        if q == "functools.partial" and args:
            return PartialValue(args[0], args[1:], kwargs)
        view = self.k.third_party_view(q)
        if view is not None and args and isinstance(args[0], Tensor):
            result = self._view(args[0], node)
            result.label = args[0].label
            return result
        return self._unknown_call(node, [*args, *kwargs.values()])

    def _numpy_refuses(self, q: str, node: ast.AST, args: list[Value]) -> None:
        """A top-level NumPy function converting a tensor that requires grad (one of a list or tuple it is given, or
        the one tensor an array maker is given): torch raises "Can't call numpy() on Tensor that requires grad"."""
        name = q[len("numpy."):]
        if "." in name or not isinstance(node, ast.Call) or not self.inline_record:
            return
        for arg, value in zip(node.args, args):
            if isinstance(value, Tensor) and name in NUMPY_ARRAY_MAKERS:
                tensors, in_list = [value], False
            elif isinstance(value, TensorSeq) and value.base is None and isinstance(arg, (ast.List, ast.Tuple, ast.ListComp, ast.Name)):
                tensors, in_list = [v for v in value.items if isinstance(v, Tensor)], True
            else:
                continue
            grad = next((t for t in tensors if t.requires_grad == Grad.YES), None)
            if grad is not None:
                every = in_list and all(isinstance(v, Tensor) for v in value.items)
                self.numpy_refused.append(NumpyRefused(node, q.replace("numpy.", "np."), grad.label, in_list, every))
                return

    def call_value(self, callee: Value, args: list[Value], kwargs: dict[str, Value], node: ast.AST) -> Value:
        """Call a value: a function, lambda or method of the file, a class, an instance, a partial, an import."""
        if self.copies:
            self._pairs_copy(args, kwargs, node)
        if isinstance(callee, FunctionValue):
            result = self.inline(callee.node, args, kwargs, node, self_value=callee.self_value, scope=callee.scope,
                                 owner=callee.owner, module_path=callee.module_path)
            if result is not None:
                return result
        elif isinstance(callee, ClassRef):
            return self.instantiate(callee.info, args, kwargs, node)
        elif isinstance(callee, ModuleValue):
            return self.call_instance(callee, args, kwargs, node)
        elif isinstance(callee, LayerChoice):
            return self._call_choice(callee, args, kwargs, node)
        elif isinstance(callee, PartialValue):
            return self.call_value(callee.func, [*callee.args, *args], {**callee.kwargs, **kwargs}, node)
        elif isinstance(callee, FunctionApply):
            return self.apply_function(callee.info, args, kwargs, node)
        elif isinstance(callee, CallableRef):
            return self._named_call(callee.qualname, node, args, kwargs)
        return self._unknown_call(node, [*args, *kwargs.values()])

    def _forwarded_to(self, callee: FunctionValue, node: ast.Call) -> str | None:
        """``lambda t, *a, **k: F.leaky_relu_(t, *a, **k)``: a lambda that hands all its parameters on, as they are
        and in their order, to an imported callable (a name its scope does not bind when it is called): that
        callable's qualified name.  A call of it is a call of that callable with the call's own arguments, as
        written there (``h = act(h, -0.5)`` is ``F.leaky_relu_(h, -0.5)``); ``node`` is that call."""
        fn, params = callee.node, callee.node.args
        body = fn.body if isinstance(fn, ast.Lambda) else None
        if not isinstance(body, ast.Call) or callee.self_value is not None or params.posonlyargs \
                or params.kwonlyargs or params.defaults or callee.module_path not in (None, self.ctx.path):
            return None
        names = [p.arg for p in params.args]
        if any(k.arg in names for k in node.keywords):
            return None  # `act(t=h)`: a parameter given by its own name, which the callable does not share
        written = [*names, *([] if params.vararg is None else [params.vararg.arg])]
        if len(body.args) != len(written) or any(
                not isinstance(a.value if starred else a, ast.Name) or (a.value if starred else a).id != name
                or isinstance(a, ast.Starred) != starred
                for a, name, starred in zip(body.args, written, [False] * len(names) + [True])):
            return None
        if [(k.arg, getattr(k.value, "id", None)) for k in body.keywords] != (
                [] if params.kwarg is None else [(None, params.kwarg.arg)]):
            return None
        root = body.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id not in self.ctx.imports or root.id in written \
                or root.id == getattr(params.kwarg, "arg", None) \
                or any(root.id in scope for scope in callee.scope or ()):
            return None  # a callee the code binds (its value when called may be another), not an import
        q = self.qual(body.func)
        return q if q is not None and isinstance(self.imported(q), CallableRef) else None  # (not the project's code)

    def _forwarded_call(self, q: str, body: ast.Call, args: list[Value], kwargs: dict[str, Value],
                        node: ast.AST) -> Value:
        """The forwarding lambda's callable ``q`` run at the lambda's call ``node`` with its arguments; what it saves
        for backward is saved where it runs, on the lambda's own line (the frame torch records the save in)."""
        outer, self.saves_at = self.saves_at, (node, body)
        try:
            return self._named_call(q, node, args, kwargs)
        finally:
            self.saves_at = outer

    def _call_choice(self, choice: LayerChoice, args: list[Value], kwargs: dict[str, Value], node: ast.AST) -> Value:
        """One of several layers called, not known which: the outputs of each joined.  Torch layers that write
        nothing in place only save, so each just runs; a layer of the file's code runs as a branch of an if/else
        would (in a construct it may not run in, not seeing the saves the others made)."""
        if all(layer.user_class is None for layer in choice.layers):
            return reduce(join, [self.call_module(layer, args, node) for layer in choice.layers])
        before, taken, results = self.saves.last_id, [], []
        live, written, paths = self.state.env, self.outer_writes.begin(), []
        self.unsure_branches += 1
        outer = self.unsure_context
        try:
            for layer in choice.layers:
                self.unsure_context = (*outer, object())
                results.append(self.call_instance(layer, args, kwargs, node))
                taken.extend(self.saves.take_after(before))
                paths.append(self.outer_writes.take(written, live))  # (each layer starts from the same names)
        finally:
            self.unsure_branches -= 1
            self.unsure_context = outer
        self.outer_writes.end(paths)
        self.saves.put_back(taken)
        return reduce(join, results)

    def _pairs_copy(self, args: list[Value], kwargs: dict[str, Value], node: ast.AST) -> None:
        """A call handed a deep copy of a module together with an optimizer that holds the original's parameters
        (``Trainer(model=copy, optimizer=opt)``): where the copy is paired with the original's optimizer."""
        given = [*args, *kwargs.values()]
        optimizers = [v for v in given if isinstance(v, OptimizerValue)]
        if not optimizers:
            return
        argument = _argument_of(node, args, kwargs)
        for made in self.copies:
            if any(v is made.copy for v in given):
                original = self.parameter_sources(made.original)
                made.paired.extend((node, o, argument(made.copy), argument(o)) for o in optimizers
                                   if o.held & original)

    def call_instance(self, instance: ModuleValue, args: list[Value], kwargs: dict[str, Value], node: ast.AST) -> Value:
        """``obj(x)``: a module runs its ``forward``; any other object of the file its ``__call__``."""
        info = self.ctx.class_of(instance)
        if info is not None and not info.is_module:
            found = find_method(self.ctx.classes_for(info), info, "__call__")
            return self._call_method(found, instance, args, kwargs, node)
        return self.call_module(instance, args, node, kwargs=kwargs)

    def _call_method(self, found, instance: ModuleValue, args: list[Value], kwargs: dict[str, Value],
                     node: ast.AST, max_depth: int = 5) -> Value:
        """A method found on the file's classes (``(method, class)`` or None), followed with ``self`` bound;
        unknown when there is none or it cannot be followed."""
        if found is not None:
            result = self.inline(found[0], args, kwargs, node, self_value=instance, owner=found[1], max_depth=max_depth)
            if result is not None:
                return result
        self.escaped.append(instance)  # what that method does with what the instance holds is not known
        return self._unknown_call(node, [*args, *kwargs.values()])

    def _instance_method(self, instance: ModuleValue, name: str, node: ast.Call) -> Value:
        """``obj.name(...)``: a submodule or callable held in an attribute, a method of the file's class, or
        one of nn.Module's own methods."""
        attr = instance.attrs.get(name)
        if isinstance(attr, (ModuleValue, LayerChoice, FunctionValue, PartialValue, CallableRef, ClassRef)):
            return self._call_as_written(attr, node)
        info = self.ctx.class_of(instance)
        patched = self.patched_method(info, name)
        if patched is not False:  # `cls.method = function`: the patch runs
            args, kwargs = self._eval_call_args(node)
            if name == "forward":
                return self.call_module(instance, args, node, kwargs=kwargs)
            return (self.call_value(patched, [instance, *args], kwargs, node) if patched is not None
                    else self._unknown_call(node, [*args, *kwargs.values()]))
        found = find_method(self.ctx.classes_for(info), info, name) if info is not None else None
        if found is not None:
            args, kwargs = self._eval_call_args(node)
            if name == "forward":
                return self.call_module(instance, args, node, kwargs=kwargs)
            if name in TRAINING_MODE_METHODS and self._is_nn_module(instance):
                instance.set_training(UNKNOWN)  # an override: which mode it leaves is known only where it sets it
            return self._call_method(found, instance, args, kwargs, node)
        if name == "zero_grad":
            self.grad_clears.append((self._next(), instance, node, self.frame_sites))
        elif info is not None and (not info.is_module or info.imported_bases or info.late_bases):
            self.escaped.append(instance)  # a method of a base the analysis does not see
        return self._module_method(instance, name, node)

    def _super_method(self, ref: SuperRef, name: str, node: ast.Call) -> Value:
        """``super().name(...)``: the next class's method; past the file's classes, the torch layer's own."""
        args, kwargs = self._eval_call_args(node)
        info = self.ctx.class_of(ref.self_value)
        found = find_method(self.ctx.classes_for(info), info, name, after=ref.owner) if info is not None else None
        if found is not None:
            return self._call_method(found, ref.self_value, args, kwargs, node, 8 if name == "__init__" else 3)
        if name == "forward" and ref.self_value.torch_module:
            return self.call_module(ref.self_value, args, node, torch_forward=True)
        if name == "__init__":
            if ref.self_value.torch_module and isinstance(node, ast.Call):
                self.construct_torch_base(ref.self_value, node, args)  # super().__init__(inplace=True)
            return NOT_TENSOR
        return self._unknown_call(node, [*args, *kwargs.values()])

    def forget_constant(self, holder: ast.expr, node: ast.Call) -> None:
        """A list of names changed in place: the name or attribute holding it no longer holds known names."""
        if isinstance(holder, ast.Name):
            for scope in (self.state.env, *self.scopes):
                if holder.id in scope:
                    scope[holder.id] = NOT_TENSOR
        elif isinstance(holder, ast.Attribute):
            owner = self.eval(holder.value)
            if isinstance(owner, ModuleValue):
                owner.attrs[holder.attr] = NOT_TENSOR

    def _container_method(self, owner: TensorSeq | TensorMap, name: str, node: ast.Call) -> Value:
        args = self._eval_args(node)
        if isinstance(owner, TensorMap):
            if name == "values":
                return TensorSeq(list(owner.items.values()), literal=owner.exact)
            if name == "items":
                return TensorSeq([TensorSeq([Const(k) if isinstance(k, str) else NOT_TENSOR, v], literal=True)
                                  for k, v in owner.items.items()], literal=owner.exact)
            if name in ("get", "pop") and node.args:
                key = _const_key(node.args[0])
                if key is None and isinstance(args[0], Const) and isinstance(args[0].value, str):
                    key = args[0].value  # `state.pop(key)` with the key known
                if name == "pop":
                    if key in owner.items:
                        return owner.items.pop(key)
                    owner.exact = False  # what it removed is not known
                return owner.element(key)
            if name in ("update", "setdefault") and args and isinstance(args[0], TensorMap):
                owner.items.update(args[0].items)
            return UNKNOWN
        if owner.counted is not None and not (name == "append" and owner.counted == self.unsure_context):
            owner.counted = None  # grown where it may not run, or changed some other way: count no longer known
        if name in ("append", "extend", "insert", "__iadd__"):
            owner.literal = owner.uniform = False  # grown: no longer exactly the items written out
        if self.watched_outputs and name in ("append", "insert", "add") and args:
            self.note_stored(args[-1], node)  # `features.append(output)` in a forward hook (see hooks.py)
        if name == "append" and args:
            owner.items.append(args[-1])
            if isinstance(args[-1], NumberFrom):  # the list these numbers went into (``GraphBreak.appended_to``)
                for cut in self.breaks:
                    if cut.marker in args[-1].markers:
                        cut.appended_to = owner
        elif name == "extend" and args and isinstance(args[0], TensorSeq):
            owner.items.extend(args[0].items)
        elif name == "insert" and len(args) > 1:
            owner.items.append(args[1])
        elif name == "pop" and owner.items:
            return owner.items[-1]
        return NOT_TENSOR

    def _unknown_call(self, node: ast.AST, inputs: list[Value]) -> Value:
        """A call we cannot see into: its tensor inputs escape, and its result carries their graph."""
        graphs = []
        for value in inputs:
            graphs.append(self._sink("escape", node, value))
            for item in (value.items if isinstance(value, TensorSeq) else list(value.items.values())
                         if isinstance(value, TensorMap) else (value,)):
                if isinstance(item, (ModuleValue, OptimizerValue, ParamIterable)):
                    self.escaped.append(item)  # it may step or clear their gradients there
        graph = frozenset().union(*graphs)
        if not graph and not any(isinstance(v, (Tensor, Derived)) for v in inputs):
            return UNKNOWN
        CALL_STATS["unknown callee given tensors"] += 1  # assumed harmless: it writes nothing we can see
        rg = self._grad(*inputs)
        if rg == Grad.NO and self.state.grad_enabled and any(
                isinstance(item, (ModuleValue, ParamIterable))
                for value in inputs for item in (value.items if isinstance(value, TensorSeq) else (value,))):
            rg = Grad.MAYBE  # handed a module (or parameters), the callee may run it
        result = Derived(graph, rg)
        return self.note_stale_use(node, inputs, result) if self.stale else result

    def _eval_call_args(self, node: ast.Call) -> tuple[list[Value], dict[str, Value]]:
        """Positional values (``*xs`` of a list we know spreads into its items) and keyword values."""
        args: list[Value] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                value = self.eval(a.value)
                if isinstance(value, TensorSeq) and value.base is None:
                    args.extend(value.items)
                else:
                    args.append(value)
            else:
                args.append(self.eval(a))
        kwargs: dict[str, Value] = {}
        for kw in node.keywords:
            value = self.eval(kw.value)
            if kw.arg:
                kwargs[kw.arg] = value
        return args, kwargs

    def _eval_args(self, node: ast.Call) -> list[Value]:
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        return args

    def _keywords_in_place(self, op: str, args: list[Value], kwargs: dict[str, Value], offset: int) -> list[Value]:
        """``torch.mul(input=a, other=b)``: tensors passed by keyword put where the op's schema has them, since
        what an op saves is known by position (torch's Python functions call ``self`` ``input``)."""
        info = self.k.op(op)
        if info is None or not info.params:
            return args
        placed = list(args)
        for key, value in kwargs.items():
            position = info.params.get(key, info.params.get("self") if key == "input" else None)
            if position is None or position - offset < len(args) or not isinstance(
                    value, (Tensor, Derived, TensorSeq, DataAlias)):  # `input=t.data` too: the op reads it as one
                continue
            while len(placed) <= position - offset:
                placed.append(UNKNOWN)
            placed[position - offset] = value
        return placed

    def _builtin_call(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name not in ("len", "range", "enumerate", "zip", "reversed", "list", "tuple", "super"):
            self.run_log.value_taken(args, node)  # `print(w)`, `float(w)`, `sum(ws)` take the values
        if name == "getattr" and args and isinstance(args[0], (OptimizerValue, ModuleValue)) and not (
                isinstance(args[0], ModuleValue) and len(args) >= 2 and isinstance(args[1], Const)
                and args[1].value != "zero_grad"):
            self.escaped.append(args[0])  # a method looked up by name: it may clear or step its gradients
        if name == "getattr" and len(args) >= 2 and isinstance(args[1], Const) and isinstance(args[1].value, str):
            # `getattr(nn, cfg["type"])` with the name known: that attribute, as if written out
            owner, attr = args[0], args[1].value
            if isinstance(owner, CallableRef):
                return CallableRef(f"{owner.qualname}.{attr}")
            if isinstance(owner, ModuleValue):
                return self._module_attr(owner, attr, node)
            return UNKNOWN
        if name == "getattr" and len(args) >= 2 and isinstance(args[0], ModuleValue) \
                and isinstance(args[1], NameTemplate):  # `getattr(self.rnn, f"weight_hh_l{i}")`
            return self.parameter_named(args[0], args[1], node)
        if name == "setattr" and len(args) == 3 and isinstance(args[0], ModuleValue) and isinstance(args[1], Const) \
                and isinstance(args[1].value, str) and args[1].value.isdigit() and isinstance(args[2], ModuleValue) \
                and args[0].user_class is None and args[0].cls in ("Sequential", "ModuleList") \
                and int(args[1].value) < len(args[0].children):
            # `setattr(seq, "0", layer)` (the name `named_children()` gives a Sequential's first layer): that layer
            self.replace_child(args[0], int(args[1].value), args[2], node)
            return NOT_TENSOR
        if name == "setattr" and len(args) == 3 and isinstance(args[0], ModuleValue) and isinstance(args[1], Const) \
                and isinstance(args[1].value, str) and args[1].value.isidentifier():
            # `setattr(model, name, nn.Linear(...))` with the name known: that attribute written, as if written out
            target = ast.copy_location(ast.Attribute(value=node.args[0], attr=args[1].value, ctx=ast.Store()), node)
            self.store_module_attr(args[0], target, args[2], node)
            return NOT_TENSOR
        if name == "setattr":
            return self._unknown_call(node, [*args, *kwargs.values()])  # an object or a name not known: as before
        if name == "isinstance" and len(args) == 2:
            return self._isinstance(args[0], args[1], node.args[1])
        if name in ("all", "any") and len(node.args) == 1 and not node.keywords:
            return self._each_known(node.args[0], name == "all")
        if name == "dict" and not args and kwargs:  # `dict(type="ReLU", inplace=True)`: a config by keyword
            return TensorMap(dict(kwargs))
        if name == "dict" and len(args) == 1 and isinstance(args[0], ParamIterable) and args[0].named \
                and isinstance(args[0].owner, ModuleValue):  # `dict(rnn.named_parameters())`: looked up by name
            return ParamsByName(args[0].owner)
        if name == "dict" and len(args) == 1 and isinstance(args[0], ModuleIterable) and args[0].named:
            # `dict(model.named_modules())`: the submodules by the names torch gives them
            named = named_submodules(args[0].owner, args[0].recursive, self._is_nn_module) \
                if isinstance(args[0].owner, ModuleValue) else None
            return TensorMap(dict(named)) if named is not None else UNKNOWN
        if name == "super":
            return SuperRef(self.self_value, self.owner) if isinstance(self.self_value, ModuleValue) else UNKNOWN
        if name == "sum" and args and isinstance(args[0], TensorSeq):
            items = args[0].items
            if items and all(isinstance(i, NumberFrom) for i in items):
                return NumberFrom(frozenset().union(*(i.sources for i in items)), node,
                                  frozenset().union(*(i.markers for i in items)))
            if any(isinstance(i, (Tensor, Derived)) for i in items):
                terms = [i for i in items if isinstance(i, (Tensor, Derived))]
                return self.summed(self.apply_op("add", terms, node, "sum()"), terms)
        if name in ("sum", "min", "max", "abs", "round") and args and isinstance(args[0], NumberFrom):
            return args[0]
        if name == "sum" and len(args) == 1 and isinstance(args[0], Tensor) and not args[0].assumed:
            # `sum(scores)` over a tensor: Python adds its rows (`0 + scores[0] + scores[1] + ...`), a tensor with
            # the graph of `scores` (none of those ops saves a tensor); its shape is a row's, so not `scores.sum()`
            row = self._iter_element(args[0], node.args[0])
            return self.apply_op("add", [row, row], node, "sum()") if isinstance(row, Tensor) else UNKNOWN
        if name in ("float", "int") and args and isinstance(args[0], (Tensor, NumberFrom)):
            return self._number_from(args[0], node, f"`{name}()`")  # float(loss): the value leaves the graph
        if name in ("len", "int", "range"):
            return INT if name != "range" else NOT_TENSOR
        if name == "float":
            return NOT_TENSOR
        if name == "enumerate" and args:  # yields (index, element) pairs
            element = self._iter_element(args[0], node.args[0])
            return UNKNOWN if element is UNKNOWN else TensorSeq([TensorSeq([INT, element])])
        if name in ("reversed", "list", "tuple") and args and isinstance(args[0], TensorSeq) \
                and args[0].display not in (None, name):
            # the same items (as below), but `type()` of them is the call's: `tuple([a, b])` is a tuple
            return replace(args[0], display=name if name != "reversed" else None)
        if name == "reversed" and args:
            return args[0] if isinstance(args[0], TensorSeq) else UNKNOWN
        if name in ("list", "tuple") and args and isinstance(args[0], (TensorSeq, ParamIterable, ModuleIterable)):
            return args[0]
        if name == "zip":  # yields tuples
            items = [self._iter_element(a, n) for a, n in zip(args, node.args)]
            # `zip(self.heads, targets)`: a head of alike layers (see ``_iter_element``) is worth keeping too
            return TensorSeq([TensorSeq(items)]) if any(isinstance(i, (Tensor, ModuleValue)) for i in items) else UNKNOWN
        if name == "print":
            return NOT_TENSOR
        return UNKNOWN

    # ---------------------------------------------------------- torch calls
    def _torch_call(self, q: str, node: ast.Call, args: list[Value] | None = None,
                    kwargs: dict[str, Value] | None = None) -> Value:
        parts = q.split(".")
        name = parts[-1]
        if args is None:
            args, kwargs = self._eval_call_args(node)
        kwargs = kwargs or {}
        args = self._keywords_in_place(name, args, kwargs, offset=0)
        functional = q.startswith("torch.nn.functional.")
        if q == "torch.save" and len(args) > 1 and isinstance(args[1], Serialised):
            args[1].value, args[1].node = args[0], node
            return NOT_TENSOR
        if q == "torch.load" and args and isinstance(args[0], Serialised) and args[0].value is not None:
            return pickling.load(self, args[0], node)
        path = args[1] if q == "torch.save" and len(args) > 1 else args[0] if q == "torch.load" and args else None
        if isinstance(path, Const) and isinstance(path.value, str):
            # A file this run wrote, on a path known to run: its load is a deep copy of what was saved there.
            if q == "torch.save":
                self.saved_files[path.value] = None if self.unsure_branches else Serialised(args[0], node)
            elif self.saved_files.get(path.value) is not None and pickling.copyable(self.saved_files[path.value].value):
                return pickling.load(self, self.saved_files[path.value], node)
        if q in self.k.module_wrappers and args and isinstance(args[0], ModuleValue):
            return args[0]  # `weight_norm(nn.Linear(...))` is that same Linear
        if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            rg = self._keyword_bool(node, "requires_grad", True)
            made = new_tensor(node, Grad.YES if rg else Grad.NO, leaf=True, param=True, label="a parameter")
            made.dtype = args[0].dtype if args and isinstance(args[0], Tensor) else None
            return made
        if q in ("torch.autograd.Variable", "torch.autograd.variable.Variable") and args:
            # The legacy wrapper: a new leaf over the same memory (a detach), requiring grad when asked to.
            rg = self._keyword_bool(node, "requires_grad", False)
            source = args[0]
            storage = source.storage if isinstance(source, Tensor) else Storage()
            result = new_tensor(node, Grad.MAYBE if rg is None else Grad.YES if rg else Grad.NO, leaf=True)
            result.storage = storage
            # Values already cut from their graph (`Variable(torch.tensor(float(loss)))`) stay cut ones.
            result.graph |= graph_of(source) & {b.marker for b in self.breaks}
            return result
        if len(parts) == 3 and parts[1] == "nn" and name[:1].isupper():
            return self._construct_module(name, node, args)
        if q.startswith("torch.optim.") and name[:1].isupper() and "lr_scheduler" not in q:
            params = args[0] if args else kwargs.get("params", UNKNOWN)
            return self.optimizer_built(OptimizerValue(_param_owners(params), ctor=node), node)
        if ((name in GRAPH_REBUILDING_FACTORIES or name in self.k.tensor_constructors) and len(parts) == 2
                and (args or "data" in kwargs)):
            rg = self._keyword_bool(node, "requires_grad", False)
            source = args[0] if args else kwargs["data"]
            if name in ("as_tensor", "asarray") and isinstance(source, Tensor) and "copy" not in kwargs:
                # Given a tensor they return it (or its `.to(dtype, device)`), graph and all; torch.tensor copies.
                if len(args) == 1 and not kwargs:
                    return source
                return Tensor(Storage(), self._grad(source), leaf=not self._grad(source), graph=source.graph,
                              origin=node, label=source.label, lost_sources=source.lost_sources)
            result = self._graph_break(node, f"`torch.{name}(...)`", [source],
                                       Grad.MAYBE if rg is None else Grad.YES if rg else Grad.NO)
            if name == "from_numpy" and node.args and isinstance(node.args[0], ast.Name):
                # The array and the tensor share memory from now on: an in-place write to one changes the other.
                self.bind(node.args[0], NumberFrom(getattr(source, "sources", frozenset()), node,
                                                   getattr(source, "markers", frozenset()), array_of=result), node)
            return result
        if q.startswith("torch.distributions.") and name in DISTRIBUTIONS_SAVING_LOGITS:
            logits = kwargs.get("logits")
            inputs = [*args, *kwargs.values()]
            if isinstance(logits, Tensor):
                inputs.append(self.apply_op("logsumexp", [logits], node, f"torch.distributions.{name}(logits=...)"))
            return self._unknown_call(node, inputs)
        if q == "torch.compile" and args and isinstance(args[0], ModuleValue) and not args[0].torch_module:
            return replace(args[0], compiled=node)  # the same parameters and state, its forward compiled
        if q == "torch.is_tensor" and len(args) == 1:  # known for a tensor, and for numbers read out of one
            if isinstance(args[0], Tensor):
                return Const(True)
            return Const(False) if isinstance(args[0], NumberFrom) or is_plain_data(args[0]) else UNKNOWN
        if q in SET_GRAD:
            # `torch.set_grad_enabled(False)` called (not only entered: its constructor sets the mode): grad mode
            # is that flag from here on, in this frame
            flag = args[0] if args else kwargs.get("mode")
            if isinstance(flag, Const) and isinstance(flag.value, bool):
                self.state.grad_enabled = flag.value
                if not flag.value:
                    self.grad_off_site = (node, None)
            return UNKNOWN
        if q in ("torch.autograd.backward", "torch.autograd.grad"):
            target = args[0] if args else kwargs.get("outputs", kwargs.get("tensors", UNKNOWN))
            position = 2 if q == "torch.autograd.grad" else 1  # of `grad_outputs` / `grad_tensors`
            given = args[position] if len(args) > position else kwargs.get("grad_outputs", kwargs.get("grad_tensors"))
            if isinstance(given, (Tensor, TensorSeq)) and self.gradient_writes:  # the caller's gradient tensors
                self.gradient_shared(target.items if isinstance(target, TensorSeq) else [target])
            self._backward(target, node, self._keyword_bool(node, "retain_graph", False)
                           or self._keyword_bool(node, "create_graph", False), q == "torch.autograd.backward")
            if q == "torch.autograd.grad":
                inputs = args[1] if len(args) > 1 else kwargs.get("inputs", UNKNOWN)
                for t in (inputs.items if isinstance(inputs, TensorSeq) else [inputs]):
                    if isinstance(t, Tensor):
                        self.asks.append(GradAsk("autograd.grad", node, t.storage.id, self._next()))
            return UNKNOWN
        if name in FACTORIES and len(parts) == 2:
            dtype = self.factory_dtype(name, node, args)
            rg = False if self._integral_dtype(node) or self.k.is_integral(dtype) else \
                self._keyword_bool(node, "requires_grad", False)
            made = new_tensor(node, Grad.MAYBE if rg is None else Grad.YES if rg else Grad.NO, leaf=True)
            made.dtype = dtype
            return self.made_in_inference_mode(made, node)
        out = kwargs.get("out")
        if isinstance(out, Tensor):  # out= ops are not differentiable: a plain write, nothing saved
            self._inplace(node, out, f"`out=` of `{q}`", None, [], out_inputs=_out_inputs(args, kwargs))
            return out
        if q.startswith("torch.nn.init.") and name.endswith("_"):
            # nn.init functions write under torch.no_grad(): allowed on leaves, but the version still moves.
            if args and isinstance(args[0], Tensor):
                grad_mode, self.state.grad_enabled = self.state.grad_enabled, False
                self._inplace(node, args[0], f"`nn.init.{name}()`", None, [])
                self.state.grad_enabled = grad_mode
            return UNKNOWN
        if functional and "dropout" in name and self._keyword_bool(node, "training", True) is False:
            return args[0] if args else UNKNOWN  # dropout with training=False is the identity (no write)
        if functional and self._keyword_bool(node, "inplace", False):
            if args and isinstance(args[0], Tensor):
                return self._inplace(node, args[0], f"`F.{name}(..., inplace=True)`", name, args[1:],
                                     functional_inplace=True)
            return UNKNOWN
        if name.endswith("_") and not name.endswith("__") and self.k.is_inplace(name):
            if args and isinstance(args[0], Tensor):
                twin = self.k.inplace_twin(name)
                label = f"`F.{name}()`" if functional else f"`torch.{name}()`"
                return self._inplace(node, args[0], label, twin, args[1:], functional_inplace=functional)
            return UNKNOWN
        if not any(isinstance(a, (Tensor, TensorSeq, Derived)) for a in args) and not any(
                isinstance(v, Tensor) for v in kwargs.values()):
            return UNKNOWN
        if name in JOINING and args and isinstance(args[0], TensorSeq):
            items = [i for i in args[0].items if isinstance(i, Tensor)]
            return self.apply_op(name, items, node, f"torch.{name}")
        label = f"F.{name}" if functional else f"torch.{name}"
        if self.k.op(name) is None:  # `F.cross_entropy(input=logits, target=y)`: its result carries their graphs
            args = [*args, *(v for v in kwargs.values() if isinstance(v, (Tensor, Derived, TensorSeq)))]
        return self.apply_op(name, args, node, label)

    def _flag(self, expr: ast.expr) -> bool | None:
        """A flag's value: a literal, or a name or attribute holding a known constant (``inplace=inplace`` with
        the argument known, ``self.detach``); None when computed at run time."""
        if isinstance(expr, ast.Constant):
            return bool(expr.value)
        if isinstance(expr, (ast.Name, ast.Attribute)) or (  # reading these records nothing
                isinstance(expr, ast.Subscript) and isinstance(expr.value, (ast.Name, ast.Attribute))
                and isinstance(expr.slice, ast.Constant)):  # `cfg["inplace"]`
            return truth(self.eval(expr))
        return None

    def _keyword_bool(self, node: ast.Call, name: str, default: bool) -> bool | None:
        """The flag passed as keyword ``name``; ``default`` when absent, None when not known (callers choose
        the cautious reading)."""
        for kw in node.keywords:
            if kw.arg == name:
                return self._flag(kw.value)
        return default

    def _positional_or_keyword_bool(self, node: ast.Call, index: int, name: str, default: bool) -> bool | None:
        if len(node.args) > index:
            value = self._flag(node.args[index])
            return default if value is None else value
        return self._keyword_bool(node, name, default)

    def _isinstance(self, value: Value, classes: Value, named: ast.expr) -> Value:
        """``isinstance(m, nn.ReLU)`` (or a tuple of torch layer classes) for a torch layer we built: known from
        the layer's torch classes (an ``nn.ReLU6`` is an ``nn.Hardtanh``); true for a tensor asked about
        ``torch.Tensor`` (as ``torch.is_tensor``) and for a display of values asked about both ``list`` and
        ``tuple``; unknown for anything else (a false answer is never guessed)."""
        refs = classes.items if isinstance(classes, TensorSeq) else [classes]
        qualnames = {self.qual(n) for n in (named.elts if isinstance(named, ast.Tuple) else [named])}
        if isinstance(value, Tensor) and "torch.Tensor" in qualnames:
            return Const(True)
        if isinstance(value, TensorSeq) and value.literal and value.base is None and not value.maybe_none \
                and {"builtins.list", "builtins.tuple"} <= qualnames:
            return Const(True)
        names = [r.qualname.rsplit(".", 1)[1] for r in refs
                 if isinstance(r, CallableRef) and r.qualname.startswith("torch.nn.") and r.qualname.count(".") == 2]
        if not isinstance(value, ModuleValue) or not refs or len(names) != len(refs) or "Module" in names:
            return NOT_TENSOR
        if not value.torch_module:  # one of the file's classes on nn.Module alone: no torch layer class
            info = self.ctx.class_of(value)
            return Const(False) if info is not None and info.torch_base == "Module" else NOT_TENSOR
        layer = self.k.module(value.cls)  # a torch layer, or a class of the file deriving from one
        if layer is None or not layer.bases:
            return NOT_TENSOR
        return Const(any(name in layer.bases for name in names))

    def _each_known(self, arg: ast.expr, every: bool) -> Value:
        """``all(isinstance(d, torch.Tensor) for d in data)`` (or ``any``) over a display whose items are known:
        the condition evaluated with each item in turn, known when it is known for each (a guard that routes a
        tuple of tensors to ``torch.stack`` then decides its branch); unknown otherwise."""
        if not isinstance(arg, (ast.GeneratorExp, ast.ListComp)) or len(arg.generators) != 1:
            return UNKNOWN
        gen = arg.generators[0]
        if gen.ifs or gen.is_async or not isinstance(gen.iter, ast.Name):
            return UNKNOWN
        iterable = self.state.env.get(gen.iter.id)
        if not (isinstance(iterable, TensorSeq) and iterable.literal and iterable.base is None
                and not iterable.maybe_none and iterable.items):
            return UNKNOWN
        answers = []
        for item in iterable.items:
            saved = self.state.copy()
            self.bind(gen.target, item, arg)
            answers.append(truth(self.eval(arg.elt)))
            self.state = saved
        if None in answers:
            return UNKNOWN
        return Const(all(answers) if every else any(answers))

    def _layer_dtype(self, module: ModuleValue, info, x: Tensor) -> str | None:
        """The dtype of a torch layer's output: its parameters' for a layer that has them (given an input of a
        known dtype), its input's for one whose functional form keeps it (``nn.ReLU``, ``nn.Dropout``)."""
        if info is None or x.dtype is None or info.returns != "tensor":
            return None
        if info.has_params:
            return module.dtype if module.dtype is not None and (
                x.dtype == module.dtype or self.k.is_integral(x.dtype)) else None
        keeps = self.k.keeps_float if x.dtype in self.k.floating_dtypes else self.k.keeps_int
        return x.dtype if info.functional in keeps else None

    def _integral_dtype(self, node: ast.Call) -> bool:
        """Does the call name an integer or bool dtype (``torch.long``, ``dtype=torch.bool``)?"""
        for arg in [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]:
            q = self.qual(arg) if isinstance(arg, (ast.Attribute, ast.Name)) else None
            if q and q.startswith("torch.") and q[len("torch."):] in self.k.integral_dtypes:
                return True
        return False

    def opaque_marker(self, node: ast.AST) -> int:
        """The marker of an op at ``node`` that took an unknown value (one per op: a loop reuses it)."""
        marker = self.opaque_at.get(id(node))
        if marker is None:
            marker = self.opaque_at[id(node)] = new_id()
            self.opaque_markers.add(marker)
        return marker

    def _backward(self, target: Value, node: ast.AST, retain: bool, accumulates: bool = True) -> None:
        graph = graph_of(target)
        if target is UNKNOWN:
            self.unknown_backward = True
        if isinstance(target, Tensor) and target.requires_grad == Grad.NO and not self.function_contexts:
            # The last op that ran with grad mode off: the loss itself, or the value it was computed from.
            marker = max((m for m in target.graph if m in self.grad_off_ops), default=None)
            # An op on the way from that value to the loss that took a value not known (`returns - values`): it
            # may be a tensor that requires grad, and then so does the loss, which torch differentiates.
            if marker is not None and not (target.graph & self.opaque_markers) - self.grad_off_opaque[marker]:
                op, place, switch = self.grad_off_ops[marker]
                self.grad_off_backwards.append(GradOffBackward(node, place, op, switch, target.label))
        self.sinks.append(Sink("backward", node, graph, self._next(),
                               target.terms if isinstance(target, Tensor) else (), new_id(), self.frame_sites,
                               accumulates and not any(k.arg == "inputs" for k in getattr(node, "keywords", ()))))
        if isinstance(target, Tensor) and target.dead_terms and target.requires_grad != Grad.NO:
            for cut in self.breaks:
                if cut.cut and cut.marker in target.dead_terms and cut.dead_in is None:
                    cut.dead_in = node
            self.dead_grad_off_terms(target.dead_terms, node)
        if not retain:
            for save in self.saves:
                if save.id in graph:
                    save.consumed = True

    def construct_torch_base(self, instance: ModuleValue, node: ast.Call, args: list[Value]) -> None:
        """What torch's constructor of a subclass's torch base sets (``inplace``, a Sequential's children)."""
        base = self._construct_module(instance.cls, node, args)
        if not isinstance(base, ModuleValue):  # a ParameterList's parameters: not modelled for a subclass
            return
        instance.inplace = instance.inplace or base.inplace
        instance.dtype = base.dtype
        instance.children = instance.children or base.children
        if instance.ctor is None or base.inplace:
            instance.ctor = node if instance.ctor is None else instance.ctor

    def _construct_module(self, cls: str, node: ast.Call, args: list[Value]) -> Value:
        inplace = bool(self._keyword_bool(node, "inplace", False))
        if not inplace and cls in self.k.inplace_kwarg_modules:
            # nn.ReLU(True), nn.LeakyReLU(0.1, True): inplace may be positional.
            for arg in node.args:  # only `True` itself: `0.1` is a slope, not a flag
                if (arg.value is True if isinstance(arg, ast.Constant) else
                        isinstance(arg, (ast.Name, ast.Attribute)) and self.eval(arg) == Const(True)):
                    inplace = True
        if inplace and "Dropout" in cls:  # nn.Dropout(0.0, inplace=True) never writes
            p = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "p"), None)
            if isinstance(p, ast.Constant) and p.value == 0:
                inplace = False
        given, dtype = self.keyword_dtype(node)
        module = ModuleValue(cls, torch_module=True, inplace=inplace, ctor=node,
                             dtype=dtype if given else self.default_dtype())
        if cls == "Embedding":  # max_norm: the 4th parameter; None (the default) does not renormalise
            max_norm = node.args[3] if len(node.args) > 3 else next(
                (k.value for k in node.keywords if k.arg == "max_norm"), None)
            module.renorms_weight = max_norm is not None and not (
                isinstance(max_norm, ast.Constant) and max_norm.value is None)
        if cls in ("Sequential",) and any(isinstance(a, ModuleValue) for a in args):
            # A layer we cannot see (a wrapper we do not know) still runs in its place: what follows it gets an
            # input we know nothing about, never the previous layer's output.
            module.children = [a if isinstance(a, ModuleValue) else ModuleValue("<unknown>", torch_module=False)
                               for a in args]
        if cls == "ParameterList" and args and isinstance(args[0], TensorSeq) and args[0].base is None:
            # `nn.ParameterList(nn.Parameter(...) for ...)`: iterating or indexing it gives those parameters
            return TensorSeq([a for a in args[0].items if isinstance(a, Tensor)])
        if cls == "ModuleList" and args and isinstance(args[0], TensorSeq) and args[0].base is None and args[0].items \
                and all(isinstance(a, TensorSeq) and a.base is None for a in args[0].items):
            # `nn.ModuleList(nn.ParameterList(...) for ...)`: a list of those lists of parameters
            return TensorSeq(list(args[0].items), literal=args[0].literal, uniform=args[0].uniform)
        if cls in ("ModuleList",) and args and isinstance(args[0], TensorSeq):
            module.children = [a for a in args[0].items if isinstance(a, ModuleValue)]
            module.each = args[0].uniform and len(module.children) == 1
        if cls in ("ModuleDict",) and args and isinstance(args[0], TensorMap):
            module.attrs = {k: v for k, v in args[0].items.items() if isinstance(k, str) and isinstance(v, ModuleValue)}
            module.children = list(module.attrs.values())
        return module

    # --------------------------------------------------------- method calls
    def _tensor_method(self, tensor: Tensor, name: str, node: ast.Call) -> Value:
        self.discarded_update(tensor, name, node, through_data=False)
        positional, kwargs = self._eval_call_args(node)
        args = self._keywords_in_place(name.rstrip("_") if name.endswith("_") and not name.endswith("__") else name,
                                       [tensor, *positional], kwargs, offset=0)
        if name == "backward":
            if (positional or "gradient" in kwargs) and self.gradient_writes:  # `out.backward(g)`: the caller's g
                self.gradient_shared([tensor])
            self._backward(tensor, node, self._keyword_bool(node, "retain_graph", False)
                           or self._keyword_bool(node, "create_graph", False))
            return UNKNOWN
        if name in ("retain_grad", "register_hook"):
            self.asks.append(GradAsk(name, node, tensor.storage.id, self._next()))
            if name == "register_hook":
                self._gradient_hook(positional[0] if positional else UNKNOWN, name, node)
            return UNKNOWN
        if name == "detach":
            self.note_detach(tensor, node)
            detached = self._cut(node, tensor, "`.detach()`")
            detached.detached_from = graph_tensor_behind(tensor)  # shares the memory and the version counter
            return detached
        if name == "detach_":
            return self.detach_in_place(tensor, node)
        if name == "numpy":
            return self._numpy_view(tensor, node)
        if name in ("item", "tolist"):
            return self._number_from(tensor, node, f"`.{name}()`")
        if name == "new_tensor" and len(args) > 1:
            rg = self._keyword_bool(node, "requires_grad", False)
            return self._graph_break(node, "`.new_tensor(...)`", [args[1]], Grad.YES if rg else Grad.NO)
        if name == "requires_grad_":
            flag = self._positional_or_keyword_bool(node, 0, "requires_grad", True)
            if flag and tensor.requires_grad == Grad.NO:  # a rebound name is a leaf that gets gradients again
                tensor.graph = tensor.graph - self.rebind_markers | {new_id()}
            given = self._flag(node.args[0]) if node.args else self._keyword_bool(node, "requires_grad", True)
            self.set_flag(tensor, bool(flag), node, known=given is not None)
            return tensor
        if name == "clone":
            return Tensor(Storage(), self._grad(tensor), leaf=not self._grad(tensor), graph=tensor.graph, origin=node,
                          lost_sources=tensor.lost_sources, dtype=tensor.dtype)
        if self.same_dtype_conversion(tensor, name, node, positional, kwargs):
            self.noop_conversions[id(node)] = tensor.dtype
            return tensor  # `x.float()` of a float32 `x`: torch returns `x` itself, no copy
        converted = self.conversion_dtype(tensor, name, node)
        if name in self.k.integral_results or (name in ("to", "type") and self._integral_dtype(node)) \
                or self.k.is_integral(converted):
            # `.long()`, `.argmax()`, `.to(torch.long)`: an integer or bool tensor, which never requires grad
            return Tensor(Storage(), Grad.NO, leaf=True, origin=node, label=tensor.label,
                          dtype=converted or self.k.fixed_dtypes.get(name))
        if name in NOT_TENSOR_METHODS and not (name == "type" and node.args):
            return NOT_TENSOR
        if name in TENSOR_METHOD_FACTORIES:
            return new_tensor(node, Grad.YES if self._keyword_bool(node, "requires_grad", False) else Grad.NO)
        if name in SAME_TENSOR_METHODS:
            return Tensor(Storage(), self._grad(tensor), leaf=not self._grad(tensor), graph=tensor.graph,
                          origin=node, label=tensor.label, lost_sources=tensor.lost_sources, dtype=converted)
        if name.endswith("_") and not name.endswith("__") and self.k.is_inplace(name):
            twin = self.k.inplace_twin(name)
            return self._inplace(node, tensor, f"`.{name}()`", twin, args[1:])
        out = kwargs.get("out")
        if isinstance(out, Tensor):
            self._inplace(node, out, f"`out=` of `.{name}()`", None, [],
                          out_inputs=_out_inputs(args, kwargs))
            return out
        info = self.k.op(name)
        if info is None:
            return UNKNOWN
        return self.apply_op(name, args, node, f".{name}()")

    def _data_method(self, alias: DataAlias, name: str, node: ast.Call) -> Value:
        self.discarded_update(alias.tensor, name, node, through_data=True)
        if name.endswith("_") and self.k.is_inplace(name):
            values = [self.eval(a) for a in node.args]
            self._data_write(node, alias, f"`.data.{name}()`", values)
            return UNKNOWN
        # `t.data.pow(2)`, `t.data.clone()`: a read of the values without their graph, as `t.detach()` gives
        return self._tensor_method(self.read_data(alias, node.func), name, node)

    def _module_method(self, module: ModuleValue, name: str, node: ast.Call) -> Value:
        args = [self.eval(a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        if name in ("parameters",):
            return ParamIterable(module)
        if name == "named_parameters":
            return ParamIterable(module, named=True)
        if name in ("modules", "children", "named_modules", "named_children"):
            return ModuleIterable(module, named=name.startswith("named_"), recursive=name.endswith("modules"))
        if name in ("register_buffer", "register_parameter") and len(args) > 1:
            key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(args[1], Tensor):
                module.attrs[key.value] = args[1]  # `self.bank` is this tensor from now on
            return NOT_TENSOR
        if name == "forward":
            return self.call_module(module, args, node)
        if name == "load_state_dict":
            self._loaded_copy(module, node)
        if name == "compile" and not module.torch_module and not self.unsure_branches:
            module.compiled = node  # `Module.compile()`: its calls run the compiled forward from now on
            return NOT_TENSOR
        if name in GRADIENT_ARGUMENT:
            self._gradient_hook(args[0] if args else UNKNOWN, name, node)
        if name in FORWARD_HOOK_REGISTRATIONS:
            return self.register_forward_hook(module, args[0] if args else UNKNOWN, node)
        if name in self.k.backward_hook_registrations:
            return self.register_backward_hook(module, node)
        if name in GRADIENT_ARGUMENT:
            return UNKNOWN
        if name == "requires_grad_":
            flag = self._positional_or_keyword_bool(node, 0, "requires_grad", True)
            module.freeze(flag is False)
            for p in self._param_tensors(module):  # remembered as each parameter's flag write
                self.set_flag(p, p.requires_grad == Grad.YES, node, known=flag is not None)
        if name in TRAINING_MODE_METHODS and self._is_nn_module(module):
            mode = False if name == "eval" else (
                self._flag(node.args[0]) if node.args else self._keyword_bool(node, "mode", True))
            module.set_training(Const(mode) if mode is not None and not self.unsure_branches else UNKNOWN)
        if name in MODULE_RETURNING_METHODS:
            return module
        return UNKNOWN

    def _loaded_copy(self, module: ModuleValue, node: ast.Call) -> None:
        """``target.load_state_dict(source.state_dict())`` of another module, on a path known to run: a copy of its
        weights (see ``LoadedCopy``)."""
        state = node.args[0] if len(node.args) == 1 and not node.keywords else None
        if not (isinstance(state, ast.Call) and isinstance(state.func, ast.Attribute) and state.func.attr == "state_dict"
                and not state.args and not state.keywords and is_dotted(state.func.value)) or self.unsure_branches:
            return
        source = self.eval(state.func.value)
        if isinstance(source, ModuleValue) and source is not module:
            self.loads.append(LoadedCopy(node, module, source, self._next()))

    def _gradient_hook(self, hook: Value, register: str, node: ast.Call) -> None:
        """A hook torch will call with a gradient: run it (grad mode off, as backward runs hooks) on a stand-in
        for that gradient, and turn its in-place writes to it, in helpers or through containers too, into
        ``HookWrite`` events instead of ordinary writes."""
        if not isinstance(hook, FunctionValue):
            return
        gradient = Tensor(Storage(), Grad.NO, leaf=True, origin=node, label="the gradient")
        args = [gradient] if GRADIENT_ARGUMENT[register] == 0 else [UNKNOWN, TensorSeq([gradient])]
        first, grad_mode = len(self.mutations), self.state.grad_enabled
        self.state.grad_enabled = False
        try:
            self.call_value(hook, args, {}, node)
        finally:
            self.state.grad_enabled = grad_mode
        writes = [m for m in self.mutations[first:] if m.target.storage.id == gradient.storage.id]
        self.mutations[first:] = [m for m in self.mutations[first:] if m not in writes]
        self.hook_writes.extend(HookWrite(m.node, m.how, node, register, m.moment) for m in writes)

    # --------------------------------------------------------- op semantics
    def apply_op(self, name: str, args: list[Value], node: ast.AST, label: str) -> Value:
        """An out-of-place op: propagate requires_grad and graph, and record what its backward saves."""
        if self.gradient_writes:
            self.summed_terms(name, args)  # a custom Function's output that shares its gradient in a sum
        self.read_with_grad_on(node, args)
        self.numbers_as_constants(node, args)
        result = self.made_with_grad_off(self._apply_op(name, args, node, label), node, args)
        return self.note_stale_use(node, args, result) if self.stale else result

    def note_stale_use(self, node: ast.AST, inputs: list[Value], result: Value) -> Value:
        """After an update of parameters, an op on a value whose graph holds a save the update made stale: record
        it (the first few), with a marker in its result's graph that tells which backward runs through it."""
        graph = frozenset().union(*(graph_of(v) for v in inputs)) if inputs else frozenset()
        if self.stale.isdisjoint(graph) or len(self.stale_uses) >= MAX_STALE_USES:
            return result
        marker = new_id()
        if isinstance(result, Tensor) and result.graph:
            result.graph = result.graph | {marker}
        elif isinstance(result, Derived) and result.graph:
            result = Derived(result.graph | {marker}, result.requires_grad)
        elif isinstance(result, TensorSeq) and result.base is None and any(graph_of(i) for i in result.items):
            # `h, c = cell(x, (h, c))`: each output of the op carries the marker
            result = TensorSeq([Derived(i.graph | {marker}, i.requires_grad) if isinstance(i, Derived) else i
                                for i in result.items], literal=result.literal)
            for item in result.items:
                if isinstance(item, Tensor):
                    item.graph = item.graph | {marker}
        else:
            return result
        self.stale_uses.append(StaleUse(node, self.frame_sites, self.seq, graph, marker))
        return result

    def _apply_op(self, name: str, args: list[Value], node: ast.AST, label: str) -> Value:
        args = [self.read_data(a, node) if isinstance(a, DataAlias) else a for a in args]
        operands = _operand_nodes(node, label, len(args))
        args = _spread_operand_list(self.k.op(name), args)
        if operands is not None and len(operands) != len(args):
            last = operands[-1]
            spread = [*operands[:-1], *last.elts] if isinstance(last, (ast.List, ast.Tuple)) else []
            operands = spread if len(spread) == len(args) else None
        if not any(isinstance(a, (Tensor, Derived)) for a in args):
            return UNKNOWN
        self.read_storages.update(a.storage.id for a in args if isinstance(a, Tensor))
        self.own_read(args, node, operands)
        dtype = self.op_dtype(name, args, node)
        if name in self.k.integral_results or self.k.is_integral(dtype):
            # `argmax`, `x > 0`, `idx + 1`: an integer or bool tensor never requires grad
            return Tensor(Storage(), Grad.NO, leaf=True, origin=node, label=f"the output of `{label}`",
                          dtype=dtype or self.k.fixed_dtypes.get(name))
        info: OpInfo | None = self.k.op(name)
        if info is None:  # not an op torch knows by this name: we cannot even tell it returns one tensor
            return Derived(frozenset().union(*(graph_of(a) for a in args)), self._grad(*args))
        rg = self._grad(*args)
        graph = frozenset().union(*(graph_of(a) for a in args))
        if graph and any(a is UNKNOWN for a in args):  # (a graph, not a value without one, is what it widens)
            graph = graph | {self.opaque_marker(node)}
        saves: set[int] = set()
        # max(x, dim)/sort/topk return (values, indices) and save other things than max(x) does.
        tuple_form = info is not None and info.tuple_saves_args is not None and (
            (len(args) > 1 and is_int(args[1])) or any(kw.arg == "dim" for kw in getattr(node, "keywords", [])))
        # `exponent=2.0`: a number by name (torch's Python functions call the schema's `self` `input`)
        keywords = {"self" if k.arg == "input" else k.arg: "S" if isinstance(k.value, ast.Constant) else None
                    for k in getattr(node, "keywords", []) if k.arg}
        saves_args, saves_result = info.saves_for(tuple(_kind(a) for a in args), keywords)
        if tuple_form:
            saves_args = info.tuple_saves_args
        if info is not None and rg:
            for pos, conds in saves_args.items():
                if pos < len(args) and isinstance(args[pos], Tensor):
                    cond = self._cond_grad(args, conds)
                    if cond:
                        saves.add(self._save(args[pos], label, "input", node, cond == Grad.YES,
                                             operands[pos] if operands else None).id)
        base = args[0] if args and isinstance(args[0], Tensor) else None
        if info is not None and info.returns == "sequence" and not info.multi_view and base is not None:
            # tensor_split/hsplit: several plain views, which may be written in place.
            piece = self._view(base, node) if info.view else Tensor(Storage(), rg, leaf=not rg, graph=graph,
                                                                     origin=node)
            return TensorSeq([], base=piece, split=new_id() if info.view else None)
        if tuple_form:  # (values, indices): the values carry the graph, the indices are integers
            values = Tensor(Storage(), rg, leaf=not rg, graph=graph | frozenset(saves), origin=node,
                            label=f"the values of `{label}`")
            indices = Tensor(Storage(), Grad.NO, leaf=True, origin=node, label=f"the indices of `{label}`")
            return TensorSeq([values, indices], literal=True, fields=("values", "indices"))
        if info is not None and info.multi_view and base is not None:
            # Under no_grad the pieces are no_grad views of a base that may require grad (GG105 needs to know).
            piece_base = Tensor(base.storage, rg if self.state.grad_enabled else base.requires_grad, leaf=base.leaf,
                                base=base.base, graph=graph | saves, origin=node, label=base.label,
                                multi_view=base.multi_view, param=base.param)
            return TensorSeq([], multi_view=info.multi_view if rg else None, nograd=not self.state.grad_enabled,
                             base=piece_base, split=new_id())
        if info is not None and info.view and base is not None:
            result = self._view(base, node)
            result.dtype = dtype
            result.graph = graph | frozenset(saves)
            result.maybe_copy = name in MAYBE_VIEW_METHODS and not (
                name in ("reshape", "reshape_as") and base.contiguous and base.base is None)
        else:
            result = Tensor(Storage(), rg, leaf=not rg, graph=graph | frozenset(saves), origin=node,
                            label=f"the output of `{label}`", contiguous=name in CONTIGUOUS_RESULTS, dtype=dtype)
        if info is not None and rg and saves_result:
            cond = self._cond_grad(args, saves_result)
            if cond:
                result.graph = result.graph | {self._save(result, label, "output", node, cond == Grad.YES).id}
        return result

    def call_module(self, module: ModuleValue, args: list[Value], node: ast.AST, torch_forward: bool = False,
                    kwargs: dict[str, Value] | None = None) -> Value:
        """Apply an nn.Module: a ``forward`` of the file's own runs in place (``torch_forward``: skip it, for
        ``super().forward``, with the call's keywords bound by name); torch layers use the generated table.  A full backward hook on it wraps what goes
        in and what comes out."""
        for load in self.loads:
            if load.target is module:
                load.used = True  # the copy computed something: it was not dropped unused
        if module.backward_hooked is None:
            if module.compiled is not None and self.state.grad_enabled:
                result = self._run_compiled(module, args, node, torch_forward, kwargs)
            else:
                result = self._run_module(module, args, node, torch_forward, kwargs)
            result = self._forward_hooked(module, args, result, node)
            if not self.state.grad_enabled and module.torch_module:  # a torch layer's weights are inputs too
                info = self.k.module(module.cls)
                weights = [self._module_attr(module, "weight", node)] if (
                    info is not None and info.has_params and not module.children and not module.frozen) else []
                result = self.made_with_grad_off(result, node, [*args, *weights])
            return self.note_stale_use(node, args, result) if self.stale else result
        args = [self.hooked_tensors(module, a) for a in args]
        result = self._forward_hooked(module, args, self._run_module(module, args, node, torch_forward, kwargs), node)
        return self.hooked_tensors(module, result)

    def _parameters_frozen(self, module: ModuleValue, info) -> bool:
        """Every parameter of the torch layer (its class's parameter names, none indexed by layer) is held, and
        frozen one by one (``emb.weight.requires_grad_(False)``): its output requires grad only through its
        input."""
        names = info.param_names
        return bool(names) and all("{n}" not in n for n in names) and all(
            isinstance(t, Tensor) and t.param and t.requires_grad == Grad.NO and not t.group
            for t in (module.attrs.get(n) for n in names))

    def _forward_hooked(self, module: ModuleValue, args: list[Value], result: Value, node: ast.AST) -> Value:
        """The module's forward hooks run on its output (see ``hooks.py``); then whether a write has changed an
        output a forward hook kept."""
        if FORWARD_HOOKS in module.attrs:
            result = self.run_forward_hooks(module, args, result, node)
        if self.__dict__.get("kept_outputs"):
            self.note_overwritten_outputs()
        return result

    def _renormalise_weight(self, module: ModuleValue, node: ast.AST) -> None:
        """An ``nn.Embedding(max_norm=...)`` lookup: torch renormalises the rows it looks up in the weight itself,
        in place and under no_grad, before reading them."""
        weight = self._module_attr(module, "weight", node)
        if not isinstance(weight, Tensor):
            return
        through = ast.Attribute(value=node.func, attr="weight", ctx=ast.Load()) if isinstance(node, ast.Call) else None
        grad, self.state.grad_enabled = self.state.grad_enabled, False
        try:
            self._inplace(node, weight, f"`nn.{module.cls}(max_norm=...)`", None, [], by_layer=True,
                          written_through=through)
        finally:
            self.state.grad_enabled = grad

    def own_read(self, args: list[Value], node: ast.AST, operands: list[ast.expr] | None = None) -> None:
        """An op (a layer) reads ``args``: where one holds a leaf whose values a forward replaced from themselves, the
        expression that gave it (``own_value_reads``; the op itself when its code does not show which); and for the run
        log, of any memory written before (``RunLog.value_taken``)."""
        self.run_log.value_taken(args, node, operands)
        for i, arg in enumerate(args if self.own_value_reads else ()):
            for storage in storages_in(arg) & self.own_value_reads.keys():
                self.own_value_reads[storage].append(operands[i] if operands is not None else node)

    def _run_compiled(self, module: ModuleValue, args: list[Value], node: ast.AST, torch_forward: bool,
                      kwargs: dict[str, Value] | None) -> Value:
        """A compiled module's forward: AOT autograd traces its backward with it, for what it returns and what it
        keeps on objects, so a save that forward's later write invalidates raises at this call (a sink here)."""
        self.compiled_outputs.append([])
        try:
            result = self._run_module(module, args, node, torch_forward, kwargs)
        finally:
            kept = self.compiled_outputs.pop()
        graph = frozenset().union(*(v.graph for v in kept)) if kept else frozenset()
        if isinstance(result, Tensor) and result.requires_grad == Grad.YES:
            graph |= result.graph
        if graph:
            self.sinks.append(Sink("compiled", node, graph, self._next()))
        return result

    def _run_module(self, module: ModuleValue, args: list[Value], node: ast.AST, torch_forward: bool,
                    kwargs: dict[str, Value] | None = None) -> Value:
        if module.children and module.cls == "Sequential" and module.user_class is None:
            value = args[0] if args else UNKNOWN
            for child in module.children:
                value = self.call_module(child, [value], node)
            return value
        args = [self.read_data(a, node) if isinstance(a, DataAlias) else a for a in args]
        x = args[0] if args else UNKNOWN
        info = self.ctx.class_of(module)
        patched = self.patched_method(info, "forward") if not torch_forward else False
        if patched is not False:  # `cls.forward = forward`: the patch runs (not known which: as a forward not followed)
            result = self.call_value(patched, [module, *args], kwargs or {}, node) if patched is not None else None
            if result is not None and not isinstance(result, PLAIN):
                return result
            graph = frozenset().union(*(graph_of(a) for a in args)) if args else frozenset()
            return Derived(graph, Grad.YES if self.state.grad_enabled else Grad.NO)
        found = find_method(self.ctx.classes_for(info), info, "forward") if info is not None and not torch_forward else None
        if found is not None:
            result = self.inline(found[0], args, kwargs or {}, node, self_value=module, owner=found[1])
            if result is not None and not isinstance(result, PLAIN):
                return result
            # A forward we could not follow: its output is computed from its inputs and parameters, but we
            # cannot tell its shape (one tensor, a tuple...), so it is never a write target.
            self.own_read([*args, module], node)
            graph = frozenset().union(*(graph_of(a) for a in args)) if args else frozenset()
            return Derived(graph, Grad.YES if self.state.grad_enabled else Grad.NO)
        self.read_storages.update(a.storage.id for a in args if isinstance(a, Tensor))  # a torch layer reads them
        self.own_read([*args, module], node)  # and its own parameters
        if not module.torch_module:
            return self._unknown_call(node, args)
        if not isinstance(x, Tensor):
            for a in args:
                self._sink("escape", node, a)
            info = self.k.module(module.cls)
            if info is None or not info.has_params:
                return UNKNOWN
            # A module with parameters returns a tensor that requires grad, whatever we know of its input.
            graph = frozenset().union(*(graph_of(a) for a in args)) if args else frozenset()
            rg = Grad.YES if self.state.grad_enabled else Grad.NO
            return Tensor(Storage(), rg, leaf=not rg, graph=graph, origin=node, label=f"the output of `{module.cls}`")
        info = self.k.module(module.cls)
        # A torch module the table does not know may or may not have parameters.
        params = (Grad.YES if info.has_params else Grad.NO) if info is not None else Grad.MAYBE
        if not self.state.grad_enabled or module.frozen or (info is not None and self._parameters_frozen(module, info)):
            params = Grad.NO
        # A recurrent layer's state may come as a tuple (`lstm(x, (h, c))`): its tensors are inputs too.
        inputs = [v for a in args for v in (a.items if isinstance(a, TensorSeq) else (a,))
                  if isinstance(v, (Tensor, Derived))]
        rg = max(self._grad(*inputs), params)
        if not self.state.grad_enabled:
            rg = Grad.NO
        if module.inplace and module.cls in self.k.inplace_kwarg_modules:
            twin = info.functional if info else None
            return self._inplace(node, x, f"`nn.{module.cls}(inplace=True)`", twin, [], module=module)
        if module.renorms_weight:
            self._renormalise_weight(module, node)
        graph = frozenset().union(*(graph_of(a) for a in args))
        if info is not None and info.has_params:
            weight = self._module_attr(module, "weight", node)
            graph |= graph_of(weight)  # the output depends on the parameters (their grad sources)
        saves: set[int] = set()

        def holds(conds: frozenset[str]) -> Grad:
            g = Grad.NO
            if "input" in conds:  # any tensor argument (a cell's hidden state counts like its input)
                g = max(g, self._grad(*inputs))
            if "params" in conds:
                g = max(g, params)
            return g

        if info is not None and rg:
            cond = holds(info.saves_input)
            if cond:
                for arg in inputs:
                    if isinstance(arg, Tensor):
                        saves.add(self._save(arg, f"nn.{module.cls}", "input", node, cond == Grad.YES).id)
            cond = holds(info.saves_params)
            if cond and info.has_params:
                weight = self._module_attr(module, "weight", node)
                if isinstance(weight, Tensor):
                    saves.add(self._save(weight, f"nn.{module.cls}", "weight", node, cond == Grad.YES).id)
        result = Tensor(Storage(), rg, leaf=not rg, graph=graph | frozenset(saves), origin=node,
                        label=f"the output of `nn.{module.cls}`", dtype=self._layer_dtype(module, info, x))
        if info is not None and rg:
            cond = holds(info.saves_output)
            if cond:
                result.graph = result.graph | {self._save(result, f"nn.{module.cls}", "output", node,
                                                          cond == Grad.YES).id}
        if info is not None and info.returns == "tuple":  # (output, state): the state is not modelled
            return TensorSeq([result, Derived(result.graph, rg)])
        return result




def _operand_nodes(node: ast.AST, label: str, count: int) -> list[ast.expr] | None:
    """The expressions whose values are an op's ``count`` arguments, in order, when its code shows them one for
    one (``a * b``, ``-a``, ``a[i]``, ``torch.f(a, b)``, ``a.f(b)``: the receiver first); None otherwise."""
    if isinstance(node, ast.BinOp):
        parts = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        parts = [node.operand]
    elif isinstance(node, ast.Subscript):
        parts = [node.value]
    elif isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
        method = label.startswith(".") and isinstance(node.func, ast.Attribute)
        parts = [node.func.value, *node.args] if method else list(node.args)
    else:
        return None
    return parts if len(parts) == count else None


def _spread_operand_list(info: OpInfo | None, args: list[Value]) -> list[Value]:
    """``torch.einsum(eq, [a, b])``: a list of tensors as the last argument of an op that has an overload taking
    them one by one (torch's Python wrapper spreads such a list) is those tensors; an op whose only form takes a
    list (``cat``, ``stack``) keeps it."""
    last = args[-1] if args else None
    if info is None or not (isinstance(last, TensorSeq) and last.base is None and last.literal and last.items):
        return args
    spread = [*args[:-1], *last.items]
    kinds = tuple(_kind(a) for a in spread)
    return spread if any(o.accepts(kinds, {}, strict=True) for o in info.overloads) else args


def _kind(value: Value) -> str | None:
    """How an argument binds to a torch overload: "T" a tensor (or a list of them), "S" a number or other
    non-tensor, None when we cannot tell."""
    if isinstance(value, (Tensor, Derived, TensorSeq)):
        return "T"
    if is_plain_data(value) or isinstance(value, NumberFrom):
        return "S"
    return None


# NumPy array methods that write the array in place (API knowledge, not autograd knowledge).
ARRAY_WRITING_METHODS = {"fill", "sort", "put", "itemset", "partition"}
# list methods that change the list in place
LIST_MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse", "__setitem__",
                           "__delitem__", "__iadd__"})


def _param_owners(params: Value) -> list[Value]:
    if isinstance(params, ParamIterable):
        return params.owner if isinstance(params.owner, list) else [params.owner]
    if isinstance(params, TensorSeq):
        return [o for item in params.items for o in _param_owners(item)]
    # `SGD([w, b])` of leaves made with `requires_grad=True` trains them as it trains parameters
    if isinstance(params, Tensor) and (params.param or params.group or (params.leaf and params.requires_grad == Grad.YES)):
        return [params]
    return []


def _out_inputs(args: list[Value], kwargs: dict[str, Value]) -> list[Value]:
    """The tensors an ``out=`` call computes from (the items of a list argument too, as in ``torch.cat``)."""
    values = [*args, *(v for k, v in kwargs.items() if k != "out")]
    return [item for v in values for item in (v.items if isinstance(v, TensorSeq) else (v,))]


def _argument_of(node: ast.AST, args: list[Value], kwargs: dict[str, Value]):
    """The argument expression of ``node`` (a call) that gives a value (None when the call's arguments are not
    the values one for one, ``*``/``**`` or a partial's, or the value is given twice)."""
    exprs: dict[int, ast.expr | None] = {}
    if isinstance(node, ast.Call) and len(node.args) == len(args) and len(node.keywords) == len(kwargs) \
            and not any(isinstance(a, ast.Starred) for a in node.args) \
            and [k.arg for k in node.keywords] == list(kwargs):
        for expr, value in [*zip(node.args, args), *((k.value, kwargs[k.arg]) for k in node.keywords)]:
            exprs[id(value)] = None if id(value) in exprs else expr
    return lambda value: exprs.get(id(value))
