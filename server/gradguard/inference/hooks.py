"""Hooks: the ones torch calls with a gradient, and forward hooks, which torch calls with a module's output.

torch hands a tensor hook (``t.register_hook(f)``) and a module's backward pre-hook the gradient tensor that
autograd will pass on; an op such as ``AddBackward`` gives the *same* tensor to every input of the sum, so a
hook that writes it in place changes the gradient of the other branch too, silently (torch 2.13; its docs
say a hook must not modify its argument).  The interpreter runs each such hook on a stand-in for that
gradient to see its writes (``CallsMixin._gradient_hook``).

``m.register_forward_hook(f)`` makes ``m(...)`` call ``f(m, args, output)`` after its forward; a value ``f``
returns replaces the output (``ExtensionPointsMixin.run_forward_hooks``).  ``output`` is the output tensor
itself, not a copy: a hook that keeps it (``self.features.append(output)``, ``store[name] = output``) keeps a
second reference to memory the network goes on using.  An in-place layer after the hooked one (the usual
``nn.ReLU(inplace=True)`` after a convolution) then overwrites what the hook kept: it holds the ReLU's output,
and autograd, which rebases the tensor on the in-place op, gives gradients with respect to that output too,
all without an error (``KeptOutputOverwritten``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..statements import own_nodes
from .events import HookWrite
from .values import FunctionValue, HookHandle, ModuleValue, Tensor

# Position of the gradient (after ``self`` of a bound method): a tensor's hook gets the gradient itself, a
# backward pre-hook ``(module, grad_output)`` a tuple of them.  (A full backward hook's grad_input writes were
# checked with torch and change nothing else; not listed.)
GRADIENT_ARGUMENT = {"register_hook": 0, "register_full_backward_pre_hook": 1}

# The hooks a module runs after its forward with ``(module, args, output)`` (``with_kwargs=True`` changes that
# signature: such a hook is not run).
FORWARD_HOOK_REGISTRATIONS = frozenset({"register_forward_hook"})

# Where a module's forward hooks are kept, in ``ModuleValue.attrs`` (no attribute can have this name).
FORWARD_HOOKS = "<forward_hooks>"


@dataclass(eq=False)
class ForwardHookHandle(HookHandle):
    """What ``m.register_forward_hook(f)`` returns: ``.remove()`` takes ``hook`` off ``module``.  The module's
    hooks are kept as these handles, in the order registered."""

    hook: FunctionValue | None = None
    registered: ast.AST | None = None  # the `register_forward_hook(...)` call


@dataclass
class OutputWrite(HookWrite):
    """A forward hook writes, with grad mode off, the output it is given, which is a view of ``parameter`` (a
    module that returns a slice, an ``expand`` or a ``repeat`` view of its weight): torch lets the write through
    and the parameter itself changes, for every later forward and its gradients, without an error."""

    parameter: Tensor | None = None


@dataclass(eq=False)
class KeptOutput:
    """A forward hook kept its module's output (``proxy``: the reference it was given, a second ``Tensor`` over
    the same storage) at ``version``: ``keep`` stored it in an attribute, a container's element or a list."""

    proxy: Tensor
    version: int
    keep: ast.AST
    registered: ast.AST
    hooked: str  # how messages name the hooked module: "`nn.Conv2d`"
    overwritten: bool = False
    hook_def: ast.AST | None = None  # the hook's own ``def`` (the keeping statement may sit in a function it calls)


@dataclass
class KeptOutputOverwritten:
    """An in-place write (``write``, a ``Mutation``) overwrote a module's output after a forward hook kept it
    (``node``: the statement in the hook that keeps it).  ``marker`` went into the kept reference's graph at the
    write: values computed from it afterwards carry it.  ``first_use`` finds the first backward through such a
    value, or ``autograd.grad`` asked about the kept tensor, after the write."""

    node: ast.AST
    registered: ast.AST
    hooked: str
    write: object  # Mutation
    marker: int
    storage: int
    seq: int
    sinks: list = field(repr=False)  # the interpreter's sinks and grad asks (complete once the rules run)
    asks: list = field(repr=False)
    frames: list = field(default_factory=list)
    hook_def: ast.AST | None = None  # as ``KeptOutput.hook_def``

    def first_use(self):
        uses = [s for s in self.sinks if s.kind == "backward" and s.seq > self.seq and self.marker in s.graph]
        uses += [a for a in self.asks if a.how == "autograd.grad" and a.seq > self.seq and a.storage == self.storage]
        return min(uses, key=lambda u: u.seq, default=None)


@dataclass(eq=False)
class DroppedOutput:
    """A forward hook assigns a new value to its output parameter (``node``: the assignment), never reads it
    again and returns nothing: torch uses only a forward hook's *returned* value as the module's output, so the
    output stays as it was and the new value is dropped (torch 2.13).  ``marker`` went into the module's output graph when
    the hook ran: ``reached`` finds the first backward through that unchanged output."""

    node: ast.stmt
    name: str
    registered: ast.AST
    hooked: str
    marker: int
    seq: int
    sinks: list = field(repr=False)  # the interpreter's sinks (complete once the rules run)

    def reached(self):
        return next((s for s in self.sinks if s.kind == "backward" and s.seq > self.seq and self.marker in s.graph),
                    None)


