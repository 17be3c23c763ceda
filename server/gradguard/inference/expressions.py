"""Expressions: the abstract value of each expression (names, operators, indexing, attributes).

A mixin of ``Interpreter``; calls live in ``calls.py`` and statements in ``interpreter.py``.
"""

from __future__ import annotations

import ast
import builtins

from ..bounds import Unanalysed
from ..knowledge.names import SHAPE_ATTRS, VIEW_ATTRS
from ..statements import every_node, syntax_fact
from .classes import ClassInfo, find_method, mro
from .events import GradRead, KeptRead
from .hooks import named_submodules
from .scopes import bound_names
from .values import (
    INT,
    literal_modules,
    int_const,
    is_int,
    NOT_TENSOR,
    PLAIN,
    UNKNOWN,
    CallableRef,
    ClassRef,
    FunctionApply,
    FunctionContext,
    Const,
    DataAlias,
    Derived,
    FunctionValue,
    Grad,
    ModuleValue,
    NumberFrom,
    Opaque,
    OptimizerValue,
    ParamGroups,
    NameTemplate,
    ParamIterable,
    ParamsByName,
    Storage,
    Tensor,
    TensorMap,
    TensorSeq,
    Value,
    graph_of,
    is_plain_data,
    layer_choice,
    join,
    new_tensor,
    surely_tensor,
    truth,
)

BINARY_OPS = {  # operator -> the torch op it runs (x += y runs add_)
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floor_divide",
    ast.Mod: "remainder",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}


def _const_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_int(node.operand)
        return -inner if inner is not None else None
    return None


