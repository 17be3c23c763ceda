"""Autograd's extension points: custom ``torch.autograd.Function``s and full backward hooks on modules.

- ``Foo.apply(x, ...)`` runs ``Foo.forward(ctx, x, ...)`` under no_grad (torch 2.13: ``torch.is_grad_enabled()``
  is False there).  ``ctx.save_for_backward(t)`` saves ``t`` at its version: a later in-place write to it makes
  the backward raise, as for any op's save.  The outputs require grad when an input does.  An output that *is*
  an input (or a view of one) not named in ``ctx.mark_dirty`` is a view made inside the Function, and torch
  refuses to let it be written in place ("Output 0 of Foo is a view and is being modified inplace").
- ``m.register_full_backward_hook(f)`` (and every registration torch's table lists, see
  ``knowledge.backward_hook_registrations``) makes torch pass the module's inputs and outputs through a
  ``BackwardHookFunction``: they become views made inside a custom Function, with the same refusal.  An in-place
  layer after the hooked one (or the hooked layer itself, if in place) then raises at the forward.

- ``Foo.backward(ctx, *grads)`` runs inside a later backward, under no_grad, on the gradient tensors autograd
  hands it and on ``ctx.saved_tensors`` (the very tensors ``save_for_backward`` was given: torch unpacks them
  without a copy).  It is run here, when ``apply`` makes outputs that require grad, on stand-ins for those
  gradients and on separate copies of the saved tensors (same storages by id, their own version counters, so
  the forward's state does not change):
  - an in-place write to a gradient argument is a ``HookWrite`` (GG108) once that gradient is known to be
    shared: torch passes a Function's backward the gradient tensor itself, which is the one the backward of a
    sum the output is a term of passes to the other term too (``gradient_shared``), or the ``grad_outputs``
    tensor the caller gave ``backward()``/``autograd.grad`` for that output;
  - an in-place write to a saved tensor is a ``Mutation`` when an op *upstream* of the Function (one whose save
    is in that input's graph: the op that made it) saved the same memory.  Autograd runs an op's backward only
    after the backwards of everything computed from its output, so that op reads the written memory and raises.
    Saves of the Function's own ``ctx`` are unpacked before the write and do not count.

A mixin of ``Interpreter``.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from .classes import ClassInfo, find_method, own_method
from .events import HookWrite
from .hooks import (FORWARD_HOOKS, DroppedOutput, ForwardHookHandle, KeptOutput, KeptOutputOverwritten, OutputWrite,
                    dropped_rebinding)
from .values import (
    NOT_TENSOR,
    UNKNOWN,
    FunctionContext,
    FunctionValue,
    Grad,
    HookHandle,
    ModuleValue,
    Tensor,
    TensorSeq,
    Derived,
    Storage,
    Value,
    graph_of,
    new_id,
    view_of,
)

# What a Function's backward may add to, besides mutations: dropped after it is run (it runs inside a backward).
_EVENT_LISTS = ("mutations", "sinks", "breaks", "grad_reads", "asks", "hook_writes", "rebinds", "flags", "stale_uses",
                "discarded", "detaches", "kept_reads",
                "kept_stores")

# The methods of ``ctx`` that name tensors (their other methods only set flags).
_CTX_TENSOR_METHODS = ("save_for_backward", "mark_dirty", "mark_non_differentiable")


class ExtensionPointsMixin:
    # The outputs the forward hooks running now were given, each with the statements that stored it into an
    # attribute, a container's element or a list (``note_stored``): an instance's own list once a hook runs, this
    # empty default before (read at every binding, so a plain attribute rather than a property).
    watched_outputs: "list[tuple[Tensor, list[ast.AST]]] | tuple[()]" = ()

    # ------------------------------------------------------------------ custom autograd.Function
    def apply_function(self, info: ClassInfo, args: list[Value], kwargs: dict[str, Value], node: ast.AST) -> Value:
        """``Foo.apply(*args)``: the forward followed under no_grad with a ``ctx`` of its own, then its outputs
        made as autograd makes them."""
        found = find_method(self.ctx.classes_for(info), info, "forward")
        if found is None:
            return self._unknown_call(node, [*args, *kwargs.values()])
        inputs = [a for a in [*args, *kwargs.values()] if isinstance(a, Tensor)]
        ctx = FunctionContext(info.name, frozenset(a.storage.id for a in inputs))
        rg = self._grad(*args, *kwargs.values())
        setup = own_method(found[1].node, "setup_context")
        grad_mode, self.state.grad_enabled = self.state.grad_enabled, False
        self.function_contexts.append((ctx, rg))
        try:
            if setup is None:
                result = self.inline(found[0], [ctx, *args], kwargs, node, owner=found[1])
            else:  # the torch 2 form: `forward(*args)`, then `setup_context(ctx, inputs, output)`
                result = self.inline(found[0], args, kwargs, node, owner=found[1])
                if result is not None:
                    self.inline(setup, [ctx, TensorSeq(list(args), literal=True), result], {}, node, owner=found[1])
        finally:
            self.function_contexts.pop()
            self.state.grad_enabled = grad_mode
            ctx.packed = True
        if result is None:
            return self._unknown_call(node, [*args, *kwargs.values()])
        graph = frozenset().union(*(graph_of(a) for a in [*args, *kwargs.values()]),
                                  frozenset(s.id for s in ctx.saves))
        outputs = self._function_outputs(result, info.name, inputs, ctx, rg, graph, node)
        if rg and self.state.grad_enabled and self.inline_record:
            self._run_function_backward(info, ctx, outputs, node)
        return outputs

    def _run_function_backward(self, info: ClassInfo, ctx: FunctionContext, outputs: Value, node: ast.AST) -> None:
        """The Function's ``backward``, run now on stand-ins for its gradients and on copies of its saved tensors:
        its writes to a gradient become ``HookWrite`` events, its writes to a saved input that an op upstream of
        the Function saved too become ``Mutation`` events (see the module's docstring); nothing else it does
        is kept."""
        found = find_method(self.ctx.classes_for(info), info, "backward")
        if found is None or own_method(found[1].node, "vjp") is not None:
            return
        items = outputs.items if isinstance(outputs, TensorSeq) and outputs.items else [outputs]
        gradients = [Tensor(Storage(), Grad.NO, leaf=True, origin=node, label="the gradient")
                     if isinstance(o, Tensor) and o.requires_grad else NOT_TENSOR for o in items]
        copies: dict[int, Storage] = {}

        def isolated(t: Tensor) -> Tensor:
            storage = copies.setdefault(id(t.storage), Storage(t.storage.version, t.storage.id))
            return replace(t, storage=storage, base=None)

        saved = ctx.attrs.get("<saved>")
        saved_copies = [isolated(t) if isinstance(t, Tensor) else t for t in (saved.items if saved else [])]
        upstream = {id(c): t.graph for c, t in zip(saved_copies, saved.items if saved else [])
                    if isinstance(t, Tensor)}
        own = {s.id for s in ctx.saves}
        attrs = dict(ctx.attrs)
        ctx.attrs["saved_tensors"] = ctx.attrs["saved_variables"] = TensorSeq(saved_copies, literal=True)
        events = {name: len(getattr(self, name)) for name in _EVENT_LISTS}
        grad_mode, self.state.grad_enabled = self.state.grad_enabled, False
        self.function_contexts.append((ctx, Grad.NO))
        try:
            self.inline(found[0], [ctx, *gradients], {}, node, owner=found[1])
        finally:
            self.function_contexts.pop()
            self.state.grad_enabled = grad_mode
            ctx.attrs.clear()
            ctx.attrs.update(attrs)
        writes = self.mutations[events["mutations"]:]
        for name, length in events.items():
            del getattr(self, name)[length:]
        where = f"`{info.name}.backward`"
        grads = {g.storage.id: o for g, o in zip(gradients, items) if isinstance(g, Tensor)}
        for m in writes:
            if m.kind != "write":
                continue
            if m.target.storage.id in grads:  # reported once the gradient is known to be shared (see below)
                output = grads[m.target.storage.id]
                held = self.gradient_writes.setdefault(id(output), (output, []))[1]
                held.append(HookWrite(m.node, m.how, node, f"{info.name}.backward", m.moment))
                continue
            copy = next((c for c in saved_copies if isinstance(c, Tensor) and c.storage is m.target.storage), None)
            if copy is None:
                continue
            m.pending = [s for s in m.pending if s.id not in own and s.id in upstream[id(copy)]]
            if m.pending:
                m.how = f"{m.how} in {where}"
                self.mutations.append(m)

    def _function_outputs(self, result: Value, name: str, inputs: list[Tensor], ctx: FunctionContext, rg: Grad,
                          graph: frozenset[int], node: ast.AST) -> Value:
        if isinstance(result, TensorSeq) and result.items:
            return TensorSeq([self._function_outputs(i, name, inputs, ctx, rg, graph, node) for i in result.items],
                             literal=result.literal)
        if not isinstance(result, Tensor):
            return result if rg == Grad.NO else UNKNOWN
        out_rg = Grad.NO if result.storage.id in ctx.non_differentiable else rg
        if out_rg and result.storage.id not in ctx.dirty and any(a.storage is result.storage for a in inputs):
            view = view_of(result, node, multi_view=name)
            view.requires_grad, view.leaf, view.graph, view.custom_view = out_rg, False, graph, node
            view.label = f"the output of `{name}.apply`"
            return view
        return Tensor(result.storage, out_rg, leaf=not out_rg, graph=graph if out_rg else frozenset(), origin=node,
                      label=f"the output of `{name}.apply`")

    def ctx_method(self, ctx: FunctionContext, name: str, node: ast.Call) -> Value:
        """``ctx.save_for_backward(a, b)``, ``ctx.mark_dirty(x)``...: recorded for the ``apply`` that runs."""
        values = [self.eval(a) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value)
        if name not in _CTX_TENSOR_METHODS:
            return UNKNOWN
        # Each tensor with the argument that names it alone (the expression a fix may clone), None in a sequence.
        tensors = [(t, a if t is v else None) for a, v in zip(node.args, values)
                   for t in (v.items if isinstance(v, TensorSeq) else (v,)) if isinstance(t, Tensor)]
        rg = next((g for c, g in reversed(self.function_contexts) if c is ctx), Grad.NO)
        if name == "save_for_backward":  # what `ctx.saved_tensors` gives the backward, in order
            ctx.attrs["<saved>"] = TensorSeq([v for v in values], literal=True)
        for tensor, operand in tensors:
            if name == "mark_dirty":
                ctx.dirty.add(tensor.storage.id)
            elif name == "mark_non_differentiable":
                ctx.non_differentiable.add(tensor.storage.id)
            elif rg:
                role = "input" if tensor.storage.id in ctx.inputs else "output"  # or a tensor made in the forward
                ctx.saves.append(self._save(tensor, f"{ctx.function}.apply", role, node, rg == Grad.YES,
                                            operand=operand))
        return UNKNOWN

    @property
    def gradient_writes(self) -> dict[int, tuple[Tensor, list[HookWrite]]]:
        """Outputs of a custom Function whose backward writes the gradient it is given, by ``id`` of the output
        tensor, with those writes: reported (GG108) once something hands that backward a gradient it shares."""
        return self.__dict__.setdefault("_gradient_writes", {})

    def gradient_shared(self, values: list[Value]) -> None:
        """``values`` get a gradient that is not theirs alone: the terms of a sum (``a + b`` hands its gradient
        itself to both) or the outputs ``autograd.grad``/``backward()`` is given ``grad_outputs`` for (the
        caller's tensor).  A Function output among them: its backward's writes to that gradient are events."""
        for value in values:
            entry = self.gradient_writes.pop(id(value), None) if isinstance(value, Tensor) else None
            if entry is not None and entry[0] is value:
                self.hook_writes.extend(entry[1])

    def summed_terms(self, name: str, args: list[Value]) -> None:
        """An ``add`` of two tensors that require grad: its backward passes the same gradient to both."""
        if name == "add" and self.gradient_writes and sum(
                isinstance(a, (Tensor, Derived)) and a.requires_grad != Grad.NO for a in args) > 1:
            self.gradient_shared(args)

    # ------------------------------------------------------------------ full backward hooks
    def register_backward_hook(self, module: ModuleValue, node: ast.Call) -> HookHandle:
        """``m.register_full_backward_hook(f)`` on a path known to run: ``m``'s inputs and outputs become views."""
        if not self.unsure_branches:
            module.backward_hooked = node
        return HookHandle(module)

    def hooked_tensors(self, module: ModuleValue, value: Value) -> Value:
        """The tensors a module with a full backward hook hands on (its inputs to its forward, its outputs to the
        caller): views of a ``BackwardHookFunction`` when they require grad."""
        if isinstance(value, TensorSeq) and value.items:
            return TensorSeq([self.hooked_tensors(module, i) for i in value.items], literal=value.literal)
        if not isinstance(value, Tensor) or value.requires_grad == Grad.NO or not self.state.grad_enabled:
            return value
        view = view_of(value, module.backward_hooked, multi_view="BackwardHookFunction")
        view.custom_view, view.label = module.backward_hooked, value.label
        return view

    # ------------------------------------------------------------------ forward hooks
    def register_forward_hook(self, module: ModuleValue, hook: Value, node: ast.Call) -> Value:
        """``m.register_forward_hook(f)`` on a path known to run: ``m(...)`` calls ``f`` after its forward."""
        if (self.unsure_branches or not isinstance(hook, FunctionValue)
                or self._keyword_bool(node, "with_kwargs", False) is not False):
            return UNKNOWN
        handle = ForwardHookHandle(module, hook=hook, registered=node)
        module.attrs.setdefault(FORWARD_HOOKS, TensorSeq([])).items.append(handle)
        return handle

    def remove_hook(self, handle: HookHandle) -> None:
        """``handle.remove()`` on a path known to run."""
        if self.unsure_branches:
            return
        if isinstance(handle, ForwardHookHandle):
            hooks = handle.module.attrs.get(FORWARD_HOOKS)
            if hooks is not None:
                hooks.items = [h for h in hooks.items if h is not handle]
        else:
            handle.module.backward_hooked = None

    def run_forward_hooks(self, module: ModuleValue, args: list[Value], result: Value, node: ast.AST) -> Value:
        """The module's forward hooks, called as torch calls them: ``(module, args, output)``, a value returned
        replacing the output.  A hook that keeps the output itself gets its own reference to it (the same
        memory), watched for a later in-place write (``note_overwritten_outputs``)."""
        hooks = module.attrs.get(FORWARD_HOOKS)
        for handle in list(hooks.items if isinstance(hooks, TensorSeq) else ()):
            hook, given = handle.hook, result
            watched = isinstance(result, Tensor) and self.inline_record
            if watched:  # a second reference, to tell where the hook stores it and what reads it later
                given = replace(result)
                self.__dict__.setdefault("watched_outputs", []).append((given, []))
            first = len(self.mutations)
            try:
                returned = self.call_value(hook, [module, TensorSeq(list(args), literal=True), given], {}, node)
            finally:
                stores = self.watched_outputs.pop()[1] if watched else []
            if stores:
                kept = self.__dict__.setdefault("kept_outputs", [])
                kept.append(KeptOutput(given, result.storage.version, stores[0], handle.registered,
                                       _module_name(module), hook_def=hook.node if isinstance(hook, FunctionValue) else None))
            if isinstance(given, Tensor):
                self._output_writes(given, first, handle.registered, node)
                if given is not result and given.requires_grad != result.requires_grad:
                    # `output.requires_grad_(True)` in the hook: the second reference is the same tensor
                    result.requires_grad, result.graph = given.requires_grad, given.graph
            if isinstance(returned, (Tensor, TensorSeq, Derived)) and returned is not given:
                result = returned
            elif isinstance(result, Tensor) and result.requires_grad == Grad.YES:
                self._dropped_output(result, hook, handle.registered, module)
        return result

    def _dropped_output(self, output: Tensor, hook: FunctionValue, registered: ast.AST, module: ModuleValue) -> None:
        """A hook that rebinds its output parameter and returns nothing left ``output`` as it was: a marker into
        its graph, for the backward that then runs through the unchanged output (``DroppedOutput``), once per
        assignment."""
        dropped = dropped_rebinding(hook)
        if dropped is None:
            return
        statement, name = dropped
        known = self.__dict__.setdefault("_dropped_outputs", {})
        event = known.get(id(statement))
        if event is None:
            event = DroppedOutput(statement, name, registered, _module_name(module), new_id(), self._next(),
                                  self.sinks)
            known[id(statement)] = event
            self.hook_writes.append(event)
        output.graph = output.graph | {event.marker}

    def note_stored(self, value: Value, node: ast.AST) -> None:
        """``value`` is stored where it may outlive the call (``x.attr = value``, ``xs[k] = value``,
        ``xs.append(value)``): if it is an output a running forward hook was given, where that hook keeps it."""
        for output, stores in self.watched_outputs:
            if value is output:
                stores.append(node)

    def _output_writes(self, output: Tensor, first: int, registered: ast.AST, call: ast.AST) -> None:
        """The hook's writes, with grad mode known off, to an output that is a view of a parameter: ``OutputWrite``
        events in place of their mutations.  (With grad mode on torch refuses the write: GG003.)"""
        parameter = next((t for t in output.view_chain() if t.param and t.leaf and t.requires_grad == Grad.YES),
                         None)
        if parameter is None:
            return
        writes = [m for m in self.mutations[first:] if m.kind == "write" and m.target.storage is output.storage
                  and not m.grad_enabled]
        if not writes:
            return
        self.mutations[first:] = [m for m in self.mutations[first:] if all(m is not w for w in writes)]
        self.hook_writes.extend(OutputWrite(m.node, m.how, registered, "register_forward_hook", m.moment, call,
                                                parameter=parameter)
                                for m in writes)

    def _is_nn_module(self, value: ModuleValue) -> bool:
        """A torch layer, or an instance of one of the project's ``nn.Module`` subclasses."""
        info = self.ctx.class_of(value)
        return value.torch_module or (info is not None and info.is_module)

    def note_overwritten_outputs(self) -> None:
        """Outputs a forward hook kept whose memory an in-place write has changed since: a marker into the kept
        reference's graph (what is computed from it from now on computes with the new values) and a
        ``KeptOutputOverwritten`` event."""
        for kept in self.__dict__.get("kept_outputs", ()):
            if kept.overwritten or kept.proxy.storage.version <= kept.version:
                continue
            kept.overwritten = True
            write = next((m for m in reversed(self.mutations) if m.target.storage is kept.proxy.storage), None)
            if write is None or write.kind != "write":
                continue
            marker = new_id()
            kept.proxy.graph = kept.proxy.graph | {marker}
            self.hook_writes.append(KeptOutputOverwritten(
                kept.keep, kept.registered, kept.hooked, write, marker, kept.proxy.storage.id, self._next(),
                self.sinks, self.asks, frames=list(write.frames), hook_def=kept.hook_def))


def _module_name(module: ModuleValue) -> str:
    return f"`nn.{module.cls}`" if module.torch_module else f"`{module.cls}`"
