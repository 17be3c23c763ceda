"""Abstract values the tensor dataflow computes for each name.

The model mirrors what autograd tracks at run time, just enough to decide the rules:
a tensor has a *storage* with a version counter (shared by views and ``.detach()``
aliases), a tri-state ``requires_grad``, whether it is a leaf, what it is a view
of, and the set of saved-for-backward records its graph contains.
"""

from __future__ import annotations

import ast
import enum
import itertools
from dataclasses import dataclass, field, replace

_ids = itertools.count(1)


class Grad(enum.IntEnum):
    """Does the tensor require grad?  MAYBE when it depends on values we cannot see."""

    NO = 0
    MAYBE = 1
    YES = 2


@dataclass(eq=False)
class Storage:
    """Memory shared by a tensor, its views and its ``.detach()`` aliases: one version counter."""

    version: int = 0
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(eq=False)
class Save:
    """An op saved a tensor (at a given version) for its backward."""

    storage: Storage
    version: int
    op: str  # "torch.sigmoid", "nn.Linear", "*"
    role: str  # "input" or "output"
    node: ast.AST
    certain: bool  # False when saving depends on a MAYBE requires_grad
    consumed: bool = False  # a backward without retain_graph freed it
    id: int = field(default_factory=lambda: next(_ids))
    path: tuple[ast.AST, ...] = ()  # the followed calls' sites, outermost first, that the op ran inside
    of_view: bool = False  # the saved tensor is a view (another tensor than its storage's base)
    operand: ast.AST | None = None  # an input's: the expression of the op whose value it saved, when the code shows it


MAX_TERMS = 16  # terms of a sum a loss keeps apart (a longer sum's later terms are not told apart)


@dataclass(eq=False)
class Tensor:
    storage: Storage
    requires_grad: Grad = Grad.NO
    leaf: bool = True  # no grad_fn: made by a factory, a Parameter, or detached
    base: "Tensor | None" = None  # the tensor this is a view of
    multi_view: str | None = None  # "Unbind"/"Split": an output of a multi-view op (or a view of one)
    param: bool = False
    graph: frozenset[int] = frozenset()  # ids of Saves reachable from this tensor's grad_fn
    origin: ast.AST | None = None
    label: str = "tensor"  # how messages name it ("`x`", "the output of torch.sigmoid")
    nograd_view: bool = False  # a view made under no_grad of a tensor that requires grad
    # a view made under no_grad of a tensor that does not: torch refuses an in-place write with grad mode on
    # only when the written value requires grad
    nograd_plain_view: bool = False
    group: tuple["Tensor", ...] = ()  # `p` in `for p in model.parameters()`: stands for every parameter
    lost_sources: frozenset[int] = frozenset()  # `t.detach()`: the graph ids of what it was detached from
    # Taken to be one tensor without proof (a forward's unannotated argument may be a tuple): never unpacked
    # or iterated as one, so that `a, b = x` is not explained as the views `unbind` returns.
    assumed: bool = False
    # `t.detach()`: the tensor whose memory (and version counter) this alias shares; a write through the alias
    # changes that tensor's values without a grad_fn for the change.
    detached_from: "Tensor | None" = None
    # Bound under no_grad to a name that held a leaf requiring grad (``w = w - lr * w.grad``): that leaf's grad
    # sources.  Merged with the leaf (a rebinding on one path), the name is taken to be this tensor.
    rebound_from: frozenset[int] = frozenset()
    # Made inside a custom autograd Function as a view of its input (``Foo.apply`` returning an input it did not
    # mark dirty, or the ``BackwardHookFunction`` a full backward hook wraps a module's inputs and outputs in):
    # where that happened.  torch refuses an in-place write to it (or to a view of it) while it requires grad.
    custom_view: ast.AST | None = None
    # A sum (a loss) with terms that carry no gradient: the markers of the `.detach()`/`.data` cuts that every
    # tensor such a term was computed from went through.  A backward of the sum gets nothing from those terms.
    dead_terms: frozenset[int] = frozenset()
    # A sum (a loss): the graphs of its terms (a nested sum's own terms), at most ``MAX_TERMS``, to tell which
    # of them reaches the parameters an optimizer then steps.
    terms: tuple[frozenset[int], ...] = ()
    # A view of a leaf that requires grad, bound to a name by this statement (`b = conv.bias.view(na, -1)`): the
    # writes through that name are the binding's (see `Mutation.view_site`).
    bound_at: ast.stmt | None = None
    # Made by a factory inside `torch.inference_mode()` (an inference tensor): the statement of that block's
    # function that made it.  torch refuses an in-place update of it outside inference mode.
    inference_made: ast.AST | None = None
    # A `.grad`: the gradient an optimizer step or a manual update reads.
    is_grad: bool = False
    # Made by an op whose result is a new contiguous tensor whatever its inputs' layout (`torch.stack`, `cat`).
    contiguous: bool = False
    # A view by an op that returns one only when the layout allows (`reshape` of what may not be contiguous,
    # `flatten`, `contiguous`): it may be a copy (or the input itself).
    maybe_copy: bool = False
    # Joined with ``None`` on another path (``h = None`` before a loop that makes it a tensor): ``is None`` on it
    # is not known.
    maybe_none: bool = False
    # Its dtype's canonical name ("float32", "int64", "bool") when known (see ``dtypes.py``); None: not known,
    # and then nothing is claimed of it (a conversion to a dtype it may already have may be a copy or itself).
    dtype: str | None = None
    # One of the regions a split (``chunk``, ``split``, ``unbind``, ``tensor_split``... : ``SEQUENCE_VIEWS``) cut
    # its base into: (the split's id, which piece).  Two pieces of one split share storage but no element.
    piece: tuple[int, int] | None = None

    def root(self) -> "Tensor":
        t = self
        while t.base is not None:
            t = t.base
        return t

    def view_chain(self):
        t = self
        while t is not None:
            yield t
            t = t.base