def _const_key(node: ast.expr) -> object:
    """A dict key or list index written as a constant (``"h"``, ``0``, ``-1``), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return node.value
    return _const_int(node)


def _numbers(values: list[Value], node: ast.AST) -> NumberFrom:
    """Arithmetic on numbers read out of tensors: still numbers, remembering where they came from."""
    numbers = [v for v in values if isinstance(v, NumberFrom)]
    return NumberFrom(frozenset().union(*(n.sources for n in numbers)), node,
                      frozenset().union(*(n.markers for n in numbers)))


MAIN_MODULE_NAME = Const("__main__")
_NONE = Const(None)  # compared with (equal to every `Const(None)`), never handed out
# Reading an attribute these decorate runs the method (Python's descriptors, not torch).
PROPERTY_DECORATORS = frozenset({"builtins.property", "functools.cached_property"})
# node type -> the function of its method (``_expr_Call``) or None, looked up once on the class that mixes this in
# (``Interpreter``, the only one): ``eval`` runs millions of times, and ``getattr(self, name)`` made a bound method
# at each.
_EXPR_FUNCTIONS: dict[type, object] = {}
# The kinds of value ``_expr_Attribute`` reads an attribute of; of any other it is unknown.
_ATTRIBUTE_OWNERS = (Tensor, DataAlias, TensorSeq, ModuleValue, Derived, CallableRef, ClassRef, FunctionContext,
                     OptimizerValue)


class ExpressionsMixin:
    # ----------------------------------------------------------- expressions
    def eval(self, node: ast.expr | None) -> Value:
        if node is None:
            return UNKNOWN
        if self.steps < self.step_limit:
            self.steps += 1  # ``count_step``, inline: once per expression
        else:
            self.count_step()
        if self.presets and id(node) in self.presets:
            return self.presets[id(node)]  # a caller's keyword spread into a followed call: its value there
        kind = type(node)
        try:
            function = _EXPR_FUNCTIONS[kind]
        except KeyError:
            function = _EXPR_FUNCTIONS[kind] = getattr(type(self), f"_expr_{kind.__name__}", None)
        if function is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child)
            return UNKNOWN
        return function(self, node)

    def _expr_Unanalysed(self, node: Unanalysed) -> Value:
        return UNKNOWN  # too deep to analyse (bounds.py): reported as GG903, unknown here

    def _expr_Constant(self, node: ast.Constant) -> Value:
        value = node.value
        if isinstance(value, (bool, str, int)) or value is None:
            return Const(value)
        return NOT_TENSOR

    def _expr_JoinedStr(self, node: ast.JoinedStr) -> Value:
        """``f"conv{i}"``: the string when every piece is known, else its text with each unknown piece ``{n}``
        (a layer index in a parameter's name, see ``NameTemplate``)."""
        text, holes = [], False
        for piece in node.values:
            if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                if "{" in piece.value or "}" in piece.value:
                    return NOT_TENSOR
                text.append(piece.value)
                continue
            value = self.eval(piece.value) if isinstance(piece, ast.FormattedValue) else UNKNOWN
            plain = isinstance(piece, ast.FormattedValue) and piece.conversion == -1 and piece.format_spec is None
            if plain and isinstance(value, Const) and not isinstance(value.value, tuple):
                text.append(str(value.value))
            else:
                if isinstance(piece, ast.FormattedValue) and piece.format_spec is not None:
                    self.eval(piece.format_spec)
                text.append("{n}")
                holes = True
        return NameTemplate("".join(text)) if holes else Const("".join(text))

    def imported(self, qualname: str) -> Value:
        """An imported name: a function or class of one of the project's modules (followed like the file's own),
        else a reference to the import."""
        project = self.ctx.project
        if project is None or not self.follows_modules:
            return CallableRef(qualname)
        found = project.definition(qualname, self.ctx.path)
        if isinstance(found, ClassInfo):
            return ClassRef(found)
        if found is not None:
            return FunctionValue(found[0], module_path=found[1])
        return CallableRef(qualname)

    def _expr_Name(self, node: ast.Name) -> Value:
        """Local, then enclosing and module variables, then the file's functions and classes, then imports.  A
        local of the running function without a value here (read before it is bound, an ``except`` name) is not
        looked for elsewhere: Python never does, and a cache key leaves the module's bindings of it out."""
        value = self.state.env.get(node.id)
        if value is None:
            if node.id in self.own_locals():
                return UNKNOWN
            value = self.lookup(node.id)
        if value is not None:
            return value
        if node.id in self.ctx.functions:
            return FunctionValue(self.ctx.functions[node.id], module_path=self.ctx.path)
        if node.id in self.ctx.classes:
            return ClassRef(self.ctx.classes[node.id])
        if node.id in self.ctx.imports:
            return self.imported(self.ctx.imports[node.id])
        if node.id == "__name__":
            return MAIN_MODULE_NAME  # the file is analysed as the program that runs: its `__main__` block runs
        return UNKNOWN

    def own_locals(self) -> frozenset[str]:
        """The locals of the function running now (none at the module's top level)."""
        running = self.call_stack[-1].fn if self.call_stack else None if self.module_unit else self.root_fn
        if running is None:
            return frozenset()
        found = self.ctx.local_names.get(running)
        if found is None:
            found = self.ctx.local_names[running] = bound_names(running)
        return found

    def _expr_Lambda(self, node: ast.Lambda) -> Value:
        return FunctionValue(node, scope=[self.state.env, *self.scopes], module_path=self.ctx.path)

    def _expr_Starred(self, node: ast.Starred) -> Value:
        return self.eval(node.value)

    def _element(self, container: TensorSeq | TensorMap, index: ast.expr) -> Value:
        """``xs[i]``: the element at a constant index or key; any element (a stand-in for each) otherwise."""
        if isinstance(container, TensorMap) or container.base is None:  # not the pieces `split` returns
            self.container_reads.add(id(index))
        if isinstance(index, ast.Slice) and isinstance(container, TensorSeq) and container.base is None:
            return self._sliced(container, index)
        evaluated = self.eval(index)
        key = _const_key(index)
        if key is None and isinstance(container, TensorMap) and isinstance(evaluated, Const) \
                and isinstance(evaluated.value, str):
            key = evaluated.value  # `modules[name]` with the name known
        if isinstance(container, TensorMap):
            if key is None and len(container.items) > 1:
                if len({v.cls for v in container.items.values() if isinstance(v, ModuleValue)}) > 1:
                    return layer_choice(list(container.items.values()))  # `modules[name]`: one of them
                return self._iter_element(TensorSeq(list(container.items.values())), index)
            return container.element(key)
        if isinstance(key, int) or container.base is not None:
            return container.element(key if isinstance(key, int) else None)
        return self._iter_element(container, index)

    def _sliced(self, container: TensorSeq, index: ast.Slice) -> Value:
        """``xs[1:]``, ``layers[:-1]``: a list of some of the items, never one of them.  Known exactly for a list
        written out as a display, or grown by ``append`` only where it was made (``TensorSeq.counted``); for a list
        grown by ``append`` elsewhere (in a loop's iteration standing for many) only a prefix-relative slice
        (non-negative bounds) keeps the order its items were added in; otherwise we cannot tell which remain.  A
        comprehension's list is alike in every element, so any slice of it is too."""
        parts = [index.lower, index.upper, index.step]
        given = [None if part is None else self.eval(part) for part in parts]
        if container.uniform:
            return TensorSeq(list(container.items), uniform=True)
        bounds = [None if part is None else _const_int(part) if _const_int(part) is not None
                  else value.value if isinstance(value, Const) and type(value.value) is int else None
                  for part, value in zip(parts, given)]  # (`feats[-self.num_outs:]` with the count known)
        if any(part is not None and bound is None for part, bound in zip(parts, bounds)) or bounds[2] == 0:
            return UNKNOWN
        if bounds == [None, None, -1]:  # `outs[::-1]`: every item, in reverse order
            return TensorSeq(container.items[::-1], literal=container.literal)
        exact = container.literal or container.counted is not None  # (`feats[-n:]` of a list counted exactly)
        if not exact and (bounds[2] is not None or any(b is not None and b < 0 for b in bounds[:2])):
            return UNKNOWN
        return TensorSeq(container.items[slice(*bounds)], literal=container.literal,
                         counted=self.unsure_context if container.counted is not None else None)

    def _expr_Tuple(self, node: ast.Tuple | ast.List) -> Value:
        if node.elts and all(isinstance(e, ast.Starred) for e in node.elts):
            spread = [self.eval(e) for e in node.elts]
            if all(isinstance(v, ParamIterable) for v in spread):
                return ParamIterable(spread)  # [*enc.parameters(), *head.parameters()]: still parameters
            node_items = spread
        else:
            node_items = None
        items: list[Value] = []
        exact = True  # every item known: no spread, or spreads of lists that are exactly their items
        for i, e in enumerate(node.elts):
            value = node_items[i] if node_items is not None else self.eval(e)
            if isinstance(e, ast.Starred) and isinstance(value, TensorSeq) and value.base is None:
                items.extend(value.items)  # [*xs, y]
                exact = exact and value.literal
            else:
                items.append(value)
                exact = exact and not isinstance(e, ast.Starred)
        if not items and isinstance(node, ast.List):
            return TensorSeq([], counted=self.unsure_context, display="list")  # `steps = []`: .append() may fill it
        if node_items is None and all(isinstance(i, Const) and isinstance(i.value, str) for i in items) \
                and not any(isinstance(e, ast.Starred) for e in node.elts):
            return Const(tuple(i.value for i in items))  # `["0", "2"]`: names, known one by one
        if any(isinstance(i, NumberFrom) for i in items) and not any(
                isinstance(i, (Tensor, Derived)) or isinstance(i, NumberFrom) and i.array_of is not None for i in items):
            return _numbers(items, node)  # (a list of arrays over tensors' memory holds those arrays themselves)
        if all(isinstance(i, PLAIN) for i in items):
            if isinstance(node, ast.List) and node_items is None and all(is_plain_data(i) for i in items):
                # `totals = [loss]` of numbers: a list whose items the code may replace (`totals[0] -= x.item()`)
                return TensorSeq(items, literal=True, display="list")
            return NOT_TENSOR if items and all(is_plain_data(i) for i in items) else UNKNOWN
        # a tuple of models, optimizers, tensors, param groups...; `[pre, *split(g)]` of a tuple written out: its items
        return TensorSeq(items, literal=exact, display="list" if isinstance(node, ast.List) else "tuple")

    _expr_List = _expr_Tuple

    def _expr_Dict(self, node: ast.Dict) -> Value:
        for key in node.keys:
            if key is not None:
                self.eval(key)
        values = [self.eval(v) for v in node.values]
        groups = [v for v in values if isinstance(v, ParamIterable)]
        if groups:
            return TensorSeq(groups)  # an optimizer param group
        items: dict[object, Value] = {}
        for key, value in zip(node.keys, values):
            if key is None:
                if isinstance(value, TensorMap):  # {**other}
                    items.update(value.items)
                continue
            const = _const_key(key)
            items[const if const is not None else object()] = value
        # A config of constants is kept too, and `{}`, which the code then fills (`losses["ce"] = ...`).
        if not node.keys or any(v is not UNKNOWN for v in items.values()):
            return TensorMap(items, display=True)
        return UNKNOWN

    def _expr_ListComp(self, node: ast.ListComp | ast.GeneratorExp) -> Value:
        saved = self.state.copy()
        iterable = UNKNOWN
        for gen in node.generators:
            iterable = self.eval(gen.iter)
            each = literal_modules(iterable, _EACH_ITEM) if len(node.generators) == 1 and not gen.ifs else None
            if each is not None:
                # `sum(b.area for b in [pre, ramp, flat])`: over objects written out, one element per object, as a
                # loop over them runs its body once per item (the first alone would stand for objects of other classes)
                elements = []
                for item in each:
                    self.bind(gen.target, item, node)
                    elements.append(self.eval(node.elt))
                self.state = saved
                if all(isinstance(e, PLAIN) for e in elements):
                    return UNKNOWN
                return TensorSeq(elements, literal=True, display=_comprehension_kind(node))
            self.bind(gen.target, self._iter_element(iterable, gen.iter), node)
            for cond in gen.ifs:
                self.eval(cond)
        element = self.eval(node.elt)
        spread = self._parameters_of_each(node) if isinstance(iterable, ParamIterable) else None
        self.state = saved
        if spread is not None:
            return spread
        if isinstance(iterable, ParamIterable) and _yields_the_parameter(node, iterable.named):
            # `[p for p in model.parameters() if p.requires_grad]`: still the model's parameters (read when an
            # optimizer steps, not now: a module's weights are known once it has run)
            return ParamIterable(iterable.owner)
        if is_plain_data(element) and isinstance(node, ast.ListComp) and len(node.generators) == 1 \
                and not node.generators[0].ifs:
            count = self.range_count(node.generators[0].iter)
            if count is not None and count <= _LISTED_NUMBERS:
                # `[0 for _ in range(steps + 1)]` with `steps` known: that many numbers, exactly
                bound = {n.id for n in ast.walk(node.generators[0].target) if isinstance(n, ast.Name)}
                same = not any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(node.elt))
                return TensorSeq([element if same else NOT_TENSOR for _ in range(count)], literal=True, display="list")
        if isinstance(element, PLAIN):
            return UNKNOWN
        if isinstance(element, NumberFrom):
            return element  # `[l.item() for l in losses]`: numbers read out of tensors, as a list literal of them
        return TensorSeq([element], uniform=True, display=_comprehension_kind(node))  # every element is like this one

    _expr_GeneratorExp = _expr_ListComp

    def _parameters_of_each(self, node: ast.ListComp | ast.GeneratorExp) -> ParamIterable | None:
        """``[p for m in modules for p in m.parameters()]`` over a list of modules we know: the parameters of
        every one of them (not only of the first, which stands for the list's elements elsewhere)."""
        if len(node.generators) != 2 or node.generators[0].ifs:
            return None
        outer, inner = node.generators
        modules = self.eval(outer.iter)
        if not isinstance(modules, TensorSeq) or modules.base is not None or not modules.items:
            return None
        owners: list[Value] = []
        for item in modules.items:
            self.bind(outer.target, item, node)
            params = self.eval(inner.iter)
            if not isinstance(params, ParamIterable) or not _yields_the_parameter(node, params.named):
                return None
            owners.extend(params.owner if isinstance(params.owner, list) else [params.owner])
        return ParamIterable(owners)

    def _expr_NamedExpr(self, node: ast.NamedExpr) -> Value:
        value = self.eval(node.value)
        self.bind(node.target, value, node)
        return value

    def _expr_IfExp(self, node: ast.IfExp) -> Value:
        known = truth(self.eval(node.test))
        if known is not None:  # `nn.ReLU() if act == "relu" else nn.GELU()` with `act` known: that branch only
            return self.eval(node.body if known else node.orelse)
        return join(self.eval(node.body), self.eval(node.orelse))

    def _expr_Compare(self, node: ast.Compare) -> Value:
        exact = self._exact_type_check(node)
        if exact is not None:
            return exact
        values = [self.eval(node.left), *(self.eval(c) for c in node.comparators)]
        if len(values) == 2 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and _NONE in values:
            # `if self.cache is None:` with the cache a tensor made on every path so far (a lazy cache's second
            # call): not None.
            other = values[0] if values[1] == _NONE else values[1]
            if surely_tensor(other):
                return Const(isinstance(node.ops[0], ast.IsNot))
        same = self._one_tensor_throughout(node, values)
        if same is not None:
            return same
        if any(isinstance(v, Tensor) for v in values):
            return new_tensor(node, Grad.NO, label="a boolean mask")
        if all(isinstance(v, Const) for v in values):
            results = [_compare(op, a.value, b.value) for op, a, b in zip(node.ops, values, values[1:])]
            if None not in results:
                return Const(all(results))
        if len(values) == 2 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and _NONE in values:
            # `self.act is not None` with `self.act` a module or config we built: never None (a tensor may be
            # the join of a path where it was None, so it says nothing)
            other = values[0] if values[1] == _NONE else values[1]
            if isinstance(other, (ModuleValue, TensorMap, FunctionValue, CallableRef, ClassRef, ParamIterable)) or (
                    isinstance(other, TensorSeq) and not other.maybe_none):
                return Const(isinstance(node.ops[0], ast.IsNot))
        return NOT_TENSOR

    def _one_tensor_throughout(self, node: ast.Compare, values: list[Value]) -> Value | None:
        """``query is key is value``, ``q.data_ptr() == k.data_ptr()``: True when every operand names the one
        tensor value (one object passed for several parameters, as ``attn(x, x, x)`` does), False for the negated
        forms.  None otherwise: two values we hold apart may still be one tensor when the code runs."""
        if all(isinstance(op, ast.Is) for op in node.ops) or all(isinstance(op, ast.IsNot) for op in node.ops):
            held = values
        elif all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops) and len({type(op) for op in node.ops}) == 1:
            operands = [node.left, *node.comparators]
            if not all(isinstance(o, ast.Call) and isinstance(o.func, ast.Attribute) and o.func.attr == "data_ptr"
                       and not o.args and not o.keywords and isinstance(o.func.value, (ast.Name, ast.Attribute))
                       for o in operands):
                return None
            held = [self.eval(o.func.value) for o in operands]
        else:
            return None
        if not (isinstance(held[0], Tensor) and all(h is held[0] for h in held[1:])):
            return None
        return Const(isinstance(node.ops[0], (ast.Is, ast.Eq)))

    def _exact_type_check(self, node: ast.Compare) -> Value | None:
        """``type(v) is T`` (``==``, ``is not``, ``!=``) and ``type(v) in (T1, T2)`` (``not in``): True or False when
        ``v``'s own class is known (``exact_class``) and each class named is one it can be told apart from; an
        unknown truth otherwise.  Unlike ``isinstance`` a subclass is not the class: a Parameter is not
        ``torch.Tensor``.  None when the comparison is of another form (then evaluated as any comparison)."""
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.Is, ast.NotEq, ast.IsNot, ast.In, ast.NotIn)):
            return None
        call, operand = node.left, node.comparators[0]
        if not (isinstance(call, ast.Call) and self._is_builtin_type(call)):
            return None
        if isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if not isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
                return None
            named = operand.elts
        else:
            named = [operand]
        if not named or not all(isinstance(n, (ast.Name, ast.Attribute)) for n in named):
            return None
        value = self.eval(call.args[0])
        self.type_of(call, value)  # what `type(v)` itself does when evaluated (see `_expr_Call`)
        classes = [self.eval(n) for n in named]
        exact = self.exact_class(value)
        answers = {None if exact is None else self._is_exactly(exact, self.qual(n), c) for n, c in zip(named, classes)}
        same = True if True in answers else False if answers == {False} else None
        if same is None:
            return NOT_TENSOR
        return Const(same == isinstance(node.ops[0], (ast.Eq, ast.Is, ast.In)))

    def exact_class(self, value: Value) -> str | ClassInfo | ast.ClassDef | None:
        """The class ``type(value)`` is, when the analysis knows it: one of the file's classes for an instance
        made from it; ``torch.nn.<Layer>`` for a torch layer built here; ``torch.nn.Parameter`` or ``torch.Tensor``
        for a tensor that is one on every path (``surely_tensor``); ``builtins.list``/``tuple`` for a display
        written out; ``builtins.dict`` for a dict display; the type of a constant (a ``str`` list folded into a
        tuple constant excepted).  None for anything else."""
        if isinstance(value, ModuleValue):
            if value.user_class is not None:  # (a class we do not resolve: its node, still no torch layer)
                return self.ctx.class_of(value) or value.user_class
            if value.torch_module and value.cls.isidentifier():  # built as `nn.<cls>(...)`
                return "torch.nn." + value.cls
            return None
        if isinstance(value, Tensor):
            if not surely_tensor(value) or value.group:
                return None
            return "torch.nn.Parameter" if value.param else "torch.Tensor"
        if isinstance(value, TensorSeq):
            return "builtins." + value.display if value.display and value.base is None and not value.maybe_none \
                and not value.fields else None
        if isinstance(value, TensorMap):
            return "builtins.dict" if value.display else None
        if isinstance(value, Const) and type(value.value) in (bool, int, float, complex, str):
            return "builtins." + type(value.value).__name__
        return None

    def _is_exactly(self, exact: str | ClassInfo | ast.ClassDef, named: str | None, cls: Value) -> bool | None:
        """Is a value whose class is ``exact`` of the class spelled ``named`` (evaluated to ``cls``)?  False only
        when the name is one we can tell apart: another of the file's classes, a torch layer, ``torch.Tensor``,
        ``torch.nn.Parameter``, a builtin type, ``numpy.ndarray``; a name we cannot resolve may be an alias."""
        if isinstance(cls, ClassRef):
            if not isinstance(exact, str):
                return cls.info is exact if isinstance(exact, ClassInfo) else None
            # a class of the file derived from torch.Tensor may be what a tensor is; any other value is not of it
            return None if exact in ("torch.Tensor", "torch.nn.Parameter") else False
        if not isinstance(exact, str):  # an instance of the file's class is of no torch, numpy or builtin class
            return False if named is not None and _tells_apart(named) else None
        if named is None:
            return None
        if named == exact:
            return True
        return False if _tells_apart(named) else None

    def _expr_BoolOp(self, node: ast.BoolOp) -> Value:
        """``a or b``, ``a and b``: what Python returns when the truth of the operands it evaluates is known, else
        unknown.  Like Python, operands past the one that decides are not evaluated (`x is None or x.any()`)."""
        stop = isinstance(node.op, ast.Or)  # `or` returns the first true operand, `and` the first false one
        known = True
        value: Value = UNKNOWN
        for operand in node.values:
            value = self.eval(operand)
            decided = truth(value)
            if decided is None:
                known = False
            elif decided == stop and known:
                return value
        return value if known else UNKNOWN

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            known = truth(operand)
            return Const(not known) if known is not None else (
                new_tensor(node, Grad.NO) if isinstance(operand, Tensor) else NOT_TENSOR)
        if isinstance(operand, Tensor):
            if isinstance(node.op, ast.USub):
                return self.apply_op("neg", [operand], node, "-")
            return new_tensor(node, Grad.NO)
        if isinstance(operand, NumberFrom):
            return operand
        if int_const(operand) is not None and isinstance(node.op, (ast.USub, ast.UAdd)):
            return Const(-operand.value if isinstance(node.op, ast.USub) else operand.value)  # `xs[-1]`
        return (operand if operand in (INT, NOT_TENSOR) else INT if is_int(operand)
                else NOT_TENSOR if isinstance(operand, Const) else UNKNOWN)

    def _expr_BinOp(self, node: ast.BinOp) -> Value:
        left, right = (self.read_data(v, side) if isinstance(v, DataAlias) else v
                       for v, side in ((self.eval(node.left), node.left), (self.eval(node.right), node.right)))
        name = BINARY_OPS.get(type(node.op))
        if isinstance(left, Tensor) or isinstance(right, Tensor):
            if name is None:
                return new_tensor(node, Grad.NO)
            result = self.apply_op(name, [left, right], node, _op_symbol(node.op))
            if isinstance(node.op, (ast.Add, ast.Sub)):
                return self.summed(result, [left, right])
            if isinstance(node.op, (ast.Mult, ast.Div)) and not (isinstance(left, Tensor) and isinstance(right, Tensor)):
                scaled = left if isinstance(left, Tensor) else right  # `weight * loss`: the same terms, scaled
                if isinstance(result, Tensor):
                    result.dead_terms, result.terms = scaled.dead_terms, scaled.terms
                    # a factor not known is taken for a weight (`self.cfg.w * loss`), not for a tensor with history
                    result.graph = result.graph - {self.opaque_at.get(id(node))}
            return result
        if isinstance(left, NumberFrom) or isinstance(right, NumberFrom):
            return _numbers([left, right], node)
        if isinstance(left, ParamIterable) and isinstance(right, ParamIterable):
            return ParamIterable([left, right])
        if isinstance(node.op, ast.Add) and any(isinstance(v, ParamIterable) for v in (left, right)) \
                and all(_parameters_or_list_of_them(v) for v in (left, right)):
            # `list(policy.parameters()) + [log_z]`: parameters still, an optimizer's (or a loop's) to take
            return ParamIterable([o for v in (left, right) for o in (v.items if isinstance(v, TensorSeq) else (v,))])
        if (isinstance(node.op, ast.Add) and isinstance(left, TensorSeq) and isinstance(right, TensorSeq)
                and left.base is None and right.base is None):
            # `layers + [nn.Linear(...)]`: a new sequence of both sides' items.
            return TensorSeq([*left.items, *right.items], literal=left.literal and right.literal)
        if is_plain_data(left) and is_plain_data(right):
            # arithmetic is not carried out: a counter (`step += 1`) is some int after its first iteration
            return INT if is_int(left) and is_int(right) else NOT_TENSOR
        if isinstance(left, Derived) or isinstance(right, Derived):
            return Derived(graph_of(left) | graph_of(right), self._grad(left, right))
        return UNKNOWN

    def _expr_Subscript(self, node: ast.Subscript) -> Value:
        container = self.eval(node.value)
        if isinstance(container, Tensor):
            index = _const_key(node.slice)
            if container.assumed and isinstance(index, int):
                return self._assumed_element(container, index, node)
            if self._is_advanced_index(node.slice):
                return self.apply_op("index", [container], node, "indexing")
            return self._view(container, node)
        if isinstance(container, (TensorSeq, TensorMap)):
            return self._element(container, node.slice)
        if isinstance(container, ParamsByName):
            key = self.eval(node.slice)
            return self.parameter_named(container.owner, key, node) if isinstance(key, (Const, NameTemplate)) \
                else UNKNOWN
        if isinstance(container, Derived):
            self.eval(node.slice)
            return container
        if isinstance(container, NumberFrom):  # `arr[:, 1:]`: still numbers read out of tensors
            self.eval(node.slice)
            return NumberFrom(container.sources, node, container.markers)
        if isinstance(container, ParamGroups) and not container.params:
            self.eval(node.slice)
            key = _const_key(node.slice)
            if key == "params":
                return ParamGroups(container.optimizer, params=True)  # a group's parameter list
            return container if not isinstance(key, str) else UNKNOWN  # `param_groups[0]`: a group; `g["lr"]`
        info = self.ctx.class_of(container) if isinstance(container, ModuleValue) else None
        found = find_method(self.ctx.classes_for(info), info, "__getitem__") if info is not None else None
        if found is not None:  # `model[2]` of a class of the file that defines __getitem__
            result = self.inline(found[0], [self.eval(node.slice)], {}, node, self_value=container, owner=found[1])
            return result if result is not None else UNKNOWN
        if isinstance(container, ModuleValue) and container.children:
            index = _const_key(node.slice)
            if index is None:  # `self.layers[i]` in a followed `__getitem__(self, i)`: the caller's known index
                known = self.eval(node.slice)
                index = known.value if isinstance(known, Const) and type(known.value) in (int, str) else None
            else:
                self.eval(node.slice)
            if isinstance(index, int) and -len(container.children) <= index < len(container.children):
                return container.children[index]
            if isinstance(index, str) and index in container.attrs:
                return container.attrs[index]  # ModuleDict
            if index is None and all(c.cls == container.children[0].cls for c in container.children):
                return container.children[0]  # layers[i] of alike layers: any of them
            return UNKNOWN
        self.eval(node.slice)
        return UNKNOWN

    def _assumed_element(self, container: Tensor, index: int, node: ast.Subscript) -> Tensor:
        """``x[0]`` of an argument taken to be one tensor without proof: it may as well be the first item of a
        tuple (``batch[0]``, ``inputs[2]``), so each constant index is a tensor of its own, never a view sharing
        the others' memory: a save of ``x[0]`` and a write to ``x[2]`` are not told as one tensor's story."""
        key = (container.storage.id, index)
        element = self.assumed_elements.get(key)
        if element is None:
            element = self.assumed_elements[key] = Tensor(
                Storage(), container.requires_grad, leaf=container.leaf, origin=node, label=f"`{ast.unparse(node)}`",
                graph=container.graph, assumed=True)
            self.run_log.reached_through(container, element)
        return element

    def _expr_Attribute(self, node: ast.Attribute) -> Value:
        owner = self.eval(node.value)
        if not isinstance(owner, _ATTRIBUTE_OWNERS):  # none of the tests below holds (most often: unknown)
            return UNKNOWN
        if isinstance(owner, Tensor):
            if node.attr in VIEW_ATTRS:
                return self._view(owner, node)
            if node.attr == "data":
                return DataAlias(owner, node)
            if node.attr == "grad":
                # A manual update reads it under no_grad.  After a backward, a read of the gradient of a tensor the
                # code itself asked gradients for (`x = torch.randn(..., requires_grad=True)`: a saliency, an
                # input gradient) relies on that backward having delivered it; parameters' gradients are read for
                # clipping and logging too, where None is expected of a frozen part, so only a step counts there.
                # A parameter an optimizer holds is meant to be trained: a look at its gradient after a backward
                # relies on it too (the one the optimizer's step would read).
                sources = frozenset().union(*(t.graph for t in owner.group or (owner,)))
                after_backward = any(s.kind == "backward" for s in self.sinks)
                if owner.leaf and (not self.state.grad_enabled or (
                        owner.requires_grad and not owner.param and not owner.group and after_backward)):
                    self.grad_reads.append(GradRead(node, sources, f"`{ast.unparse(node)}`", self._next(),
                                                    updates=not self.state.grad_enabled, path=self.frame_sites))
                elif owner.leaf and owner.param and owner.requires_grad and after_backward:
                    holder = next((o for o in self.optimizers if o.held & sources), None)
                    if holder is not None:
                        self.grad_reads.append(GradRead(node, sources & holder.held, f"`{ast.unparse(node)}`",
                                                        self._next(), updates=False, held_by=holder.ctor,
                                                        path=self.frame_sites))
                grad = new_tensor(node, Grad.NO, label=f"{owner.label}.grad")
                grad.is_grad = True
                return grad
            return NOT_TENSOR if node.attr in SHAPE_ATTRS else UNKNOWN
        if isinstance(owner, DataAlias):
            return UNKNOWN
        if isinstance(owner, TensorSeq) and node.attr in owner.fields:  # `x.max(dim=1).indices`
            return owner.items[owner.fields.index(node.attr)]
        if isinstance(owner, ModuleValue):
            value = self._module_attr(owner, node.attr, node)
            if self.stale and isinstance(value, Tensor) and id(value) in self.kept and not self.stale.isdisjoint(
                    value.graph):
                self.kept_reads.append(KeptRead(self.kept[id(value)][0], node, self.seq, value.graph))
            return value
        if isinstance(owner, Derived):
            return owner
        if isinstance(owner, CallableRef):
            return self.imported(f"{owner.qualname}.{node.attr}")
        if isinstance(owner, ClassRef) and owner.info.autograd_function and node.attr == "apply":
            return FunctionApply(owner.info)  # `double = DoubleOp.apply`
        if isinstance(owner, FunctionContext):
            return owner.attrs.get(node.attr, UNKNOWN)
        if isinstance(owner, OptimizerValue) and node.attr == "param_groups":
            return ParamGroups(owner)
        return UNKNOWN

    def _is_property(self, fn: ast.FunctionDef) -> bool:
        """Decorated ``@property`` or ``@functools.cached_property``: reading the attribute calls it."""
        return any(self.qual(d) in PROPERTY_DECORATORS for d in fn.decorator_list)

    def _class_constant(self, info: ClassInfo, name: str) -> Value | None:
        """``self.NAME`` that no ``self.NAME = ...`` set: the last ``NAME = value`` of the class body found along the
        MRO, when that value is a constant, an imported name or a tuple of them (read where the class is defined:
        names are looked up in the module, not in the running function).  None when a method of those classes
        assigns ``x.NAME`` (its value then depends on whether that method ran)."""
        chain = mro(self.ctx.classes_for(info), info)
        if any(name in _assigned_attributes(cls.node) for cls in chain):
            return None
        for cls in chain:
            value = next((s.value for s in reversed(cls.node.body) if isinstance(s, ast.Assign) and len(s.targets) == 1
                          and isinstance(s.targets[0], ast.Name) and s.targets[0].id == name), None)
            if value is None:
                continue
            if not _declared_constant(value):
                return None
            scopes, self.scopes = self.scopes, []
            env, self.state.env = self.state.env, {}
            try:
                return self.eval(value)
            finally:
                self.scopes, self.state.env = scopes, env
        return None

    def _module_attr(self, module: ModuleValue, name: str, node: ast.AST) -> Value:
        if name in module.attrs:
            return module.attrs[name]
        info = self.ctx.class_of(module)
        found = find_method(self.ctx.classes_for(info), info, name) if info is not None else None
        if found is not None and self._is_property(found[0]):  # `self.state.value`: the getter runs
            return self._call_method(found, module, [], {}, node)
        if found is not None:  # `step = self.train_step`: a bound method
            return FunctionValue(found[0], self_value=module, owner=found[1])
        if info is not None and info.module_path in (None, self.ctx.path):
            declared = self._class_constant(info, name)
            if declared is not None:  # `SUPPORTED = (nn.Conv2d, nn.Linear)` in the class body
                return declared
        if name == "_modules":  # `model._modules`: its children by the names torch gives them
            named = named_submodules(module, False, self._is_nn_module)
            return TensorMap(dict(named), exact=True) if named is not None else UNKNOWN
        if module.torch_module:
            info = self.k.module(module.cls)
            if (name in ("weight", "bias") and (info is None or info.has_params)) or (
                    info is not None and info.has_parameter(name)):
                rg = Grad.NO if module.frozen else Grad.YES
                param = new_tensor(node, rg, leaf=True, param=True, label=f"the {module.cls} {name}")
                param.dtype = module.dtype
                module.attrs[name] = param
                return param
        return UNKNOWN

    def parameter_named(self, module: ModuleValue, name: Const | NameTemplate, node: ast.AST) -> Value:
        """``getattr(rnn, f"bias_hh_l{i}")``, ``params["fc.weight"]`` of ``dict(model.named_parameters())``: the
        parameter of that (dotted) name.  A name with an unknown piece (a layer index) is a parameter when the
        torch class has parameters of that form; each read of it stands for one of them, so none is kept."""
        text = name.value if isinstance(name, Const) else name.text
        if not isinstance(text, str):
            return UNKNOWN
        *path, last = text.split(".")
        for part in path:
            if "{n}" in part:
                return UNKNOWN
            module = self._module_attr(module, part, node)
            if not isinstance(module, ModuleValue):
                return UNKNOWN
        if isinstance(name, Const) or "{n}" not in last:
            value = self._module_attr(module, last, node)
            return value if isinstance(value, Tensor) and value.param else UNKNOWN
        info = self.k.module(module.cls) if module.torch_module else None
        if info is None or not info.has_parameter(last):
            return UNKNOWN
        rg = Grad.NO if module.frozen else Grad.YES
        param = new_tensor(node, rg, leaf=True, param=True, label=f"the {module.cls} {last.replace('{n}', 'N')}")
        param.dtype = module.dtype
        return param



