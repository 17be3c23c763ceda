"""``copy.deepcopy`` through a class's own ``__getstate__``/``__setstate__``, and ``torch.save``/``torch.load`` of an
in-memory buffer (``io.BytesIO``), or of a file (a constant path) this run wrote on a path known to run, as a deep
copy with a memo of its own: each load makes its own copies.

A state that serialises a module and the optimizer over its parameters in separate ``torch.save`` calls loads them
back unlinked: the loaded optimizer holds copies of the parameters of its own, which the loaded module does not use
(skorch's ``NeuralNet.__getstate__``).  After a deep copy through the protocol, a loaded optimizer held by the copy
whose parameters' modules are not the copy's, while a module of the copy is a copy of the same original, is recorded
as a ``CopyTrained`` event whose ``separated`` is the ``torch.save`` of the optimizer: the engine then asks for a step
of it after a backward that reaches the module's parameters, and no backward that reaches its own.  Outside a deep
copy, loads of a module and of the optimizer over its parameters from separate saves are paired the same way
(``loaded``).  Claimed only when every link is known: both protocol methods are the file's plain Python, the state is
a dict whose every item is known, and no object the copy holds defines its own protocol."""

from __future__ import annotations

import ast

from .classes import find_method
from .events import CopyTrained
from .values import (
    NOT_TENSOR,
    PLAIN,
    UNKNOWN,
    ModuleValue,
    OptimizerValue,
    ParamIterable,
    Serialised,
    Tensor,
    TensorMap,
    TensorSeq,
    Value,
    new_tensor,
)

STATE_METHODS = ("__getstate__", "__setstate__")
OTHER_PROTOCOL = ("__deepcopy__", "__reduce__", "__reduce_ex__")


def deepcopy_by_state(interp, original: ModuleValue, node: ast.AST) -> Value:
    """``copy.deepcopy(obj)`` of an instance whose class defines ``__getstate__`` and ``__setstate__``: the state
    ``__getstate__`` returns, deep-copied with the call's memo, handed to ``__setstate__`` of a new instance."""
    info = interp.ctx.class_of(original)
    if info is None:
        return UNKNOWN
    classes = interp.ctx.classes_for(info)
    methods = [find_method(classes, info, name) for name in STATE_METHODS]
    if None in methods or any(find_method(classes, info, name) is not None for name in OTHER_PROTOCOL):
        return UNKNOWN
    if any(interp._copies_by_own_protocol(v) for v in [*original.children, *original.attrs.values()]
           if isinstance(v, ModuleValue)):
        return UNKNOWN
    state = interp._call_method(methods[0], original, [], {}, node)
    if not isinstance(state, TensorMap) or not state.exact:
        return UNKNOWN
    made = ModuleValue(original.cls, original.torch_module, original.inplace, original.ctor,
                       user_class=original.user_class, bound_class=original.bound_class)
    memo: dict[int, Value] = {id(original): made}
    copied = TensorMap({k: _copy(interp, v, node, memo) for k, v in state.items.items()}, exact=True)
    _remember(interp, memo, node)
    interp.state_copies += 1
    try:
        interp._call_method(methods[1], made, [copied], {}, node)
    finally:
        interp.state_copies -= 1
    _separated(interp, made, node)
    return made


def load(interp, buffer: Serialised, node: ast.AST) -> Value:
    """``torch.load`` of a buffer one ``torch.save`` wrote: a deep copy of what it saved, with a memo of its own."""
    memo: dict[int, Value] = {}
    made = _copy(interp, buffer.value, node, memo)
    for copy in memo.values():
        if isinstance(copy, OptimizerValue):
            interp.loaded_at[id(copy)] = buffer.node
    _remember(interp, memo, node)
    if not interp.state_copies:  # (a deep copy through the protocol pairs what its loads made, see `_separated`)
        _pair_loads(interp, memo, buffer.node, node)
    return made