@dataclass(eq=False)
class DataAlias:
    """``t.data``: the same storage without autograd's version counter (writes are invisible)."""

    tensor: Tensor
    node: ast.AST | None = None  # the `t.data` expression: where a read of it leaves the graph


@dataclass(eq=False)
class TensorSeq:
    """A tuple/list of tensors, e.g. the outputs of ``unbind``/``split``/``chunk``."""

    items: list["Value"]
    multi_view: str | None = None
    base: Tensor | None = None
    nograd: bool = False  # made under no_grad: its pieces are no_grad views
    # Written out as a display (`[a, b]`) and not grown since: these are exactly its items, so a loop over it
    # runs once per item.
    literal: bool = False
    # Built by a comprehension and not grown since: its one item stands for every element, so any slice of it
    # (`batches[:n]`, bounds unknown) holds elements of that same form.
    uniform: bool = False
    # Made empty (`feats = []`) and grown since only by `append` run wherever the list was made (no loop
    # iteration standing for many, no branch that may not run, between): these are exactly its items, in order,
    # so its tail is known too (`feats[-2:]`).  The unsure context it was made in (``Interpreter.unsure_context``).
    counted: tuple[object, ...] | None = None
    # A named tuple's field names, item by item (`values, indices` of `max(x, dim)`): `.indices` is an item.
    fields: tuple[str, ...] = ()
    maybe_none: bool = False  # another path left the name None (see `_not_surely`)
    # The pieces of a split of ``base`` (``SEQUENCE_VIEWS``): disjoint regions of its memory; the split's id.
    split: int | None = None
    # ``*args`` of a followed call: the expressions its caller wrote for these items, one by one (flags and
    # scalars such as a slope are read from a call's syntax; ``F.leaky_relu_(t, *args)`` reads them there).
    written: tuple[ast.expr, ...] | None = None
    # "list" or "tuple": what ``type()`` of it is, when it was written out as a display or comprehension of that
    # kind (``type(v) in (list, tuple)`` is then decided); None when it came from anything else.
    display: str | None = None

    def element(self, index: int | None) -> "Value":
        if index is not None and -len(self.items) <= index < len(self.items):
            return self.items[index]
        if self.base is not None:
            piece = view_of(self.base, multi_view=self.multi_view, nograd=self.nograd)
            if self.split is not None and index is not None and index >= 0:  # (-1 may be any of them)
                piece.piece = (self.split, index)
            return piece
        return self.items[0] if self.items else UNKNOWN


