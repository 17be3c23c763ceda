"""Gradients an optimizer applies twice: accumulation across steps with nothing clearing it.

A backward *adds* into each ``.grad`` it reaches; only ``zero_grad()`` (the optimizer's or a module's), or code that
writes the gradients, clears them.  So when a step of an optimizer applied gradients, nothing cleared them since,
and a backward added to them, the optimizer's next step applies the sum: the earlier gradient a second time (a
GAN's discriminator whose ``zero_grad()`` was left out also keeps what the generator's loss pushed into it).

Claimed only when every link is known, per parameter (its grad source):

- both steps are of one optimizer, not built with a learning rate of 0, whose parameter groups the code never rewrote, neither given a closure;
- a backward that adds into ``.grad`` (not ``torch.autograd.grad``, nor one given ``inputs=``) reached the parameter
  before the first step, with no clear of it in between: the first step applied a gradient;
- no clear of it between the two steps, and a backward reached it there;
- no backward before the second step raises (the run would end there);
- the code writes no gradient itself (``p.grad = None``, ``p.grad.zero_()``), and neither the optimizer nor an object
  holding the parameters was handed to code the analysis cannot see (which may clear them there).

A ``zero_grad()`` of an object the analysis does not know clears every gradient; a clear in a branch not known to
run still counts (it may run).  The line to change is the first of those backwards that runs in the function that
calls the second step, before it (``zero_grad()`` belongs before it), else the step itself, as the probe places it
(``probe/stale_grads.py``).
"""

from __future__ import annotations

import ast

from .events import Sink, StaleStep, StepRun, in_function_of
from .values import ModuleValue, OptimizerValue, ParamIterable, TensorSeq, Value


def stale_steps(interp) -> list[StaleStep]:
    """The steps of the run that apply gradients an earlier step of their optimizer applied."""
    if interp.grads_written or len(interp.step_runs) < 2:
        return []
    escaped = sources_of(interp, interp.escaped)
    clears = [(seq, None if owner is None else sources_of(interp, [owner])) for seq, owner, *_ in interp.grad_clears]
    backwards = [s for s in interp.sinks if s.kind == "backward" and s.accumulates]
    # A backward found to raise (a write to what its graph saved) ends the run there: no later step runs.
    raises = min((c.sink.seq for m in interp.mutations for c in m.conflicts or ()), default=None)
    found: list[StaleStep] = []
    reported: set[int] = set()
    for i, step in enumerate(interp.step_runs):
        first = next((r for r in reversed(interp.step_runs[:i]) if r.optimizer is step.optimizer), None)
        if raises is not None and raises < step.seq:
            break
        if first is None or _no_rate(step.optimizer) or first.closure or step.closure or step.optimizer.regrouped or id(step.node) in reported:
            continue
        params = (first.sources & step.sources) - escaped
        applied = frozenset().union(*(_kept(b.graph & params, clears, b.seq, first.seq)
                                      for b in backwards if b.seq < first.seq))
        stale = _kept(applied, clears, first.seq, step.seq)
        added = [b for b in backwards if first.seq < b.seq < step.seq and b.graph & stale
                 and _kept(b.graph & stale, clears, b.seq, step.seq)]
        if added:
            reported.add(id(step.node))
            found.append(StaleStep(_line_to_change(step, added), step, first, added))
    return found


def _no_rate(optimizer: OptimizerValue) -> bool:
    """Built with a learning rate of 0 written out: its steps change nothing, whatever the gradients hold."""
    ctor = optimizer.ctor
    if not isinstance(ctor, ast.Call):
        return False
    rate = next((k.value for k in ctor.keywords if k.arg == "lr"), ctor.args[1] if len(ctor.args) > 1 else None)
    return isinstance(rate, ast.Constant) and isinstance(rate.value, (int, float)) and rate.value == 0


def _kept(params: frozenset[int], clears: list, after: int, before: int) -> frozenset[int]:
    """``params`` whose gradients no clear between the two sequence numbers touches."""
    for seq, cleared in clears:
        if after < seq < before:
            if cleared is None:
                return frozenset()
            params = params - cleared
    return params


def _line_to_change(step: StepRun, added: list[Sink]):
    """The first backward that added, as a line of the function running the step, before the step's line."""
    depth = len(step.path)
    for b in added:
        if tuple(b.path[:depth]) != tuple(step.path) or len(b.path) < depth:
            continue
        node = in_function_of(b.path, b.node, list(step.path))
        if node.lineno < step.node.lineno:
            return node
    return step.node


def sources_of(interp, values: list[Value]) -> frozenset[int]:
    """The grad sources of the parameters the values hold: a module's (and those of the optimizers it holds), an
    optimizer's, a ``parameters()`` iterable's."""
    found: set[int] = set()
    stack, seen = list(values), set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, OptimizerValue):
            found |= value.held
            stack.extend(value.owners)
        elif isinstance(value, ParamIterable):
            stack.extend(value.owner if isinstance(value.owner, list) else [value.owner])
        elif isinstance(value, ModuleValue):
            found |= interp.parameter_sources(value)
            stack.extend(v for v in value.attrs.values() if isinstance(v, (OptimizerValue, ModuleValue)))
        elif isinstance(value, TensorSeq) and value.base is None:
            stack.extend(value.items)
    return frozenset(found)


def without_gradient(interp, param) -> bool:
    """A parameter whose ``.grad`` is certainly None at a step, which every torch optimizer skips: a ``zero_grad()``
    (``set_to_none``, the default) cleared it, and no backward reached it since.  Not when the code writes gradients
    itself, a clear may leave zeros, or the parameter reached code the analysis does not see."""
    sources = param.graph
    if interp.grads_written or interp.zero_filled or not sources:
        return False
    cleared = max((seq for seq, owner, *_ in interp.grad_clears
                   if owner is None or sources & sources_of(interp, [owner])), default=None)
    if cleared is None or sources & sources_of(interp, interp.escaped):
        return False
    return not any(s.kind == "backward" and s.seq > cleared and sources & s.graph for s in interp.sinks)