def _pair_loads(interp, memo: dict[int, Value], save: ast.AST, node: ast.AST) -> None:
    """Loads of a module and of the optimizer over its parameters, each from its own ``torch.save``: the optimizer's
    load made copies of the module of its own (``hidden``), another load the module the code trains (its twin: a
    copy of the same original)."""
    made = [v for v in memo.values() if isinstance(v, ModuleValue)]
    hidden = [(m, save, node) for optimizer in memo.values() if isinstance(optimizer, OptimizerValue)
              for m in _owner_modules(optimizer) if any(m is v for v in made)]
    trained = [m for m in made if not any(m is h for h, _, _ in hidden)]
    pairs = [(h, twin, s, n) for h, s, n in hidden for twin, _ in interp.loaded_modules]
    pairs += [(h, twin, s, n) for h, s, n in interp.loads_apart for twin in trained]
    for module, twin, optimizer_save, optimizer_load in pairs:
        origin = _origin(interp, module)
        if origin is not None and _origin(interp, twin) == origin:
            interp.copies.append(CopyTrained(optimizer_load, module, twin, interp._next(), separated=optimizer_save,
                                             loaded=True))
    interp.loads_apart.extend(hidden)
    interp.loaded_modules.extend((m, node) for m in trained)


def _owner_modules(optimizer: OptimizerValue) -> list[ModuleValue]:
    return [m for owner in optimizer.owners
            for m in ((owner.owner if isinstance(owner.owner, list) else [owner.owner])
                      if isinstance(owner, ParamIterable) else [owner]) if isinstance(m, ModuleValue)]


def copyable(value: Value) -> bool:
    """Modules and optimizers, or a dict, list or tuple of them: what a load of a file copies as ``_copy`` does."""
    if isinstance(value, (TensorMap, TensorSeq)) and not (isinstance(value, TensorSeq) and value.base is not None):
        items = list(value.items.values()) if isinstance(value, TensorMap) else value.items
        return bool(items) and all(copyable(v) for v in items)
    return isinstance(value, (ModuleValue, OptimizerValue))


def dict_method(interp, instance: ModuleValue, name: str, node: ast.Call) -> Value:
    """``self.__dict__.copy()`` (every attribute, by name) and ``self.__dict__.update(state)``."""
    args = interp._eval_args(node)
    if name == "copy" and not args:
        return TensorMap(dict(instance.attrs), exact=True)
    if name == "update" and len(args) == 1 and isinstance(args[0], TensorMap) and args[0].exact \
            and all(isinstance(k, str) for k in args[0].items):
        instance.attrs.update(args[0].items)
        return NOT_TENSOR
    interp.escaped.append(instance)
    return UNKNOWN


def _remember(interp, memo: dict[int, Value], node: ast.AST) -> None:
    """The copies a memo made, each with its original's id, and the optimizers among them built."""
    for original, copy in memo.items():
        interp.copy_origins[id(copy)] = (copy, original)
        if isinstance(copy, OptimizerValue):
            interp.optimizer_built(copy, node)


def _copy(interp, value: Value, node: ast.AST, memo: dict[int, Value]) -> Value:
    """A deep copy of a value of a state: what is shared within one memo stays shared."""
    if value is None:
        return UNKNOWN
    if isinstance(value, (Serialised, *PLAIN)):
        return value  # bytes and plain data (an unknown value stays unknown)
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, ModuleValue):
        if interp._copies_by_own_protocol(value):
            return UNKNOWN
        return copy_module(value, node, memo)
    if isinstance(value, Tensor) and value.param:
        memo[id(value)] = new_tensor(node, value.requires_grad, leaf=True, param=True, label=value.label)
        return memo[id(value)]
    if isinstance(value, OptimizerValue):
        owners = [_copy_owner(interp, o, node, memo) for o in value.owners]
        made = OptimizerValue(owners, value.ctor) if owners and all(o is not None for o in owners) else UNKNOWN
        memo[id(value)] = made
        return made
    if isinstance(value, TensorMap):
        return TensorMap({k: _copy(interp, v, node, memo) for k, v in value.items.items()}, exact=value.exact)
    if isinstance(value, TensorSeq) and value.base is None:
        return TensorSeq([_copy(interp, v, node, memo) for v in value.items], literal=value.literal)
    return UNKNOWN


def _copy_owner(interp, owner: Value, node: ast.AST, memo: dict[int, Value]) -> Value | None:
    """What an optimizer's copy holds: the copies of what it holds (made here when this memo has none yet)."""
    if isinstance(owner, ParamIterable):
        owners = owner.owner if isinstance(owner.owner, list) else [owner.owner]
        mapped = [_copy(interp, o, node, memo) for o in owners]
        if not all(isinstance(m, ModuleValue) for m in mapped):
            return None
        return ParamIterable(mapped if isinstance(owner.owner, list) else mapped[0], owner.named)
    copy = _copy(interp, owner, node, memo)
    return copy if isinstance(copy, (ModuleValue, Tensor)) else None