_LISTED_NUMBERS = 64  # a comprehension of more numbers than this stays unknown
_EACH_ITEM = 16  # a comprehension over up to this many objects written out gives one element per object


def _assigned_attributes(cls: ast.ClassDef) -> frozenset[str]:
    """The attribute names the class's code assigns (``self.x = ...``, ``obj.x += ...``), read once per class."""
    return syntax_fact(cls, "_gradguard_assigned", lambda: frozenset(
        n.attr for n in every_node(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)))


def _declared_constant(value: ast.expr) -> bool:
    """An expression of a class body whose value does not depend on when it is read: a constant, a name or dotted
    name (a class such as ``nn.Conv2d``), or a tuple or list of those."""
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_declared_constant(e) for e in value.elts)
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, (ast.Constant, ast.Name))


def _op_symbol(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.MatMult: "@"}.get(type(op), "op")


def _yields_the_parameter(node: ast.ListComp | ast.GeneratorExp, named: bool) -> bool:
    """The comprehension's element is the parameter its last ``for`` binds (``p``, or ``p`` of ``n, p``)."""
    target = node.generators[-1].target
    if named:
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2):
            return False
        target = target.elts[1]
    return isinstance(target, ast.Name) and isinstance(node.elt, ast.Name) and node.elt.id == target.id