@dataclass(eq=False)
class TensorMap:
    """A dict whose values may be tensors (``{"h": h}``, ``state["h"]``), by constant key."""

    items: dict[object, "Value"]
    exact: bool = False  # these are exactly its items (a module's `_modules`): a loop over them runs once per item
    display: bool = False  # written out as a dict display (`{"h": h}`): ``type()`` of it is ``dict``

    def element(self, key: object) -> "Value":
        if key in self.items:
            return self.items[key]
        values = list(self.items.values())
        return values[0] if len(values) == 1 else UNKNOWN


@dataclass(eq=False)
class Serialised:
    """An in-memory buffer or its bytes (``io.BytesIO()``, ``buf.getvalue()``) holding what one ``torch.save``
    wrote into it (``value``, saved at ``node``); ``torch.load`` of it is a deep copy with a memo of its own."""

    value: "Value | None" = None
    node: ast.AST | None = None


@dataclass(eq=False)
class ModuleValue:
    """An instance: of a torch ``nn`` class (``cls`` = its name), or of one of the file's own classes
    (``user_class``), which may derive from a torch class (then ``cls`` names that class and ``torch_module``
    is set, so ``super().forward`` and ``self.weight`` behave as torch's) or from nothing at all (a plain
    ``class Trainer:``, a loss object with ``__call__``)."""

    cls: str
    torch_module: bool
    inplace: bool = False
    ctor: ast.AST | None = None  # where it was constructed (for GG005)
    attrs: dict[str, "Value"] = field(default_factory=dict)
    children: list["ModuleValue"] = field(default_factory=list)  # nn.Sequential
    # `nn.ModuleList(Block() for _ in range(n))`: its one child stands for every layer (a loop over it runs once).
    each: bool = False
    user_class: ast.ClassDef | None = None
    # The class with the bases its class statement's run gave it (``classes.bind``), for a class made in a factory.
    bound_class: object = None
    frozen: bool = False  # `.requires_grad_(False)`: its parameters do not require grad
    # `torch.compile(m)`: the call that compiled it (its forward is traced with its backward at each call)
    compiled: ast.AST | None = None
    made_inplace: ast.AST | None = None  # `m.inplace = True` after it was built: the line that made it write in place
    # `m.register_full_backward_hook(f)` (or its pre-hook): torch then runs the module's inputs and outputs through
    # a `BackwardHookFunction`, whose outputs are views that may not be written in place.  Where it was registered.
    backward_hooked: ast.AST | None = None
    # `nn.Embedding(..., max_norm=m)`: each lookup renormalises, in place, the rows of its weight it returns.
    renorms_weight: bool = False
    # The dtype of a torch layer's parameters, when known (built in the code analysed, see ``dtypes.py``).
    dtype: str | None = None

    def set_training(self, mode: "Value") -> None:
        """``Module.train(mode)`` / ``.eval()``: torch sets ``training`` on the module and every submodule (``mode``
        a ``Const`` bool, or ``UNKNOWN`` when it is not known which mode, or whether the call ran)."""
        seen: set[int] = set()

        def visit(value) -> None:
            if isinstance(value, ModuleValue) and id(value) not in seen:
                seen.add(id(value))
                value.attrs["training"] = mode
                for item in [*value.attrs.values(), *value.children]:
                    visit(item)
            elif isinstance(value, TensorSeq) and value.base is None:  # a plain list or tuple of submodules
                for item in value.items:
                    visit(item)
            elif isinstance(value, TensorMap):
                for item in value.items.values():
                    visit(item)

        visit(self)

    def freeze(self, frozen: bool = True) -> None:
        self.frozen = frozen
        for value in [*self.attrs.values(), *self.children]:
            if isinstance(value, ModuleValue):
                value.freeze(frozen)
            elif isinstance(value, Tensor) and value.param:
                value.requires_grad = Grad.NO if frozen else Grad.YES


@dataclass(eq=False)
class NumberFrom:
    """A Python number, list or numpy array read out of a tensor (``.item()``, ``float(t)``, ``.numpy()``)."""

    sources: frozenset[int]  # the grad sources of the tensor it was read from
    origin: ast.AST | None = None
    markers: frozenset[int] = frozenset()  # the GraphBreak events of the lines that read it out
    # `t.numpy()`, `torch.from_numpy(a)`: the array shares `t`'s memory (not its version counter), so an in-place
    # write to the array is a write to `t` that autograd never sees.
    array_of: Tensor | None = None