def _separated(interp, made: ModuleValue, node: ast.AST) -> None:
    """The optimizers the copy holds that were loaded apart from the modules it holds: each module one trains is a
    copy of the same original as one of the copy's, and not that one (a ``CopyTrained`` of the copy's module)."""
    modules = _modules(made)
    for optimizer in copied_optimizers(made):
        save = interp.loaded_at.get(id(optimizer))
        if save is None:
            continue
        for owner in optimizer.owners:
            for module in (owner.owner if isinstance(owner.owner, list) else [owner.owner]) \
                    if isinstance(owner, ParamIterable) else [owner]:
                if not isinstance(module, ModuleValue) or any(m is module for m in modules):
                    continue
                origin = _origin(interp, module)
                twin = next((m for m in modules if origin is not None and _origin(interp, m) == origin), None)
                if twin is not None:
                    interp.copies.append(CopyTrained(node, module, twin, interp._next(), separated=save))


def _origin(interp, copy: Value) -> int | None:
    found = interp.copy_origins.get(id(copy))
    return found[1] if found is not None and found[0] is copy else None


def _modules(root: ModuleValue) -> list[ModuleValue]:
    """The modules an object holds (itself, its attributes and children, theirs), each once."""
    found, stack = [], [root]
    while stack:
        value = stack.pop()
        if isinstance(value, ModuleValue) and not any(v is value for v in found):
            found.append(value)
            stack.extend([*value.children, *value.attrs.values()])
    return found


def copy_module(module: ModuleValue, node: ast.AST, memo: dict[int, Value] | None = None) -> ModuleValue:
    """``copy.deepcopy(model)``: the same structure with parameters of its own (an EMA teacher, a target net).
    As deepcopy's memo does, what the original shares stays shared in the copy (one submodule or parameter held
    twice), and an optimizer held beside the modules is copied over the copies' parameters (its ``owners``
    mapped; one whose parameters cannot be mapped becomes unknown)."""
    memo = {} if memo is None else memo
    if id(module) in memo:
        return memo[id(module)]
    copy = memo[id(module)] = ModuleValue(module.cls, module.torch_module, module.inplace, module.ctor,
                                          user_class=module.user_class, bound_class=module.bound_class)
    copy.children = [copy_module(c, node, memo) for c in module.children]
    optimizers = []
    for name, value in module.attrs.items():
        if isinstance(value, ModuleValue):
            copy.attrs[name] = copy_module(value, node, memo)
        elif isinstance(value, Tensor) and value.param:
            if id(value) not in memo:
                memo[id(value)] = new_tensor(node, value.requires_grad, leaf=True, param=True, label=value.label)
            copy.attrs[name] = memo[id(value)]
        elif isinstance(value, OptimizerValue):
            optimizers.append(name)
        elif not isinstance(value, Tensor):
            copy.attrs[name] = value
    for name in optimizers:
        copy.attrs[name] = _copy_optimizer(module.attrs[name], memo)
    return copy


def _copy_optimizer(optimizer: OptimizerValue, memo: dict[int, Value]) -> Value:
    """The deep copy of an optimizer held by a copied object: its owners are the copies of its own owners (the
    interpreter then gives it their parameters); unknown when one of them was not copied with it."""
    if id(optimizer) in memo:
        return memo[id(optimizer)]
    owners = [_copied_owner(o, memo) for o in optimizer.owners]
    made = OptimizerValue(owners, optimizer.ctor) if owners and all(o is not None for o in owners) else UNKNOWN
    memo[id(optimizer)] = made
    return made


def _copied_owner(value: Value, memo: dict[int, Value]) -> Value | None:
    if isinstance(value, ParamIterable):
        owners = value.owner if isinstance(value.owner, list) else [value.owner]
        mapped = [memo.get(id(o)) for o in owners]
        if any(m is None for m in mapped):
            return None
        return ParamIterable(mapped if isinstance(value.owner, list) else mapped[0], value.named)
    return memo.get(id(value))


def copied_optimizers(value: Value, seen: set[int] | None = None) -> list[OptimizerValue]:
    """The optimizers a deep copy made (held in the copied objects' attributes)."""
    seen = set() if seen is None else seen
    if not isinstance(value, ModuleValue) or id(value) in seen:
        return []
    seen.add(id(value))
    found = [v for v in value.attrs.values() if isinstance(v, OptimizerValue)]
    for v in [*value.children, *value.attrs.values()]:
        found.extend(copied_optimizers(v, seen))
    return found
