"""Gradient hooks that write the gradient they are given (rule GG108).  Imports torch.

The tracer is switched off during backward (watching the backward graph's own ops would double its
cost), so the hooks the user registers (``Tensor.register_hook``, a module's full backward (pre-)hook)
and the ``backward`` of the user's custom ``autograd.Function`` classes are wrapped instead: while one
of them runs, a small dispatch mode watches for in-place writes to the gradient tensors it was handed,
and passes every write to the tracer (``on_write``), which checks it against the saved tensors of live
graphs (a Function's backward that reuses its saved inputs' memory for the gradients).  torch does not
copy a gradient before passing it to a hook or a backward; the same tensor may be the gradient of other
parts of the graph (both inputs of an addition get it) or the caller's own ``grad_outputs``, so a write
there silently changes them too.  Only hooks and Functions whose code is the user's are wrapped.
"""

from __future__ import annotations

import ast
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .frames import UserCode, frame_site, frame_sites, skip_dynamo, user_frame
from .model import Note, ProbeFinding, Site
from .source import expression_at, function_node

_Tensor = torch.Tensor
_WRITTEN: dict = {}  # OpOverload -> the arguments its schema marks as written


def written_arguments(func) -> tuple[tuple[int, str], ...]:
    """(index, name) of the arguments the op's schema marks as written."""
    spec = _WRITTEN.get(func)
    if spec is None:
        try:
            spec = tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                         if a.alias_info is not None and a.alias_info.is_write)
        except AttributeError:
            spec = ()
        _WRITTEN[func] = spec
    return spec


@dataclass
class HookWrite:
    site: Site
    registered: Site | None
    op: str
    backward: Site | None = None
    count: int = 1
    function: str | None = None  # the custom autograd.Function whose backward wrote (None: a hook)


@dataclass
class KeptOutput:
    """A module output a user forward hook kept a reference to (``self.outputs.append(output)``)."""

    tensor: Any  # a weak reference to it
    version: int
    site: Site  # the hook's line that keeps it
    registered: Site | None


@dataclass
class HookFinding:
    """What a forward hook did that a later line undoes, or that never reaches the network."""

    code: str
    site: Site
    message: str
    notes: list = field(default_factory=list)
    op: str | None = None
    count: int = 1


