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

import sys
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .frames import UserCode, frame_site, frame_sites, user_frame
from .model import Note, ProbeFinding, Site
from .source import expression_at

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


class GradientHooks:
    """One per tracer.  ``install()`` wraps the registration methods; ``findings()`` after the run."""

    def __init__(self, user: UserCode, errors: list[str], on_write=None):
        self.user = user
        self.errors = errors
        self.on_write = on_write  # the tracer's check of a write against the saved tensors of live graphs
        self.found: dict[tuple, HookWrite] = {}
        self.backward: Site | None = None  # the user's backward() running now (the tracer sets it)
        self._patched: list[tuple[object, str, object]] = []

    def install(self) -> None:
        nn = torch.nn.Module
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

    def _registrar(self, original, grads):
        hooks = self

        def register(self, hook, *args, **kwargs):
            try:
                wrapped = hooks._wrap(hook, grads, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                hooks.errors.append(f"hooks: {type(exc).__name__}: {exc}")
                wrapped = hook
            return original(self, wrapped, *args, **kwargs)

        register.__wrapped__ = original
        return register

    def _wrap(self, hook, grads, caller):
        function = getattr(hook, "__func__", hook)
        code = getattr(function, "__code__", None)
        if code is None or not self.user.is_user(code):
            return hook
        frame = user_frame(caller, self.user)
        registered = frame_site(frame) if frame is not None else None
        del frame
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
        for w in self.found.values():
            said = expression_at(w.site)
            what = f"`{said}`" if said else f"in-place `{w.op}`"
            at = f" at line {w.registered.line}" if w.registered else ""
            if w.function is not None:
                message = (f"{what} writes in place the gradient that backward() hands to the backward of the custom "
                           f"Function `{w.function}`; torch does not copy it, and the same tensor can be the caller's "
                           "own `grad_outputs` or the gradient of other parts of the graph, which then silently "
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
