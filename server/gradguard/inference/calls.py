"""Calls: torch functions, tensor methods, nn.Module construction and application, and op semantics.

A mixin of ``Interpreter``.  What an op saves for backward comes from the generated
knowledge table (``gradguard.knowledge``); this file only knows torch's *API shapes*
(which callables are factories, which methods return Python numbers).
"""

from __future__ import annotations

import ast
import collections

from ..knowledge import OpInfo
from .events import Sink
from .values import (
    INT,
    NOT_TENSOR,
    UNKNOWN,
    DataAlias,
    Derived,
    Grad,
    NumberFrom,
    OptimizerValue,
    ModuleValue,
    ModuleIterable,
    ParamIterable,
    Storage,
    Tensor,
    TensorSeq,
    Value,
    graph_of,
    new_tensor,
)

# How often calls are followed or assumed harmless (the benchmark prints it).
CALL_STATS: collections.Counter[str] = collections.Counter()

# API knowledge (not autograd knowledge): which torch callables build new tensors from data.
FACTORIES = {
    "tensor", "as_tensor", "asarray", "from_numpy", "randn", "rand", "randint", "randperm", "zeros", "ones",
    "empty", "full", "arange", "linspace", "logspace", "eye", "normal", "bernoulli", "multinomial",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like", "tril_indices",
}
TENSOR_METHOD_FACTORIES = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}

NOT_TENSOR_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "stride", "data_ptr", "is_contiguous",
                      "element_size", "nelement", "ndimension", "get_device", "__len__", "type"}

SAME_TENSOR_METHODS = {"to", "type_as", "float", "double", "half", "bfloat16", "cpu", "cuda", "long", "int", "bool"}

MODULE_RETURNING_METHODS = {"train", "eval", "to", "cuda", "cpu", "float", "double", "half", "requires_grad_",
                            "zero_grad", "apply", "share_memory"}

DISTRIBUTIONS_SAVING_LOGITS = {"Categorical", "OneHotCategorical", "Bernoulli", "Binomial", "Multinomial",
                               "RelaxedOneHotCategorical", "Geometric"}