class _WatchGradients(TorchDispatchMode):
    """Active only while one user hook runs: records its writes to the storages of its gradients."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self, storages: set[int], user: UserCode, on_write=None, errors: list[str] | None = None):
        super().__init__()
        self.storages = storages
        self.user = user
        self.on_write = on_write
        self.errors = errors if errors is not None else []
        self.writes: list[tuple[list[Site], str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        written = written_arguments(func)
        for index, name in written:
            t = args[index] if index < len(args) else (kwargs or {}).get(name)
            if isinstance(t, _Tensor) and t.untyped_storage()._cdata in self.storages:
                sites, _ = frame_sites(sys._getframe(1), self.user, limit=1)
                if sites:
                    self.writes.append((sites, func.overloadpacket.__name__))
                break
        out = func(*args, **(kwargs or {}))
        if written and self.on_write is not None:
            try:
                self.on_write(func, args, kwargs or {}, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                self.errors.append(f"hooks: {type(exc).__name__}: {exc}")
        return out


skip_dynamo(_WatchGradients.__torch_dispatch__)


class GradientHooks:
    """One per tracer.  ``install()`` wraps the registration methods; ``findings()`` after the run."""

    def __init__(self, user: UserCode, errors: list[str], on_write=None):
        self.user = user
        self.errors = errors
        self.on_write = on_write  # the tracer's check of a write against the saved tensors of live graphs
        self.found: dict[tuple, HookWrite] = {}
        self.backward: Site | None = None  # the user's backward() running now (the tracer sets it)
        self._patched: list[tuple[object, str, object]] = []
        # Where full backward (pre-)hooks were registered, in order: torch wraps the module's output in a
        # BackwardHookFunction view that a later in-place module may not write (exceptions.py).
        self.full_registered: list[Site] = []
        self.kept: dict[int, KeptOutput] = {}  # storage key -> an output a forward hook kept
        self.hook_outputs: dict[int, Site | None] = {}  # storage key -> registration, while a forward hook runs
        self.forward_found: dict[tuple, HookFinding] = {}
        self._rebinding_checked: set = set()

    def install(self) -> None:
        nn = torch.nn.Module
        original = nn.register_forward_hook
        self._patched.append((nn, "register_forward_hook", original))
        nn.register_forward_hook = self._forward_registrar(original)
        for owner, name, grads in ((_Tensor, "register_hook", lambda args: args[:1]),
                                   # grad_input is the hook's own result to change (torch passes the change on
                                   # as if it were returned); grad_output is shared with the rest of the graph.
                                   (nn, "register_full_backward_hook", lambda args: args[2]),
                                   (nn, "register_full_backward_pre_hook", lambda args: args[1])):
            original = getattr(owner, name)
            self._patched.append((owner, name, original))
            setattr(owner, name, self._registrar(original, grads))
        backward = torch.autograd.function.BackwardCFunction
        original = backward.apply
        self._patched.append((backward, "apply", original))
        backward.apply = self._function_backward(original)

    def _function_backward(self, original):
        """``BackwardCFunction.apply`` (the autograd engine calls it to run a custom Function's backward),
        watched when that backward is the user's code."""
        hooks = self

        def apply(ctx, *args):
            try:
                function = ctx._get_user_fn()
                code = getattr(getattr(function, "__func__", function), "__code__", None)
                if code is None or not hooks.user.is_user(code):
                    return original(ctx, *args)
                storages = {g.untyped_storage()._cdata for g in args if isinstance(g, _Tensor)}
                name = getattr(ctx._forward_cls, "__name__", "Function")
            except Exception as exc:  # noqa: BLE001
                hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
                return original(ctx, *args)
            watch = _WatchGradients(storages, hooks.user, hooks.on_write, hooks.errors)
            try:
                with watch:
                    return original(ctx, *args)
            finally:
                for sites, op in watch.writes:
                    hooks._record(sites, op, None, name)

        apply.__wrapped__ = original
        return apply

    def uninstall(self) -> None:
        while self._patched:
            owner, name, original = self._patched.pop()
            setattr(owner, name, original)

    def _forward_registrar(self, original):
        hooks = self

        def register_forward_hook(self, hook, *args, **kwargs):
            try:
                wrapped = hooks._wrap_forward(hook, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
                wrapped = hook
            return original(self, wrapped, *args, **kwargs)

        register_forward_hook.__wrapped__ = original
        return register_forward_hook

    def _wrap_forward(self, hook, caller):
        """A user forward hook, watched: does it keep the output (a later in-place module then overwrites what
        it kept), write into an output that is a view of a parameter, or rebind its output and drop it?"""
        code = self._users_code(hook)
        if code is None:
            return hook
        registered = self._registration(caller)
        hooks = self

        def watched(*args, **kwargs):
            output = args[-1] if args else None
            try:
                if isinstance(output, _Tensor):
                    tensors = [output]
                elif isinstance(output, (tuple, list)):
                    tensors = [t for t in output if isinstance(t, _Tensor)]
                else:
                    tensors = []
                # References to each output, counted again when the hook returns (no name here may hold one).
                before = [sys.getrefcount(t) for t in tensors]
                outer = hooks.hook_outputs
                hooks.hook_outputs = dict(outer)
                hooks.hook_outputs.update((k, registered) for k in [t.untyped_storage()._cdata for t in tensors])
            except Exception as exc:  # noqa: BLE001
                hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
                return hook(*args, **kwargs)
            try:
                result = hook(*args, **kwargs)
            finally:
                hooks.hook_outputs = outer
            if result is None:
                try:
                    after = [sys.getrefcount(t) for t in tensors]
                    for t, b, a in zip(tensors, before, after):
                        if a > b:  # the hook stored a reference to the output itself
                            hooks._keep(t, code, registered)
                    hooks._check_rebinding(code, registered)
                except Exception as exc:  # noqa: BLE001
                    hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
            return result

        return watched

    def _keep(self, t, code, registered: Site | None) -> None:
        key = t.untyped_storage()._cdata
        known = self.kept.get(key)
        if known is not None and known.tensor() is t:
            return
        self.kept[key] = KeptOutput(weakref.ref(t), t._version, _keeping_line(code), registered)

    def on_kept_write(self, key: int, written, sites: list[Site], op: str, origins: list[Site]) -> None:
        """The tracer saw an in-place write to the storage of an output a forward hook kept."""
        kept = self.kept.get(key)
        if kept is None:
            return
        t = kept.tensor()
        if t is None or t._version != kept.version or not sites:
            self.kept.pop(key, None)  # freed, or already changed since it was kept (reported then)
            return
        del self.kept[key]
        finding_key = ("kept", kept.site.path, kept.site.line)
        known = self.forward_found.get(finding_key)
        if known is not None:
            known.count += 1
            return
        writer = expression_at(sites[0])
        writer = f"`{writer}`" if writer else f"in-place `{op}`"
        message = (f"the forward hook keeps the module's output itself here; {writer} on line {sites[0].line} then "
                   "overwrites it in place (an in-place module runs after the hooked one), so what the hook kept, and "
                   "any gradient taken with respect to it, is the later module's output, not this module's: keep "
                   "a clone of it, or return a clone from the hook so the in-place module writes that")
        notes = [Note(sites[0], "the kept output is overwritten in place here")]
        notes += [Note(o, "the module that writes in place (inplace=True) is made here") for o in origins]
        if kept.registered:
            notes.append(Note(kept.registered, "the hook is registered here"))
        code = "GG005" if origins else "GG001"
        self.forward_found[finding_key] = HookFinding(code, kept.site, message, notes, op)

    def on_output_write(self, written, sites: list[Site], op: str) -> None:
        """A forward hook wrote in place into its module's output: bad when that output is a view of a parameter
        (an ``expand``/``repeat`` of a positional embedding), whose values the write then changes."""
        base = written._base
        if not sites or not isinstance(base, torch.nn.Parameter):
            return
        registered = self.hook_outputs.get(written.untyped_storage()._cdata)
        key = ("param", sites[0].path, sites[0].line)
        known = self.forward_found.get(key)
        if known is not None:
            known.count += 1
            return
        said = expression_at(sites[0])
        what = f"`{said}`" if said else f"in-place `{op}`"
        shape = "x".join(str(n) for n in base.shape)
        message = (f"{what} writes in place into the output the forward hook is handed, and that output is a view of "
                   f"a parameter ({shape}): the write changes the parameter itself, so every later forward and "
                   "gradient uses the changed weights; return a modified copy from the hook (or make the module "
                   "return a clone)")
        notes = [Note(s, "reached from this call") for s in sites[1:3]]
        if registered:
            notes.append(Note(registered, "the hook is registered here"))
        self.forward_found[key] = HookFinding("GG102", sites[0], message, notes, op)

    def _check_rebinding(self, code, registered: Site | None) -> None:
        """A hook that returns nothing and assigns a new value to its output parameter, never read again: the new
        value is dropped (torch uses a forward hook's *returned* value as the module's output)."""
        if code in self._rebinding_checked:
            return
        self._rebinding_checked.add(code)
        node = function_node(code.co_filename, code.co_firstlineno, code.co_name)
        if node is None:
            return
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        if not params:
            return
        name = params[-1]
        stores = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
        if not stores:
            return
        last = max(stores, key=lambda n: (n.lineno, n.col_offset))
        statement = next((st for st in ast.walk(node) if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                          and any(t is last for t in ast.walk(st))), None)
        if statement is None or isinstance(statement, ast.AugAssign):
            return  # `out += 1` writes in place: it is no rebinding
        end = (statement.end_lineno, statement.end_col_offset)
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
               and (n.lineno, n.col_offset) >= end for n in ast.walk(node)):
            return
        site = Site(code.co_filename, last.lineno, last.col_offset + 1)
        said = expression_at(Site(code.co_filename, last.lineno))
        what = f"`{said}`" if said else f"the assignment to `{name}`"
        message = (f"{what} rebinds the hook's local `{name}` and the hook returns nothing: the module's output is "
                   f"unchanged and the new value is dropped (torch uses the value a forward hook returns); return "
                   f"the new output, computed from `{name}` itself (not its `.data`) so gradients follow it")
        notes = [Note(registered, "the hook is registered here")] if registered else []
        self.forward_found[("rebind", site.path, site.line)] = HookFinding("GG103", site, message, notes)

    def _registrar(self, original, grads):
        hooks = self

        def register(self, hook, *args, **kwargs):
            try:
                if isinstance(self, torch.nn.Module):
                    frame = user_frame(sys._getframe(1), hooks.user)
                    if frame is not None:
                        hooks.full_registered.append(frame_site(frame))
                    del frame
                wrapped = hooks._wrap(hook, grads, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
                wrapped = hook
            return original(self, wrapped, *args, **kwargs)

        register.__wrapped__ = original
        return register

    def _users_code(self, hook):
        """The code of ``hook`` (a function or bound method) when it is the user's, which is worth watching."""
        code = getattr(getattr(hook, "__func__", hook), "__code__", None)
        return code if code is not None and self.user.is_user(code) else None

    def _registration(self, caller):
        """The user's line that registered a hook (``caller``: the frame of the registering call)."""
        frame = user_frame(caller, self.user)
        registered = frame_site(frame) if frame is not None else None
        del frame
        return registered

    def _wrap(self, hook, grads, caller):
        code = self._users_code(hook)
        if code is None:
            return hook
        registered = self._registration(caller)
        hooks = self

        def watched(*args):
            try:
                storages = {g.untyped_storage()._cdata for g in grads(args) if isinstance(g, _Tensor)}
            except Exception as exc:  # noqa: BLE001
                hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
                return hook(*args)
            watch = _WatchGradients(storages, hooks.user, hooks.on_write, hooks.errors)
            with watch:
                out = hook(*args)
            for sites, op in watch.writes:
                hooks._record(sites, op, registered)
            return out

        return watched

    def _record(self, sites: list[Site], op: str, registered: Site | None, function: str | None = None) -> None:
        site = sites[0]
        key = (site.path, site.line, site.column)
        known = self.found.get(key)
        if known is not None:
            known.count += 1
            return
        self.found[key] = HookWrite(site, registered, op, self.backward, function=function)

    def findings(self) -> list[ProbeFinding]:
        found = []
        for f in self.forward_found.values():
            message = f.message + (f" [seen {f.count} times]" if f.count > 1 else "")
            found.append(ProbeFinding(f.code, "silent", f.site, message, notes=tuple(f.notes), op=f.op,
                                      count=f.count))
        for w in self.found.values():
            said = expression_at(w.site)
            what = f"`{said}`" if said else f"in-place `{w.op}`"
            at = f" at line {w.registered.line}" if w.registered else ""
            if w.function is not None:
                message = (f"{what} writes in place the gradient that backward() hands to the backward of the custom "
                           f"Function `{w.function}`; torch does not copy it, and the same tensor can be the caller's "
                           "own grad_outputs or the gradient of other parts of the graph, which then silently "
                           "change too: compute a new tensor in backward instead")
            else:
                message = (f"{what} writes in place the gradient that backward() hands to the hook registered{at}; "
                           "torch does not copy it for the hook, and the same tensor can be the gradient of other "
                           "parts of the graph (both inputs of an addition, a skip connection), which then silently "
                           "get the changed values too: return a new tensor from the hook instead")
            if w.count > 1:
                message += f" [seen {w.count} times]"
            notes = []
            if w.registered:
                notes.append(Note(w.registered, "the hook is registered here"))
            if w.backward:
                runs = f"the backward of `{w.function}`" if w.function is not None else "the hook"
                notes.append(Note(w.backward, f"the backward() that runs {runs}"))
            found.append(ProbeFinding("GG108", "silent", w.site, message, notes=tuple(notes), op=w.op, count=w.count,
                                      backward=w.backward))
        return found


def _keeping_line(code) -> Site:
    """The hook's line that keeps its output: the first statement that uses the output parameter as a whole
    value (``self.outputs.append(out)``, ``self.feat = out``), not as the receiver of a method (``out.clone()``)."""
    fallback = Site(code.co_filename, code.co_firstlineno)
    node = function_node(code.co_filename, code.co_firstlineno, code.co_name)
    if node is None:
        return fallback
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if not params:
        return fallback
    name = params[-1]
    receivers = {id(n.value) for n in ast.walk(node) if isinstance(n, (ast.Attribute, ast.Subscript))}
    uses = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
            and id(n) not in receivers]
    if not uses:
        return fallback
    first = min(uses, key=lambda n: (n.lineno, n.col_offset))
    return Site(code.co_filename, first.lineno, first.col_offset + 1)