@dataclass(eq=False)
class OptimizerValue:
    """``torch.optim.X(params)``: ``step()`` writes every parameter it owns, in place, under no_grad."""

    owners: list["Value"]
    ctor: ast.AST | None = None
    made_in: ast.AST | None = None  # the followed call whose own frame ran ``ctor`` (None: the analysed code's)
    # The grad sources of the parameters it took when it was built: replacing one of them on the module later
    # leaves the optimizer updating the old tensor.
    held: frozenset[int] = frozenset()
    # The sequence number of the last write into its parameter groups (`group["params"] = [...]`,
    # `add_param_group`): from then on it may hold other parameters than ``held``; and the grad sources of the
    # parameters known to be written in.
    regrouped: int = 0
    regrouped_with: frozenset[int] = frozenset()


@dataclass(eq=False)
class ParamGroups:
    """``opt.param_groups``, one of its groups (``params``: a group's ``"params"`` list): a write of parameters
    into it changes which tensors the optimizer steps (a write of ``"lr"`` does not)."""

    optimizer: OptimizerValue
    params: bool = False


@dataclass(eq=False)
class ParamIterable:
    """``model.parameters()``: iterating yields leaf parameters (``named_parameters()``: (name, parameter))."""

    owner: "Value"
    named: bool = False


@dataclass(eq=False)
class ParamsByName:
    """``dict(model.named_parameters())``: a parameter looked up by its name (``params["weight_ih_l0"]``)."""

    owner: "ModuleValue"


@dataclass(frozen=True)
class NameTemplate:
    """An f-string whose formatted pieces are not all known (``f"bias_hh_l{i}"``): its text with each unknown
    piece written ``{n}``, the way the knowledge table writes a layer index in a parameter's name."""

    text: str


@dataclass(eq=False)
class Derived:
    """Something computed from tensors that we cannot model (a loss from an unknown function, a distribution).

    It is never a write target, but it carries the graph: a ``.backward()`` on it frees the saves,
    and returning it means the graph reaches a backward elsewhere.
    """

    graph: frozenset[int]
    requires_grad: "Grad" = None  # type: ignore[assignment]


@dataclass(eq=False)
class FunctionValue:
    """A function of the file as a value: a nested ``def`` (a closure over ``scope``, the live variables of
    the functions around its definition, innermost first), a ``lambda``, or a bound method (``self_value``,
    found on class ``owner``)."""

    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    scope: list[dict[str, "Value"]] | None = None
    self_value: "Value | None" = None
    owner: object = None  # the ClassInfo the method was found on (``super()`` starts after it)
    module_path: str | None = None  # the project module it is defined in, when not the analysed file


@dataclass(eq=False)
class CallableRef:
    """A named callable from an import, held in a variable: ``act = torch.sigmoid``, ``loss_fn = F.mse_loss``."""

    qualname: str


@dataclass(eq=False)
class LayerChoice:
    """One of several layers, not known which: ``{"relu": nn.ReLU(), "tanh": nn.Tanh()}[name]``,
    ``nn.ReLU() if c else MyGELU()``.  Calling it runs each layer on the arguments and joins the outputs, as an
    if/else would; anything else about it (its attributes, its class) is unknown."""

    layers: tuple["ModuleValue", ...]


def layer_choice(values: list["Value"]) -> "Value":
    """The choice among ``values`` when each is a layer (a torch layer, or a subclass of one of the file's) that
    writes nothing in place as built and has no backward hook; unknown otherwise."""
    layers: list[ModuleValue] = []
    for v in values:
        for m in (v.layers if isinstance(v, LayerChoice) else (v,)):
            if not (isinstance(m, ModuleValue) and m.torch_module and not m.inplace
                    and m.made_inplace is None and m.backward_hooked is None):
                return UNKNOWN
            if m not in layers:
                layers.append(m)
    return layers[0] if len(layers) == 1 else LayerChoice(tuple(layers))


@dataclass(eq=False)
class PartialValue:
    """``functools.partial(f, *args, **kwargs)``: a call of it calls ``f`` with those arguments first."""

    func: "Value"
    args: list["Value"]
    kwargs: dict[str, "Value"]


