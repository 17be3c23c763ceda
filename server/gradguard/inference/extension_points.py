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

A mixin of ``Interpreter``; ``backward`` of a Function is not run (torch runs it inside the backward).
"""

from __future__ import annotations

import ast

from .classes import ClassInfo, find_method, own_method
from .values import (
    UNKNOWN,
    FunctionContext,
    Grad,
    HookHandle,
    ModuleValue,
    Tensor,
    TensorSeq,
    Value,
    graph_of,
    view_of,
)

# The methods of ``ctx`` that name tensors (their other methods only set flags).
_CTX_TENSOR_METHODS = ("save_for_backward", "mark_dirty", "mark_non_differentiable")


class ExtensionPointsMixin:
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
        if result is None:
            return self._unknown_call(node, [*args, *kwargs.values()])
        graph = frozenset().union(*(graph_of(a) for a in [*args, *kwargs.values()]),
                                  frozenset(s.id for s in ctx.saves))
        return self._function_outputs(result, info.name, inputs, ctx, rg, graph, node)

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
        tensors = [t for v in values for t in (v.items if isinstance(v, TensorSeq) else (v,)) if isinstance(t, Tensor)]
        rg = next((g for c, g in reversed(self.function_contexts) if c is ctx), Grad.NO)
        for tensor in tensors:
            if name == "mark_dirty":
                ctx.dirty.add(tensor.storage.id)
            elif name == "mark_non_differentiable":
                ctx.non_differentiable.add(tensor.storage.id)
            elif rg:
                role = "input" if tensor.storage.id in ctx.inputs else "output"  # or a tensor made in the forward
                ctx.saves.append(self._save(tensor, f"{ctx.function}.apply", role, node, rg == Grad.YES))
        return UNKNOWN

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
