"""Tensor dataflow over one function body, in statement order.

An abstract interpreter: it walks statements once (loop bodies twice, so that a
tensor saved in iteration i-1 meets the write of iteration i), keeps an
environment of abstract values, records which tensors ops save for backward
(from the generated torch knowledge), and emits a ``Mutation`` for every
in-place write plus ``Sink``s where graphs are used.  It never raises on odd
code: anything it does not understand becomes ``UNKNOWN``, which no rule flags.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..knowledge import OpInfo, TorchKnowledge
from .events import Mutation, Sink
from .imports import normalize, qualified_name
from .jedi_oracle import MODULE_PREFIX, PARAMETER, TENSOR, JediOracle
from .values import (
    INT,
    NOT_TENSOR,
    UNKNOWN,
    DataAlias,
    Derived,
    Grad,
    ModuleValue,
    Opaque,
    ParamIterable,
    Save,
    Storage,
    Tensor,
    TensorSeq,
    Value,
    join,
    new_tensor,
    snapshot,
    view_of,
)

_BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floor_divide",
    ast.Mod: "remainder",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}
_AUG_SYMBOL = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=", ast.Mod: "%=",
               ast.Pow: "**=", ast.MatMult: "@=", ast.BitAnd: "&=", ast.BitOr: "|=", ast.BitXor: "^="}

# API knowledge (not autograd knowledge): which torch callables build new tensors from data.
FACTORIES = {
    "tensor", "as_tensor", "asarray", "from_numpy", "randn", "rand", "randint", "randperm", "zeros", "ones",
    "empty", "full", "arange", "linspace", "logspace", "eye", "normal", "bernoulli", "multinomial",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like", "tril_indices",
}
TENSOR_METHOD_FACTORIES = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
GRAD_OFF_CONTEXTS = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"}
GRAD_ON_CONTEXTS = {"torch.enable_grad", "torch.autograd.enable_grad"}
SET_GRAD = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
VIEW_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}
SHAPE_ATTRS = {"shape", "dtype", "device", "ndim", "is_leaf", "requires_grad", "grad_fn", "is_cuda", "layout"}
NOT_TENSOR_METHODS = {"item", "tolist", "numpy", "size", "dim", "numel", "stride", "data_ptr", "is_contiguous",
                      "element_size", "nelement", "ndimension", "get_device", "__len__", "type"}
SAME_TENSOR_METHODS = {"to", "type_as", "float", "double", "half", "bfloat16", "cpu", "cuda", "long", "int", "bool"}
MODULE_RETURNING_METHODS = {"train", "eval", "to", "cuda", "cpu", "float", "double", "half", "requires_grad_",
                            "zero_grad", "apply", "share_memory"}
# torch.distributions take logits and immediately normalise them with logsumexp, which saves its input.
DISTRIBUTIONS_SAVING_LOGITS = {"Categorical", "OneHotCategorical", "Bernoulli", "Binomial", "Multinomial",
                               "RelaxedOneHotCategorical", "Geometric"}


@dataclass
class ClassInfo:
    """A class of this file that subclasses nn.Module: its ``__init__`` tells what ``self.x`` is."""

    node: ast.ClassDef
    init: ast.FunctionDef | None


@dataclass
class Context:
    """What is shared by every function of one file."""

    knowledge: TorchKnowledge
    imports: dict[str, str]
    classes: dict[str, ClassInfo]
    depth: int = 0
    oracle: "JediOracle | None" = None  # asked about calls into other modules of the project


@dataclass
class State:
    env: dict[str, Value] = field(default_factory=dict)
    grad_enabled: bool = True

    def copy(self) -> "State":
        return State(dict(self.env), self.grad_enabled)


def _merge(a: State, b: State) -> State:
    env = {}
    for name in a.env.keys() | b.env.keys():
        if name in a.env and name in b.env:
            env[name] = join(a.env[name], b.env[name])
        else:
            env[name] = a.env.get(name, b.env.get(name, UNKNOWN))
    return State(env, a.grad_enabled or b.grad_enabled)


def _const_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _const_int(node.operand)
        return -inner if inner is not None else None
    return None


class Interpreter:
    """Runs one function (or the module's top level) and collects mutations and sinks."""

    def __init__(self, ctx: Context, self_value: ModuleValue | None = None):
        self.ctx = ctx
        self.k = ctx.knowledge
        self.state = State()
        self.saves: list[Save] = []
        self.mutations: list[Mutation] = []
        self.sinks: list[Sink] = []
        self.data_writes: list[Mutation] = []
        self.seq = 0
        self.self_value = self_value
        self.written_names: set[str] = set()  # names written in place in this unit: worth asking jedi about

    # ----------------------------------------------------------------- helpers
    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def qual(self, node: ast.expr) -> str | None:
        q = qualified_name(node, self.ctx.imports)
        return normalize(q) if q else None

    def _save(self, tensor: Tensor, op: str, role: str, node: ast.AST, certain: bool) -> Save:
        save = Save(tensor.storage, tensor.storage.version, op, role, node, certain)
        self.saves.append(save)
        return save

    def _sink(self, kind: str, node: ast.AST, value: Value) -> None:
        graph = _graph_of(value)
        if graph:
            self.sinks.append(Sink(kind, node, graph, self._next()))

    def _grad(self, *values: Value) -> Grad:
        if not self.state.grad_enabled:
            return Grad.NO
        return max((v.requires_grad for v in values if isinstance(v, (Tensor, Derived))), default=Grad.NO)

    # -------------------------------------------------------------- statements
    def run_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, is_forward: bool) -> None:
        for deco in fn.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            if self.qual(target) in GRAD_OFF_CONTEXTS:
                self.state.grad_enabled = False
        args = fn.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        for i, arg in enumerate(params):
            if i == 0 and self.self_value is not None and arg.arg in ("self", "cls"):
                self.state.env[arg.arg] = self.self_value
                continue
            self.state.env[arg.arg] = self._param_value(arg, is_forward)
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                self.state.env[extra.arg] = UNKNOWN
        self.run_block(fn.body)

    def _param_value(self, arg: ast.arg, is_forward: bool) -> Value:
        ann = arg.annotation
        if ann is not None and self._is_tensor_annotation(ann):
            return Tensor(Storage(), Grad.MAYBE, leaf=False, origin=arg, label=f"`{arg.arg}`")
        if ann is not None and isinstance(ann, ast.Name) and ann.id in ("int", "float", "str", "bool"):
            return NOT_TENSOR
        if ann is not None and (self.qual(ann) or "").startswith("torch.nn.") and (self.qual(ann) or "").endswith("Module"):
            return ModuleValue("Module", torch_module=False, ctor=arg)  # model: nn.Module
        if is_forward and ann is None:
            return Tensor(Storage(), Grad.MAYBE, leaf=False, origin=arg, label=f"`{arg.arg}`")
        return UNKNOWN

    def _is_tensor_annotation(self, ann: ast.expr) -> bool:
        if isinstance(ann, ast.Subscript):  # jaxtyping: Float[Tensor, "b d"]
            q = self.qual(ann.value) or ""
            if q.startswith("jaxtyping."):
                return True
            return isinstance(ann.slice, ast.Tuple) and any(self._is_tensor_annotation(e) for e in ann.slice.elts[:1])
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return ann.value in ("Tensor", "torch.Tensor")
        q = self.qual(ann)
        return q in ("torch.Tensor", "torch.nn.Parameter") or (isinstance(ann, ast.Name) and ann.id == "Tensor")

    def run_block(self, body: list[ast.stmt]) -> None:
        if self.ctx.oracle is not None and not self.written_names:
            self.written_names = _names_written_in_place(body)
        for stmt in body:
            self.run_stmt(stmt)

    def run_stmt(self, stmt: ast.stmt) -> None:
        method = getattr(self, f"_stmt_{type(stmt).__name__}", None)
        if method is not None:
            method(stmt)

    def _stmt_Expr(self, stmt: ast.Expr) -> None:
        self.eval(stmt.value)

    def _stmt_Assign(self, stmt: ast.Assign) -> None:
        value = self.eval(stmt.value)
        for target in stmt.targets:
            self.bind(target, value, stmt)

    def _stmt_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        if stmt.value is not None:
            self.bind(stmt.target, self.eval(stmt.value), stmt)

    def _stmt_AugAssign(self, stmt: ast.AugAssign) -> None:
        rhs = self.eval(stmt.value)
        symbol = _AUG_SYMBOL.get(type(stmt.op), "op=")
        op = _BINOPS.get(type(stmt.op))
        if isinstance(stmt.target, ast.Subscript):
            container = self.eval(stmt.target.value)
            if isinstance(container, TensorSeq):  # parts[0] += 1: the element itself is written
                element = container.element(_const_int(stmt.target.slice))
                if isinstance(element, Tensor):
                    self._inplace(stmt, element, f"`{symbol}`", op, [rhs])
            elif isinstance(container, Tensor):
                target, advanced = self._index_target(container, stmt.target.slice)
                self._inplace(stmt, target, f"`{symbol}` on an indexed element", op, [rhs], advanced=advanced)
            return
        current = self.eval(stmt.target)
        if isinstance(current, Tensor):
            self._inplace(stmt, current, f"`{symbol}`", op, [rhs])
        elif isinstance(current, DataAlias):
            self._data_write(stmt, current, f"`.data {symbol}`")
        else:
            if op is not None and isinstance(rhs, Tensor) and isinstance(current, Opaque):
                # `total += loss`: an int/float accumulator becomes a tensor holding rhs's graph.
                self.bind(stmt.target, Tensor(Storage(), rhs.requires_grad, leaf=False, graph=rhs.graph,
                                              origin=stmt, label=rhs.label), stmt)

    def _stmt_Return(self, stmt: ast.Return) -> None:
        if stmt.value is not None:
            self._sink("return", stmt, self.eval(stmt.value))

    def _stmt_If(self, stmt: ast.If) -> None:
        self.eval(stmt.test)
        before = self.state.copy()
        self.run_block(stmt.body)
        after_body = self.state
        self.state = before
        self.run_block(stmt.orelse)
        self.state = _merge(after_body, self.state)

    def _stmt_For(self, stmt: ast.For) -> None:
        iterable = self.eval(stmt.iter)
        element = self._iter_element(iterable, stmt.iter)
        before = self.state.copy()
        for _ in range(2):  # twice: values saved in iteration i-1 meet the writes of iteration i
            self.bind(stmt.target, element, stmt)
            self.run_block(stmt.body)
        self.state = _merge(before, self.state)
        self.run_block(stmt.orelse)

    _stmt_AsyncFor = _stmt_For

    def _stmt_While(self, stmt: ast.While) -> None:
        before = self.state.copy()
        for _ in range(2):
            self.eval(stmt.test)
            self.run_block(stmt.body)
        self.state = _merge(before, self.state)
        self.run_block(stmt.orelse)

    def _stmt_With(self, stmt: ast.With) -> None:
        saved_mode = self.state.grad_enabled
        for item in stmt.items:
            expr = item.context_expr
            if isinstance(expr, ast.Call):
                q = self.qual(expr.func)
                if q in GRAD_OFF_CONTEXTS:
                    self.state.grad_enabled = False
                elif q in GRAD_ON_CONTEXTS:
                    self.state.grad_enabled = True
                elif q in SET_GRAD and expr.args:
                    flag = expr.args[0]
                    if isinstance(flag, ast.Constant) and isinstance(flag.value, bool):
                        self.state.grad_enabled = flag.value
                    else:
                        self.eval(flag)
                else:
                    self.eval(expr)
            else:
                self.eval(expr)
            if item.optional_vars is not None:
                self.bind(item.optional_vars, UNKNOWN, stmt)
        self.run_block(stmt.body)
        self.state.grad_enabled = saved_mode

    _stmt_AsyncWith = _stmt_With

    def _stmt_Try(self, stmt: ast.Try) -> None:
        self.run_block(stmt.body)
        for handler in stmt.handlers:
            self.run_block(handler.body)
        self.run_block(stmt.orelse)
        self.run_block(stmt.finalbody)

    _stmt_TryStar = _stmt_Try

    def _stmt_Match(self, stmt: ast.Match) -> None:
        self.eval(stmt.subject)
        before = self.state.copy()
        merged = None
        for case in stmt.cases:
            self.state = before.copy()
            self.run_block(case.body)
            merged = self.state if merged is None else _merge(merged, self.state)
        self.state = _merge(before, merged) if merged is not None else before

    def _stmt_Delete(self, stmt: ast.Delete) -> None:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                self.state.env.pop(target.id, None)

    # --------------------------------------------------------------- binding
    def bind(self, target: ast.expr, value: Value, stmt: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, (Derived, Opaque)) and target.id in self.written_names:
                value = self._ask_jedi(target, stmt, value)
            if isinstance(value, Tensor) and value.label == "tensor":
                value.label = f"`{target.id}`"
            self.state.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            elements = self._unpack(value, len(target.elts), stmt)
            for elt, item in zip(target.elts, elements):
                if isinstance(elt, ast.Starred):
                    self.bind(elt.value, UNKNOWN, stmt)
                else:
                    self.bind(elt, item, stmt)
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value)
            if isinstance(owner, ModuleValue):
                owner.attrs[target.attr] = value
            if isinstance(owner, DataAlias):
                # `p.data = new`: rebinds storage; the old storage (and any saved copy) is kept.
                owner.tensor.storage = Storage()
                return
            self._sink("escape", stmt, value)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value)
            if isinstance(container, Tensor):
                write_target, advanced = self._index_target(container, target.slice)
                self._inplace(stmt, write_target, "an indexed assignment `[...] =`", None, [value], advanced=advanced,
                              copy_from=value)
            elif isinstance(container, DataAlias):
                self._data_write(stmt, container, "an indexed assignment through `.data`")
            else:
                self._sink("escape", stmt, value)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, UNKNOWN, stmt)

    def _ask_jedi(self, target: ast.Name, stmt: ast.stmt, value: Value) -> Value:
        """``w = make_weight()`` with ``make_weight`` from another module: jedi knows what it returns."""
        call = getattr(stmt, "value", None)
        if self.ctx.oracle is None or not isinstance(call, ast.Call):
            return value
        q = self.qual(call.func)
        if q is None or q.startswith(("torch.", "builtins.")):
            return value
        full_name = self.ctx.oracle.type_of_name(target.lineno, target.col_offset)
        if full_name in PARAMETER:
            return new_tensor(stmt, Grad.YES, leaf=True, param=True, label=f"`{target.id}`")
        if full_name in TENSOR:
            return Tensor(Storage(), Grad.MAYBE, leaf=False, graph=_graph_of(value), origin=stmt)
        if full_name and full_name.startswith(MODULE_PREFIX):
            return ModuleValue(full_name.rsplit(".", 1)[1], torch_module=True, ctor=stmt)
        return value

    def _unpack(self, value: Value, count: int, node: ast.AST) -> list[Value]:
        if isinstance(value, TensorSeq):
            return [value.element(i) for i in range(count)]
        if isinstance(value, Tensor):
            # `a, b = t` iterates t: each element is an output of Unbind.
            return [view_of(value, node, multi_view="Unbind" if value.requires_grad else None) for _ in range(count)]
        if isinstance(value, Derived):
            return [value] * count
        return [UNKNOWN] * count

    def _iter_element(self, iterable: Value, node: ast.expr) -> Value:
        if isinstance(iterable, TensorSeq):
            return iterable.element(None)
        if isinstance(iterable, Tensor):
            return view_of(iterable, node, multi_view="Unbind" if iterable.requires_grad else None)
        if isinstance(iterable, ParamIterable):
            return new_tensor(node, Grad.YES, leaf=True, param=True, label="a parameter")
        if isinstance(iterable, Derived):
            return iterable
        return UNKNOWN

    # ---------------------------------------------------------- in-place writes
    def _index_target(self, container: Tensor, index: ast.expr) -> tuple[Tensor, bool]:
        """``t[i] = v`` writes through a view of ``t`` (basic index) or into ``t`` itself (advanced index)."""
        if self._is_advanced_index(index):
            return container, True
        return view_of(container, index), False

    def _is_advanced_index(self, index: ast.expr) -> bool:
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        for part in parts:
            if isinstance(part, (ast.Slice, ast.Constant)) or _const_int(part) is not None:
                continue
            if isinstance(part, (ast.List, ast.Compare, ast.ListComp)):
                return True
            value = self.eval(part)
            if isinstance(value, (Tensor, TensorSeq)):
                return True
        return False

    def _inplace(self, node: ast.AST, target: Tensor, how: str, twin: str | None, operands: list[Value], *,
                 advanced: bool = False, module: ModuleValue | None = None, functional_inplace: bool = False,
                 copy_from: Value | None = None) -> Tensor:
        """Record a write to ``target``'s storage, then update its abstract state as autograd would."""
        pending = [s for s in self.saves if s.storage is target.storage and not s.consumed
                   and s.version <= target.storage.version]
        self.mutations.append(Mutation(node, snapshot(target), how, self.state.grad_enabled, self._next(), advanced,
                                       module, functional_inplace, pending))
        target.storage.version += 1
        # The write joins the operands' graphs into the target (and its bases, which autograd rebases).
        rg = self._grad(target, *operands)
        extra = frozenset().union(*(_graph_of(v) for v in operands)) if operands else frozenset()
        info = self.k.op(twin) if twin else None
        new_saves: set[int] = set()
        if info is not None and rg:
            args = [target, *operands]
            for pos, conds in info.saves_args.items():
                if pos == 0 or pos >= len(args) or not isinstance(args[pos], Tensor):
                    continue
                cond = self._cond_grad(args, conds)
                if cond:
                    new_saves.add(self._save(args[pos], twin, "input", node, cond == Grad.YES).id)
        for t in target.view_chain():
            t.graph = t.graph | extra | frozenset(new_saves)
            if rg and self.state.grad_enabled and rg > t.requires_grad:
                t.requires_grad = rg
                t.leaf = False  # it now has a grad_fn (CopySlices etc.)
        if info is not None and rg and info.saves_result:
            cond = self._cond_grad([target, *operands], info.saves_result)
            if cond:
                saved = self._save(target, twin, "output", node, cond == Grad.YES)
                for t in target.view_chain():
                    t.graph = t.graph | {saved.id}
        return target

    def _data_write(self, node: ast.AST, alias: DataAlias, how: str) -> None:
        """Writes through ``.data`` bypass the version counter: autograd never notices (kept for the silent-write rule)."""
        self.data_writes.append(Mutation(node, snapshot(alias.tensor), how, self.state.grad_enabled, self._next()))

    def _cond_grad(self, args: list[Value], positions) -> Grad:
        return max((args[p].requires_grad for p in positions if p < len(args) and isinstance(args[p], Tensor)),
                   default=Grad.NO)

    # ----------------------------------------------------------- expressions
    def eval(self, node: ast.expr | None) -> Value:
        if node is None:
            return UNKNOWN
        method = getattr(self, f"_expr_{type(node).__name__}", None)
        if method is None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child)
            return UNKNOWN
        return method(node)

    def _expr_Constant(self, node: ast.Constant) -> Value:
        if isinstance(node.value, int) and not isinstance(node.value, bool):
            return INT
        return NOT_TENSOR

    def _expr_Name(self, node: ast.Name) -> Value:
        return self.state.env.get(node.id, UNKNOWN)

    def _expr_Tuple(self, node: ast.Tuple | ast.List) -> Value:
        items = [self.eval(e) for e in node.elts]
        if any(isinstance(i, Tensor) for i in items):
            return TensorSeq(items)
        return NOT_TENSOR if items and all(i in (INT, NOT_TENSOR) for i in items) else UNKNOWN

    _expr_List = _expr_Tuple

    def _expr_Dict(self, node: ast.Dict) -> Value:
        for v in [*node.keys, *node.values]:
            if v is not None:
                self.eval(v)
        return UNKNOWN

    def _expr_ListComp(self, node: ast.ListComp | ast.GeneratorExp) -> Value:
        saved = self.state.copy()
        for gen in node.generators:
            iterable = self.eval(gen.iter)
            self.bind(gen.target, self._iter_element(iterable, gen.iter), node)
            for cond in gen.ifs:
                self.eval(cond)
        element = self.eval(node.elt)
        self.state = saved
        if isinstance(element, Tensor):
            return TensorSeq([element])
        return UNKNOWN

    _expr_GeneratorExp = _expr_ListComp

    def _expr_NamedExpr(self, node: ast.NamedExpr) -> Value:
        value = self.eval(node.value)
        self.bind(node.target, value, node)
        return value

    def _expr_IfExp(self, node: ast.IfExp) -> Value:
        self.eval(node.test)
        return join(self.eval(node.body), self.eval(node.orelse))

    def _expr_Compare(self, node: ast.Compare) -> Value:
        values = [self.eval(node.left), *(self.eval(c) for c in node.comparators)]
        if any(isinstance(v, Tensor) for v in values):
            return new_tensor(node, Grad.NO, label="a boolean mask")
        return NOT_TENSOR

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> Value:
        operand = self.eval(node.operand)
        if isinstance(operand, Tensor):
            if isinstance(node.op, ast.USub):
                return self.apply_op("neg", [operand], node, "-")
            return new_tensor(node, Grad.NO)
        return operand if operand in (INT, NOT_TENSOR) else UNKNOWN

    def _expr_BinOp(self, node: ast.BinOp) -> Value:
        left, right = self.eval(node.left), self.eval(node.right)
        name = _BINOPS.get(type(node.op))
        if isinstance(left, Tensor) or isinstance(right, Tensor):
            if name is None:
                return new_tensor(node, Grad.NO)
            return self.apply_op(name, [left, right], node, _op_symbol(node.op))
        if left in (INT, NOT_TENSOR) and right in (INT, NOT_TENSOR):
            return INT if left is INT and right is INT else NOT_TENSOR
        if isinstance(left, Derived) or isinstance(right, Derived):
            return Derived(_graph_of(left) | _graph_of(right), self._grad(left, right))
        return UNKNOWN

    def _expr_Subscript(self, node: ast.Subscript) -> Value:
        container = self.eval(node.value)
        if isinstance(container, Tensor):
            if self._is_advanced_index(node.slice):
                return self.apply_op("index", [container], node, "indexing")
            return view_of(container, node)
        if isinstance(container, TensorSeq):
            return container.element(_const_int(node.slice))
        if isinstance(container, Derived):
            self.eval(node.slice)
            return container
        if isinstance(container, ModuleValue) and container.children:
            index = _const_int(node.slice)
            if index is not None and -len(container.children) <= index < len(container.children):
                return container.children[index]
        self.eval(node.slice)
        return UNKNOWN

    def _expr_Attribute(self, node: ast.Attribute) -> Value:
        owner = self.eval(node.value)
        if isinstance(owner, Tensor):
            if node.attr in VIEW_ATTRS:
                return view_of(owner, node)
            if node.attr == "data":
                return DataAlias(owner)
            if node.attr == "grad":
                return new_tensor(node, Grad.NO, label=f"{owner.label}.grad")
            return NOT_TENSOR if node.attr in SHAPE_ATTRS else UNKNOWN
        if isinstance(owner, DataAlias):
            return UNKNOWN
        if isinstance(owner, ModuleValue):
            return self._module_attr(owner, node.attr, node)
        if isinstance(owner, Derived):
            return owner
        return UNKNOWN

    def _module_attr(self, module: ModuleValue, name: str, node: ast.AST) -> Value:
        if name in module.attrs:
            return module.attrs[name]
        if module.torch_module:
            info = self.k.module(module.cls)
            if name in ("weight", "bias") and (info is None or info.has_params):
                param = new_tensor(node, Grad.YES, leaf=True, param=True, label=f"the {module.cls} {name}")
                module.attrs[name] = param
                return param
        return UNKNOWN

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
                return self._module_method(owner, func.attr, node)
        q = self.qual(func)
        if q is not None and q.startswith("torch."):
            return self._torch_call(q, node)
        if q is not None and q.startswith("builtins."):
            return self._builtin_call(q[9:], node)
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
        graph = frozenset().union(*(_graph_of(v) for v in inputs)) if inputs else frozenset()
        if not graph and not any(isinstance(v, (Tensor, Derived)) for v in inputs):
            return UNKNOWN
        return Derived(graph, self._grad(*inputs))

    def _eval_args(self, node: ast.Call) -> list[Value]:
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        return args

    def _builtin_call(self, name: str, node: ast.Call) -> Value:
        args = [self.eval(a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        if name in ("len", "int", "range"):
            return INT if name != "range" else NOT_TENSOR
        if name == "float":
            return NOT_TENSOR
        if name == "enumerate" and args:
            return TensorSeq([INT, self._iter_element(args[0], node.args[0])]) if isinstance(
                args[0], (Tensor, TensorSeq, ParamIterable)) else UNKNOWN
        if name == "reversed" and args:
            return args[0] if isinstance(args[0], TensorSeq) else UNKNOWN
        if name in ("list", "tuple") and args and isinstance(args[0], (TensorSeq, ParamIterable)):
            return args[0]
        if name == "zip":
            items = [self._iter_element(a, n) for a, n in zip(args, node.args)]
            return TensorSeq(items) if any(isinstance(i, Tensor) for i in items) else UNKNOWN
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
        graph = _graph_of(target)
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
            from .classes import init_attributes  # local import: classes builds on this module

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
            return Tensor(tensor.storage, Grad.NO, leaf=True, origin=node, label=f"{tensor.label}.detach()")
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
            return UNKNOWN
        if name == "forward":
            return self.call_module(module, args, node)
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
            return Derived(frozenset().union(*(_graph_of(a) for a in args)), self._grad(*args))
        rg = self._grad(*args)
        graph = frozenset().union(*(_graph_of(a) for a in args))
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
            piece = view_of(base, node) if info.view else Tensor(Storage(), rg, leaf=not rg, graph=graph, origin=node)
            return TensorSeq([], base=piece)
        if tuple_form:
            return Derived(graph | frozenset(saves), rg)  # (values, indices) pairs: not modelled
        if info is not None and info.multi_view and base is not None:
            return TensorSeq([], multi_view=info.multi_view if rg else None,
                             base=Tensor(base.storage, rg, leaf=base.leaf, base=base.base, graph=graph | saves,
                                         origin=node, label=base.label, multi_view=base.multi_view, param=base.param))
        if info is not None and info.view and base is not None:
            result = view_of(base, node)
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
        if not isinstance(x, Tensor):
            for a in args:
                self._sink("escape", node, a)
            info = self.k.module(module.cls) if module.torch_module else None
            if module.torch_module and (info is None or not info.has_params):
                return UNKNOWN
            # A module with parameters returns a tensor that requires grad, whatever we know of its input.
            graph = frozenset().union(*(_graph_of(a) for a in args)) if args else frozenset()
            rg = Grad.YES if self.state.grad_enabled else Grad.NO
            return Tensor(Storage(), rg, leaf=not rg, graph=graph, origin=node, label=f"the output of `{module.cls}`")
        if not module.torch_module:
            rg = Grad.YES if self.state.grad_enabled else Grad.NO
            graph = frozenset().union(*(_graph_of(a) for a in args))
            return Tensor(Storage(), rg, leaf=not rg, graph=graph, origin=node, label=f"the output of `{module.cls}`")
        info = self.k.module(module.cls)
        params = Grad.YES if (info is None or info.has_params) and self.state.grad_enabled else Grad.NO
        if info is None:
            params = Grad.NO
        rg = max(self._grad(*[a for a in args if isinstance(a, Tensor)]), params)
        if not self.state.grad_enabled:
            rg = Grad.NO
        if module.inplace and module.cls in self.k.inplace_kwarg_modules:
            twin = info.functional if info else None
            return self._inplace(node, x, f"`nn.{module.cls}(inplace=True)`", twin, [], module=module)
        graph = frozenset().union(*(_graph_of(a) for a in args))
        saves: set[int] = set()

        def holds(conds: frozenset[str]) -> Grad:
            g = Grad.NO
            if "input" in conds:
                g = max(g, self._grad(x))
            if "params" in conds:
                g = max(g, params)
            return g

        if info is not None and rg:
            cond = holds(info.saves_input)
            if cond:
                saves.add(self._save(x, f"nn.{module.cls}", "input", node, cond == Grad.YES).id)
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
        return result


def _graph_of(value: Value) -> frozenset[int]:
    if isinstance(value, (Tensor, Derived)):
        return value.graph
    if isinstance(value, TensorSeq):
        graph = frozenset().union(*(_graph_of(i) for i in value.items)) if value.items else frozenset()
        return graph | (value.base.graph if value.base is not None else frozenset())
    return frozenset()


def _names_written_in_place(body: list[ast.stmt]) -> set[str]:
    """Names that an augmented assignment, an indexed store or a trailing-underscore method writes."""
    names: set[str] = set()
    for node in (n for stmt in body for n in ast.walk(stmt)):
        target = None
        if isinstance(node, ast.AugAssign):
            target = node.target
        elif isinstance(node, ast.Assign):
            target = next((t for t in node.targets if isinstance(t, ast.Subscript)), None)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_"):
            target = node.func.value
        while isinstance(target, (ast.Subscript, ast.Attribute)):
            target = target.value
        if isinstance(target, ast.Name):
            names.add(target.id)
    return names


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


def _op_symbol(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.MatMult: "@"}.get(type(op), "op")