@dataclass(eq=False)
class KeywordArgs:
    """``**kwargs`` of a followed call: the keyword arguments its caller wrote that no named parameter took, as
    syntax (flags such as ``inplace=True`` are read from a call's syntax) with their values, and the call that
    wrote them (``site``): a call that spreads them (``F.relu(t, **kwargs)``) behaves as if written there."""

    keywords: list[ast.keyword]
    values: dict[str, "Value"]
    site: ast.AST


@dataclass(eq=False)
class ClassRef:
    """One of the file's classes as a value (``cls = Trainer``; ``cls()`` makes an instance)."""

    info: object  # ClassInfo


@dataclass(eq=False)
class FunctionApply:
    """``Foo.apply`` of a custom ``torch.autograd.Function`` of the file (``info``: its ClassInfo)."""

    info: object


@dataclass(eq=False)
class FunctionContext:
    """``ctx`` in a custom Function's ``forward``: the saves ``ctx.save_for_backward`` made, the storages
    ``ctx.mark_dirty`` and ``ctx.mark_non_differentiable`` named, and whatever else the code stores on it."""

    function: str
    inputs: frozenset[int] = frozenset()  # the storages of the tensors ``apply`` was given
    saves: list[Save] = field(default_factory=list)
    dirty: set[int] = field(default_factory=set)
    non_differentiable: set[int] = field(default_factory=set)
    attrs: dict[str, "Value"] = field(default_factory=dict)
    packed: bool = False  # the forward returned: torch packed its saves (and their versions) then


@dataclass(eq=False)
class HookHandle:
    """What ``m.register_full_backward_hook(f)`` returns: ``.remove()`` takes the hook off ``module``."""

    module: "ModuleValue"


@dataclass(eq=False)
class SuperRef:
    """``super()`` in a method of class ``owner``: attribute look-ups start after it in the MRO."""

    self_value: "ModuleValue"
    owner: object  # ClassInfo


@dataclass(frozen=True)
class Const:
    """A Python constant the analysis can see through names, defaults, attributes and comparisons: ``True``,
    ``"relu"``, ``None``, ``1``.  It decides which branch of an ``if`` runs, which flag a layer is built with and
    how many times a ``range`` loop runs; for everything else it is a non-tensor like ``NOT_TENSOR`` (an int one
    like ``INT``)."""

    # A list or tuple written out of strings (`["0", "2"]`) is a tuple of them: a loop over it runs once per name.
    value: bool | str | int | None | tuple[str, ...]


def int_const(value: "Value") -> int | None:
    """The value of a known int (not a bool), else None."""
    return value.value if isinstance(value, Const) and type(value.value) is int else None


def is_int(value: "Value") -> bool:
    """An int, known (``Const(1)``) or not (``INT``): it indexes basically and binds to an int argument."""
    return value is INT or int_const(value) is not None


def truth(value: "Value") -> bool | None:
    """The truth of a value if the analysis knows it (a constant), else None."""
    return bool(value.value) if isinstance(value, Const) else None


class Opaque(enum.Enum):
    UNKNOWN = "unknown"  # we cannot tell; never flagged
    NOT_TENSOR = "not-tensor"  # int, float, str, list of numbers, numpy array...
    INT = "int"  # an int: basic indexing


@dataclass(eq=False)
class ModuleIterable:
    """``model.modules()``/``children()``: iterating yields a stand-in for any submodule, whose ``weight`` and
    ``bias`` stand for all of ``owner``'s parameters (``named_*``: (name, submodule))."""

    owner: "Value"
    named: bool = False
    recursive: bool = True  # modules() (the owner and every descendant), not children()


UNKNOWN = Opaque.UNKNOWN
NOT_TENSOR = Opaque.NOT_TENSOR
INT = Opaque.INT

Value = (Tensor | DataAlias | TensorSeq | TensorMap | ModuleValue | LayerChoice | ParamIterable | ModuleIterable
         | Derived | NumberFrom | OptimizerValue | ParamGroups | FunctionValue | CallableRef | PartialValue | ClassRef
         | SuperRef | KeywordArgs
         | FunctionApply | FunctionContext | HookHandle | Const | NameTemplate | ParamsByName | Opaque | Serialised)