class CallsMixin:
    def _expr_Call(self, node: ast.Call) -> Value:
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = self.eval(func.value)
            if isinstance(owner, Tensor):
                return self._tensor_method(owner, func.attr, node)
            if isinstance(owner, DataAlias):
                return self._data_method(owner, func.attr, node)
            if isinstance(owner, Derived):
                args = self._eval_args(node)
                if func.attr == "backward":
                    self._backward(owner, node, bool(_keyword_bool(node, "retain_graph", False)))
                    return UNKNOWN
                return self._unknown_call(node, [owner, *args])
            if isinstance(owner, ModuleValue):
                attr = owner.attrs.get(func.attr)
                if isinstance(attr, ModuleValue):  # self.fc(x): a submodule, not a method
                    return self.call_module(attr, self._eval_args(node), node)
                method = _method_of(owner, func.attr)
                if method is not None:
                    args, kwargs = self._eval_call_args(node)
                    result = self.inline(method, args, kwargs, node, self_value=owner, record=func.attr != "forward")
                    if result is not None:
                        return result
                    return self._unknown_call(node, [*args, *kwargs.values()])
                return self._module_method(owner, func.attr, node)
            if isinstance(owner, TensorSeq) and func.attr in ("append", "extend", "insert"):
                args = self._eval_args(node)
                if func.attr == "append" and args:
                    owner.items.append(args[-1])
                elif func.attr == "extend" and args and isinstance(args[0], TensorSeq):
                    owner.items.extend(args[0].items)
                elif func.attr == "insert" and len(args) > 1:
                    owner.items.append(args[1])
                return NOT_TENSOR
            if isinstance(owner, OptimizerValue):
                self._eval_args(node)
                if func.attr == "step":
                    name = func.value.id if isinstance(func.value, ast.Name) else "optimizer"
                    self._optimizer_step(owner, node, name)
                return UNKNOWN
        q = self.qual(func)
        if q is not None and q.startswith("torch."):
            return self._torch_call(q, node)
        if q is not None and q.startswith("builtins."):
            return self._builtin_call(q[9:], node)
        if q is not None and q.split(".")[0] == "numpy":
            args, kwargs = self._eval_call_args(node)
            numbers = [v for v in [*args, *kwargs.values()] if isinstance(v, NumberFrom)]
            if numbers:  # numpy on values read out of tensors: still values read out of tensors
                return NumberFrom(frozenset().union(*(n.sources for n in numbers)), node,
                                  frozenset().union(*(n.markers for n in numbers)))
            return NOT_TENSOR
        if q == "copy.deepcopy":
            args = self._eval_args(node)
            return _copy_module(args[0], node) if args and isinstance(args[0], ModuleValue) else UNKNOWN
        if q == "itertools.chain":
            owners = [a for a in self._eval_args(node) if isinstance(a, ParamIterable)]
            return ParamIterable(owners) if owners else UNKNOWN
        if isinstance(func, ast.Name) and func.id in self.ctx.functions and func.id not in self.state.env:
            args, kwargs = self._eval_call_args(node)
            result = self.inline(self.ctx.functions[func.id], args, kwargs, node)
            if result is not None:
                return result
            return self._unknown_call(node, [*args, *kwargs.values()])
        callee = self.eval(func) if not isinstance(func, ast.Attribute) else UNKNOWN
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        kwargs = {kw.arg: self.eval(kw.value) for kw in node.keywords}
        if isinstance(callee, ModuleValue):
            return self.call_module(callee, args, node)
        if isinstance(func, ast.Name) and func.id in self.ctx.classes:
            return self._instantiate_user_module(func.id, node)
        return self._unknown_call(node, [*args, *kwargs.values()])

    def _unknown_call(self, node: ast.AST, inputs: list[Value]) -> Value:
        """A call we cannot see into: its tensor inputs escape, and its result carries their graph."""
        for value in inputs:
            self._sink("escape", node, value)
        graph = frozenset().union(*(graph_of(v) for v in inputs)) if inputs else frozenset()
        if not graph and not any(isinstance(v, (Tensor, Derived)) for v in inputs):
            return UNKNOWN
        CALL_STATS["unknown callee given tensors"] += 1  # assumed harmless: it writes nothing we can see
        return Derived(graph, self._grad(*inputs))

    def _eval_call_args(self, node: ast.Call) -> tuple[list[Value], dict[str, Value]]:
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        return args, {kw.arg: self.eval(kw.value) for kw in node.keywords if kw.arg}

    def _eval_args(self, node: ast.Call) -> list[Value]:
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        return args

    def _builtin_call(self, name: str, node: ast.Call) -> Value:
        args = [self.eval(a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        if name == "sum" and args and isinstance(args[0], TensorSeq):
            items = args[0].items
            if items and all(isinstance(i, NumberFrom) for i in items):
                return NumberFrom(frozenset().union(*(i.sources for i in items)), node,
                                  frozenset().union(*(i.markers for i in items)))
            if any(isinstance(i, (Tensor, Derived)) for i in items):
                return self.apply_op("add", [i for i in items if isinstance(i, (Tensor, Derived))], node, "sum()")
        if name in ("sum", "min", "max", "abs", "round") and args and isinstance(args[0], NumberFrom):
            return args[0]
        if name in ("float", "int") and args and isinstance(args[0], (Tensor, NumberFrom)):
            return self._number_from(args[0], node, f"`{name}()`")  # float(loss): the value leaves the graph
        if name in ("len", "int", "range"):
            return INT if name != "range" else NOT_TENSOR
        if name == "float":
            return NOT_TENSOR
        if name == "enumerate" and args:  # yields (index, element) pairs
            return TensorSeq([TensorSeq([INT, self._iter_element(args[0], node.args[0])])]) if isinstance(
                args[0], (Tensor, TensorSeq, ParamIterable)) else UNKNOWN
        if name == "reversed" and args:
            return args[0] if isinstance(args[0], TensorSeq) else UNKNOWN
        if name in ("list", "tuple") and args and isinstance(args[0], (TensorSeq, ParamIterable)):
            return args[0]
        if name == "zip":  # yields tuples
            items = [self._iter_element(a, n) for a, n in zip(args, node.args)]
            return TensorSeq([TensorSeq(items)]) if any(isinstance(i, Tensor) for i in items) else UNKNOWN
        if name == "print":
            return NOT_TENSOR
        return UNKNOWN

    # ---------------------------------------------------------- torch calls
    def _torch_call(self, q: str, node: ast.Call) -> Value:
        parts = q.split(".")
        name = parts[-1]
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        kwargs = {kw.arg: self.eval(kw.value) for kw in node.keywords if kw.arg}
        functional = q.startswith("torch.nn.functional.")
        if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            rg = _keyword_bool(node, "requires_grad", True)
            return new_tensor(node, Grad.YES if rg else Grad.NO, leaf=True, param=True, label="a parameter")
        if len(parts) == 3 and parts[1] == "nn" and name[:1].isupper():
            return self._construct_module(name, node, args)
        if q.startswith("torch.optim.") and name[:1].isupper() and "lr_scheduler" not in q:
            params = args[0] if args else kwargs.get("params", UNKNOWN)
            return OptimizerValue(_param_owners(params), ctor=node)
        if name in GRAPH_REBUILDING_FACTORIES and len(parts) == 2 and (args or "data" in kwargs):
            rg = _keyword_bool(node, "requires_grad", False)
            source = args[0] if args else kwargs["data"]
            return self._graph_break(node, f"`torch.{name}(...)`", [source],
                                     Grad.MAYBE if rg is None else Grad.YES if rg else Grad.NO)
        if q.startswith("torch.distributions.") and name in DISTRIBUTIONS_SAVING_LOGITS:
            logits = kwargs.get("logits")
            inputs = [*args, *kwargs.values()]
            if isinstance(logits, Tensor):
                inputs.append(self.apply_op("logsumexp", [logits], node, f"torch.distributions.{name}(logits=...)"))
            return self._unknown_call(node, inputs)
        if q in ("torch.autograd.backward", "torch.autograd.grad"):
            target = args[0] if args else kwargs.get("outputs", kwargs.get("tensors", UNKNOWN))
            self._backward(target, node, _keyword_bool(node, "retain_graph", False)
                           or _keyword_bool(node, "create_graph", False))
            return UNKNOWN
        if name in FACTORIES and len(parts) == 2:
            rg = _keyword_bool(node, "requires_grad", False)
            return new_tensor(node, Grad.MAYBE if rg is None else Grad.YES if rg else Grad.NO, leaf=True)
        out = kwargs.get("out")
        if isinstance(out, Tensor):  # out= ops are not differentiable: a plain write, nothing saved
            self._inplace(node, out, f"`out=` of `{q}`", None, [])
            return out
        if q.startswith("torch.nn.init.") and name.endswith("_"):
            # nn.init functions write under torch.no_grad(): allowed on leaves, but the version still moves.
            if args and isinstance(args[0], Tensor):
                grad_mode, self.state.grad_enabled = self.state.grad_enabled, False
                self._inplace(node, args[0], f"`nn.init.{name}()`", None, [])
                self.state.grad_enabled = grad_mode
            return UNKNOWN
        if functional and "dropout" in name and _keyword_bool(node, "training", True) is False:
            return args[0] if args else UNKNOWN  # dropout with training=False is the identity (no write)
        if functional and _keyword_bool(node, "inplace", False):
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
        if name in ("stack", "cat", "concat", "concatenate", "hstack", "vstack") and args and isinstance(args[0], TensorSeq):
            items = [i for i in args[0].items if isinstance(i, Tensor)]
            return self.apply_op(name, items, node, f"torch.{name}")
        label = f"F.{name}" if functional else f"torch.{name}"
        return self.apply_op(name, args, node, label)

    def _backward(self, target: Value, node: ast.AST, retain: bool) -> None:
        graph = graph_of(target)
        self.sinks.append(Sink("backward", node, graph, self._next()))
        if not retain:
            for save in self.saves:
                if save.id in graph:
                    save.consumed = True

    def _construct_module(self, cls: str, node: ast.Call, args: list[Value]) -> Value:
        inplace = bool(_keyword_bool(node, "inplace", False))
        if not inplace and cls in self.k.inplace_kwarg_modules:
            # nn.ReLU(True), nn.LeakyReLU(0.1, True): inplace may be positional.
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value is True:
                    inplace = True
        if inplace and "Dropout" in cls:  # nn.Dropout(0.0, inplace=True) never writes
            p = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "p"), None)
            if isinstance(p, ast.Constant) and p.value == 0:
                inplace = False
        module = ModuleValue(cls, torch_module=True, inplace=inplace, ctor=node)
        if cls in ("Sequential",):
            module.children = [a for a in args if isinstance(a, ModuleValue)]
        if cls in ("ModuleList",) and args and isinstance(args[0], TensorSeq):
            module.children = [a for a in args[0].items if isinstance(a, ModuleValue)]
        return module

    def _instantiate_user_module(self, name: str, node: ast.Call) -> Value:
        for a in node.args:
            self.eval(a)
        for kw in node.keywords:
            self.eval(kw.value)
        info = self.ctx.classes[name]
        module = ModuleValue(name, torch_module=False, ctor=node, user_class=info.node)
        if info.init is not None and self.ctx.depth < 2:
            from .classes import (
                init_attributes,  # local import: classes builds on this module
            )

            module.attrs = init_attributes(self.ctx, info, module)
        return module

    # --------------------------------------------------------- method calls
    def _tensor_method(self, tensor: Tensor, name: str, node: ast.Call) -> Value:
        args = [tensor, *(self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args)]
        kwargs = {kw.arg: self.eval(kw.value) for kw in node.keywords if kw.arg}
        if name == "backward":
            self._backward(tensor, node, _keyword_bool(node, "retain_graph", False)
                           or _keyword_bool(node, "create_graph", False))
            return UNKNOWN
        if name == "detach":
            lost = tensor.graph | tensor.lost_sources if tensor.requires_grad else tensor.lost_sources
            return Tensor(tensor.storage, Grad.NO, leaf=True, origin=node, label=f"{tensor.label}.detach()",
                          lost_sources=lost)
        if name in ("item", "tolist", "numpy"):
            return self._number_from(tensor, node, f"`.{name}()`")
        if name == "new_tensor" and len(args) > 1:
            rg = _keyword_bool(node, "requires_grad", False)
            return self._graph_break(node, "`.new_tensor(...)`", [args[1]], Grad.YES if rg else Grad.NO)
        if name == "requires_grad_":
            flag = _positional_or_keyword_bool(node, 0, "requires_grad", True)
            tensor.requires_grad = Grad.YES if flag else Grad.NO
            return tensor
        if name == "clone":
            return Tensor(Storage(), self._grad(tensor), leaf=not self._grad(tensor), graph=tensor.graph, origin=node)
        if name in NOT_TENSOR_METHODS:
            return NOT_TENSOR
        if name in TENSOR_METHOD_FACTORIES:
            return new_tensor(node, Grad.YES if _keyword_bool(node, "requires_grad", False) else Grad.NO)
        if name in SAME_TENSOR_METHODS:
            return Tensor(Storage(), self._grad(tensor), leaf=not self._grad(tensor), graph=tensor.graph,
                          origin=node, label=tensor.label)
        if name.endswith("_") and not name.endswith("__") and self.k.is_inplace(name):
            twin = self.k.inplace_twin(name)
            return self._inplace(node, tensor, f"`.{name}()`", twin, args[1:])
        out = kwargs.get("out")
        if isinstance(out, Tensor):
            self._inplace(node, out, f"`out=` of `.{name}()`", None, [])
            return out
        info = self.k.op(name)
        if info is None:
            return UNKNOWN
        return self.apply_op(name, args, node, f".{name}()")

    def _data_method(self, alias: DataAlias, name: str, node: ast.Call) -> Value:
        for a in node.args:
            self.eval(a)
        if name.endswith("_") and self.k.is_inplace(name):
            self._data_write(node, alias, f"`.data.{name}()`")
        return UNKNOWN

    def _module_method(self, module: ModuleValue, name: str, node: ast.Call) -> Value:
        args = [self.eval(a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        if name in ("parameters",):
            return ParamIterable(module)
        if name == "named_parameters":
            return ParamIterable(module, named=True)
        if name in ("modules", "children", "named_modules", "named_children"):
            return ModuleIterable(module, named=name.startswith("named_"))
        if name in ("register_buffer", "register_parameter") and len(args) > 1:
            key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(args[1], Tensor):
                module.attrs[key.value] = args[1]  # `self.bank` is this tensor from now on
            return NOT_TENSOR
        if name == "forward":
            return self.call_module(module, args, node)
        if name == "requires_grad_":
            flag = _positional_or_keyword_bool(node, 0, "requires_grad", True)
            module.freeze(flag is False)
        if name in MODULE_RETURNING_METHODS:
            return module
        return UNKNOWN

    # --------------------------------------------------------- op semantics
    def apply_op(self, name: str, args: list[Value], node: ast.AST, label: str) -> Value:
        """An out-of-place op: propagate requires_grad and graph, and record what its backward saves."""
        if not any(isinstance(a, (Tensor, Derived)) for a in args):
            return UNKNOWN
        info: OpInfo | None = self.k.op(name)
        if info is None:  # not an op torch knows by this name: we cannot even tell it returns one tensor
            return Derived(frozenset().union(*(graph_of(a) for a in args)), self._grad(*args))
        rg = self._grad(*args)
        graph = frozenset().union(*(graph_of(a) for a in args))
        saves: set[int] = set()
        # max(x, dim)/sort/topk return (values, indices) and save other things than max(x) does.
        tuple_form = info is not None and info.tuple_saves_args is not None and (
            (len(args) > 1 and args[1] is INT) or any(kw.arg == "dim" for kw in getattr(node, "keywords", [])))
        saves_args = info.tuple_saves_args if tuple_form else info.saves_args if info is not None else {}
        if info is not None and rg:
            for pos, conds in saves_args.items():
                if pos < len(args) and isinstance(args[pos], Tensor):
                    cond = self._cond_grad(args, conds)
                    if cond:
                        saves.add(self._save(args[pos], label, "input", node, cond == Grad.YES).id)
        base = args[0] if args and isinstance(args[0], Tensor) else None
        if info is not None and info.returns == "sequence" and not info.multi_view and base is not None:
            # tensor_split/hsplit: several plain views, which may be written in place.
            piece = self._view(base, node) if info.view else Tensor(Storage(), rg, leaf=not rg, graph=graph,
                                                                     origin=node)
            return TensorSeq([], base=piece)
        if tuple_form:
            return Derived(graph | frozenset(saves), rg)  # (values, indices) pairs: not modelled
        if info is not None and info.multi_view and base is not None:
            # Under no_grad the pieces are no_grad views of a base that may require grad (GG105 needs to know).
            piece_base = Tensor(base.storage, rg if self.state.grad_enabled else base.requires_grad, leaf=base.leaf,
                                base=base.base, graph=graph | saves, origin=node, label=base.label,
                                multi_view=base.multi_view, param=base.param)
            return TensorSeq([], multi_view=info.multi_view if rg else None, nograd=not self.state.grad_enabled,
                             base=piece_base)
        if info is not None and info.view and base is not None:
            result = self._view(base, node)
            result.graph = graph | frozenset(saves)
        else:
            result = Tensor(Storage(), rg, leaf=not rg, graph=graph | frozenset(saves), origin=node,
                            label=f"the output of `{label}`")
        if info is not None and rg and info.saves_result:
            cond = self._cond_grad(args, info.saves_result)
            if cond:
                result.graph = result.graph | {self._save(result, label, "output", node, cond == Grad.YES).id}
        return result

    def call_module(self, module: ModuleValue, args: list[Value], node: ast.AST) -> Value:
        """Apply an nn.Module: torch modules use the generated table; the file's own modules pass graphs through."""
        if module.children and module.cls == "Sequential":
            value = args[0] if args else UNKNOWN
            for child in module.children:
                value = self.call_module(child, [value], node)
            return value
        x = args[0] if args else UNKNOWN
        forward = _method_of(module, "forward") if not module.torch_module else None
        if not isinstance(x, Tensor) and forward is None:
            for a in args:
                self._sink("escape", node, a)
            info = self.k.module(module.cls) if module.torch_module else None
            if module.torch_module and (info is None or not info.has_params):
                return UNKNOWN
            # A module with parameters returns a tensor that requires grad, whatever we know of its input.
            graph = frozenset().union(*(graph_of(a) for a in args)) if args else frozenset()
            rg = Grad.YES if self.state.grad_enabled else Grad.NO
            return Tensor(Storage(), rg, leaf=not rg, graph=graph, origin=node, label=f"the output of `{module.cls}`")
        if not module.torch_module:
            forward = _method_of(module, "forward")
            if forward is not None:
                result = self.inline(forward, args, {}, node, self_value=module, record=False)
                if isinstance(result, (Tensor, TensorSeq, Derived)):
                    return result
            rg = Grad.YES if self.state.grad_enabled else Grad.NO
            graph = frozenset().union(*(graph_of(a) for a in args))
            return Tensor(Storage(), rg, leaf=not rg, graph=graph, origin=node, label=f"the output of `{module.cls}`")
        info = self.k.module(module.cls)
        # A torch module the table does not know may or may not have parameters.
        params = (Grad.YES if info.has_params else Grad.NO) if info is not None else Grad.MAYBE
        if not self.state.grad_enabled or module.frozen:
            params = Grad.NO
        rg = max(self._grad(*[a for a in args if isinstance(a, Tensor)]), params)
        if not self.state.grad_enabled:
            rg = Grad.NO
        if module.inplace and module.cls in self.k.inplace_kwarg_modules:
            twin = info.functional if info else None
            return self._inplace(node, x, f"`nn.{module.cls}(inplace=True)`", twin, [], module=module)
        graph = frozenset().union(*(graph_of(a) for a in args))
        if info is not None and info.has_params:
            weight = self._module_attr(module, "weight", node)
            graph |= graph_of(weight)  # the output depends on the parameters (their grad sources)
        saves: set[int] = set()

        def holds(conds: frozenset[str]) -> Grad:
            g = Grad.NO
            if "input" in conds:  # any tensor argument (a cell's hidden state counts like its input)
                g = max(g, self._grad(*[a for a in args if isinstance(a, Tensor)]))
            if "params" in conds:
                g = max(g, params)
            return g

        if info is not None and rg:
            cond = holds(info.saves_input)
            if cond:
                for arg in args:
                    if isinstance(arg, Tensor):
                        saves.add(self._save(arg, f"nn.{module.cls}", "input", node, cond == Grad.YES).id)
            cond = holds(info.saves_params)
            if cond and info.has_params:
                weight = self._module_attr(module, "weight", node)
                if isinstance(weight, Tensor):
                    saves.add(self._save(weight, f"nn.{module.cls}", "weight", node, cond == Grad.YES).id)
        result = Tensor(Storage(), rg, leaf=not rg, graph=graph | frozenset(saves), origin=node,
                        label=f"the output of `nn.{module.cls}`")
        if info is not None and rg:
            cond = holds(info.saves_output)
            if cond:
                result.graph = result.graph | {self._save(result, f"nn.{module.cls}", "output", node,
                                                          cond == Grad.YES).id}
        if info is not None and info.returns == "tuple":  # (output, state): the state is not modelled
            return TensorSeq([result, Derived(result.graph, rg)])
        return result




def _keyword_bool(node: ast.Call, name: str, default: bool) -> bool | None:
    for kw in node.keywords:
        if kw.arg == name:
            if isinstance(kw.value, ast.Constant):
                return bool(kw.value.value)
            return None  # a flag computed at run time: callers choose the cautious reading
    return default


def _positional_or_keyword_bool(node: ast.Call, index: int, name: str, default: bool) -> bool:
    if len(node.args) > index and isinstance(node.args[index], ast.Constant):
        return bool(node.args[index].value)
    return _keyword_bool(node, name, default)


# Factories that copy their data argument into a new leaf: given a tensor that requires grad, the graph ends there.
GRAPH_REBUILDING_FACTORIES = {"tensor", "as_tensor", "asarray", "from_numpy"}


def _method_of(module: ModuleValue, name: str) -> ast.FunctionDef | None:
    """A method defined by the file's own class of this module (or None for torch modules)."""
    cls = module.user_class
    if cls is None:
        return None
    return next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def _param_owners(params: Value) -> list[Value]:
    if isinstance(params, ParamIterable):
        return params.owner if isinstance(params.owner, list) else [params.owner]
    if isinstance(params, TensorSeq):
        return [o for item in params.items for o in _param_owners(item)]
    if isinstance(params, Tensor) and (params.param or params.group):
        return [params]
    return []


def _copy_module(module: ModuleValue, node: ast.AST) -> ModuleValue:
    """``copy.deepcopy(model)``: the same structure with parameters of its own (an EMA teacher, a target net)."""
    copy = ModuleValue(module.cls, module.torch_module, module.inplace, module.ctor, user_class=module.user_class)
    copy.children = [_copy_module(c, node) for c in module.children]
    for name, value in module.attrs.items():
        if isinstance(value, ModuleValue):
            copy.attrs[name] = _copy_module(value, node)
        elif isinstance(value, Tensor) and value.param:
            copy.attrs[name] = new_tensor(node, value.requires_grad, leaf=True, param=True, label=value.label)
        elif not isinstance(value, Tensor):
            copy.attrs[name] = value
    return copy