def _compare(op: ast.cmpop, a: object, b: object) -> bool | None:
    """A comparison of two constants as Python makes it; None for the ones not modelled (``<`` of strings)."""
    if isinstance(op, (ast.Eq, ast.Is)):
        return a == b
    if isinstance(op, (ast.NotEq, ast.IsNot)):
        return a != b
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(a, str) and isinstance(b, (str, tuple)):
        return (a in b) == isinstance(op, ast.In)
    return None


def _parameters_or_list_of_them(value) -> bool:
    """``model.parameters()``, or a list of parameters and such iterables (``[log_z]``)."""
    if isinstance(value, ParamIterable):
        return True
    return isinstance(value, TensorSeq) and value.base is None and bool(value.items) and all(
        isinstance(i, ParamIterable) or (isinstance(i, Tensor) and i.leaf and i.param) for i in value.items)


def _tells_apart(named: str) -> bool:
    """A class name no other spelling of a known class can hide behind: ``torch.Tensor``, ``torch.nn.Parameter``,
    ``numpy.ndarray``, a torch layer (``torch.nn.<Layer>``), a builtin type (``builtins.list``)."""
    if named in ("torch.Tensor", "torch.nn.Parameter", "numpy.ndarray"):
        return True
    if named.startswith("torch.nn.") and named.count(".") == 2:
        return named[len("torch.nn."):].isidentifier()
    return named.startswith("builtins.") and isinstance(getattr(builtins, named[len("builtins."):], None), type)


def _comprehension_kind(node: ast.expr) -> str | None:
    """``type()`` of what a comprehension makes: a list comprehension's list (a generator is no display)."""
    return "list" if isinstance(node, ast.ListComp) else None