# Values that are plain Python data, never a tensor: what `x = 0`, `flag = True` or `name = "relu"` hold.
PLAIN = (Const, NameTemplate, Opaque)


def is_plain_data(value: "Value") -> bool:
    """An int, a float, a string, a bool, None...: known not to be a tensor (UNKNOWN is not)."""
    return isinstance(value, (Const, NameTemplate)) or value in (INT, NOT_TENSOR)


def new_id() -> int:
    """A fresh id: for saves, and as the "grad source" of a leaf that requires grad (so breaks can be traced)."""
    return next(_ids)


def new_tensor(node: ast.AST | None, requires_grad: Grad = Grad.NO, *, leaf: bool = True, label: str = "tensor",
               param: bool = False, graph: frozenset[int] = frozenset()) -> Tensor:
    if requires_grad and leaf and not graph:
        graph = frozenset({new_id()})  # a grad source
    return Tensor(Storage(), requires_grad, leaf=leaf, origin=node, label=label, param=param, graph=graph)


def literal_modules(iterable: Value, limit: int) -> list[Value] | None:
    """The items of a list written out, or of an exact mapping's ``items()``/``values()``, when each is a module
    we built (or a ``(name, module)`` pair), at most ``limit`` of them: a loop over them runs once per item (and a
    comprehension over them gives one element per item).  None otherwise."""
    if not (isinstance(iterable, TensorSeq) and iterable.literal and iterable.base is None
            and 0 < len(iterable.items) <= limit):
        return None

    def module_of(item: Value) -> Value:
        if isinstance(item, TensorSeq) and item.literal and len(item.items) == 2:
            return item.items[1]
        return item
    if all(isinstance(module_of(i), ModuleValue) and module_of(i).cls != "<unknown>" for i in iterable.items):
        return list(iterable.items)
    return None


def graph_tensor_behind(t: Tensor) -> Tensor | None:
    """The tensor with a grad_fn whose memory a write to ``t`` changes: ``t`` or a base it is a view of, or the
    tensor a ``.detach()`` alias (or a view of one) was detached from.  None when no graph tensor is written."""
    for x in t.view_chain():
        owner = x.detached_from or x
        if not owner.leaf and owner.requires_grad != Grad.NO:
            return owner
    return None


def snapshot(t: Tensor) -> Tensor:
    """A frozen copy of a tensor and its view chain, so later statements cannot change what an event saw."""
    return replace(t, base=snapshot(t.base) if t.base is not None else None)