def dropped_rebinding(hook: FunctionValue) -> tuple[ast.stmt, str] | None:
    """The statement that gives a forward hook's output parameter (``def hook(module, args, output)``) a value
    nothing uses: the hook's last binding of that name, a plain ``=`` (``output += m`` writes in place) or a call
    of a function defined in the hook that rebinds it (``nonlocal output``), with no read of the name after it (in
    the hook or a function defined in it) and no ``return`` of a value.  None for any other hook (``*args``, a
    lambda, a ``global``/``nonlocal`` name, a generator)."""
    fn = hook.node
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.args.vararg or fn.args.kwarg:
        return None
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)][1 if hook.self_value is not None else 0:]
    if len(params) != 3:
        return None
    name = params[2]
    stores: list[tuple[ast.AST, ast.stmt | None]] = []  # each binding, with its statement when a plain `=`
    nested: dict[str, ast.AST] = {}
    for node in own_nodes(fn):
        if isinstance(node, ast.Return) and node.value is not None \
                and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            return None
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
            return None
        if isinstance(node, ast.Assign):
            stores.extend((t, node) for t in node.targets if isinstance(t, ast.Name) and t.id == name)
        elif isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            stores.append((node, None))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested[node.name] = node
    rebinders = {n for n, f in nested.items() if _rebinds_nonlocal(f, name)}
    for node in own_nodes(fn):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not node.value.args \
                and isinstance(node.value.func, ast.Name) and node.value.func.id in rebinders:
            stores.append((node, node))  # `update()`, whose `nonlocal output` it rebinds
    plain = {id(t) for t, statement in stores if statement is not None}
    stores = [(t, statement) for t, statement in stores if statement is not None or id(t) not in plain]
    if not stores:
        return None
    last, statement = max(stores, key=lambda s: (s[0].lineno, s[0].col_offset))
    if statement is None:
        return None  # a loop's target, `with ... as`, `+=`, an unpacking, `del`
    end = (statement.end_lineno, statement.end_col_offset)
    if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
           and (n.lineno, n.col_offset) >= end for n in ast.walk(fn)):
        return None
    return statement, name


def _rebinds_nonlocal(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    """A function defined in a hook that declares ``nonlocal name`` and ends by binding it with a plain ``=``
    that nothing in it reads afterwards."""
    own = list(own_nodes(fn))
    if not any(isinstance(n, ast.Nonlocal) and name in n.names for n in own):
        return False
    stores = [(t, n) for n in own if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name) and t.id == name]
    others = [n for n in own if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)]
    if not stores or len(others) != len(stores):
        return False
    last, statement = max(stores, key=lambda s: (s[0].lineno, s[0].col_offset))
    end = (statement.end_lineno, statement.end_col_offset)
    return not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                   and (n.lineno, n.col_offset) >= end for n in ast.walk(fn))


# A model's submodules named past this many are not named (a ``dict(model.named_modules())`` stays unknown).
_NAMED_SUBMODULES = 64


def named_submodules(owner: ModuleValue, recursive: bool, is_module) -> dict[str, ModuleValue] | None:
    """What ``dict(owner.named_modules())`` (``recursive``; the owner itself under ``""``) or
    ``dict(owner.named_children())`` holds, named as torch names them: a ``Sequential``'s or ``ModuleList``'s
    layers by position (``"0"``, ``"1.conv"``), other modules' by attribute, each module once.  None when a
    module on the way is one the analysis cannot name the parts of, or holds an instance ``is_module`` does not
    know for an ``nn.Module`` (torch would not list it, nor would it be left out for sure)."""
    found: dict[str, ModuleValue] = {}

    def visit(module: ModuleValue, prefix: str, depth: int) -> bool:
        if any(m is module for m in found.values()) or len(found) > _NAMED_SUBMODULES:
            return len(found) <= _NAMED_SUBMODULES
        if module.cls == "<unknown>":
            return False
        if depth > 0 or recursive:
            found[prefix] = module
        if depth > 0 and not recursive:
            return True
        if module.user_class is None and module.cls in ("Sequential", "ModuleList"):
            parts = [(str(i), child) for i, child in enumerate(module.children)]
        elif module.user_class is None and module.cls == "ModuleDict" or not module.children:
            parts = [(k, v) for k, v in module.attrs.items() if isinstance(v, ModuleValue) and not k.startswith("<")]
        else:
            return False
        if not all(is_module(sub) for _, sub in parts):
            return False
        return all(visit(sub, f"{prefix}.{name}" if prefix else name, depth + 1) for name, sub in parts)

    return found if visit(owner, "", 0) else None