def disjoint(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` lie (within) different pieces of one split: same memory, no element in common."""
    pieces = {t.piece for t in a.view_chain() if t.piece is not None}
    return any(t.piece is not None and t.piece not in pieces and any(t.piece[0] == p[0] for p in pieces)
               for t in b.view_chain())


def view_of(base: Tensor, node: ast.AST | None = None, multi_view: str | None = None, nograd: bool = False) -> Tensor:
    """A view shares storage (and version counter) with its base; multi-view-ness is inherited.

    ``nograd``: the view is made under no_grad, so it does not require grad itself, but torch
    remembers and refuses an in-place write to it once grad mode is back on.
    """
    plain = nograd and base.requires_grad == Grad.NO
    nograd = nograd and base.requires_grad > Grad.NO
    return Tensor(
        base.storage,
        Grad.NO if nograd else base.requires_grad,
        leaf=False if base.requires_grad else base.leaf,
        base=base,
        multi_view=multi_view or base.multi_view,
        param=False,
        graph=base.graph,
        origin=node or base.origin,
        label=base.label,
        nograd_view=nograd or base.nograd_view,
        nograd_plain_view=plain or base.nograd_plain_view,
        custom_view=base.custom_view,
        dtype=base.dtype,
    )


def _join_sequences(a: TensorSeq, b: TensorSeq) -> Value:
    """Two lists a name holds on two paths: alike item by item, or unknown."""
    if len(a.items) != len(b.items):
        return UNKNOWN
    return TensorSeq([join(x, y) for x, y in zip(a.items, b.items)], literal=a.literal and b.literal,
                     nograd=a.nograd and b.nograd, maybe_none=a.maybe_none or b.maybe_none,
                     display=a.display if a.display == b.display else None)


def grown(before: Value, after: Value) -> TensorSeq | None:
    """A list a loop grew (`layers = layers + [...]` in each iteration, the list before it a prefix of the one
    after it): after the loop the name holds the grown list, as a loop that made a tensor of `loss = 0.0` holds
    that tensor."""
    if not (isinstance(before, TensorSeq) and isinstance(after, TensorSeq)) or before.base is not None \
            or after.base is not None:
        return None
    if len(before.items) < len(after.items) and all(x is y for x, y in zip(before.items, after.items)):
        return TensorSeq(list(after.items), nograd=after.nograd, maybe_none=before.maybe_none or after.maybe_none)
    return None


def _join_layer_classes(a: CallableRef, b: CallableRef) -> Value:
    """`act = activation if last else output_activation` with two torch layer classes: calling it builds a
    torch layer of one of them, which the knowledge knows nothing specific of (no save, no in-place write, maybe
    parameters), but whose output is a tensor like any layer's."""
    names = []
    for ref in (a, b):
        parts = ref.qualname.split(".")
        if len(parts) != 3 or parts[:2] != ["torch", "nn"] or not parts[2][:1].isupper():
            return UNKNOWN
        names.extend(parts[2].split("|"))
    return CallableRef("torch.nn." + "|".join(sorted(set(names))))


def join(a: Value, b: Value) -> Value:
    """Merge the values a name has on two control-flow paths (precision first: unknown unless alike)."""
    if a is b:
        return a
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        if a.storage is b.storage:
            kept = a if a.requires_grad >= b.requires_grad else b
            if a.dtype != b.dtype:  # `x.view(torch.int32)` on one path
                kept = replace(kept, dtype=None)
            return kept if a.piece == b.piece else replace(kept, piece=None)  # either piece: it may overlap both
        # `if c: w = w - lr * w.grad` under no_grad: on the path that rebinds, the leaf stops getting gradients
        # for good, so the name is the rebound tensor (whose graph shows where it is used) and not the leaf.
        for new, old in ((a, b), (b, a)):
            if new.rebound_from and old.leaf and new.rebound_from <= old.graph:
                return new
        # Different tensors: keep the one that carries more risk but mark grad as uncertain.
        keep = a if len(a.graph) >= len(b.graph) else b
        other = b if keep is a else a
        merged = Tensor(
            keep.storage,
            keep.requires_grad if keep.requires_grad == other.requires_grad else Grad.MAYBE,
            leaf=keep.leaf and other.leaf,
            base=keep.base,
            multi_view=keep.multi_view if keep.multi_view == other.multi_view else None,
            custom_view=keep.custom_view if keep.custom_view is other.custom_view else None,
            dead_terms=keep.dead_terms | other.dead_terms,
            param=keep.param and other.param,
            graph=keep.graph | other.graph,
            origin=keep.origin,
            label=keep.label,
            maybe_none=a.maybe_none or b.maybe_none,
            dtype=a.dtype if a.dtype == b.dtype else None,
        )
        return merged
    if isinstance(a, Const) or isinstance(b, Const):  # two different constants, or a constant and other data
        if is_plain_data(a) and is_plain_data(b):
            # `1 == True` in Python, but they are not the same constant to a branch or a loop
            return a if a == b and type(a) is type(b) and type(a.value) is type(b.value) else \
                INT if is_int(a) and is_int(b) else NOT_TENSOR
        a, b = (INT if is_int(v) else NOT_TENSOR if isinstance(v, Const) else v for v in (a, b))
    if isinstance(a, Opaque) and isinstance(b, Opaque):
        return a if a == b else UNKNOWN
    if isinstance(a, TensorSeq) and isinstance(b, TensorSeq) and a.base is None and b.base is None:
        return _join_sequences(a, b)
    if isinstance(a, CallableRef) and isinstance(b, CallableRef):
        return _join_layer_classes(a, b)
    if isinstance(a, (ModuleValue, LayerChoice)) and isinstance(b, (ModuleValue, LayerChoice)):
        return layer_choice([a, b])
    # `total = 0` before a loop that adds numbers read out of tensors: after it, such a number (either way no tensor)
    if isinstance(a, NumberFrom) and isinstance(b, NumberFrom) and a.array_of is None and b.array_of is None:
        return NumberFrom(a.sources | b.sources, a.origin, a.markers | b.markers)
    if a in (INT, NOT_TENSOR) and isinstance(b, NumberFrom) and b.array_of is None:
        return b
    if b in (INT, NOT_TENSOR) and isinstance(a, NumberFrom) and a.array_of is None:
        return a
    # `loss = 0.0` before a loop that makes it a tensor: after the loop it is the tensor.
    if a in (INT, NOT_TENSOR) and isinstance(b, (Tensor, Derived, TensorSeq)):
        return _not_surely(b)
    if b in (INT, NOT_TENSOR) and isinstance(a, (Tensor, Derived, TensorSeq)):
        return _not_surely(a)
    if a is UNKNOWN or b is UNKNOWN:
        return UNKNOWN
    return UNKNOWN


def _not_surely(value: Value) -> Value:
    """A tensor that another path left a number or ``None``: whether it is ``None`` is no longer known (marked on
    the tensor itself, so every name bound to it says so: a loss of knowledge, never a claim)."""
    if isinstance(value, (Tensor, TensorSeq)):
        value.maybe_none = True
    return value


def surely_tensor(value: Value) -> bool:
    """A tensor that is one on every path the analysis followed (``t is None`` is False): not a function's
    argument (its caller may pass ``None``), not assumed, not joined with ``None``."""
    return (isinstance(value, Tensor) and not value.maybe_none and not value.assumed
            and not isinstance(value.origin, ast.arg))


def graph_of(value: Value) -> frozenset[int]:
    """The ids of the saves reachable from a value's graph."""
    if isinstance(value, (Tensor, Derived)):
        return value.graph
    if isinstance(value, NumberFrom):
        return value.markers
    if isinstance(value, TensorSeq):
        graph = frozenset().union(*(graph_of(i) for i in value.items)) if value.items else frozenset()
        return graph | (value.base.graph if value.base is not None else frozenset())
    if isinstance(value, TensorMap):
        return frozenset().union(*(graph_of(i) for i in value.items.values())) if value.items else frozenset()
    return frozenset()


_SHARED = (ast.AST, enum.Enum, str, int, float, bool, frozenset, type(None))


def copy_values(env: dict[str, Value], untyped: bool = False) -> dict[str, Value]:
    """A copy of an environment whose tensors, storages, containers and instances are new objects (aliasing
    between them kept), so that analysing one function cannot change what another one sees.  Syntax nodes
    and immutable values are shared.

    ``untyped``: the copied tensors and modules have no known dtype (what ``dtypes.forget_dtypes`` does to the
    copy, in the same walk: it reaches the same values, since what the copy shares holds no tensor or module)."""
    memo: dict[int, object] = {}
    kinds = _COPY_KINDS
    typed = (Tensor, ModuleValue) if untyped else ()

    def copy(value):
        how = kinds.get(type(value))
        if how is None:
            how = kinds[type(value)] = _copy_kind(type(value))
        if how is _SHARE:
            return value
        if id(value) in memo:
            return memo[id(value)]
        if how is list:
            result = memo[id(value)] = []
            result.extend(copy(v) for v in value)
            return result
        if how is dict:
            result = memo[id(value)] = {}
            result.update((k, copy(v)) for k, v in value.items())
            return result
        if how is tuple:
            return tuple(copy(v) for v in value)
        result = memo[id(value)] = object.__new__(type(value))
        for name in how:
            object.__setattr__(result, name, copy(getattr(value, name)))
        if typed and isinstance(result, typed):
            result.dtype = None
        return result

    try:
        return copy(env)
    finally:
        del copy  # the function holds itself through its cell, and the memo with every copy: freed now, not by the collector


_SHARE = object()  # ``copy_values`` gives the value itself
_COPY_KINDS: dict[type, object] = {}  # type -> _SHARE, list, dict, tuple, or its dataclass fields' names


def _copy_kind(kind: type) -> object:
    """How ``copy_values`` copies a value of this type, worked out once per type."""
    if issubclass(kind, _SHARED):
        return _SHARE
    for container in (list, dict, tuple):
        if issubclass(kind, container):
            return container
    if not hasattr(kind, "__dataclass_fields__") or getattr(kind, "shared_by_copies", False):
        return _SHARE  # plain data about the file (a ClassInfo), never written by the analysis
    return tuple(kind.__dataclass_fields__)
